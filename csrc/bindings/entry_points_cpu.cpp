// _C.cpu_entry_points(): the address of the table of raw CPU kernel entries
// (common/entry_points.h) that rasfast._torch_ops calls from its C++ operator kernels.
#include <cstdint>

#include "common/entry_points.h"
#include "common/registry.h"

namespace rasfast {
namespace {

const RasfastCpuEntries kEntries = {
    kRasfastCpuEntriesAbi,
    static_cast<int32_t>(sizeof(RasfastCpuEntries)),
    &select_k_entry,
    &scoped_dense_search_entry,
    &theme_scope_entry,
    &theme_scoped_search_entry,
    &segment_topk_scores_entry,
    &segment_max_rank_entry,
};

void bind(pybind11::module_& m) {
  m.def("cpu_entry_points",
        []() { return reinterpret_cast<std::uintptr_t>(&kEntries); },
        "Address of the RasfastCpuEntries table (common/entry_points.h), for "
        "rasfast._torch_ops; valid while this module is loaded (for the process).");
  m.attr("cpu_entry_points_abi") = kRasfastCpuEntriesAbi;
}

}  // namespace
RASFAST_REGISTER(entry_points, bind);
}  // namespace rasfast
