"""Device-work budgets of the theme ops on the CUDA emulator (issue 38, DESIGN.md s.11).

``theme_scope``, ``scoped_dense_search``, ``theme_scoped_search`` and ``ThemeIndex.search``
on backend "cuda" must not pass over the corpus to validate it (the corpus is validated once,
when an index is built, added to, moved with ``to`` or first searched after a load) and must
read the device at most once per call (all query checks in one host read); with
``validate="none"`` they read nothing at all. Counted with rasfast.device_work on the
emulator (``RASFAST_CUDA_EMU=1``: every tensor is a CPU tensor, so any host read of a tensor
counts as a synchronisation). Run: ``RASFAST_CUDA_EMU=1 pytest -m cuda_emu
tests/test_device_work_theme.py``.

Counts measured when these budgets were set (B=3, N=500, T=298, D=64, K=50, k=5):

| call | watched reads | syncs | torch ops | kernels | allocs |
|---|---:|---:|---:|---:|---:|
| theme_scoped_search, before | 4 | 4 | 24 | 12 | 9 |
| theme_scoped_search | 0 | 1 | 7 | 12 | 9 |
| theme_scope, before | 2 | 2 | 12 | 19 | 14 |
| theme_scope | 0 | 1 | 4 | 19 | 14 |
| scoped_dense_search, before | 2 | 5 | 22 | 2 | 2 |
| scoped_dense_search | 0 | 1 | 17 | 2 | 2 |
| ThemeIndex.search (1 shard), before | 0 | 7 | 18 | 12 | 9 |
| ThemeIndex.search (1 shard) | 0 | 1 | 10 | 12 | 9 |
| ThemeIndex.search (3 shards, per_shard), before | 0 | 13 | 38 | 36 | 27 |
| ThemeIndex.search (3 shards, per_shard) | 0 | 1 | 30 | 36 | 27 |

Kernels and allocations are the CUDA launchers' (csrc), not the Python layer's, and are not
held to a budget here beyond the allocations as measured.
"""
import os

import numpy as np
import pytest
import torch

import rasfast
from rasfast import ThemeIndex
from rasfast.device_work import count_device_work
from rasfast.reference.theme_check import check_scoped_search

from device_work_util import EMULATED_ONLY, emulated, fresh_seed  # noqa: F401 (autouse fixture)
from test_theme_ops import float_data, int_data

pytestmark = EMULATED_ONLY

B, N, T, D, K, k = 3, 500, 298, 64, 50, 5
# Launcher scratch allocations of one call: at most the arena's (re)growth (csrc/common/
# scratch_cuda.cpp); before the arena a call took 9, 14 and 2 (theme_scoped_search,
# theme_scope, scoped_dense_search), each through a Python callback on a GPU.
ALLOCS = {"theme_scoped_search": 1, "theme_scope": 1, "scoped_dense_search": 1}




@pytest.fixture(autouse=True)
def _kernel_path(monkeypatch):
    """The budgets above are the fused kernel's (B = 3 picks it anyway); the GEMM path's
    tests below set their own path."""
    monkeypatch.setenv("RASFAST_THEME_PATH", "kernel")


def data(seed=0, dtype=torch.float32):
    return float_data(B, N, T, D, dtype=dtype, seed=seed)


def count(fn, watch):
    fn()  # first call: lazy module loads and caches are not the op's work
    with count_device_work(watch=watch) as work:
        out = fn()
    return work, out


# ------------------------------------------------------------------------- the three ops
def test_theme_scoped_search_reads_no_corpus_and_syncs_once():
    q, qe, c, e = data()
    work, (ids, sc) = count(lambda: rasfast.theme_scoped_search(q, qe, c, e, K, k, 0.1,
                                                                backend="cuda"), [c, e])
    assert work.watched_reads == 0, work.summary()
    assert work.syncs <= 1, work.summary()
    assert work.torch_ops <= 7, work.summary()      # the query checks: 2 aminmax, 4 casts, 1 stack
    assert work.allocs <= ALLOCS["theme_scoped_search"], work.summary()
    check_scoped_search(ids, sc, q, qe, c, e, K, k, 0.1)


def test_theme_scope_reads_no_corpus_and_syncs_once():
    q, _, c, _ = data()
    work, ids = count(lambda: rasfast.theme_scope(q, c, K, backend="cuda"), [c])
    assert work.watched_reads == 0, work.summary()
    assert work.syncs <= 1, work.summary()
    assert work.torch_ops <= 4, work.summary()
    assert work.allocs <= ALLOCS["theme_scope"], work.summary()
    assert torch.equal(ids, rasfast.theme_scope(q, c, K, backend="torch"))


def test_a_per_question_call_launches_little(monkeypatch):
    """A per-question call (B = 1, N = 20,000, K = 2,000, k = 10, validate="none") takes the
    GEMM path (the planner's choice); on a GPU it is host-bound, each launch a few us of host
    time. Budgets, counted on this code (thirteenth session): theme_scoped_search 15 launches
    (was 32: the quantile shift's sample GEMM and kthvalue, 15 torch ops, ran for a scope of
    20,000 values, and |q|^2 was computed twice), theme_scope 14 (was 16)."""
    monkeypatch.delenv("RASFAST_THEME_PATH", raising=False)
    g = torch.Generator().manual_seed(fresh_seed())
    q, c = torch.rand(1, 298, generator=g), torch.rand(20_000, 298, generator=g)
    q, c = q / q.sum(1, keepdim=True), c / c.sum(1, keepdim=True)
    qe, e = torch.randn(1, 64, generator=g), torch.randn(20_000, 64, generator=g)
    work, (ids, sc) = count(lambda: rasfast.theme_scoped_search(q, qe, c, e, 2_000, 10, backend="cuda",
                                                                validate="none"), [c, e])
    assert work.launches <= 15 and work.syncs == 0, work.summary()
    assert set(work.watched_ops) <= {"mm"}, work.summary()  # the corpus is read to compute only
    check_scoped_search(ids, sc, q, qe, c, e, 2_000, 10, 0.0)
    # the gathered scoring spreads the 2,000 scope rows over the device (eighteenth session):
    # at least two blocks an SM (the emulator reports 4 SMs), where it was one block of 8 warps
    gather = [r for r in work.kernel_log if "gather_score_kernel" in r["kernel"]]
    assert len(gather) == 1 and gather[0]["blocks"] >= 8, work.kernel_log
    work, scope = count(lambda: rasfast.theme_scope(q, c, 2_000, backend="cuda", validate="none"), [c])
    assert work.launches <= 14 and work.syncs == 0, work.summary()
    assert scope.shape == (1, 2_000)


@pytest.mark.parametrize("op", ["theme_scoped_search", "theme_scope", "scoped_dense_search"])
def test_scratch_costs_no_allocation_once_the_arena_has_grown(op):
    """The launchers' scratch comes from a per-stream arena kept between calls: after one
    call, the same call allocates nothing (no cudaMalloc, no Python round trip on a GPU)."""
    q, qe, c, e = data()
    scope = rasfast.theme_scope(q, c, K, backend="cpu")
    call = {"theme_scoped_search": lambda: rasfast.theme_scoped_search(q, qe, c, e, K, k, backend="cuda"),
            "theme_scope": lambda: rasfast.theme_scope(q, c, K, backend="cuda"),
            "scoped_dense_search": lambda: rasfast.scoped_dense_search(qe, e, scope, k, backend="cuda")}[op]
    first = call()
    work, again = count(call, [c, e])
    assert work.allocs == 0, work.summary()
    for a, b in zip(first if isinstance(first, tuple) else (first,), again if isinstance(again, tuple) else (again,)):
        assert torch.equal(a, b)


def test_scoped_dense_search_checks_scopes_in_one_read():
    q, qe, c, e = data()
    scope = rasfast.theme_scope(q, c, K, backend="cpu")
    scope[1, -3:] = -1  # padding
    work, (ids, sc) = count(lambda: rasfast.scoped_dense_search(qe, e, scope, k, backend="cuda"),
                            [e])
    assert work.watched_reads == 0, work.summary()
    assert work.syncs <= 1, work.summary()
    assert work.allocs <= ALLOCS["scoped_dense_search"], work.summary()
    want = rasfast.scoped_dense_search(qe, e, scope, k, backend="torch")
    assert torch.equal(ids, want[0])
    torch.testing.assert_close(sc, want[1], rtol=1e-5, atol=1e-5)
    # bad scopes are still caught, and cost one read too
    for bad, match in ((torch.where(scope == scope[0, 0], N, scope), "ids must be in"),
                       (torch.where(scope == scope[2, 0], -2, scope), "ids must be in"),
                       (torch.cat([scope[:, :1], scope], dim=1), "row 0 contains a duplicate")):
        with count_device_work(watch=[e]) as work, pytest.raises(ValueError, match=match):
            rasfast.scoped_dense_search(qe, e, bad, k, backend="cuda")
        assert work.syncs <= 1 and work.watched_reads == 0, work.summary()
    dup = scope.clone()
    dup[2, 4] = dup[2, 7]
    with pytest.raises(ValueError, match="row 2 contains a duplicate"):
        rasfast.scoped_dense_search(qe, e, dup, k, backend="cuda")


@pytest.mark.parametrize("op", ["theme_scoped_search", "theme_scope", "scoped_dense_search"])
def test_validate_none_reads_nothing(op):
    q, qe, c, e = data()
    scope = rasfast.theme_scope(q, c, K, backend="cpu")
    call = {
        "theme_scoped_search": lambda: rasfast.theme_scoped_search(q, qe, c, e, K, k,
                                                                   backend="cuda", validate="none"),
        "theme_scope": lambda: rasfast.theme_scope(q, c, K, backend="cuda", validate="none"),
        "scoped_dense_search": lambda: rasfast.scoped_dense_search(qe, e, scope, k, backend="cuda",
                                                                   validate="none"),
    }[op]
    work, _ = count(call, [c, e])
    # no host read and no torch op of the Python layer: capturable in a CUDA graph
    assert work.syncs == 0 and work.torch_ops == 0 and work.watched_reads == 0, work.summary()


def test_validate_full_checks_the_corpus_in_the_same_read():
    q, qe, c, e = data()
    work, _ = count(lambda: rasfast.theme_scoped_search(q, qe, c, e, K, k, backend="cuda",
                                                        validate="full"), [c, e])
    assert work.syncs <= 1, work.summary()
    assert work.watched_reads == 2, work.summary()  # one reduction per corpus matrix
    for name, bad in (("corpus_ppd", c.clone()), ("corpus_emb", e.clone())):
        bad[N - 7, 3] = float("nan")
        args = (bad, e) if name == "corpus_ppd" else (c, bad)
        with pytest.raises(ValueError, match=f"{name}: contains NaN or infinite"):
            rasfast.theme_scoped_search(q, qe, *args, K, k, backend="cuda", validate="full")
    with pytest.raises(ValueError, match="validate"):
        rasfast.theme_scope(q, c, K, backend="cuda", validate="corpus")


def test_nan_queries_raise_naming_the_argument():
    q, qe, c, e = data()
    scope = rasfast.theme_scope(q, c, K, backend="cpu")
    for val in (float("nan"), float("inf")):
        q2, qe2 = q.clone(), qe.clone()
        q2[1, 5] = val
        qe2[2, 0] = val
        with pytest.raises(ValueError, match="q_ppd: contains NaN"):
            rasfast.theme_scoped_search(q2, qe, c, e, K, k, backend="cuda")
        with pytest.raises(ValueError, match="q_emb: contains NaN"):
            rasfast.theme_scoped_search(q, qe2, c, e, K, k, backend="cuda")
        with pytest.raises(ValueError, match="q_ppd: contains NaN"):
            rasfast.theme_scope(q2, c, K, backend="cuda")
        with pytest.raises(ValueError, match="q_emb: contains NaN"):
            rasfast.scoped_dense_search(qe2, e, scope, k, backend="cuda")


def test_nan_corpus_on_the_fast_path_is_unspecified_but_safe():
    """The documented contract of validate="queries" (the default on a GPU backend): a
    non-finite corpus value gives an unspecified result, never an error or a wild id."""
    q, qe, c, e = data()
    c, e = c.clone(), e.clone()
    c[5] = float("nan")
    c[6, 0] = float("-inf")
    e[7] = float("nan")
    ids, sc = rasfast.theme_scoped_search(q, qe, c, e, K, k, backend="cuda")
    assert ids.shape == (B, k) and ((ids >= -1) & (ids < N)).all()
    ids = rasfast.theme_scope(q, c, K, backend="cuda")
    assert ids.shape == (B, K) and ((ids >= 0) & (ids < N)).all()
    # the cpu backend (and "auto" on CPU tensors) still rejects it, from inside its kernel
    with pytest.raises(ValueError, match="corpus_ppd"):
        rasfast.theme_scoped_search(q, qe, c, e, K, k)


# --------------------------------------------------------------- correctness, fresh data
@pytest.mark.parametrize("metric", ["l2", "ip"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_matches_the_reference_on_fresh_data(metric, dtype):
    seed = fresh_seed()
    Bn, Nn, Tn, Dn, Kn, kn = 4, 700, 19, 12, 90, 8
    q, qe, c, e = int_data(Bn, Nn, Tn, Dn, dtype=dtype, seed=seed)
    got = rasfast.theme_scoped_search(q, qe, c, e, Kn, kn, 0.25, metric, backend="cuda")
    want = rasfast.theme_scoped_search(q, qe, c, e, Kn, kn, 0.25, metric, backend="torch")
    assert torch.equal(got[0], want[0]), f"seed {seed}"
    assert torch.equal(got[1], want[1]), f"seed {seed}"
    scope = rasfast.theme_scope(q, c, Kn, metric, backend="cuda")
    assert torch.equal(scope, rasfast.theme_scope(q, c, Kn, metric, backend="torch")), f"seed {seed}"
    got = rasfast.scoped_dense_search(qe, e, scope, kn, backend="cuda")
    want = rasfast.scoped_dense_search(qe, e, scope, kn, backend="torch")
    assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1]), f"seed {seed}"
    # float data: a correct result up to ties at the K-th distance
    q, qe, c, e = float_data(Bn, Nn, Tn, Dn, dtype=dtype, seed=seed)
    ids, sc = rasfast.theme_scoped_search(q, qe, c, e, Kn, kn, 0.1, metric, backend="cuda")
    tol = 1e-4 if dtype == torch.float32 else 2e-2
    check_scoped_search(ids, sc, q.float(), qe.float(), c.float(), e.float(), Kn, kn, 0.1, metric,
                        tol=tol, score_tol=tol)


# ----------------------------------------------------------------------------- ThemeIndex
@pytest.mark.parametrize("shards,scope", [(None, "per_shard"), (3, "per_shard"), (3, "global")])
def test_index_search_reads_no_corpus_and_syncs_once(shards, scope):
    q, qe, c, e = data(seed=3)
    idx = ThemeIndex.build(e, c, shards=shards, theme_model=False)
    work, (ids, sc) = count(lambda: idx.search(q, qe, K, k, scope=scope, backend="cuda"),
                            [idx.emb, idx.ppd])
    assert work.watched_reads == 0, work.summary()
    assert work.syncs <= 1, work.summary()
    want = idx.search(q, qe, K, k, scope=scope, backend="cpu")
    assert torch.equal(ids, want[0])
    torch.testing.assert_close(sc, want[1], rtol=1e-5, atol=1e-5)


def test_index_checks_a_loaded_corpus_once(tmp_path):
    q, qe, c, e = data(seed=4)
    ThemeIndex.build(e, c, shards=2, theme_model=False).save(tmp_path / "ix")
    idx = ThemeIndex.load(tmp_path / "ix")
    with count_device_work(watch=[idx.emb, idx.ppd]) as first:
        idx.search(q, qe, K, k, backend="cuda")
    assert first.watched_reads == 2, first.summary()  # one reduction per matrix, once
    assert first.syncs <= 2, first.summary()
    work, _ = count(lambda: idx.search(q, qe, K, k, backend="cuda"), [idx.emb, idx.ppd])
    assert work.watched_reads == 0 and work.syncs <= 1, work.summary()
    # rows added later were checked by add: still no pass
    idx.add(torch.randn(20, D), torch.rand(20, T))
    work, _ = count(lambda: idx.search(q, qe, K, k, backend="cuda"), [idx.emb, idx.ppd])
    assert work.watched_reads == 0 and work.syncs <= 1, work.summary()


def _corrupt(directory, name: str) -> None:
    import json
    m = json.loads((directory / "manifest.json").read_text())
    entry = m["arrays"][name]
    from rasfast.index import store
    path, offset = directory / entry["file"], store.row_offset(entry)
    assert entry["dtype"] == "float32", entry
    arr = np.memmap(path, dtype=np.float32, mode="r+", offset=offset)
    arr[len(arr) // 2] = np.nan
    arr.flush()
    del arr


@pytest.mark.parametrize("name", ["emb", "ppd"])
def test_nan_in_a_corpus_is_rejected_at_build_and_load(tmp_path, name):
    q, qe, c, e = data(seed=5)
    bad_e, bad_c = e.clone(), c.clone()
    (bad_e if name == "emb" else bad_c)[N // 3, 2] = float("nan")
    with pytest.raises(ValueError, match=f"{name}: contains NaN"):
        ThemeIndex.build(bad_e, bad_c, theme_model=False)
    with pytest.raises(ValueError, match=f"{name}: contains NaN"):
        ThemeIndex.build(e, c, theme_model=False).add(bad_e[N // 3 - 5:N // 3 + 5],
                                                         bad_c[N // 3 - 5:N // 3 + 5])
    ThemeIndex.build(e, c, theme_model=False, dtype="float32", ppd_dtype="float32").save(
        tmp_path / "ix")
    _corrupt(tmp_path / "ix", name)
    for mmap in (True, False):
        idx = ThemeIndex.load(tmp_path / "ix", mmap=mmap)
        for _ in range(2):  # a failed check is not remembered as a pass
            with pytest.raises(ValueError, match=f"{name}: contains NaN or infinite values "
                                                 r"\(index rows \[0, 500\)"):
                idx.search(q, qe, K, k, backend="cuda")
        with pytest.raises(ValueError, match=f"{name}: contains NaN"):
            idx.to("cpu").search(q, qe, K, k, backend="cuda")
        # the cpu kernels check what they read
        with pytest.raises(ValueError, match="corpus_"):
            idx.search(q, qe, N, k, backend="cpu")


def test_index_nan_queries_raise_in_one_read():
    q, qe, c, e = data(seed=6)
    idx = ThemeIndex.build(e, c, theme_model=False)
    q2, qe2 = q.clone(), qe.clone()
    q2[0, 0] = float("nan")
    qe2[1, 1] = float("inf")
    for args, match in (((q2, qe), "q_ppd"), ((q, qe2), "q_emb")):
        with count_device_work(watch=[idx.emb, idx.ppd]) as work, \
                pytest.raises(ValueError, match=f"{match}: contains NaN"):
            idx.search(*args, K, k, backend="cuda")
        assert work.syncs == 1 and work.watched_reads == 0, work.summary()


if __name__ == "__main__":  # pragma: no cover
    os.environ.setdefault("RASFAST_CUDA_EMU", "1")
    raise SystemExit(pytest.main([__file__, "-q"]))


# ------------------------------------------------------------------------- the GEMM path
# The corpus is read by the products themselves (mm; on the emulator's CPU tensors a float32
# copy first), by the 8,192-row sample of the quantile shift (index) and, once per corpus
# tensor, by the |c|^2 of the L2 expansion (cached, so not in a second call): never by a
# reduction that validates it.
GEMM_READS = {"mm", "_to_copy", "index"}


@pytest.mark.parametrize("op", ["theme_scoped_search", "theme_scope", "scoped_dense_search"])
def test_gemm_path_reads_corpus_only_to_compute(op, monkeypatch):
    monkeypatch.setenv("RASFAST_THEME_PATH", "gemm")
    q, qe, c, e = data()
    scope = rasfast.theme_scope(q, c, K, backend="torch")
    calls = {
        "theme_scoped_search": (lambda: rasfast.theme_scoped_search(q, qe, c, e, K, k, 0.1, backend="cuda"), [c, e]),
        "theme_scope": (lambda: rasfast.theme_scope(q, c, K, backend="cuda"), [c]),
        "scoped_dense_search": (lambda: rasfast.scoped_dense_search(qe, e, scope, k, backend="cuda"), [e]),
    }
    fn, watch = calls[op]
    work, _ = count(fn, watch)
    assert set(work.watched_ops) <= GEMM_READS, (work.watched_ops, work.summary())
    assert work.syncs <= 1, work.summary()
    assert work.allocs == 0, work.summary()  # torch's allocator and select_k's workspace only
    fn2, _ = calls[op]
    with count_device_work() as none_work:
        if op == "scoped_dense_search":
            rasfast.scoped_dense_search(qe, e, scope, k, backend="cuda", validate="none")
        elif op == "theme_scope":
            rasfast.theme_scope(q, c, K, backend="cuda", validate="none")
        else:
            rasfast.theme_scoped_search(q, qe, c, e, K, k, 0.1, backend="cuda", validate="none")
    assert none_work.syncs == 0, none_work.summary()


@pytest.mark.parametrize("select", ["mask", "sort"])
def test_gemm_path_masked_select_sorts_nothing(select, monkeypatch):
    """w = 0 on the GEMM path: the scope becomes a mask over the dense scores (a fill and a
    scatter) and one select_k picks the top k, so no sort of the [B, K] scope ids and no
    gather of scores at them (RASFAST_THEME_DENSE_SELECT=sort, the path before, has both);
    no sync with validate="none" either way."""
    monkeypatch.setenv("RASFAST_THEME_PATH", "gemm")
    monkeypatch.setenv("RASFAST_THEME_DENSE_SELECT", select)
    q, qe, c, e = data()
    rasfast.theme_scoped_search(q, qe, c, e, K, k, 0.0, backend="cuda", validate="none")  # caches
    with count_device_work() as work:
        got = rasfast.theme_scoped_search(q, qe, c, e, K, k, 0.0, backend="cuda", validate="none")
    assert work.syncs == 0, work.summary()
    sorts = {n: v for n, v in work.op_names.items() if "sort" in n}
    if select == "mask":
        assert not sorts, work.op_names
        assert work.op_names.get("scatter", 0) + work.op_names.get("scatter_", 0) == 1, work.op_names
    else:
        assert sorts, work.op_names
    check_scoped_search(got[0], got[1], q, qe, c, e, K, k)


def test_the_launch_log_names_each_kernel_and_its_grid(monkeypatch):
    """count_device_work records every emulated launch's kernel, site and grid, and a cub
    sort's kernels by name; launch_table renders them."""
    from rasfast.device_work import launch_table
    monkeypatch.setenv("RASFAST_SELECT_SMALL_N", "0")      # the radix passes,
    monkeypatch.setenv("RASFAST_SELECT_RADIX_SORT_K", "0")  # then cub's sort
    x = torch.randn(3, 5_000)
    with count_device_work() as work:
        rasfast.select_k(x, 4_000, backend="cuda")
    assert any(r["kernel"].startswith("cub::DeviceRadixSort") and not r["site"]
               for r in work.kernel_log), work.kernel_log
    assert len(work.kernel_log) == work.kernels, (work.kernel_log, work.summary())
    assert all(r["kernel"] and "blocks" in r for r in work.kernel_log)
    kernels = [r for r in work.kernel_log if r["site"]]
    assert kernels and all(r["blocks"] >= 1 and r["threads"] >= 32 for r in kernels)
    assert all(".cu:" in r["site"] for r in kernels)
    table = launch_table(work)
    assert table.count("\n") == len(work.kernel_log) + 1
    with count_device_work() as quiet:
        torch.randn(4).sum()  # no kernel: an empty log
    assert quiet.kernel_log == []
