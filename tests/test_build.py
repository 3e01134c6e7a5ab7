"""The build produced what this machine can build: _C always, _cuda wherever nvcc exists."""
import importlib
import os
import shutil

import pytest
import torch


def nvcc_present() -> bool:
    cands = [os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda"]
    return shutil.which("nvcc") is not None or any(
        c and os.path.exists(os.path.join(c, "bin", "nvcc")) for c in cands)


def test_cpu_module_built():
    c = importlib.import_module("rasfast._C")
    assert c.omp_max_threads() >= 1
    assert hasattr(c, "select_k")


@pytest.mark.skipif(not nvcc_present(), reason="no CUDA compiler on this machine")
def test_cuda_module_built_where_nvcc_exists():
    c = importlib.import_module("rasfast._cuda")  # static cudart: imports without a driver
    assert hasattr(c, "select_k")
    assert c.runtime_version() >= 12000
    expected = torch.cuda.device_count() if torch.cuda.is_available() else 0
    assert c.device_count() == expected
    status = c.device_status()
    assert (status == "ok") == (expected > 0), status


def test_triton_importable():
    triton = importlib.import_module("triton")  # installed by `make test` (extra "gpu")
    assert triton.__version__
    kernels = importlib.import_module("rasfast.kernels.select")
    assert callable(kernels.select_k)
