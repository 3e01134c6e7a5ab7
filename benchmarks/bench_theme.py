"""pytest-benchmark: theme_scoped_search (cpu) and its peers on one mid-size problem.

The full-size comparison with ratios and bandwidth is benchmarks/theme_report.py; this file
keeps `make bench` quick (N=200,000, T=298, D=384, B=16, K=10,000, k=10, float32).
"""
import numpy as np
import pytest

import rasfast
from theme_peers import FaissPeer, torch_peer
from theme_report import make_data

N, T, D, B, K, k = 200_000, 298, 384, 16, 10_000, 10


@pytest.fixture(scope="module")
def data():
    return make_data(N, T, D, B)


@pytest.mark.benchmark(group="theme_scoped_search")
def test_rasfast_cpu_fused(benchmark, data):
    q, qe, c, e = data
    ids, _ = benchmark(rasfast.theme_scoped_search, q, qe, c, e, K, k, backend="cpu")
    assert ids.shape == (B, k)


@pytest.mark.benchmark(group="theme_scoped_search")
def test_rasfast_cpu_theme_scope(benchmark, data):
    q, _, c, _ = data
    assert benchmark(rasfast.theme_scope, q, c, K, backend="cpu").shape == (B, K)


@pytest.mark.benchmark(group="theme_scoped_search")
def test_faiss_peer(benchmark, data):
    q, qe, c, e = data
    peer = FaissPeer(c, e)
    ids, _ = benchmark(peer, q, qe, K, k)
    assert np.asarray(ids).shape == (B, k)


@pytest.mark.benchmark(group="theme_scoped_search")
def test_torch_peer(benchmark, data):
    q, qe, c, e = data
    ids, _ = benchmark(torch_peer, q, qe, c, e, K, k)
    assert ids.shape == (B, k)
