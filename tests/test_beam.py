"""triple_beam_search: every backend equals the torch reference; the reference equals the
pure-Python transcription of Algorithm 1; hand-computed cases pin the semantics."""
import math
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import rasfast
from backends_util import TRITON_CPU, TRITON_CPU_SKIP, cpu_backends, gpu_backends
from conftest import EMULATED, GPU_DEVICE, cuda_kernels, gpu
from rasfast.reference.beam import beam_search_python, decay_factors

DTYPES = [torch.float32, torch.float16, torch.bfloat16]


# ------------------------------------------------------------------------------ inputs

def random_graph(rng, n, n_entities, hub=0, isolated=0, idx_dtype=np.int64):
    """Triples over random entities (+ `hub` triples sharing entity 0, + `isolated` triples
    with entities of their own); CSR of 'shares an entity', built with Python sets."""
    ents = [tuple(rng.integers(1, max(2, n_entities), 2)) for _ in range(n)]
    for i in rng.choice(n, size=min(hub, n), replace=False):
        ents[i] = (0, ents[i][1])
    for k, i in enumerate(rng.choice(n, size=min(isolated, n), replace=False)):
        ents[i] = (10**6 + 2 * k, 10**6 + 2 * k + 1)
    by_ent = {}
    for t, (h, o) in enumerate(ents):
        by_ent.setdefault(h, set()).add(t)
        by_ent.setdefault(o, set()).add(t)
    nbrs = [set() for _ in range(n)]
    for group in by_ent.values():
        for t in group:
            nbrs[t] |= group
    rows = [sorted(s - {t}) for t, s in enumerate(nbrs)]
    indptr = np.zeros(n + 1, np.int64)
    indptr[1:] = np.cumsum([len(r) for r in rows])
    indices = np.array([j for r in rows for j in r], dtype=idx_dtype)
    return indptr, indices


def quantized(rng, shape):
    """Entries k/4, |k| <= 3: sums and dot products are exact in every dtype and backend,
    so backends agree bit for bit and exact ties are common (exercising tie-breaks)."""
    return (rng.integers(-3, 4, size=shape) / 4).astype(np.float32)


def random_seeds(rng, B, n, max_seeds):
    out = []
    for i in range(B):
        k = 0 if i == 0 else int(rng.integers(0, max_seeds + 1))  # query 0: no seeds
        s = rng.integers(0, n, size=k)
        out.append(np.concatenate([s, s[: k // 2]]))  # duplicates count once
    return out


def assert_same(got, ref):
    for name in ("sequences", "lengths", "num_beams"):
        g, r = torch.as_tensor(getattr(got, name)).cpu(), torch.as_tensor(getattr(ref, name)).cpu()
        assert torch.equal(g, r), f"{name} differ:\n{g}\n{r}"
    gs, rs = torch.as_tensor(got.scores).cpu(), torch.as_tensor(ref.scores).cpu()
    assert torch.equal(torch.isinf(gs), torch.isinf(rs))
    fin = torch.isfinite(rs)
    torch.testing.assert_close(gs[fin], rs[fin], atol=1e-5, rtol=0)


def search(problem, backend, **kw):
    return rasfast.triple_beam_search(problem["graph"], problem["emb"], problem["q"],
                                      problem["seeds"], backend=backend, **kw)


def make_problem(rng, n, D, B, dtype=torch.float32, exact=True, idx_dtype=np.int64, device="cpu"):
    graph = random_graph(rng, n, max(2, n // 3), hub=n // 4, isolated=n // 8, idx_dtype=idx_dtype)
    emb = quantized(rng, (n, D)) if exact else rng.standard_normal((n, D)).astype(np.float32)
    q = quantized(rng, (B, D)) if exact else rng.standard_normal((B, D)).astype(np.float32)
    return dict(graph=tuple(torch.from_numpy(a).to(device) for a in graph),
                emb=torch.from_numpy(emb).to(dtype).to(device), q=torch.from_numpy(q).to(device),
                seeds=random_seeds(rng, B, n, 8))


# ---------------------------------------------------- reference vs pure-Python transcription

@pytest.mark.parametrize("max_len", [1, 2, 3, 4])
@pytest.mark.parametrize("max_neighbors", [None, 2])
def test_torch_reference_matches_python_transcription(max_len, max_neighbors):
    rng = np.random.default_rng(100 + max_len)
    p = make_problem(rng, 50, 12, 6, exact=False)
    gamma = 3.5
    res = search(p, "torch", beam_width=4, max_len=max_len, gamma=gamma, max_neighbors=max_neighbors)
    indptr, indices = (a.tolist() for a in p["graph"])
    for i in range(6):
        seqs, scores = beam_search_python(indptr, indices, p["emb"].numpy(), p["q"][i].tolist(),
                                          p["seeds"][i].tolist(), 4, max_len, gamma, max_neighbors)
        k, length = int(res.num_beams[i]), int(res.lengths[i])
        assert res.sequences[i, :k, :length].tolist() == seqs
        assert (res.sequences[i, k:] == -1).all() and (res.sequences[i, :, length:] == -1).all()
        np.testing.assert_allclose(res.scores[i, :k].numpy(), scores, atol=1e-5)


# ----------------------------------------------------------------- backends vs reference

@settings(max_examples=25)
@given(seed=st.integers(0, 2**32 - 1), n=st.integers(1, 60), D=st.integers(1, 40),
       B=st.integers(1, 5), b=st.integers(1, 12), max_len=st.integers(1, 4),
       max_neighbors=st.sampled_from([None, 1, 3, 100]), gamma=st.sampled_from([None, 0.5, 2.0, 7.3]),
       dtype=st.sampled_from(DTYPES), idx32=st.booleans())
def test_cpu_matches_reference_exact_arithmetic(seed, n, D, B, b, max_len, max_neighbors, gamma,
                                                dtype, idx32):
    rng = np.random.default_rng(seed)
    p = make_problem(rng, n, D, B, dtype, idx_dtype=np.int32 if idx32 else np.int64)
    kw = dict(beam_width=b, max_len=max_len, max_neighbors=max_neighbors, gamma=gamma)
    assert_same(search(p, "cpu", **kw), search(p, "torch", **kw))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("max_neighbors", [None, 5])
def test_cpu_matches_reference_random_floats(dtype, max_neighbors):
    rng = np.random.default_rng(7)  # fixed data: float rounding differs between backends
    p = make_problem(rng, 300, 64, 16, dtype, exact=False)
    for max_len in (1, 2, 3, 4):
        kw = dict(beam_width=6, max_len=max_len, max_neighbors=max_neighbors)
        assert_same(search(p, "cpu", **kw), search(p, "torch", **kw))


def test_cpu_beam_wider_than_candidates_and_hubs():
    rng = np.random.default_rng(3)
    p = make_problem(rng, 40, 8, 4)
    kw = dict(beam_width=64, max_len=4, gamma=1.0)
    got, ref = search(p, "cpu", **kw), search(p, "torch", **kw)
    assert_same(got, ref)
    assert (ref.num_beams < 64).all()


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_triton_matches_reference_tiny(dtype):
    if "triton" not in cpu_backends():
        pytest.skip(TRITON_CPU_SKIP)
    rng = np.random.default_rng(11)
    p = make_problem(rng, 24, 8, 3, dtype)
    kw = dict(beam_width=3, max_len=3, max_neighbors=2)
    assert_same(search(p, "triton", **kw), search(p, "torch", **kw))


@cuda_kernels
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("max_neighbors", [None, 3])
def test_gpu_backends_match_reference(dtype, max_neighbors):
    for backend in gpu_backends():
        for seed in range(5):
            rng = np.random.default_rng(seed)
            p = make_problem(rng, 80, 33, 7, dtype, idx_dtype=np.int32 if seed % 2 else np.int64)
            pg = dict(p, graph=tuple(a.to(GPU_DEVICE) for a in p["graph"]), emb=p["emb"].to(GPU_DEVICE),
                      q=p["q"].to(GPU_DEVICE))
            for max_len in (1, 2, 4):
                kw = dict(beam_width=5, max_len=max_len, max_neighbors=max_neighbors)
                assert_same(search(pg, backend, **kw), search(p, "torch", **kw))


@cuda_kernels
def test_cuda_random_floats_and_errors():
    if "cuda" not in gpu_backends():
        pytest.skip("cuda module not built")
    rng = np.random.default_rng(5)
    p = make_problem(rng, 400, 96, 32, exact=False)
    pg = dict(p, graph=tuple(a.to(GPU_DEVICE) for a in p["graph"]), emb=p["emb"].to(GPU_DEVICE),
              q=p["q"].to(GPU_DEVICE))
    kw = dict(beam_width=10, max_len=3, max_neighbors=20)
    assert_same(search(pg, "cuda", **kw), search(p, "torch", **kw))
    bad = dict(pg, emb=pg["emb"].clone())
    bad["emb"][:] = float("nan")
    with pytest.raises(ValueError, match="triple_emb"):
        search(bad, "cuda", **kw)


@cuda_kernels
@pytest.mark.parametrize("combined", ["0", "64", "2048"])
def test_cuda_step_paths_match_reference(combined, monkeypatch):
    """The kernel's two ways through a step -- all beams' rows in one sort (when they fit the
    combined buffer) and beam by beam -- each equal the reference: RASFAST_BEAM_COMBINED
    sizes the buffer (0: beam by beam always; 64: the one-sort step only for short rows)."""
    if "cuda" not in gpu_backends():
        pytest.skip("cuda module not built")
    monkeypatch.setenv("RASFAST_BEAM_COMBINED", combined)
    for seed in range(3):
        rng = np.random.default_rng(100 + seed)
        p = make_problem(rng, 120, 9, 6, idx_dtype=np.int32 if seed % 2 else np.int64)
        pg = dict(p, graph=tuple(a.to(GPU_DEVICE) for a in p["graph"]), emb=p["emb"].to(GPU_DEVICE),
                  q=p["q"].to(GPU_DEVICE))
        for b, max_len, mn in ((4, 3, None), (7, 4, 3)):
            kw = dict(beam_width=b, max_len=max_len, max_neighbors=mn)
            assert_same(search(pg, "cuda", **kw), search(p, "torch", **kw))


def _misaligned(t):
    """A contiguous copy of t whose first entry sits one entry past a 16-byte boundary."""
    flat = torch.empty(t.numel() + 1, dtype=t.dtype, device=t.device)
    out = flat[1:].view(t.shape)
    out.copy_(t)
    assert out.is_contiguous() and out.data_ptr() % 16 != 0
    return out


@cuda_kernels
@pytest.mark.parametrize("lanes", ["4", "8", "16", "32"])
def test_cuda_scoring_lanes_and_loads_match_reference(lanes, monkeypatch):
    """The kernel scores 32 / lanes candidates per warp at once (RASFAST_BEAM_LANES, default
    8), with 16-byte loads where D and the bases allow and scalar loads otherwise: each way,
    through both step paths and the seeds, equals the reference. D = 16 and 40 take the
    16-byte loads in every dtype, D = 12 in float32 only, D = 9 and a misaligned table never;
    rows of up to ~120 candidates and 40 seeds give warps several rounds."""
    if "cuda" not in gpu_backends():
        pytest.skip("cuda module not built")
    monkeypatch.setenv("RASFAST_BEAM_LANES", lanes)
    assert rasfast.dispatch.cuda_module().beam_plan(n=10, D=16, beam_width=2, max_len=2, max_neighbors=0,
                                                     decay_len=1, max_deg=4)["lanes"] == int(lanes)
    rng = np.random.default_rng(int(lanes))
    for D, dtype, misalign in ((16, torch.float16, False), (40, torch.bfloat16, False), (12, torch.float32, False),
                               (9, torch.float32, False), (16, torch.float32, True), (12, torch.float16, False)):
        n = 160
        graph = random_graph(rng, n, 60, hub=120, isolated=10)
        emb = torch.from_numpy(quantized(rng, (n, D))).to(dtype)
        p = dict(graph=tuple(torch.from_numpy(a) for a in graph), emb=emb,
                 q=torch.from_numpy(quantized(rng, (4, D))), seeds=random_seeds(rng, 4, n, 40))
        emb_g = emb.to(GPU_DEVICE)
        pg = dict(p, graph=tuple(a.to(GPU_DEVICE) for a in p["graph"]),
                  emb=_misaligned(emb_g) if misalign else emb_g, q=p["q"].to(GPU_DEVICE))
        for combined in ("0", "2048"):
            monkeypatch.setenv("RASFAST_BEAM_COMBINED", combined)
            kw = dict(beam_width=6, max_len=3, max_neighbors=None)
            assert_same(search(pg, "cuda", **kw), search(p, "torch", **kw))


@cuda_kernels
@pytest.mark.parametrize("b", [33, 64, 70])
def test_cuda_one_sort_step_with_more_beams_than_a_warp(b):
    """The one-sort step's row offsets are scanned by one warp, a lane per beam, 32 beams a
    round: wider beams (short rows, so every step takes that path) equal the reference."""
    if "cuda" not in gpu_backends():
        pytest.skip("cuda module not built")
    rng = np.random.default_rng(b)
    n = 500
    graph = random_graph(rng, n, 700)  # many entities: short rows, the steps fit the buffer
    deg = np.diff(graph[0])
    plan = rasfast.dispatch.cuda_module().beam_plan(n=n, D=8, beam_width=b, max_len=3, max_neighbors=0,
                                                     decay_len=int(min(2 * b, deg.max())) + 1,
                                                     max_deg=int(deg.max()))
    assert plan["cap3"] >= 1024 and b * deg.max() <= plan["cap3"], plan
    p = dict(graph=tuple(torch.from_numpy(a) for a in graph), emb=torch.from_numpy(quantized(rng, (n, 8))),
             q=torch.from_numpy(quantized(rng, (3, 8))), seeds=[rng.choice(n, size=90, replace=False)
                                                               for _ in range(3)])
    pg = dict(p, graph=tuple(a.to(GPU_DEVICE) for a in p["graph"]), emb=p["emb"].to(GPU_DEVICE),
              q=p["q"].to(GPU_DEVICE))
    kw = dict(beam_width=b, max_len=3)
    got, ref = search(pg, "cuda", **kw), search(p, "torch", **kw)
    assert int(torch.as_tensor(ref.num_beams).min()) > 32  # the steps had more than 32 beams
    assert_same(got, ref)


@cuda_kernels
@pytest.mark.parametrize("threads", ["256", "1024", ""])
def test_cuda_block_sizes_match_reference(threads, monkeypatch):
    """One block per query of 256 threads, or of 1024 when the batch leaves SMs idle (B <=
    the SM count; the emulator reports 4 SMs), or as RASFAST_BEAM_THREADS sets it: each equals
    the reference through both step paths, with hub rows, wide beams and small and large B."""
    if "cuda" not in gpu_backends():
        pytest.skip("cuda module not built")
    monkeypatch.setenv("RASFAST_BEAM_THREADS", threads)
    assert rasfast.dispatch.cuda_module().beam_plan(n=10, D=16, beam_width=2, max_len=2, max_neighbors=0,
                                                     decay_len=1, max_deg=4)["threads"] == int(threads or 0)
    for seed, B in ((0, 1), (1, 3), (2, 9)):
        rng = np.random.default_rng(200 + seed)
        p = make_problem(rng, 150, 16, B, idx_dtype=np.int32 if seed % 2 else np.int64)
        pg = dict(p, graph=tuple(a.to(GPU_DEVICE) for a in p["graph"]), emb=p["emb"].to(GPU_DEVICE),
                  q=p["q"].to(GPU_DEVICE))
        for combined in ("0", "2048"):
            monkeypatch.setenv("RASFAST_BEAM_COMBINED", combined)
            for b, max_len, mn in ((5, 3, None), (40, 2, 6)):
                kw = dict(beam_width=b, max_len=max_len, max_neighbors=mn)
                assert_same(search(pg, "cuda", **kw), search(p, "torch", **kw))


@cuda_kernels
def test_cuda_bad_lanes_or_threads_setting_is_a_clear_error(monkeypatch):
    if "cuda" not in gpu_backends():
        pytest.skip("cuda module not built")
    plan = lambda: rasfast.dispatch.cuda_module().beam_plan(  # noqa: E731
        n=10, D=16, beam_width=2, max_len=2, max_neighbors=0, decay_len=1, max_deg=4)
    monkeypatch.setenv("RASFAST_BEAM_LANES", "3")
    with pytest.raises(ValueError, match="RASFAST_BEAM_LANES: expected 4, 8, 16 or 32, got '3'"):
        plan()
    monkeypatch.delenv("RASFAST_BEAM_LANES")
    monkeypatch.setenv("RASFAST_BEAM_THREADS", "512")
    with pytest.raises(ValueError, match="RASFAST_BEAM_THREADS: expected 256 or 1024, got '512'"):
        plan()


@cuda_kernels
@pytest.mark.parametrize("gamma", [None, 7.3])
def test_cuda_pool_merged_per_group_and_rows_over_chunks(gamma):
    """The kernel's sizes where its design branches: 50 beams whose candidates fill the pool
    in groups (several merges per step), rows longer than one 256-candidate chunk (hubs),
    and rows much shorter than the widest (each sorts its own power of two)."""
    if "cuda" not in gpu_backends():
        pytest.skip("cuda module not built")
    seed = int(np.random.SeedSequence().entropy % 2 ** 31)
    rng = np.random.default_rng(seed)
    n = 1200
    graph = random_graph(rng, n, 400, hub=300, isolated=100)
    deg = np.diff(graph[0])
    plan = rasfast.dispatch.cuda_module().beam_plan(n=n, D=12, beam_width=50, max_len=3, max_neighbors=0,
                                                     decay_len=1, max_deg=int(deg.max()))
    # the branches are taken: several merges per step, the last one of a partial group
    assert plan["group"] < 50 and 50 % plan["group"] and deg.max() > plan["chunk"], plan
    p = dict(graph=tuple(torch.from_numpy(a) for a in graph), emb=torch.from_numpy(quantized(rng, (n, 12))),
             q=torch.from_numpy(quantized(rng, (3, 12))), seeds=random_seeds(rng, 3, n, 40))
    pg = dict(p, graph=tuple(a.to(GPU_DEVICE) for a in p["graph"]), emb=p["emb"].to(GPU_DEVICE),
              q=p["q"].to(GPU_DEVICE))
    kw = dict(beam_width=50, max_len=3, gamma=gamma)
    try:
        assert_same(search(pg, "cuda", **kw), search(p, "torch", **kw))
    except AssertionError as e:
        raise AssertionError(f"seed {seed}: {e}") from None


# --------------------------------------------------------------- hand-computed semantics

def _tiny(graph_rows, emb, q, seeds):
    indptr = np.zeros(len(graph_rows) + 1, np.int64)
    indptr[1:] = np.cumsum([len(r) for r in graph_rows])
    indices = np.array([j for r in graph_rows for j in r], np.int64)
    return dict(graph=(indptr, indices), emb=np.array(emb, np.float32),
                q=np.array(q, np.float32), seeds=seeds)


@pytest.mark.parametrize("backend", ["torch"] + cpu_backends())
def test_decay_multiplies_cumulative_score_negative_toward_zero(backend):
    # q = x. Seed 0: e0 = (-1, 0), score -1. Candidates of beam [0]:
    #   1: u = (-2, 1) -> cos = -2/sqrt(5); v1 = -1 - 2/sqrt(5) = -1.894 (rank 0, factor 1)
    #   2: u = (-2, 0) -> cos = -1;         v2 = -2                  (rank 1, factor e^-1)
    # Decay on the cumulative value: d2 = -2/e = -0.736 > d1, so [0, 2] comes first.
    # (No decay would put [0, 1] first; decaying only the step score would give -1.368.)
    p = _tiny([[1, 2], [0], [0]], [[-1, 0], [-1, 1], [-1, 0]], [[1, 0]], [[0]])
    res = search(p, backend, beam_width=2, max_len=2, gamma=1.0)
    assert res.sequences[0].tolist() == [[0, 2], [0, 1]]
    np.testing.assert_allclose(res.scores[0], [-2 / math.e, -1 - 2 / math.sqrt(5)], rtol=1e-6)
    # positive values shrink: seed 0 = (1, 0); candidates 1: (1, 1) and 2: (1, -2)
    p = _tiny([[1, 2], [0], [0]], [[1, 0], [1, 1], [1, -2]], [[1, 0]], [[0]])
    res = search(p, backend, beam_width=2, max_len=2, gamma=4.0)
    v1, v2 = 1 + 2 / math.sqrt(5), 1 + 2 / math.sqrt(8)
    assert res.sequences[0].tolist() == [[0, 1], [0, 2]]
    np.testing.assert_allclose(res.scores[0], [v1, v2 * math.exp(-1 / 4)], rtol=1e-6)


@pytest.mark.parametrize("backend", ["torch"] + cpu_backends())
def test_candidates_exclude_every_triple_of_the_previous_beams(backend):
    # beams [0] and [1]; 0's neighbours {1, 2}, 1's neighbours {0, 3}. Triple 1 would be the
    # best extension of [0] (same direction as q) but it is in beam [1]: excluded.
    p = _tiny([[1, 2], [0, 3], [0], [1]], [[1, 0], [1, 0.1], [0, 1], [0, -1]], [[1, 0]], [[0, 1]])
    res = search(p, backend, beam_width=2, max_len=2)
    assert sorted(map(tuple, res.sequences[0].tolist())) == [(0, 2), (1, 3)]
    # with b = 1 only [0] survives step 0, so 1 is allowed and wins
    res = search(p, backend, beam_width=1, max_len=2)
    assert res.sequences[0].tolist() == [[0, 1]]
    # length 3: the previous step's beams are [0,1]/[0,2] ... never a triple already in them
    res = search(p, backend, beam_width=2, max_len=4)
    for k in range(int(res.num_beams[0])):
        seq = res.sequences[0, k, : int(res.lengths[0])].tolist()
        assert len(set(seq)) == len(seq)


@pytest.mark.parametrize("backend", ["torch"] + cpu_backends())
def test_ties_lower_id_then_lower_beam_and_stopping(backend):
    # seeds 0 and 1 have identical embeddings (tie: 0 first); both reach 2 only, with equal
    # values: [0, 2] (beam 0) before [1, 2] (beam 1). Triple 2's neighbours are all in the
    # beams, so step 2 finds no candidate and the length-2 beams are the result.
    p = _tiny([[2], [2], [0, 1]], [[1, 1], [1, 1], [0, 1]], [[1, 0]], [[1, 0, 1]])
    res = search(p, backend, beam_width=3, max_len=4)
    assert res.sequences[0].tolist() == [[0, 2, -1, -1], [1, 2, -1, -1], [-1] * 4]
    assert int(res.lengths[0]) == 2 and int(res.num_beams[0]) == 2
    assert res.scores[0][0] == res.scores[0][1] and res.scores[0][2] == -np.inf
    # isolated seeds: nothing to extend, length 1
    p = _tiny([[], []], [[1, 0], [0, 1]], [[1, 0], [0, 1]], [[0, 1], []])
    res = search(p, backend, beam_width=2, max_len=3)
    assert res.sequences[0, :, 0].tolist() == [0, 1] and res.lengths.tolist() == [1, 0]
    assert res.num_beams.tolist() == [2, 0] and (res.sequences[1] == -1).all()


def test_zero_vectors_score_zero_and_max_neighbors_ties_by_id():
    # all candidates tie at score 0 (zero running sums); max_neighbors keeps the lowest ids
    p = _tiny([[1, 2, 3], [0], [0], [0]], [[1, 0], [-1, 0], [-1, 0], [-1, 0]], [[0, 1]], [[0]])
    for backend in ["torch"] + cpu_backends():
        res = search(p, backend, beam_width=3, max_len=2, max_neighbors=2, gamma=2.0)
        assert res.sequences[0].tolist() == [[0, 1], [0, 2], [-1, -1]]
        assert res.scores[0][:2].tolist() == [0.0, 0.0]


def test_reference_sqrt_is_correctly_rounded():
    """The reference's float32 roots are IEEE's (std::sqrt, CUDA sqrtf), so the backends agree
    bit for bit on exact inputs; torch's float32 sqrt was one ulp off at 2.625 (Zen 4)."""
    from rasfast.reference.beam import sqrt_rn
    x = torch.tensor([2.625, 3.5625, 0.0, 1e-30, 3e38, 1.0] + [k / 16 for k in range(1, 400)])
    want = np.sqrt(x.numpy().astype(np.float64)).astype(np.float32)   # rounded once from double
    assert torch.equal(sqrt_rn(x), torch.from_numpy(want))
    assert sqrt_rn(x).dtype == torch.float32


def _near_tie_problem():
    """Seed 1746146270 of test_cuda_pool_merged_per_group_and_rows_over_chunks: sequences
    whose scores differ only through the rounding of a root, which the cpu, torch and cuda
    backends rounded three ways (and ordered two ways) before the reference's roots were
    correctly rounded."""
    rng = np.random.default_rng(1746146270)
    n = 1200
    graph = random_graph(rng, n, 400, hub=300, isolated=100)
    return dict(graph=tuple(torch.from_numpy(a) for a in graph), emb=torch.from_numpy(quantized(rng, (n, 12))),
                q=torch.from_numpy(quantized(rng, (3, 12))), seeds=random_seeds(rng, 3, n, 40))


@pytest.mark.parametrize("backend", cpu_backends())
def test_cpu_backends_agree_on_a_near_tie_of_roots(backend):
    p = _near_tie_problem()
    for L in (1, 3):   # L = 1: the seeds' scores themselves, bit for bit
        kw = dict(beam_width=50, max_len=L)
        got, want = search(p, backend, **kw), search(p, "torch", **kw)
        assert_same(got, want)
        assert torch.equal(torch.as_tensor(got.scores), torch.as_tensor(want.scores))


@cuda_kernels
def test_cuda_agrees_on_a_near_tie_of_roots():
    if "cuda" not in gpu_backends():
        pytest.skip("cuda module not built")
    p = _near_tie_problem()
    pg = dict(p, graph=tuple(a.to(GPU_DEVICE) for a in p["graph"]), emb=p["emb"].to(GPU_DEVICE),
              q=p["q"].to(GPU_DEVICE))
    for L in (1, 3):
        kw = dict(beam_width=50, max_len=L)
        got, want = search(pg, "cuda", **kw), search(p, "torch", **kw)
        assert_same(got, want)
        assert torch.equal(torch.as_tensor(got.scores).cpu(), torch.as_tensor(want.scores))


def test_decay_factors():
    f = decay_factors(2.5, 100)
    assert len(f) == 4 and f[3] == pytest.approx(math.exp(-1))
    assert f[:3] == pytest.approx([1, math.exp(-0.4), math.exp(-0.8)])
    assert len(decay_factors(1e9, 5)) == 6  # capped at the largest neighbour list


# ------------------------------------------------------------------ inputs and outputs

def test_kinds_graph_objects_seed_formats_and_flatten():
    rng = np.random.default_rng(1)
    p = make_problem(rng, 30, 6, 3)
    indptr, indices = (a.numpy() for a in p["graph"])
    emb, q = p["emb"].numpy(), p["q"].numpy()
    seeds = [s.tolist() for s in p["seeds"]]
    ref = rasfast.triple_beam_search((indptr, indices), emb, q, seeds, beam_width=3, max_len=3,
                                     backend="torch")
    assert isinstance(ref.sequences, np.ndarray) and ref.scores.dtype == np.float32
    g = SimpleNamespace(indptr=indptr, indices=indices.astype(np.int32),
                        passage_ids=np.arange(30) // 4)
    ptr = np.cumsum([0] + [len(s) for s in seeds])
    ids = np.concatenate([np.asarray(s, np.int64) for s in seeds])
    for backend in ["torch"] + cpu_backends(triton=False):
        for sd in (seeds, (ptr, ids)):
            assert_same(rasfast.triple_beam_search(g, emb, q, sd, beam_width=3, max_len=3,
                                                   backend=backend), ref)
    rect = rasfast.triple_beam_search(g, emb, q, np.array([[1, 2], [3, 3], [4, 0]]), beam_width=2,
                                      max_len=1)
    assert rect.num_beams.tolist() == [2, 1, 2]
    # flatten: breadth first, unique, first occurrence kept
    r = rasfast.BeamResult(sequences=np.array([[[5, 7, 9], [6, 7, 8], [5, 2, 4]]]),
                           scores=np.zeros((1, 3), np.float32), lengths=np.array([3]),
                           num_beams=np.array([3]))
    assert r.flatten_triples(0).tolist() == [5, 6, 7, 2, 9, 8, 4]
    pids = np.array([0, 0, 1, 1, 2, 2, 3, 3, 4, 4])
    assert r.flatten_passages(0, pids).tolist() == [2, 3, 1, 4]
    assert r.flatten_passages(0, SimpleNamespace(passage_ids=pids)).tolist() == [2, 3, 1, 4]
    t = rasfast.triple_beam_search(g, p["emb"], p["q"], seeds, beam_width=3, max_len=3)
    batch = t.flatten_triples_batch()
    assert isinstance(batch[1], torch.Tensor) and len(batch) == 3
    for i in range(3):
        flat = batch[i].tolist()
        assert flat == t.flatten_triples(i).tolist() and len(set(flat)) == len(flat)
        assert t.flatten_passages_batch(g)[i].tolist() == t.flatten_passages(i, g).tolist()
    assert t.flatten_triples(0).numel() == 0  # query 0 has no seeds
    with pytest.raises(ValueError, match="passage_ids"):
        r.flatten_passages(0, np.zeros(3, np.int64))
    with pytest.raises(ValueError, match="i"):
        r.flatten_triples(1)


class BagOfWords:
    """encode(text) = sum of per-token vectors, so text scoring equals sum scoring."""

    def __init__(self, vectors):
        self.vectors, self.calls = vectors, 0

    def encode(self, texts):
        self.calls += 1
        return np.stack([sum(self.vectors[int(w[1:])] for w in t.split()) for t in texts])


def test_text_scoring_equals_sum_scoring_for_an_additive_encoder():
    rng = np.random.default_rng(4)
    p = make_problem(rng, 40, 16, 4, exact=False)
    enc = BagOfWords(p["emb"].numpy().astype(np.float64))
    texts = [f"t{i}" for i in range(40)]
    kw = dict(beam_width=4, max_len=3, max_neighbors=5)
    res = search(p, "auto", scoring="text", encoder=enc, texts=texts, **kw)
    assert_same(res, search(p, "torch", **kw))
    assert enc.calls <= 4 * 3  # one batch per query and step
    g = SimpleNamespace(indptr=p["graph"][0], indices=p["graph"][1], texts=texts)
    res2 = rasfast.triple_beam_search(g, None, p["q"], p["seeds"], scoring="text", encoder=enc, **kw)
    assert_same(res2, res)


# ------------------------------------------------------------------------- bad input

def _ok():
    return _tiny([[1], [0], []], [[1, 0], [0, 1], [1, 1]], [[1, 0]], [[0, 2]])


BAD = [
    (lambda p: dict(p, graph=[1, 2, 3]), ValueError, "graph"),
    (lambda p: dict(p, graph="x"), TypeError, "graph"),
    (lambda p: dict(p, graph=(p["graph"][0][:-1], p["graph"][1])), ValueError, "graph.indptr"),
    (lambda p: dict(p, graph=(p["graph"][0] + 1, p["graph"][1])), ValueError, "graph.indptr"),
    (lambda p: dict(p, graph=(np.array([0, 2, 1, 2]), p["graph"][1])), ValueError, "graph.indptr"),
    (lambda p: dict(p, graph=(p["graph"][0].astype(np.float32), p["graph"][1])), TypeError, "graph.indptr"),
    (lambda p: dict(p, graph=(p["graph"][0], np.array([[1, 0]]))), ValueError, "graph.indices"),
    (lambda p: dict(p, graph=(p["graph"][0], np.array([7, 0]))), ValueError, "graph.indices"),
    (lambda p: dict(p, graph=(p["graph"][0], np.array([-1, 0]))), ValueError, "graph.indices"),
    (lambda p: dict(p, graph=(np.array([0, 2, 2, 2]), np.array([2, 1]))), ValueError, "graph.indices"),
    (lambda p: dict(p, graph=(np.array([0, 2, 2, 2]), np.array([1, 1]))), ValueError, "graph.indices"),
    (lambda p: dict(p, emb=np.array([[np.nan, 0], [0, 1], [1, 1]], np.float32)), ValueError, "triple_emb"),
    (lambda p: dict(p, emb=np.array([[1, 0], [np.inf, 1], [1, 1]], np.float32)), ValueError, "triple_emb"),
    (lambda p: dict(p, emb=p["emb"].astype(np.float64)), TypeError, "triple_emb"),
    (lambda p: dict(p, emb=p["emb"][:, :1]), ValueError, "q_emb"),
    (lambda p: dict(p, emb=p["emb"][0]), ValueError, "triple_emb"),
    (lambda p: dict(p, emb=p["emb"].astype(np.int32)), TypeError, "triple_emb"),
    (lambda p: dict(p, q=np.array([[np.nan, 0]], np.float32)), ValueError, "q_emb"),
    (lambda p: dict(p, q=np.array([[3e38, 3e38]], np.float32)), ValueError, "q_emb"),
    (lambda p: dict(p, q=[[1.0, 0.0]]), TypeError, "q_emb"),
    (lambda p: dict(p, seeds=[[0], [1]]), ValueError, "seeds"),
    (lambda p: dict(p, seeds=[[3]]), ValueError, "seeds"),
    (lambda p: dict(p, seeds=[[-1]]), ValueError, "seeds"),
    (lambda p: dict(p, seeds=[[0.5]]), TypeError, "seeds"),
    (lambda p: dict(p, seeds=[np.array([0.0])]), TypeError, "seeds"),
    (lambda p: dict(p, seeds=5), TypeError, "seeds"),
    (lambda p: dict(p, seeds=(np.array([0, 3]), np.array([0, 1]))), ValueError, "seeds.ptr"),
    (lambda p: dict(p, seeds=(np.array([0]), np.array([0]))), ValueError, "seeds.ptr"),
    (lambda p: dict(p, seeds=(np.array([0, 1]), np.array([0]), 1)), ValueError, "seeds"),
]


@pytest.mark.parametrize("backend", ["torch", "cpu"])
@pytest.mark.parametrize("case", range(len(BAD)))
def test_bad_input(case, backend):
    make, exc, name = BAD[case]
    p = make(_ok())
    with pytest.raises(exc, match=name):
        rasfast.triple_beam_search(p["graph"], p["emb"], p["q"], p["seeds"], max_len=2,
                                   backend=backend)


@pytest.mark.parametrize("kw,exc,name", [
    (dict(beam_width=0), ValueError, "beam_width"), (dict(beam_width=2.0), TypeError, "beam_width"),
    (dict(max_len=0), ValueError, "max_len"), (dict(gamma=0.0), ValueError, "gamma"),
    (dict(gamma=-1), ValueError, "gamma"), (dict(gamma=float("inf")), ValueError, "gamma"),
    (dict(gamma=True), TypeError, "gamma"), (dict(gamma="2"), TypeError, "gamma"),
    (dict(max_neighbors=0), ValueError, "max_neighbors"),
    (dict(scoring="dot"), ValueError, "scoring"), (dict(backend="gpu"), ValueError, "backend"),
    (dict(scoring="text"), TypeError, "encoder"),
    (dict(scoring="text", encoder=BagOfWords(None)), ValueError, "texts"),
    (dict(scoring="text", encoder=BagOfWords(None), texts=["a"]), ValueError, "texts"),
    (dict(scoring="text", encoder=BagOfWords(None), texts=["t0", "t1", "t2"], backend="cpu"),
     ValueError, "backend"),
])
def test_bad_arguments(kw, exc, name):
    p = _ok()
    with pytest.raises(exc, match=name):
        rasfast.triple_beam_search(p["graph"], p["emb"], p["q"], p["seeds"], **kw)


def test_cuda_backend_without_device_is_a_clear_error():
    if torch.cuda.is_available() or EMULATED:
        pytest.skip("a CUDA device (or the emulator, RASFAST_CUDA_EMU=1) is present")
    p = _ok()
    with pytest.raises((rasfast.BackendUnavailable, ValueError), match="cuda|CUDA"):
        rasfast.triple_beam_search(p["graph"], p["emb"], p["q"], p["seeds"], backend="cuda")


def test_bad_encoder_output_shape():
    p = _ok()

    class Wrong:
        def encode(self, texts):
            return np.zeros((len(texts), 5), np.float32)

    with pytest.raises(ValueError, match="encoder"):
        rasfast.triple_beam_search(p["graph"], p["emb"], p["q"], p["seeds"], scoring="text",
                                   encoder=Wrong(), texts=["a", "b", "c"])


def test_cpu_portable_path_matches_reference():
    """The cpu backend picks AVX2 code at run time; RASFAST_BEAM_PORTABLE=1 forces the
    portable loops, which must agree as well (checked in a fresh interpreter)."""
    import os
    import subprocess
    import sys
    code = (
        "import numpy as np, torch, sys; sys.path.insert(0, 'tests');"
        "import test_beam as t;"
        "rng = np.random.default_rng(9);"
        "[t.assert_same(t.search(p, 'cpu', beam_width=5, max_len=3, max_neighbors=4),"
        " t.search(p, 'torch', beam_width=5, max_len=3, max_neighbors=4))"
        " for dt in t.DTYPES for p in [t.make_problem(rng, 60, 37, 4, dt)]];"
        "print('ok')")
    env = dict(os.environ, RASFAST_BEAM_PORTABLE="1")
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    out = subprocess.run([sys.executable, "-c", code], cwd=root, env=env, capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0 and "ok" in out.stdout, out.stderr[-2000:]


@pytest.mark.parametrize("backend", ["torch"] + cpu_backends())
def test_empty_inputs(backend):
    g = (np.array([0, 1, 2]), np.array([1, 0]))
    r = rasfast.triple_beam_search(g, np.ones((2, 3), np.float32), np.ones((0, 3), np.float32), [],
                                   backend=backend)
    assert r.sequences.shape == (0, 10, 2) and r.scores.shape == (0, 10)
    assert r.flatten_triples_batch() == []
    empty = (np.array([0]), np.array([], np.int64))
    r = rasfast.triple_beam_search(empty, np.ones((0, 3), np.float32), np.ones((2, 3), np.float32),
                                   [[], []], max_len=3, backend=backend)
    assert r.sequences.shape == (2, 10, 3) and (r.sequences == -1).all()
    assert r.lengths.tolist() == [0, 0] and r.num_beams.tolist() == [0, 0]
    assert np.isneginf(r.scores).all()


def test_cuda_launch_plan_without_a_device(monkeypatch):
    """Host-side checks of the CUDA binding (run wherever the module is built)."""
    if not rasfast.backends()["cuda"]["built"]:
        pytest.skip("rasfast._cuda not built")
    mod = rasfast.dispatch.cuda_module()
    # the benchmark's shape: the one-sort step's 2,048-candidate buffer (32 KB) on top of the
    # beam-by-beam buffers (< 16 KB); RASFAST_BEAM_COMBINED=0 leaves it out
    small = mod.beam_search_smem(200_000, 384, 10, 2, 100, 21, 791)
    assert 32 * 1024 < small < 48 * 1024 and small <= mod.beam_max_smem
    assert mod.beam_plan(n=200_000, D=384, beam_width=10, max_len=2, max_neighbors=100, decay_len=21,
                         max_deg=791)["cap3"] == 2048
    monkeypatch.setenv("RASFAST_BEAM_COMBINED", "0")
    assert 0 < mod.beam_search_smem(200_000, 384, 10, 2, 100, 21, 791) < 16 * 1024
    monkeypatch.delenv("RASFAST_BEAM_COMBINED")
    assert mod.beam_search_smem(200_000, 384, 64, 4, 100, 129, 791) > small
    args = dict(indptr=0, indices=0, idx64=True, emb=0, dtype_code=0, n=10, D=4, q=0, qnorm=0,
                B=0, seed_ptr=0, seed_ids=0, n_seed_ids=0, beam_width=10, max_len=2, max_neighbors=0, decay=0,
                decay_len=3, max_deg=5, out_seq=0, out_score=0, out_len=0, out_count=0,
                scratch_u=0, err=0, stream=0)
    mod.beam_search(**args)  # B = 0: nothing to launch
    with pytest.raises(ValueError, match="shared memory"):
        mod.beam_search(**dict(args, beam_width=20_000))
    with pytest.raises(ValueError, match="n < 2"):
        mod.beam_search(**dict(args, n=2**31))
    with pytest.raises(ValueError, match="null"):
        mod.beam_search(**dict(args, B=1))


def test_graph_object_keeps_its_device_copy():
    """A graph object with host arrays (a TripleGraph) is copied to a device once: later
    searches reuse the copy, and replacing an array makes a fresh one (the meta device
    stands in for a GPU: the copy logic is the same, no data moves)."""
    from rasfast.ops import beam as beam_op
    rng = np.random.default_rng(0)
    n = 30
    deg = rng.integers(0, 5, n)
    indptr = np.concatenate([[0], np.cumsum(deg)]).astype(np.int64)
    indices = rng.integers(0, n, int(indptr[-1])).astype(np.int64)
    g = SimpleNamespace(indptr=indptr, indices=indices)
    meta = torch.device("meta")
    p1, i1, d1 = beam_op._graph(g, n, meta)
    p2, i2, d2 = beam_op._graph(g, n, meta)
    assert p1.device == meta and i1.device == meta
    assert p2 is p1 and i2 is i1 and d1 == d2 == int(deg.max())
    g.indices = indices.copy()  # a new array: a new copy
    _, i3, _ = beam_op._graph(g, n, meta)
    assert i3 is not i1
    # a plain pair of arrays has no owner to keep a copy on
    q1 = beam_op._graph((indptr, indices), n, meta)[0]
    assert beam_op._graph((indptr, indices), n, meta)[0] is not q1
