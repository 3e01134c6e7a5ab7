"""GraphEncoder (from_pyg parity, cache, training path) and build_question_graph."""
import numpy as np
import pytest
import torch

import rasfast
from rasfast.encode import HashingEncoder
from rasfast.models.graph_encoder import GraphEncoder
from rasfast.models.question_graph import batch_graphs, build_question_graph

tg = pytest.importorskip("torch_geometric")
from torch_geometric.nn import TransformerConv, global_mean_pool  # noqa: E402


class CountingEncoder(HashingEncoder):
    def __init__(self, dim):
        super().__init__(dim)
        self.seen = []

    def encode(self, texts, batch_size=64):
        self.seen.extend(texts)
        return super().encode(texts, batch_size)


def _ras_modules(din, hidden, heads, edge_dim, llm_hidden, seed=0):
    torch.manual_seed(seed)
    convs = [TransformerConv(din if i == 0 else hidden, hidden // heads, heads=heads, edge_dim=edge_dim).eval()
             for i in range(3)]
    norms = [torch.nn.LayerNorm(hidden) for _ in range(2)]
    with torch.no_grad():
        for m in (*convs, *norms):
            for p in m.parameters():
                if p.dim() == 1:
                    p.normal_(0, 0.2)
    projector = torch.nn.Sequential(torch.nn.Linear(hidden, 2 * hidden), torch.nn.Sigmoid(),
                                    torch.nn.Linear(2 * hidden, llm_hidden))
    return convs, norms, projector


def _pyg_forward(convs, norms, projector, graphs):
    x, ei, ea, ptr = batch_graphs(graphs)
    with torch.no_grad():
        h = x
        for i, c in enumerate(convs):
            h = c(h, ei, ea)
            if i < 2:
                h = torch.relu(norms[i](h))
        batch = torch.repeat_interleave(torch.arange(len(graphs)), ptr.diff())
        pooled = global_mean_pool(h, batch, size=len(graphs))
        return pooled, projector(pooled.mean(0))


def _rand_triples(rng, n_entities, n_triples, n_preds=5):
    return [(f"entity {rng.integers(n_entities)}", f"relation {rng.integers(n_preds)}",
             f"entity {rng.integers(n_entities)}") for _ in range(n_triples)]


def _graphs(dim, sizes, seed=0):
    rng = np.random.default_rng(seed)
    enc = HashingEncoder(dim)
    return [build_question_graph(_rand_triples(rng, max(2, t // 2), t), enc) for t in sizes]


@pytest.mark.parametrize("backend", ["cpu", "torch"])
def test_from_pyg_equals_pyg_stack(backend):
    convs, norms, projector = _ras_modules(48, 64, 8, 48, 40)
    enc = GraphEncoder.from_pyg(convs, norms, projector).eval()
    graphs = _graphs(48, [6, 0, 15, 1, 30])
    pooled_ref, vec_ref = _pyg_forward(convs, norms, projector, graphs)
    pooled = enc.encode_batch(*batch_graphs(graphs), backend=backend)
    scale = pooled_ref.abs().max().item()
    torch.testing.assert_close(pooled, pooled_ref, rtol=1e-4, atol=1e-4 * scale)
    vec = enc(graphs, backend=backend)
    assert vec.shape == (40,)
    torch.testing.assert_close(vec, vec_ref, rtol=1e-4, atol=1e-4 * vec_ref.abs().max().item())


def test_ras_configuration_small_graph():
    """RAS's dims (1024-d features, 8 x 128 heads, edge_dim 1024) on a few small graphs."""
    convs, norms, projector = _ras_modules(1024, 1024, 8, 1024, 64)
    enc = GraphEncoder.from_pyg(convs, norms, projector).eval()
    graphs = _graphs(1024, [4, 12, 7])
    pooled_ref, vec_ref = _pyg_forward(convs, norms, projector, graphs)
    pooled = enc.encode_batch(*batch_graphs(graphs))
    torch.testing.assert_close(pooled, pooled_ref, rtol=1e-4, atol=1e-4 * pooled_ref.abs().max().item())


def test_cache_incremental_equals_from_scratch():
    convs, norms, projector = _ras_modules(32, 32, 4, 32, 16)
    enc = GraphEncoder.from_pyg(convs, norms, projector).eval()
    graphs = _graphs(32, [5, 9, 3, 12, 7])
    for i in range(1, len(graphs) + 1):
        misses = enc.cache_misses
        v = enc(graphs[:i])
        assert enc.cache_misses - misses == 1  # only the newly added subgraph is encoded
        fresh = GraphEncoder.from_pyg(convs, norms, projector).eval()
        # from scratch = all i subgraphs in one batch (BLAS blocking differs: not bit-exact)
        torch.testing.assert_close(v, fresh(graphs[:i]), rtol=1e-5, atol=1e-6)
        _, ref = _pyg_forward(convs, norms, projector, graphs[:i])
        torch.testing.assert_close(v, ref, rtol=1e-4, atol=1e-5)
    # the same content built again hits the cache
    again = _graphs(32, [5])[0]
    enc(again)
    assert enc.cache_misses == len(graphs)


def test_cache_invalidated_when_weights_change():
    convs, norms, projector = _ras_modules(32, 32, 4, 32, 16)
    enc = GraphEncoder.from_pyg(convs, norms, projector).eval()
    graphs = _graphs(32, [5, 9])
    before = enc(graphs)
    with torch.no_grad():
        enc.convs[1].lin_value.weight.mul_(2.0)
    after = enc(graphs)
    assert not torch.allclose(before, after)
    fresh = GraphEncoder.from_pyg(convs, norms, projector).eval()
    fresh.load_state_dict(enc.state_dict())
    torch.testing.assert_close(after, fresh(graphs), rtol=0, atol=0)
    enc.train()
    torch.testing.assert_close(enc(graphs).detach(), after, rtol=1e-4, atol=1e-5)


def test_training_path_has_gradients_and_matches_eval():
    convs, norms, projector = _ras_modules(32, 32, 4, 32, 16)
    enc = GraphEncoder.from_pyg(convs, norms, projector)
    graphs = _graphs(32, [5, 9, 4])
    enc.train()
    v = enc(graphs)
    v.square().sum().backward()
    assert enc.convs[0].lin_edge.weight.grad is not None
    assert enc.convs[0].lin_edge.weight.grad.abs().sum() > 0
    assert enc.norms[0].weight.grad.abs().sum() > 0
    enc.eval()
    torch.testing.assert_close(v.detach(), enc(graphs), rtol=1e-4, atol=1e-5)


def test_native_constructor_minilm_dims():
    enc = GraphEncoder(in_channels=384, hidden=64, heads=8, edge_dim=384, llm_hidden=24).eval()
    graphs = _graphs(384, [6, 8])
    assert enc(graphs).shape == (24,)
    assert GraphEncoder(in_channels=384, hidden=64, heads=8, edge_dim=None).eval()(graphs).shape == (64,)
    with pytest.raises(ValueError, match="hidden"):
        GraphEncoder(hidden=30, heads=8)


def test_encoder_errors():
    convs, norms, projector = _ras_modules(32, 32, 4, 32, 16)
    with pytest.raises(ValueError, match="norms: expected 2"):
        GraphEncoder.from_pyg(convs, norms[:1])
    with pytest.raises(TypeError, match=r"convs\[0\]"):
        GraphEncoder.from_pyg([torch.nn.Linear(3, 3)] + convs[1:], norms)
    enc = GraphEncoder.from_pyg(convs, norms, projector).eval()
    with pytest.raises(ValueError, match="subgraphs: expected at least one"):
        enc([])
    with pytest.raises(TypeError, match="QuestionGraph"):
        enc(["not a graph"])


def test_build_question_graph_structure_and_embedding_cache():
    enc = CountingEncoder(16)
    triples = [("Paris", "capital of", "France"), ("France", "member of", "EU"), ("Paris", "capital of", "France")]
    g = build_question_graph(triples, enc)
    assert g.nodes == ["Paris", "France", "EU"]
    assert g.edge_index.tolist() == [[0, 1, 1, 2, 0, 1], [1, 0, 2, 1, 1, 0]]
    assert g.edge_labels == ["capital of", "inverse_capital of", "member of", "inverse_member of",
                             "capital of", "inverse_capital of"]
    base = HashingEncoder(16)
    np.testing.assert_allclose(g.x.numpy(), base.encode(g.nodes))
    np.testing.assert_allclose(g.edge_attr.numpy(), base.encode(g.edge_labels))
    assert sorted(enc.seen) == sorted(set(enc.seen))  # each string encoded once
    n_seen = len(enc.seen)
    g2 = build_question_graph([("Paris", "member of", "EU")], enc)
    assert len(enc.seen) == n_seen  # all strings already cached
    assert g2.key() != g.key() and build_question_graph(triples, enc).key() == g.key()


def test_empty_question_graph_and_batching():
    enc = HashingEncoder(16)
    empty = build_question_graph([], enc)
    assert empty.x.shape == (0, 16) and empty.edge_index.shape == (2, 0) and empty.edge_attr.shape == (0, 16)
    a = build_question_graph([("a", "r", "b")], enc)
    b = build_question_graph([("c", "r", "d"), ("d", "s", "e")], enc)
    x, ei, ea, ptr = batch_graphs([a, empty, b])
    assert ptr.tolist() == [0, 2, 2, 5]
    assert ei.tolist() == [[0, 1, 2, 3, 3, 4], [1, 0, 3, 2, 4, 3]]
    assert x.shape == (5, 16) and ea.shape == (6, 16)


@pytest.mark.parametrize("bad,exc", [("abc", TypeError), ([("a", "b")], ValueError), ([(1, 2, 3)], ValueError),
                                     (None, TypeError)])
def test_build_question_graph_bad_triples(bad, exc):
    with pytest.raises(exc, match="triples"):
        build_question_graph(bad, HashingEncoder(16))


def test_public_names():
    assert rasfast.GraphEncoder is GraphEncoder
    assert rasfast.build_question_graph is build_question_graph


@pytest.mark.parametrize("layers", [2, 3])
@pytest.mark.parametrize("pairs", [8, 20])   # edges <= 2 x nodes: per-edge projection; more: per node
def test_repeated_predicates_and_entities_are_projected_once(layers, pairs):
    """RAS question graphs repeat edge features (one embedding per predicate) and entities
    across subgraphs: the cpu path projects the distinct rows once (RowGroups) and must
    still equal the torch reference."""
    from rasfast.ops import graph_conv_cpu as gcc
    g = torch.Generator().manual_seed(3)
    preds = torch.randn(6, 48, generator=g)
    ents = torch.randn(25, 48, generator=g)
    G, per = 9, 12
    ei, ent_rows, ea_rows = [], [], []
    for b in range(G):
        nodes = torch.randint(0, 25, (per,), generator=g)
        ent_rows.append(nodes)
        s = torch.randint(0, per, (pairs,), generator=g) + b * per
        o = torch.randint(0, per, (pairs,), generator=g) + b * per
        ei.append(torch.stack([torch.cat([s, o]), torch.cat([o, s])]))
        ea_rows.append(torch.randint(0, 6, (2 * pairs,), generator=g))
    x = ents[torch.cat(ent_rows)]
    ea = preds[torch.cat(ea_rows)]
    edge_index = torch.cat(ei, 1)
    ptr = torch.arange(G + 1) * per
    groups = gcc.RowGroups(ea)
    assert groups.distinct is not None and groups.distinct.shape[0] == 6
    assert torch.equal(groups.distinct[groups.inverse], ea)
    assert gcc.RowGroups(torch.randn(200, 48, generator=g)).distinct is None  # nothing repeats
    torch.manual_seed(0)
    enc = GraphEncoder(in_channels=48, hidden=32, heads=4, num_layers=layers, edge_dim=48).eval()
    with torch.no_grad():
        got = enc.encode_batch(x, edge_index, ea, ptr, backend="cpu")
        want = enc.encode_batch(x, edge_index, ea, ptr, backend="torch")
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5)


def test_host_index_arrays_go_to_a_gpu_model_as_numpy():
    """encode_batch on a GPU model hands a host batch's edge_index and graph_ptr over as numpy
    arrays (checked and turned into the CSR on the host, one staging copy); a device batch,
    or a CPU model, gets tensors on its device."""
    import numpy as np
    from rasfast.models.graph_encoder import _host_or
    t = torch.tensor([[0, 1], [1, 0]])
    got = _host_or(t, torch.device("cuda", 0))  # a device object only: nothing is allocated
    assert isinstance(got, np.ndarray) and (got == t.numpy()).all()
    same = _host_or(t, torch.device("cpu"))
    assert isinstance(same, torch.Tensor) and same.device.type == "cpu"


def test_host_features_go_to_a_gpu_model_without_a_blocking_copy(monkeypatch):
    """encode_batch moves a host batch's x and edge_attr to a GPU model through the pinned
    staging copy (rasfast.ops._deferred.to_device: non-blocking), then casts there; a CPU
    model gets a plain .to."""
    from rasfast.models import graph_encoder as ge
    moved = []
    monkeypatch.setattr(ge, "to_device", lambda t, dev: moved.append(dev) or t)
    x = torch.randn(3, 4)
    got = ge._to_model(x, torch.device("cuda", 0), torch.bfloat16)  # staged (stubbed here), cast
    assert moved == [torch.device("cuda", 0)] and got.dtype == torch.bfloat16
    assert torch.equal(got, x.to(torch.bfloat16))
    same = ge._to_model(x, torch.device("cpu"), torch.float32)
    assert same is x and len(moved) == 1
