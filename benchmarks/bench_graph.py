"""pytest-benchmark: TripleGraph.from_triples (C++) vs the pure-Python builder, 20,000 triples."""
import pytest

from rasfast.graph import TripleGraph, synthetic_triples
from rasfast.reference.triple_graph import build_triple_graph

N = 20_000


@pytest.fixture(scope="module")
def triples():
    return synthetic_triples(N, int(0.6 * N), zipf=1.0, offset=100)


def test_build_cpp(benchmark, triples):
    g = benchmark(TripleGraph.from_triples, triples, max_degree=100)
    assert g.num_triples == N


def test_build_python(benchmark, triples):
    r = benchmark.pedantic(build_triple_graph, args=(triples,), kwargs={"max_degree": 100},
                           rounds=2, iterations=1)
    assert len(r["kept"]) == N
