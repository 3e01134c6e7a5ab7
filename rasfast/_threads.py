"""The busy-machine width rule for the torch work of a public op (issue 31).

Every CPU kernel call sets its own OpenMP width (csrc/common/parallel.h: one thread below
about 2 ms of work, never more threads than the idle cores, ``rasfast.set_num_threads``
caps). The torch ops an op runs around its kernel -- validation, norms, ``unique``,
``repeat_interleave``, dtype conversions -- run on the same OpenMP runtime (torch's
at::parallel_for, oneDNN), but at torch's own intra-op width, and several of them start a
parallel region for a handful of elements. With the cores busy every such region waits for
a descheduled thread: ``triple_beam_search`` on a per-question graph took 2.8x its
single-thread time, all of it in that torch work, not in the kernel.

:func:`follows_width_rule` wraps a public op so that the calling thread's OpenMP width,
for the whole call, is what the kernel rule gives the op's input size (its array
arguments' elements): small calls run their torch work on one thread, large ones on at
most the idle cores. The op's kernel still sets its own width inside, from the caller's
width before the op narrowed it (csrc/common/parallel.h ``op_outer_width``): a large
``select_k`` whose arguments are below the grain still runs its kernel on the idle cores. MKL (torch's
``bmm``/``addmm``) keeps a thread count of its own, global once anyone calls
``torch.set_num_threads``: the same width is set as MKL's per-thread count
(``mkl_set_num_threads_local``) where torch's MKL exports it -- the graph encoder's per-head
``bmm`` of a one-graph call took 160 ms at MKL's 2 threads with both cores busy, 14 ms at 1.
"""
from __future__ import annotations

import contextlib
import ctypes
import functools
import os
from typing import Any, Callable, Iterator, Optional, TypeVar

import numpy as np
import torch

F = TypeVar("F", bound=Callable[..., Any])


def _cpu_module():
    from . import dispatch
    try:
        return dispatch.cpu_module()
    except Exception:  # no compiled module: torch keeps its width (nothing to follow)
        return None


@functools.lru_cache(maxsize=None)
def _mkl_set_local() -> Optional[Callable[[int], int]]:
    """MKL's ``mkl_set_num_threads_local`` (per calling thread; returns the previous
    per-thread count, 0 = none: the global one applies) from torch's library, or None when
    this torch has no MKL."""
    try:
        lib = ctypes.CDLL(os.path.join(os.path.dirname(torch.__file__), "lib", "libtorch_cpu.so"))
        fn = lib.MKL_Set_Num_Threads_Local   # the C entry (by value); the lower-case name is Fortran's
    except (OSError, AttributeError):
        return None
    fn.argtypes, fn.restype = [ctypes.c_int], ctypes.c_int
    return fn


@contextlib.contextmanager
def torch_width(work: int) -> Iterator[None]:
    """Inside, the calling thread's OpenMP width (torch's intra-op width included) and its
    MKL thread count are what a CPU kernel of ``work`` units would use; restored on exit."""
    mod = _cpu_module()
    if mod is None:
        yield
        return
    # torch sets a thread's width on its first parallel call (lazy init); done here, that
    # init cannot overwrite the width set below
    torch.get_num_threads()  # first torch call on this Python thread: torch sets its width
    saved, outer = mod.enter_threads(int(work))
    mkl = _mkl_set_local()
    mkl_saved = None if mkl is None else mkl(torch.get_num_threads())
    try:
        yield
    finally:
        if mkl_saved is not None:
            mkl(mkl_saved)
        mod.exit_threads(saved, outer)


def _elements(value: Any, nested: bool = True) -> int:
    """Array elements in an argument: a tensor, an ndarray, a CSR-like object (``.indptr``
    and ``.indices``), or a list/tuple of those (one level deep: per-query seed arrays)."""
    if isinstance(value, torch.Tensor):
        return value.numel()
    if isinstance(value, np.ndarray):
        return int(value.size)
    if isinstance(value, (list, tuple)):
        if nested and value and isinstance(value[0], (torch.Tensor, np.ndarray, list, tuple)):
            return sum(_elements(v, nested=False) for v in value)
        return len(value)
    if hasattr(value, "indptr") and hasattr(value, "indices"):
        return _elements(value.indptr, False) + _elements(value.indices, False)
    return 0


def op_work(args, kwargs) -> int:
    """The work units of a call for the width rule: the elements of its array arguments."""
    return sum(_elements(a) for a in args) + sum(_elements(v) for v in kwargs.values())


_LEAN: list = []


def _lean_parts():
    """(the CPU module or None, MKL's per-thread setter or None), looked up once."""
    if not _LEAN:
        _LEAN.append((_cpu_module(), _mkl_set_local()))
    return _LEAN[0]


def _on_gpu(first) -> bool:
    """The op's first argument is a CUDA tensor, or a tuple/list whose first element is one
    (triple_beam_search's graph as (indptr, indices)): a GPU call, which must not pay the
    rule's /proc readings (up to ~0.15 ms, more with a busy host) for threads it never uses."""
    if isinstance(first, (tuple, list)) and first:
        first = first[0]
    return isinstance(first, torch.Tensor) and first.is_cuda


def follows_width_rule(fn: F) -> F:
    """Runs ``fn`` (a public op) under :func:`torch_width` of its arguments' elements.

    The same steps as :func:`torch_width`, inlined: the generator-based context manager
    cost about 10-15 us a call more than the calls it makes (measured on segment_max_rank at
    16 x 60 items: 72 us bare, 89 us under torch_width, 80 us inlined), a fifth of a
    per-question op."""
    @functools.wraps(fn)
    def op(*args, **kwargs):
        if _on_gpu(args[0] if args else None):  # a GPU call uses no CPU threads
            return fn(*args, **kwargs)
        if torch.compiler.is_compiling():  # traced: the op's kernel sets its own width when
            return fn(*args, **kwargs)     # the graph runs; nothing to set while tracing
        mod, mkl = _LEAN[0] if _LEAN else _lean_parts()
        if mod is None:
            return fn(*args, **kwargs)
        torch.get_num_threads()  # first torch call on this Python thread: torch sets its width
        saved, outer = mod.enter_threads(op_work(args, kwargs))
        mkl_saved = None if mkl is None else mkl(torch.get_num_threads())
        try:
            return fn(*args, **kwargs)
        finally:
            if mkl_saved is not None:
                mkl(mkl_saved)
            mod.exit_threads(saved, outer)
    return op  # type: ignore[return-value]


__all__ = ["torch_width", "follows_width_rule", "op_work"]
