"""rasfast.ops.replay's CUDA-only steps, run on the CPU against a stand-in of torch.cuda that
records the calls: the capture recipe (warm-up on a side stream that waits for the current
one, the current one waiting for it, the capture in thread-local error mode, the outputs as
a tuple) and StaticUse's ordering (the next use's stream waits for the event the previous
use recorded). The real CUDA graphs run in tests/test_graph_replay.py and
tests/test_theme_replay.py on a GPU."""
import contextlib
import threading

import pytest
import torch

from rasfast.ops import replay


class FakeCuda:
    def __init__(self):
        self.log = []
        cuda = self

        class Stream:
            def __init__(self, name="side"):
                self.name = name

            def wait_stream(self, other):
                cuda.log.append(("wait_stream", self.name, other.name))

            def wait_event(self, ev):
                cuda.log.append(("wait_event", self.name, ev.n))

        class Event:
            made = 0

            def __init__(self):
                Event.made += 1
                self.n = Event.made

            def record(self, stream):
                cuda.log.append(("record", self.n, stream.name))

        class CUDAGraph:
            def replay(self):
                cuda.log.append(("replay",))

        self.Stream, self.Event, self.CUDAGraph = Stream, Event, CUDAGraph
        self._current = Stream("current")
        self.active = "current"

    def current_stream(self, device=None):
        return self.Stream(self.active)

    @contextlib.contextmanager
    def stream(self, s):
        prev, self.active = self.active, s.name
        self.log.append(("enter_stream", s.name))
        yield
        self.active = prev

    @contextlib.contextmanager
    def graph(self, g, capture_error_mode="global"):
        self.log.append(("capture", capture_error_mode))
        prev, self.active = self.active, "capture"
        yield
        self.active = prev
        self.log.append(("end_capture",))


@pytest.fixture
def fake_cuda(monkeypatch):
    fake = FakeCuda()
    for name in ("Stream", "Event", "CUDAGraph", "current_stream", "stream", "graph"):
        monkeypatch.setattr(torch.cuda, name, getattr(fake, name))
    return fake


def test_capture_warms_up_on_a_side_stream_then_captures_thread_local(fake_cuda):
    ran = []
    out = torch.zeros(3)

    def fn():
        ran.append(fake_cuda.active)
        return out
    graph, outs = replay.CudaGraphs(warmup=2).capture(fn)
    assert ran == ["side", "side", "capture"]
    assert outs == (out,)
    log = fake_cuda.log
    assert log.index(("wait_stream", "side", "current")) < log.index(("enter_stream", "side"))
    assert ("wait_stream", "current", "side") in log
    assert log.index(("wait_stream", "current", "side")) < log.index(("capture", "thread_local"))
    assert log[-1] == ("end_capture",)


def test_capture_rejects_a_function_that_returns_no_tensors(fake_cuda):
    with pytest.raises(TypeError, match="fn: a captured function must return a tensor"):
        replay.CudaGraphs(warmup=0).capture(lambda: 3)


def test_static_use_orders_each_use_after_the_last_on_cuda(fake_cuda):
    use, dev = replay.StaticUse(), torch.device("cuda", 0)
    with use.on(dev):
        pass
    with use.on(dev):
        pass
    kinds = [e[0] for e in fake_cuda.log]
    assert kinds == ["record", "wait_event", "record"]
    first = fake_cuda.log[0][1]
    assert fake_cuda.log[1] == ("wait_event", "current", first)  # waits for the first use's event


def test_static_use_records_nothing_on_the_cpu_and_serialises_threads(fake_cuda):
    use, inside, peak = replay.StaticUse(), [0], [0]
    lock = threading.Lock()

    def work():
        for _ in range(50):
            with use.on(torch.device("cpu")):
                with lock:
                    inside[0] += 1
                    peak[0] = max(peak[0], inside[0])
                with lock:
                    inside[0] -= 1
    ts = [threading.Thread(target=work) for _ in range(4)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert peak[0] == 1 and fake_cuda.log == []


def test_an_error_inside_a_use_releases_it_and_records_no_event(fake_cuda):
    use, dev = replay.StaticUse(), torch.device("cuda", 0)
    with pytest.raises(RuntimeError):
        with use.on(dev):
            raise RuntimeError("boom")
    assert fake_cuda.log == []
    with use.on(dev):  # not left locked
        pass
