// pybind11 binding of the CUDA triple_beam_search (kernel in beam_search.cu). Takes raw
// device pointers allocated by torch in Python; checks the sizes it can check here.
#include <cstdint>
#include <cstdlib>
#include <string>

#include "beam/beam_cuda.h"
#include "common/buffers.h"
#include "common/cuda_check.h"
#include "common/registry.h"

namespace rasfast {
namespace {

int64_t pow2_at_least(int64_t x) {
  int64_t p = 1;
  while (p < x) p <<= 1;
  return p;
}

// On-chip sizes for a call; also used by Python to say when a call is too large.
BeamCudaArgs plan(int64_t n, int64_t D, int64_t B, int64_t b, int64_t L, int64_t max_nb,
                  int64_t decay_len, int64_t max_deg) {
  require(n >= 0 && n < ((int64_t)1 << 31), "triple_emb: the cuda backend needs n < 2^31 triples");
  require(D >= 1, "triple_emb: D must be >= 1");
  require(b >= 1 && L >= 1 && max_nb >= 0 && decay_len >= 1 && max_deg >= 0,
          "beam_width, max_len >= 1; max_neighbors >= 0; decay non-empty");
  BeamCudaArgs a{};
  a.n = n; a.D = D; a.B = B; a.b = b; a.L = L; a.max_nb = max_nb; a.tail = decay_len - 1;
  int64_t m = a.tail + b;  // ranks >= tail + b can never reach the global top b
  if (max_nb > 0 && max_nb < m) m = max_nb;
  if (max_deg < m) m = max_deg;
  a.m_step = m < 1 ? 1 : m;
  a.m_seed = b;
  // a chunk of candidates per round: enough for a typical row (or seed list) in one round
  int64_t chunk = pow2_at_least(max_deg < 64 ? 64 : max_deg);
  a.chunk = chunk < kBeamThreads ? chunk : kBeamThreads;
  const int64_t big_m = a.m_seed > a.m_step ? a.m_seed : a.m_step;
  a.cap = pow2_at_least(big_m + a.chunk);
  a.group = 1;
  a.cap2 = pow2_at_least(b + a.m_step);
  a.cap3 = 0;
  a.lanes = 8;
  a.threads = 0;
  return a;
}

constexpr size_t kMaxSmem = 160 * 1024;  // opt-in limit common to sm_80 (163 KB) and sm_90
constexpr int64_t kMaxPool = 2048;       // pool entries (16 bytes each) merged in one sort
constexpr int64_t kMaxCombined = 2048;   // candidates of all beams sorted together (16 bytes each)

// The plan, with as many beams per pool merge as the pool's cap and shared memory allow:
// one merge (a bitonic sort of the pool) per `group` beams instead of one per beam. The
// merge keeps a running top b of a total order, so any grouping gives the same result.
BeamCudaArgs plan_grouped(int64_t n, int64_t D, int64_t B, int64_t b, int64_t L, int64_t max_nb,
                          int64_t decay_len, int64_t max_deg) {
  BeamCudaArgs a = plan(n, D, B, b, L, max_nb, decay_len, max_deg);
  while (a.group < b) {
    BeamCudaArgs t = a;
    t.group = a.group * 2 < b ? a.group * 2 : b;
    t.cap2 = pow2_at_least(b + t.group * t.m_step);
    if (t.cap2 > kMaxPool || beam_search_smem_bytes(t) > kMaxSmem) break;
    a = t;
  }
  // the one-sort step for beams whose rows are short together: as large a buffer as fits
  // (it only adds shared memory: a plan that did not fit without it keeps cap3 = 0).
  // RASFAST_BEAM_COMBINED caps it (0: off) -- for benchmarks weighing its shared memory
  // (fewer resident blocks) against its fewer barriers on a GPU.
  int64_t top = kMaxCombined;
  if (const char* env = std::getenv("RASFAST_BEAM_COMBINED")) {
    const int64_t v = std::atoll(env);
    top = v < 0 ? 0 : (v < kMaxCombined ? v : kMaxCombined);
  }
  // RASFAST_BEAM_LANES sets the lanes per scored candidate (4, 8, 16 or 32; default 8:
  // four rows' loads in flight per warp; 32 is the one-row-per-warp scoring before it) --
  // for benchmarks weighing the rows in flight against the wider reductions on a GPU.
  if (const char* env = std::getenv("RASFAST_BEAM_LANES"); env && *env) {
    const int64_t v = std::atoll(env);
    require(v == 4 || v == 8 || v == 16 || v == 32,
            "RASFAST_BEAM_LANES: expected 4, 8, 16 or 32, got '" + std::string(env) + "'");
    a.lanes = v;
  }
  // RASFAST_BEAM_THREADS fixes the threads per block (256 or 1024; default: by the batch, see
  // beam_search_launch) -- a measurement knob too.
  if (const char* env = std::getenv("RASFAST_BEAM_THREADS"); env && *env) {
    const int64_t v = std::atoll(env);
    require(v == 256 || v == 1024,
            "RASFAST_BEAM_THREADS: expected 256 or 1024, got '" + std::string(env) + "'");
    a.threads = v;
  }
  for (int64_t c3 = pow2_at_least(top + 1) / 2; c3 >= 64; c3 >>= 1) {
    BeamCudaArgs t = a;
    t.cap3 = c3;
    if (beam_search_smem_bytes(t) <= kMaxSmem) {
      a = t;
      break;
    }
  }
  return a;
}

size_t beam_cuda_smem(int64_t n, int64_t D, int64_t b, int64_t L, int64_t max_nb,
                      int64_t decay_len, int64_t max_deg) {
  return beam_search_smem_bytes(plan_grouped(n, D, 1, b, L, max_nb, decay_len, max_deg));
}

void beam_search_cuda(uintptr_t indptr, uintptr_t indices, bool idx64, uintptr_t emb,
                      int dtype_code, int64_t n, int64_t D, uintptr_t q, uintptr_t qnorm, int64_t B,
                      uintptr_t seed_ptr, uintptr_t seed_ids, int64_t n_seed_ids,
                      int64_t beam_width, int64_t max_len,
                      int64_t max_neighbors, uintptr_t decay, int64_t decay_len, int64_t max_deg,
                      uintptr_t out_seq, uintptr_t out_score, uintptr_t out_len, uintptr_t out_count,
                      uintptr_t scratch_u, uintptr_t err, uintptr_t stream) {
  dtype_from_code(dtype_code);
  require(B >= 0, "q_emb: B must be >= 0");
  BeamCudaArgs a = plan_grouped(n, D, B, beam_width, max_len, max_neighbors, decay_len, max_deg);
  const size_t smem = beam_search_smem_bytes(a);
  require(smem <= kMaxSmem,
          "triple_beam_search: the cuda backend needs " + std::to_string(smem) +
              " bytes of shared memory per block for these beam_width/max_len/max_neighbors/"
              "gamma (limit " + std::to_string(kMaxSmem) + "); lower them or use backend='cpu'");
  require(B == 0 || (indptr && q && seed_ptr && out_seq && out_score && out_len &&
                     out_count && scratch_u && err && decay),
          "triple_beam_search: a required device pointer is null (qnorm may be: the kernel computes it)");
  a.dtype = dtype_code;
  a.idx64 = idx64;
  a.indptr = as_dptr<const int64_t>(indptr);
  a.indices = as_dptr<const void>(indices);
  a.emb = as_dptr<const void>(emb);
  a.q = as_dptr<const float>(q);
  a.qnorm = as_dptr<const float>(qnorm);
  a.seed_ptr = as_dptr<const int64_t>(seed_ptr);
  a.seed_ids = as_dptr<const int64_t>(seed_ids);
  a.n_seed_ids = n_seed_ids;
  a.decay = as_dptr<const double>(decay);
  a.out_seq = as_dptr<int64_t>(out_seq);
  a.out_score = as_dptr<float>(out_score);
  a.out_len = as_dptr<int64_t>(out_len);
  a.out_count = as_dptr<int64_t>(out_count);
  a.scratch_u = as_dptr<float>(scratch_u);
  a.err = as_dptr<int>(err);
  beam_search_launch(a, as_stream(stream));
}

void bind(py::module_& m) {
  m.def("beam_search", &beam_search_cuda, py::arg("indptr"), py::arg("indices"), py::arg("idx64"),
        py::arg("emb"), py::arg("dtype_code"), py::arg("n"), py::arg("D"), py::arg("q"),
        py::arg("qnorm"), py::arg("B"), py::arg("seed_ptr"), py::arg("seed_ids"),
        py::arg("n_seed_ids"), py::arg("beam_width"), py::arg("max_len"), py::arg("max_neighbors"), py::arg("decay"),
        py::arg("decay_len"), py::arg("max_deg"), py::arg("out_seq"), py::arg("out_score"),
        py::arg("out_len"), py::arg("out_count"), py::arg("scratch_u"), py::arg("err"),
        py::arg("stream"),
        "GEAR triple beam search, one block per query (asynchronous on `stream`). seed_ptr "
        "[B + 1] is checked by the kernel: 0 = ptr[0] <= ... <= ptr[B] = n_seed_ids, else error "
        "code 6 with the first bad query (whose seeds are skipped).");
  m.def("beam_search_smem", &beam_cuda_smem, py::arg("n"), py::arg("D"), py::arg("beam_width"),
        py::arg("max_len"), py::arg("max_neighbors"), py::arg("decay_len"), py::arg("max_deg"),
        "Shared memory bytes per block the cuda beam search needs for these settings.");
  m.def("beam_plan", [](int64_t n, int64_t D, int64_t b, int64_t L, int64_t max_nb, int64_t decay_len,
                        int64_t max_deg) {
          const BeamCudaArgs a = plan_grouped(n, D, 1, b, L, max_nb, decay_len, max_deg);
          py::dict d;
          d["m_step"] = a.m_step; d["chunk"] = a.chunk; d["cap"] = a.cap;
          d["group"] = a.group; d["cap2"] = a.cap2; d["cap3"] = a.cap3; d["lanes"] = a.lanes; d["threads"] = a.threads;
          return d;
        }, py::arg("n"), py::arg("D"), py::arg("beam_width"), py::arg("max_len"),
        py::arg("max_neighbors"), py::arg("decay_len"), py::arg("max_deg"),
        "The kernel's on-chip sizes for these settings (tests and docs).");
  m.attr("beam_max_smem") = kMaxSmem;  // larger needs: dispatch falls back past cuda
}

}  // namespace
RASFAST_REGISTER(beam_cuda, bind);
}  // namespace rasfast
