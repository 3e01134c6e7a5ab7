// Stand-in for cub::BlockScan (CPU emulator): block-wide prefix sums/scans over the block's
// threads in linear order, through TempStorage in __shared__ memory (reusing TempStorage
// needs a __syncthreads first, as with cub).
#pragma once
#include "cub/block/block_reduce.cuh"
#include "cuda_runtime.h"

namespace cub {

template <class T, int BLOCK_DIM_X, int ALGORITHM = 0, int BLOCK_DIM_Y = 1, int BLOCK_DIM_Z = 1>
class BlockScan {
  static constexpr int kThreads = BLOCK_DIM_X * BLOCK_DIM_Y * BLOCK_DIM_Z;

 public:
  struct TempStorage {
    T items[kThreads];
  };
  explicit BlockScan(TempStorage& s) : s_(s) {}

  void ExclusiveSum(T input, T& output) {
    T agg;
    ExclusiveSum(input, output, agg);
  }
  void ExclusiveSum(T input, T& output, T& aggregate) {
    scan(input, output, aggregate, cub::Sum(), T(), true);
  }
  void InclusiveSum(T input, T& output) {
    T agg;
    scan(input, output, agg, cub::Sum(), T(), false);
  }
  void InclusiveSum(T input, T& output, T& aggregate) { scan(input, output, aggregate, cub::Sum(), T(), false); }
  template <class Op>
  void ExclusiveScan(T input, T& output, T initial, Op op) {
    T agg;
    scan(input, output, agg, op, initial, true);
  }
  template <class Op>
  void ExclusiveScan(T input, T& output, T initial, Op op, T& aggregate) {
    scan(input, output, aggregate, op, initial, true);
  }
  template <class Op>
  void InclusiveScan(T input, T& output, Op op) {
    T agg;
    scan(input, output, agg, op, T(), false);
  }

 private:
  template <class Op>
  void scan(T input, T& output, T& aggregate, Op op, T initial, bool exclusive) {
    auto& v = ::cuemu::view("cub::BlockScan");
    if ((int)(v.block_dim.x * v.block_dim.y * v.block_dim.z) != kThreads)
      ::cuemu::fail("cub::BlockScan: the block size differs from its BLOCK_DIM template arguments");
    const int t = (int)(v.thread_idx.x + v.block_dim.x * (v.thread_idx.y + v.block_dim.y * v.thread_idx.z));
    s_.items[t] = input;
    ::cuemu::syncthreads(__FILE__, __LINE__);
    // Like cub, no barrier on the way out: a kernel that reuses TempStorage without a
    // __syncthreads lets a fast thread overwrite items a slow one has not read yet.
    T before{}, total{};
    for (int i = 0; i < kThreads; ++i) {
      if (i < t) before = i == 0 ? s_.items[0] : op(before, s_.items[i]);
      total = i == 0 ? s_.items[0] : op(total, s_.items[i]);
    }
    if (exclusive)
      output = t == 0 ? initial : op(initial, before);
    else
      output = t == 0 ? input : op(before, input);
    aggregate = total;
  }
  TempStorage& s_;
};

}  // namespace cub
