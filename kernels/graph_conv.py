"""Triton kernel of the graph-transformer attention: one program per (destination node, head).

Loops over the node's incoming edges (CSR by destination) with an online softmax of
q.(k + e)/sqrt(C), accumulating sum p * (v + e) in float32; writes agg[N, H, C].

Every offset is int64: node i's row starts at i * W, which passes 2^31 once N * W does
(e.g. 5M nodes x 3 * 4 heads * 64 channels), and a 32-bit product would wrap silently.
"""
from __future__ import annotations

import math

import torch
import triton
import triton.language as tl


@triton.jit
def _attend_kernel(indptr, src, eid, nodes, W, e, agg, H, C, scale,
                   HAS_E: tl.constexpr, BLOCK_C: tl.constexpr):
    pid = tl.program_id(0).to(tl.int64)
    i = pid // H
    h = pid % H
    hc = H * C
    offs = tl.arange(0, BLOCK_C)
    mask = offs < C
    q = tl.load(nodes + i * W + h * C + offs, mask=mask, other=0.0).to(tl.float32)
    start = tl.load(indptr + i)
    end = tl.load(indptr + i + 1)
    m = tl.full((), float("-inf"), tl.float32)
    s = tl.zeros((), tl.float32)
    acc = tl.zeros((BLOCK_C,), tl.float32)
    for t in range(start, end):
        j = tl.load(src + t).to(tl.int64)
        k = tl.load(nodes + j * W + hc + h * C + offs, mask=mask, other=0.0).to(tl.float32)
        v = tl.load(nodes + j * W + 2 * hc + h * C + offs, mask=mask, other=0.0).to(tl.float32)
        if HAS_E:
            r = tl.load(eid + t).to(tl.int64)
            ev = tl.load(e + r * hc + h * C + offs, mask=mask, other=0.0).to(tl.float32)
            k = k + ev
            v = v + ev
        logit = tl.sum(q * k, axis=0) * scale
        m_new = tl.maximum(m, logit)
        f = tl.exp(m - m_new)
        p = tl.exp(logit - m_new)
        s = s * f + p
        acc = acc * f + p * v
        m = m_new
    out = tl.where(s > 0, acc / tl.maximum(s, 1e-30), 0.0)
    tl.store(agg + (i * H + h) * C + offs, out, mask=mask)


def attend(indptr: torch.Tensor, src: torch.Tensor, eid: torch.Tensor, nodes: torch.Tensor,
           e, heads: int, channels: int) -> torch.Tensor:
    """agg [N, H, C] float32; nodes [N, >= 3HC] (any row stride) holds q, k, v; e [E, HC]
    (contiguous) or None."""
    n = indptr.numel() - 1
    agg = torch.empty((n, heads, channels), dtype=torch.float32, device=nodes.device)
    if n == 0:
        return agg
    has_e = e is not None
    if nodes.stride(1) != 1:
        nodes = nodes.contiguous()
    # rows may be strided views: the kernel steps nodes by its row stride
    _attend_kernel[(n * heads,)](indptr, src, eid, nodes, nodes.stride(0), e if has_e else nodes, agg,
                                 heads, channels, 1.0 / math.sqrt(channels), HAS_E=has_e,
                                 BLOCK_C=triton.next_power_of_2(channels))
    return agg


# constexprs that follow the user's shape: the variants list their extremes and a typical value
AOT_SIZE_CONSTEXPRS = {"_attend_kernel": ("BLOCK_C",)}


def aot_variants():
    """Every launch above, for tests/triton_aot_gate.py (see kernels/_aot.py). BLOCK_C follows
    the layer's channels: every dtype and edge-feature case at 64, and the extremes at 1
    and 1024 (float32, with edge features)."""
    from ._aot import FLOAT_PTRS, variant

    def one(ptr, has_e, block_c):
        return variant(_attend_kernel, dict(indptr="*i64", src="*i64", eid="*i64", nodes=ptr,
                                            W="i32", e=ptr, agg="*fp32", H="i32", C="i32",
                                            scale="fp32"),
                       HAS_E=has_e, BLOCK_C=block_c)

    out = [one(ptr, has_e, 64) for ptr in FLOAT_PTRS.values() for has_e in (False, True)]
    out += [one("*fp32", True, bc) for bc in (1, 1024)]
    return out
