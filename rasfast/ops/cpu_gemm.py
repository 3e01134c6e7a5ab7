"""The dense products of the CPU plans, on the faster of two float32 GEMMs: the projections
(:func:`linear`, x @ W^T + b), the per-head products (:func:`bmm`) and the training
backward's products of transposed and sliced operands (:func:`matmul`).

torch's CPU wheel sends float32 ``addmm`` to MKL, which takes its AVX2 code on AMD CPUs even
where the CPU has AVX-512 (measured on a Zen 5 EPYC: ~53 GMAC/s per core, the same with
``MKL_ENABLE_INSTRUCTIONS=AVX2``). oneDNN, also inside the wheel, dispatches on the CPU's
features and runs AVX-512 there: 2.2x on the graph encoder's shapes (420 x 384 x 1024:
1.51 -> 0.69 ms on 2 cores), with float32 accumulation (errors of the same size as MKL's
against a float64 product). So:

- ``"onednn"``: ``torch.ops.mkldnn._linear_pointwise`` on dense float32 tensors (no layout
  conversion, no weight packing); chosen by default when torch has oneDNN and reports an
  AVX-512 CPU;
- ``"blas"``: ``torch.addmm`` (MKL/OpenBLAS), everywhere else and for float16/bfloat16.

``RASFAST_CPU_GEMM=blas|onednn`` or :func:`set_backend` force one (the tests run both).
Both run on torch's intra-op thread pool (``torch.set_num_threads``).
"""
from __future__ import annotations

import os
from typing import Optional

import torch

_CHOICES = ("onednn", "blas")
_forced: Optional[str] = None


def _onednn_usable() -> bool:
    try:
        return (torch.backends.mkldnn.is_available()
                and hasattr(torch.ops.mkldnn, "_linear_pointwise"))
    except (AttributeError, RuntimeError):
        return False


def _default() -> str:
    env = os.environ.get("RASFAST_CPU_GEMM", "").strip().lower()
    if env:
        if env not in _CHOICES:
            raise ValueError(f"RASFAST_CPU_GEMM: expected one of {_CHOICES}, got {env!r}")
        if env == "onednn" and not _onednn_usable():
            raise ValueError("RASFAST_CPU_GEMM=onednn: this torch build has no oneDNN")
        return env
    try:
        avx512 = torch.backends.cpu.get_cpu_capability().startswith("AVX512")
    except (AttributeError, RuntimeError):
        avx512 = False
    return "onednn" if avx512 and _onednn_usable() else "blas"


def backend() -> str:
    """The GEMM the CPU plans use now: "onednn" or "blas"."""
    global _forced
    if _forced is None:
        _forced = _default()
    return _forced


def set_backend(name: Optional[str]) -> None:
    """Forces "onednn" or "blas"; None returns to the default (environment, then CPU)."""
    global _forced
    if name is None:
        _forced = None
        return
    if name not in _CHOICES:
        raise ValueError(f"name: expected one of {_CHOICES} or None, got {name!r}")
    if name == "onednn" and not _onednn_usable():
        raise ValueError("name: 'onednn' is not available in this torch build")
    _forced = name


def linear(x: torch.Tensor, weight: torch.Tensor, bias: Optional[torch.Tensor] = None,
           out: Optional[torch.Tensor] = None) -> torch.Tensor:
    """x [M, K] @ weight[N, K]^T + bias [N] -> [M, N] (``out`` is used by the blas path only:
    oneDNN allocates its result)."""
    if x.dtype == torch.float32 and x.shape[0] > 0 and backend() == "onednn":
        return torch.ops.mkldnn._linear_pointwise(x.contiguous(), weight.contiguous(), bias,
                                                  "none", [], "")
    if bias is None:
        return torch.mm(x, weight.t(), out=out) if out is not None else torch.mm(x, weight.t())
    if out is not None:
        return torch.addmm(bias, x, weight.t(), out=out)
    return torch.addmm(bias, x, weight.t())


def matmul(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """a [M, K] @ b [K, N] -> [M, N] on the chosen GEMM: the CPU backward's products (weight
    gradients d^T @ x, input gradients d @ W), whose operands are transposes and column
    slices. ``b.t()`` is oneDNN's [N, K] weight, read through its strides; a transposed
    ``a`` is copied by torch's wrapper (2.8 ms of the 66 ms per-question training step on
    Zen 5). On a quiet Zen 5 EPYC a float32 product there took 1.9-2.6x less time than
    ``torch.mm``'s MKL at the graph encoder's backward shapes (150 nodes, 1024 channels)."""
    if onednn_serves(a, b) and a.shape[0] > 0 and a.shape[1] > 0 and b.shape[1] > 0:
        return torch.ops.mkldnn._linear_pointwise(a, b.t(), None, "none", [], "")
    return a @ b


# Below this many rows a head, one torch.bmm call beats a oneDNN call per head (their fixed
# costs): measured on Zen 5 in graph_transformer_pool at RAS's dims, interleaved in one
# process, one 30-node subgraph 8.2 ms (torch.bmm) against 9.0 (per head); 60 nodes even,
# 150 nodes 24.7 against 23.3, 480 nodes 69.5 against 60.0.
BMM_ONEDNN_MIN_ROWS = 48


def bmm(a: torch.Tensor, b: torch.Tensor, out: torch.Tensor,
        add: Optional[torch.Tensor] = None) -> torch.Tensor:
    """out[i] = (add[i] +) a[i] @ b[i] for every i < a.shape[0]: the per-head products of the
    CPU plan (a [B, M, K], b [B, K, N], out and add [B, M, N]). On oneDNN (from
    ``BMM_ONEDNN_MIN_ROWS`` rows M) one product per entry, each copied into ``out[i]`` as it
    is made (a reused buffer: a fresh [B, M, N] result pays its page faults), ``add`` fused
    as oneDNN's sum post-op; else torch.bmm / baddbmm (MKL's AVX2 code on AMD CPUs:
    per-head oneDNN took half its time for the graph encoder's [8, 1920, 128] x
    [8, 128, 1024] on a Zen 5 EPYC)."""
    if onednn_serves(a, b) and a.shape[1] >= BMM_ONEDNN_MIN_ROWS and a.shape[2] > 0 \
            and b.shape[2] > 0 and (add is None or add.dtype == torch.float32):
        bt = b.transpose(1, 2)
        lp = torch.ops.mkldnn._linear_pointwise
        for i in range(a.shape[0]):
            r = (lp(a[i], bt[i], None, "none", [], "") if add is None
                 else lp.binary(a[i], add[i], bt[i], None, "add"))
            out[i].copy_(r)
        return out
    if add is None:
        return torch.bmm(a, b, out=out)
    return torch.baddbmm(add, a, b, out=out)


def onednn_serves(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Whether :func:`matmul` runs a @ b on oneDNN (float32 CPU operands, oneDNN chosen)."""
    return (a.dtype == torch.float32 and b.dtype == torch.float32 and a.device.type == "cpu"
            and b.device.type == "cpu" and backend() == "onednn")


__all__ = ["backend", "set_backend", "linear", "matmul", "bmm", "onednn_serves"]
