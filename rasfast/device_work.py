"""What one op call asks of the device: launches, host round trips, allocations, passes.

A GPU op is slow for reasons a CPU test can see: every kernel launch and every torch op on
device tensors is a launch; every read of a device value on the host (``.item()``,
``bool(t)``, ``.tolist()``, ``.cpu()``, an op whose output size depends on the data such as
``nonzero`` or ``unique``) stalls the host until the device has caught up; every allocation
outside torch's caching allocator is a driver call; every op that reads the corpus only to
validate it is a full pass over gigabytes. :func:`count_device_work` counts all of these
during a block of code, on the CPU, so ``make test`` can hold each public op to a budget
(DESIGN.md s.11) without a GPU:

- the CUDA kernels run on the emulator (``RASFAST_CUDA_EMU=1``), which counts kernel
  launches, memsets, device-to-host copies, synchronisations and allocations
  (``rasfast._cuda_emu.emu_counters``);
- a torch dispatch mode counts the torch ops the Python layer runs (each one a launch on a
  GPU), the host reads among them, and the ops that read a *watched* tensor (the corpus);
- a torch function mode counts the host reads that never reach the dispatcher on a CPU
  tensor (``.tolist()``, ``.numpy()``, ``bool(t)``, ``int(t)``, ``.cpu()``, ``.item()``).

On the emulator every tensor is a CPU tensor, so *any* read of a tensor's value on the host
counts: the ops keep their host-side bookkeeping in Python numbers and numpy arrays, and read
nothing back from torch tensors unless the output's size depends on the data. On a real GPU,
``torch.cuda.set_sync_debug_mode`` checks the same (``tests/test_device_work.py``).

    with count_device_work(watch=[corpus]) as work:
        rasfast.select_k(x, 10, backend="cuda")
    assert work.syncs == 0 and work.allocs == 0
"""
from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from typing import Dict, Iterable, Iterator, List, Optional

import torch
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode

# aten ops that read a device value on the host, or whose output size depends on the data
# (the caller must learn it before it can allocate the output): a synchronisation on a GPU.
_SYNC_OPS = {
    "_local_scalar_dense", "nonzero", "nonzero_static", "unique", "_unique", "_unique2",
    "unique_dim", "unique_consecutive", "masked_select", "argwhere", "equal", "is_nonzero",
    "_assert_async",
}
# aten ops that launch nothing on a GPU: views, metadata and allocation without a fill.
_FREE_OPS = {
    "view", "_unsafe_view", "reshape", "as_strided", "t", "transpose", "permute", "expand",
    "slice", "select", "unsqueeze", "squeeze", "detach", "alias", "lift_fresh", "unbind",
    "split", "split_with_sizes", "chunk", "narrow", "view_as_real", "view_as_complex",
    "empty", "empty_strided", "empty_like", "new_empty", "new_empty_strided", "resize_",
    "set_", "_reshape_alias", "diagonal", "movedim", "flatten", "unflatten", "_to_copy_noop",
    "numel", "sym_size", "sym_stride", "sym_numel", "sym_storage_offset", "is_same_size",
}
# Tensor methods that read a value on the host without dispatching an aten op on CPU tensors.
_HOST_READ_METHODS = {"tolist", "numpy", "item", "__bool__", "__int__", "__float__", "__index__",
                      "cpu", "__array__"}


@dataclass
class DeviceWork:
    """Counts of one block of code (see the module's docstring)."""

    kernels: int = 0         # CUDA kernel launches (emulator)
    memsets: int = 0         # cudaMemset(Async) (emulator)
    torch_ops: int = 0       # torch ops that would launch work on a GPU
    syncs: int = 0           # host reads of device values, blocking copies, device syncs
    allocs: int = 0          # allocations outside torch's caching allocator (emulator)
    watched_reads: int = 0   # torch ops that read a watched tensor (e.g. a validation pass)
    device_ns: int = 0       # wall time the emulator spent running the device work above
    sync_sites: List[str] = field(default_factory=list)   # what synchronised, in order
    watched_ops: Dict[str, int] = field(default_factory=dict)  # the ops of watched_reads
    op_names: Dict[str, int] = field(default_factory=dict)
    # each emulated kernel launch's shape (kernel, site, blocks, threads, dynamic_smem), in
    # order: how much of a GPU a launch can occupy (rasfast.device_work.launch_table)
    kernel_log: List[dict] = field(default_factory=list)

    @property
    def launches(self) -> int:
        """Everything the device is asked to run: kernels, memsets and torch ops."""
        return self.kernels + self.memsets + self.torch_ops

    def summary(self) -> str:
        return (f"launches {self.launches} (kernels {self.kernels}, memsets {self.memsets}, "
                f"torch ops {self.torch_ops}), syncs {self.syncs} {self.sync_sites}, "
                f"allocs {self.allocs}, watched reads {self.watched_reads}")


def _storage_key(t: torch.Tensor) -> Optional[int]:
    try:
        return t.untyped_storage().data_ptr()
    except Exception:  # a tensor without storage (meta, functional wrappers)
        return None


class _Dispatch(TorchDispatchMode):
    def __init__(self, work: DeviceWork, watched: set, host_reads: "_Function"):
        super().__init__()
        self.work, self.watched, self.host_reads = work, watched, host_reads

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func._schema.name.startswith("rasfast::"):
            # a rasfast operator called by a public op (its C++ kernel): what it launches is
            # counted by the emulator; it is not itself a torch launch
            return func(*args, **kwargs)
        name = func._schema.name.split("::")[-1]
        w = self.work
        if name in _SYNC_OPS and not self.host_reads.reading:  # counted once, as the method
            w.syncs += 1
            w.sync_sites.append(name)
        if name not in _FREE_OPS:
            w.torch_ops += 1
            w.op_names[name] = w.op_names.get(name, 0) + 1
            if self.watched:
                flat = list(args) + list(kwargs.values())
                for a in flat:
                    items = a if isinstance(a, (list, tuple)) else (a,)
                    if any(isinstance(t, torch.Tensor) and _storage_key(t) in self.watched for t in items):
                        w.watched_reads += 1
                        w.watched_ops[name] = w.watched_ops.get(name, 0) + 1
                        break
        return func(*args, **kwargs)


class _Function(TorchFunctionMode):
    def __init__(self, work: DeviceWork):
        super().__init__()
        self.work = work
        self.depth = 0
        self.reading = False  # inside a counted host-read method

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = getattr(func, "__name__", "")
        read = self.depth == 0 and (name in _HOST_READ_METHODS or
                                    (name == "to" and _to_host(args, kwargs)))
        if read:
            self.work.syncs += 1
            self.work.sync_sites.append(f"Tensor.{name}")
        self.depth += 1
        outer, self.reading = self.reading, self.reading or read
        try:
            return func(*args, **kwargs)
        finally:
            self.depth -= 1
            self.reading = outer


def _to_host(args, kwargs) -> bool:
    """Tensor.to(...) naming the CPU (on the emulator the source is a CPU tensor too, so any
    explicit move to the CPU stands for a device-to-host copy)."""
    for a in list(args[1:]) + list(kwargs.values()):
        if isinstance(a, (str, torch.device)) and torch.device(a).type == "cpu":
            return True
    return False


def _emulator():
    from . import dispatch
    if not dispatch.cuda_emulated():
        return None
    mod, _ = dispatch._cuda_import()
    return mod if mod is not None and hasattr(mod, "emu_counters") else None


@contextlib.contextmanager
def count_device_work(watch: Iterable[torch.Tensor] = ()) -> Iterator[DeviceWork]:
    """Counts what the code in the block asks of the device (module docstring). ``watch``:
    tensors (the corpus) whose every read by a torch op is counted in ``watched_reads``;
    kernel launches that read them are not (they are the op's work)."""
    work = DeviceWork()
    watched = {k for k in (_storage_key(t) for t in watch) if k is not None}
    emu = _emulator()
    before = emu.emu_counters() if emu is not None else None
    logging = emu is not None and hasattr(emu, "emu_set_launch_log")
    if logging:
        emu.emu_set_launch_log(True)
    fmode = _Function(work)
    dmode = _Dispatch(work, watched, fmode)
    try:
        with fmode, dmode:
            yield work
    finally:
        if logging:
            work.kernel_log = list(emu.emu_take_launch_log())
            emu.emu_set_launch_log(False)
    if emu is not None:
        after = emu.emu_counters()
        d = {k: after[k] - before[k] for k in after}
        work.kernels += d["launches"]
        work.memsets += d["memsets"]
        work.allocs += d["allocs"]
        work.device_ns += d.get("device_ns", 0)
        if d["syncs"]:
            work.syncs += d["syncs"]
            work.sync_sites.append(f"cuda runtime x{d['syncs']}")


def launch_table(work: DeviceWork, sms: int = 132) -> str:
    """A markdown table of the emulated launches of ``work``: blocks, threads, and the share of
    a GPU of ``sms`` SMs the grid can keep busy at one block per SM (a grid below the SM count
    leaves the rest idle; a per-question call's kernels are often such grids)."""
    lines = ["| kernel | blocks | threads | dynamic smem | grid / SMs |", "|---|---:|---:|---:|---:|"]
    for r in work.kernel_log:
        name = r["kernel"].split("<")[0].strip()
        share = "-" if not r["blocks"] else f"{min(1.0, r['blocks'] / sms):.0%}"
        lines.append(f"| `{name}` | {r['blocks'] or '-'} | {r['threads'] or '-'} | "
                     f"{r['dynamic_smem']} | {share} |")
    return "\n".join(lines)
