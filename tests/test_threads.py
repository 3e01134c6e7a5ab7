"""Thread control of the CPU kernels (issue 23, busy machines): rasfast.set_num_threads caps
every call from any Python thread, small calls run serially, and the results do not depend
on the number of threads."""
import threading

import numpy as np
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
