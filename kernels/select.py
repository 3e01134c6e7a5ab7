"""Triton select_k: exact radix select over ordered float keys, no sort of the row.

The data-heavy work runs in Triton kernels over (row, block) grids; the per-row
bookkeeping between passes is a handful of small torch ops on [B, 256] tensors (no host
synchronisation):

1. four histogram passes over 8-bit digits of the 32-bit key (MSD first); each counts
   the keys matching the digits fixed so far (``tl.histogram`` per block, one vector
   atomic add per block). torch picks the bin holding the k-th key. Afterwards the k-th
   key T is exact, with ``n_less`` keys below it and ``need = k - n_less`` ties to take.
2. a count kernel gives every block its number of keys < T and == T; an exclusive
   cumsum over the row's blocks gives write offsets;
3. a write kernel places, in index order, keys < T at [0, n_less) and the first ``need``
   ties at [n_less, k) (positions from ``tl.cumsum`` of the flags within the block).
4. ``sorted``: a stable torch sort of the k selected keys (already in index order), so
   the result is ordered by (key, index).

Keys: float -> uint32 with -0.0 folded onto +0.0 and the sign-flip order map (the same
map as csrc/common/dtype.h), inverted for ``largest``. float16/bfloat16 are widened to
float32 in-register (exact).
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

BINS = 256
DIGIT_BITS = 8
MAX_GRID_ROWS = 65535


@triton.jit
def _keys(x_ptr, row, offs, n, LARGEST: tl.constexpr):
    """uint32 selection keys of x[row, offs] (masked lanes: 0) and the lane mask."""
    m = offs < n
    v = tl.load(x_ptr + row * n + offs, mask=m, other=0.0).to(tl.float32)
    u = v.to(tl.uint32, bitcast=True)
    u = tl.where((u << 1) == 0, tl.zeros_like(u), u)           # -0.0 -> +0.0
    neg = (u >> 31) == 1
    key = u ^ tl.where(neg, 0xFFFFFFFF, 0x80000000).to(tl.uint32)  # sign-flip order map
    if LARGEST:
        key = ~key
    return key, m


@triton.jit
def _digit_hist_kernel(x_ptr, prefix_ptr, mask_ptr, hist_ptr, n, shift,
                       LARGEST: tl.constexpr, BLOCK: tl.constexpr):
    row = tl.program_id(1).to(tl.int64)
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    key, m = _keys(x_ptr, row, offs, n, LARGEST)
    prefix = tl.load(prefix_ptr + row).to(tl.uint32)
    pmask = tl.load(mask_ptr + row).to(tl.uint32)
    sel = m & ((key & pmask) == prefix)
    digit = ((key >> shift) & 0xFF).to(tl.int32)
    h = tl.histogram(digit, 256, mask=sel)
    tl.atomic_add(hist_ptr + row * 256 + tl.arange(0, 256), h)


@triton.jit
def _count_kernel(x_ptr, thr_ptr, less_ptr, eq_ptr, n, nblk,
                  LARGEST: tl.constexpr, BLOCK: tl.constexpr):
    row = tl.program_id(1).to(tl.int64)
    blk = tl.program_id(0).to(tl.int64)
    offs = blk * BLOCK + tl.arange(0, BLOCK)
    key, m = _keys(x_ptr, row, offs, n, LARGEST)
    t = tl.load(thr_ptr + row).to(tl.uint32)
    tl.store(less_ptr + row * nblk + blk, tl.sum((m & (key < t)).to(tl.int64), axis=0))
    tl.store(eq_ptr + row * nblk + blk, tl.sum((m & (key == t)).to(tl.int64), axis=0))


@triton.jit
def _write_kernel(x_ptr, thr_ptr, nless_ptr, need_ptr, less_off_ptr, eq_off_ptr,
                  out_ptr, keys_ptr, n, k, nblk,
                  LARGEST: tl.constexpr, BLOCK: tl.constexpr):
    row = tl.program_id(1).to(tl.int64)
    blk = tl.program_id(0).to(tl.int64)
    offs = blk * BLOCK + tl.arange(0, BLOCK)
    key, m = _keys(x_ptr, row, offs, n, LARGEST)
    t = tl.load(thr_ptr + row).to(tl.uint32)
    n_less = tl.load(nless_ptr + row)
    need = tl.load(need_ptr + row)
    is_less = (m & (key < t)).to(tl.int64)
    is_eq = (m & (key == t)).to(tl.int64)
    pos_less = tl.load(less_off_ptr + row * nblk + blk) + tl.cumsum(is_less, axis=0) - is_less
    rank_eq = tl.load(eq_off_ptr + row * nblk + blk) + tl.cumsum(is_eq, axis=0) - is_eq
    take_eq = (is_eq == 1) & (rank_eq < need)
    pos = tl.where(is_less == 1, pos_less, n_less + rank_eq)
    ok = ((is_less == 1) | take_eq) & (pos < k)
    tl.store(out_ptr + row * k + pos, offs, mask=ok)
    tl.store(keys_ptr + row * k + pos, key.to(tl.int64), mask=ok)


BLOCK = 1024


def select_k(x: torch.Tensor, k: int, largest: bool, sorted: bool, block: int = BLOCK) -> torch.Tensor:
    """Indices [B, k] (int64) of the k smallest (largest) entries per row, ties by lower index.

    ``x`` is a contiguous float32/float16/bfloat16 [B, N] tensor with B >= 1, 1 <= k <= N,
    no NaN (validated by rasfast.select_k). ``sorted``: ordered by (value, index).
    """
    B, n = x.shape
    if B > MAX_GRID_ROWS:  # rows are grid axis 1 (at most 65535 programs)
        return torch.cat([select_k(x[r:r + MAX_GRID_ROWS], k, largest, sorted, block)
                          for r in range(0, B, MAX_GRID_ROWS)])
    dev = x.device
    nblk = triton.cdiv(n, block)
    grid = (nblk, B)  # blocks of a row on axis 0 (no practical limit), rows on axis 1
    prefix = torch.zeros(B, dtype=torch.int64, device=dev)
    pmask = torch.zeros(B, dtype=torch.int64, device=dev)
    want = torch.full((B,), k, dtype=torch.int64, device=dev)
    n_less = torch.zeros(B, dtype=torch.int64, device=dev)
    hist = torch.empty((B, BINS), dtype=torch.int32, device=dev)
    for p in range(32 // DIGIT_BITS):
        shift = 32 - DIGIT_BITS * (p + 1)
        hist.zero_()
        _digit_hist_kernel[grid](x, prefix, pmask, hist, n, shift, LARGEST=largest, BLOCK=block)
        cum = hist.to(torch.int64).cumsum(1)
        b = (cum < want[:, None]).sum(1).clamp_(max=BINS - 1)          # bin of the k-th key
        below = torch.where(b > 0, cum.gather(1, (b - 1).clamp(min=0)[:, None])[:, 0],
                            torch.zeros_like(b))
        n_less += below
        want -= below
        prefix |= b << shift
        pmask |= (BINS - 1) << shift
    thr = prefix  # the k-th key, exactly
    cnt_less = torch.empty((B, nblk), dtype=torch.int64, device=dev)
    cnt_eq = torch.empty((B, nblk), dtype=torch.int64, device=dev)
    _count_kernel[grid](x, thr, cnt_less, cnt_eq, n, nblk, LARGEST=largest, BLOCK=block)
    less_off = cnt_less.cumsum(1) - cnt_less
    eq_off = cnt_eq.cumsum(1) - cnt_eq
    out = torch.empty((B, k), dtype=torch.int64, device=dev)
    keys = torch.empty((B, k), dtype=torch.int64, device=dev)
    _write_kernel[grid](x, thr, n_less, want, less_off, eq_off, out, keys, n, k, nblk,
                        LARGEST=largest, BLOCK=block)
    if sorted and k > 1:
        order = torch.sort(keys, dim=1, stable=True).indices  # index order kept within ties
        out = torch.gather(out, 1, order)
    return out


def aot_variants():
    """Every launch above, for tests/triton_aot_gate.py (see kernels/_aot.py)."""
    from ._aot import FLOAT_PTRS, variant
    out = []
    for xptr in FLOAT_PTRS.values():
        for largest in (False, True):
            out.append(variant(_digit_hist_kernel, dict(x_ptr=xptr, prefix_ptr="*i64",
                                                        mask_ptr="*i64", hist_ptr="*i32",
                                                        n="i32", shift="i32"),
                               LARGEST=largest, BLOCK=BLOCK))
            out.append(variant(_count_kernel, dict(x_ptr=xptr, thr_ptr="*i64", less_ptr="*i64",
                                                   eq_ptr="*i64", n="i32", nblk="i32"),
                               LARGEST=largest, BLOCK=BLOCK))
            out.append(variant(_write_kernel, dict(x_ptr=xptr, thr_ptr="*i64", nless_ptr="*i64",
                                                   need_ptr="*i64", less_off_ptr="*i64",
                                                   eq_off_ptr="*i64", out_ptr="*i64",
                                                   keys_ptr="*i64", n="i32", k="i32",
                                                   nblk="i32"),
                               LARGEST=largest, BLOCK=BLOCK))
    return out
