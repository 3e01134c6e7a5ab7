"""Triton kernels for the segment ops (rasfast.ops.segment's ``triton`` backend).

- ``_scores_kernel``: one program per block of candidates scores each candidate against its
  query (float32 accumulation from any storage dtype; rows read directly, or through
  ``cand_ids`` when ``GATHER``).
- ``_group_max_kernel``: one program per block of items folds item scores into their
  (query, group) slot with an atomic max.

Both leave the per-query selection to torch: one stable sort by (segment, score desc,
position asc) over all candidates -- the order of rasfast/reference/segment.py.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

_BLOCK_M = 32
_BLOCK_D = 64
_BLOCK_ITEMS = 256


@triton.jit
def _scores_kernel(q_ptr, emb_ptr, ids_ptr, seg_ptr, out_ptr, M, D, GATHER: tl.constexpr,
                   BLOCK_M: tl.constexpr, BLOCK_D: tl.constexpr):
    j = tl.program_id(0).to(tl.int64) * BLOCK_M + tl.arange(0, BLOCK_M)
    jm = j < M
    seg = tl.load(seg_ptr + j, mask=jm, other=0)
    if GATHER:
        row = tl.load(ids_ptr + j, mask=jm, other=0)
    else:
        row = j
    acc = tl.zeros([BLOCK_M], dtype=tl.float32)
    for d0 in range(0, D, BLOCK_D):
        ds = d0 + tl.arange(0, BLOCK_D)
        dm = ds < D
        m2 = jm[:, None] & dm[None, :]
        q = tl.load(q_ptr + seg[:, None] * D + ds[None, :], mask=m2, other=0.0)
        e = tl.load(emb_ptr + row[:, None] * D + ds[None, :], mask=m2, other=0.0).to(tl.float32)
        acc += tl.sum(q * e, axis=1)
    tl.store(out_ptr + j, acc, mask=jm)


@triton.jit
def _group_max_kernel(scores_ptr, slot_ptr, out_ptr, M, BLOCK: tl.constexpr):
    j = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    jm = j < M
    v = tl.load(scores_ptr + j, mask=jm, other=float("-inf"))
    slot = tl.load(slot_ptr + j, mask=jm, other=0)
    tl.atomic_max(out_ptr + slot, v, mask=jm)


# ----------------------------------------------------------------------------- host side
def _segments(ptr):
    B = len(ptr) - 1
    return torch.repeat_interleave(torch.arange(B, device=ptr.device), ptr[1:] - ptr[:-1])


def candidate_scores(q, emb, ptr, ids):
    """float32 [M] candidate scores (q float32 [B, D]; emb [M or T, D]; ids int64 [M] or None)."""
    M = int(ptr[-1])
    out = torch.empty(M, dtype=torch.float32, device=q.device)
    if M == 0:
        return out
    seg = _segments(ptr)
    D = q.shape[1]
    _scores_kernel[(triton.cdiv(M, _BLOCK_M),)](
        q, emb, ids if ids is not None else seg, seg, out, M, D, GATHER=ids is not None,
        BLOCK_M=_BLOCK_M, BLOCK_D=_BLOCK_D)
    return out


def _rank_sorted(seg, keys_desc, tie_asc, B, n, ptr_counts):
    """Positions of the top-n per segment by (keys desc, tie asc): (order, rank in segment)."""
    order = torch.argsort(tie_asc, stable=True)
    order = order[torch.argsort(keys_desc[order], descending=True, stable=True)]
    order = order[torch.argsort(seg[order], stable=True)]
    starts = torch.cumsum(ptr_counts, 0) - ptr_counts
    rank = torch.arange(len(order), device=seg.device) - starts[seg[order]]
    keep = rank < n
    return order[keep], seg[order][keep], rank[keep]


def segment_topk_from_scores(scores, ptr, n):
    B = len(ptr) - 1
    dev = scores.device
    ids = torch.full((B, n), -1, dtype=torch.int64, device=dev)
    vals = torch.full((B, n), float("-inf"), dtype=torch.float32, device=dev)
    if len(scores):
        seg = _segments(ptr)
        pos = torch.arange(len(scores), device=dev)
        order, rows, rank = _rank_sorted(seg, scores, pos, B, n, ptr[1:] - ptr[:-1])
        ids[rows, rank] = order
        vals[rows, rank] = scores[order]
    return ids, vals


def segment_max_rank(scores, groups, ptr, k):
    B = len(ptr) - 1
    dev = scores.device
    ids = torch.full((B, k), -1, dtype=torch.int64, device=dev)
    vals = torch.full((B, k), float("-inf"), dtype=torch.float32, device=dev)
    M = len(scores)
    if M == 0:
        return ids, vals
    seg = _segments(ptr)
    # one slot per distinct (query, group) pair
    pairs, slot = torch.unique(torch.stack([seg, groups]), dim=1, return_inverse=True)
    best = torch.full((pairs.shape[1],), float("-inf"), dtype=torch.float32, device=dev)
    _group_max_kernel[(triton.cdiv(M, _BLOCK_ITEMS),)](scores, slot, best, M, BLOCK=_BLOCK_ITEMS)
    present = best > float("-inf")
    pseg, pgroup, best = pairs[0][present], pairs[1][present], best[present]
    counts = torch.bincount(pseg, minlength=B)
    order, rows, rank = _rank_sorted(pseg, best, pgroup, B, k, counts)
    ids[rows, rank] = pgroup[order]
    vals[rows, rank] = best[order]
    return ids, vals


def aot_variants():
    """Every launch above, for tests/triton_aot_gate.py (see kernels/_aot.py)."""
    from rasfast.kernels._aot import FLOAT_PTRS, variant
    out = [variant(_scores_kernel, dict(q_ptr="*fp32", emb_ptr=ptr, ids_ptr="*i64",
                                        seg_ptr="*i64", out_ptr="*fp32", M="i32", D="i32"),
                   GATHER=gather, BLOCK_M=_BLOCK_M, BLOCK_D=_BLOCK_D)
           for ptr in FLOAT_PTRS.values() for gather in (False, True)]
    out.append(variant(_group_max_kernel, dict(scores_ptr="*fp32", slot_ptr="*i64",
                                               out_ptr="*fp32", M="i32"), BLOCK=_BLOCK_ITEMS))
    return out
