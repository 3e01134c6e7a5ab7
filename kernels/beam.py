"""Triton scoring for triple_beam_search: candidate dot products and running sums.

The selection logic (per-beam rank, decay, global top-b) is the torch reference's
(rasfast/reference/beam.py); Triton computes, for every candidate c with parent beam p,
``w = u[p] + emb[c]`` (the new running sum, written out), ``dot(q, w)`` and ``dot(w, w)``
in float32, BLOCK_C candidates per program.
"""
import torch
import triton
import triton.language as tl

from rasfast.reference.beam import cosine_from_parts


BLOCK_C = 16
MAX_BLOCK_D = 256


@triton.jit
def _score_kernel(emb_ptr, u_ptr, parent_ptr, cand_ptr, q_ptr, w_ptr, dot_ptr, nn_ptr, C, D,
                  HAS_U: tl.constexpr, BLOCK_C: tl.constexpr, BLOCK_D: tl.constexpr):
    pid = tl.program_id(0)
    rows = pid * BLOCK_C + tl.arange(0, BLOCK_C)
    rmask = rows < C
    cand = tl.load(cand_ptr + rows, mask=rmask, other=0).to(tl.int64)
    if HAS_U:
        par = tl.load(parent_ptr + rows, mask=rmask, other=0).to(tl.int64)
    dot = tl.zeros([BLOCK_C], dtype=tl.float32)
    nn = tl.zeros([BLOCK_C], dtype=tl.float32)
    for k0 in range(0, D, BLOCK_D):
        cols = k0 + tl.arange(0, BLOCK_D)
        cmask = cols < D
        m2 = rmask[:, None] & cmask[None, :]
        w = tl.load(emb_ptr + cand[:, None] * D + cols[None, :], mask=m2, other=0.0).to(tl.float32)
        if HAS_U:
            w = tl.load(u_ptr + par[:, None] * D + cols[None, :], mask=m2, other=0.0) + w
        qv = tl.load(q_ptr + cols, mask=cmask, other=0.0)
        tl.store(w_ptr + rows[:, None].to(tl.int64) * D + cols[None, :], w, mask=m2)
        dot += tl.sum(w * qv[None, :], axis=1)
        nn += tl.sum(w * w, axis=1)
    tl.store(dot_ptr + rows, dot, mask=rmask)
    tl.store(nn_ptr + rows, nn, mask=rmask)


def score_candidates(emb: torch.Tensor, u, parent, cand: torch.Tensor, q: torch.Tensor):
    """(dot[C], nn[C], w[C, D]) with w = u[parent] + emb[cand] (u None: w = emb[cand])."""
    C, D = cand.numel(), emb.shape[1]
    w = torch.empty((C, D), dtype=torch.float32, device=emb.device)
    dot = torch.empty(C, dtype=torch.float32, device=emb.device)
    nn = torch.empty(C, dtype=torch.float32, device=emb.device)
    if C == 0:
        return dot, nn, w
    block_c = BLOCK_C
    block_d = min(triton.next_power_of_2(D), MAX_BLOCK_D)
    has_u = u is not None
    _score_kernel[(triton.cdiv(C, block_c),)](
        emb, u.contiguous() if has_u else w, parent.contiguous() if has_u else cand,
        cand.contiguous(), q.contiguous(), w, dot, nn, C, D,
        HAS_U=has_u, BLOCK_C=block_c, BLOCK_D=block_d)
    return dot, nn, w


class TritonSumScorer:
    """scoring="sum" with Triton dot products; same interface as reference.beam.SumScorer."""

    def __init__(self, emb: torch.Tensor, q: torch.Tensor, qnorm: torch.Tensor):
        self.emb, self.q, self.qnorm = emb.contiguous(), q.float().contiguous(), qnorm.float()

    def start(self, i, seeds):
        dot, nn, w = score_candidates(self.emb, None, None, seeds, self.q[i])
        return cosine_from_parts(dot, nn, self.qnorm[i]), w

    def extend(self, i, state, seqs, parent, cand):
        dot, nn, w = score_candidates(self.emb, state, parent, cand, self.q[i])
        return cosine_from_parts(dot, nn, self.qnorm[i]), w


# constexprs that follow the user's shape: the variants list their extremes and a typical value
AOT_SIZE_CONSTEXPRS = {"_score_kernel": ("BLOCK_D",)}


def aot_variants():
    """Every launch above, for tests/triton_aot_gate.py (see kernels/_aot.py). BLOCK_D follows
    D: every dtype and HAS_U case at the largest (256), and 1 and 32 (float32)."""
    from ._aot import FLOAT_PTRS, variant

    def one(ptr, has_u, block_d, cand="*i64"):  # candidate and seed ids arrive as int64
        # without u the host passes w and cand in place of u_ptr and parent_ptr
        return variant(_score_kernel, dict(emb_ptr=ptr, u_ptr="*fp32",
                                           parent_ptr="*i64" if has_u else cand, cand_ptr=cand,
                                           q_ptr="*fp32", w_ptr="*fp32", dot_ptr="*fp32",
                                           nn_ptr="*fp32", C="i32", D="i32"),
                       HAS_U=has_u, BLOCK_C=BLOCK_C, BLOCK_D=block_d)

    out = [one(ptr, has_u, MAX_BLOCK_D) for ptr in FLOAT_PTRS.values() for has_u in (False, True)]
    out += [one("*fp32", True, bd) for bd in (1, 32)]
    return out
