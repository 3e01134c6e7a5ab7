"""Per-stage profiling of the RAS loop: spans, summary table, Chrome trace, PNG chart.

A :class:`Trace` records spans (stage name, start, end, category, attributes). Code marks a
stage with ``with span("dense", batch=len(q)):``; the span goes to the trace that is
*active* in the current context (``with trace.activate():``, which ``RAS.run_batch`` does), so
components record their stages without being handed the trace. With no active trace a span
costs one context-variable lookup.

- Wall time always (``time.perf_counter_ns``).
- On a GPU (``Trace(cuda=True)``, default: when torch sees a CUDA device) every span also
  records a pair of CUDA events; ``summary()`` then reports the GPU time between them.
- NVTX ranges (``torch.cuda.nvtx``) wrap every span when CUDA is available, so Nsight
  Systems timelines show the loop's stages.

Spans in category ``"model"`` are encoder / LLM calls: :meth:`Trace.model_time` (the union
of their intervals) lets a caller split wall time into model time and rasfast's own overhead.
"""
from __future__ import annotations

import contextlib
import contextvars
import json
import os
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Dict, Iterator, List, Optional, Sequence, Tuple

import numpy as np

# The RAS loop's stages, in pipeline order: the default order of a summary. Each system
# declares its own order (rasfast.systems.*: STAGES) and passes it as Trace(stages=...).
STAGES = ("plan", "encode", "scope", "dense", "expand", "extract", "graph_build",
          "graph_encode", "answer")

_ACTIVE: contextvars.ContextVar[Optional["Trace"]] = contextvars.ContextVar("rasfast_trace",
                                                                            default=None)


@dataclass
class Span:
    name: str
    start_ns: int
    end_ns: int
    category: str = "stage"
    tid: int = 0
    depth: int = 0
    args: Dict[str, Any] = field(default_factory=dict)
    gpu_ms: Optional[float] = None

    @property
    def ms(self) -> float:
        return (self.end_ns - self.start_ns) / 1e6


def _cuda_available() -> bool:
    try:
        import torch
        return bool(torch.cuda.is_available())
    except Exception:  # torch missing or broken: no GPU timing
        return False


class Trace:
    """A collection of timed spans; see the module docstring."""

    def __init__(self, name: str = "rasfast", cuda: Optional[bool] = None, nvtx: Optional[bool] = None,
                 stages: Optional[Sequence[str]] = None):
        """``stages``: the system's stage order, which the summary follows (stages it does not
        name come after, in recording order); default the RAS loop's (``STAGES``)."""
        self.name = name
        self.stages = tuple(STAGES if stages is None else stages)
        self.spans: List[Span] = []
        self._t0 = time.perf_counter_ns()
        has_cuda = _cuda_available()
        self.cuda = has_cuda if cuda is None else (bool(cuda) and has_cuda)
        self.nvtx = has_cuda if nvtx is None else (bool(nvtx) and has_cuda)
        self._depth = threading.local()
        self._pending: List[Tuple[Span, Any, Any]] = []  # spans waiting for CUDA events
        self._lock = threading.Lock()

    # -- recording -----------------------------------------------------------------------
    @contextlib.contextmanager
    def span(self, name: str, category: str = "stage", **args) -> Iterator[Span]:
        """Times the body as one span called ``name``."""
        depth = getattr(self._depth, "d", 0)
        self._depth.d = depth + 1
        ev = None
        if self.nvtx:
            try:
                import torch
                torch.cuda.nvtx.range_push(name)
            except Exception:
                self.nvtx = False
        if self.cuda:
            import torch
            ev = (torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
            ev[0].record()
        sp = Span(name, time.perf_counter_ns(), 0, category, threading.get_ident(), depth, dict(args))
        try:
            yield sp
        finally:
            if ev is not None:
                ev[1].record()
            sp.end_ns = time.perf_counter_ns()
            if self.nvtx:
                try:
                    import torch
                    torch.cuda.nvtx.range_pop()
                except Exception:
                    pass
            self._depth.d = depth
            with self._lock:
                self.spans.append(sp)
                if ev is not None:
                    self._pending.append((sp, ev[0], ev[1]))

    def add(self, name: str, start_ns: int, end_ns: int, category: str = "stage", **args) -> None:
        """Records an already-timed interval (e.g. measured by another process)."""
        with self._lock:
            self.spans.append(Span(name, int(start_ns), int(end_ns), category,
                                   threading.get_ident(), 0, dict(args)))

    @contextlib.contextmanager
    def activate(self) -> Iterator["Trace"]:
        """Makes this trace the target of module-level :func:`span` calls in this context."""
        token = _ACTIVE.set(self)
        try:
            yield self
        finally:
            _ACTIVE.reset(token)

    def _resolve_gpu(self) -> None:
        if not self._pending:
            return
        import torch
        torch.cuda.synchronize()
        with self._lock:
            for sp, a, b in self._pending:
                sp.gpu_ms = float(a.elapsed_time(b))
            self._pending.clear()

    # -- reading -------------------------------------------------------------------------
    def stage_times(self) -> Dict[str, np.ndarray]:
        """Milliseconds of every span, per stage name, in recording order."""
        out: Dict[str, List[float]] = {}
        for sp in sorted(self.spans, key=lambda s: s.start_ns):
            out.setdefault(sp.name, []).append(sp.ms)
        return {k: np.asarray(v, dtype=np.float64) for k, v in out.items()}

    def _ordered_names(self) -> List[str]:
        names = list(dict.fromkeys(sp.name for sp in sorted(self.spans, key=lambda s: s.start_ns)))
        known = [s for s in self.stages if s in names]
        return known + [n for n in names if n not in self.stages]

    def summary_rows(self) -> List[Dict[str, Any]]:
        """One dict per stage: stage, count, total_ms, mean_ms, p50_ms, p95_ms (+ gpu_ms)."""
        self._resolve_gpu()
        times = self.stage_times()
        rows = []
        for name in self._ordered_names():
            t = times[name]
            row = {"stage": name, "count": int(t.size), "total_ms": float(t.sum()),
                   "mean_ms": float(t.mean()), "p50_ms": float(np.percentile(t, 50)),
                   "p95_ms": float(np.percentile(t, 95))}
            g = [sp.gpu_ms for sp in self.spans if sp.name == name and sp.gpu_ms is not None]
            if g:
                row["gpu_ms"] = float(sum(g))
            rows.append(row)
        return rows

    def summary(self) -> str:
        """A plain-text table: count, total, mean, p50, p95 per stage (milliseconds).

        Stages nest (``dense`` contains its ``encode``), so totals do not add up to the wall
        time; ``wall`` is the span of the whole trace.
        """
        rows = self.summary_rows()
        gpu = any("gpu_ms" in r for r in rows)
        cols = [("count", "count", "{:d}"), ("total ms", "total_ms", "{:.2f}"),
                ("mean ms", "mean_ms", "{:.3f}"), ("p50 ms", "p50_ms", "{:.3f}"),
                ("p95 ms", "p95_ms", "{:.3f}")] + ([("gpu ms", "gpu_ms", "{:.2f}")] if gpu else [])
        cells = [[fmt.format(r.get(key, float("nan"))) for _, key, fmt in cols] for r in rows]
        wall = f"{self.wall_ms():.2f}"
        # every column as wide as its widest cell (a 10-minute LLM stage is 9 digits + 2 decimals)
        widths = [max([len(head)] + [len(c[i]) for c in cells] + ([len(wall)] if i == 1 else [])) + 2
                  for i, (head, _, _) in enumerate(cols)]
        w = max([14] + [len(r["stage"]) + 2 for r in rows])
        head = f"{'stage':<{w}}" + "".join(f"{h:>{cw}}" for (h, _, _), cw in zip(cols, widths))
        lines = [head, "-" * len(head)]
        for r, c in zip(rows, cells):
            lines.append(f"{r['stage']:<{w}}" + "".join(f"{v:>{cw}}" for v, cw in zip(c, widths)))
        lines.append(f"{'wall':<{w}}{'':>{widths[0]}}{wall:>{widths[1]}}")
        return "\n".join(lines)

    def wall_ms(self) -> float:
        """From the first span's start to the last span's end."""
        if not self.spans:
            return 0.0
        return (max(s.end_ns for s in self.spans) - min(s.start_ns for s in self.spans)) / 1e6

    def union_ms(self, category: str) -> float:
        """Milliseconds covered by at least one span of ``category`` (nested spans count once)."""
        iv = sorted((s.start_ns, s.end_ns) for s in self.spans if s.category == category)
        total, cur_s, cur_e = 0, None, None
        for s, e in iv:
            if cur_e is None or s > cur_e:
                if cur_e is not None:
                    total += cur_e - cur_s
                cur_s, cur_e = s, e
            else:
                cur_e = max(cur_e, e)
        if cur_e is not None:
            total += cur_e - cur_s
        return total / 1e6

    def self_times(self) -> Dict[str, float]:
        """Exclusive milliseconds per stage: each span minus its direct children (same
        thread), so the values add up to the traced wall time. Model spans are keyed
        "<name> (model)"."""
        out: Dict[str, float] = {}
        by_tid: Dict[int, List[Span]] = {}
        for sp in self.spans:
            by_tid.setdefault(sp.tid, []).append(sp)
        for spans in by_tid.values():
            spans.sort(key=lambda s: (s.start_ns, -s.end_ns))
            for i, sp in enumerate(spans):
                children, end = 0, sp.start_ns
                for c in spans[i + 1:]:
                    if c.start_ns >= sp.end_ns:
                        break
                    if c.depth == sp.depth + 1 and c.start_ns >= end:
                        children += c.end_ns - c.start_ns
                        end = c.end_ns
                key = f"{sp.name} (model)" if sp.category == "model" else sp.name
                out[key] = out.get(key, 0.0) + (sp.end_ns - sp.start_ns - children) / 1e6
        return out

    def model_time(self) -> float:
        """Milliseconds spent inside encoder / model calls (category ``"model"``)."""
        return self.union_ms("model")

    # -- export --------------------------------------------------------------------------
    def chrome_events(self) -> List[Dict[str, Any]]:
        """Chrome trace "complete" events (ph = "X", microseconds) plus process metadata."""
        self._resolve_gpu()
        pid = os.getpid()
        tids: Dict[int, int] = {}
        events: List[Dict[str, Any]] = [
            {"name": "process_name", "ph": "M", "pid": pid, "tid": 0, "args": {"name": self.name}}]
        for sp in sorted(self.spans, key=lambda s: (s.start_ns, -s.end_ns)):
            tid = tids.setdefault(sp.tid, len(tids))
            args = {k: (v if isinstance(v, (int, float, str, bool)) or v is None else str(v))
                    for k, v in sp.args.items()}
            if sp.gpu_ms is not None:
                args["gpu_ms"] = sp.gpu_ms
            events.append({"name": sp.name, "cat": sp.category, "ph": "X",
                           "ts": (sp.start_ns - self._t0) / 1e3, "dur": (sp.end_ns - sp.start_ns) / 1e3,
                           "pid": pid, "tid": tid, "args": args})
        return events

    def to_chrome(self, path: os.PathLike) -> str:
        """Writes a Chrome/Perfetto trace (JSON object format) and returns the path."""
        path = os.fspath(path)
        d = os.path.dirname(path)
        if d:
            os.makedirs(d, exist_ok=True)
        with open(path, "w") as f:
            json.dump({"traceEvents": self.chrome_events(), "displayTimeUnit": "ms"}, f)
        return path

    def plot(self, path: os.PathLike, title: Optional[str] = None) -> str:
        """Writes a PNG stage breakdown (needs matplotlib): exclusive time per stage (nested
        spans subtracted, so the bars add up to the wall time), model calls in orange."""
        try:
            import matplotlib
            matplotlib.use("Agg")
            import matplotlib.pyplot as plt
        except ImportError as e:
            raise ImportError("Trace.plot needs matplotlib (pip install 'rasfast[plot]')") from e
        items = sorted(self.self_times().items(), key=lambda kv: -kv[1])
        names = [k for k, _ in items][::-1]
        vals = [v for _, v in items][::-1]
        wall = max(self.wall_ms(), 1e-9)
        colors = ["#dd8452" if n.endswith("(model)") else "#4c72b0" for n in names]
        fig, ax = plt.subplots(figsize=(7, 0.42 * max(len(names), 3) + 1.3))
        ax.barh(names, vals, color=colors)
        for y, v in enumerate(vals):
            ax.text(v, y, f" {v:.1f} ms ({100 * v / wall:.1f}%)", va="center", fontsize=8)
        ax.set_xlabel("exclusive time per stage, ms (orange: encoder/model calls)")
        ax.set_xlim(0, max(vals + [1e-9]) * 1.3)
        ax.set_title(title or f"{self.name}: wall {self.wall_ms():.1f} ms")
        fig.tight_layout()
        path = os.fspath(path)
        d = os.path.dirname(path)
        if d:
            os.makedirs(d, exist_ok=True)
        fig.savefig(path, dpi=110)
        plt.close(fig)
        return path


def active_trace() -> Optional[Trace]:
    """The trace activated in this context, or None."""
    return _ACTIVE.get()


@contextlib.contextmanager
def span(name: str, category: str = "stage", **args) -> Iterator[Optional[Span]]:
    """A span on the active trace; a no-op when none is active."""
    tr = _ACTIVE.get()
    if tr is None:
        yield None
        return
    with tr.span(name, category, **args) as sp:
        yield sp


class TimedEncoder:
    """Wraps an encoder so each ``encode`` call is a ``"encode"`` span of category "model"."""

    def __init__(self, encoder):
        self.encoder = encoder
        self.name = encoder.name
        self.dim = encoder.dim

    def encode(self, texts: Sequence[str], batch_size: int = 64) -> np.ndarray:
        with span("encode", category="model", n=len(texts)):
            return self.encoder.encode(texts, batch_size)


__all__ = ["Trace", "Span", "span", "active_trace", "TimedEncoder", "STAGES"]
