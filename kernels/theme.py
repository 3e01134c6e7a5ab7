"""Triton kernels for theme scoping (rasfast.ops.theme's ``triton`` backend).

Pass 1, the [B, N] distance keys (squared L2 or inner product over T, float32 math, ordered
int64 keys: smaller = nearer), has two kernels chosen by the number of queries:

- ``_keys_small_b_kernel`` (B <= 8): one program per block of corpus rows holds all queries
  (padded to QB = 2/4/8) and computes the direct (q - c)^2 sum on CUDA cores, so the corpus
  is read once per call, not once per query.
- ``_keys_dot_kernel`` (B > 8): a GEMM on tensor cores, ``tl.dot`` of a [rows x T] corpus
  tile with a [T x queries] query tile, and L2 = |q|^2 + |c|^2 - 2 q.c. The corpus tile stays
  in its storage dtype: float16/bfloat16 rows are exact, and the float32 queries are split
  into three parts of that dtype (hi + mid + lo, ~24 significant bits) so the keys are
  near-float32. float32 corpora use ``input_precision="tf32x3"`` (the same split, done by
  Triton).

Pass 2, ``_cut_kernel``: one program per query finds the K-th smallest key by radix select
(11/11/10-bit digits, tl.histogram) and the id of the last threshold-equal row in scope (ties
by lower id). After the first digit pass the rows in the selected bin are compacted into a
per-query candidate buffer (key low bits and id packed in one int64), so the remaining two
digit passes and the tie pass read the candidates instead of the [B, N] keys again (2 full
reads instead of 4). When a bin holds more rows than the buffer, the kernel falls back to
reading the keys.

Pass 3, ``_score_kernel``: one program per (query, block of rows) scores only the in-scope
rows (dense inner product, optionally fused with the theme term), -inf elsewhere.
``_gather_score_kernel``: inner products of given scope ids (scoped_dense_search).

The per-query top-k of the few best scores is finished in torch (topk + a tie-complete
candidate set ordered by (score desc, id asc)).
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from rasfast import _env

_BLOCK_N = 64
_SEL_BLOCK = 256
_SCORE_BLOCK_D = 32
SMALL_B = 8           # at most this many queries: _keys_small_b_kernel, else _keys_dot_kernel
_SMALL_BLOCK_N = 64
_SMALL_BLOCK_T = 16
_DOT_BLOCK_N = 64
_DOT_BLOCK_Q = 32
_DOT_BLOCK_T = 32
_ID_BITS = 40         # candidate = (key bits below the first digit) << 40 | row id
_CAND_MIN = 1 << 16   # candidate buffer: at least this many rows per query (or N) ...
_CAND_FRACTION = 4    # ... else N // 4; a bigger first-digit bin reads the keys instead


@triton.jit
def _to_key(v):
    # order-preserving float32 -> non-negative int64 (-0.0 == +0.0)
    v = tl.where(v == 0.0, 0.0, v)
    u = v.to(tl.int32, bitcast=True).to(tl.int64) & 0xFFFFFFFF
    return tl.where(u >= 0x80000000, 0xFFFFFFFF - u, u + 0x80000000)


# ----------------------------------------------------------------------------- pass 1
@triton.jit
def _keys_small_b_kernel(q_ptr, c_ptr, keys_ptr, B, N, T, stride_c, IP: tl.constexpr,
                         QB: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_T: tl.constexpr):
    # all B <= QB queries in one program: each corpus tile is loaded once for every query
    rows = tl.program_id(0).to(tl.int64) * BLOCK_N + tl.arange(0, BLOCK_N)
    qs = tl.arange(0, QB)
    rmask = rows < N
    qmask = qs < B
    acc = tl.zeros([BLOCK_N, QB], dtype=tl.float32)
    for t0 in range(0, T, BLOCK_T):
        ts = t0 + tl.arange(0, BLOCK_T)
        tmask = ts < T
        c = tl.load(c_ptr + rows[:, None] * stride_c + ts[None, :],
                    mask=rmask[:, None] & tmask[None, :], other=0.0).to(tl.float32)
        q = tl.load(q_ptr + qs[:, None] * T + ts[None, :],
                    mask=qmask[:, None] & tmask[None, :], other=0.0)
        if IP:
            acc += tl.sum(c[:, None, :] * q[None, :, :], axis=2)
        else:
            d = c[:, None, :] - q[None, :, :]
            acc += tl.sum(d * d, axis=2)
    if IP:
        acc = -acc
    tl.store(keys_ptr + qs[None, :].to(tl.int64) * N + rows[:, None], _to_key(acc),
             mask=rmask[:, None] & qmask[None, :])


@triton.jit
def _keys_dot_kernel(q_ptr, c_ptr, keys_ptr, B, N, T, stride_c, IP: tl.constexpr, HALF: tl.constexpr,
                     BLOCK_N: tl.constexpr, BLOCK_Q: tl.constexpr, BLOCK_T: tl.constexpr):
    # [BLOCK_N rows x BLOCK_Q queries] of q.c on tensor cores; L2 = |q|^2 + |c|^2 - 2 q.c
    rows = tl.program_id(0).to(tl.int64) * BLOCK_N + tl.arange(0, BLOCK_N)
    qs = tl.program_id(1).to(tl.int64) * BLOCK_Q + tl.arange(0, BLOCK_Q)
    rmask = rows < N
    qmask = qs < B
    acc = tl.zeros([BLOCK_N, BLOCK_Q], dtype=tl.float32)
    cn = tl.zeros([BLOCK_N], dtype=tl.float32)
    qn = tl.zeros([BLOCK_Q], dtype=tl.float32)
    for t0 in range(0, T, BLOCK_T):
        ts = t0 + tl.arange(0, BLOCK_T)
        tmask = ts < T
        c = tl.load(c_ptr + rows[:, None] * stride_c + ts[None, :],
                    mask=rmask[:, None] & tmask[None, :], other=0.0)
        q = tl.load(q_ptr + qs[None, :] * T + ts[:, None],  # [BLOCK_T, BLOCK_Q]
                    mask=tmask[:, None] & qmask[None, :], other=0.0)
        if HALF:
            # f16/bf16 values are exact in tf32 (<= 11 significant bits), so only the float32
            # queries need splitting: hi = q truncated to tf32, lo = the exact remainder.
            c = c.to(tl.float32)
            hi = (q.to(tl.int32, bitcast=True) & -8192).to(tl.float32, bitcast=True)
            acc = tl.dot(c, hi, acc, input_precision="tf32")
            acc = tl.dot(c, q - hi, acc, input_precision="tf32")
        else:
            acc = tl.dot(c, q, acc, input_precision="tf32x3")
        if not IP:
            c = c.to(tl.float32)
            cn += tl.sum(c * c, axis=1)
            qn += tl.sum(q * q, axis=0)
    if IP:
        v = -acc
    else:
        v = (qn[None, :] + cn[:, None]) - 2.0 * acc
    tl.store(keys_ptr + qs[None, :] * N + rows[:, None], _to_key(v),
             mask=rmask[:, None] & qmask[None, :])


# ----------------------------------------------------------------------------- pass 2
@triton.jit
def _load_key(src, offs, m, top, PACKED: tl.constexpr):
    """(key, row id) of src[offs]: the keys row itself, or packed candidates."""
    if PACKED:
        p = tl.load(src + offs, mask=m, other=0)
        return (p >> 40) | top, p & ((1 << 40) - 1)
    else:
        return tl.load(src + offs, mask=m, other=0), offs.to(tl.int64)


@triton.jit
def _digit_pass(src, n, top, prefix, pmask, want, PACKED: tl.constexpr, SHIFT: tl.constexpr,
                NBITS: tl.constexpr, BLOCK: tl.constexpr):
    """One radix digit: the bin of the want-th key among those matching prefix/pmask.
    Returns the narrowed (prefix, pmask, want) and how many keys the chosen bin holds."""
    hist = tl.zeros([2048], dtype=tl.int32)
    for s in range(0, n, BLOCK):
        offs = s + tl.arange(0, BLOCK)
        m = offs < n
        k, _ = _load_key(src, offs, m, top, PACKED)
        match = m & ((k & pmask) == prefix)
        digit = ((k >> SHIFT) & ((1 << NBITS) - 1)).to(tl.int32)
        hist += tl.histogram(digit, 2048, mask=match)
    bins = tl.arange(0, 2048)
    cum = tl.cumsum(hist, 0).to(tl.int64)
    sel = tl.sum((cum < want).to(tl.int32), 0)  # first bin whose cumulative count reaches want
    below = tl.sum(tl.where(bins < sel, hist, 0).to(tl.int64), 0)
    in_sel = tl.sum(tl.where(bins == sel, hist, 0).to(tl.int64), 0)
    prefix = prefix | (sel.to(tl.int64) << SHIFT)
    pmask = pmask | (((1 << NBITS) - 1) << SHIFT)
    return prefix, pmask, want - below, in_sel


@triton.jit
def _finish_cut(src, n, top, prefix, pmask, want, PACKED: tl.constexpr, BLOCK: tl.constexpr):
    """Digits 2 and 3, then the id of the want-th threshold-equal row (src in id order)."""
    prefix, pmask, want, _ = _digit_pass(src, n, top, prefix, pmask, want, PACKED, 10, 11, BLOCK)
    prefix, pmask, want, _ = _digit_pass(src, n, top, prefix, pmask, want, PACKED, 0, 10, BLOCK)
    seen = tl.zeros([], dtype=tl.int64)
    last = tl.zeros([], dtype=tl.int64) - 1
    for s in range(0, n, BLOCK):
        offs = s + tl.arange(0, BLOCK)
        m = offs < n
        k, ids = _load_key(src, offs, m, top, PACKED)
        eq = (m & (k == prefix)).to(tl.int64)
        run = tl.cumsum(eq, 0) + seen
        hit = (eq > 0) & (run == want)
        last = tl.maximum(last, tl.max(tl.where(hit, ids, -1), 0))
        seen += tl.sum(eq, 0)
    return prefix, last


@triton.jit
def _cut_kernel(keys_ptr, cand_ptr, N, K, CAP, cut_key_ptr, last_eq_ptr, BLOCK: tl.constexpr):
    b = tl.program_id(0).to(tl.int64)
    base = keys_ptr + b * N
    zero = tl.zeros([], dtype=tl.int64)
    # (K may arrive as a specialised constant, hence zero + K)
    prefix, pmask, want, in_sel = _digit_pass(base, N, zero, zero, zero, zero + K, False,
                                              21, 11, BLOCK)
    if in_sel <= CAP:
        # compact the rows of the chosen bin, in id order: (low 21 key bits) << 40 | id
        cand = cand_ptr + b * CAP
        count = tl.zeros([], dtype=tl.int64)
        for s in range(0, N, BLOCK):
            offs = s + tl.arange(0, BLOCK)
            m = offs < N
            k = tl.load(base + offs, mask=m, other=0)
            hit = m & ((k & pmask) == prefix)
            h = hit.to(tl.int64)
            pos = count + tl.cumsum(h, 0) - h
            tl.store(cand + pos, ((k & ((1 << 21) - 1)) << 40) | offs.to(tl.int64), mask=hit)
            count += tl.sum(h, 0)
        cut, last = _finish_cut(cand, in_sel, prefix, prefix, pmask, want, True, BLOCK)
    else:
        cut, last = _finish_cut(base, N, zero, prefix, pmask, want, False, BLOCK)
    tl.store(cut_key_ptr + b, cut)
    tl.store(last_eq_ptr + b, last)


# ----------------------------------------------------------------------------- pass 3
@triton.jit
def _score_kernel(qe_ptr, e_ptr, keys_ptr, cut_key_ptr, last_eq_ptr, out_ptr, N, D, stride_e, w,
                  IP: tl.constexpr, ALL: tl.constexpr, BLOCK_N: tl.constexpr,
                  BLOCK_D: tl.constexpr):
    # queries on axis 1, row blocks on axis 0 (whose limit is 2^31-1); int64 offsets
    b = tl.program_id(1).to(tl.int64)
    rows = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    rmask = rows < N
    key = tl.load(keys_ptr + b * N + rows, mask=rmask, other=0)
    if ALL:
        inside = rmask
    else:
        ck = tl.load(cut_key_ptr + b)
        le = tl.load(last_eq_ptr + b)
        inside = rmask & ((key < ck) | ((key == ck) & (rows.to(tl.int64) <= le)))
    acc = tl.zeros([BLOCK_N], dtype=tl.float32)
    for d0 in range(0, D, BLOCK_D):
        ds = d0 + tl.arange(0, BLOCK_D)
        dm = ds < D
        q = tl.load(qe_ptr + b * D + ds, mask=dm, other=0.0).to(tl.float32)
        e = tl.load(e_ptr + rows[:, None].to(tl.int64) * stride_e + ds[None, :],
                    mask=inside[:, None] & dm[None, :], other=0.0).to(tl.float32)
        acc += tl.sum(e * q[None, :], axis=1)
    if w != 0.0:
        # invert _to_key to recover the theme value (distance, or -ip)
        u = tl.where(key >= 0x80000000, key - 0x80000000, 0xFFFFFFFF - key)
        v = u.to(tl.int32).to(tl.float32, bitcast=True)
        acc = (1.0 - w) * acc + w * (-v)
    tl.store(out_ptr + b * N + rows, tl.where(inside, acc, float("-inf")), mask=rmask)


@triton.jit
def _gather_score_kernel(qe_ptr, e_ptr, ids_ptr, out_ptr, Ks, D, stride_e,
                         BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr):
    b = tl.program_id(1).to(tl.int64)
    j = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    jm = j < Ks
    ids = tl.load(ids_ptr + b * Ks + j, mask=jm, other=-1)
    valid = jm & (ids >= 0)
    acc = tl.zeros([BLOCK_N], dtype=tl.float32)
    for d0 in range(0, D, BLOCK_D):
        ds = d0 + tl.arange(0, BLOCK_D)
        dm = ds < D
        q = tl.load(qe_ptr + b * D + ds, mask=dm, other=0.0).to(tl.float32)
        e = tl.load(e_ptr + ids[:, None] * stride_e + ds[None, :], mask=valid[:, None] & dm[None, :],
                    other=0.0).to(tl.float32)
        acc += tl.sum(e * q[None, :], axis=1)
    tl.store(out_ptr + b * Ks + j, tl.where(valid, acc, float("-inf")), mask=jm)


# ----------------------------------------------------------------------------- GEMM path
@triton.jit
def _split_dot_kernel(a_ptr, c_ptr, out_ptr, cn_ptr, qn_ptr, drop_ptr, B, N, X, XL, stride_a,
                      stride_c, P: tl.constexpr, L2: tl.constexpr, TF32: tl.constexpr,
                      DROP: tl.constexpr, TAIL: tl.constexpr, BLOCK_N: tl.constexpr,
                      BLOCK_Q: tl.constexpr, BLOCK_X: tl.constexpr):
    # out[b, n] = sum_p a[p, b] . c[n] in float32 on tensor cores. float16 corpora: a holds the
    # float32 queries split into P float16 parts (rasfast/ops/theme_gemm.py) and c stays
    # float16. bfloat16 corpora (TF32): c is widened in registers (exact in tf32, 8 significant
    # bits) and a holds float32 parts exact in tf32 (hi = q truncated to tf32, lo = the rest),
    # so every product is exact and the sums float32. L2: out = qn[b] + cn[n] - 2 * dot,
    # fused, so [B, N] is written once. DROP: out = -inf where drop[b, n] (a [B, N] uint8
    # mask, laid out as out): the scope mask of theme_scoped_search, applied here so the
    # masked scores cost one byte a score more instead of a pass over [B, N].
    rows = tl.program_id(0).to(tl.int64) * BLOCK_N + tl.arange(0, BLOCK_N)
    qs = tl.program_id(1) * BLOCK_Q + tl.arange(0, BLOCK_Q)
    rmask = rows < N
    qmask = qs < B
    acc = tl.zeros([BLOCK_N, BLOCK_Q], dtype=tl.float32)
    for x0 in range(0, XL, BLOCK_X):
        xs = x0 + tl.arange(0, BLOCK_X)
        xmask = xs < XL
        c = tl.load(c_ptr + rows[:, None] * stride_c + xs[None, :],
                    mask=rmask[:, None] & xmask[None, :], other=0.0)
        if TAIL:  # the columns [X, XL) of c's padded rows count as zeros, whatever they hold
            c = tl.where((xs < X)[None, :], c, 0.0)
        if TF32:
            c = c.to(tl.float32)
        for p in tl.static_range(P):
            a = tl.load(a_ptr + (p * B + qs[None, :]).to(tl.int64) * stride_a + xs[:, None],
                        mask=xmask[:, None] & qmask[None, :], other=0.0)
            if TF32:
                acc = tl.dot(c, a, acc, input_precision="tf32")
            else:
                acc = tl.dot(c, a, acc)
    if L2:
        cn = tl.load(cn_ptr + rows, mask=rmask, other=0.0)
        qn = tl.load(qn_ptr + qs, mask=qmask, other=0.0)
        acc = (qn[None, :] + cn[:, None]) - 2.0 * acc
    at = qs[None, :].to(tl.int64) * N + rows[:, None]
    omask = rmask[:, None] & qmask[None, :]
    if DROP:
        d = tl.load(drop_ptr + at, mask=omask, other=1)
        acc = tl.where(d != 0, float("-inf"), acc)
    tl.store(out_ptr + at, acc, mask=omask)


_SPLIT_BLOCK_N = 128
_SPLIT_BLOCK_X = 64
# ptxas spills 0.8-1.4 KB per thread at 4 warps (docs/gpu.md, "Spills"), none on sm_90 at 8;
# benchmarks/gpu_theme.py times both, and 4 stays until a GPU run says otherwise
_SPLIT_WARPS = 4
# Triton specialises an integer argument divisible by 16 (and a pointer 16-byte aligned); only
# then can it prove a masked 16-bit tile's rows start on 16 bytes and load it in 16-byte
# cp.async copies. With the loop bound at RAS's T = 298 the masks are ragged, and ptxas's
# input held 128 scalar 2-byte global loads a thread per step, no cp.async, for the tiles of
# the theme values (docs/gpu.md, "The theme values' loads").
_X_ALIGN = 16


def loop_width(c, X: int) -> int:
    """The columns the kernel streams of each row of ``c`` [N, >= X]: X rounded up to 16
    where c's rows are padded that far (row stride a multiple of 16 elements, the padding
    inside c's storage), so every tile loads whole; else X. RASFAST_THEME_WHOLE_ROWS=0: X
    (the width before; benchmarks/gpu_theme.py times both)."""
    w = -(-X // _X_ALIGN) * _X_ALIGN
    s = c.stride(0) if c.dim() == 2 else 0
    if _env.get("RASFAST_THEME_WHOLE_ROWS") == "0":  # the masked width (benchmarks)
        return X
    if w == X or c.shape[0] == 0 or c.stride(1) != 1 or s % _X_ALIGN or s < w:
        return X
    last = c.storage_offset() + (c.shape[0] - 1) * s + w  # one past the last column read
    return w if last * c.element_size() <= c.untyped_storage().nbytes() else X


@triton.jit
def _split_queries_kernel(q_ptr, parts_ptr, qn_ptr, B, X, XL, TF32: tl.constexpr,
                          BLOCK: tl.constexpr):
    # one program a query: split_parts' two parts of q[b] (zeros past X, up to the streamed
    # width XL) and |q[b]|^2, the L2 epilogue's query term
    b = tl.program_id(0).to(tl.int64)
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    for x0 in range(0, XL, BLOCK):
        xs = x0 + tl.arange(0, BLOCK)
        v = tl.load(q_ptr + b * X + xs, mask=xs < X, other=0.0)
        acc += v * v
        if TF32:
            hi = (v.to(tl.int32, bitcast=True) & -8192).to(tl.float32, bitcast=True)
            lo = v - hi
        else:
            hi = v.to(tl.float16)
            lo = (v - hi.to(tl.float32)).to(tl.float16)
        m = xs < XL
        tl.store(parts_ptr + b * XL + xs, hi, mask=m)
        tl.store(parts_ptr + (B + b) * XL + xs, lo, mask=m)
    tl.store(qn_ptr + b, tl.sum(acc, axis=0))


_SPLIT_Q_BLOCK = 128


def split_queries(q, dtype, width: int):
    """(parts [2, B, width], qn [B]) in one launch: :func:`split_parts` of float32 q [B, X]
    padded with zeros to ``width`` >= X (the streamed width, :func:`loop_width`), and
    |q_b|^2 in float32. On a GPU's per-question call this replaces the five torch ops of
    split_parts, the padding and the two of the norms (eighteenth session: host time)."""
    B, X = q.shape
    assert q.dtype == torch.float32 and q.is_contiguous() and width >= X
    tf32 = dtype == torch.bfloat16
    parts = torch.empty((2, B, width), dtype=torch.float32 if tf32 else torch.float16,
                        device=q.device)
    qn = torch.empty(B, dtype=torch.float32, device=q.device)
    if B:
        _split_queries_kernel[(B,)](q, parts, qn, B, X, width, TF32=tf32, BLOCK=_SPLIT_Q_BLOCK)
    return parts, qn


def split_parts(q, dtype):
    """[P, B, X] parts of float32 q whose products with a ``dtype`` corpus the kernel sums to
    ~float32: float16 parts for a float16 corpus, tf32-exact float32 parts for bfloat16."""
    if dtype == torch.float16:
        hi = q.to(torch.float16)
        return torch.stack([hi, (q - hi.float()).to(torch.float16)])
    hi = (q.view(torch.int32) & -8192).view(torch.float32)
    return torch.stack([hi, q - hi])


def split_dot(parts, c, cn=None, qn=None, drop=None, zero_tail: bool = False):
    """[B, N] float32: sum of parts[p] @ c.T (parts from :func:`split_parts`), or with cn [N]
    and qn [B] the squared L2 distance qn + cn - 2 * that; with drop (bool [B, N],
    contiguous) -inf where drop is True. c float16/bfloat16 [N, X] with unit column stride;
    parts [P, B, >= X] (zeros past X: :func:`split_queries` pads them to the streamed width).
    Rows padded to a stride that is a multiple of 16 elements (rasfast.ops.theme_gemm.pad_rows)
    stream in whole 16-byte copies (:func:`loop_width`); the padding columns count as zeros,
    read as such when ``zero_tail`` says they hold zeros (pad_rows' own storage), else zeroed
    in registers."""
    P, B, W = parts.shape
    N, X = c.shape
    assert c.stride(1) == 1 or X == 1, "c: columns must be contiguous"
    assert W >= X, "parts: as wide as c's rows at least (zeros past them)"
    out = torch.empty((B, N), dtype=torch.float32, device=c.device)
    bq = min(64, max(16, triton.next_power_of_2(B)))
    l2 = cn is not None
    if drop is not None:
        assert drop.dtype == torch.bool and drop.shape == (B, N) and drop.is_contiguous(), \
            "drop: a contiguous bool [B, N] mask"
        drop = drop.view(torch.uint8)
    XL = loop_width(c, X)
    if W < XL:  # the queries' parts padded with zeros to the streamed width
        parts = torch.nn.functional.pad(parts, (0, XL - W))
    parts = parts.contiguous()
    grid = (triton.cdiv(N, _SPLIT_BLOCK_N), triton.cdiv(B, bq))
    _split_dot_kernel[grid](parts, c, out, cn if l2 else out, qn if l2 else out,
                            out if drop is None else drop, B, N, X, XL, parts.shape[2],
                            c.stride(0), P=P, L2=l2, TF32=c.dtype == torch.bfloat16,
                            DROP=drop is not None, TAIL=XL != X and not zero_tail,
                            BLOCK_N=_SPLIT_BLOCK_N, BLOCK_Q=bq,
                            BLOCK_X=_SPLIT_BLOCK_X, num_warps=_SPLIT_WARPS, num_stages=3)
    return out


# ----------------------------------------------------------------------------- host side
def _keys(q, c, metric):
    """[B, N] int64 keys: the small-B kernel for B <= SMALL_B, else the tensor-core one."""
    B, T = q.shape
    N = c.shape[0]
    keys = torch.empty((B, N), dtype=torch.int64, device=q.device)
    ip = metric == "ip"
    if B <= SMALL_B:
        qb = max(2, triton.next_power_of_2(B))
        _keys_small_b_kernel[(triton.cdiv(N, _SMALL_BLOCK_N),)](
            q, c, keys, B, N, T, c.stride(0), IP=ip, QB=qb, BLOCK_N=_SMALL_BLOCK_N,
            BLOCK_T=_SMALL_BLOCK_T)
    else:
        grid = (triton.cdiv(N, _DOT_BLOCK_N), triton.cdiv(B, _DOT_BLOCK_Q))
        _keys_dot_kernel[grid](q, c, keys, B, N, T, c.stride(0), IP=ip, HALF=(c.dtype != torch.float32),
                               BLOCK_N=_DOT_BLOCK_N, BLOCK_Q=_DOT_BLOCK_Q, BLOCK_T=_DOT_BLOCK_T)
    return keys


def candidate_capacity(N: int) -> int:
    """Rows per query of the candidate buffer that the cut compacts into."""
    return min(N, max(_CAND_MIN, N // _CAND_FRACTION))


def _cuts(keys, K, cap=None):
    B, N = keys.shape
    cap = candidate_capacity(N) if cap is None else cap
    cand = torch.empty((B, cap), dtype=torch.int64, device=keys.device)
    cut = torch.empty(B, dtype=torch.int64, device=keys.device)
    last = torch.empty(B, dtype=torch.int64, device=keys.device)
    _cut_kernel[(B,)](keys, cand, N, K, cap, cut, last, BLOCK=_SEL_BLOCK)
    return cut, last


def _in_scope(keys, K):
    B, N = keys.shape
    if K >= N:
        return torch.ones_like(keys, dtype=torch.bool)
    cut, last = _cuts(keys, K)
    ids = torch.arange(N, device=keys.device)
    return (keys < cut[:, None]) | ((keys == cut[:, None]) & (ids[None, :] <= last[:, None]))


def _top_k(scores, n_valid, k, col_ids=None):
    """(ids, scores)[B, k] by (score desc, id asc) from a [B, M] score matrix whose invalid
    entries are -inf. Column j is row id j, or col_ids[b, j] when given."""
    B, M = scores.shape
    out_i = torch.full((B, k), -1, dtype=torch.int64, device=scores.device)
    out_s = torch.full((B, k), float("-inf"), dtype=torch.float32, device=scores.device)
    for b in range(B):
        m = int(min(k, int(n_valid[b])))
        if m == 0:
            continue
        kth = torch.topk(scores[b], m).values[-1]
        cand = ((scores[b] >= kth) & (scores[b] > float("-inf"))).nonzero().flatten()
        ids = cand if col_ids is None else col_ids[b][cand]
        by_id = torch.argsort(ids)  # then a stable sort by score keeps ties in id order
        ids, vals = ids[by_id], scores[b][cand][by_id]
        order = torch.sort(vals, descending=True, stable=True).indices[:m]
        out_i[b, :m] = ids[order]
        out_s[b, :m] = vals[order]
    return out_i, out_s


def theme_scope(q, c, K, metric):
    keys = _keys(q, c, metric)
    inside = _in_scope(keys, K)
    B = q.shape[0]
    ids = inside.nonzero()[:, 1].view(B, K)  # ascending id within each query
    order = torch.sort(torch.gather(keys, 1, ids), dim=1, stable=True).indices
    return torch.gather(ids, 1, order).contiguous()


def theme_scoped_search(q, qe, c, e, K, k, w, metric):
    keys = _keys(q, c, metric)
    B, N = keys.shape
    D = e.shape[1]
    scores = torch.empty((B, N), dtype=torch.float32, device=q.device)
    if K >= N:
        cut = last = keys  # unused when ALL
    else:
        cut, last = _cuts(keys, K)
    _score_kernel[(triton.cdiv(N, _BLOCK_N), B)](qe, e, keys, cut, last, scores, N, D, e.stride(0), float(w),
                                                IP=(metric == "ip"), ALL=(K >= N),
                                                BLOCK_N=_BLOCK_N, BLOCK_D=_SCORE_BLOCK_D)
    return _top_k(scores, torch.full((B,), K), k)


def scoped_dense_search(qe, e, scope, k):
    B, Ks = scope.shape
    scores = torch.empty((B, Ks), dtype=torch.float32, device=qe.device)
    _gather_score_kernel[(triton.cdiv(Ks, _BLOCK_N), B)](qe, e, scope, scores, Ks, e.shape[1], e.stride(0),
                                                        BLOCK_N=_BLOCK_N, BLOCK_D=_SCORE_BLOCK_D)
    return _top_k(scores, (scope >= 0).sum(1), k, col_ids=scope)


# ----------------------------------------------------------------------------- AOT check
def aot_variants():
    """Every launch above, for tests/triton_aot_gate.py (see kernels/_aot.py)."""
    from ._aot import FLOAT_PTRS, variant
    out = []
    for dt, cptr in FLOAT_PTRS.items():  # corpus (and corpus_emb) storage dtype
        for ip in (False, True):
            for qb in (2, 4, 8):
                out.append(variant(
                    _keys_small_b_kernel, dict(q_ptr="*fp32", c_ptr=cptr, keys_ptr="*i64",
                                               B="i32", N="i32", T="i32", stride_c="i32"),
                    IP=ip, QB=qb, BLOCK_N=_SMALL_BLOCK_N, BLOCK_T=_SMALL_BLOCK_T))
            out.append(variant(
                _keys_dot_kernel, dict(q_ptr="*fp32", c_ptr=cptr, keys_ptr="*i64", B="i32",
                                       N="i32", T="i32", stride_c="i32"),
                IP=ip, HALF=dt != "float32", BLOCK_N=_DOT_BLOCK_N, BLOCK_Q=_DOT_BLOCK_Q,
                BLOCK_T=_DOT_BLOCK_T))
            for all_rows in (False, True):
                out.append(variant(
                    _score_kernel, dict(qe_ptr="*fp32", e_ptr=cptr, keys_ptr="*i64",
                                        cut_key_ptr="*i64", last_eq_ptr="*i64", out_ptr="*fp32",
                                        N="i32", D="i32", stride_e="i32", w="fp32"),
                    IP=ip, ALL=all_rows, BLOCK_N=_BLOCK_N, BLOCK_D=_SCORE_BLOCK_D))
        out.append(variant(
            _gather_score_kernel, dict(qe_ptr="*fp32", e_ptr=cptr, ids_ptr="*i64",
                                       out_ptr="*fp32", Ks="i32", D="i32", stride_e="i32"),
            BLOCK_N=_BLOCK_N, BLOCK_D=_SCORE_BLOCK_D))
    for dt, cptr in FLOAT_PTRS.items():
        if dt == "float32":
            continue
        # theme values (L2), dense products (not), dense products under the scope mask
        # TAIL: rows padded past X whose padding is not known to be zeros
        for l2, drop in ((False, False), (True, False), (False, True)):
            for bq in (16, 32, 64):
                for tail in (False, True):
                    out.append(variant(
                        _split_dot_kernel, dict(a_ptr=cptr if dt == "float16" else "*fp32",
                                                c_ptr=cptr, out_ptr="*fp32", cn_ptr="*fp32",
                                                qn_ptr="*fp32",
                                                drop_ptr="*u8" if drop else "*fp32", B="i32",
                                                N="i32", X="i32", XL="i32", stride_a="i32",
                                                stride_c="i32"),
                        divisible=("XL", "stride_a", "stride_c"),  # rows padded to 16 (loop_width)
                        P=2, L2=l2, TF32=dt == "bfloat16", DROP=drop, TAIL=tail,
                        BLOCK_N=_SPLIT_BLOCK_N, BLOCK_Q=bq, BLOCK_X=_SPLIT_BLOCK_X))
    for tf32 in (False, True):
        out.append(variant(
            _split_queries_kernel, dict(q_ptr="*fp32", parts_ptr="*fp32" if tf32 else "*fp16",
                                        qn_ptr="*fp32", B="i32", X="i32", XL="i32"),
            TF32=tf32, BLOCK=_SPLIT_Q_BLOCK))
    cut_types = dict(keys_ptr="*i64", cand_ptr="*i64", N="i32", CAP="i32", cut_key_ptr="*i64",
                     last_eq_ptr="*i64")
    out.append(variant(_cut_kernel, dict(cut_types, K="i32"), BLOCK=_SEL_BLOCK))
    out.append(variant(_cut_kernel, cut_types, K=1, BLOCK=_SEL_BLOCK))  # triton specialises 1
    return out
