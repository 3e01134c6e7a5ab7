"""Which backends the parity tests compare with the reference on this machine."""
import importlib.util

import torch

import rasfast

TRITON = importlib.util.find_spec("triton") is not None


def cpu_backends(triton: bool = True):
    """Backends that run on CPU tensors: the compiled cpu module, and Triton interpreted."""
    out = ["cpu"]
    if triton and TRITON:
        out.append("triton")
    return out


def gpu_backends():
    if not torch.cuda.is_available():
        return []
    info = rasfast.backends()
    out = []
    if info["cuda"]["built"]:
        out.append("cuda")
    if info["triton"]["importable"]:
        out.append("triton")
    return out
