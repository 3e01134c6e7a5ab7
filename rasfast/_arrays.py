"""Array plumbing shared by every op: numpy/torch in, the same kind out.

Ops work on torch tensors internally (numpy input is wrapped zero-copy with
``torch.from_numpy``) and convert results back to the caller's kind at the end.
The compiled CPU module takes numpy buffers, so :func:`cpu_buffer` turns a CPU tensor
into a C-contiguous numpy view plus a dtype code (bfloat16, which numpy lacks,
travels as its raw 16-bit pattern). The CUDA module takes raw device pointers:
:func:`device_ptr` and :func:`cuda_stream`.
"""
from __future__ import annotations

import contextlib

import warnings
from typing import Any, Tuple

import numpy as np
import torch

#: Storage dtypes understood by the kernels; codes match csrc/common/dtype.h.
FLOAT_DTYPES = (torch.float32, torch.float16, torch.bfloat16)
DTYPE_CODES = {torch.float32: 0, torch.float16: 1, torch.bfloat16: 2}

NUMPY = "numpy"
TORCH = "torch"


def kind_of(x: Any) -> str:
    """'numpy' or 'torch'; anything else is a TypeError raised by :func:`as_tensor`."""
    return NUMPY if isinstance(x, np.ndarray) else TORCH


def as_tensor(x: Any, name: str) -> torch.Tensor:
    """Wraps a numpy array (zero-copy) or passes a tensor through.

    Raises TypeError naming ``name`` for anything else (lists, scalars, None...).
    """
    if isinstance(x, torch.Tensor):
        return x
    if isinstance(x, np.ndarray):
        if x.dtype == np.float64:
            raise TypeError(f"{name}: float64 is not supported; pass float32, float16 or bfloat16")
        try:
            with warnings.catch_warnings():
                # Read-only arrays (np.load(mmap_mode="r")) wrap zero-copy with a warning;
                # kernels never write their inputs, so the warning is noise.
                warnings.simplefilter("ignore", UserWarning)
                return torch.from_numpy(x)
        except TypeError as e:  # unsupported numpy dtype (object, str, ...)
            raise TypeError(f"{name}: unsupported numpy dtype {x.dtype}") from e
    raise TypeError(f"{name}: expected a numpy.ndarray or torch.Tensor, got {type(x).__name__}")


def to_kind(t: torch.Tensor, kind: str):
    """Returns ``t`` as the caller's kind (numpy results are CPU arrays)."""
    if kind == TORCH:
        return t
    t = t.detach().cpu()
    if t.dtype == torch.bfloat16:
        raise TypeError("bfloat16 results cannot be returned as numpy; pass torch tensors")
    return t.numpy()


def cpu_buffer(t: torch.Tensor) -> Tuple[np.ndarray, int]:
    """C-contiguous numpy view of a CPU float tensor and its dtype code."""
    t = t.contiguous()
    code = DTYPE_CODES[t.dtype]
    if t.dtype == torch.bfloat16:
        return t.view(torch.int16).numpy(), code
    return t.numpy(), code


def cpu_out(t: torch.Tensor) -> np.ndarray:
    """numpy view of a freshly allocated, contiguous CPU output tensor (written in place)."""
    assert t.is_contiguous() and t.device.type == "cpu"
    if t.dtype == torch.bfloat16:
        return t.view(torch.int16).numpy()
    return t.numpy()


def device_ptr(t: torch.Tensor) -> int:
    """Raw device pointer of a contiguous CUDA tensor (0 for an empty tensor)."""
    assert t.is_contiguous()
    return t.data_ptr() if t.numel() else 0


def cuda_stream(device: torch.device) -> int:
    """Handle of the current torch CUDA stream on ``device`` (kernels are ordered with torch work);
    0 for CPU tensors, which reach the CUDA kernels only under the emulator (RASFAST_CUDA_EMU=1)."""
    if device.type != "cuda":
        return 0
    raw = getattr(torch._C, "_cuda_getCurrentRawStream", None)  # no Stream object: cheaper
    if raw is not None:
        return raw(device.index if device.index is not None else torch.cuda.current_device())
    return torch.cuda.current_stream(device).cuda_stream


def device_guard(device: torch.device):
    """``torch.cuda.device(device)`` for CUDA tensors; nothing for the emulator's CPU tensors."""
    if device.type != "cuda" or device.index is None or device.index == torch.cuda.current_device():
        return contextlib.nullcontext()
    return torch.cuda.device(device)
