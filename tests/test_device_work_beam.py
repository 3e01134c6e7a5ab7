"""Device-work budget of triple_beam_search on the CUDA emulator (issue 38, DESIGN.md s.11).

Backend "cuda" reads the device once per search: the kernel's error flag, together with the
input checks that need device values (q finite, its norm, device seeds' range and offsets),
all in one transfer. It runs no torch op over the corpus (``triple_emb``) and allocates
nothing outside torch. The graph's offsets are checked on the host (numpy arrays, a
TripleGraph: once per graph object) or, for a device CSR, once per indptr tensor (one more
read on its first search only; docs/gpu.md, "Host synchronisations that remain"). Counted
with rasfast.device_work on the emulator (``RASFAST_CUDA_EMU=1``: every tensor is a CPU
tensor, so any host read of a tensor counts). Run:
``RASFAST_CUDA_EMU=1 pytest -m cuda_emu tests/test_device_work_beam.py``.

Counts measured when these budgets were set (n=400, D=32, B=16, b=5, max_len=3):

| call | syncs | launches (kernels + torch ops) | allocs | watched reads |
|---|---:|---:|---:|---:|
| before: any graph form, seeds a list of numpy arrays | 15 | 45 (1 + 44) | 0 | 0 |
| host graph (numpy / graph object), host seeds | 1 | 14 (1 + 13) | 0 | 0 |
| host graph, device seeds (ptr, ids) | 1 | 36 (1 + 35) | 0 | 0 |
| device CSR, its first search, host seeds | 2 | 20 (1 + 19) | 0 | 0 |
| device CSR, later searches | 1 | 14 (1 + 13) | 0 | 0 |
| sixth session: the kernel computes and checks |q|, drops repeated device seeds and flags bad seed ids itself; the decay table is kept on the device | | | | |
| host graph, host seeds | 1 | 3 (1 + 2) | 0 | 0 |
| host graph, device seeds (ptr, ids) | 1 | 9 (1 + 8: the offsets' check) | 0 | 0 |
| host graph, device seeds (list / [B, S]) | 1 | 3-4 | 0 | 0 |
| eleventh session: the kernel checks the seed offsets too (error code 6) | | | | |
| host graph, device seeds (ptr, ids) | 1 | 3 (1 + 2) | 0 | 0 |
"""
import types

import numpy as np
import pytest
import torch

import rasfast
from rasfast.device_work import count_device_work

from device_work_util import EMULATED_ONLY, emulated, fresh_seed  # noqa: F401 (autouse fixture)
from test_beam import assert_same, quantized, random_graph, random_seeds

pytestmark = EMULATED_ONLY

KW = dict(beam_width=5, max_len=3, max_neighbors=8)
HOST_SEEDS_LAUNCHES = 4     # measured 3: 1 kernel + the error flag's zeros and cast, whatever B
DEVICE_SEEDS_LAUNCHES = 4  # measured 3 (ptr, ids; [B, S]) and 4 (a list: its cat): the kernel
                           # checks the seed offsets and drops repeated seeds itself




def problem(seed, n=400, D=32, B=16):
    """Quantized embeddings (test_beam.quantized): every dot product and running sum is
    exact, so the cuda kernel and the torch reference agree bit for bit and the sequences can
    be compared exactly. With random floats their summation orders differ in the last bit,
    and a near-tie then orders two sequences differently (this test failed that way once in
    the eighth session's make test)."""
    rng = np.random.default_rng(seed)
    indptr, indices = random_graph(rng, n, max(2, n // 3), hub=n // 4, isolated=n // 8)
    emb = torch.from_numpy(quantized(rng, (n, D)))
    q = torch.from_numpy(quantized(rng, (B, D)))
    return (indptr, indices), emb, q, random_seeds(rng, B, n, 8)


def seed_forms(seeds):
    """The accepted seed forms: host (lists of numpy arrays) and device (torch) ones."""
    ptr = np.zeros(len(seeds) + 1, np.int64)
    ptr[1:] = np.cumsum([len(s) for s in seeds])
    ids = np.concatenate(seeds).astype(np.int64)
    width = max(len(s) for s in seeds)
    square = np.stack([np.resize(s, width) if len(s) else np.zeros(width, np.int64) for s in seeds])
    return {"numpy list": seeds,
            "device (ptr, ids)": (torch.from_numpy(ptr), torch.from_numpy(ids)),
            "device list": [torch.from_numpy(s.astype(np.int64)) for s in seeds],
            "device [B, S]": torch.from_numpy(square)}


def reference(graph, emb, q, seeds):
    return rasfast.triple_beam_search(graph, emb, q, seeds, backend="torch", **KW)


@pytest.mark.parametrize("graph_form", ["numpy pair", "graph object"])
@pytest.mark.parametrize("seeds_form", ["numpy list", "device (ptr, ids)", "device list",
                                        "device [B, S]"])
def test_one_sync_no_corpus_pass_and_the_reference_result(graph_form, seeds_form):
    seed = fresh_seed()
    graph, emb, q, seeds = problem(seed)
    g = graph if graph_form == "numpy pair" else types.SimpleNamespace(indptr=graph[0],
                                                                         indices=graph[1])
    sd = seed_forms(seeds)[seeds_form]
    if seeds_form == "device [B, S]":  # padded rows repeat seeds (duplicates count once)
        seeds = [np.asarray(r) for r in sd.numpy()]
    want = reference(graph, emb, q, seeds)
    for _ in range(2):  # the graph object is checked on its first search only: both count 1
        with count_device_work(watch=[emb]) as w:
            got = rasfast.triple_beam_search(g, emb, q, sd, backend="cuda", **KW)
        assert w.syncs <= 1, (seed, w.summary())
        assert w.allocs == 0 and w.watched_reads == 0, (seed, w.summary())
        bound = HOST_SEEDS_LAUNCHES if seeds_form == "numpy list" else DEVICE_SEEDS_LAUNCHES
        assert w.launches <= bound and w.kernels == 1, (seed, w.summary())
        assert_same(got, want)


def test_device_csr_is_checked_on_its_first_search_only():
    seed = fresh_seed()
    graph, emb, q, seeds = problem(seed)
    dev_graph = tuple(torch.from_numpy(a) for a in graph)
    want = reference(graph, emb, q, seeds)
    counts = []
    for i in range(3):
        with count_device_work(watch=[emb]) as w:
            got = rasfast.triple_beam_search(dev_graph, emb, q, seeds, backend="cuda", **KW)
        assert_same(got, want)
        check_ops = 6 if i == 0 else 0  # the offsets' check, first search only
        assert w.allocs == 0 and w.watched_reads == 0, w.summary()
        assert w.launches <= HOST_SEEDS_LAUNCHES + check_ops, w.summary()
        counts.append(w.syncs)
    assert counts == [2, 1, 1], (seed, counts)
    dev_graph[0][1:] += 0  # an in-place change (same values): checked again
    with count_device_work() as w:
        rasfast.triple_beam_search(dev_graph, emb, q, seeds, backend="cuda", **KW)
    assert w.syncs == 2, w.summary()


def test_validate_none_no_sync_same_result_and_bad_ids_stay_in_bounds():
    """validate="none": no host read at all once a device CSR has had its first search (the
    call can be captured in a CUDA graph); the reference's result on good input; bad
    neighbour and seed ids give an unspecified result without an error or an out-of-bounds
    access (`make test-asan` runs this file against the AddressSanitizer build)."""
    seed = fresh_seed()
    graph, emb, q, seeds = problem(seed)
    dev_graph = tuple(torch.from_numpy(a) for a in graph)
    want = reference(graph, emb, q, seeds)
    rasfast.triple_beam_search(dev_graph, emb, q, seeds, backend="cuda", **KW)  # checks the CSR
    for sd in (seeds, seed_forms(seeds)["device (ptr, ids)"]):
        with count_device_work(watch=[emb]) as w:
            got = rasfast.triple_beam_search(dev_graph, emb, q, sd, backend="cuda", validate="none", **KW)
        assert w.syncs == 0 and w.watched_reads == 0 and w.kernels == 1, (seed, w.summary())
        assert_same(got, want)
    rng = np.random.default_rng(seed)
    bad_indices = graph[1].copy()
    bad_indices[rng.integers(0, len(bad_indices), 20)] = 10 ** 6   # out of range (and unsorted)
    ptr, ids = seed_forms(seeds)["device (ptr, ids)"]
    bad_ids, bad_ptr = ids.clone(), ptr.clone()
    bad_ids[::3] = -7
    bad_ptr[1:-1] = torch.from_numpy(rng.integers(-20, 3 * len(ids), len(ptr) - 2))
    nan_emb = emb.clone()
    nan_emb[::5] = float("nan")
    for g, e, sd in (((graph[0], bad_indices), emb, seeds), (graph, emb, (bad_ptr, bad_ids)),
                     (graph, nan_emb, seeds)):
        got = rasfast.triple_beam_search(g, e, q, sd, backend="cuda", validate="none", **KW)
        assert tuple(got.sequences.shape) == (q.shape[0], KW["beam_width"], KW["max_len"])
    with pytest.raises(ValueError):  # the default still reads the flag
        rasfast.triple_beam_search((graph[0], bad_indices), emb, q, seeds, backend="cuda", **KW)
    with pytest.raises(ValueError, match="validate"):
        rasfast.triple_beam_search(graph, emb, q, seeds, backend="cuda", validate="off", **KW)


@pytest.mark.parametrize("degrees", ["hub", "low"])
def test_captured_search_of_an_unchecked_device_csr_reads_nothing(monkeypatch, degrees):
    """torch.compile(mode="reduce-overhead") captures the operator in a CUDA graph on copies
    of its inputs, so the CSR it gets was never checked, and a capture cannot read the device
    (the seventh GPU run, H200: the offsets' check failed inside torch). Under a capture
    (faked here: the emulator has none) a search with validate="none" reads nothing: the
    offsets reach the kernel clamped and the max degree is bounded by nnz, with the result
    of the checked maximum (the decay table and the kernel's plan are longer with "low"
    degrees: max degree < ceil(gamma)); nothing is recorded as checked; other validate
    modes raise before any work."""
    from rasfast.ops import beam as beam_op
    seed = fresh_seed()
    rng = np.random.default_rng(seed)
    graph, emb, q, seeds = problem(seed)
    if degrees == "low":
        graph = random_graph(rng, len(emb), 4 * len(emb))
        assert int(np.diff(graph[0]).max()) < 2 * KW["beam_width"], seed  # ceil(gamma)
    ptr, ids = seed_forms(seeds)["device (ptr, ids)"]
    checked = tuple(torch.from_numpy(a) for a in graph)
    want = rasfast.triple_beam_search(checked, emb, q, (ptr, ids), backend="cuda", validate="none",
                                      **KW)   # eager: the CSR checked (one read)
    assert_same(want, reference(graph, emb, q, seeds))
    monkeypatch.setattr(beam_op, "stream_capturing", lambda dev: True)
    monkeypatch.setattr(beam_op, "_DECAY_ON_DEVICE", {})   # the table's copy under capture too
    fresh = tuple(torch.from_numpy(a.copy()) for a in graph)  # never searched
    with count_device_work(watch=[emb]) as w:
        got = rasfast.triple_beam_search(fresh, emb, q, (ptr, ids), backend="cuda",
                                         validate="none", **KW)
    assert w.syncs == 0 and w.watched_reads == 0 and w.kernels == 1, (seed, w.summary())
    assert_same(got, want)
    assert not hasattr(fresh[0], beam_op._CSR_ATTR) and not beam_op._DECAY_ON_DEVICE
    # a bad CSR under capture: the kernel gets clamped offsets (an unspecified result, no
    # out-of-bounds read: `make test-asan` runs this file)
    bad_ptr = fresh[0].clone()
    bad_ptr[1:-1] = torch.from_numpy(rng.integers(-50, 3 * len(graph[1]), len(bad_ptr) - 2))
    got = rasfast.triple_beam_search((bad_ptr, fresh[1]), emb, q, (ptr, ids), backend="cuda",
                                     validate="none", **KW)
    assert tuple(got.sequences.shape) == (q.shape[0], KW["beam_width"], KW["max_len"])
    for validate in ("auto", "full"):
        with count_device_work() as w, pytest.raises(ValueError, match="graph: a device CSR must "
                                                     "be checked once outside CUDA graph capture"):
            rasfast.triple_beam_search(tuple(torch.from_numpy(a.copy()) for a in graph), emb, q,
                                       (ptr, ids), backend="cuda", validate=validate, **KW)
        assert w.syncs == 0 and w.kernels == 0, w.summary()
    # a CSR checked before the capture: the kernel's error flag still cannot be read
    with count_device_work() as w, pytest.raises(ValueError, match="validate: a search captured"):
        rasfast.triple_beam_search(checked, emb, q, (ptr, ids), backend="cuda", **KW)
    assert w.syncs == 0 and w.kernels == 0, w.summary()
    with pytest.raises(ValueError, match="backend: a search captured in a CUDA graph needs "
                                         "backend 'cuda'"):
        rasfast.triple_beam_search(checked, emb, q, (ptr, ids), backend="torch", validate="none", **KW)


def test_launches_do_not_grow_with_the_batch():
    graph, emb, q, seeds = problem(fresh_seed(), B=64)
    with count_device_work() as w:
        rasfast.triple_beam_search(graph, emb, q, seeds, backend="cuda", **KW)
    assert w.launches <= HOST_SEEDS_LAUNCHES and w.syncs <= 1, w.summary()


# ------------------------------------------------------------------ bad input, same errors

def _bad_cases():
    graph, emb, q, seeds = problem(3, n=60, D=8, B=4)
    n = emb.shape[0]
    nan_q = q.clone()
    nan_q[1, 2] = float("nan")
    big_q = torch.full_like(q, 3e38)
    nan_emb = emb.clone()
    nan_emb[:] = float("nan")
    bad_ptr = graph[0].copy()
    bad_ptr[5] = bad_ptr[6] + 1
    shifted = graph[0] + 1
    s_ptr, s_ids = seed_forms(seeds)["device (ptr, ids)"]
    out_ids = s_ids.clone()
    out_ids[0] = n
    neg = [torch.tensor([0, -1])] + [torch.tensor([1])] * (len(seeds) - 1)
    bad_sptr = s_ptr.clone()
    bad_sptr[1] = bad_sptr[2] + 1
    ok = dict(graph=graph, emb=emb, q=q, seeds=seeds)
    return [
        (dict(ok, q=nan_q), "q_emb: contains NaN or infinite values"),
        (dict(ok, q=big_q), "q_emb: a query's squared norm overflows float32"),
        (dict(ok, emb=nan_emb), "triple_emb: a row read by the search"),
        (dict(ok, graph=(bad_ptr, graph[1])), "graph.indptr: must be non-decreasing"),
        (dict(ok, graph=(shifted, graph[1])), "graph.indptr: must start at 0"),
        (dict(ok, graph=(torch.from_numpy(bad_ptr), torch.from_numpy(graph[1]))),
         "graph.indptr: must be non-decreasing"),
        (dict(ok, graph=(torch.from_numpy(shifted), torch.from_numpy(graph[1]))),
         "graph.indptr: must start at 0"),
        (dict(ok, seeds=[np.array([n])] + seeds[1:]), r"seeds: triple ids must be in \[0, n"),
        (dict(ok, seeds=(s_ptr, out_ids)), r"seeds: triple ids must be in \[0, n = 60\), got 60"),
        (dict(ok, seeds=neg), r"seeds: triple ids must be in \[0, n = 60\), got -1"),
        (dict(ok, seeds=(bad_sptr, s_ids)), "seeds.ptr: must be non-decreasing"),
        (dict(ok, seeds=(s_ptr + 1, s_ids)), "seeds.ptr: must be non-decreasing from 0"),
        (dict(ok, seeds=(torch.cat([s_ptr[:-1], s_ptr[-1:] - 1]), s_ids)),
         r"seeds.ptr: must be non-decreasing from 0 to len\(ids\) = "),
        (dict(ok, seeds=(torch.cat([s_ptr[:-1], s_ptr[-1:] + 5]), s_ids)), "seeds.ptr"),
        (dict(ok, seeds=(s_ptr[:-1], s_ids)), "seeds.ptr: expected B"),
    ]


@pytest.mark.parametrize("case", range(len(_bad_cases())))
def test_bad_input_raises_the_same_error(case):
    args, msg = _bad_cases()[case]
    for backend in ("cuda", "torch"):
        with pytest.raises(ValueError, match=msg):
            rasfast.triple_beam_search(args["graph"], args["emb"], args["q"], args["seeds"],
                                       backend=backend, **KW)


def test_device_seeds_in_many_chunks_with_repeats_and_bad_ids():
    """The kernel de-duplicates device seeds itself: many per query (several chunks of the
    kernel's seed buffer), shuffled, each repeated, with repeats across chunks; a bad id in
    a later chunk is flagged."""
    seed = fresh_seed()
    rng = np.random.default_rng(seed)
    graph, emb, q, _ = problem(seed, n=400, B=5)
    seeds = []
    for i in range(5):
        s = rng.integers(0, 400, size=int(rng.integers(0, 300)))
        s = np.concatenate([s, s[: len(s) // 2], s[: len(s) // 5]])
        seeds.append(rng.permutation(s).astype(np.int64))
    want = reference(graph, emb, q, seeds)
    ptr = torch.from_numpy(np.concatenate([[0], np.cumsum([len(s) for s in seeds])]).astype(np.int64))
    ids = torch.from_numpy(np.concatenate(seeds))
    with count_device_work() as w:
        got = rasfast.triple_beam_search(graph, emb, q, (ptr, ids), backend="cuda", **KW)
    assert_same(got, want)
    assert w.syncs <= 1 and w.launches <= DEVICE_SEEDS_LAUNCHES, (seed, w.summary())
    bad = ids.clone()
    bad[-1] = 400
    with pytest.raises(ValueError, match=r"seeds: triple ids must be in \[0, n = 400\), got 400"):
        rasfast.triple_beam_search(graph, emb, q, (ptr, bad), backend="cuda", **KW)
