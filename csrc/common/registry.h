// Self-registration of pybind11 bindings per kernel family.
//
// Each family's binding file does
//     static void bind(pybind11::module_& m) { m.def(...); }
//     RASFAST_REGISTER(select, bind);
// and the module entry point (csrc/bindings/module_*.cpp) calls every registered
// function. Adding a family therefore never edits a shared file; CMake picks the
// new sources up by glob. The registry is per shared object (inline function with a
// function-local static), so _C and _cuda each see only their own families.
#pragma once
#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include <pybind11/pybind11.h>

namespace rasfast {

using RegisterFn = void (*)(pybind11::module_&);

inline std::vector<std::pair<std::string, RegisterFn>>& binding_registry() {
  static std::vector<std::pair<std::string, RegisterFn>> registry;
  return registry;
}

struct BindingRegistrar {
  BindingRegistrar(const char* name, RegisterFn fn) { binding_registry().emplace_back(name, fn); }
};

// Calls the registered functions in name order (static-init order is unspecified).
inline void run_binding_registry(pybind11::module_& m) {
  auto entries = binding_registry();
  std::sort(entries.begin(), entries.end(),
            [](const auto& a, const auto& b) { return a.first < b.first; });
  for (auto& e : entries) e.second(m);
}

}  // namespace rasfast

#define RASFAST_REGISTER(name, fn) \
  static ::rasfast::BindingRegistrar rasfast_registrar_##name(#name, fn)
