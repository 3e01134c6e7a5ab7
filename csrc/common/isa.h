// Run-time choice of a kernel family's instruction set (the build uses no -march flag, so one
// wheel runs on every x86-64 CPU): each family compiles its hot loops for the baseline ISA,
// AVX2 (+FMA, F16C) and AVX-512 (F, BW, VL) with GCC target attributes, starts on the best
// variant this CPU runs, and binds <family>_simd_level / _simd_variants / _set_simd so tests
// can force each variant. (The theme family keeps its own table, theme/theme_simd.h.)
#pragma once

#include <pybind11/pybind11.h>

#include <string>
#include <vector>

#if defined(__x86_64__) && defined(__GNUC__)
#define RASFAST_ISA_X86 1
#else
#define RASFAST_ISA_X86 0
#endif

namespace rasfast {

enum class Isa { Base, Avx2, Avx512 };

inline const char* isa_name(Isa i) {
  return i == Isa::Avx512 ? "avx512" : i == Isa::Avx2 ? "avx2" : "base";
}

// The variants this CPU runs, best first.
inline std::vector<Isa> isa_variants() {
  std::vector<Isa> v;
#if RASFAST_ISA_X86
  __builtin_cpu_init();
  const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
                    __builtin_cpu_supports("f16c");
  if (avx2 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
      __builtin_cpu_supports("avx512vl"))
    v.push_back(Isa::Avx512);
  if (avx2) v.push_back(Isa::Avx2);
#endif
  v.push_back(Isa::Base);
  return v;
}

// One family's current variant (Tag: any type private to the family).
template <class Tag>
Isa& isa_state() {
  static Isa s = isa_variants().front();
  return s;
}

// <family>_simd_level(), <family>_simd_variants(), <family>_set_simd(name) for a family's state.
inline void bind_isa(pybind11::module_& m, const std::string& family, Isa& state) {
  namespace py = pybind11;
  Isa* st = &state;
  m.def((family + "_simd_level").c_str(), [st]() { return std::string(isa_name(*st)); },
        ("The instruction set the " + family + " kernels run now (avx512, avx2 or base).").c_str());
  m.def((family + "_simd_variants").c_str(), []() {
        py::list out;
        for (Isa i : isa_variants()) out.append(py::str(isa_name(i)));
        return out;
      }, ("The " + family + " instruction sets this CPU runs, best first.").c_str());
  m.def((family + "_set_simd").c_str(), [st, family](const std::string& name) {
        for (Isa i : isa_variants())
          if (name == isa_name(i)) { *st = i; return; }
        throw py::value_error(family + "_set_simd: name: unknown or unsupported variant " + name);
      }, py::arg("name"), ("Forces one instruction set of " + family + "_simd_variants() (tests).").c_str());
}

}  // namespace rasfast
