"""segment_topk_scores / segment_max_rank: every backend equals the torch reference on random
ragged inputs (exact ties via quantized values), across dtypes, empty segments, padding, both
candidate layouts; bad input raises naming the argument."""
import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import rasfast
from backends_util import cpu_backends, gpu_backends
from conftest import EMULATED, GPU_DEVICE, cuda_kernels, gpu
from device_work_util import fresh_seed
from rasfast.ops.segment import segment_max_rank, segment_topk_scores
from rasfast.reference import segment as ref

DTYPES = [torch.float32, torch.float16, torch.bfloat16]


def quantized(rng, shape):
    """Entries k/4, |k| <= 3: dot products are exact in every dtype and summation order, so
    backends agree bit for bit and exact ties are common (exercising the tie-break)."""
    return torch.from_numpy((rng.integers(-3, 4, size=shape) / 4).astype(np.float32))


def ragged_ptr(rng, B, max_len, empty_every=3):
    lens = rng.integers(0, max_len + 1, size=B)
    lens[::empty_every] = 0  # empty segments
    ptr = np.zeros(B + 1, np.int64)
    ptr[1:] = np.cumsum(lens)
    return torch.from_numpy(ptr)


def topk_problem(rng, B, D, max_len, table=None, dtype=torch.float32):
    ptr = ragged_ptr(rng, B, max_len)
    M = int(ptr[-1])
    q = quantized(rng, (B, D))
    if table is None:
        return dict(q_emb=q, cand_emb=quantized(rng, (M, D)).to(dtype), cand_ptr=ptr), None
    ids = torch.from_numpy(rng.integers(0, table, size=M))
    return dict(q_emb=q, cand_emb=quantized(rng, (table, D)).to(dtype), cand_ptr=ptr,
                cand_ids=ids), ids


def assert_same(got, want):
    gi, gs = (torch.as_tensor(x).cpu() for x in got)
    wi, ws = (torch.as_tensor(x).cpu() for x in want)
    assert torch.equal(gi, wi), f"ids differ:\n{gi}\n{wi}"
    assert torch.equal(torch.isinf(gs), torch.isinf(ws))
    fin = torch.isfinite(ws)
    torch.testing.assert_close(gs[fin], ws[fin], atol=1e-5, rtol=0)


# ----------------------------------------------------------------------------- topk: parity
@pytest.mark.parametrize("backend", cpu_backends())
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("layout", ["matrix", "table"])
def test_topk_matches_reference(backend, dtype, layout):
    rng = np.random.default_rng(hash((backend, str(dtype), layout)) % 2**32)
    small = backend == "triton"  # interpreted: tiny sizes
    B, D, L = (5, 13, 9) if small else (23, 37, 70)
    args, ids = topk_problem(rng, B, D, L, table=(11 if small else 50) if layout == "table" else None,
                             dtype=dtype)
    for n in (1, 4, L + 3):  # n beyond the longest segment pads
        want = ref.segment_topk_scores(args["q_emb"], args["cand_emb"], args["cand_ptr"], n, ids)
        assert_same(segment_topk_scores(**args, n=n, backend=backend), want)


@settings(max_examples=20)
@given(seed=st.integers(0, 2**31), B=st.integers(0, 9), D=st.integers(1, 40),
       max_len=st.integers(0, 40), n=st.integers(1, 45), table=st.booleans())
def test_topk_cpu_hypothesis(seed, B, D, max_len, n, table):
    rng = np.random.default_rng(seed)
    args, ids = topk_problem(rng, B, D, max_len, table=7 if table else None)
    want = ref.segment_topk_scores(args["q_emb"], args["cand_emb"], args["cand_ptr"], n, ids)
    assert_same(segment_topk_scores(**args, n=n, backend="cpu"), want)
    assert_same(segment_topk_scores(**args, n=n, backend="torch"), want)


def test_topk_ties_go_to_lower_position_and_padding():
    q = torch.ones(2, 4)
    cand = torch.tensor([[1.0, 0, 0, 0]] * 3 + [[2.0, 0, 0, 0]] + [[1.0, 0, 0, 0]] * 2)
    ptr = torch.tensor([0, 4, 6])
    for be in cpu_backends() + ["torch"]:
        ids, sc = segment_topk_scores(q, cand, ptr, 3, backend=be)
        assert ids.tolist() == [[3, 0, 1], [4, 5, -1]], be
        assert sc[1, 2] == float("-inf")


def test_topk_crosses_simd_and_selection_boundaries_cpu():
    rng = np.random.default_rng(7)
    # table of 500 rows: the cpu kernel scores by table row; 20,000 rows: per query
    for D, table in ((1, 500), (7, 20000), (8, 500), (15, 20000), (16, 500), (17, 20000),
                     (384, 500), (384, 20000)):
        args, ids = topk_problem(rng, 6, D, 300, table=table)
        for n in (1, 20, 299, 1000):
            want = ref.segment_topk_scores(args["q_emb"], args["cand_emb"], args["cand_ptr"], n, ids)
            assert_same(segment_topk_scores(**args, n=n, backend="cpu"), want)



def assert_paths_agree(by_row, per_query, cand_ids):
    """The two paths pick the same table rows in the same order; their scores may differ in
    the last bits (the compiler may contract a path's multiply-adds differently: on an Intel
    Xeon build the AVX2 variant's scores differed by one ulp), never bitwise asserted across
    implementations. Positions are compared through the rows they reference: two references
    to one row tie exactly in exact arithmetic, and a last-bit difference may order them
    either way (seen on an H100 machine's Xeon, 2026-11-26), so which of the two positions
    comes first is not the paths' contract; which row comes at each rank is."""
    def rows(pos):
        return torch.where(pos >= 0, cand_ids[pos.clamp(min=0)], pos)
    assert torch.equal(rows(by_row[0]), rows(per_query[0]))
    torch.testing.assert_close(by_row[1], per_query[1], rtol=1e-5, atol=1e-5)

def test_topk_by_row_and_per_query_paths_agree():
    rng = np.random.default_rng(9)
    table = torch.randn(300, 100).to(torch.bfloat16)
    q = torch.randn(40, 100)
    ptr = torch.arange(0, 40 * 30 + 1, 30)
    ids = torch.from_numpy(rng.integers(0, 300, size=40 * 30))
    by_row = segment_topk_scores(q, table, ptr, 30, cand_ids=ids, backend="cpu")  # T <= 2M
    per_query = segment_topk_scores(q, table[ids], ptr, 30, backend="cpu")          # matrix
    assert_paths_agree(by_row, per_query, ids)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_topk_by_row_remainders_agree(dtype):
    # the by-row path scores a row's references 4 at a time plus a 1-3 remainder kernel;
    # rows referenced 1..9 times, D crossing the 8/16-wide chunks, continuous values
    rng = np.random.default_rng(11)
    for D in (1, 8, 9, 16, 23, 40):
        T = 60
        refs = np.repeat(np.arange(T), rng.integers(1, 10, size=T))
        rng.shuffle(refs)
        B = 12
        cuts = np.sort(rng.integers(0, len(refs) + 1, size=B - 1))
        ptr = torch.from_numpy(np.concatenate([[0], cuts, [len(refs)]]).astype(np.int64))
        ids = torch.from_numpy(refs.astype(np.int64))
        q, table = torch.randn(B, D), torch.randn(T, D).to(dtype)
        for n in (1, 7, 50):
            by_row = segment_topk_scores(q, table, ptr, n, cand_ids=ids, backend="cpu")
            per_query = segment_topk_scores(q, table[ids], ptr, n, backend="cpu")
            assert_paths_agree(by_row, per_query, ids)
            want = ref.segment_topk_scores(q, table, ptr, n, ids)
            torch.testing.assert_close(by_row[1], want[1], atol=1e-4, rtol=1e-5)


@pytest.mark.parametrize("simd", rasfast.dispatch.cpu_module().segment_simd_variants())
def test_every_cpu_simd_variant(simd):
    """The inner products are compiled for AVX-512, AVX2 and the baseline ISA and pick one
    at run time; force each this CPU runs: exact parity with the reference on quantized
    values at sizes crossing the 8/16/32-float chunks, and within a variant the by-row and
    per-query paths agree (same rows at every rank, scores to the last bits) on continuous values in every dtype."""
    mod = rasfast.dispatch.cpu_module()
    best = mod.segment_simd_level()
    try:
        mod.segment_set_simd(simd)
        assert mod.segment_simd_level() == simd
        test_topk_crosses_simd_and_selection_boundaries_cpu()
        for D in (31, 32, 33, 47, 64):
            args, ids = topk_problem(np.random.default_rng(D), 5, D, 200, table=700)
            want = ref.segment_topk_scores(args["q_emb"], args["cand_emb"], args["cand_ptr"], 9, ids)
            assert_same(segment_topk_scores(**args, n=9, backend="cpu"), want)
        test_topk_by_row_and_per_query_paths_agree()
        for dtype in DTYPES:
            test_topk_by_row_remainders_agree(dtype)
    finally:
        mod.segment_set_simd(best)
    with pytest.raises(ValueError, match="name"):
        mod.segment_set_simd("neon")


@pytest.mark.parametrize("table", [3, 997, 20000])
def test_topk_by_row_parallel_chunks(table):
    # big enough (M * D >= 2**22) for the threaded path, which splits the table's rows into
    # chunks: rows on chunk edges, fewer rows than chunks, and a table scored per query
    rng = np.random.default_rng(13)
    args, ids = topk_problem(rng, 60, 384, 600, table=table, dtype=torch.bfloat16)
    assert int(args["cand_ptr"][-1]) * 384 >= 2 ** 22
    for n in (1, 20):
        want = ref.segment_topk_scores(args["q_emb"], args["cand_emb"], args["cand_ptr"], n, ids)
        assert_same(segment_topk_scores(**args, n=n, backend="cpu"), want)


def test_topk_selection_ties_at_the_threshold():
    # the n-th best score is shared by more candidates than fit: the lowest positions win
    scores = [0.0, 2.0, 1.0, 1.0, 3.0, 1.0, 1.0, 0.5, 1.0]
    table = torch.tensor(scores)[:, None]
    q = torch.ones(2, 1)
    ptr = torch.tensor([0, 9, 18])
    for n, want in ((1, [4]), (3, [4, 1, 2]), (4, [4, 1, 2, 3]), (6, [4, 1, 2, 3, 5, 6]),
                    (9, [4, 1, 2, 3, 5, 6, 8, 7, 0])):
        ids = torch.arange(9).repeat(2)
        got_ids, got_sc = segment_topk_scores(q, table, ptr, n, cand_ids=ids, backend="cpu")
        assert got_ids[0].tolist() == want and (got_ids[1] - 9).tolist() == want, n
        assert got_sc[0].tolist() == [scores[i] for i in want]
    flat = segment_topk_scores(q, torch.ones(40, 1), torch.tensor([0, 20, 40]), 5, backend="cpu")
    assert flat[0].tolist() == [[0, 1, 2, 3, 4], [20, 21, 22, 23, 24]]


def test_topk_continuous_values_and_numpy_kind():
    rng = np.random.default_rng(3)
    q = rng.standard_normal((8, 384)).astype(np.float32)
    cand = rng.standard_normal((900, 384)).astype(np.float32)
    ptr = np.array([0, 100, 100, 350, 351, 500, 700, 899, 900])
    ids, sc = segment_topk_scores(q, cand, ptr, 20)
    assert isinstance(ids, np.ndarray) and ids.dtype == np.int64 and sc.dtype == np.float32
    wi, ws = ref.segment_topk_scores(torch.from_numpy(q), torch.from_numpy(cand),
                                     torch.from_numpy(ptr), 20)
    assert np.array_equal(ids, wi.numpy())
    np.testing.assert_allclose(sc, ws.numpy(), atol=1e-4)


# the scoring kernels (csrc/segment/segment_kernels.cu): a warp a chunk of positions, the
# default for rows in 16-byte vectors (score_chunks_kernel), and a warp a row
# (score_kernel: RASFAST_SEGMENT_CHUNKS=0, and every row read element by element)
SCORING = ["chunks", "row a warp"]


@cuda_kernels
@pytest.mark.parametrize("scoring", SCORING)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("layout", ["matrix", "table"])
def test_topk_gpu_backends(monkeypatch, scoring, dtype, layout):
    monkeypatch.setenv("RASFAST_SEGMENT_CHUNKS", "1" if scoring == "chunks" else "0")
    rng = np.random.default_rng(11)
    B = 12 if EMULATED else 40  # still segments past the kernel's 4096-key buffer
    args, ids = topk_problem(rng, B, 96, 5000, table=3000 if layout == "table" else None, dtype=dtype)
    for n in (1, 20, 2048):
        want = ref.segment_topk_scores(args["q_emb"], args["cand_emb"], args["cand_ptr"], n, ids)
        for be in gpu_backends():
            got = segment_topk_scores(**{k: v.to(GPU_DEVICE) for k, v in args.items()}, n=n, backend=be)
            assert_same(got, want)


@cuda_kernels
@pytest.mark.parametrize("scoring", SCORING)
@pytest.mark.parametrize("dtype", DTYPES)
def test_topk_gpu_select_and_load_boundaries(monkeypatch, scoring, dtype):
    """The CUDA design's edges (csrc/segment/segment_kernels.cu): rows read in 16-byte vectors
    or element by element (odd D, a misaligned query view), 4 to 32 lanes per row, segment
    lengths around n and around the select block's 256 threads, one query much longer than
    the rest, and ties broken down to the position bits of the radix keys."""
    monkeypatch.setenv("RASFAST_SEGMENT_CHUNKS", "1" if scoring == "chunks" else "0")
    seed = fresh_seed()
    rng = np.random.default_rng(seed)
    # D = 520 / 1032: rows longer than one batch of kAhead 16-byte loads per lane (128
    # vectors), for some lanes only (a ragged second or third batch)
    for D in (3, 8, 33, 200, 520, 1032):
        for n in ((1, 7, 256) if D <= 200 else (7,)):
            lens = np.array([0, n - 1, n, n + 1, 255, 256, 257, 3 * n + 600, 1])
            ptr = torch.from_numpy(np.concatenate([[0], np.cumsum(lens)]).astype(np.int64))
            M = int(ptr[-1])
            # few distinct values (long runs of exact ties) or many; exact in every dtype and
            # summation order either way, so the ids must match the reference exactly
            c = quantized(rng, (M, D)).to(dtype) if rng.random() < 0.5 else \
                torch.from_numpy((rng.integers(-100, 101, size=(M, D)) / 64).astype(np.float32)).to(dtype)
            wide = quantized(rng, (len(lens), D + 1))
            q = wide[:, 1:]  # a view 4 bytes off: element-wise loads of the query
            if D % 8 == 0 and (D > 200 or rng.random() < 0.5):
                q = q.contiguous()
            want = ref.segment_topk_scores(q, c, ptr, n)
            got = segment_topk_scores(q.to(GPU_DEVICE), c.to(GPU_DEVICE), ptr.to(GPU_DEVICE), n,
                                      backend="cuda")
            assert_same(got, want), (seed, D, n)
            ids = torch.from_numpy(rng.integers(0, 50, size=M))  # repeated rows of a table
            table = c[:50] if M >= 50 else quantized(rng, (50, D)).to(dtype)
            want = ref.segment_topk_scores(q, table, ptr, n, ids)
            got = segment_topk_scores(q.to(GPU_DEVICE), table.to(GPU_DEVICE), ptr.to(GPU_DEVICE), n,
                                      cand_ids=ids.to(GPU_DEVICE), backend="cuda")
            assert_same(got, want), (seed, D, n, "ids")


@cuda_kernels
def test_max_rank_gpu_select_boundaries():
    """Groups fewer than k (the select reaches the empty slots' repeated sentinel keys), as
    many as k, and many more, with ties on the max: every row equals the reference."""
    seed = fresh_seed()
    rng = np.random.default_rng(seed)
    for n_groups, k in ((5, 300), (300, 300), (900, 20), (2000, 2048)):
        lens = np.array([0, 1, k - 1, k, k + 1, 2500])
        ptr = torch.from_numpy(np.concatenate([[0], np.cumsum(lens)]).astype(np.int64))
        M = int(ptr[-1])
        s = torch.from_numpy((rng.integers(-3, 4, size=M) / 4).astype(np.float32))
        s[torch.from_numpy(rng.random(M) < 0.05)] = float("-inf")
        g = torch.from_numpy(rng.integers(0, n_groups, size=M))
        want = ref.segment_max_rank(s, g, ptr, k)
        got = segment_max_rank(s.to(GPU_DEVICE), g.to(GPU_DEVICE), ptr.to(GPU_DEVICE), k, backend="cuda")
        assert_same(got, want), (seed, n_groups, k)


# ----------------------------------------------------------------------------- topk: bad input
def test_topk_bad_input():
    q, c, p = torch.zeros(2, 4), torch.zeros(5, 4), torch.tensor([0, 2, 5])
    with pytest.raises(ValueError, match="cand_ptr"):
        segment_topk_scores(q, c, torch.tensor([0, 2, 4]), 1)
    with pytest.raises(ValueError, match="cand_ptr"):
        segment_topk_scores(q, c, torch.tensor([0, 3, 2, 5]), 1)
    with pytest.raises(ValueError, match="cand_ptr"):
        segment_topk_scores(q, c, torch.tensor([0, 3, 2]), 1)
    with pytest.raises(TypeError, match="cand_ptr"):
        segment_topk_scores(q, c, p.float(), 1)
    with pytest.raises(ValueError, match="cand_emb"):
        segment_topk_scores(q, torch.zeros(5, 3), p, 1)
    with pytest.raises(ValueError, match="n"):
        segment_topk_scores(q, c, p, 0)
    with pytest.raises(TypeError, match="q_emb"):
        segment_topk_scores(q.double(), c, p, 1)
    with pytest.raises(ValueError, match="cand_ids"):
        segment_topk_scores(q, c, p, 1, cand_ids=torch.tensor([0, 1, 2, 3, 5]))
    with pytest.raises(ValueError, match="cand_ptr"):
        segment_topk_scores(q, c, p, 1, cand_ids=torch.tensor([0, 1]))
    with pytest.raises(ValueError, match="q_emb"):
        segment_topk_scores(torch.full((2, 4), float("nan")), c, p, 1)
    with pytest.raises(ValueError, match="backend"):
        segment_topk_scores(q, c, p, 1, backend="gpu")


@pytest.mark.parametrize("backend", cpu_backends() + ["torch"])
@pytest.mark.parametrize("bad", [float("nan"), float("inf")])
def test_topk_non_finite_candidate_raises(backend, bad):
    q, c, p = torch.ones(2, 4), torch.zeros(5, 4), torch.tensor([0, 2, 5])
    c[3, 1] = bad
    with pytest.raises(ValueError, match="cand_emb"):
        segment_topk_scores(q, c, p, 2, backend=backend)
    # the same bad row outside every candidate list (table layout) is never read
    ids, _ = segment_topk_scores(q, c, p, 2, cand_ids=torch.tensor([0, 1, 2, 4, 0]),
                                 backend=backend)
    assert ids.tolist() == [[0, 1], [2, 3]]


# ----------------------------------------------------------------------------- max rank
def rank_problem(rng, B, max_len, n_groups, dtype=torch.float32):
    ptr = ragged_ptr(rng, B, max_len)
    M = int(ptr[-1])
    s = quantized(rng, (M,)).to(dtype)
    s[torch.from_numpy(rng.random(M) < 0.1)] = float("-inf")  # absent items
    g = torch.from_numpy(rng.integers(0, n_groups, size=M))
    return s, g, ptr


@pytest.mark.parametrize("backend", cpu_backends())
@pytest.mark.parametrize("dtype", DTYPES)
def test_max_rank_matches_reference(backend, dtype):
    rng = np.random.default_rng(5)
    small = backend == "triton"
    s, g, ptr = rank_problem(rng, 6 if small else 30, 12 if small else 80, 5 if small else 40, dtype)
    for k in (1, 3, 50):
        assert_same(segment_max_rank(s, g, ptr, k, backend=backend),
                    ref.segment_max_rank(s, g, ptr, k))


@settings(max_examples=20)
@given(seed=st.integers(0, 2**31), B=st.integers(0, 8), max_len=st.integers(0, 30),
       n_groups=st.integers(1, 12), k=st.integers(1, 15))
def test_max_rank_cpu_hypothesis(seed, B, max_len, n_groups, k):
    s, g, ptr = rank_problem(np.random.default_rng(seed), B, max_len, n_groups)
    assert_same(segment_max_rank(s, g, ptr, k, backend="cpu"), ref.segment_max_rank(s, g, ptr, k))


def test_max_rank_semantics():
    s = torch.tensor([0.5, 0.9, 0.1, 0.9, float("-inf"), 0.3])
    g = torch.tensor([7, 2, 7, 5, 9, 1])
    ptr = torch.tensor([0, 5, 5, 6])
    for be in cpu_backends() + ["torch"]:
        ids, sc = segment_max_rank(s, g, ptr, 4, backend=be)
        # group 2 and 5 tie at 0.9 -> lower id first; group 9 only has a -inf item
        assert ids.tolist() == [[2, 5, 7, -1], [-1] * 4, [1, -1, -1, -1]], be
        assert sc[0, :3].tolist() == pytest.approx([0.9, 0.9, 0.5])


def test_max_rank_bad_input():
    s, g, p = torch.zeros(4), torch.tensor([0, 1, 2, 3]), torch.tensor([0, 4])
    with pytest.raises(ValueError, match="item_scores"):
        segment_max_rank(torch.tensor([0.0, float("nan"), 0, 0]), g, p, 1)
    with pytest.raises(ValueError, match="item_to_group"):
        segment_max_rank(s, torch.tensor([0, 1, 2]), p, 1)
    with pytest.raises(ValueError, match="item_to_group"):
        segment_max_rank(s, torch.tensor([0, -1, 2, 3]), p, 1)
    with pytest.raises(ValueError, match="ptr"):
        segment_max_rank(s, g, torch.tensor([0, 3]), 1)
    with pytest.raises(ValueError, match="k"):
        segment_max_rank(s, g, p, 0)
    with pytest.raises(TypeError, match="item_to_group"):
        segment_max_rank(s, g.float(), p, 1)


@cuda_kernels
def test_max_rank_gpu_backends():
    rng = np.random.default_rng(12)
    s, g, ptr = rank_problem(rng, 50, 6000, 700)
    for k in (1, 10, 2048):
        want = ref.segment_max_rank(s, g, ptr, k)
        for be in gpu_backends():
            d = GPU_DEVICE
            assert_same(segment_max_rank(s.to(d), g.to(d), ptr.to(d), k, backend=be), want)


# ----------------------------------------------------------------------------- build
# (the Triton kernels' sm_80/sm_90 compile is checked with every other kernel by
#  tests/triton_aot_gate.py through kernels/segment.py's aot_variants())
def test_cuda_module_has_segment_kernels_when_built():
    info = rasfast.backends()["cuda"]
    if not info["built"]:
        pytest.skip("rasfast._cuda not built here (no nvcc at install time)")
    from rasfast import _cuda
    assert hasattr(_cuda, "segment_topk_scores") and hasattr(_cuda, "segment_max_rank")
    assert _cuda.segment_max_n == 2048
