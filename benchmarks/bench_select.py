"""pytest-benchmark: select_k (C++ backend) vs torch.topk vs numpy.argpartition, same run.

B=16, N=1e6 float32, k in {10, 1e4, 2.5e5}. `make bench` collects this file; running it as
a script (`make bench-select`) produces the results table via select_report.py instead.
"""
import numpy as np
import pytest
import torch

import rasfast

B, N = 16, 1_000_000
KS = [10, 10_000, 250_000]


@pytest.fixture(scope="module")
def x():
    return torch.randn(B, N, generator=torch.Generator().manual_seed(0))


def _run(benchmark, fn):
    benchmark.pedantic(fn, rounds=5, warmup_rounds=1, iterations=1)


@pytest.mark.parametrize("k", KS)
def test_rasfast_cpu(benchmark, x, k):
    benchmark.group = f"select B={B} N={N} k={k}"
    _run(benchmark, lambda: rasfast.select_k(x, k, backend="cpu"))


@pytest.mark.parametrize("k", KS)
def test_rasfast_cpu_unsorted(benchmark, x, k):
    benchmark.group = f"select B={B} N={N} k={k}"
    _run(benchmark, lambda: rasfast.select_k(x, k, sorted=False, backend="cpu"))


@pytest.mark.parametrize("k", KS)
def test_torch_topk(benchmark, x, k):
    benchmark.group = f"select B={B} N={N} k={k}"
    _run(benchmark, lambda: torch.topk(x, k, dim=1, largest=False, sorted=True))


@pytest.mark.parametrize("k", KS)
def test_numpy_argpartition(benchmark, x, k):
    benchmark.group = f"select B={B} N={N} k={k}"
    xn = x.numpy()
    _run(benchmark, lambda: np.argpartition(xn, k - 1, axis=1))


if __name__ == "__main__":  # `make bench-select`
    import os
    import sys

    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import select_report

    sys.exit(select_report.main())
