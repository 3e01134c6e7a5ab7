// select_k, CUDA backend: exact radix select over ordered float keys, several blocks per row.
//
// Per row (all rows at once, grid = blocks_per_row x rows):
//  1. four histogram passes over 8-bit digits of the 32-bit key (common/dtype.h
//     select_key: -0.0 == +0.0, inverted for largest), MSD first; each pass counts only the
//     keys matching the digits fixed so far, and a one-thread-per-row kernel walks the
//     256 bins to fix the next digit. After four passes the k-th key T is known exactly,
//     with n_less = #keys < T and need = k - n_less ties at T to take (lowest index first).
//  2. every block counts its contiguous chunk's keys < T and == T; an exclusive scan over
//     the row's blocks gives each block its write offsets.
//  3. every block walks its chunk in index order, tile by tile, with a block-wide scan:
//     keys < T go to [0, n_less), the first `need` ties to [n_less, k). The k results are
//     thus in index order, so
//  4. (sorted) a stable cub::DeviceRadixSort by (row, key) yields (key, index) order.
// Deterministic (atomics only count), bounds-checked, no assumption on N vs tile sizes.
#include <cuda_runtime.h>

#include <cub/block/block_reduce.cuh>
#include <cub/block/block_scan.cuh>
#include <cub/device/device_radix_sort.cuh>

#include <algorithm>
#include <cstdint>
#include <stdexcept>
#include <string>

#include "common/cuda_check.h"
#include "common/dtype.h"
#include "common/scratch.h"
#include "select/select_cuda.h"

namespace rasfast {
namespace {

constexpr int kThreads = 256;
constexpr int kDigitBits = 8;
constexpr int kBins = 1 << kDigitBits;
constexpr int kPasses = 32 / kDigitBits;

struct RowState {
  uint32_t prefix;  // digits fixed so far (in place)
  uint32_t mask;    // which key bits are fixed
  int64_t want;     // 1-based rank of the k-th key among keys matching prefix
  int64_t n_less;   // keys strictly below the prefix range
};

template <DType D>
__device__ __forceinline__ uint32_t key_at(const typename Storage<D>::type* row, int64_t i,
                                           bool largest) {
  return select_key(Storage<D>::load(row, i), largest);
}

__device__ __forceinline__ void chunk_of(int64_t n, int blk, int nblk, int64_t* lo, int64_t* hi) {
  const int64_t chunk = (n + nblk - 1) / nblk;
  *lo = min(n, (int64_t)blk * chunk);
  *hi = min(n, *lo + chunk);
}

__global__ void init_state(RowState* st, int64_t rows, int64_t k) {
  const int64_t r = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (r < rows) st[r] = RowState{0u, 0u, k, 0};
}

// Histogram of digit `pass` over the keys matching the row's prefix.
template <DType D>
__global__ void digit_histogram(const typename Storage<D>::type* x, int64_t rows, int64_t n,
                                bool largest, int pass, const RowState* st,
                                unsigned long long* hist) {
  __shared__ unsigned int h[kBins];
  const int shift = 32 - kDigitBits * (pass + 1);
  for (int64_t r = blockIdx.y; r < rows; r += gridDim.y) {
    for (int b = threadIdx.x; b < kBins; b += blockDim.x) h[b] = 0;
    __syncthreads();
    const RowState s = st[r];
    const auto* row = x + r * n;
    int64_t lo, hi;
    chunk_of(n, blockIdx.x, gridDim.x, &lo, &hi);
    // Warp-aggregated counting: float keys cluster in few top-digit bins (sign and
    // exponent), so lanes of a warp often hit one bin; the lanes that share a bin elect
    // one leader that adds their number. The loop bounds are uniform per block so that
    // every lane of a warp reaches __match_any_sync together.
    for (int64_t t0 = lo; t0 < hi; t0 += blockDim.x) {
      const int64_t i = t0 + threadIdx.x;
      uint32_t bin = kBins;  // kBins: no bin (out of range or not matching the prefix)
      if (i < hi) {
        const uint32_t key = key_at<D>(row, i, largest);
        if ((key & s.mask) == s.prefix) bin = (key >> shift) & (kBins - 1);
      }
      const unsigned peers = __match_any_sync(0xffffffffu, bin);
      const int leader = __ffs(peers) - 1;
      if (bin < (uint32_t)kBins && (int)(threadIdx.x & 31) == leader)
        atomicAdd(&h[bin], (unsigned)__popc(peers));
    }
    __syncthreads();
    for (int b = threadIdx.x; b < kBins; b += blockDim.x)
      if (h[b]) atomicAdd(&hist[r * kBins + b], (unsigned long long)h[b]);
    __syncthreads();
  }
}

// Fixes the next digit of each row from its histogram, then clears the histogram.
__global__ void pick_digit(int64_t rows, int pass, RowState* st, unsigned long long* hist) {
  const int64_t r = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (r >= rows) return;
  const int shift = 32 - kDigitBits * (pass + 1);
  RowState s = st[r];
  unsigned long long* h = hist + r * kBins;
  int64_t cum = 0;
  int b = 0;
  for (; b < kBins - 1; ++b) {
    if (cum + (int64_t)h[b] >= s.want) break;
    cum += (int64_t)h[b];
  }
  s.n_less += cum;
  s.want -= cum;
  s.prefix |= (uint32_t)b << shift;
  s.mask |= (uint32_t)(kBins - 1) << shift;
  st[r] = s;
  for (int j = 0; j < kBins; ++j) h[j] = 0;
}

// Per block: keys < T and keys == T in its chunk.
template <DType D>
__global__ void count_chunks(const typename Storage<D>::type* x, int64_t rows, int64_t n,
                             bool largest, const RowState* st, long long* cnt_less,
                             long long* cnt_eq) {
  using Reduce = cub::BlockReduce<unsigned long long, kThreads>;
  __shared__ typename Reduce::TempStorage tmp;
  for (int64_t r = blockIdx.y; r < rows; r += gridDim.y) {
    const uint32_t T = st[r].prefix;
    const auto* row = x + r * n;
    int64_t lo, hi;
    chunk_of(n, blockIdx.x, gridDim.x, &lo, &hi);
    unsigned long long c = 0;  // low 32 bits: less, high 32 bits: equal (chunk < 2^32)
    for (int64_t i = lo + threadIdx.x; i < hi; i += blockDim.x) {
      const uint32_t key = key_at<D>(row, i, largest);
      c += key < T ? 1ull : (key == T ? (1ull << 32) : 0ull);
    }
    const unsigned long long tot = Reduce(tmp).Sum(c);
    if (threadIdx.x == 0) {
      cnt_less[r * gridDim.x + blockIdx.x] = (long long)(tot & 0xffffffffull);
      cnt_eq[r * gridDim.x + blockIdx.x] = (long long)(tot >> 32);
    }
    __syncthreads();
  }
}

// Exclusive scan of the per-block counts of each row (rows are few blocks long).
__global__ void scan_chunks(int64_t rows, int nblk, long long* cnt_less, long long* cnt_eq) {
  const int64_t r = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (r >= rows) return;
  long long a = 0, b = 0;
  for (int j = 0; j < nblk; ++j) {
    const long long l = cnt_less[r * nblk + j], e = cnt_eq[r * nblk + j];
    cnt_less[r * nblk + j] = a;
    cnt_eq[r * nblk + j] = b;
    a += l;
    b += e;
  }
}

// Writes the selected indices of each chunk in index order: keys < T at their rank among
// the row's keys < T, the first `need` ties after them. When sort_keys != nullptr, also
// writes the sort key (row-in-group << 32 | key) next to each index.
template <DType D>
__global__ void write_selected(const typename Storage<D>::type* x, int64_t rows, int64_t n,
                               int64_t k, bool largest, const RowState* st,
                               const long long* off_less, const long long* off_eq,
                               int64_t* out_idx, unsigned long long* sort_keys, int64_t group) {
  using Scan = cub::BlockScan<unsigned long long, kThreads>;
  __shared__ typename Scan::TempStorage tmp;
  for (int64_t r = blockIdx.y; r < rows; r += gridDim.y) {
    const RowState s = st[r];
    const uint32_t T = s.prefix;
    const int64_t need = s.want;  // ties to take
    const auto* row = x + r * n;
    int64_t lo, hi;
    chunk_of(n, blockIdx.x, gridDim.x, &lo, &hi);
    int64_t base_less = off_less[r * gridDim.x + blockIdx.x];
    int64_t base_eq = off_eq[r * gridDim.x + blockIdx.x];
    for (int64_t t0 = lo; t0 < hi; t0 += blockDim.x) {
      const int64_t i = t0 + threadIdx.x;
      uint32_t key = 0;
      unsigned long long f = 0;
      if (i < hi) {
        key = key_at<D>(row, i, largest);
        f = key < T ? 1ull : (key == T ? (1ull << 32) : 0ull);
      }
      unsigned long long pre, agg;
      Scan(tmp).ExclusiveSum(f, pre, agg);
      int64_t pos = -1;
      if (f == 1ull) {
        pos = base_less + (int64_t)(pre & 0xffffffffull);
      } else if (f != 0ull) {
        const int64_t rank = base_eq + (int64_t)(pre >> 32);
        if (rank < need) pos = s.n_less + rank;
      }
      if (pos >= 0 && pos < k) {
        out_idx[r * k + pos] = i;
        if (sort_keys) sort_keys[r * k + pos] = ((unsigned long long)(r % group) << 32) | key;
      }
      base_less += (int64_t)(agg & 0xffffffffull);
      base_eq += (int64_t)(agg >> 32);
      __syncthreads();  // tmp is reused by the next tile
    }
  }
}

int blocks_per_row(int64_t rows, int64_t n) {
  int dev = 0, sms = 0;
  RASFAST_CUDA_CHECK(cudaGetDevice(&dev));
  RASFAST_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
  const int64_t by_size = (n + 4095) / 4096;                       // >= 4096 keys per block
  const int64_t by_fill = std::max<int64_t>(1, (8LL * sms + rows - 1) / rows);
  return (int)std::max<int64_t>(1, std::min<int64_t>({by_size, by_fill, 1024}));
}

int bits_for(int64_t v) {  // bits needed to represent 0..v-1
  int b = 0;
  while (b < 62 && (int64_t(1) << b) < v) ++b;
  return b;
}

template <DType D>
void select_k_launch(const void* xv, int64_t rows, int64_t n, int64_t k, bool largest,
                     bool sorted, int64_t* out, cudaStream_t stream) {
  using T = typename Storage<D>::type;
  const T* x = static_cast<const T*>(xv);
  const int nblk = blocks_per_row(rows, n);
  const int grid_rows = (int)std::min<int64_t>(rows, 65535);
  const dim3 grid(nblk, grid_rows);
  const int row_blocks = (int)((rows + 255) / 256);

  Scratch st_buf(sizeof(RowState) * rows, stream);
  Scratch hist_buf(sizeof(unsigned long long) * kBins * rows, stream);
  Scratch cnt_buf(sizeof(long long) * 2 * nblk * rows, stream);
  RowState* st = st_buf.as<RowState>();
  unsigned long long* hist = hist_buf.as<unsigned long long>();
  long long* cnt = cnt_buf.as<long long>();
  RASFAST_CUDA_CHECK(cudaMemsetAsync(hist, 0, sizeof(unsigned long long) * kBins * rows, stream));
  init_state<<<row_blocks, 256, 0, stream>>>(st, rows, k);
  RASFAST_CUDA_CHECK(cudaGetLastError());
  for (int pass = 0; pass < kPasses; ++pass) {
    digit_histogram<D><<<grid, kThreads, 0, stream>>>(x, rows, n, largest, pass, st, hist);
    RASFAST_CUDA_CHECK(cudaGetLastError());
    pick_digit<<<row_blocks, 256, 0, stream>>>(rows, pass, st, hist);
    RASFAST_CUDA_CHECK(cudaGetLastError());
  }
  long long* cnt_less = cnt;
  long long* cnt_eq = cnt + (int64_t)nblk * rows;
  count_chunks<D><<<grid, kThreads, 0, stream>>>(x, rows, n, largest, st, cnt_less, cnt_eq);
  RASFAST_CUDA_CHECK(cudaGetLastError());
  scan_chunks<<<row_blocks, 256, 0, stream>>>(rows, nblk, cnt_less, cnt_eq);
  RASFAST_CUDA_CHECK(cudaGetLastError());

  if (!sorted) {
    write_selected<D><<<grid, kThreads, 0, stream>>>(x, rows, n, k, largest, st, cnt_less, cnt_eq,
                                                     out, nullptr, 1);
    RASFAST_CUDA_CHECK(cudaGetLastError());
  } else {
    // Rows are sorted in groups of whole rows whose sort key (row-in-group, key) fits in
    // 64 bits and whose item count fits comfortably in one device-wide sort.
    const int64_t group = std::max<int64_t>(1, std::min<int64_t>(rows, (int64_t(1) << 30) / k));
    const int64_t items = rows * k;
    Scratch keys_buf(sizeof(unsigned long long) * items, stream);
    Scratch keys_out_buf(sizeof(unsigned long long) * items, stream);
    Scratch idx_buf(sizeof(int64_t) * items, stream);
    unsigned long long* keys = keys_buf.as<unsigned long long>();
    unsigned long long* keys_out = keys_out_buf.as<unsigned long long>();
    int64_t* idx = idx_buf.as<int64_t>();
    write_selected<D><<<grid, kThreads, 0, stream>>>(x, rows, n, k, largest, st, cnt_less, cnt_eq,
                                                     idx, keys, group);
    RASFAST_CUDA_CHECK(cudaGetLastError());
    const int end_bit = 32 + bits_for(group);
    size_t temp_bytes = 0;
    RASFAST_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(nullptr, temp_bytes, keys, keys_out, idx, out,
                                                       (int64_t)(group * k), 0, end_bit, stream));
    Scratch temp_buf(std::max<size_t>(temp_bytes, 1), stream);
    void* temp = temp_buf.p;
    for (int64_t r0 = 0; r0 < rows; r0 += group) {
      const int64_t g = std::min(group, rows - r0);
      size_t bytes = temp_bytes;
      // Stable: within one (row, key) the indices keep their (ascending) input order.
      RASFAST_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(temp, bytes, keys + r0 * k, keys_out + r0 * k,
                                                         idx + r0 * k, out + r0 * k, (int64_t)(g * k),
                                                         0, end_bit, stream));
    }
  }
}

}  // namespace

void select_k_cuda_launch(const void* x, int dtype_code, int64_t rows, int64_t n, int64_t k,
                          bool largest, bool sorted, int64_t* out, cudaStream_t stream) {
  if (rows == 0) return;
  const DType dt = static_cast<DType>(dtype_code);
  RASFAST_DISPATCH_DTYPE(dt, D, { select_k_launch<D>(x, rows, n, k, largest, sorted, out, stream); })
}

}  // namespace rasfast
