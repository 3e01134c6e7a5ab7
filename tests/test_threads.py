"""Thread control of the CPU kernels (issue 23, busy machines): rasfast.set_num_threads caps
every call from any Python thread, small calls run serially, and the results do not depend
on the number of threads."""
import os
import threading

import numpy as np
import torch
import pytest

import rasfast


@pytest.fixture(autouse=True)
def _restore():
    yield
    rasfast.set_num_threads(0)


def test_set_and_get_num_threads():
    default = rasfast.get_num_threads()
    assert default >= 1 and rasfast.backends()["cpu"]["threads"] == default
    rasfast.set_num_threads(1)
    assert rasfast.get_num_threads() == 1 and rasfast.backends()["cpu"]["threads"] == 1
    seen = []
    t = threading.Thread(target=lambda: seen.append(rasfast.get_num_threads()))
    t.start()
    t.join()
    assert seen == [1]  # the cap holds for every Python thread, not only the caller
    rasfast.set_num_threads(0)
    assert rasfast.get_num_threads() == default
    for bad in (-1, 1.5, "2", True, None):
        with pytest.raises(ValueError, match="n: expected an int >= 0"):
            rasfast.set_num_threads(bad)


def test_results_do_not_depend_on_the_thread_count():
    rng = np.random.default_rng(0)
    grain = rasfast.dispatch.cpu_module().parallel_grain()
    x = rng.integers(0, 50, size=(8, 2 * grain // 8 + 1000)).astype(np.float32)  # many ties
    assert x.size >= 2 * grain  # above the grain: parallel by default
    want = rasfast.select_k(x, 777)
    rasfast.set_num_threads(1)
    got = rasfast.select_k(x, 777)
    assert np.array_equal(got[0], want[0]) and np.array_equal(got[1], want[1])
    small = x[:2, :1000]
    assert np.array_equal(rasfast.select_k(small, 5)[1], np.argsort(small, 1, kind="stable")[:, :5])


def test_concurrent_calls_under_a_cap():
    rng = np.random.default_rng(1)
    xs = [rng.standard_normal((4, 300_000)).astype(np.float32) for _ in range(4)]
    want = [rasfast.select_k(x, 50)[1] for x in xs]
    rasfast.set_num_threads(1)
    out, errors = [None] * 4, []

    def run(i):
        try:
            for _ in range(3):
                out[i] = rasfast.select_k(xs[i], 50)[1]
        except Exception as e:  # pragma: no cover - reported below
            errors.append(e)

    ts = [threading.Thread(target=run, args=(i,)) for i in range(4)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert not errors and all(np.array_equal(o, w) for o, w in zip(out, want))


# ----------------------------------------------------------------------------- issue 31
# The torch work a public op runs around its kernel (validation, norms, unique,
# repeat_interleave, conversions) follows the kernels' width rule: on one thread for a small
# call, whatever torch's own intra-op width is (it was torch's width: 2.8x the single-thread
# time of a per-question beam search with both cores busy).

def _mkl_width():
    """MKL's thread count for the calling thread (None: this torch has no MKL)."""
    import ctypes
    import os
    try:
        lib = ctypes.CDLL(os.path.join(os.path.dirname(torch.__file__), "lib", "libtorch_cpu.so"))
        return int(lib.MKL_Get_Max_Threads())
    except (OSError, AttributeError):
        return None


class _WidthProbe(torch.overrides.TorchFunctionMode):
    """Records torch's intra-op width (and MKL's thread count, which torch's bmm/addmm use)
    at every torch call made inside it, except reads of a tensor's size, which run no
    parallel region (the width rule reads them to size a call)."""

    METADATA = {"numel", "dim", "size", "__get__"}

    def __init__(self):
        super().__init__()
        self.widths = set()
        self.calls = 0

    def __torch_function__(self, func, types, args=(), kwargs=None):
        if getattr(func, "__name__", "") not in self.METADATA:
            self.widths.add(torch.get_num_threads())
            mkl = _mkl_width()
            if mkl is not None:
                self.widths.add(mkl)
            self.calls += 1
        return func(*args, **(kwargs or {}))


def _small_calls():
    """name -> a per-question-sized call of every public op (CPU tensors)."""
    from torch_geometric.nn import TransformerConv
    from rasfast.index.theme_index import ThemeIndex
    rng = np.random.default_rng(0)
    x = rng.standard_normal((4, 500)).astype(np.float32)
    qp, qe = rng.random((3, 8), dtype=np.float32), rng.standard_normal((3, 16), dtype=np.float32)
    cp, ce = rng.random((300, 8), dtype=np.float32), rng.standard_normal((300, 16), dtype=np.float32)
    n = 200
    indptr = np.arange(0, 2 * n + 1, 2, dtype=np.int64)
    indices = np.stack([(np.arange(n) + 1) % n, (np.arange(n) + 2) % n], 1)
    indices = np.sort(indices, 1).reshape(-1).astype(np.int64)
    temb = rng.standard_normal((n, 16), dtype=np.float32)
    seeds = [rng.choice(n, 5, replace=False) for _ in range(3)]
    torch.manual_seed(0)
    conv = TransformerConv(16, 8, heads=2, edge_dim=4).eval()
    gx = torch.randn(30, 16)
    ei = torch.randint(0, 30, (2, 90))
    ea = torch.randn(90, 4)
    gp = torch.tensor([0, 10, 30])
    index = ThemeIndex.build(ce, cp, shards=3)
    ptr = np.array([0, 100, 250, 300], dtype=np.int64)
    return {
        "select_k": lambda: rasfast.select_k(x, 7),
        "theme_scope": lambda: rasfast.theme_scope(qp, cp, 50),
        "scoped_dense_search": lambda: rasfast.scoped_dense_search(
            qe, ce, np.tile(np.arange(40), (3, 1)), 5),
        "theme_scoped_search": lambda: rasfast.theme_scoped_search(qp, qe, cp, ce, 50, 5),
        "triple_beam_search": lambda: rasfast.triple_beam_search(
            (indptr, indices), temb, qe, seeds, beam_width=3, max_len=2),
        "segment_topk_scores": lambda: rasfast.segment_topk_scores(qe, ce, ptr, 5),
        "segment_max_rank": lambda: rasfast.segment_max_rank(
            ce[:, 0].copy(), np.arange(300, dtype=np.int64) // 3, ptr, 5),
        "transformer_conv": lambda: rasfast.transformer_conv(gx, ei, ea, conv),
        "graph_transformer_pool": lambda: rasfast.graph_transformer_pool(gx, ei, ea, gp, [conv]),
        "ThemeIndex.search": lambda: index.search(qp, qe, 50, 5),
        "ThemeIndex.search global": lambda: index.search(qp, qe, 50, 5, scope="global"),
        "ThemeIndex.dense_search": lambda: index.dense_search(qe, 5),
    }


@pytest.fixture
def wide_torch():
    saved = torch.get_num_threads()
    torch.set_num_threads(4)   # wider than the rule gives a small call, on any machine
    yield
    torch.set_num_threads(saved)


@pytest.mark.parametrize("name", list(_small_calls()))
def test_small_calls_run_their_torch_work_on_one_thread(name, wide_torch):
    call = _small_calls()[name]
    call()   # warm (lazy imports, first-use init)
    with _WidthProbe() as probe:
        call()
    assert probe.calls > 0, "the probe saw no torch call"
    assert probe.widths == {1}, f"{name}: torch work ran at widths {sorted(probe.widths)}"
    assert torch.get_num_threads() == 4   # the caller's width is back after the call
    assert _mkl_width() in (None, 4)


def test_small_calls_from_another_python_thread(wide_torch):
    calls = _small_calls()
    seen = {}

    def run():
        torch.set_num_threads(4)
        for name in ("triple_beam_search", "ThemeIndex.search"):
            with _WidthProbe() as probe:
                calls[name]()
            seen[name] = probe.widths

    t = threading.Thread(target=run)
    t.start()
    t.join()
    assert seen == {"triple_beam_search": {1}, "ThemeIndex.search": {1}}


def test_torch_width_follows_the_kernel_rule(wide_torch):
    from rasfast._threads import torch_width
    grain = rasfast.dispatch.cpu_module().parallel_grain()
    with torch_width(10):
        assert torch.get_num_threads() == 1            # below the grain: serial
    assert torch.get_num_threads() == 4
    rasfast.set_num_threads(3)   # an explicit cap is used as given (no idle-core check)
    with torch_width(2 * grain):
        assert torch.get_num_threads() == 2            # one thread per grain of work
    with torch_width(100 * grain):
        assert torch.get_num_threads() == 3            # at most the cap
    rasfast.set_num_threads(1)
    with torch_width(100 * grain):
        assert torch.get_num_threads() == 1
    assert torch.get_num_threads() == 4


def test_a_kernel_inside_an_op_sizes_its_width_from_the_callers(wide_torch):
    """The op's scope narrows torch's width for the op's own torch work; the kernel it calls
    still gets its width from the caller's (rasfast.get_num_threads: the most a kernel call
    uses), or a large select_k with small arguments would run serial on an idle machine."""
    from rasfast._threads import torch_width
    assert rasfast.get_num_threads() == 4           # no cap: the calling thread's width
    with torch_width(10):
        assert torch.get_num_threads() == 1 and rasfast.get_num_threads() == 4
        with torch_width(10):                       # nested (graph encoder layers)
            assert torch.get_num_threads() == 1 and rasfast.get_num_threads() == 4
        assert rasfast.get_num_threads() == 4
    torch.set_num_threads(3)
    assert rasfast.get_num_threads() == 3           # outside an op: the width as set


def test_a_large_region_still_narrows_under_a_lasting_load(wide_torch):
    """A region of settled_work() or more reads the idle cores three times, so a momentary
    task does not halve it (a training layer's backward took 1 thread for ~1 in 6 layers on
    a quiet 2-core VM before); a load that lasts is seen by every reading, and the region
    still narrows to the idle cores."""
    import subprocess
    import sys
    import time
    from rasfast._threads import torch_width
    mod = rasfast.dispatch.cpu_module()
    procs = os.cpu_count() or 1
    if procs < 2:
        pytest.skip("one core: nothing to narrow")
    spin = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(procs)]
    try:
        time.sleep(0.5)
        assert mod.idle_cores_settled() == 1
        with torch_width(2 * mod.settled_work()):
            assert torch.get_num_threads() == 1
    finally:
        for p in spin:
            p.kill()
            p.wait()


def test_gpu_calls_skip_the_rule_even_with_a_tuple_first_argument():
    """triple_beam_search takes its graph as (indptr, indices): a GPU call is recognised by
    the tuple's first tensor too, so it does not read /proc for CPU threads it never uses."""
    from rasfast._threads import _on_gpu

    class CudaLike(torch.Tensor):
        @property
        def is_cuda(self):
            return True
    g = torch.zeros(3).as_subclass(CudaLike)
    assert _on_gpu(g) and _on_gpu((g, g)) and _on_gpu([g])
    assert not _on_gpu(torch.zeros(3)) and not _on_gpu((torch.zeros(3), g))
    assert not _on_gpu(None) and not _on_gpu(()) and not _on_gpu(np.zeros(3))
