"""theme_scope / scoped_dense_search / theme_scoped_search: every backend vs the torch reference.

Two kinds of parity:
- exact: small-integer data, where every formula (direct (x-y)^2, norm expansion, any
  summation order) is exact in float32, so results must equal the reference bit for bit,
  including the id tie-breaks (small integers tie a lot; rows are also duplicated);
- tolerant: random float data in all storage dtypes, checked with
  rasfast.reference.theme_check (disagreement allowed only within tol of the K-th distance).
"""
import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from backends_util import cpu_backends, gpu_backends
from conftest import EMULATED, GPU_DEVICE, cuda_kernels, gpu

import rasfast
from rasfast.reference.theme_check import check_scoped_search, check_theme_scope

DTYPES = (torch.float32, torch.float16, torch.bfloat16)
CPU = ["cpu"]
TRITON = [b for b in cpu_backends() if b == "triton"]


def int_data(B, N, T, D, dtype=torch.float32, seed=0, dup=True):
    """Small integers (exact in every dtype and formula); some corpus rows duplicated."""
    g = torch.Generator().manual_seed(seed)
    q = torch.randint(0, 3, (B, T), generator=g).to(dtype)
    c = torch.randint(0, 3, (N, T), generator=g).to(dtype)
    qe = torch.randint(-2, 3, (B, D), generator=g).to(dtype)
    e = torch.randint(-2, 3, (N, D), generator=g).to(dtype)
    if dup and N >= 4:
        src = torch.randint(0, N, (N // 3,), generator=g)
        dst = torch.randint(0, N, (N // 3,), generator=g)
        c[dst] = c[src]
        e[dst] = e[src]
    return q, qe, c, e


def float_data(B, N, T, D, dtype=torch.float32, seed=0):
    g = torch.Generator().manual_seed(seed)

    def unit(x):
        return (x / x.norm(dim=1, keepdim=True)).to(dtype)

    q = unit(torch.rand(B, T, generator=g))
    c = unit(torch.rand(N, T, generator=g))
    c[N // 2] = c[0]  # an exact duplicate row
    qe = unit(torch.randn(B, D, generator=g))
    e = unit(torch.randn(N, D, generator=g))
    return q, qe, c, e


def ref_scope(q, c, K, metric):
    return rasfast.theme_scope(q, c, K, metric, backend="torch")


def ref_fused(q, qe, c, e, K, k, w, metric):
    return rasfast.theme_scoped_search(q, qe, c, e, K, k, w, metric, backend="torch")


# --------------------------------------------------------------------------- exact parity
EXACT_CASES = [  # B, N, T, D, K, k
    (3, 50, 7, 5, 8, 3),
    (5, 130, 17, 33, 40, 10),     # N crosses the 64-row tile, B not a multiple of 4
    (1, 1, 3, 2, 1, 1),           # N = 1
    (2, 3, 4, 3, 10, 5),          # K >= N, k > N
    (4, 200, 298, 16, 20, 25),    # k > K, T = 298
    (6, 2100, 9, 8, 700, 7),      # crosses the 1024-row scoring chunks
    (70, 300, 5, 4, 40, 3),       # B > 64: the cpu scores queries in blocks of 64 (masks)
]


@pytest.mark.parametrize("backend", CPU)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("case", EXACT_CASES)
def test_exact_parity(backend, dtype, case):
    B, N, T, D, K, k = case
    q, qe, c, e = int_data(B, N, T, D, dtype, seed=N)
    for metric in ("l2", "ip"):
        want = ref_scope(q, c, K, metric)
        assert torch.equal(rasfast.theme_scope(q, c, K, metric, backend=backend), want)
        for w in (0.0, 0.5):
            wi, ws = ref_fused(q, qe, c, e, K, k, w, metric)
            gi, gs = rasfast.theme_scoped_search(q, qe, c, e, K, k, w, metric, backend=backend)
            assert torch.equal(gi, wi), (metric, w)
            assert torch.equal(gs, ws), (metric, w)
        scope = want
        wi, ws = rasfast.scoped_dense_search(qe, e, scope, k, backend="torch")
        gi, gs = rasfast.scoped_dense_search(qe, e, scope, k, backend=backend)
        assert torch.equal(gi, wi) and torch.equal(gs, ws)


def test_every_cpu_simd_variant():
    """The cpu kernels are compiled for AVX-512, AVX2 and SSE2 and pick one at run time; run
    the exact parity and a tolerant case on every variant this CPU supports."""
    mod = rasfast.dispatch.cpu_module()
    best = mod.theme_simd_level()
    try:
        for level in mod.theme_simd_variants():
            mod.theme_set_simd(level)
            for case in (EXACT_CASES[0], EXACT_CASES[1], EXACT_CASES[4]):
                test_exact_parity("cpu", torch.float32, case)
            test_exact_parity("cpu", torch.bfloat16, EXACT_CASES[1])
            test_float_parity_with_tolerance("cpu", torch.float16, FLOAT_CASES[0], "l2")
    finally:
        mod.theme_set_simd(best)
    with pytest.raises(ValueError):
        mod.theme_set_simd("neon")


# The cpu cut for N >= 131072 brackets the K-th key with a strided sample and falls back to
# a radix select when the bracket misses; pass 2 splits rows into per-thread ranges and
# 64-row mask tiles. Tiny integer vectors (T=2, values 0..2) give only a few distinct keys,
# so the threshold key is shared by tens of thousands of rows spread over every range.
BIG_N = 140_003


@pytest.mark.parametrize("dtype", DTYPES)
def test_large_n_threshold_ties_across_ranges(dtype):
    q, qe, c, e = int_data(5, BIG_N, 2, 3, dtype, seed=7, dup=False)
    for metric in ("l2", "ip"):
        for K, k, w in ((50_000, 10, 0.0), (50_000, 10, 0.5), (BIG_N - 1, 4, 0.0), (1, 1, 0.5)):
            wi, ws = ref_fused(q, qe, c, e, K, k, w, metric)
            gi, gs = rasfast.theme_scoped_search(q, qe, c, e, K, k, w, metric, backend="cpu")
            assert torch.equal(gi, wi), (metric, K, w)
            assert torch.equal(gs, ws), (metric, K, w)


def test_large_n_unrepresentative_sample_falls_back_exactly():
    """Rows at the sample positions (every 8th at N = 131072) are far, all others near, so the
    sample's bracket misses the K-th key; the radix fallback must give the same result."""
    N, K, k = 131_072, 50_000, 7
    q, qe, c, e = int_data(3, N, 3, 4, seed=3, dup=False)
    c[:] = 0
    c[::8] = 2
    c[5::13] = 1  # some mid rows off the sample positions
    for metric in ("l2", "ip"):
        wi, ws = ref_fused(q, qe, c, e, K, k, 0.0, metric)
        gi, gs = rasfast.theme_scoped_search(q, qe, c, e, K, k, 0.0, metric, backend="cpu")
        assert torch.equal(gi, wi) and torch.equal(gs, ws), metric


def test_large_n_float_tolerance():
    q, qe, c, e = float_data(4, BIG_N, 16, 8)
    for metric in ("l2", "ip"):
        gi, gs = rasfast.theme_scoped_search(q, qe, c, e, 3_000, 9, 0.1, metric, backend="cpu")
        check_scoped_search(gi, gs, q, qe, c, e, 3_000, 9, 0.1, metric)


@pytest.mark.parametrize("backend", CPU)
def test_all_rows_identical_ties_by_id(backend):
    """Every corpus row equal: the scope is ids 0..K-1 and the top-k is 0..k-1."""
    q = torch.rand(3, 11)
    c = torch.rand(1, 11).repeat(100, 1)
    e = torch.rand(1, 6).repeat(100, 1)
    qe = torch.rand(3, 6)
    for metric in ("l2", "ip"):
        ids = rasfast.theme_scope(q, c, 30, metric, backend=backend)
        assert torch.equal(ids, torch.arange(30).repeat(3, 1))
        gi, _ = rasfast.theme_scoped_search(q, qe, c, e, 30, 5, 0.1, metric, backend=backend)
        assert torch.equal(gi, torch.arange(5).repeat(3, 1))


@pytest.mark.parametrize("backend", CPU)
def test_scope_padding_and_minus_one(backend):
    q, qe, c, e = int_data(2, 20, 5, 4)
    scope = torch.tensor([[3, -1, 7, 1, -1], [-1, -1, -1, -1, -1]])
    gi, gs = rasfast.scoped_dense_search(qe, e, scope, 6, backend=backend)
    wi, ws = rasfast.scoped_dense_search(qe, e, scope, 6, backend="torch")
    assert torch.equal(gi, wi) and torch.equal(gs, ws)
    assert (gi[0, 3:] == -1).all() and torch.isneginf(gs[0, 3:]).all()
    assert (gi[1] == -1).all()
    # int32 scope ids are accepted too
    gi32, _ = rasfast.scoped_dense_search(qe, e, scope.int(), 6, backend=backend)
    assert torch.equal(gi32, wi)


# --------------------------------------------------------------------------- tolerant parity
FLOAT_CASES = [(4, 300, 298, 384, 60, 10), (1, 97, 13, 7, 96, 100), (7, 1500, 31, 65, 400, 3)]


@pytest.mark.parametrize("backend", CPU)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("case", FLOAT_CASES)
@pytest.mark.parametrize("metric", ["l2", "ip"])
def test_float_parity_with_tolerance(backend, dtype, case, metric):
    B, N, T, D, K, k = case
    q, qe, c, e = float_data(B, N, T, D, dtype, seed=B * N)
    ids = rasfast.theme_scope(q, c, K, metric, backend=backend)
    check_theme_scope(ids, q, c, K, metric)
    for w in (0.0, 0.1):
        gi, gs = rasfast.theme_scoped_search(q, qe, c, e, K, k, w, metric, backend=backend)
        check_scoped_search(gi, gs, q, qe, c, e, K, k, w, metric)
    gi, gs = rasfast.scoped_dense_search(qe, e, ids, k, backend=backend)
    check_scoped_search(gi, gs, None, qe, None, e, K, k, scope_ids=ids)


@given(B=st.integers(1, 6), N=st.integers(1, 300), T=st.integers(1, 40), D=st.integers(1, 40),
       K=st.integers(1, 320), k=st.integers(1, 30), dtype=st.sampled_from(DTYPES),
       metric=st.sampled_from(["l2", "ip"]), w=st.sampled_from([0.0, 0.1, 1.0]),
       seed=st.integers(0, 2**31 - 1), exact=st.booleans())
def test_random_shapes_cpu(B, N, T, D, K, k, dtype, metric, w, seed, exact):
    """Random sizes around every boundary: exact equality on integer data, the tolerance rule
    on float data."""
    if exact:
        q, qe, c, e = int_data(B, N, T, D, dtype, seed=seed)
        want = ref_fused(q, qe, c, e, K, k, 0.5 if w else 0.0, metric)
        got = rasfast.theme_scoped_search(q, qe, c, e, K, k, 0.5 if w else 0.0, metric, backend="cpu")
        assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])
        assert torch.equal(rasfast.theme_scope(q, c, K, metric, backend="cpu"), ref_scope(q, c, K, metric))
    else:
        q, qe, c, e = float_data(B, N, T, D, dtype, seed=seed)
        gi, gs = rasfast.theme_scoped_search(q, qe, c, e, K, k, w, metric, backend="cpu")
        check_scoped_search(gi, gs, q, qe, c, e, K, k, w, metric)
        check_theme_scope(rasfast.theme_scope(q, c, K, metric, backend="cpu"), q, c, K, metric)


def test_checker_rejects_wrong_results():
    """The tolerance checks must be able to fail."""
    q, qe, c, e = float_data(2, 200, 9, 5)
    ids = ref_scope(q, c, 20, "l2")
    bad = ids.clone()
    bad[0, 0] = ref_scope(q, c, 200, "l2")[0, -1]  # the farthest row
    with pytest.raises(AssertionError):
        check_theme_scope(bad, q, c, 20)
    gi, gs = ref_fused(q, qe, c, e, 20, 5, 0.0, "l2")
    with pytest.raises(AssertionError):
        check_scoped_search(gi.flip(1), gs.flip(1), q, qe, c, e, 20, 5)
    with pytest.raises(AssertionError):
        check_scoped_search(gi, gs + 0.1, q, qe, c, e, 20, 5)


def test_numpy_in_numpy_out():
    q, qe, c, e = (x.numpy() for x in float_data(3, 100, 8, 6))
    ids = rasfast.theme_scope(q, c, 10)
    assert isinstance(ids, np.ndarray) and ids.dtype == np.int64 and ids.shape == (3, 10)
    gi, gs = rasfast.theme_scoped_search(q, qe, c, e, 10, 4)
    assert isinstance(gi, np.ndarray) and gs.dtype == np.float32
    gi2, _ = rasfast.scoped_dense_search(qe, e, ids, 4)
    assert isinstance(gi2, np.ndarray)


def test_mixed_dtypes_and_empty_batch():
    q, qe, c, e = int_data(3, 40, 6, 5)
    want = ref_fused(q, qe, c, e, 10, 3, 0.0, "l2")
    got = rasfast.theme_scoped_search(q.half(), qe, c.bfloat16(), e.half(), 10, 3, backend="cpu")
    assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])
    empty = rasfast.theme_scoped_search(q[:0], qe[:0], c, e, 10, 3, backend="cpu")
    assert empty[0].shape == (0, 3) and empty[1].shape == (0, 3)
    assert rasfast.theme_scope(q[:0], c, 100, backend="cpu").shape == (0, 40)


# --------------------------------------------------------------------------- triton (tiny)
@pytest.mark.parametrize("backend", TRITON)
def test_triton_tiny(backend):
    for dtype in DTYPES:
        q, qe, c, e = int_data(3, 37, 5, 6, dtype, seed=3)
        for metric in ("l2", "ip"):
            assert torch.equal(rasfast.theme_scope(q, c, 9, metric, backend=backend),
                               ref_scope(q, c, 9, metric))
            wi, ws = ref_fused(q, qe, c, e, 9, 4, 0.5, metric)
            gi, gs = rasfast.theme_scoped_search(q, qe, c, e, 9, 4, 0.5, metric, backend=backend)
            assert torch.equal(gi, wi) and torch.equal(gs, ws)
    q, qe, c, e = float_data(2, 50, 7, 9, seed=5)
    gi, gs = rasfast.theme_scoped_search(q, qe, c, e, 60, 70, 0.1, "l2", backend=backend)
    check_scoped_search(gi, gs, q, qe, c, e, 60, 70, 0.1, "l2")
    q, qe, c, e = float_data(2, 300, 7, 9, seed=6)
    for metric in ("l2", "ip"):
        check_theme_scope(rasfast.theme_scope(q, c, 40, metric, backend=backend), q, c, 40, metric)
        gi, gs = rasfast.theme_scoped_search(q, qe, c, e, 40, 5, 0.1, metric, backend=backend)
        check_scoped_search(gi, gs, q, qe, c, e, 40, 5, 0.1, metric)
    scope = ref_scope(q, c, 12, "l2")
    gi, gs = rasfast.scoped_dense_search(qe, e, scope, 5, backend=backend)
    wi, ws = rasfast.scoped_dense_search(qe, e, scope, 5, backend="torch")
    assert torch.equal(gi, wi)
    assert torch.allclose(gs, ws, atol=1e-5)


# --------------------------------------------------------------------------- GPU
@cuda_kernels
@pytest.mark.parametrize("path", ["kernel", "gemm", "gemm+gather"])
@pytest.mark.parametrize("backend", gpu_backends())
@pytest.mark.parametrize("dtype", DTYPES)
def test_gpu_parity(backend, dtype, path, monkeypatch):
    """Every cuda path (the fused kernel, the GEMM path of rasfast/ops/theme_gemm.py, and the
    GEMM scope with the gather kernel's scores) against the reference; triton ignores it."""
    monkeypatch.setenv("RASFAST_THEME_PATH", path)
    for case in EXACT_CASES:
        B, N, T, D, K, k = case
        q, qe, c, e = (x.to(GPU_DEVICE) for x in int_data(B, N, T, D, dtype, seed=N))
        for metric in ("l2", "ip"):
            want = ref_scope(q, c, K, metric)
            assert torch.equal(rasfast.theme_scope(q, c, K, metric, backend=backend), want)
            wi, ws = ref_fused(q, qe, c, e, K, k, 0.5, metric)
            gi, gs = rasfast.theme_scoped_search(q, qe, c, e, K, k, 0.5, metric, backend=backend)
            assert torch.equal(gi, wi) and torch.equal(gs, ws)
            wi, ws = rasfast.scoped_dense_search(qe, e, want, k, backend="torch")
            gi, gs = rasfast.scoped_dense_search(qe, e, want, k, backend=backend)
            assert torch.equal(gi, wi) and torch.equal(gs, ws)
    q, qe, c, e = (x.to(GPU_DEVICE) for x in float_data(5, 5000, 298, 384 if not EMULATED else 64, dtype))
    gi, gs = rasfast.theme_scoped_search(q, qe, c, e, 700, 10, 0.1, backend=backend)
    check_scoped_search(gi.cpu(), gs.cpu(), q.cpu(), qe.cpu(), c.cpu(), e.cpu(), 700, 10, 0.1)
    check_theme_scope(rasfast.theme_scope(q, c, 700, backend=backend).cpu(), q.cpu(), c.cpu(), 700)


# --------------------------------------------------------------------------- bad input
def _args():
    q, qe, c, e = int_data(2, 10, 4, 3)
    return q, qe, c, e


@pytest.mark.parametrize("backend", ["cpu", "torch"])
def test_errors_theme_scope(backend):
    q, _, c, _ = _args()
    bad = [
        (dict(q_ppd=[[1.0]]), TypeError, "q_ppd"),
        (dict(q_ppd=q.double().numpy()), TypeError, "q_ppd"),
        (dict(q_ppd=q.long()), TypeError, "q_ppd"),
        (dict(q_ppd=q[0]), ValueError, "q_ppd"),
        (dict(q_ppd=q[:, :3]), ValueError, "q_ppd"),
        (dict(q_ppd=torch.full_like(q, float("nan"))), ValueError, "q_ppd"),
        (dict(corpus_ppd=c[:0]), ValueError, "corpus_ppd"),
        (dict(corpus_ppd=c[:, :0], q_ppd=q[:, :0]), ValueError, "corpus_ppd"),
        (dict(corpus_ppd=c.int()), TypeError, "corpus_ppd"),
        (dict(corpus_ppd=c[None]), ValueError, "corpus_ppd"),
        (dict(K=0), ValueError, "K"),
        (dict(K=2.5), TypeError, "K"),
        (dict(K=True), TypeError, "K"),
        (dict(metric="cos"), ValueError, "metric"),
        (dict(backend="gpu"), ValueError, "backend"),
    ]
    for over, exc, name in bad:
        args = dict(q_ppd=q, corpus_ppd=c, K=3, metric="l2", backend=backend)
        args.update(over)
        with pytest.raises(exc, match=name):
            rasfast.theme_scope(**args)
    for val in (float("nan"), float("inf")):
        c2 = c.clone()
        c2[4, 1] = val
        with pytest.raises(ValueError, match="corpus_ppd"):
            rasfast.theme_scope(q, c2, 3, backend=backend)


@pytest.mark.parametrize("backend", ["cpu", "torch"])
def test_errors_scoped_dense_search(backend):
    _, qe, _, e = _args()
    s = torch.tensor([[0, 1, 2], [3, 4, -1]])
    bad = [
        (dict(q_emb="x"), TypeError, "q_emb"),
        (dict(q_emb=qe[:, :2]), ValueError, "q_emb"),
        (dict(q_emb=torch.full_like(qe, float("inf"))), ValueError, "q_emb"),
        (dict(corpus_emb=e[:0]), ValueError, "corpus_emb"),
        (dict(scope_ids=s.float()), TypeError, "scope_ids"),
        (dict(scope_ids=s[0]), ValueError, "scope_ids"),
        (dict(scope_ids=s[:1]), ValueError, "scope_ids"),
        (dict(scope_ids=torch.tensor([[0, 1, 10], [0, 1, 2]])), ValueError, "scope_ids"),
        (dict(scope_ids=torch.tensor([[0, 1, -2], [0, 1, 2]])), ValueError, "scope_ids"),
        (dict(scope_ids=torch.tensor([[0, 1, 1], [0, 1, 2]])), ValueError, "duplicate"),
        (dict(k=0), ValueError, "k"),
        (dict(k=None), TypeError, "k"),
        (dict(backend="nope"), ValueError, "backend"),
    ]
    for over, exc, name in bad:
        args = dict(q_emb=qe, corpus_emb=e, scope_ids=s, k=2, backend=backend)
        args.update(over)
        with pytest.raises(exc, match=name):
            rasfast.scoped_dense_search(**args)
    e2 = e.clone()
    e2[4, 0] = float("nan")  # row 4 is in query 1's scope
    with pytest.raises(ValueError, match="corpus_emb"):
        rasfast.scoped_dense_search(qe, e2, s, 2, backend=backend)


@pytest.mark.parametrize("backend", ["cpu", "torch"])
def test_errors_theme_scoped_search(backend):
    q, qe, c, e = _args()
    bad = [
        (dict(q_ppd=q[:, :2]), ValueError, "q_ppd"),
        (dict(q_emb=qe[:1]), ValueError, "q_emb"),
        (dict(q_emb=qe[:, :2]), ValueError, "q_emb"),
        (dict(corpus_emb=e[:5]), ValueError, "corpus_emb"),
        (dict(corpus_emb=e.long()), TypeError, "corpus_emb"),
        (dict(corpus_ppd=c.numpy().astype(np.float64)), TypeError, "corpus_ppd"),
        (dict(K=-1), ValueError, "K"),
        (dict(k=0), ValueError, "k"),
        (dict(theme_weight=-0.1), ValueError, "theme_weight"),
        (dict(theme_weight=1.5), ValueError, "theme_weight"),
        (dict(theme_weight=float("nan")), ValueError, "theme_weight"),
        (dict(theme_weight="0.1"), TypeError, "theme_weight"),
        (dict(metric="L2"), ValueError, "metric"),
        (dict(backend=1), ValueError, "backend"),
    ]
    for over, exc, name in bad:
        args = dict(q_ppd=q, q_emb=qe, corpus_ppd=c, corpus_emb=e, K=4, k=2, backend=backend)
        args.update(over)
        with pytest.raises(exc, match=name):
            rasfast.theme_scoped_search(**args)
    c2, e2 = c.clone(), e.clone()
    c2[7, 0] = float("inf")
    with pytest.raises(ValueError, match="corpus_ppd"):
        rasfast.theme_scoped_search(q, qe, c2, e, 4, 2, backend=backend)
    e2[3, 2] = float("nan")  # K = N: every row is in scope
    with pytest.raises(ValueError, match="corpus_emb"):
        rasfast.theme_scoped_search(q, qe, c, e2, 10, 2, backend=backend)


def test_backend_unavailable_is_clear():
    q, qe, c, e = _args()
    if torch.cuda.is_available():
        pytest.skip("a GPU is present")
    with pytest.raises((ValueError, rasfast.BackendUnavailable), match="cuda|CUDA"):
        rasfast.theme_scope(q, c, 3, backend="cuda")


# --------------------------------------------------------------------------- GEMM path
@cuda_kernels
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("metric", ["l2", "ip"])
def test_gemm_path_float_tolerance_and_padding(dtype, metric, monkeypatch):
    """The GEMM path on random float data: within the tolerance contract (the norm expansion
    and the split queries round differently from the direct sum), k > K pads, w = 0 and 1,
    a chunked product (N above one chunk), and scopes with -1 padding."""
    from rasfast.ops import theme_gemm
    monkeypatch.setenv("RASFAST_THEME_PATH", "gemm")
    monkeypatch.setattr(theme_gemm, "_MIN_CHUNK_ROWS", 64)
    monkeypatch.setattr(theme_gemm, "_CHUNK_BYTES", 4096)
    B, N, T, D = 7, 301, 29, 48
    q, qe, c, e = (x.to(GPU_DEVICE) for x in float_data(B, N, T, D, dtype, seed=3))
    for K, k, w in ((40, 7, 0.3), (5, 9, 0.0), (N, 4, 1.0), (1, 1, 0.5)):
        gi, gs = rasfast.theme_scoped_search(q, qe, c, e, K, k, w, metric, backend="cuda")
        check_scoped_search(gi.cpu(), gs.cpu(), q.cpu(), qe.cpu(), c.cpu(), e.cpu(), K, k, w, metric)
        if k > K:
            assert (gi[:, K:] == -1).all() and torch.isinf(gs[:, K:]).all()
        check_theme_scope(rasfast.theme_scope(q, c, K, metric, backend="cuda").cpu(),
                          q.cpu(), c.cpu(), K, metric)
    scope = rasfast.theme_scope(q, c, 20, metric, backend="torch")
    scope[1, 3:] = -1
    scope[4] = scope[4].flip(0)
    gi, gs = rasfast.scoped_dense_search(qe, e, scope, 6, backend="cuda")
    wi, ws = rasfast.scoped_dense_search(qe, e, scope, 6, backend="torch")
    assert torch.allclose(gs, ws, atol=1e-5, rtol=1e-5)
    assert (gi[1, 3:] == -1).all() and torch.isinf(gs[1, 3:]).all()
    assert torch.equal(gi[gs > gs.new_tensor(-1e30)].sort().values,
                       wi[ws > ws.new_tensor(-1e30)].sort().values)


@cuda_kernels
@pytest.mark.parametrize("select", ["mask", "sort"])
@pytest.mark.parametrize("dtype", DTYPES)
def test_gemm_path_dense_select_is_exact(select, dtype, monkeypatch):
    """w = 0 on the GEMM path picks the top k inside the scope either by masking the [B, N]
    dense scores (the default) or by sorting the scope ids and gathering (RASFAST_THEME_DENSE_
    SELECT=sort, what w > 0 uses): both equal the reference bit for bit on exact data with
    ties and duplicated rows, K >= N (no mask), k > K (padding) and tile-crossing sizes."""
    monkeypatch.setenv("RASFAST_THEME_PATH", "gemm")
    monkeypatch.setenv("RASFAST_THEME_DENSE_SELECT", select)
    for case in EXACT_CASES:
        B, N, T, D, K, k = case
        q, qe, c, e = (x.to(GPU_DEVICE) for x in int_data(B, N, T, D, dtype, seed=N + 1))
        for metric in ("l2", "ip"):
            wi, ws = ref_fused(q, qe, c, e, K, k, 0.0, metric)
            gi, gs = rasfast.theme_scoped_search(q, qe, c, e, K, k, 0.0, metric, backend="cuda")
            assert torch.equal(gi, wi) and torch.equal(gs, ws), (case, metric)


@cuda_kernels
@pytest.mark.parametrize("select", ["mask", "sort"])
def test_gemm_path_scoped_dense_search_is_exact_with_padding_and_id_zero(select, monkeypatch):
    """scoped_dense_search on the GEMM path, by mask (default) or by sorted scope ids: the
    torch backend's result bit for bit on exact data, with scopes padded with -1 (scattered
    as id 0 in the mask) that do and do not hold id 0, unsorted scopes, a scope wider than
    k and one narrower (padding in the result), int32 and int64 scope ids."""
    monkeypatch.setenv("RASFAST_THEME_PATH", "gemm")
    monkeypatch.setenv("RASFAST_THEME_DENSE_SELECT", select)
    q, qe, c, e = (x.to(GPU_DEVICE) for x in int_data(6, 70, 5, 4, seed=13))
    g = torch.Generator().manual_seed(13)
    scope = torch.stack([1 + torch.randperm(69, generator=g)[:12] for _ in range(6)])  # no id 0
    scope = scope.to(GPU_DEVICE)
    scope[0, 3] = 0                      # id 0 in the scope, no padding
    scope[1, 0], scope[1, 5:] = 0, -1    # id 0 and padding
    scope[2, 5:] = -1                    # padding without id 0
    scope[4, :] = -1                     # nothing in scope
    for kk, sc in ((4, scope), (9, scope), (3, scope.int())):
        want = rasfast.scoped_dense_search(qe, e, sc, kk, backend="torch")
        got = rasfast.scoped_dense_search(qe, e, sc, kk, backend="cuda")
        assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1]), (select, kk)


@cuda_kernels
def test_gemm_path_masked_select_reports_an_overflowing_scope_row_as_padding(monkeypatch):
    """The masked select ranks a scope row whose score is -inf (an inner product beyond
    float32's range) with the rows outside the scope: it comes back as padding (-1, -inf),
    never as a row outside the scope; every finite score is as the reference's."""
    monkeypatch.setenv("RASFAST_THEME_PATH", "gemm")
    q, qe, c, e = (x.to(GPU_DEVICE) for x in int_data(1, 40, 5, 4, seed=9, dup=False))
    scope = rasfast.theme_scope(q, c, 6, backend="torch")
    row = int(scope[0].max())  # a row outside the scope has a lower id, so wins the -inf tie
    assert row > int(min(set(range(40)) - set(scope[0].tolist())))
    e, qe = e.clone(), torch.ones_like(qe)
    e[row] = -3e38  # q_emb . row overflows to -inf
    wi, ws = ref_fused(q, qe, c, e, 6, 6, 0.0, "l2")
    gi, gs = rasfast.theme_scoped_search(q, qe, c, e, 6, 6, 0.0, "l2", backend="cuda")
    assert ws[0, -1] == float("-inf") and wi[0, -1] == row  # the reference keeps it
    assert gi[0, -1] == -1 and gs[0, -1] == float("-inf")
    assert torch.equal(gi[:, :5], wi[:, :5]) and torch.equal(gs, ws)


@cuda_kernels
def test_gemm_path_corpus_norms_follow_in_place_changes(monkeypatch):
    """The cached |c|^2 of the L2 expansion must not outlive a change of the corpus: the
    tensor's version counter (shared by its views) invalidates it."""
    monkeypatch.setenv("RASFAST_THEME_PATH", "gemm")
    q, qe, c, e = (x.to(GPU_DEVICE) for x in int_data(3, 50, 6, 5, seed=2, dup=False))
    before = rasfast.theme_scope(q, c, 10, backend="cuda")
    assert torch.equal(before, ref_scope(q, c, 10, "l2"))
    c[before[0, :5]] += 2  # through a view: the nearest rows of query 0 move away
    after = rasfast.theme_scope(q, c, 10, backend="cuda")
    assert torch.equal(after, ref_scope(q, c, 10, "l2"))
    assert not torch.equal(after, before)


def test_plan_rule():
    """The measured choices (env override aside): the scope always from the GEMM, the dense
    scores gathered while B*K < N / 2 and w = 0 (H100: gather won at B*K/N = 0.05 and 0.2,
    the GEMM at 0.8 and 3.2)."""
    from rasfast.ops.theme_gemm import plan
    assert plan(64, 5_000_000, 250_000) == "gemm"              # B*K = 16M rows > N
    assert plan(16, 5_000_000, 250_000) == "gemm"              # 0.8 N: the GEMM won
    assert plan(4, 5_000_000, 250_000) == "gemm+gather"        # 0.2 N: the gather won
    assert plan(1, 5_000_000, 250_000) == "gemm+gather"        # one query: gather its scope
    assert plan(16, 5_000_000, 250_000, w=0.1) == "gemm"       # the theme term: GEMM path
    assert plan(4, 5_000_000, 250_000, op="theme_scope") == "gemm"


@cuda_kernels
@pytest.mark.parametrize("path", ["kernel", "gemm+gather"])
@pytest.mark.parametrize("dtype", DTYPES)
def test_dense_scores_of_wide_rows(path, dtype, monkeypatch):
    """The gathered dense scores (warp_dot in csrc/theme/theme_kernels.cu) read rows in
    16-byte vectors, up to 4 a lane in flight, when the row and the query allow: rows of one
    vector a lane, of several, and of more than one batch of 4 (some lanes only), against
    the reference on exact data; an odd width takes the element path."""
    monkeypatch.setenv("RASFAST_THEME_PATH", path)
    wide = 520 if dtype == torch.float32 else 1032  # 130 / 129 vectors: a second batch
    for D in (24, 200, wide, 203):
        q, qe, c, e = (x.to(GPU_DEVICE) for x in int_data(2, 300, 11, D, dtype, seed=D))
        for w in (0.0, 0.5):
            want = ref_fused(q, qe, c, e, 60, 5, w, "l2")
            got = rasfast.theme_scoped_search(q, qe, c, e, 60, 5, w, "l2", backend="cuda")
            assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1]), (path, D, w)


@cuda_kernels
@pytest.mark.parametrize("path", ["kernel", "gemm", "gemm+gather"])
def test_row_padded_corpus_views(path, monkeypatch):
    """A corpus stored with padded rows (pad_rows: what ThemeIndex.to keeps on a GPU) gives the
    results of the contiguous corpus on every cuda path, and the cached norms follow each
    view (a search slices a new view per call)."""
    from rasfast.ops.theme_gemm import pad_rows
    monkeypatch.setenv("RASFAST_THEME_PATH", path)
    q, qe, c, e = (x.to(GPU_DEVICE) for x in int_data(4, 90, 13, 6, torch.float16, seed=5))
    cp, ep = pad_rows(c), pad_rows(e)
    assert cp.stride(0) == 16 and torch.equal(cp, c)
    for K, k, w in ((20, 5, 0.0), (20, 5, 0.5), (90, 3, 0.0)):
        want = ref_fused(q, qe, c, e, K, k, w, "l2")
        got = rasfast.theme_scoped_search(q, qe, cp, ep, K, k, w, "l2", backend="cuda")
        assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1]), (path, K, k, w)
        got = rasfast.theme_scoped_search(q, qe, cp[10:70], ep[10:70], K, k, w, backend="cuda")
        want = ref_fused(q, qe, c[10:70], e[10:70], K, k, w, "l2")
        assert torch.equal(got[0], want[0]), (path, "row slice")
    assert torch.equal(rasfast.theme_scope(q, cp, 7, backend="cuda"), ref_scope(q, c, 7, "l2"))


@cuda_kernels
@pytest.mark.parametrize("metric", ["l2", "ip"])
def test_quantile_shift_keeps_the_scope(metric, monkeypatch):
    """The unsorted scope selected on values shifted by the sampled K-th quantile is the set
    selected without the shift, and the theme values come back unshifted."""
    from rasfast.ops import theme_gemm
    q, _, c, _ = (x.to(GPU_DEVICE) for x in float_data(5, 3000, 40, 8, torch.float16, seed=7))
    q = q.float()
    monkeypatch.setattr(theme_gemm, "_SAMPLE", 256)
    monkeypatch.setattr(theme_gemm, "_SHIFT_MIN_VALUES", 0)  # this small scope shifted too
    m = theme_gemm.quantile_shift(q, c, 300, metric)
    full = theme_gemm.theme_values(q, c, metric)
    kth = full.sort(dim=1, descending=metric == "ip").values[:, 299]
    assert ((m - kth).abs() < 0.5 * kth.abs()).all()  # near the cut: a usable estimate
    ids, vals = theme_gemm.scope(q, c, 300, metric, sorted=False)
    monkeypatch.setenv("RASFAST_THEME_SHIFT", "0")
    ids0, vals0 = theme_gemm.scope(q, c, 300, metric, sorted=False)
    assert torch.equal(ids.sort(1).values, ids0.sort(1).values)
    torch.testing.assert_close(vals, torch.gather(full, 1, ids), atol=1e-6, rtol=1e-6)


@cuda_kernels
def test_small_scopes_skip_the_quantile_shift(monkeypatch):
    """Below _SHIFT_MIN_VALUES [B, N] values (a per-question call) the scope is selected on
    the values as they are: the shift's sample GEMM and kthvalue (about 10 launches) would
    cost more than the select passes they save. At or above it, the shift runs."""
    from rasfast.ops import theme_gemm
    q, _, c, _ = (x.to(GPU_DEVICE) for x in float_data(2, 3000, 40, 8, torch.float16, seed=3))
    q = q.float()
    calls = []
    real = theme_gemm.quantile_shift
    monkeypatch.setattr(theme_gemm, "quantile_shift", lambda *a: calls.append(a) or real(*a))
    small = theme_gemm.scope(q, c, 300, "l2", sorted=False)
    assert calls == []
    monkeypatch.setattr(theme_gemm, "_SHIFT_MIN_VALUES", 2 * 3000)
    shifted = theme_gemm.scope(q, c, 300, "l2", sorted=False)
    assert len(calls) == 1
    assert torch.equal(small[0].sort(1).values, shifted[0].sort(1).values)


@cuda_kernels
def test_gemm_path_query_groups_bound_memory(monkeypatch):
    """With a matrix budget that holds 2 queries' [B, N] rows, the GEMM path runs the queries
    in groups and returns what one group returns."""
    from rasfast.ops import theme_gemm
    monkeypatch.setenv("RASFAST_THEME_PATH", "gemm")
    q, qe, c, e = (x.to(GPU_DEVICE) for x in int_data(7, 60, 9, 5, seed=11))
    whole = rasfast.theme_scoped_search(q, qe, c, e, 15, 4, 0.5, backend="cuda")
    scope = rasfast.theme_scope(q, c, 15, backend="cuda")
    dense = rasfast.scoped_dense_search(qe, e, scope, 4, backend="cuda")
    monkeypatch.setattr(theme_gemm, "_MATRIX_BYTES", 2 * 3 * 4 * 60)
    assert len(theme_gemm._query_groups(7, 60)) == 4
    for got, want in ((rasfast.theme_scoped_search(q, qe, c, e, 15, 4, 0.5, backend="cuda"), whole),
                      ((rasfast.theme_scope(q, c, 15, backend="cuda"),), (scope,)),
                      (rasfast.scoped_dense_search(qe, e, scope, 4, backend="cuda"), dense)):
        for g, w in zip(got, want):
            assert torch.equal(g, w)


@pytest.mark.parametrize("n_rows", [8, 2000])
def test_a_per_question_call_touches_no_fresh_memory(n_rows):
    """The key matrix of a small call is an ordinary allocation: rounded up to a 2 MiB huge
    page, every call had the kernel fault in and zero a fresh page (~60 us of an 80 us call
    at 8 rows). After warm-up a call reuses the heap: no minor page faults."""
    import resource
    rng = np.random.default_rng(0)
    p = torch.from_numpy(rng.random((n_rows, 64), dtype=np.float32))
    q, e, qe = p[:1].clone(), torch.from_numpy(rng.random((n_rows, 16), dtype=np.float32)), torch.rand(1, 16)
    K = min(5, n_rows)
    for _ in range(30):
        rasfast.theme_scope(q, p, K, backend="cpu")
        rasfast.theme_scoped_search(q, qe, p, e, K, 2, backend="cpu")
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    for _ in range(200):
        rasfast.theme_scope(q, p, K, backend="cpu")
        rasfast.theme_scoped_search(q, qe, p, e, K, 2, backend="cpu")
    faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before
    assert faults < 100, f"{faults} minor page faults in 400 calls"
