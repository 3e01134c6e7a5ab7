"""Per-stage wall-clock timing for the LLM backends: always kept in a small dict, and also
reported as spans (category ``"model"``) to a ``rasfast.profile.Trace`` -- the one passed in,
else the trace the RAS loop has activated -- or to any object with a ``span(name)`` context
manager. On CUDA the device is synchronised at stage edges so a stage's time is its own,
not the queue's."""
from __future__ import annotations

import contextlib
import time
from collections import defaultdict
from typing import Dict, List

import torch


def _active_trace():
    try:
        from ..profile import active_trace
    except ImportError:  # rasfast.profile not present: the timing dict alone
        return None
    return active_trace()


def _span(trace, name: str):
    if trace is None or not hasattr(trace, "span"):
        return contextlib.nullcontext()
    try:
        return trace.span(name, category="model")
    except TypeError:  # a span(name) without categories
        return trace.span(name)


class StageTimer:
    def __init__(self, trace=None, sync_cuda: bool = True):
        self.trace = trace
        self.sync_cuda = sync_cuda
        self.times: Dict[str, List[float]] = defaultdict(list)

    def _sync(self):
        if self.sync_cuda and torch.cuda.is_available() and torch.cuda.is_initialized():
            torch.cuda.synchronize()

    @contextlib.contextmanager
    def stage(self, name: str, trace=None):
        trace = trace if trace is not None else (self.trace if self.trace is not None else _active_trace())
        with _span(trace, name):
            self._sync()
            t0 = time.perf_counter()
            try:
                yield
            finally:
                self._sync()
                self.times[name].append(time.perf_counter() - t0)

    def summary(self) -> Dict[str, Dict[str, float]]:
        """``{stage: {"count", "total_s", "mean_ms"}}``."""
        return {k: {"count": len(v), "total_s": sum(v), "mean_ms": 1e3 * sum(v) / len(v)}
                for k, v in self.times.items() if v}

    def reset(self) -> None:
        self.times.clear()
