"""Per-question ThemeIndex searches replayed from CUDA graphs (rasfast.index.theme_replay):
each replayed search equals the eager one (per shard and global scope, theme weights, query
counts, numpy and torch queries), results are the caller's own, the bucket table, the memory
a graph reads is held, the captured call has no host sync (emulator), and host queries reach
a GPU index. EagerGraphs stands in for CUDA graphs without a GPU."""
import numpy as np
import pytest
import torch
from conftest import EMULATED, GPU_DEVICE, HAS_GPU, cuda_kernels, gpu

from rasfast import ThemeIndex
from rasfast.index.theme_replay import SearchReplay
from rasfast.ops import theme_gemm
from rasfast.ops.replay import CudaGraphs, EagerGraphs


def _data(N=600, T=12, D=20, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.rand(N, T, generator=g), torch.randn(N, D, generator=g)


def _queries(rng, B, T=12, D=20):
    return (rng.random((B, T)).astype(np.float32), rng.standard_normal((B, D)).astype(np.float32))


CALLS = [  # (B, K, k, scope, theme_weight): repeated shapes reuse their graph; K "flat":
    # dense_search
    (1, 50, 5, "per_shard", 0.0), (1, 50, 5, "per_shard", 0.0), (1, 50, 5, "global", 0.0),
    (3, 40, 7, "per_shard", 0.3), (1, 50, 5, "per_shard", 0.0), (2, 1000, 4, "global", 0.0),
    (1, "flat", 6, "-", 0.0), (3, 40, 7, "per_shard", 0.3), (1, "flat", 6, "-", 0.0),
    (2, "flat", 3, "-", 0.0),
]


def _check_sequence(idx, eager, backend):
    rng = np.random.default_rng(1)
    kept = []
    for B, K, k, scope, w in CALLS:
        qp, qe = _queries(rng, B)
        if K == "flat":  # dense_search: the flat search
            got, want = idx.dense_search(qe, k, backend=backend), eager.dense_search(qe, k, backend=backend)
        else:
            got = idx.search(qp, qe, K, k, scope=scope, theme_weight=w, backend=backend)
            want = eager.search(qp, qe, K, k, scope=scope, theme_weight=w, backend=backend)
        assert isinstance(got[0], np.ndarray) and got[0].shape == (B, k)
        np.testing.assert_array_equal(got[0], want[0])
        np.testing.assert_allclose(got[1], want[1], rtol=1e-6, atol=1e-6)
        kept.append((got[0].copy(), got))
    for snap, got in kept:  # each result is the caller's own, not the graph's output
        np.testing.assert_array_equal(snap, got[0])
    return len({(B, K, k, s, w) for B, K, k, s, w in CALLS})


def test_replayed_searches_equal_eager_ones_cpu():
    ppd, emb = _data()
    eager = ThemeIndex.build(emb, ppd, shards=3)
    idx = ThemeIndex.build(emb, ppd, shards=3).enable_cuda_graphs(graphs=EagerGraphs())
    shapes = _check_sequence(idx, eager, "cpu")
    assert idx._replay.captures == shapes == len(idx._replay)


@cuda_kernels
def test_replayed_searches_equal_eager_ones_cuda():
    """On a GPU: real CUDA graphs over an index moved there, host (numpy) queries. Emulated:
    the cuda kernels through the eager stand-in."""
    ppd, emb = _data()
    base = ThemeIndex.build(emb, ppd, shards=3)
    real = HAS_GPU and not EMULATED
    eager, idx = base.to(GPU_DEVICE), base.to(GPU_DEVICE)
    idx.enable_cuda_graphs(graphs=CudaGraphs() if real else EagerGraphs())
    _check_sequence(idx, eager, "cuda")


@cuda_kernels
def test_the_captured_search_has_no_host_sync_and_holds_what_it_reads():
    if not EMULATED:
        pytest.skip("counted on the emulator")
    from rasfast.device_work import count_device_work
    ppd, emb = _data()
    idx = ThemeIndex.build(emb, ppd, shards=2).enable_cuda_graphs(graphs=EagerGraphs())
    qp, qe = _queries(np.random.default_rng(2), 1)
    idx.search(qp, qe, 60, 5, backend="cuda")
    entry = next(iter(idx._replay._entries.values()))
    with count_device_work() as w:
        entry.graph.replay()
    assert w.syncs == 0, w.summary()
    assert w.kernels > 0, w.summary()
    idx.dense_search(qe, 5, backend="cuda")  # the flat search's graph: no sync either
    flat = list(idx._replay._entries.values())[-1]
    with count_device_work() as w:
        flat.graph.replay()
    assert w.syncs == 0 and w.kernels > 0, w.summary()
    # what the GEMM path cached per corpus is held by the entry: an eviction cannot free it
    held = {id(t) for t in entry.kept}
    cached = theme_gemm.cached_tensors()
    assert cached and all(id(t) in held for t in cached)


def test_a_query_not_copied_would_be_caught():
    """The stand-in replays on the static buffers: skipping a query copy gives the previous
    query's answer (so the sequence test above would fail)."""
    ppd, emb = _data()
    idx = ThemeIndex.build(emb, ppd).enable_cuda_graphs(graphs=EagerGraphs())
    rng = np.random.default_rng(3)
    q1, q2 = _queries(rng, 1), _queries(rng, 1)
    first = idx.search(*q1, 50, 5, backend="cpu")
    import rasfast.index.theme_replay as tr
    real = tr.copy_into
    try:
        tr.copy_into = lambda static, src: None  # the bug: the buffers keep q1
        stale = idx.search(*q2, 50, 5, backend="cpu")
    finally:
        tr.copy_into = real
    np.testing.assert_array_equal(stale[0], first[0])
    assert not np.array_equal(idx.search(*q2, 50, 5, backend="cpu")[0], first[0])


def test_a_matrix_written_in_place_gets_a_new_graph():
    ppd, emb = _data()
    idx = ThemeIndex.build(emb, ppd).enable_cuda_graphs(graphs=EagerGraphs())
    qp, qe = _queries(np.random.default_rng(4), 1)
    idx.search(qp, qe, 50, 5, backend="cpu")
    with torch.no_grad():
        idx.emb[:10] *= 2.0  # its version changes
    got = idx.search(qp, qe, 50, 5, backend="cpu")
    assert idx._replay.captures == 2
    want = ThemeIndex.build(idx.emb.clone(), ppd).search(qp, qe, 50, 5, backend="cpu")
    np.testing.assert_array_equal(got[0], want[0])


def test_eager_paths_stay_for_device_queries_streaming_and_torch():
    ppd, emb = _data()
    idx = ThemeIndex.build(emb, ppd).enable_cuda_graphs(graphs=EagerGraphs())
    qp, qe = _queries(np.random.default_rng(5), 2)
    idx.search(qp, qe, 50, 5, backend="torch")
    idx.search(qp, qe, 50, 5, chunk_rows=100)
    idx.dense_search(qe, 5, chunk_rows=100)
    idx.dense_search(qe, 5, backend="torch")
    assert len(idx._replay) == 0
    r = SearchReplay()
    assert not r.serves(torch.device("cpu"), torch.device("cpu"), "cuda")  # CUDA graphs: a CUDA index
    assert r.serves(torch.device("cuda", 0), torch.device("cpu"), "cuda")
    assert not r.serves(torch.device("cuda", 0), torch.device("cuda", 0), "cuda")  # device queries
    idx.enable_cuda_graphs(False)
    assert idx._replay is None
    with pytest.raises(ValueError, match="max_graphs: expected >= 1"):
        SearchReplay(0)


@gpu
def test_host_queries_search_a_gpu_index():
    """A GPU index takes numpy queries (the RAS retriever's), in search and dense_search: they
    are moved to its device and the results come back as numpy, equal to device queries'."""
    ppd, emb = _data()
    idx = ThemeIndex.build(emb, ppd, shards=2).to("cuda")
    qp, qe = _queries(np.random.default_rng(6), 3)
    got = idx.search(qp, qe, 50, 5, backend="cuda")
    want = idx.search(torch.from_numpy(qp).cuda(), torch.from_numpy(qe).cuda(), 50, 5, backend="cuda")
    assert isinstance(got[0], np.ndarray)
    np.testing.assert_array_equal(got[0], want[0].cpu().numpy())
    got = idx.dense_search(qe, 5, backend="cuda")  # the flat search too
    want = idx.dense_search(torch.from_numpy(qe).cuda(), 5, backend="cuda")
    assert isinstance(got[0], np.ndarray)
    np.testing.assert_array_equal(got[0], want[0].cpu().numpy())


def test_threads_share_a_replayed_shape_safely():
    """ThemeIndex.search is safe from any number of threads: one use of a graph's static
    buffers at a time (copy in, replay, copy out), so no thread reads another's query."""
    import threading
    ppd, emb = _data()
    eager = ThemeIndex.build(emb, ppd, shards=2)
    idx = ThemeIndex.build(emb, ppd, shards=2).enable_cuda_graphs(graphs=EagerGraphs())
    rng = np.random.default_rng(8)
    qs = [_queries(rng, 1) for _ in range(24)]
    want = [eager.search(*q, 50, 5, backend="cpu")[0] for q in qs]
    got = [None] * len(qs)

    def work(t):
        for i in range(t, len(qs), 4):
            got[i] = idx.search(*qs[i], 50, 5, backend="cpu")[0]
    threads = [threading.Thread(target=work, args=(t,)) for t in range(4)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w)
    assert idx._replay.captures == 1
