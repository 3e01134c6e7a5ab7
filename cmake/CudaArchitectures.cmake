# CUDA target architectures of rasfast._cuda. Include before enable_language(CUDA).
#
# What the user asked for wins: -DCMAKE_CUDA_ARCHITECTURES=... or the CUDAARCHS environment
# variable (which enable_language(CUDA) reads). Otherwise sm_80 (A100) and sm_90 (H100/H200)
# SASS plus compute_90 PTX, so newer GPUs can JIT. This must be decided before
# enable_language(CUDA), which otherwise fills in the compiler's own default (sm_75 for
# nvcc 13) and makes it indistinguishable from a user's choice. RASFAST_CUDA_ARCHS_DEFAULTED
# remembers that the value in the cache is ours, so a re-configure keeps following this
# default. tests/test_build.py configures a tiny project that includes this file.
set(RASFAST_DEFAULT_CUDA_ARCHITECTURES "80-real;90-real;90-virtual")
if(NOT DEFINED ENV{CUDAARCHS}
   AND (NOT DEFINED CMAKE_CUDA_ARCHITECTURES OR RASFAST_CUDA_ARCHS_DEFAULTED))
  set(CMAKE_CUDA_ARCHITECTURES "${RASFAST_DEFAULT_CUDA_ARCHITECTURES}" CACHE STRING
      "CUDA architectures (rasfast default)" FORCE)
  set(RASFAST_CUDA_ARCHS_DEFAULTED ON CACHE INTERNAL "")
else()
  set(RASFAST_CUDA_ARCHS_DEFAULTED OFF CACHE INTERNAL "")
endif()
