"""pytest-benchmark: RAS graph encoder forward, rasfast cpu vs PyG (same weights, same run).

RAS configuration (1024-d, 8 x 128 heads, edge_dim 1024, 3 layers) on a batch of 16 RAS-shaped
graphs (30 nodes, 120 directed edges each) -- smaller than the report's 64 so `make bench`
stays short. The full-size comparison is benchmarks/graph_conv_report.py.
"""
import pytest
import torch

import rasfast
from graph_conv_workload import make_batch, make_modules, pyg_pool, rel_err
from rasfast.ops.graph_conv import normalise_layers

GRAPHS = 16


@pytest.fixture(scope="module")
def workload():
    pytest.importorskip("torch_geometric")
    convs, norms, _ = make_modules()
    batch = make_batch(GRAPHS)
    specs = normalise_layers([(convs[0], norms[0]), (convs[1], norms[1]), convs[2]])
    return convs, norms, specs, batch


def _run(benchmark, fn):
    benchmark.group = f"graph encoder forward, {GRAPHS} graphs x 30 nodes x 120 edges, RAS dims"
    with torch.no_grad():
        benchmark.pedantic(fn, rounds=5, warmup_rounds=1, iterations=1)


def test_pyg(benchmark, workload):
    convs, norms, _, (x, ei, ea, ptr) = workload
    _run(benchmark, lambda: pyg_pool(convs, norms, x, ei, ea, ptr))


@pytest.mark.parametrize("backend", ["cpu", "torch"])
def test_rasfast(benchmark, workload, backend):
    convs, norms, specs, (x, ei, ea, ptr) = workload
    with torch.no_grad():
        err = rel_err(rasfast.graph_transformer_pool(x, ei, ea, ptr, specs, backend=backend),
                      pyg_pool(convs, norms, x, ei, ea, ptr))
    assert err < 1e-4
    _run(benchmark, lambda: rasfast.graph_transformer_pool(x, ei, ea, ptr, specs, backend=backend))
