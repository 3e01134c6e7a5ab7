// Theme scoping + scoped dense retrieval, CPU backend (DESIGN.md section 3).
//
//   theme_scope          pass 1 keys -> per query radix select_row (sorted K ids)
//   theme_scoped_dense   inner products over given scopes -> per-query top-k
//   theme_scoped_search  pass 1 keys -> per query K-th key (sample-bracketed one-pass cut,
//                        radix select fallback; no sort, no scope list) -> pass 2 streaming
//                        the corpus rows in order, each in-scope row read once (prefetched)
//                        and dotted with the queries whose cut holds it -> per-query top-k
//
// Queries arrive as float32; corpora in their storage dtype (converted on the fly).
#include <omp.h>

#include <cmath>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "common/buffers.h"
#include "common/entry_points.h"
#include "common/parallel.h"
#include "common/registry.h"
#include "theme/theme_scan.h"
#include "theme/theme_topk.h"

namespace rasfast {
namespace theme {
namespace {

const char* kPpdNonFinite =
    "corpus_ppd: contains NaN or infinite values (a theme distance is not finite)";
const char* kEmbNonFinite =
    "corpus_emb: contains NaN or infinite values in a scoped row (a dense score is not finite)";

// Score of one in-scope row: the dense inner product, fused with the theme term.
inline float fused_score(float dense, uint32_t key, bool ip, float w) {
  if (w == 0.f) return dense;
  const float theme = ip ? key_to_float(~key) : -key_to_float(key);
  return (1.f - w) * dense + w * theme;
}

// Per-thread, per-query running top-k, merged at the end.
struct TopKTable {
  std::vector<std::vector<TopK>> per_thread;
  TopKTable(int threads, int64_t B, int64_t cap)
      : per_thread((size_t)threads, std::vector<TopK>((size_t)B, TopK(cap))) {}
  TopK* mine() { return per_thread[(size_t)omp_get_thread_num()].data(); }
  void write(int64_t b_offset, int64_t nb, int64_t k, int64_t* ids, float* scores) const {
#pragma omp parallel for schedule(dynamic, 1)
    for (int64_t b = 0; b < nb; ++b) {
      std::vector<const TopK*> parts;
      for (const auto& t : per_thread) parts.push_back(&t[(size_t)b]);
      merge_topk(parts, k, ids + (b_offset + b) * k, scores + (b_offset + b) * k);
    }
  }
};

template <DType DE>
const float* row_as_float(const typename Storage<DE>::type* emb, int64_t i, int64_t D, float* buf) {
  if constexpr (DE == DType::F32) {
    (void)buf;
    return emb + i * D;
  } else {
    load_row<DE>(emb + i * D, buf, D);
    return buf;
  }
}

// ------------------------------------------------------------------------ theme_scope
template <DType D>
void scope_typed(const float* q, int64_t B, int64_t T, const void* corpus, int64_t N, int64_t K,
                 bool ip, int64_t* out) {
  using S = typename Storage<D>::type;
  const int threads = omp_get_max_threads();
  const int64_t qb = query_block(B, N);
  KeyMatrix keys(qb * N);
  for (int64_t b0 = 0; b0 < B; b0 += qb) {
    const int64_t nb = std::min(qb, B - b0);
    PaddedQueries qs = pad_queries(q + b0 * T, nb, T);
    if (!scan_keys<D>(qs, static_cast<const S*>(corpus), N, ip, keys.get()))
      throw py::value_error(kPpdNonFinite);
    auto run = [&](int64_t b, int inner) {
      const uint32_t* kb = keys.get() + b * N;
      select_row(N, K, [kb](int64_t i) { return kb[i]; }, true, out + (b0 + b) * K, inner);
    };
    if (nb >= threads) {
#pragma omp parallel for schedule(dynamic, 1)
      for (int64_t b = 0; b < nb; ++b) run(b, 1);
    } else {
      for (int64_t b = 0; b < nb; ++b) run(b, threads);
    }
  }
}

void theme_scope_cpu(py::array q, py::array corpus, int dtype_code, int64_t K, bool ip,
                     py::array out) {
  const DType dt = dtype_from_code(dtype_code);
  check_buffer(q, "q_ppd", 2, 4);
  const int64_t B = q.shape(0), T = q.shape(1);
  check_buffer(corpus, "corpus_ppd", 2, dtype_itemsize(dt), {-1, T});
  const int64_t N = corpus.shape(0);
  ThreadScope threads_scope(B * N * T);  // serial below the grain (common/parallel.h)
  require(N >= 1 && T >= 1, "corpus_ppd: needs N >= 1 and T >= 1");
  require(K >= 1 && K <= N, "K must be in [1, N]");
  check_buffer(out, "out", 2, 8, {B, K});
  const float* qp = const_ptr<float>(q);
  const void* cp = corpus.data();
  int64_t* op = mutable_ptr<int64_t>(out);
  py::gil_scoped_release nogil;
  RASFAST_DISPATCH_DTYPE(dt, D, { scope_typed<D>(qp, B, T, cp, N, K, ip, op); })
}

// Pass 1 alone (keys[b, i]), for tests of the scan and for measuring its bandwidth.
void theme_scan_keys_cpu(py::array q, py::array corpus, int dtype_code, bool ip, py::array out) {
  const DType dt = dtype_from_code(dtype_code);
  check_buffer(q, "q_ppd", 2, 4);
  const int64_t B = q.shape(0), T = q.shape(1);
  check_buffer(corpus, "corpus_ppd", 2, dtype_itemsize(dt), {-1, T});
  const int64_t N = corpus.shape(0);
  ThreadScope threads_scope(B * N * T);  // serial below the grain (common/parallel.h)
  require(T >= 1, "corpus_ppd: needs T >= 1");
  check_buffer(out, "out", 2, 4, {B, N});
  const float* qp = const_ptr<float>(q);
  const void* cp = corpus.data();
  uint32_t* op = mutable_ptr<uint32_t>(out);
  py::gil_scoped_release nogil;
  PaddedQueries qs = pad_queries(qp, B, T);
  bool ok = true;
  RASFAST_DISPATCH_DTYPE(dt, D, {
    ok = scan_keys<D>(qs, static_cast<const typename Storage<D>::type*>(cp), N, ip, op);
  })
  if (!ok) throw py::value_error(kPpdNonFinite);
}

// ------------------------------------------------------------------------ scoped dense
template <DType DE>
void dense_typed(const float* q, int64_t B, int64_t D, const void* emb_v, int64_t N,
                 const int64_t* scope, int64_t Ks, int64_t k, int64_t* ids, float* scores) {
  using S = typename Storage<DE>::type;
  const S* emb = static_cast<const S*>(emb_v);
  const Simd& s = simd();
  const int threads = omp_get_max_threads();
  TopKTable table(threads, B, std::min(k, Ks));
  constexpr int64_t kChunk = 4096;
  const int64_t nchunks = (Ks + kChunk - 1) / kChunk;
  int bad = 0;
#pragma omp parallel reduction(| : bad)
  {
    TopK* heaps = table.mine();
    FloatBuf buf = aligned_floats(D);
#pragma omp for schedule(dynamic, 1)
    for (int64_t w = 0; w < B * nchunks; ++w) {
      const int64_t b = w / nchunks, j0 = (w % nchunks) * kChunk;
      const int64_t j1 = std::min(Ks, j0 + kChunk);
      const int64_t* sb = scope + b * Ks;
      for (int64_t j = j0; j < j1; ++j) {
        const int64_t i = sb[j];
        if (i < 0 || i >= N) continue;  // -1 padding (range is validated in Python)
        const float dense = s.dot(q + b * D, row_as_float<DE>(emb, i, D, buf.get()), D);
        bad |= !std::isfinite(dense);
        heaps[b].push(dense, i);
      }
    }
  }
  if (bad) throw py::value_error(kEmbNonFinite);
  table.write(0, B, k, ids, scores);
}

void theme_scoped_dense_cpu(py::array q, py::array emb, int dtype_code, py::array scope, int64_t k,
                            py::array out_ids, py::array out_scores) {
  const DType dt = dtype_from_code(dtype_code);
  check_buffer(q, "q_emb", 2, 4);
  const int64_t B = q.shape(0), D = q.shape(1);
  check_buffer(emb, "corpus_emb", 2, dtype_itemsize(dt), {-1, D});
  const int64_t N = emb.shape(0);
  check_buffer(scope, "scope_ids", 2, 8, {B, -1});
  const int64_t Ks = scope.shape(1);
  ThreadScope threads_scope(B * Ks * D);  // serial below the grain (common/parallel.h)
  require(k >= 1, "k must be >= 1");
  check_buffer(out_ids, "out_ids", 2, 8, {B, k});
  check_buffer(out_scores, "out_scores", 2, 4, {B, k});
  const float* qp = const_ptr<float>(q);
  const void* ep = emb.data();
  const int64_t* sp = const_ptr<int64_t>(scope);
  int64_t* ip = mutable_ptr<int64_t>(out_ids);
  float* spo = mutable_ptr<float>(out_scores);
  py::gil_scoped_release nogil;
  RASFAST_DISPATCH_DTYPE(dt, DE, { dense_typed<DE>(qp, B, D, ep, N, sp, Ks, k, ip, spo); })
}

// ------------------------------------------------------------------------ fused search
struct FusedArgs {
  const float* q_ppd;
  const void* ppd;
  const float* q_emb;
  const void* emb;
  int64_t B, N, T, D, K, k;
  float w;
  bool ip;
  int64_t* ids;
  float* scores;
};

// Pass 2, row-ordered: threads take runs of consecutive row tiles. For a tile it
// first gets, per row, the bitmask of the queries whose cut contains the row (from the
// keys, or precomputed by the sampled pass 1) and prefetches the dense rows that some
// query needs; the tile before it is scored meanwhile, so each in-scope row is read from
// memory once, ahead of its use, and dotted with exactly the queries of its mask.
// At most kMaxMaskQueries queries per key block (see fused_typed).
constexpr int64_t kMaxMaskQueries = 64;
constexpr int64_t kMaskTile = 64;

struct MaskTile {
  uint64_t mask[kMaskTile];
  int32_t rows[kMaskTile];  // tile-relative rows with a non-zero mask, ascending
  int n = 0;
};

// Query masks of rows [i0, i0 + nr) from the key matrix and the cuts.
struct MasksFromKeys {
  const uint32_t* keys;
  int64_t N, nb;
  const std::vector<ScopeCut>& cuts;
  void operator()(int64_t i0, int64_t nr, uint64_t* mask) const {
    for (int64_t r = 0; r < nr; ++r) mask[r] = 0;
    for (int64_t b = 0; b < nb; ++b) {
      const ScopeCut& c = cuts[(size_t)b];
      const uint64_t bit = uint64_t(1) << b;
      if (c.all) {
        for (int64_t r = 0; r < nr; ++r) mask[r] |= bit;
        continue;
      }
      const uint32_t* kb = keys + b * N + i0;
      const uint32_t th = c.key;
      // Rows i <= last_eq of this tile: r <= last_eq - i0 (may be negative or past the tile).
      const int64_t eq_end = c.last_eq - i0;
#pragma omp simd
      for (int64_t r = 0; r < nr; ++r) {
        const bool in = kb[r] < th || (kb[r] == th && r <= eq_end);
        mask[r] |= in ? bit : 0;
      }
    }
  }
};

// Query masks precomputed per row (sampled path).
struct MasksFromRows {
  const uint64_t* rowmask;
  void operator()(int64_t i0, int64_t nr, uint64_t* mask) const {
    std::memcpy(mask, rowmask + i0, (size_t)nr * sizeof(uint64_t));
  }
};

template <class S, class Masks>
void build_mask_tile(const Masks& masks, int64_t N, int64_t i0, const S* emb, int64_t D,
                     MaskTile& t) {
  const int64_t nr = std::min(kMaskTile, N - i0);
  masks(i0, nr, t.mask);
  t.n = 0;
  const size_t row_bytes = (size_t)D * sizeof(S);
  for (int64_t r = 0; r < nr; ++r) {
    if (!t.mask[r]) continue;
    t.rows[t.n++] = (int32_t)r;
    const char* p = reinterpret_cast<const char*>(emb + (i0 + r) * D);
    for (size_t off = 0; off < row_bytes; off += 64) __builtin_prefetch(p + off, 0, 0);
  }
}

// keys (the [nb, N] key matrix) is only read when the theme term is on (w > 0).
template <DType DE, class Masks>
bool score_in_scope(const FusedArgs& a, int64_t b0, const uint32_t* keys, const Masks& masks,
                    TopKTable& table) {
  using S = typename Storage<DE>::type;
  const S* emb = static_cast<const S*>(a.emb);
  const Simd& s = simd();
  const int64_t N = a.N, D = a.D;
  const int64_t ntiles = (N + kMaskTile - 1) / kMaskTile;
  constexpr int64_t kRunTiles = 64;
  const int64_t nruns = (ntiles + kRunTiles - 1) / kRunTiles;
  int bad = 0;
#pragma omp parallel reduction(| : bad)
  {
    TopK* heaps = table.mine();
    FloatBuf buf = aligned_floats(D);
    MaskTile tiles[2];
    // Dynamic over runs of kRunTiles tiles: in-scope rows may cluster (topic-sorted corpora);
    // inside a run the tiles are pipelined. The top-k sets do not depend on push order.
#pragma omp for schedule(dynamic, 1)
    for (int64_t run = 0; run < nruns; ++run) {
      const int64_t t0 = run * kRunTiles, t1 = std::min(ntiles, t0 + kRunTiles);
      build_mask_tile<S>(masks, N, t0 * kMaskTile, emb, D, tiles[0]);
      for (int64_t t = t0; t < t1; ++t) {
        MaskTile& cur = tiles[(t - t0) & 1];
        if (t + 1 < t1)
          build_mask_tile<S>(masks, N, (t + 1) * kMaskTile, emb, D, tiles[(t + 1 - t0) & 1]);
        const int64_t i0 = t * kMaskTile;
        for (int j = 0; j < cur.n; ++j) {
          const int64_t i = i0 + cur.rows[j];
          const float* row = row_as_float<DE>(emb, i, D, buf.get());
          for (uint64_t m = cur.mask[cur.rows[j]]; m; m &= m - 1) {
            const int64_t b = __builtin_ctzll(m);
            const float dense = s.dot(a.q_emb + (b0 + b) * D, row, D);
            bad |= !std::isfinite(dense);
            const uint32_t key = a.w == 0.f ? 0u : keys[b * N + i];
            heaps[b].push(fused_score(dense, key, a.ip, a.w), i);
          }
        }
      }
    }
  }
  return bad == 0;
}

// Sampled pass 1 (N >= kMinSampledN, K < N): keys of a strided sample of rows first give
// each query a bracket of its K-th key; the full scan then writes, per row, the mask of
// queries whose key is below their bracket, and collects the (key, id) inside it per
// thread (threads own contiguous, ordered tile ranges, so concatenation is id order). The
// cut comes from these candidates, whose in-scope ones are added to the row masks: no
// pass over a key matrix at all (it is written only when w > 0, for the theme term).
// Returns false (nothing written to `table`) when some bracket misses the K-th key.
template <DType DP, DType DE>
bool fused_sampled(const FusedArgs& a, int64_t b0, int64_t nb, const PaddedQueries& qs,
                   uint32_t* keys, TopKTable& table) {
  using SP = typename Storage<DP>::type;
  const SP* ppd = static_cast<const SP*>(a.ppd);
  const int64_t N = a.N, K = a.K;
  // Sample keys -> brackets.
  std::vector<std::vector<uint32_t>> samp((size_t)nb, std::vector<uint32_t>((size_t)kSample));
  if (!scan_tiles<DP>(qs, ppd, kSample, a.ip, [&](int64_t i0, int64_t nr, const uint32_t* tk) {
        for (int64_t b = 0; b < nb; ++b)
          std::memcpy(samp[(size_t)b].data() + i0, tk + b * kTileRows, (size_t)nr * sizeof(uint32_t));
      }, sample_step(N)))
    throw py::value_error(kPpdNonFinite);
  std::vector<Bracket> br((size_t)nb);
  for (int64_t b = 0; b < nb; ++b) br[(size_t)b] = bracket_from_sample(samp[(size_t)b], N, K);
  // Full scan -> row masks (below bracket) + per-thread candidates.
  const int threads = omp_get_max_threads();
  std::vector<std::vector<Candidates>> cand((size_t)threads, std::vector<Candidates>((size_t)nb));
  KeyMatrix mask_store(2 * N);  // N uint64 row masks (every entry written by the scan)
  uint64_t* rowmask = reinterpret_cast<uint64_t*>(mask_store.get());
  auto sink = [&](int64_t i0, int64_t nr, const uint32_t* tk) {
    std::vector<Candidates>& mine = cand[(size_t)omp_get_thread_num()];
    uint64_t m[kTileRows] = {};
    for (int64_t b = 0; b < nb; ++b) {
      const uint32_t* kb = tk + b * kTileRows;
      if (keys) std::memcpy(keys + b * N + i0, kb, (size_t)nr * sizeof(uint32_t));
      const Bracket& w = br[(size_t)b];
      const uint64_t bit = uint64_t(1) << b;
      int64_t below = 0, inside = 0;
#pragma omp simd reduction(+ : below, inside)
      for (int64_t r = 0; r < nr; ++r) {
        const bool lt = kb[r] < w.lo;
        m[r] |= lt ? bit : 0;
        below += lt;
        inside += w.inside(kb[r]);
      }
      Candidates& cd = mine[(size_t)b];
      cd.n_below += below;
      if (inside) {
        for (int64_t r = 0; r < nr; ++r)
          if (w.inside(kb[r])) { cd.key.push_back(kb[r]); cd.id.push_back(i0 + r); }
      }
    }
    std::memcpy(rowmask + i0, m, (size_t)nr * sizeof(uint64_t));
  };
  if (!scan_tiles<DP>(qs, ppd, N, a.ip, sink)) throw py::value_error(kPpdNonFinite);
  // Cuts from the candidates; add the in-scope candidates to the row masks.
  int missed = 0;
#pragma omp parallel for schedule(dynamic, 1) reduction(| : missed)
  for (int64_t b = 0; b < nb; ++b) {
    Candidates all;
    for (int t = 0; t < threads; ++t) {
      const Candidates& c = cand[(size_t)t][(size_t)b];
      all.n_below += c.n_below;
      all.key.insert(all.key.end(), c.key.begin(), c.key.end());
      all.id.insert(all.id.end(), c.id.begin(), c.id.end());
    }
    ScopeCut cut;
    if (!cut_from_candidates(all, K, &cut)) { missed = 1; continue; }
    const uint64_t bit = uint64_t(1) << b;
    for (size_t j = 0; j < all.key.size(); ++j)
      if (cut.contains(all.key[j], all.id[j]))
        __atomic_fetch_or(rowmask + all.id[j], bit, __ATOMIC_RELAXED);
  }
  if (missed) return false;
  if (!score_in_scope<DE>(a, b0, keys, MasksFromRows{rowmask}, table))
    throw py::value_error(kEmbNonFinite);
  return true;
}

template <DType DP, DType DE>
void fused_typed(const FusedArgs& a) {
  using SP = typename Storage<DP>::type;
  const int threads = omp_get_max_threads();
  const bool sampled = a.N >= kMinSampledN && a.K < a.N;
  // The sampled path with w == 0 keeps no key matrix, so one scan of the theme matrix can
  // serve up to 64 queries (a bracket miss then allocates [qb, N] keys for the radix path).
  const int64_t qb = std::min(sampled && a.w == 0.f ? a.B : query_block(a.B, a.N), kMaxMaskQueries);
  // The key matrix: always for the radix path; for the sampled one only for the theme term.
  std::unique_ptr<KeyMatrix> keys;
  const auto need_keys = [&]() {
    if (!keys) keys = std::make_unique<KeyMatrix>(qb * a.N);
    return keys->get();
  };
  for (int64_t b0 = 0; b0 < a.B; b0 += qb) {
    const int64_t nb = std::min(qb, a.B - b0);
    PaddedQueries qs = pad_queries(a.q_ppd + b0 * a.T, nb, a.T);
    TopKTable table(threads, nb, std::min(a.k, a.K));
    bool done = false;
    if (sampled)
      done = fused_sampled<DP, DE>(a, b0, nb, qs, a.w == 0.f ? nullptr : need_keys(), table);
    if (!done) {  // radix path (small N, K >= N, or a sample bracket missed)
      uint32_t* kp = need_keys();
      if (!scan_keys<DP>(qs, static_cast<const SP*>(a.ppd), a.N, a.ip, kp))
        throw py::value_error(kPpdNonFinite);
      const std::vector<ScopeCut> cuts = scope_cuts(kp, nb, a.N, a.K);
      if (!score_in_scope<DE>(a, b0, kp, MasksFromKeys{kp, a.N, nb, cuts}, table))
        throw py::value_error(kEmbNonFinite);
    }
    table.write(b0, nb, a.k, a.ids, a.scores);
  }
}

void theme_scoped_search_cpu(py::array q_ppd, py::array ppd, int ppd_code, py::array q_emb,
                             py::array emb, int emb_code, int64_t K, int64_t k, double w, bool ip,
                             py::array out_ids, py::array out_scores) {
  const DType dp = dtype_from_code(ppd_code), de = dtype_from_code(emb_code);
  check_buffer(q_ppd, "q_ppd", 2, 4);
  const int64_t B = q_ppd.shape(0), T = q_ppd.shape(1);
  check_buffer(ppd, "corpus_ppd", 2, dtype_itemsize(dp), {-1, T});
  const int64_t N = ppd.shape(0);
  check_buffer(q_emb, "q_emb", 2, 4, {B, -1});
  const int64_t D = q_emb.shape(1);
  ThreadScope threads_scope(B * N * (T + D));  // serial below the grain (common/parallel.h)
  check_buffer(emb, "corpus_emb", 2, dtype_itemsize(de), {N, D});
  require(N >= 1 && T >= 1 && D >= 1, "corpus: needs N, T, D >= 1");
  require(K >= 1 && K <= N, "K must be in [1, N]");
  require(k >= 1, "k must be >= 1");
  require(w >= 0.0 && w <= 1.0, "theme_weight must be in [0, 1]");
  check_buffer(out_ids, "out_ids", 2, 8, {B, k});
  check_buffer(out_scores, "out_scores", 2, 4, {B, k});
  FusedArgs a{const_ptr<float>(q_ppd), ppd.data(), const_ptr<float>(q_emb), emb.data(),
              B, N, T, D, K, k, (float)w, ip,
              mutable_ptr<int64_t>(out_ids), mutable_ptr<float>(out_scores)};
  py::gil_scoped_release nogil;
  RASFAST_DISPATCH_DTYPE(dp, DP, { RASFAST_DISPATCH_DTYPE(de, DE, { fused_typed<DP, DE>(a); }) })
}

// ------------------------------------------------------------------------ blocks
// The search split at its seams, for callers that hold the corpus as several row blocks
// (a streamed file, the shards of a distributed index): per block, pass 1 keys come from
// theme_scan_keys; the exact K-th key over all blocks is found from summed 16-bit digit
// histograms (theme_key_histogram, two rounds) and the tie counts per block
// (theme_tie_cut); then theme_score_cut runs the fused kernel's pass 2 on the block with
// that cut. Same keys, same cut, same scoring code: bit-identical to theme_scoped_search.
constexpr int64_t kDigits = 65536;

void theme_key_histogram_cpu(py::array keys, py::array prefix, int round, py::array hist) {
  check_buffer(keys, "keys", 2, 4);
  const int64_t B = keys.shape(0), n = keys.shape(1);
  ThreadScope threads_scope(B * n);  // serial below the grain (common/parallel.h)
  check_buffer(prefix, "prefix", 1, 4, {B});
  check_buffer(hist, "hist", 2, 8, {B, kDigits});
  require(round == 0 || round == 1, "round must be 0 or 1");
  const uint32_t* kp = const_ptr<uint32_t>(keys);
  const uint32_t* pp = const_ptr<uint32_t>(prefix);
  int64_t* hp = mutable_ptr<int64_t>(hist);
  py::gil_scoped_release nogil;
#pragma omp parallel for schedule(dynamic, 1)
  for (int64_t b = 0; b < B; ++b) {
    const uint32_t* kb = kp + b * n;
    int64_t* hb = hp + b * kDigits;
    if (round == 0) {
      for (int64_t i = 0; i < n; ++i) ++hb[kb[i] >> 16];
    } else {
      const uint32_t want = pp[b];
      for (int64_t i = 0; i < n; ++i)
        if ((kb[i] >> 16) == want) ++hb[kb[i] & 0xFFFFu];
    }
  }
}

void theme_tie_cut_cpu(py::array keys, py::array thr, py::array allowed, py::array count,
                       py::array last_eq) {
  check_buffer(keys, "keys", 2, 4);
  const int64_t B = keys.shape(0), n = keys.shape(1);
  ThreadScope threads_scope(B * n);  // serial below the grain (common/parallel.h)
  check_buffer(thr, "thr", 1, 4, {B});
  check_buffer(allowed, "allowed", 1, 8, {B});
  check_buffer(count, "count", 1, 8, {B});
  check_buffer(last_eq, "last_eq", 1, 8, {B});
  const uint32_t* kp = const_ptr<uint32_t>(keys);
  const uint32_t* tp = const_ptr<uint32_t>(thr);
  const int64_t* ap = const_ptr<int64_t>(allowed);
  int64_t* cp = mutable_ptr<int64_t>(count);
  int64_t* lp = mutable_ptr<int64_t>(last_eq);
  py::gil_scoped_release nogil;
#pragma omp parallel for schedule(dynamic, 1)
  for (int64_t b = 0; b < B; ++b) {
    const uint32_t* kb = kp + b * n;
    const uint32_t t = tp[b];
    int64_t seen = 0, last = -1;
    for (int64_t i = 0; i < n; ++i) {
      if (kb[i] == t && ++seen == ap[b]) last = i;
    }
    cp[b] = seen;
    lp[b] = last;
  }
}

void theme_score_cut_cpu(py::array q_emb, py::array emb, int emb_code, py::array keys,
                         py::array cut_key, py::array cut_last_eq, py::array cut_all, int64_t k,
                         double w, bool ip, py::array out_ids, py::array out_scores) {
  const DType de = dtype_from_code(emb_code);
  check_buffer(q_emb, "q_emb", 2, 4);
  const int64_t B = q_emb.shape(0), D = q_emb.shape(1);
  check_buffer(emb, "corpus_emb", 2, dtype_itemsize(de), {-1, D});
  const int64_t N = emb.shape(0);
  ThreadScope threads_scope(B * N * D);  // serial below the grain (common/parallel.h)
  check_buffer(keys, "keys", 2, 4, {B, N});
  check_buffer(cut_key, "cut_key", 1, 4, {B});
  check_buffer(cut_last_eq, "cut_last_eq", 1, 8, {B});
  check_buffer(cut_all, "cut_all", 1, 1, {B});
  require(N >= 1 && D >= 1, "corpus_emb: needs N, D >= 1");
  require(k >= 1, "k must be >= 1");
  require(w >= 0.0 && w <= 1.0, "theme_weight must be in [0, 1]");
  check_buffer(out_ids, "out_ids", 2, 8, {B, k});
  check_buffer(out_scores, "out_scores", 2, 4, {B, k});
  const uint32_t* kp = const_ptr<uint32_t>(keys);
  std::vector<ScopeCut> cuts((size_t)B);
  for (int64_t b = 0; b < B; ++b) {
    cuts[(size_t)b].key = const_ptr<uint32_t>(cut_key)[b];
    cuts[(size_t)b].last_eq = const_ptr<int64_t>(cut_last_eq)[b];
    cuts[(size_t)b].all = const_ptr<uint8_t>(cut_all)[b] != 0;
  }
  FusedArgs a{nullptr, nullptr, const_ptr<float>(q_emb), emb.data(), B, N, 0, D, N, k, (float)w,
              ip, mutable_ptr<int64_t>(out_ids), mutable_ptr<float>(out_scores)};
  py::gil_scoped_release nogil;
  const int threads = omp_get_max_threads();
  for (int64_t b0 = 0; b0 < B; b0 += kMaxMaskQueries) {
    const int64_t nb = std::min(kMaxMaskQueries, B - b0);
    const std::vector<ScopeCut> part(cuts.begin() + b0, cuts.begin() + b0 + nb);
    TopKTable table(threads, nb, std::min(k, N));
    const uint32_t* kb = kp + b0 * N;
    bool ok = true;
    RASFAST_DISPATCH_DTYPE(de, DE, {
      ok = score_in_scope<DE>(a, b0, kb, MasksFromKeys{kb, N, nb, part}, table);
    })
    if (!ok) throw py::value_error(kEmbNonFinite);
    table.write(b0, nb, k, a.ids, a.scores);
  }
}

void bind(py::module_& m) {
  m.def("theme_scope", &theme_scope_cpu, py::arg("q_ppd"), py::arg("corpus_ppd"),
        py::arg("dtype_code"), py::arg("K"), py::arg("ip"), py::arg("out"),
        "Sorted ids of the K nearest corpus rows per query (float32 queries) into out[B,K].");
  m.def("theme_scoped_dense", &theme_scoped_dense_cpu, py::arg("q_emb"), py::arg("corpus_emb"),
        py::arg("dtype_code"), py::arg("scope_ids"), py::arg("k"), py::arg("out_ids"),
        py::arg("out_scores"), "Top-k inner products inside given scopes (-1 = padding).");
  m.def("theme_scoped_search", &theme_scoped_search_cpu, py::arg("q_ppd"), py::arg("corpus_ppd"),
        py::arg("ppd_dtype_code"), py::arg("q_emb"), py::arg("corpus_emb"),
        py::arg("emb_dtype_code"), py::arg("K"), py::arg("k"), py::arg("theme_weight"),
        py::arg("ip"), py::arg("out_ids"), py::arg("out_scores"),
        "Fused theme scoping (radix-select threshold, no sort) + dense top-k.");
  m.def("theme_scan_keys", &theme_scan_keys_cpu, py::arg("q_ppd"), py::arg("corpus_ppd"),
        py::arg("dtype_code"), py::arg("ip"), py::arg("out"),
        "Pass 1 only: ordered uint32 keys [B, N] of squared L2 (or inverted ip keys).");
  m.def("theme_key_histogram", &theme_key_histogram_cpu, py::arg("keys"), py::arg("prefix"),
        py::arg("round"), py::arg("hist"),
        "Adds 16-bit digit counts of keys[B, n] to hist[B, 65536]: round 0 the high digits, "
        "round 1 the low digits of keys whose high digit is prefix[b].");
  m.def("theme_tie_cut", &theme_tie_cut_cpu, py::arg("keys"), py::arg("thr"), py::arg("allowed"),
        py::arg("count"), py::arg("last_eq"),
        "Per query: count of keys == thr[b], and the index of the allowed[b]-th of them (-1).");
  m.def("theme_score_cut", &theme_score_cut_cpu, py::arg("q_emb"), py::arg("corpus_emb"),
        py::arg("emb_dtype_code"), py::arg("keys"), py::arg("cut_key"), py::arg("cut_last_eq"),
        py::arg("cut_all"), py::arg("k"), py::arg("theme_weight"), py::arg("ip"),
        py::arg("out_ids"), py::arg("out_scores"),
        "Pass 2 of the fused search on one row block with given cuts (keys from theme_scan_keys).");
  m.def("theme_simd_level", []() { return std::string(simd().name); },
        "SIMD variant the theme kernels run with on this CPU.");
  m.def("theme_simd_variants", []() {
          py::list out;
          for (const Simd& v : simd_variants()) out.append(py::str(v.name));
          return out;
        }, "SIMD variants this CPU supports, best first.");
  m.def("theme_set_simd", [](const std::string& name) {
          require(set_simd(name), "theme_set_simd: unknown or unsupported variant " + name);
        }, py::arg("name"), "Force a SIMD variant (for tests; not thread-safe during calls).");
}

}  // namespace
}  // namespace theme
RASFAST_REGISTER(theme, theme::bind);

// The torch operators' entries (common/entry_points.h): the kernels above, raw pointers; a
// non-finite corpus row (or any failure) is status 1 and the Python path names it.
int scoped_dense_search_entry(const float* q, int64_t B, int64_t D, const void* emb, int code,
                              int64_t N, const int64_t* scope, int64_t Ks, int64_t k,
                              int64_t* out_ids, float* out_scores) {
  try {
    const DType dt = dtype_from_code(code);
    ThreadScope threads_scope(B * Ks * D);  // as theme_scoped_dense_cpu
    RASFAST_DISPATCH_DTYPE(dt, DE, { theme::dense_typed<DE>(q, B, D, emb, N, scope, Ks, k, out_ids, out_scores); })
    return 0;
  } catch (...) {
    return 1;
  }
}

int theme_scope_entry(const float* q, int64_t B, int64_t T, const void* corpus, int code,
                      int64_t N, int64_t K, int ip, int64_t* out) {
  try {
    const DType dt = dtype_from_code(code);
    ThreadScope threads_scope(B * N * T);  // as theme_scope_cpu
    RASFAST_DISPATCH_DTYPE(dt, D, { theme::scope_typed<D>(q, B, T, corpus, N, K, ip, out); })
    return 0;
  } catch (...) {
    return 1;
  }
}

int theme_scoped_search_entry(const float* q_ppd, const void* ppd, int ppd_code,
                              const float* q_emb, const void* emb, int emb_code, int64_t B,
                              int64_t N, int64_t T, int64_t D, int64_t K, int64_t k, double w,
                              int ip, int64_t* out_ids, float* out_scores) {
  try {
    const DType dp = dtype_from_code(ppd_code), de = dtype_from_code(emb_code);
    ThreadScope threads_scope(B * N * (T + D));  // as theme_scoped_search_cpu
    theme::FusedArgs a{q_ppd, ppd, q_emb, emb, B, N, T, D, K, k, (float)w, ip != 0,
                       out_ids, out_scores};
    RASFAST_DISPATCH_DTYPE(dp, DP, { RASFAST_DISPATCH_DTYPE(de, DE, { theme::fused_typed<DP, DE>(a); }) })
    return 0;
  } catch (...) {
    return 1;
  }
}
}  // namespace rasfast
