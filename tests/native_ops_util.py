"""What the tests of the C++ operator kernels share (test_native_ops.py, test_native_cuda_ops.py)."""
import torch


def same(a, b):
    """Outputs of the C++ and the Python kernel: the same compiled kernels, so equal exactly."""
    a = a if isinstance(a, tuple) else (a,)
    b = b if isinstance(b, tuple) else (b,)
    assert len(a) == len(b)
    for x, y in zip(a, b):
        assert x.dtype == y.dtype and x.shape == y.shape and x.device == y.device
        if x.dtype.is_floating_point:
            torch.testing.assert_close(x, y, rtol=0, atol=0, equal_nan=True)
        else:
            assert torch.equal(x, y)


def select_input(B: int, N: int, dtype) -> torch.Tensor:
    """Fresh random rows [B, N] (seeded by the shape) with ties and infinities."""
    g = torch.Generator().manual_seed(B * 7919 + N)
    x = torch.randn(B, N, generator=g).to(dtype)
    if B and N > 4:
        x[:, ::3] = x[:, :1]
        x[0, 1] = float("inf")
        x[-1, 2] = -float("inf")
    return x
