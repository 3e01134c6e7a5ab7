"""rasfast._torch_ops, the C++ CPU and CUDA kernels of the short registered operators
(csrc/torch_ops/): found beside rasfast._C, loaded only under the torch it was built for,
and handed rasfast._C's table of kernel entry points (and, on the first GPU or emulated call
that wants it, rasfast._cuda's or rasfast._cuda_emu's: :func:`attach_cuda`).

rasfast/ops/_library.py registers the operators around it (their Python kernels become
``rasfast::<op>_python``); :func:`rasfast.backends` reports it under "cpu" and "cuda".
``RASFAST_NATIVE_OPS=0`` in the environment (before first use) keeps the Python kernels.
"""
from __future__ import annotations

import ctypes
import importlib
import os

import torch

_NATIVE: list = []  # [(frozenset of op names, reason or None)], filled once


def library_path(folder: str):
    """(path of rasfast._torch_ops in ``folder``, None) when it is there and was built for the
    running torch, else (None, why not). Loading a library built against another torch's
    headers could crash the process, so the version stamp written beside it at build time
    must match exactly."""
    path = os.path.join(folder, "_torch_ops.so")
    stamp = os.path.join(folder, "_torch_ops.torch-version")
    if not (os.path.exists(path) and os.path.exists(stamp)):
        return None, ("rasfast._torch_ops was not built (torch was not importable when "
                      "rasfast was built)")
    with open(stamp, encoding="utf-8") as f:
        built_for = f.read().strip()
    if built_for != torch.__version__:
        return None, (f"rasfast._torch_ops was built for torch {built_for}, this is torch "
                      f"{torch.__version__} (reinstall rasfast to rebuild it)")
    return path, None


def _load_native():
    """Loads rasfast._torch_ops and hands it rasfast._C's kernel table. Returns (names of the
    ops whose CPU kernel it registered, None) or (empty set, why not)."""
    if os.environ.get("RASFAST_NATIVE_OPS", "1") == "0":
        return frozenset(), "RASFAST_NATIVE_OPS=0"
    try:
        cmod = importlib.import_module("rasfast._C")
    except ImportError as e:
        return frozenset(), f"rasfast._C does not import ({e})"
    path, reason = library_path(os.path.dirname(cmod.__file__))
    if path is None:
        return frozenset(), reason
    try:
        lib = ctypes.CDLL(path)  # registers the CPU kernels (TORCH_LIBRARY_IMPL)
    except OSError as e:
        return frozenset(), f"rasfast._torch_ops does not load ({e})"
    lib.rasfast_torch_ops_names.restype = ctypes.c_char_p
    lib.rasfast_torch_ops_attach.argtypes = [ctypes.c_void_p]
    names = frozenset(lib.rasfast_torch_ops_names().decode().split(","))
    cuda_names = getattr(lib, "rasfast_torch_ops_cuda_names", None)
    if cuda_names is not None:
        cuda_names.restype = ctypes.c_char_p
        lib.rasfast_torch_ops_attach_cuda.argtypes = [ctypes.c_void_p]
        # registered on load (TORCH_LIBRARY_IMPL), whatever becomes of the tables below
        _CUDA_NAMES.append(frozenset(cuda_names().decode().split(",")))
        _CUDA_LIB.append(lib)
    if lib.rasfast_torch_ops_attach(ctypes.c_void_p(cmod.cpu_entry_points())) != 0:
        # the kernels are registered but hand every call to the Python kernels
        return names, "rasfast._C's kernel table has another version than rasfast._torch_ops"
    _NATIVE_LIB.append(lib)  # keep the library (and its registrations) alive
    return names, None


_NATIVE_LIB: list = []
_CUDA_LIB: list = []       # [the loaded library], for attach_cuda
_CUDA_NAMES: list = []     # [frozenset of the ops whose CUDA kernel _torch_ops registered]
_CUDA_ATTACHED: dict = {}  # {"module": the CUDA module whose table _torch_ops holds}


def native_ops() -> tuple:
    """(names of the ops whose CPU kernel is C++, None) or (empty or partial set, the reason
    the C++ kernels do not serve)."""
    if not _NATIVE:
        _NATIVE.append(_load_native())
    return _NATIVE[0]


def native(name: str) -> bool:
    """Whether ``torch.ops.rasfast.<name>`` has its C++ CPU kernel, attached to rasfast._C."""
    names, reason = native_ops()
    return reason is None and name in names


def native_cuda_ops() -> frozenset:
    """Names of the ops whose CUDA dispatch key rasfast._torch_ops registered (a C++ kernel
    that launches rasfast._cuda's kernels once :func:`attach_cuda` handed it their table)."""
    native_ops()  # loads the library once
    return _CUDA_NAMES[0] if _CUDA_NAMES else frozenset()


def attach_cuda(mod) -> bool:
    """Hands ``mod``'s (rasfast._cuda's or rasfast._cuda_emu's) kernel table to
    rasfast._torch_ops, once per module; True when its CUDA kernels now launch from it."""
    if _CUDA_ATTACHED.get("module") is mod:
        return True
    if not native_cuda_ops() or not hasattr(mod, "cuda_entry_points"):
        return False
    if _CUDA_LIB[0].rasfast_torch_ops_attach_cuda(ctypes.c_void_p(mod.cuda_entry_points())) != 0:
        return False  # a table of another version: the Python kernels serve
    _CUDA_ATTACHED["module"] = mod
    return True


def attached_cuda():
    """The CUDA module whose kernel table rasfast._torch_ops holds, or None."""
    return _CUDA_ATTACHED.get("module")


__all__ = ["library_path", "native_ops", "native", "native_cuda_ops", "attach_cuda",
           "attached_cuda"]
