"""Per-question graph encodings replayed from CUDA graphs (rasfast.models.graph_replay,
rasfast.ops.replay): the padded buckets, the padded call against the unpadded op, the static
buffer discipline (through EagerGraphs, which replays by rerunning the captured call into the
captured outputs), GraphEncoder's switch, and on a GPU or the CUDA emulator the cuda backend
(on a GPU with real CUDA graphs)."""
import numpy as np
import pytest
import torch
from conftest import EMULATED, GPU_DEVICE, HAS_GPU, cuda_kernels

import rasfast
from rasfast.models.graph_encoder import GraphEncoder
from rasfast.models.graph_replay import PAD_LOOPS, PoolReplay, bucket_sizes, padded_index
from rasfast.ops.replay import CudaGraphs, EagerGraphs


def _batch(rng, sizes, din, edge_dim, dense=3.0):
    """x [N, din], edge_index [2, E] (edges inside each graph), edge_attr [E, edge_dim], graph_ptr."""
    ptr = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
    src, dst = [], []
    for g, n in enumerate(sizes):
        e = int(rng.integers(0, int(dense * n) + 1)) if n else 0
        src.append(ptr[g] + rng.integers(0, max(n, 1), e))
        dst.append(ptr[g] + rng.integers(0, max(n, 1), e))
    ei = torch.from_numpy(np.stack([np.concatenate(src), np.concatenate(dst)]).astype(np.int64))
    n_all, e_all = int(ptr[-1]), ei.shape[1]
    x = torch.from_numpy(rng.standard_normal((n_all, din)).astype(np.float32))
    ea = None if edge_dim is None else torch.from_numpy(rng.standard_normal((e_all, edge_dim)).astype(np.float32))
    return x, ei, ea, torch.from_numpy(ptr)


def _encoder(din=24, hidden=32, heads=4, edge_dim=16, seed=0):
    torch.manual_seed(seed)
    enc = GraphEncoder(din, hidden, heads, 3, edge_dim, llm_hidden=None).eval()
    with torch.no_grad():
        for m in enc.norms:
            m.weight.uniform_(0.5, 1.5)
            m.bias.normal_(0, 0.2)
    return enc


def _reference(enc, x, ei, ea, gp, backend, device):
    dt = enc._param().dtype
    return rasfast.graph_transformer_pool(x.to(device, dt), ei.to(device), None if ea is None else ea.to(device, dt),
                                          gp.to(device), enc.layer_specs(), backend=backend)


# ---- the buckets -----------------------------------------------------------------------------

def test_bucket_sizes_pad_every_size_within_the_rules():
    pow2 = lambda v: v > 0 and v & (v - 1) == 0  # noqa: E731
    for n in list(range(0, 70)) + [127, 128, 129, 1000, 4095, 4096]:
        for e in [0, 1, 5, 63, 64, 65, 120, 128, 129, 1000, 4 * n]:
            for g in [0, 1, 2, 3, 7, 8]:
                np_, ep, gp = bucket_sizes(n, e, g)
                assert pow2(np_) and pow2(ep) and pow2(gp)
                assert ep >= max(e, 64) and ep < 2 * max(e, 64)
                assert gp >= g + 1 and gp < 2 * (g + 1) + 1
                assert np_ > n and np_ >= 32  # at least one padding node
                assert -(-(ep - e) // (np_ - n)) <= PAD_LOOPS  # no padding hub


def test_padded_index_keeps_the_batch_and_pads_with_self_loops_on_padding_nodes():
    rng = np.random.default_rng(1)
    x, ei, ea, gp = _batch(rng, [5, 0, 9], 4, 4)
    n, e, g = x.shape[0], ei.shape[1], gp.numel() - 1
    sizes = bucket_sizes(n, e, g)
    np_, ep, gp_ = sizes
    a = padded_index(ei.numpy(), gp, n, sizes)
    assert a.shape == (2 * ep + gp_ + 1,) and a.dtype == np.int64
    src, dst, ptr = a[:ep], a[ep:2 * ep], a[2 * ep:]
    assert (src[:e] == ei[0].numpy()).all() and (dst[:e] == ei[1].numpy()).all()
    assert (src[e:] == dst[e:]).all() and (src[e:] >= n).all() and (src[e:] < np_).all()
    assert np.bincount(src[e:] - n).max() <= PAD_LOOPS
    assert (ptr[:g + 1] == gp.numpy()).all() and (ptr[g + 1:] == np_).all()


@pytest.mark.parametrize("ei, gp, msg", [
    (np.array([[0, 9], [1, 2]]), np.array([0, 9]), r"edge_index: node ids must lie in \[0, N\) with N = 9"),
    (np.array([[0, -1], [1, 2]]), np.array([0, 9]), r"edge_index: node ids must lie in \[0, N\)"),
    (np.array([[0, 1], [1, 2]]), np.array([0, 8]), r"graph_ptr: must start at 0 and end at N = 9"),
    (np.array([[0, 1], [1, 2]]), np.array([0, 5, 3, 9]), r"graph_ptr: must be non-decreasing"),
    (np.array([0, 1, 2]), np.array([0, 9]), r"edge_index: expected shape \[2, E\]"),
    (np.array([[0.0, 1.0], [1.0, 2.0]]), np.array([0, 9]), r"edge_index: expected an integer array"),
])
def test_padded_index_rejects_bad_input_by_name(ei, gp, msg):
    with pytest.raises((ValueError, TypeError), match=msg):
        padded_index(ei, gp, 9, bucket_sizes(9, 2, len(gp) - 1))


# ---- the padded call, replayed ---------------------------------------------------------------

SEQUENCE = [[30], [22], [30], [1], [0, 4], [12, 0, 7, 30, 2], [25], [40, 40, 40]]


def _replay_sequence(backend, device, graphs, edge_dim=16):
    enc = _encoder(edge_dim=edge_dim).to(device)
    r = PoolReplay(max_graphs=8, graphs=graphs)
    rng = np.random.default_rng(7)
    kept = []
    for sizes in SEQUENCE:
        x, ei, ea, gp = _batch(rng, sizes, 24, edge_dim)
        got = r(enc.layer_specs(), x, ei, ea, gp, torch.float32, device, backend)
        want = _reference(enc, x, ei, ea, gp, backend, device)
        assert got.shape == (len(sizes), 32)
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
        kept.append((got, got.clone()))
    for got, snapshot in kept:  # each call's result is its own tensor, not the graph's output
        assert torch.equal(got, snapshot)
    return r


@pytest.mark.parametrize("edge_dim", [16, None])
def test_replayed_padded_call_equals_the_op_on_each_batch_cpu(edge_dim):
    graphs = EagerGraphs()
    r = _replay_sequence("cpu", torch.device("cpu"), graphs, edge_dim)
    buckets = {bucket_sizes(sum(s), 0, 0) for s in SEQUENCE}  # a lower bound on distinct buckets
    assert graphs.captures == r.captures and len(buckets) <= r.captures < len(SEQUENCE)


@cuda_kernels
def test_replayed_padded_call_equals_the_op_on_each_batch_cuda():
    """On a GPU: real CUDA graphs (the captured kernels replayed on new inputs). Emulated: the
    cuda backend's kernels through the eager stand-in."""
    graphs = CudaGraphs() if HAS_GPU and not EMULATED else EagerGraphs()
    _replay_sequence("cuda", GPU_DEVICE, graphs)


@cuda_kernels
def test_the_captured_call_has_no_host_sync():
    """A CUDA graph cannot capture a host sync: the padded call runs with validate="none" on
    static device buffers, so none is left (emulator counts)."""
    if not EMULATED:
        pytest.skip("counted on the emulator")
    from rasfast.device_work import count_device_work
    enc = _encoder()
    r = PoolReplay(graphs=EagerGraphs())
    x, ei, ea, gp = _batch(np.random.default_rng(3), [30, 12], 24, 16)
    r(enc.layer_specs(), x, ei, ea, gp, torch.float32, GPU_DEVICE, "cuda")
    entry = next(iter(r._entries.values()))
    with count_device_work() as w:
        entry.graph.replay()
    assert w.syncs == 0, w.summary()
    assert w.kernels > 0, w.summary()


@cuda_kernels
def test_the_graph_keeps_the_memory_it_reads_alive():
    """A captured graph reads the layer plans and the stacked edge weights by address: the
    entry holds the plans made at capture, and the edge stack lives on the weights object
    (not in an evicting module cache), so neither is freed while the graph exists."""
    enc = _encoder()
    specs = enc.layer_specs()
    r = PoolReplay(graphs=EagerGraphs())
    x, ei, ea, gp = _batch(np.random.default_rng(6), [30], 24, 16)
    r(specs, x, ei, ea, gp, torch.float32, GPU_DEVICE, "cuda")
    entry = next(iter(r._entries.values()))
    plans = [p for w, _, _ in specs for _, p in w.__dict__.get("_cuda_plans", {}).values()]
    held = [q for kept in entry.kept for _, q in kept]
    assert plans and all(any(p is q for q in held) for p in plans)
    assert "_edge_stacks" in specs[0][0].__dict__


def test_norm_weights_converted_once_while_unmodified():
    from rasfast.ops.graph_conv_params import NormWeights
    n = NormWeights(torch.ones(4, dtype=torch.bfloat16), torch.zeros(4, dtype=torch.bfloat16))
    a = n.to("cpu", torch.float32)
    assert a is n.to("cpu", torch.float32) and a.weight.dtype == torch.float32
    assert n.to("cpu", torch.bfloat16) is n
    with torch.no_grad():
        n.weight.mul_(2)  # in place: the converted copy is stale
    b = n.to("cpu", torch.float32)
    assert b is not a and torch.equal(b.weight, torch.full((4,), 2.0))


def test_a_static_buffer_not_refreshed_would_be_caught():
    """The stand-in replays what a CUDA graph would: the captured call on the static buffers.
    A loader that skipped an input gives the previous batch's answer, and the test above would
    fail; checked here by skipping the feature copy on purpose."""
    enc = _encoder()
    r = PoolReplay(graphs=EagerGraphs())
    rng = np.random.default_rng(5)
    x1, ei, ea, gp = _batch(rng, [20], 24, 16)
    r(enc.layer_specs(), x1, ei, ea, gp, torch.float32, torch.device("cpu"), "cpu")
    entry = next(iter(r._entries.values()))
    x2 = x1 + 1.0
    load = entry.load
    entry.load = lambda x, e, i: load(x1, e, i)  # the bug: the old features stay
    stale = r(enc.layer_specs(), x2, ei, ea, gp, torch.float32, torch.device("cpu"), "cpu")
    want = _reference(enc, x2, ei, ea, gp, "cpu", torch.device("cpu"))
    assert not torch.allclose(stale, want, rtol=1e-4, atol=1e-4)


def test_buckets_are_kept_least_recently_used():
    enc = _encoder()
    r = PoolReplay(max_graphs=2, graphs=EagerGraphs())
    rng = np.random.default_rng(2)
    batches = [_batch(rng, [n], 24, 16, dense=1.0) for n in (10, 60, 200)]  # three buckets
    call = lambda b: r(enc.layer_specs(), *b, torch.float32, torch.device("cpu"), "cpu")  # noqa: E731
    call(batches[0]); call(batches[1]); call(batches[0]); call(batches[2])  # noqa: E702
    assert len(r) == 2 and r.captures == 3
    call(batches[0])  # kept (used after the second)
    assert r.captures == 3
    call(batches[1])  # dropped: captured again
    assert r.captures == 4


def test_max_graphs_must_be_positive():
    with pytest.raises(ValueError, match="max_graphs: expected >= 1"):
        PoolReplay(max_graphs=0)


# ---- GraphEncoder's switch -------------------------------------------------------------------

def test_encoder_replays_and_matches_its_eager_path_and_drops_graphs_on_new_weights():
    from rasfast.encode import HashingEncoder
    from rasfast.models.question_graph import build_question_graph
    rng = np.random.default_rng(0)
    enc_s = HashingEncoder(24)
    triples = lambda t: [(f"e{rng.integers(t)}", f"r{rng.integers(4)}", f"e{rng.integers(t)}")  # noqa: E731
                         for _ in range(t)]
    graphs = [build_question_graph(triples(t), enc_s) for t in (3, 8, 20)]
    eager = _encoder(edge_dim=24)
    replayed = _encoder(edge_dim=24).enable_cuda_graphs(max_graphs=4, graphs=EagerGraphs())
    for g in graphs:
        torch.testing.assert_close(replayed(g, backend="cpu"), eager(g, backend="cpu"), rtol=1e-5, atol=1e-6)
    assert replayed._replay.captures >= 1
    with torch.no_grad():  # new weights: the captured graphs would read stale packed copies
        for enc in (eager, replayed):
            enc.convs[0].lin_query.weight.mul_(0.5)
    replayed.clear_cache()
    eager.clear_cache()
    torch.testing.assert_close(replayed(graphs[0], backend="cpu"), eager(graphs[0], backend="cpu"),
                               rtol=1e-5, atol=1e-6)
    assert len(replayed._replay) == 1  # the old weights' buckets were dropped
    replayed.enable_cuda_graphs(False)
    assert replayed._replay is None


def test_encoder_keeps_the_eager_path_for_device_index_arrays_and_the_torch_backend(monkeypatch):
    enc = _encoder().enable_cuda_graphs(graphs=EagerGraphs())
    x, ei, ea, gp = _batch(np.random.default_rng(4), [9], 24, 16)
    enc.encode_batch(x, ei, ea, gp, backend="torch")
    assert len(enc._replay) == 0
    assert not enc._replays(torch.device("cpu"), ei.to("meta"), gp, "cpu")
    assert not PoolReplay().serves(torch.device("cpu"))  # CUDA graphs: a CUDA device only
    assert PoolReplay().serves(torch.device("cuda", 0))


def test_layer_specs_follow_replaced_modules_and_parameters():
    """The weights key walks the modules' own parameter dicts: a replaced submodule, a new
    parameter object and an in-place update each give new specs (so new graphs)."""
    enc = _encoder()
    s0 = enc.layer_specs()
    assert enc.layer_specs() is s0
    enc.convs[1].lin_value = torch.nn.Linear(32, 32)
    s1 = enc.layer_specs()
    assert s1 is not s0 and torch.equal(s1[1][0].w_value, enc.convs[1].lin_value.weight)
    enc.norms[0].weight = torch.nn.Parameter(torch.full((32,), 2.0))
    s2 = enc.layer_specs()
    assert s2 is not s1 and torch.equal(s2[0][1].weight, torch.full((32,), 2.0))
    with torch.no_grad():
        enc.convs[2].lin_skip.bias.add_(1.0)
    assert enc.layer_specs() is not s2


@cuda_kernels
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_precision_model_replays_float32_host_batches(dtype):
    """A 16-bit model gets float32 host features: the static buffers take the model's dtype
    (converted on the host as they are copied in), and the replayed encodings equal the eager
    path's (the same kernels on the same converted inputs), through forward() and its cache."""
    from rasfast.encode import HashingEncoder
    from rasfast.models.question_graph import build_question_graph
    rng = np.random.default_rng(9)
    enc_s = HashingEncoder(24)
    graphs = [build_question_graph([(f"e{rng.integers(6)}", f"r{rng.integers(3)}", f"e{rng.integers(6)}")
                                    for _ in range(t)], enc_s) for t in (4, 9)]
    eager = _encoder(edge_dim=24).to(GPU_DEVICE, dtype)
    replayed = _encoder(edge_dim=24).to(GPU_DEVICE, dtype)
    replayed.enable_cuda_graphs(graphs=CudaGraphs() if HAS_GPU and not EMULATED else EagerGraphs())
    got, want = replayed(graphs, backend="cuda"), eager(graphs, backend="cuda")
    assert got.dtype == dtype and replayed._replay.captures >= 1
    torch.testing.assert_close(got.float(), want.float(), rtol=2e-2, atol=2e-2)
    assert replayed.cache_misses == 2 and replayed(graphs, backend="cuda") is not None
    assert replayed.cache_hits == 2  # the second forward reads the cache, no replay
