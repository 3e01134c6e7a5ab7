"""Shared test setup.

- Triton kernels run on the CPU only interpreted; TRITON_INTERPRET must be set before
  rasfast.kernels (and triton's JIT) is imported, so it is set here, first.
- ``cpu_backends()`` / ``gpu_backends()`` list the backends to compare with the reference.
  A backend that should exist here but does not is a test failure (see test_dispatch.py),
  never a silent skip.
- ``data_dir`` points at ../shared/data (override with RASFAST_DATA).
"""
import os
import pathlib

import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

import pytest  # noqa: E402
from hypothesis import HealthCheck, settings  # noqa: E402

settings.register_profile(
    "default", deadline=None, max_examples=25, derandomize=False,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
# compute-sanitizer makes every launch slow (an H100 run got through 13 memcheck tests in 3 min):
# tools/gpu_session.sh sanitize loads this profile
settings.register_profile(
    "sanitize", deadline=None, max_examples=3, derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "default"))

REPO = pathlib.Path(__file__).resolve().parents[1]

HAS_GPU = torch.cuda.is_available()
gpu = pytest.mark.skipif(not HAS_GPU, reason="needs a CUDA device")

# Tests of the CUDA kernels run on a GPU, or with RASFAST_CUDA_EMU=1 on the CPU emulator
# (rasfast._cuda_emu), whose backend "cuda" takes CPU tensors: such tests put their inputs
# on GPU_DEVICE and, under emulation (EMULATED), use their small sizes. `make test` runs
# them emulated (`RASFAST_CUDA_EMU=1 pytest -m cuda_emu`).
EMULATED = os.environ.get("RASFAST_CUDA_EMU", "0") not in ("", "0")
GPU_DEVICE = torch.device("cpu") if EMULATED else torch.device("cuda")


def cuda_kernels(fn):
    """Marks a test of the CUDA kernels: runs on a GPU or under the emulator, else skips."""
    fn = pytest.mark.cuda_kernels(pytest.mark.cuda_emu(fn))
    return pytest.mark.skipif(not (HAS_GPU or EMULATED),
                              reason="needs a CUDA device (or RASFAST_CUDA_EMU=1: the CPU emulator)")(fn)


def data_root() -> pathlib.Path:
    return pathlib.Path(os.environ.get("RASFAST_DATA", REPO.parent / "shared" / "data"))


@pytest.fixture(scope="session")
def data_dir() -> pathlib.Path:
    root = data_root()
    if not root.exists():
        pytest.skip(f"shared data not found at {root} (set RASFAST_DATA)")
    return root
