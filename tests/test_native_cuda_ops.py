"""The C++ CUDA kernels of the registered operators (rasfast._torch_ops, csrc/torch_ops/cuda_ops.cpp).

``torch.ops.rasfast.select_k`` on CUDA tensors (and, under the emulator, backend "cuda" on CPU
tensors) runs a C++ kernel that launches rasfast._cuda's kernels through the module's table of
entry points (common/cuda_entry_points.h), with no Python frame, and hands every other call to
the op's Python kernel (``torch.ops.rasfast.select_k_python``). Tested here, on a GPU or on the
emulator: the table is attached (no silent fallback), the C++ kernel gives the Python kernel's
results bit for bit (the same compiled kernels) on fresh random inputs (dtypes, odd and empty
sizes, ties and infinities, both of select's designs, non-contiguous views), ordinary calls
never reach the Python kernel, bad calls raise the same errors both ways, and the call keeps
select_k's device budget (no sync, no allocation outside the caching allocator).
"""
import pytest
import torch

import rasfast
import rasfast.ops  # noqa: F401  (defines torch.ops.rasfast.*)
from rasfast import _native
from rasfast import dispatch as _bk
from rasfast.device_work import count_device_work
from rasfast.ops import _library
from rasfast.ops import select as select_mod

from conftest import EMULATED, GPU_DEVICE, cuda_kernels
from native_ops_util import same, select_input

DTYPES = (torch.float32, torch.float16, torch.bfloat16)
# "auto" picks the cuda backend for CUDA tensors only; the emulator takes "cuda" alone
BACKENDS = ("cuda",) if EMULATED else ("cuda", "auto")


def both(*args):
    ops = torch.ops.rasfast
    return ops.select_k.default(*args), ops.select_k_python.default(*args)


def _calls_python_kernel(fn) -> bool:
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        fn()
    return any(e.name.endswith("select_k_python") for e in prof.events())


@cuda_kernels
def test_the_cuda_kernel_is_registered_and_attached():
    """A build that lost cuda_ops.cpp, or a table that no longer attaches, fails here rather
    than silently running the Python kernel."""
    assert "select_k" in _native.native_cuda_ops()
    x = torch.randn(2, 30, device=GPU_DEVICE)
    assert _library.native_call("select_k", "cuda", x)
    assert _native.attached_cuda() is _bk.cuda_module()
    assert hasattr(torch.ops.rasfast, "select_k_python")


@cuda_kernels
def test_ordinary_calls_stay_in_cpp_and_the_others_reach_python(monkeypatch):
    x = torch.randn(4, 300, device=GPU_DEVICE)
    ops = torch.ops.rasfast
    for backend in BACKENDS:
        assert not _calls_python_kernel(lambda: ops.select_k(x, 5, False, True, backend))
        assert not _calls_python_kernel(lambda: rasfast.select_k(x, 5, backend=backend))
    assert _calls_python_kernel(lambda: ops.select_k(x, 5, False, True, "torch"))
    # the Python kernel's cuda implementation is not what serves a public call
    monkeypatch.setitem(select_mod._IMPLS, "cuda", None)
    vals, idx = rasfast.select_k(x, 7, largest=True, backend="cuda")
    ref = rasfast.select_k(x, 7, largest=True, backend="torch")
    same((vals, idx), ref)


@cuda_kernels
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("B,N,k", [(0, 5, 2), (1, 1, 1), (3, 257, 10), (2, 64, 64),
                                   (5, 1000, 37), (3, 700, 300), (2, 4099, 256)])
def test_select_k_equals_the_python_kernel(dtype, B, N, k):
    x = select_input(B, N, dtype).to(GPU_DEVICE)
    for largest in (False, True):
        for sorted_ in (True, False):
            for backend in BACKENDS:
                same(*both(x, k, largest, sorted_, backend))
    if B and N > 2:  # a non-contiguous view
        same(*both(x[:, ::2], min(k, (N + 1) // 2), True, True, "cuda"))
    if B:  # and the reference's answer (sorted: indices by the contract's tie order)
        vals, idx = torch.ops.rasfast.select_k(x, k, False, True, "cuda")
        ref_vals, ref_idx = rasfast.select_k(x.cpu(), k, backend="torch")
        assert torch.equal(idx.cpu(), ref_idx)
        torch.testing.assert_close(vals.cpu(), ref_vals, rtol=0, atol=0)


@cuda_kernels
def test_bad_calls_raise_the_python_kernels_errors():
    x = torch.randn(3, 20, device=GPU_DEVICE)
    cases = [(x, 0, False, True, "cuda"), (x, 21, False, True, "cuda"),
             (x[None], 2, False, True, "cuda"), (x.long(), 2, False, True, "cuda"),
             (x[:, :0], 1, False, True, "cuda"), (x, 2, False, True, "gpu")]
    for args in cases:
        errors = []
        for op in (torch.ops.rasfast.select_k.default, torch.ops.rasfast.select_k_python.default):
            with pytest.raises(Exception) as info:
                op(*args)
            errors.append(info.value)
        assert type(errors[0]) is type(errors[1]) and str(errors[0]) == str(errors[1]), errors
    # the public op's messages name the argument, whichever way it went
    with pytest.raises(ValueError, match="k: must be <= N"):
        rasfast.select_k(x, 21, backend="cuda")
    with pytest.raises(ValueError, match=r"x: N \(x.shape\[1\]\) must be >= 1"):
        rasfast.select_k(x[:, :0], 1, backend="cuda")
    with pytest.raises(TypeError, match="k"):
        rasfast.select_k(x, 2.0, backend="cuda")


@cuda_kernels
@pytest.mark.skipif(not EMULATED, reason="the emulator counts the launches")
def test_the_cpp_kernel_keeps_select_ks_device_budget():
    x = torch.randn(8, 5000)
    rasfast.select_k(x, 10, backend="cuda")
    for k, launches in ((10, 2), (1000, 8)):
        with count_device_work(watch=[x]) as work:
            rasfast.select_k(x, k, backend="cuda")
        assert work.syncs == 0 and work.allocs == 0 and work.watched_reads == 0, work.summary()
        assert work.torch_ops == 0 and work.kernels + work.memsets <= launches, work.summary()
