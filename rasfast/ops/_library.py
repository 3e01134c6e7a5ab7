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

from typing import Callable

import torch

from .._native import (attach_cuda, library_path, native, native_cuda_ops,  # noqa: F401
                       native_ops)
from .._threads import follows_width_rule

NAMESPACE = "rasfast"

# FRAGMENT, not DEF: the namespace may be extended from several modules, and a re-import
# of a module (a reload in a test) must not fail on a second DEF of the namespace.
_LIB = torch.library.Library(NAMESPACE, "FRAGMENT")
_DEFINED: dict = {}

_register_fake = getattr(torch.library, "register_fake", None) or torch.library.impl_abstract


# ----------------------------------------------------------------------- C++ CPU kernels
# rasfast._torch_ops is found and loaded by rasfast/_native.py (foundation layer, so that
# rasfast.backends() can report it too).
_HOST_BACKENDS = ("auto", "cpu")


def native_call(name: str, backend, *tensors) -> bool:
    """Whether an eager public op should call its registered operator because a C++ kernel
    serves the call (no Python frame between the call and the kernel's launch):
    - the CPU one: backend "auto"/"cpu", every tensor a plain CPU tensor;
    - the CUDA one (:func:`native_cuda_ops`): backend "auto"/"cuda" on plain CUDA tensors with
      rasfast._cuda usable, or backend "cuda" on CPU tensors under the emulator
      (RASFAST_CUDA_EMU), whose kernel table it then launches from.
    No tensor may need a gradient (no autograd formula is registered for these ops)."""
    if backend in _HOST_BACKENDS and native(name) and _plain_on(tensors, "cpu"):
        return True
    if backend in _DEVICE_BACKENDS and name in native_cuda_ops():
        return _cuda_serves(backend, tensors)
    return False


_DEVICE_BACKENDS = ("auto", "cuda")


def _plain_on(tensors, device_type: str) -> bool:
    for t in tensors:
        if t is not None and (type(t) not in _PLAIN or t.device.type != device_type or t.requires_grad):
            return False
    return True


# device type -> the CUDA module (or the emulator's) whose kernel table served a plain call
# there: later calls with the same module loaded skip the checks below. The sixth H100
# session's cProfile of select_k put half of the call's Python time in them (module lookups,
# a device check, the table hand-over: 3.0 us of an 8.4 us emulated call on Zen 5).
_SERVED: dict = {}


def _cuda_serves(backend: str, tensors) -> bool:
    """The C++ CUDA kernel serves these tensors: it has the CUDA module's table (handed over
    here on the first such call). Every other case runs the Python kernel, which raises
    what the call deserves (no device, the emulator's CPU-only rule, ...)."""
    from .. import dispatch as _bk  # dispatch sits below ops; imported late, it imports this
    first = next((t for t in tensors if t is not None), None)
    if first is None:
        return False
    dev, emulated = first.device.type, _bk.cuda_emulated()
    if dev == "cuda" and emulated or dev == "cpu" and not (emulated and backend == "cuda") \
            or dev not in ("cuda", "cpu") or not _plain_on(tensors, dev):
        return False
    served = _SERVED.get(dev)
    if served is not None and served is _bk.cuda_module_loaded():
        return True
    try:
        mod = _bk.cuda_module()
    except _bk.BackendUnavailable:
        return False
    if not emulated and _bk.cuda_unusable_reason() is not None:
        return False
    if not attach_cuda(mod):
        return False
    _SERVED[dev] = mod
    return True


def define(schema: str, kernel: Callable, fake: Callable):
    """Defines ``rasfast::<name>`` by ``schema``; ``kernel`` serves the CPU and CUDA keys,
    ``fake`` gives the outputs' shapes. Returns the operator's default overload. Defining
    the same name again (a module reloaded) keeps the first definition.

    Where rasfast._torch_ops registered the op's CPU kernel (:func:`native_ops`) or its CUDA
    kernel (:func:`native_cuda_ops`), ``kernel`` serves the other key and, for the C++
    kernels' hand-overs, ``rasfast::<name>_python``."""
    name = schema.split("(", 1)[0].strip()
    if name in _DEFINED:
        return _DEFINED[name]
    names, _ = native_ops()
    cuda_names = native_cuda_ops()
    _LIB.define(schema)
    # the busy-machine width rule (rasfast/_threads.py) for the kernel's torch work, as the
    # eager public ops have it: a compiled graph runs the kernel without the public function
    kernel = follows_width_rule(kernel)
    if name in names or name in cuda_names:
        # the keys rasfast._torch_ops did not take; the C++ kernels hand over to the twin
        for key, native_key in (("CPU", name in names), ("CUDA", name in cuda_names)):
            if not native_key:
                _LIB.impl(name, kernel, key)
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
           "native_cuda_ops", "native_call"]
