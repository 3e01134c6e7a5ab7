"""pytest-benchmark: triple_beam_search cpu backend and its peers (`make bench`).

Issue sizes (200,000-triple power-law graph, D=384, 50 seeds/query, width 10, length 2,
max_neighbors 100). The cpu backend runs all 256 queries; the slow peers run a prefix of
the queries (named in the test id) -- divide by the query count to compare per query, or
use benchmarks/beam_report.py, which reports the ratios in one run.
"""
import pytest

import rasfast
from beam_graph import make_problem
from rasfast.reference.beam import beam_search_python

KW = dict(beam_width=10, max_len=2, max_neighbors=100)


@pytest.fixture(scope="module")
def problem():
    return make_problem(n=200_000, dim=384, queries=256, seeds_per_query=50, seed=0)


def _run(p, backend, queries):
    return rasfast.triple_beam_search(p["graph"], p["triple_emb"], p["q_emb"][:queries],
                                      p["seeds"][:queries], backend=backend, **KW)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_cpu_256_queries(benchmark, problem, dtype):
    import torch
    p = problem if dtype == "float32" else dict(
        problem, triple_emb=torch.from_numpy(problem["triple_emb"]).bfloat16(),
        q_emb=torch.from_numpy(problem["q_emb"]))
    benchmark.pedantic(_run, args=(p, "cpu", 256), rounds=5, warmup_rounds=1)


def test_torch_reference_32_queries(benchmark, problem):
    benchmark.pedantic(_run, args=(problem, "torch", 32), rounds=2)


def test_pure_python_4_queries(benchmark, problem):
    indptr, indices = (a.tolist() for a in problem["graph"])

    def run():
        for i in range(4):
            beam_search_python(indptr, indices, problem["triple_emb"], problem["q_emb"][i],
                               problem["seeds"][i], 10, 2, 20.0, 100)

    benchmark.pedantic(run, rounds=1)
