"""Per-thread host scratch tensors, reused across layers, calls and training steps.

Why: a large CPU tensor allocated fresh is a fresh mmap, and its first touch takes one page
fault per 4 KiB page (this VM gives no transparent huge pages). Measured on a Zen 4 VM: a
fresh 252 MB tensor filled in ~60 ms against ~9 ms for the same tensor touched before, and
the graph attention backward at 512 graphs took 0.24 s with fresh outputs against 0.10 s
with reused ones. A buffer here grows to the largest size asked of its name and is handed
out as a view of its first elements, so batches of varying size share it.

Only for tensors that never leave the call that asked for them (two users of one name on
one thread at once would share memory): never for returned or saved tensors.
"""
from __future__ import annotations

import math
import threading
from typing import Sequence

import torch

_LOCAL = threading.local()


def buffer(name: str, shape: Sequence[int], dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """An uninitialised contiguous CPU tensor of ``shape``, the calling thread's buffer for
    (``name``, ``dtype``): the same memory every time, grown when a larger one is asked."""
    bufs = _LOCAL.__dict__.setdefault("bufs", {})
    shape = tuple(int(s) for s in shape)
    n = math.prod(shape)
    flat = bufs.get((name, dtype))
    if flat is None or flat.numel() < n:
        flat = bufs[(name, dtype)] = torch.empty(max(n, 1), dtype=dtype)
    return flat[:n].view(shape)


def clear() -> None:
    """Frees the calling thread's buffers."""
    _LOCAL.__dict__.pop("bufs", None)


def held_bytes() -> int:
    """Bytes the calling thread's buffers hold."""
    return sum(t.numel() * t.element_size() for t in _LOCAL.__dict__.get("bufs", {}).values())
