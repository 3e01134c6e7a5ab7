"""triple_adjacency, the graph-building operator (issue 39 item 1): every backend against the
pure-Python reference on fresh random ids (empty, degenerate, hubs, self-triples, int32),
against TripleGraph.from_triples / merge, its errors, and as a registered operator with a
data-dependent output size (opcheck, torch.compile(fullgraph=True), torch.export)."""
import numpy as np
import pytest
import torch
from torch.library import opcheck

import rasfast
import rasfast.ops  # noqa: F401  (defines torch.ops.rasfast.*)
from rasfast.graph import TripleGraph
from rasfast.reference.triple_graph import triple_adjacency as ref_adjacency

BACKENDS = ("cpu", "torch")
UTILS = ("test_schema", "test_faketensor", "test_aot_dispatch_dynamic")


@pytest.fixture
def fresh_seed():
    """A new seed every run (fresh random inputs), named in every failure message."""
    return int(np.random.SeedSequence().entropy % (2 ** 31))


def rows(indptr, indices):
    indptr, indices = np.asarray(indptr), np.asarray(indices)
    return [indices[indptr[i]:indptr[i + 1]].tolist() for i in range(len(indptr) - 1)]


def cases(seed, count=60):
    rng = np.random.default_rng(seed)
    for _ in range(count):
        n, E = int(rng.integers(0, 50)), int(rng.integers(1, 16))
        h = rng.integers(0, E, n)
        t = np.where(rng.random(n) < 0.15, h, rng.integers(0, E, n))   # some self-triples
        md = None if rng.random() < 0.4 else int(rng.integers(0, 7))
        yield h, t, E, md


@pytest.mark.parametrize("backend", BACKENDS)
def test_matches_the_reference(backend, fresh_seed):
    for h, t, E, md in cases(fresh_seed):
        deg, nb = ref_adjacency(h.tolist(), t.tolist(), E, md)
        ip, ix, dg = rasfast.triple_adjacency(h, t, E, md, backend=backend)
        assert isinstance(ip, np.ndarray) and ip.dtype == np.int64 and ix.dtype == np.int64
        assert dg.tolist() == deg
        assert rows(ip, ix) == nb, (fresh_seed, h, t, E, md)


@pytest.mark.parametrize("backend", BACKENDS)
def test_degenerate_inputs(backend):
    z = np.zeros(0, dtype=np.int64)
    ip, ix, dg = rasfast.triple_adjacency(z, z, 0, backend=backend)
    assert ip.tolist() == [0] and ix.size == 0 and dg.size == 0
    ip, ix, dg = rasfast.triple_adjacency(z, z, 3, backend=backend)       # entities, no triples
    assert ip.tolist() == [0] and dg.tolist() == [0, 0, 0]
    one = np.array([2])
    ip, ix, dg = rasfast.triple_adjacency(one, one, 3, backend=backend)   # one self-triple
    assert ip.tolist() == [0, 0] and dg.tolist() == [0, 0, 1]
    hub = np.zeros(6, dtype=np.int64)                                     # one entity, six triples
    ip, ix, _ = rasfast.triple_adjacency(hub, np.arange(1, 7), 7, backend=backend)
    assert rows(ip, ix) == [[j for j in range(6) if j != i] for i in range(6)]
    ip, ix, _ = rasfast.triple_adjacency(hub, np.arange(1, 7), 7, max_degree=5, backend=backend)
    assert ix.size == 0 and ip.tolist() == [0] * 7                       # the hub links nothing
    ip, ix, _ = rasfast.triple_adjacency(hub, np.arange(1, 7), 7, max_degree=6, backend=backend)
    assert ix.size == 30


@pytest.mark.parametrize("backend", BACKENDS)
def test_tensors_and_int32_in_tensors_out(backend):
    h, t = torch.tensor([0, 1, 2, 0], dtype=torch.int32), torch.tensor([1, 2, 0, 3], dtype=torch.int32)
    ip, ix, dg = rasfast.triple_adjacency(h, t, 4, backend=backend)
    assert all(isinstance(x, torch.Tensor) and x.dtype == torch.int64 for x in (ip, ix, dg))
    deg, nb = ref_adjacency(h.tolist(), t.tolist(), 4)
    assert dg.tolist() == deg and rows(ip, ix) == nb


def test_equals_the_triple_graph_build_and_merge(fresh_seed):
    rng = np.random.default_rng(fresh_seed)
    names = [f"Entity {i}" for i in range(30)]
    tri = [(names[a], "rel", names[b]) for a, b in rng.integers(0, 30, (120, 2))]
    for md in (None, 4):
        g = TripleGraph.from_triples(tri[:80], max_degree=md)
        g = g.merge(tri[80:])
        for be in BACKENDS:
            ip, ix, dg = rasfast.triple_adjacency(g.head, g.tail, g.num_entities, md, backend=be)
            assert np.array_equal(ip, g.indptr) and np.array_equal(ix, g.indices)
            assert np.array_equal(dg, g.entity_degree)


@pytest.mark.parametrize("backend", BACKENDS)
def test_errors_name_the_argument(backend):
    a = np.array([0, 1])
    with pytest.raises(ValueError, match=r"head/tail: entity ids must be in \[0, num_entities = 2\)"):
        rasfast.triple_adjacency(a, np.array([1, 2]), 2, backend=backend)
    with pytest.raises(ValueError, match=r"head/tail: .* got -1"):
        rasfast.triple_adjacency(np.array([-1, 0]), a, 2, backend=backend)
    with pytest.raises(ValueError, match="max_edges"):
        rasfast.triple_adjacency(np.zeros(40, dtype=np.int64), np.arange(40), 40, max_edges=100,
                                 backend=backend)
    with pytest.raises(ValueError, match="tail: expected 2 entries"):
        rasfast.triple_adjacency(a, np.array([0]), 2, backend=backend)
    with pytest.raises(ValueError, match="head"):
        rasfast.triple_adjacency(np.zeros((2, 2), dtype=np.int64), a, 2, backend=backend)
    with pytest.raises((TypeError, ValueError), match="head"):
        rasfast.triple_adjacency(np.array([0.0, 1.0], dtype=np.float32), a, 2, backend=backend)
    with pytest.raises(ValueError, match="num_entities"):
        rasfast.triple_adjacency(a, a, -1, backend=backend)
    with pytest.raises(ValueError, match="max_degree"):
        rasfast.triple_adjacency(a, a, 2, max_degree=-1, backend=backend)


def test_backend_choices():
    a = np.array([0, 1])
    with pytest.raises(ValueError, match="no 'cuda' kernel"):
        rasfast.triple_adjacency(a, a, 2, backend="cuda")
    with pytest.raises(ValueError, match="backend: expected one of"):
        rasfast.triple_adjacency(a, a, 2, backend="fast")


@pytest.mark.parametrize("h,t,E,md,backend", [
    ((), (), 0, -1, "auto"),
    ((0, 1, 2, 0, 3), (1, 2, 0, 0, 3), 4, -1, "cpu"),
    ((0, 1, 2, 0, 3, 3, 1), (1, 2, 0, 0, 3, 2, 1), 5, 2, "torch"),
])
def test_opcheck(h, t, E, md, backend):
    args = (torch.tensor(h, dtype=torch.int64), torch.tensor(t, dtype=torch.int64), E, md, 2 ** 31, backend)
    opcheck(torch.ops.rasfast.triple_adjacency.default, args, test_utils=UTILS)


def test_compile_fullgraph_and_export_with_a_data_dependent_size(fresh_seed):
    rng = np.random.default_rng(fresh_seed)
    h, t = torch.from_numpy(rng.integers(0, 9, 25)), torch.from_numpy(rng.integers(0, 9, 25))

    def degrees_of_neighbours(h, t):   # uses the unbacked-size output downstream
        ip, ix, dg = rasfast.triple_adjacency(h, t, 9, max_degree=6)
        return ip, ix * 2, dg[h] + dg[t]

    eager = degrees_of_neighbours(h, t)
    compiled = torch.compile(degrees_of_neighbours, fullgraph=True, backend="aot_eager")(h, t)
    assert all(torch.equal(a, b) for a, b in zip(eager, compiled))

    class Adjacency(torch.nn.Module):
        def forward(self, h, t):
            return rasfast.triple_adjacency(h, t, 9, max_degree=6)

    ep = torch.export.export(Adjacency(), (h, t))
    assert "rasfast.triple_adjacency" in str(ep.graph)
    assert all(torch.equal(a, b) for a, b in zip(ep.module()(h, t), rasfast.triple_adjacency(h, t, 9, 6)))
