"""check_finite: the GPU path is one min/max reduction and one host sync per call.

(It used to walk a GPU tensor in 4M-element chunks with a sync per chunk: ~1,270 syncs for a
5M x 298 corpus.) nonfinite_flag is the device-side part; it is checked here on CPU tensors,
and the one-sync property on a GPU when there is one.
"""
import warnings

import pytest
import torch
from conftest import gpu

from rasfast._validate import check_all_finite, check_finite, nonfinite_flag

DTYPES = (torch.float32, torch.float16, torch.bfloat16)


@pytest.mark.parametrize("dtype", DTYPES)
def test_nonfinite_flag(dtype):
    x = torch.randn(7, 33).to(dtype)
    assert not bool(nonfinite_flag(x)) and not bool(nonfinite_flag(x, allow_inf=True))
    for bad, is_nan in ((float("nan"), True), (float("inf"), False), (float("-inf"), False)):
        y = x.clone()
        y[3, 17] = bad
        flag = nonfinite_flag(y)
        assert flag.dim() == 0 and flag.dtype == torch.bool  # a device tensor: no sync in here
        assert bool(flag)
        assert bool(nonfinite_flag(y, allow_inf=True)) == is_nan
        # any layout, no copy: a transposed, strided view still sees the bad element
        assert bool(nonfinite_flag(y.t()[::1, ::1])) and bool(nonfinite_flag(y[2:5, 10:20]))
        assert not bool(nonfinite_flag(y[:3]))


@pytest.mark.parametrize("dtype", DTYPES + (torch.float64,))
@pytest.mark.parametrize("numel", [1, 33, (1 << 16), (1 << 16) + 1])   # the numpy path and past it
def test_check_finite_cpu_paths(dtype, numel):
    """CPU check_finite, on small arrays through numpy's min/max, on larger ones (and
    bfloat16) through torch: the same verdicts on NaN, +-inf and -0.0, in any layout."""
    from rasfast import _validate
    x = torch.randn(numel).to(dtype)
    x[0] = -0.0
    check_finite(x, "x")
    check_finite(x.view(1, -1).t(), "x")
    for bad, is_nan in ((float("nan"), True), (float("inf"), False), (float("-inf"), False)):
        y = x.clone()
        y[numel // 2] = bad
        with pytest.raises(ValueError, match="x: contains NaN or infinite values"):
            check_finite(y, "x")
        if is_nan:
            with pytest.raises(ValueError, match="x: contains NaN$"):
                check_finite(y, "x", allow_inf=True)
        else:
            check_finite(y, "x", allow_inf=True)
        if numel > 1:   # a strided view that holds the bad entry
            with pytest.raises(ValueError):
                check_finite(y[numel // 2::2], "x")
    g = x.clone().requires_grad_()
    check_finite(g, "x")   # a leaf that requires grad (numpy needs detach)
    assert _validate._NUMPY_ELEMS == 1 << 16


def test_check_all_finite_names_the_culprit():
    a, b = torch.zeros(4, 3), torch.zeros(5, 3)
    check_all_finite(a=a, b=b)
    b[4, 2] = float("inf")
    with pytest.raises(ValueError, match=r"^b: contains NaN or infinite values"):
        check_all_finite(a=a, b=b)


@gpu
def test_gpu_check_finite_syncs_once():
    x = torch.randn(5_000_000, 16, device="cuda", dtype=torch.float16)  # 80M elements
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("warn")
    try:
        with warnings.catch_warnings(record=True) as rec:
            warnings.simplefilter("always")
            check_finite(x, "x")
            check_all_finite(x=x, y=x[:100])
    finally:
        torch.cuda.set_sync_debug_mode("default")
    syncs = [w for w in rec if "synchroniz" in str(w.message)]
    assert len(syncs) == 2, [str(w.message) for w in rec]
    x[4_999_999, 3] = float("nan")
    with pytest.raises(ValueError, match="x: contains NaN"):
        check_finite(x, "x", allow_inf=True)


def test_check_same_device_names_every_array_when_they_differ():
    import torch
    from rasfast._validate import check_same_device
    a, b, c = torch.zeros(2), torch.zeros(2), torch.empty(2, device="meta")
    assert check_same_device(a=a) == torch.device("cpu")
    assert check_same_device(a=a, b=b) == torch.device("cpu")
    with pytest.raises(ValueError, match=r"arrays must be on one device, got a on cpu, b on cpu, c on meta"):
        check_same_device(a=a, b=b, c=c)
    with pytest.raises(ValueError, match=r"got c on meta, a on cpu"):
        check_same_device(c=c, a=a)
