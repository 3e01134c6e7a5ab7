"""Which backends exist here, and which one an op call runs on.

Four implementations stand behind every op:

- ``torch``  : the reference, short and obviously correct; runs anywhere.
- ``cpu``    : C++/OpenMP in the compiled module ``rasfast._C``.
- ``cuda``   : hand-written CUDA in ``rasfast._cuda`` (built only where nvcc was found).
- ``triton`` : Triton kernels in ``rasfast.kernels``; on a GPU, or on the CPU only under
  ``TRITON_INTERPRET=1`` (set before the kernel module is imported; slow, for tests).

CUDA emulation: with ``RASFAST_CUDA_EMU=1`` in the environment, ``backend="cuda"`` runs the
same CUDA sources compiled for the CPU emulator (``rasfast._cuda_emu``, csrc/emu/) on CPU
tensors, through the same host code, argument checks, launch configuration, scratch
allocation and cub calls as on a GPU. It proves logic, barriers, the warp protocol and
bounds, not speed; ``auto`` never picks it.

``backend="auto"`` picks ``cpu`` for CPU tensors. For GPU tensors it picks ``cuda`` when the
CUDA module imports, can use the device (its statically linked runtime needs a new enough
driver) and the call is within the CUDA kernel's limits (``CUDA_LIMITS``); otherwise the next
backend, ``triton``, then ``torch``. ``backends()`` reports those limits and why ``cuda`` is
not usable when it is not.
"""
from __future__ import annotations

import functools
import importlib
import os
from types import ModuleType
from typing import Dict, Optional

import torch

from . import _env

BACKENDS = ("auto", "cpu", "cuda", "triton", "torch")


class BackendUnavailable(RuntimeError):
    """Raised when an explicitly requested backend cannot run here; says what is missing."""


@functools.lru_cache(maxsize=None)
def _import(name: str):
    """(module, None) or (None, reason)."""
    try:
        return importlib.import_module(name), None
    except Exception as e:  # ImportError, or OSError from a broken shared library
        return None, f"{type(e).__name__}: {e}"


def cpu_module() -> ModuleType:
    mod, err = _import("rasfast._C")
    if mod is None:
        raise BackendUnavailable(
            "backend 'cpu' needs the compiled module rasfast._C, which failed to import "
            f"({err}); reinstall rasfast (pip install -e .) so that it is built")
    return mod


def cuda_emulated() -> bool:
    """True when ``RASFAST_CUDA_EMU`` is set (not empty or ``0``): backend ``cuda`` then runs
    the CUDA kernels on the CPU emulator, on CPU tensors. Read at every call. The value may
    also be the path of an emulator build to load instead of the installed one (``make
    test-asan`` uses an AddressSanitizer build this way)."""
    return _env.flag("RASFAST_CUDA_EMU")


@functools.lru_cache(maxsize=None)
def _import_file(name: str, path: str):
    """(module, None) or (None, reason) for an extension module loaded from ``path``."""
    try:
        import importlib.util
        spec = importlib.util.spec_from_file_location(name, path)
        if spec is None or spec.loader is None:
            return None, f"not a Python extension module: {path}"
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        return mod, None
    except Exception as e:
        return None, f"{type(e).__name__}: {e}"


def _cuda_import():
    """(module, None) or (None, reason): rasfast._cuda, or the emulator's module."""
    if not cuda_emulated():
        return _import("rasfast._cuda")
    value = _env.get("RASFAST_CUDA_EMU")
    if value.endswith(".so"):
        return _import_file("rasfast._cuda_emu", os.path.abspath(value))
    return _import("rasfast._cuda_emu")


def cuda_module_loaded() -> Optional[ModuleType]:
    """rasfast._cuda (the emulator's module under RASFAST_CUDA_EMU) if it imported, else None:
    no device check and no scratch hook-up, for a caller that keeps what a full
    :func:`cuda_module` call established (rasfast/ops/_library.py's per-call test)."""
    return _cuda_import()[0]


# the module cuda_module() last set up: an op calls cuda_module() once or more per call
# (graph_transformer_pool: 5 times), and the checks below run again only when another
# module is the one to import (the emulator turned on or off, a test's stand-in)
_READY: list = [None]


def cuda_module() -> ModuleType:
    mod, err = _cuda_import()
    if mod is not None and mod is _READY[0]:
        return mod
    if cuda_emulated():
        if mod is None:
            raise BackendUnavailable(
                "RASFAST_CUDA_EMU: backend 'cuda' needs rasfast._cuda_emu (the CUDA sources "
                f"built for the CPU emulator), which failed to import ({err}); reinstall rasfast")
        _READY[0] = mod
        return mod  # scratch comes from the module's own (host) pool
    if mod is None:
        raise BackendUnavailable(
            "backend 'cuda' needs rasfast._cuda, which was not built or failed to import "
            f"({err}); it is built only when the CUDA compiler (nvcc) is found at install time")
    use_torch_scratch(mod)
    _READY[0] = mod
    return mod


def _torch_scratch_alloc(nbytes: int, device: int, stream: int) -> int:
    return torch.cuda.caching_allocator_alloc(nbytes, device, stream)


def use_torch_scratch(mod) -> None:
    """Make the CUDA kernels take their scratch memory from torch's caching allocator (on the
    launch stream, so it is reused across calls and shows in torch.cuda.memory_stats())."""
    if hasattr(mod, "set_scratch_allocator") and mod.scratch_allocator() != "callback":
        mod.set_scratch_allocator(_torch_scratch_alloc, torch.cuda.caching_allocator_delete)


def triton_interpret() -> bool:
    return _env.flag("TRITON_INTERPRET")


# Triton's interpreter before this version wraps runtime scalars (a kernel argument D, a loaded
# CSR bound) as 1-element arrays that range() cannot take: every kernel with a runtime loop
# bound fails there (seen with 3.6.0 on a GPU machine, reproduced here). 3.9.0 is the version
# the interpreted tests run with; compiled Triton on a GPU is not affected.
TRITON_INTERPRETER_MIN = (3, 9)


def _version_tuple(v: str) -> tuple:
    out = []
    for part in str(v).split(".")[:2]:
        digits = "".join(ch for ch in part if ch.isdigit())
        out.append(int(digits) if digits else 0)
    return tuple(out)


def triton_interpreter_problem(version: Optional[str] = None) -> Optional[str]:
    """Why interpreted Triton cannot run rasfast's kernels here (None when it can)."""
    if version is None:
        tri, err = _import("triton")
        if tri is None:
            return f"needs the triton package ({err})"
        version = getattr(tri, "__version__", "0")
    if _version_tuple(version) < TRITON_INTERPRETER_MIN:
        need = ".".join(map(str, TRITON_INTERPRETER_MIN))
        return (f"Triton {version}'s interpreter cannot run rasfast's kernels (it cannot take runtime "
                f"loop bounds); interpreting them on the CPU needs triton>={need}")
    return None


def triton_kernels() -> ModuleType:
    """The Triton kernel package (rasfast.kernels), importing triton on first use."""
    tri, err = _import("triton")
    if tri is None:
        raise BackendUnavailable(f"backend 'triton' needs the triton package ({err}); "
                                 "pip install 'rasfast[gpu]'")
    mod, err = _import("rasfast.kernels")
    if mod is None:
        raise BackendUnavailable(f"backend 'triton': rasfast.kernels failed to import ({err})")
    return mod


# Calls the CUDA kernels cannot take; auto moves on to triton for them, an explicit
# backend="cuda" raises ValueError saying which limit was hit.
CUDA_LIMITS: Dict[str, str] = {
    "scoped_dense_search": "k <= rasfast._cuda.theme_max_k (per-warp top-k lists in shared memory)",
    "theme_scoped_search": "k <= rasfast._cuda.theme_max_k (per-warp top-k lists in shared memory)",
    "triple_beam_search": "on-chip candidate lists within rasfast._cuda.beam_max_smem bytes of "
                          "shared memory per block",
}


def cuda_attr(name: str, default=None):
    """An attribute of rasfast._cuda (a kernel limit), or ``default`` when it is not built
    (of rasfast._cuda_emu under RASFAST_CUDA_EMU=1)."""
    mod, _ = _cuda_import()
    return getattr(mod, name, default) if mod is not None else default


# Modules whose runtime said "ok" once: that does not change within a process, and asking the
# driver again on every auto call costs host time on each GPU op.
_USABLE_CUDA: Dict[int, object] = {}


def cuda_unusable_reason() -> Optional[str]:
    """None when rasfast._cuda imports and its runtime can use a device; else why not.
    Under RASFAST_CUDA_EMU=1: None when rasfast._cuda_emu imports."""
    mod, err = _cuda_import()
    if mod is None:
        return err
    if _USABLE_CUDA.get(id(mod)) is mod:
        return None
    try:
        status = mod.device_status()  # e.g. "CUDA driver version is insufficient ..."
    except Exception as e:  # a module built before device_status existed, or a broken one
        return f"{type(e).__name__}: {e}"
    if status == "ok":
        _USABLE_CUDA[id(mod)] = mod
        return None
    return f"rasfast._cuda cannot use a device: {status}"


def _cuda_device_count() -> int:
    try:
        return torch.cuda.device_count() if torch.cuda.is_available() else 0
    except Exception:
        return 0


def set_num_threads(n: int) -> None:
    """Caps the threads every CPU kernel call may use, from any Python thread; ``0`` goes
    back to the default: OpenMP's (``OMP_NUM_THREADS``, else the core count), limited at
    each call to the cores other processes leave idle. Small calls run on one thread
    anyway (docs/ops.md "Threads on busy machines")."""
    if isinstance(n, bool) or not isinstance(n, int) or n < 0:
        raise ValueError(f"n: expected an int >= 0 (0 = the default), got {n!r}")
    cpu_module().set_num_threads(n)


def get_num_threads() -> int:
    """The most threads a CPU kernel call uses (see :func:`set_num_threads`)."""
    return int(cpu_module().omp_max_threads())


def backends() -> Dict[str, Dict[str, object]]:
    """What is available on this machine, per backend, with the reason when not.

    >>> rasfast.backends()["cpu"]["available"]
    True
    """
    out: Dict[str, Dict[str, object]] = {}
    out["torch"] = {"available": True, "version": torch.__version__}
    mod, err = _import("rasfast._C")
    from ._native import native_cuda_ops, native_ops
    names, why = native_ops()
    out["cpu"] = {"available": mod is not None, "reason": err,
                  "threads": mod.omp_max_threads() if mod is not None else 0,
                  # ops whose registered CPU kernel is C++ (rasfast._torch_ops), or why none
                  "operator_kernels": sorted(names) if why is None else [],
                  "operator_kernels_reason": why}
    emu = cuda_emulated()
    cmod, cerr = _cuda_import()
    devices = _cuda_device_count()
    if cmod is None:
        reason = cerr
    elif not devices and not emu:
        reason = "no CUDA device visible to torch"
    else:
        reason = cuda_unusable_reason()
    out["cuda"] = {"available": cmod is not None and (devices > 0 or emu) and reason is None,
                   "built": cmod is not None, "emulated": emu, "device_count": devices,
                   "reason": reason,
                   "runtime_version": cmod.runtime_version() if cmod is not None else None,
                   "limits": dict(CUDA_LIMITS), "limit_values": _cuda_limit_values(cmod),
                   # ops whose registered CUDA kernel is C++ (rasfast._torch_ops)
                   "operator_kernels": sorted(native_cuda_ops())}
    tri, terr = _import("triton")
    interp = triton_interpret()
    t_problem = triton_interpreter_problem(getattr(tri, "__version__", "0")) if tri is not None else None
    t_ok = tri is not None and (devices > 0 or (interp and t_problem is None))
    t_reason = terr if tri is None else (None if t_ok else t_problem if interp else
                                         "no GPU (set TRITON_INTERPRET=1 to interpret on the CPU)")
    out["triton"] = {"available": t_ok, "importable": tri is not None, "interpret": interp,
                     "version": getattr(tri, "__version__", None), "reason": t_reason}
    return out


def _cuda_limit_values(cmod) -> Dict[str, object]:
    if cmod is None:
        return {}
    return {n: getattr(cmod, n) for n in ("theme_max_k", "beam_max_smem") if hasattr(cmod, n)}


def resolve(backend: str, device: torch.device, op: str, has_cuda_op: bool = True,
            cuda_limit: Optional[str] = None) -> str:
    """Concrete backend for an op call on tensors that live on ``device``.

    ``has_cuda_op`` lets an op say it has no CUDA kernel so auto falls through to Triton.
    ``cuda_limit``: a sentence saying which CUDA kernel limit this call exceeds (None when
    within them): auto then falls through to Triton, and backend="cuda" raises ValueError.
    Raises ValueError for an unknown name or a device the backend cannot serve, and
    BackendUnavailable naming what is missing.
    """
    if backend not in BACKENDS:
        raise ValueError(f"backend: expected one of {', '.join(map(repr, BACKENDS))}, got {backend!r}")
    on_gpu = device.type == "cuda"
    if backend == "auto":
        if not on_gpu:
            return "cpu" if _import("rasfast._C")[0] is not None else "torch"
        if has_cuda_op and cuda_limit is None and cuda_unusable_reason() is None:
            return "cuda"
        if _import("triton")[0] is not None:
            return "triton"
        return "torch"
    if backend == "cpu":
        if on_gpu:
            raise ValueError(f"{op}: backend 'cpu' needs CPU arrays, got tensors on {device}")
        cpu_module()
    elif backend == "cuda":
        cuda_module()
        if cuda_emulated():
            if on_gpu:
                raise ValueError(f"{op}: RASFAST_CUDA_EMU=1 runs backend 'cuda' on the CPU "
                                 f"emulator, which needs CPU tensors, got tensors on {device}")
        elif not on_gpu:
            if _cuda_device_count() == 0:
                raise BackendUnavailable(f"{op}: backend 'cuda' needs a CUDA device; none is visible")
            raise ValueError(f"{op}: backend 'cuda' needs tensors on a CUDA device, got {device}")
        if not has_cuda_op:
            raise BackendUnavailable(f"{op}: no CUDA kernel is built for this op")
        if cuda_limit is not None:
            raise ValueError(f"{op}: {cuda_limit}; use backend='triton', 'torch' or 'auto' "
                             "(which falls back past this limit)")
    elif backend == "triton":
        triton_kernels()
        if not on_gpu and not triton_interpret():
            raise BackendUnavailable(
                f"{op}: backend 'triton' on CPU tensors needs TRITON_INTERPRET=1 in the "
                "environment before rasfast.kernels is imported (and a GPU for real speed)")
        if not on_gpu:
            problem = triton_interpreter_problem()
            if problem is not None:
                raise BackendUnavailable(f"{op}: backend 'triton': {problem}")
    return backend


def op_device(t: torch.Tensor) -> torch.device:
    return t.device


def available(name: str) -> bool:
    """True if ``name`` can run on this machine (for tests and benchmarks)."""
    info = backends()
    return bool(info[name]["available"]) if name in info else False


def cuda_device_count() -> int:
    return _cuda_device_count()


__all__ = ["BACKENDS", "BackendUnavailable", "CUDA_LIMITS", "backends", "resolve", "available",
           "cuda_attr", "cuda_unusable_reason", "cuda_emulated",
           "cpu_module", "cuda_module", "triton_kernels", "triton_interpret"]
