"""Validation without host synchronisations on the device path (DESIGN.md s.11).

A check of a device array's *values* (an index range, a monotone offset array, finiteness)
needs the device's answer on the host: a synchronisation. The CUDA paths of the ops
therefore

- check arrays that live on the host (numpy arrays, or CPU tensors when the op runs on a
  GPU) with numpy, before anything is launched: no device work, no sync;
- for device arrays, compute the checks' values on the device (small tensors), give the
  kernels *safe* copies of the index arrays (clamped into range, offsets made monotone), so
  a bad input can never make a kernel read or write out of bounds, and read all the values
  at the end in **one** transfer, together with the kernel's own error flag
  (:meth:`Deferred.read`). The first failing check, in the order the checks were added,
  raises the same ValueError that an eager check would have raised before the launch.

The non-CUDA backends read the values at once (:meth:`Deferred.raise_now`): on the CPU a
read costs nothing, and those backends index with the unsafe arrays.
"""
from __future__ import annotations

from typing import Callable, List, Optional, Sequence

import numpy as np
import torch

from ..dispatch import cuda_emulated

# The ``validate=`` modes of the ops that check device values this way (segment, beam, graph):
# "auto" = "full" (every value checked, read once), "none" (nothing read: capturable).
# The theme ops add "queries" (rasfast/ops/theme.py).
VALIDATE = ("auto", "full", "none")

# one check: the number of int64 values it added and the function that turns them into an
# error (or None)
_Check = Callable[[Sequence[int]], Optional[Exception]]


def is_host(x, dev: torch.device) -> bool:
    """``x`` can be checked without asking the device: a numpy array, or a CPU tensor while
    the op runs on another device, or on the CPU itself. Under the CUDA emulator CPU tensors
    stand for device tensors, so there they take the device path that the budgets count."""
    if isinstance(x, np.ndarray):
        return True
    if not isinstance(x, torch.Tensor) or x.device.type != "cpu":
        return False
    # numpy on a few offsets costs microseconds where the device path's torch ops cost tens
    # (segment_topk_scores at 4 x 50 candidates: 116 against 82 us before this check)
    return dev.type != "cpu" or not cuda_emulated()


def to_device(t: torch.Tensor, dev: torch.device) -> torch.Tensor:
    """``t`` on ``dev``; no op (and, on the emulator, no counted host copy) when it is there.

    A host tensor goes to a GPU through a pinned staging copy and a non-blocking transfer:
    torch copies pageable host memory synchronously (the H100 roofline run counted 3 such
    syncs in one beam search, for its seeds and decay table). torch's caching host
    allocator keeps the pinned block until the transfer has run, so ``t`` may be freed."""
    if t.device == dev:
        return t
    if t.device.type == "cpu" and dev.type == "cuda":
        # a fresh block even when t is pinned already: the caller may change t on return
        staged = torch.empty(t.shape, dtype=t.dtype, pin_memory=True).copy_(t)
        return staged.to(dev, non_blocking=True)
    return t.to(dev)


def stream_capturing(dev: torch.device) -> bool:
    """Whether work queued on ``dev`` now is being captured into a CUDA graph
    (``torch.cuda.graph``, or ``torch.compile(mode="reduce-overhead")`` recording its CUDA
    graph): nothing may then be read from the device, nor copied to it from pageable host
    memory. False off CUDA (CPU tensors, the emulator's included) without asking
    ``torch.cuda`` (a CPU-only build of torch has no capture to ask about)."""
    if dev.type != "cuda":
        return False
    if dev.index is not None and dev.index != torch.cuda.current_device():
        with torch.cuda.device(dev):
            return torch.cuda.is_current_stream_capturing()
    return torch.cuda.is_current_stream_capturing()


class Deferred:
    """Checks whose values are computed on the device and read once, at the end."""

    def __init__(self) -> None:
        self._values: List[torch.Tensor] = []
        self._checks: List[tuple] = []

    def __bool__(self) -> bool:
        return bool(self._checks)

    def add(self, values: Sequence[torch.Tensor], check: _Check) -> None:
        """``values``: 0-d or 1-d device tensors (bool or int), read as int64."""
        vals = [v.reshape(-1) if v.dtype == torch.int64 else v.reshape(-1).long() for v in values]
        self._checks.append((sum(v.numel() for v in vals), check))
        self._values.extend(vals)

    def read(self, extra: Optional[torch.Tensor] = None) -> List[int]:
        """Reads every value (and ``extra``, e.g. a kernel's error flag, returned as ints) in
        one transfer; raises the first failing check's error."""
        parts = list(self._values)
        if extra is not None:
            extra = extra.reshape(-1)
            parts.append(extra if extra.dtype == torch.int64 else extra.long())
        if not parts:
            return []
        vals = (parts[0] if len(parts) == 1 else torch.cat(parts)).tolist()  # the one sync
        pos = 0
        for count, check in self._checks:
            err = check(vals[pos:pos + count])
            pos += count
            if err is not None:
                raise err
        return vals[pos:]

    def raise_now(self) -> None:
        """Reads and raises at once (non-CUDA backends; a no-op without checks)."""
        if self._checks:
            self.read()
            self._values, self._checks = [], []


class Unchecked(Deferred):
    """``validate="none"``: device arrays are not checked and nothing is read (no sync, so
    the op can be captured in a CUDA graph); :func:`check_ptr` and :func:`check_ids` still
    return safe copies (clamped into range), so a bad value cannot make a kernel read out
    of bounds: it gives an unspecified result instead of an error. Host arrays are checked
    as always (that costs no device work)."""

    def add(self, values, check) -> None:
        pass

    def read(self, extra: Optional[torch.Tensor] = None) -> List[int]:
        return []

    def raise_now(self) -> None:
        pass


def deferred_for(validate: str) -> Deferred:
    """The checks' collector for a ``validate`` mode ("none": :class:`Unchecked`)."""
    return Unchecked() if validate == "none" else Deferred()


def check_ptr(p, name: str, total: int, total_what: str, dev: torch.device,
              deferred: Deferred, start_end_msg: Optional[str] = None,
              monotone_msg: Optional[str] = None) -> torch.Tensor:
    """CSR offsets ``p`` [k+1] (int, k+1 >= 1): 0 = p[0] <= ... <= p[k] = total.

    Host arrays are checked now (numpy); device arrays are checked through ``deferred`` and
    returned as a safe copy (clamped into [0, total], made non-decreasing). Returns int64 on
    ``dev``. Messages: ``start_end_msg`` is formatted with first/last, default the one of
    the ops."""
    se = start_end_msg or (name + ": must start at 0 and end at " + total_what +
                           " ({total}), got {first} .. {last}")
    mono = monotone_msg or f"{name}: must be non-decreasing"
    if is_host(p, dev):
        a = p if isinstance(p, np.ndarray) else p.numpy()
        a = a.astype(np.int64, copy=False)
        if int(a[0]) != 0 or int(a[-1]) != total:
            raise ValueError(se.format(total=total, first=int(a[0]), last=int(a[-1])))
        if len(a) > 1 and bool((a[1:] < a[:-1]).any()):
            raise ValueError(mono)
        return to_device(torch.from_numpy(np.ascontiguousarray(a)), dev)
    t = to_device(torch.as_tensor(p), dev).long()

    def check(v):
        first, last, dec = v
        if first != 0 or last != total:
            return ValueError(se.format(total=total, first=first, last=last))
        if dec:
            return ValueError(mono)
        return None

    if not isinstance(deferred, Unchecked):
        dec = (t[1:] < t[:-1]).any() if t.numel() > 1 else torch.zeros((), dtype=torch.bool, device=dev)
        deferred.add([t[0], t[-1], dec], check)
    return torch.cummax(t.clamp(0, total), 0).values


def check_ids(ids, name: str, lo: int, hi: int, dev: torch.device, deferred: Deferred,
              message: Callable[[int, int], str]) -> torch.Tensor:
    """Ids (any shape, int) in [lo, hi). Host arrays are checked now; device arrays through
    ``deferred`` and returned clamped into range (when hi > lo). ``message(min, max)``: the
    error's text. Returns int64 on ``dev``."""
    if is_host(ids, dev):
        a = ids if isinstance(ids, np.ndarray) else ids.numpy()
        if a.size and (int(a.min()) < lo or int(a.max()) >= hi):
            raise ValueError(message(int(a.min()), int(a.max())))
        return to_device(torch.from_numpy(np.ascontiguousarray(a.astype(np.int64, copy=False))), dev)
    t = to_device(torch.as_tensor(ids), dev)
    if t.numel() == 0:
        return t.long()

    def check(v):
        mn, mx = v
        return ValueError(message(mn, mx)) if mn < lo or mx >= hi else None

    if not isinstance(deferred, Unchecked):
        mn, mx = torch.aminmax(t)
        deferred.add([mn, mx], check)
    return t.clamp(lo, max(lo, hi - 1)).long()


def nonfinite(t: torch.Tensor, deferred: Deferred, message: str) -> None:
    """``t`` holds NaN or +-inf (one min/max reduction, read through ``deferred``)."""
    if t.numel() == 0:
        return
    lo, hi = torch.aminmax(t)
    deferred.add([~(torch.isfinite(lo) & torch.isfinite(hi))],
                 lambda v: ValueError(message) if v[0] else None)
