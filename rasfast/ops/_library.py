"""rasfast's ops as PyTorch operators: the ``rasfast`` namespace of ``torch.library``.

Every public op (``rasfast.select_k``, the theme ops, the segment ops,
``triple_beam_search``, ``transformer_conv``, ``graph_transformer_pool``) is defined here
as an operator ``torch.ops.rasfast.<name>`` with

- a schema (tensors, ints, floats, bools and the ``backend`` string: the public op's
  ``backend=`` choice travels as an argument of the operator);
- one kernel registered for the ``CPU`` and the ``CUDA`` dispatch keys (under the
  busy-machine width rule of rasfast/_threads.py on the CPU): it resolves
  ``backend`` for the tensors' device (``"auto"`` picks cpu on CPU tensors, cuda on GPU
  tensors, as in :func:`rasfast.dispatch.resolve`; under ``RASFAST_CUDA_EMU=1`` the
  ``"cuda"`` backend runs CPU tensors through the emulator), checks the data and runs the
  backend's kernels;
- a fake kernel (``torch.library.register_fake``) giving the exact output shapes, all of
  which follow from the input shapes and the integer arguments (no data-dependent size).

Where rasfast._torch_ops was built (against this torch: csrc/torch_ops/), the CPU kernel of
the short per-question ops (select_k, theme_scope, scoped_dense_search, theme_scoped_search,
segment_topk_scores, segment_max_rank; :func:`native_ops` lists them) is C++: a registered call
on CPU tensors reaches the compiled kernel with no Python frame. That kernel serves ordinary
calls (backend "auto"/"cpu", valid arguments and values) and hands every other call to the
op's Python kernel, registered as ``rasfast::<op>_python`` with the same schema, so results
and error messages have one home. ``RASFAST_NATIVE_OPS=0`` in the environment (before
import) keeps the Python CPU kernels; :func:`native_ops` says which way this process went.

The API is ``torch.library.Library`` + ``define`` + ``impl`` rather than
``torch.library.custom_op``: custom_op costs about 20 us a call on the CPU (measured in
benchmarks/results/op_overhead.md), more than a per-question select takes.

The public functions (``rasfast/ops/*.py``) stay the thin outer layer: numpy in/out,
argument, dtype and shape checks (everything a fake tensor can answer). Then

- under tracing (``torch.compile``, ``torch.export``, fake tensors, see :func:`traced`)
  they call ``torch.ops.rasfast.<name>``, so the graph holds one opaque operator and no
  graph break; the operator's kernel does the data checks when the compiled graph runs;
- in eager mode, a call the C++ CPU kernel serves (:func:`native_call`: backend "auto" or
  "cpu" on CPU tensors) calls the operator too, since the C++ kernel is the fast way in;
- every other eager call runs the Python kernel function directly: a call through the
  dispatcher costs a few microseconds and hides the kernel's inner torch work from
  dispatch modes (rasfast.device_work counts it to hold each op to its budget).
Every way runs the same checks and the same compiled kernels, so the results and the errors
are the same (tests/test_native_ops.py compares the C++ and the Python kernels).
"""
from __future__ import annotations

import ctypes
import importlib
import os
from typing import Callable

import torch

from .._threads import follows_width_rule

NAMESPACE = "rasfast"

# FRAGMENT, not DEF: the namespace may be extended from several modules, and a re-import
# of a module (a reload in a test) must not fail on a second DEF of the namespace.
_LIB = torch.library.Library(NAMESPACE, "FRAGMENT")
_DEFINED: dict = {}

_register_fake = getattr(torch.library, "register_fake", None) or torch.library.impl_abstract


# ----------------------------------------------------------------------- C++ CPU kernels
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
    if lib.rasfast_torch_ops_attach(ctypes.c_void_p(cmod.cpu_entry_points())) != 0:
        # the kernels are registered but hand every call to the Python kernels
        return names, "rasfast._C's kernel table has another version than rasfast._torch_ops"
    _NATIVE_LIB.append(lib)  # keep the library (and its registrations) alive
    return names, None


_NATIVE_LIB: list = []


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


_HOST_BACKENDS = ("auto", "cpu")


def native_call(name: str, backend, *tensors) -> bool:
    """Whether an eager public op should call its registered operator because its C++ CPU
    kernel serves the call: backend "auto"/"cpu", every tensor a plain CPU tensor that needs
    no gradient (no autograd formula is registered for these ops)."""
    if backend not in _HOST_BACKENDS or not native(name):
        return False
    for t in tensors:
        if t is not None and (type(t) not in _PLAIN or t.device.type != "cpu" or t.requires_grad):
            return False
    return True


def define(schema: str, kernel: Callable, fake: Callable):
    """Defines ``rasfast::<name>`` by ``schema``; ``kernel`` serves the CPU and CUDA keys,
    ``fake`` gives the outputs' shapes. Returns the operator's default overload. Defining
    the same name again (a module reloaded) keeps the first definition.

    Where rasfast._torch_ops registered the op's CPU kernel (:func:`native_ops`), ``kernel``
    serves the CUDA key and, for the C++ kernel's hand-overs, ``rasfast::<name>_python``."""
    name = schema.split("(", 1)[0].strip()
    if name in _DEFINED:
        return _DEFINED[name]
    names, _ = native_ops()
    _LIB.define(schema)
    # the busy-machine width rule (rasfast/_threads.py) for the kernel's torch work, as the
    # eager public ops have it: a compiled graph runs the kernel without the public function
    kernel = follows_width_rule(kernel)
    if name in names:
        _LIB.impl(name, kernel, "CUDA")
        twin = f"{name}_python"
        _LIB.define(twin + schema[len(name):])
        for key in ("CPU", "CUDA"):
            _LIB.impl(twin, kernel, key)
        _register_fake(f"{NAMESPACE}::{twin}", fake, lib=_LIB)
    else:
        for key in ("CPU", "CUDA"):
            _LIB.impl(name, kernel, key)
    _register_fake(f"{NAMESPACE}::{name}", fake, lib=_LIB)
    op = getattr(getattr(torch.ops, NAMESPACE), name).default
    _DEFINED[name] = op
    return op


def compiling() -> bool:
    """True inside torch.compile / torch.export tracing (dynamo, or export's own tracer)."""
    if torch.compiler.is_compiling():
        return True
    exporting = getattr(torch.compiler, "is_exporting", None)
    return bool(exporting is not None and exporting())


_PLAIN = (torch.Tensor, torch.nn.Parameter)
_FAKE = getattr(getattr(torch._C, "_TorchDispatchModeKey", None), "FAKE", None)
_PROXY = getattr(getattr(torch._C, "_TorchDispatchModeKey", None), "PROXY", None)


def traced(*tensors) -> bool:
    """Whether a public op should call its registered operator instead of its kernel
    function: while compiling or exporting, when an input is not a plain tensor (a fake or
    functional tensor, a tensor subclass), or while a fake or proxy (make_fx) mode is on."""
    if compiling():
        return True
    for t in tensors:
        if t is not None and type(t) not in _PLAIN and isinstance(t, torch.Tensor):
            return True
    get = getattr(torch._C, "_get_dispatch_mode", None)
    if get is not None and _FAKE is not None:
        return get(_FAKE) is not None or get(_PROXY) is not None
    return False


def registered() -> list:
    """Names of the operators defined so far (``torch.ops.rasfast.<name>``)."""
    return sorted(_DEFINED)


__all__ = ["NAMESPACE", "define", "compiling", "traced", "registered", "native_ops", "native",
           "native_call"]
