"""The C++ CPU kernels of the registered operators (rasfast._torch_ops, csrc/torch_ops/).

For select_k, theme_scope, scoped_dense_search, theme_scoped_search, segment_topk_scores and
segment_max_rank,
``torch.ops.rasfast.<op>`` on CPU tensors runs a C++ kernel that serves ordinary calls and
hands every other call to the op's Python kernel (``torch.ops.rasfast.<op>_python``). Tested
here: the library is built and attached (no silent fallback), the C++ kernel gives the
Python kernel's results on fresh random inputs (dtypes, odd and empty sizes, ties, int32
index arrays, non-contiguous views), every bad call raises the same error (type and message)
both ways, ordinary calls never reach the Python kernel and unusual ones do (the profiler's
record of the operators called), and with RASFAST_NATIVE_OPS=0 the Python kernels serve.
"""
import os
import subprocess
import sys

import numpy as np
import pytest
import torch

import rasfast
import rasfast.ops  # noqa: F401  (defines torch.ops.rasfast.*)
from rasfast.ops import _library

from native_ops_util import same, select_input

NATIVE = ("select_k", "theme_scope", "scoped_dense_search", "theme_scoped_search",
          "segment_topk_scores", "segment_max_rank")
DTYPES = (torch.float32, torch.float16, torch.bfloat16)


def both(name, *args):
    """The op through its C++ CPU kernel and through its Python kernel."""
    return (getattr(torch.ops.rasfast, name).default(*args),
            getattr(torch.ops.rasfast, f"{name}_python").default(*args))


def same_error(name, *args):
    """Both ways raise, the same exception type and message. Returns the message."""
    errors = []
    for op in (getattr(torch.ops.rasfast, name).default,
               getattr(torch.ops.rasfast, f"{name}_python").default):
        with pytest.raises(Exception) as info:
            op(*args)
        errors.append(info.value)
    assert type(errors[0]) is type(errors[1]), errors
    assert str(errors[0]) == str(errors[1])
    return str(errors[0])


def test_the_cpu_kernels_are_built_and_attached():
    """make install builds rasfast._torch_ops against the installed torch; a build that lost
    it (or a table that no longer attaches) fails here instead of silently running Python."""
    names, reason = _library.native_ops()
    assert reason is None, reason
    assert set(NATIVE) <= set(names)
    for name in NATIVE:
        assert _library.native(name)
        assert hasattr(torch.ops.rasfast, f"{name}_python")


def test_backends_report_the_operator_kernels():
    cpu = rasfast.backends()["cpu"]
    assert set(NATIVE) <= set(cpu["operator_kernels"]) and cpu["operator_kernels_reason"] is None


def _calls_python_kernel(fn) -> bool:
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        fn()
    return any(e.name.endswith("_python") for e in prof.events())


def test_ordinary_calls_stay_in_cpp_and_the_others_reach_python():
    x = torch.randn(4, 50)
    q, qe, c, e = torch.rand(2, 6), torch.randn(2, 8), torch.rand(30, 6), torch.randn(30, 8)
    ptr, items = torch.tensor([0, 3, 7]), torch.randn(7)
    groups = torch.tensor([0, 1, 1, 2, 5, 5, 3])
    ops = torch.ops.rasfast
    assert not _calls_python_kernel(lambda: ops.select_k(x, 5, False, True, "cpu"))
    assert not _calls_python_kernel(lambda: ops.select_k(x, 5, True, False, "auto"))
    assert not _calls_python_kernel(lambda: ops.theme_scope(q, c, 9, "l2", "cpu", "auto"))
    assert not _calls_python_kernel(
        lambda: ops.theme_scoped_search(q, qe, c, e, 9, 4, 0.3, "ip", "auto", "full"))
    assert not _calls_python_kernel(
        lambda: ops.segment_topk_scores(qe, torch.randn(7, 8), ptr, 2, None, "cpu"))
    assert not _calls_python_kernel(lambda: ops.segment_max_rank(items, groups, ptr, 2, "cpu"))
    assert not _calls_python_kernel(
        lambda: ops.scoped_dense_search(qe, e, torch.tensor([[0, 5, -1], [29, 1, 2]]), 2, "cpu", "auto"))
    # the public ops take the same path
    assert not _calls_python_kernel(lambda: rasfast.select_k(x, 5))
    assert not _calls_python_kernel(lambda: rasfast.theme_scoped_search(q, qe, c, e, 9, 4))
    # another backend, and a data error, are the Python kernel's
    assert _calls_python_kernel(lambda: ops.select_k(x, 5, False, True, "torch"))
    bad = x.clone()
    bad[2, 7] = float("nan")
    with pytest.raises(ValueError, match="x: contains NaN"):
        ops.select_k(bad, 5, False, True, "cpu")
    assert _calls_python_kernel(lambda: ops.theme_scope(q, c, 9, "l2", "torch", "auto"))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("B,N,k", [(0, 5, 2), (1, 1, 1), (3, 257, 10), (2, 64, 64), (5, 1000, 37)])
def test_select_k_equals_the_python_kernel(dtype, B, N, k):
    x = select_input(B, N, dtype)
    for largest in (False, True):
        for sorted_ in (True, False):
            for backend in ("cpu", "auto"):
                same(*both("select_k", x, k, largest, sorted_, backend))
    if B and N > 2:  # a non-contiguous view
        same(*both("select_k", x[:, ::2], min(k, (N + 1) // 2), True, True, "cpu"))


def _theme(B, N, T, D, seed, dtype=torch.float32):
    g = torch.Generator().manual_seed(seed)
    q = torch.rand(B, T, generator=g)
    c = torch.rand(N, T, generator=g).to(dtype)
    if N > 3:
        c[1::3] = c[0]  # ties of theme distance
    return q, torch.randn(B, D, generator=g), c, torch.randn(N, D, generator=g).to(dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("B,N,K,k", [(0, 5, 3, 2), (1, 1, 4, 3), (3, 41, 9, 4), (2, 17, 17, 20),
                                     (4, 300, 64, 10)])
def test_theme_ops_equal_the_python_kernel(dtype, B, N, K, k):
    q, qe, c, e = _theme(B, N, 7, 12, seed=B * 100 + N, dtype=dtype)
    for metric in ("l2", "ip"):
        for validate in ("auto", "full", "queries", "none"):
            same(*both("theme_scope", q, c, K, metric, "cpu", validate))
        for w in (0.0, 0.4, 1.0):
            same(*both("theme_scoped_search", q, qe, c, e, K, k, w, metric, "auto", "auto"))
    g = torch.Generator().manual_seed(B + N)
    scope = torch.stack([torch.randperm(N, generator=g)[:min(K, N)] for _ in range(B)]) if B else \
        torch.empty((0, min(K, N)), dtype=torch.int64)
    if B and scope.shape[1] > 2:
        scope[0, 1] = -1  # padding
    for validate in ("auto", "queries", "none"):
        same(*both("scoped_dense_search", qe, e, scope, k, "cpu", validate))
        same(*both("scoped_dense_search", qe, e, scope.int(), k, "auto", validate))
    # half-precision queries, non-contiguous corpora
    same(*both("theme_scope", q.half(), c.t().contiguous().t(), K, "l2", "cpu", "full"))
    same(*both("theme_scoped_search", q.bfloat16(), qe, c, e.t().contiguous().t(), K, k, 0.5,
               "l2", "cpu", "none"))


@pytest.mark.parametrize("B,M,n", [(0, 0, 2), (1, 5, 7), (4, 23, 3), (3, 2, 1), (6, 120, 10)])
@pytest.mark.parametrize("dtype", DTYPES)
def test_segment_ops_equal_the_python_kernel(B, M, n, dtype):
    g = torch.Generator().manual_seed(B * 31 + M)
    D, T = 6, 9
    q = torch.randn(B, D, generator=g)
    cuts = torch.sort(torch.randint(0, M + 1, (max(B - 1, 0),), generator=g)).values
    ptr = torch.cat([torch.tensor([0]), cuts, torch.tensor([M])]) if B else torch.tensor([0])
    cand = torch.randn(M, D, generator=g).to(dtype)
    table = torch.randn(T, D, generator=g).to(dtype)
    ids = torch.randint(0, T, (M,), generator=g)
    for p in (ptr, ptr.int()):
        same(*both("segment_topk_scores", q, cand, p, n, None, "cpu", "auto"))
        same(*both("segment_topk_scores", q, table, p, n, ids, "auto", "none"))
        same(*both("segment_topk_scores", q, table, p, n, ids.int(), "cpu", "full"))
    scores = torch.randn(M, generator=g).to(dtype)
    if M > 4:
        scores[::4] = scores[0]  # ties between groups
        scores[1] = -float("inf")  # ignored items
    groups = torch.randint(0, 5, (M,), generator=g)
    for p in (ptr, ptr.int()):
        for gr in (groups, groups.int()):
            same(*both("segment_max_rank", scores, gr, p, n, "cpu", "auto"))


def test_every_bad_call_raises_the_python_kernels_error():
    x = torch.randn(3, 10)
    nan_x = x.clone()
    nan_x[1, 4] = float("nan")
    assert "NaN" in same_error("select_k", nan_x, 3, False, True, "cpu")
    assert "k: must be" in same_error("select_k", x, 11, False, True, "cpu")
    same_error("select_k", x, 0, False, True, "cpu")
    same_error("select_k", x.long(), 2, False, True, "cpu")
    same_error("select_k", x[0], 2, False, True, "cpu")
    same_error("select_k", torch.randn(2, 0), 1, False, True, "cpu")
    same_error("select_k", x, 2, False, True, "gpu")

    q, qe, c, e = _theme(2, 20, 5, 8, seed=3)
    nan_q, nan_c, nan_e = q.clone(), c.clone(), e.clone()
    nan_q[1, 2] = float("nan")
    nan_c[7, 1] = float("inf")
    nan_e[:, 3] = float("nan")  # every row: a scoped one is read
    assert "q_ppd" in same_error("theme_scope", nan_q, c, 5, "l2", "cpu", "auto")
    assert "corpus_ppd" in same_error("theme_scope", q, nan_c, 5, "l2", "cpu", "auto")
    same_error("theme_scope", q, c, 0, "l2", "cpu", "auto")
    same_error("theme_scope", q, c, 5, "cosine", "cpu", "auto")
    same_error("theme_scope", q, c, 5, "l2", "cpu", "sometimes")
    same_error("theme_scope", q[:, :4], c, 5, "l2", "cpu", "auto")
    same_error("theme_scope", q, c[:0], 5, "l2", "cpu", "auto")
    same_error("theme_scope", q.int(), c, 5, "l2", "cpu", "auto")
    assert "corpus_emb" in same_error("theme_scoped_search", q, qe, c, nan_e, 5, 3, 0.2, "l2",
                                      "cpu", "auto")
    assert "q_emb" in same_error("theme_scoped_search", q, qe * float("inf"), c, e, 5, 3, 0.2,
                                 "l2", "cpu", "queries")
    same_error("theme_scoped_search", q, qe, nan_c, e, 5, 3, 0.2, "ip", "cpu", "none")
    same_error("theme_scoped_search", q, qe, c, e, 5, 3, 1.5, "l2", "cpu", "auto")
    same_error("theme_scoped_search", q, qe, c, e, 5, 3, float("nan"), "l2", "cpu", "auto")
    same_error("theme_scoped_search", q, qe, c, e, 5, 0, 0.2, "l2", "cpu", "auto")
    same_error("theme_scoped_search", q, qe[:1], c, e, 5, 3, 0.2, "l2", "cpu", "auto")
    same_error("theme_scoped_search", q, qe, c, e[:-1], 5, 3, 0.2, "l2", "cpu", "auto")

    scope = torch.tensor([[0, 3, 5, -1], [7, 2, 2, 9]])
    assert "duplicate" in same_error("scoped_dense_search", qe, e, scope, 3, "cpu", "auto")
    assert "scope_ids" in same_error("scoped_dense_search", qe, e, scope.clamp(max=4) + 17, 3,
                                     "cpu", "auto")
    same_error("scoped_dense_search", qe, e, scope[:, :2] - 2, 3, "cpu", "queries")
    same_error("scoped_dense_search", qe, nan_e, scope[:, :2], 3, "cpu", "auto")
    same_error("scoped_dense_search", qe * float("nan"), e, scope[:, :2], 3, "cpu", "auto")
    same_error("scoped_dense_search", qe, e, scope[:1], 3, "cpu", "auto")
    same_error("scoped_dense_search", qe, e, scope.float(), 3, "cpu", "auto")
    same_error("scoped_dense_search", qe, e, scope[:, :2], 0, "cpu", "auto")
    same_error("scoped_dense_search", qe[:, :3], e, scope[:, :2], 3, "cpu", "auto")

    qs, cand = torch.randn(2, 4), torch.randn(5, 4)
    ptr = torch.tensor([0, 2, 5])
    assert "non-decreasing" in same_error("segment_topk_scores", qs, cand, torch.tensor([0, 6, 5]),
                                          2, None, "cpu", "auto")
    same_error("segment_topk_scores", qs, cand, torch.tensor([0, 3, 2]), 2, None, "cpu", "auto")
    same_error("segment_topk_scores", qs, cand, torch.tensor([1, 2, 5]), 2, None, "cpu", "auto")
    same_error("segment_topk_scores", qs, cand, torch.tensor([0, 2, 4]), 2, None, "cpu", "auto")
    same_error("segment_topk_scores", qs, cand, ptr[:2], 2, None, "cpu", "auto")
    same_error("segment_topk_scores", qs, cand, ptr.float(), 2, None, "cpu", "auto")
    same_error("segment_topk_scores", qs, cand, ptr, 0, None, "cpu", "auto")
    same_error("segment_topk_scores", qs, cand, ptr, 2, torch.tensor([0, 1, 9, 2, 3]), "cpu", "auto")
    same_error("segment_topk_scores", qs, cand, ptr, 2, torch.tensor([0, -1, 1, 2, 3]), "cpu", "none")
    same_error("segment_topk_scores", qs * float("nan"), cand, ptr, 2, None, "cpu", "auto")
    bad_cand = cand.clone()
    bad_cand[3] = float("inf")
    assert "candidate 3" in same_error("segment_topk_scores", qs, bad_cand, ptr, 2, None, "cpu",
                                       "auto")
    same_error("segment_topk_scores", qs, cand, ptr, 2, None, "cpu", "never")
    items, groups = torch.randn(5), torch.tensor([0, 1, 1, 2, 3])
    same_error("segment_max_rank", items * float("nan"), groups, ptr, 2, "cpu", "auto")
    same_error("segment_max_rank", items, groups - 1, ptr, 2, "cpu", "auto")
    same_error("segment_max_rank", items, groups + 2 ** 31, ptr, 2, "cpu", "auto")
    same_error("segment_max_rank", items, groups, torch.tensor([0, 4, 3]), 2, "cpu", "auto")
    assert "non-decreasing" in same_error("segment_max_rank", items, groups,
                                          torch.tensor([0, 4, 2, 5]), 2, "cpu", "auto")
    same_error("segment_max_rank", items, groups, torch.tensor([0, 2, 6]), 2, "cpu", "auto")
    same_error("segment_max_rank", items, groups[:4], ptr, 2, "cpu", "auto")
    same_error("segment_max_rank", items, groups, ptr, 0, "cpu", "auto")
    same_error("segment_max_rank", items, groups, torch.tensor([], dtype=torch.int64), 2, "cpu", "auto")


def test_infinite_item_scores_are_served_and_ignored():
    items = torch.tensor([1.0, float("inf"), -float("inf"), 0.5])
    groups = torch.tensor([0, 1, 2, 0])
    (ids, sc), ref = both("segment_max_rank", items, groups, torch.tensor([0, 4]), 3, "cpu", "auto")
    same((ids, sc), ref)
    assert ids.tolist() == [[1, 0, -1]]


def test_python_kernels_serve_with_RASFAST_NATIVE_OPS_0():
    code = (
        "import torch, rasfast, rasfast.ops\n"
        "from rasfast.ops import _library as L\n"
        "names, reason = L.native_ops()\n"
        "assert reason == 'RASFAST_NATIVE_OPS=0' and not names, (names, reason)\n"
        "cpu = rasfast.backends()['cpu']\n"
        "assert cpu['operator_kernels'] == [] and cpu['operator_kernels_reason'] == reason\n"
        "assert not hasattr(torch.ops.rasfast, 'select_k_python')\n"
        "x = torch.arange(12.).view(2, 6)\n"
        "v, i = torch.ops.rasfast.select_k(x, 2, True, True, 'cpu')\n"
        "assert i.tolist() == [[5, 4], [5, 4]], i\n"
        "print('ok')\n")
    env = dict(os.environ, RASFAST_NATIVE_OPS="0")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr


def test_numpy_inputs_of_the_public_ops_take_the_cpp_kernel():
    rng = np.random.default_rng(4)
    x = rng.standard_normal((3, 40), dtype=np.float32)
    v, i = rasfast.select_k(x, 4, largest=True)
    assert isinstance(i, np.ndarray)
    ref = np.argsort(-x, axis=1, kind="stable")[:, :4]
    assert np.array_equal(i, ref)
    s, g, p = (rng.standard_normal(9, dtype=np.float32), rng.integers(0, 4, 9),
               np.array([0, 4, 9]))
    ids, sc = rasfast.segment_max_rank(s, g, p, 2)
    assert isinstance(ids, np.ndarray) and ids.shape == (2, 2)


def test_a_library_built_for_another_torch_is_not_loaded(tmp_path):
    (tmp_path / "_torch_ops.so").write_bytes(b"not a library")
    (tmp_path / "_torch_ops.torch-version").write_text("1.0.0+cpu")
    path, reason = _library.library_path(str(tmp_path))
    assert path is None and "built for torch 1.0.0+cpu" in reason and torch.__version__ in reason
    (tmp_path / "_torch_ops.torch-version").write_text(torch.__version__)
    assert _library.library_path(str(tmp_path)) == (str(tmp_path / "_torch_ops.so"), None)
    (tmp_path / "_torch_ops.torch-version").unlink()
    path, reason = _library.library_path(str(tmp_path))
    assert path is None and "not built" in reason


def test_scope_checks_of_a_large_corpus_with_short_scopes():
    """N far above the scope length: the C++ kernel checks each scope row from a sorted copy
    (its bitset of N ids serves short corpora); both ways give the Python kernel's results
    and errors."""
    g = torch.Generator().manual_seed(9)
    n = 140_000
    e = torch.randn(n, 4, generator=g)
    q = torch.randn(3, 4, generator=g)
    scope = torch.tensor([[5, 139_999, -1], [5, 7, 0], [n - 2, 3, 4]])
    same(*both("scoped_dense_search", q, e, scope, 2, "cpu", "auto"))
    bad = scope.clone()
    bad[2, 2] = n - 2
    assert "row 2" in same_error("scoped_dense_search", q, e, bad, 2, "cpu", "auto")
    bad[2, 2] = n
    same_error("scoped_dense_search", q, e, bad, 2, "cpu", "full")
