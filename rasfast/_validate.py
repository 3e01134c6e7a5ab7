"""Input validation shared by every op.

Every public entry point validates before dispatching, so all backends see the same,
well-formed input and bad input fails with a ValueError/TypeError that names the
argument and says what was expected -- never a crash inside a kernel.
"""
from __future__ import annotations

import argparse
import math
import numbers
from typing import Callable, Iterable, Optional, Sequence

import numpy as np
import torch

from . import _env
from ._arrays import FLOAT_DTYPES

_DTYPE_NAMES = "float32, float16 or bfloat16"


def check_float(t: torch.Tensor, name: str, dtypes: Sequence[torch.dtype] = FLOAT_DTYPES) -> None:
    if t.dtype not in dtypes:
        allowed = ", ".join(str(d).replace("torch.", "") for d in dtypes)
        raise TypeError(f"{name}: unsupported dtype {str(t.dtype).replace('torch.', '')}; expected {allowed}")


def check_int(t: torch.Tensor, name: str) -> None:
    if t.dtype not in (torch.int32, torch.int64):
        raise TypeError(f"{name}: expected an int32 or int64 array, got {str(t.dtype).replace('torch.', '')}")


def check_rank(t: torch.Tensor, name: str, ndim: int, layout: str = "") -> None:
    if t.dim() != ndim:
        what = f" {layout}" if layout else ""
        raise ValueError(f"{name}: expected a {ndim}-d array{what}, got shape {tuple(t.shape)}")


def check_dim(t: torch.Tensor, name: str, dim: int, size: int, what: str) -> None:
    if t.shape[dim] != size:
        raise ValueError(f"{name}: dim {dim} must equal {what} ({size}), got shape {tuple(t.shape)}")


_NUMPY_ELEMS = 1 << 16
_NUMPY_DTYPES = (torch.float32, torch.float64, torch.float16)


def check_finite(t: torch.Tensor, name: str, allow_inf: bool = False,
                 chunk_elems: int = 1 << 22) -> None:
    """NaN is always rejected (it has no place in an ordering); +-inf only if not allowed.

    CPU tensors are checked in chunks of ``chunk_elems`` so a large corpus (1M x 298) costs a
    few MB of scratch instead of a full-size boolean mask. GPU tensors get one reduction
    (:func:`nonfinite_flag`) and one host synchronisation per call, whatever their size.
    """
    if t.numel() == 0:
        return
    if t.device.type != "cpu":
        if bool(nonfinite_flag(t, allow_inf)):  # the only host sync
            raise ValueError(f"{name}: contains NaN" if allow_inf
                             else f"{name}: contains NaN or infinite values")
        return
    flat = t.reshape(-1) if t.is_contiguous() else t.contiguous().reshape(-1)
    if flat.numel() <= _NUMPY_ELEMS and flat.dtype in _NUMPY_DTYPES:
        # a per-question array (a few queries): numpy's min/max (which propagate NaN; an inf is
        # the min or the max) cost ~2 us where torch's isfinite + all cost ~25 us on the CPU
        a = flat.detach().numpy()
        lo, hi = a.min(), a.max()
        if np.isnan(lo) or np.isnan(hi):
            raise ValueError(f"{name}: contains NaN" if allow_inf
                             else f"{name}: contains NaN or infinite values")
        if not allow_inf and not (np.isfinite(lo) and np.isfinite(hi)):
            raise ValueError(f"{name}: contains NaN or infinite values")
        return
    for start in range(0, flat.numel(), chunk_elems):
        part = flat[start:start + chunk_elems]
        if allow_inf:
            if torch.isnan(part).any():
                raise ValueError(f"{name}: contains NaN")
        elif not torch.isfinite(part).all():
            raise ValueError(f"{name}: contains NaN or infinite values")


def nonfinite_flag(t: torch.Tensor, allow_inf: bool = False) -> torch.Tensor:
    """0-d bool tensor on t's device: t holds NaN (or, unless allow_inf, +-inf).

    One min/max reduction over t in any layout (no copy, no mask the size of t; min and max
    propagate NaN, and any inf is the min or the max), and no host synchronisation.
    """
    lo, hi = torch.aminmax(t)
    if allow_inf:
        return torch.isnan(lo) | torch.isnan(hi)
    return ~(torch.isfinite(lo) & torch.isfinite(hi))


def check_all_finite(**tensors: torch.Tensor) -> None:
    """check_finite of several arrays; on a GPU with one host synchronisation for all of them
    (more only to name the culprit once one is bad)."""
    gpu = {n: t for n, t in tensors.items() if t.device.type != "cpu" and t.numel()}
    if len(gpu) > 1:
        flags = torch.stack([nonfinite_flag(t) for t in gpu.values()])
        if not bool(flags.any()):
            tensors = {n: t for n, t in tensors.items() if n not in gpu}
    for name, t in tensors.items():
        check_finite(t, name)


_NUMPY_FLOATS = (torch.float32, torch.float64, torch.float16)


def check_finite_together(tensors, extra: Sequence[torch.Tensor] = ()) -> list:
    """check_finite of several arrays (a search's query matrices) with ONE host read for all
    of them on any device: one min/max reduction per array (min and max propagate NaN, and
    any inf is the min or the max), the minima, maxima and the 0-d tensors of ``extra``
    (e.g. an id range's bounds) stacked into one float64 vector, read together and judged
    on the host. The culprit is named from that same read.

    ``tensors``: a mapping name -> tensor (empty tensors are skipped). Raises ValueError
    "<name>: contains NaN or infinite values" for the first bad one; returns the values of
    ``extra`` as Python ints (exact below 2**53). Nothing to check and no extra: no read.
    """
    named = [(n, t) for n, t in tensors.items() if t is not None and t.numel()]
    if (not extra and all(t.device.type == "cpu" and t.dtype in _NUMPY_FLOATS for _, t in named)
            and not _env.flag("RASFAST_CUDA_EMU")):
        # host arrays (a per-question search's queries): numpy's isfinite, no torch reductions,
        # stack and conversions. Not on the CUDA emulator, whose CPU tensors stand for device
        # tensors (its counters hold the one-read contract above)
        for name, t in named:
            if not np.isfinite(t.detach().numpy()).all():
                raise ValueError(f"{name}: contains NaN or infinite values")
        return []
    vals = [m for _, t in named for m in torch.aminmax(t)] + list(extra)
    if not vals:
        return []
    # one device for the stack: a GPU one if any (moving a CPU value there is no sync)
    dev = next((v.device for v in vals if v.device.type != "cpu"), vals[0].device)
    read = torch.stack([(v if v.device == dev else v.to(dev)).reshape(()).to(torch.float64)
                        for v in vals]).tolist()  # the one host read
    for i, (name, _) in enumerate(named):
        if not (math.isfinite(read[2 * i]) and math.isfinite(read[2 * i + 1])):
            raise ValueError(f"{name}: contains NaN or infinite values")
    return [int(x) for x in read[2 * len(named):]]


def check_same_device(**tensors: torch.Tensor) -> torch.device:
    ts = iter(tensors.values())
    dev = next(ts).device
    for t in ts:   # the common case, one device, without building the listing (a per-question op's µs)
        if t.device != dev:
            listing = ", ".join(f"{n} on {x.device}" for n, x in tensors.items())
            raise ValueError(f"arrays must be on one device, got {listing}")
    return dev


def check_same_dtype(**tensors: torch.Tensor) -> torch.dtype:
    dts = {n: t.dtype for n, t in tensors.items()}
    if len(set(dts.values())) > 1:
        listing = ", ".join(f"{n}: {str(d).replace('torch.', '')}" for n, d in dts.items())
        raise TypeError(f"arrays must share one dtype, got {listing}")
    return next(iter(dts.values()))


def check_int_arg(value, name: str, lo: Optional[int] = None, hi: Optional[int] = None,
                  hi_what: str = "") -> int:
    """An integer argument (bool rejected) within [lo, hi]; returns it as int."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name}: expected an int, got {type(value).__name__}")
    value = int(value)
    if lo is not None and value < lo:
        raise ValueError(f"{name}: must be >= {lo}, got {value}")
    if hi is not None and value > hi:
        bound = f"{hi_what} ({hi})" if hi_what else str(hi)
        raise ValueError(f"{name}: must be <= {bound}, got {value}")
    return value


def check_bool_arg(value, name: str) -> bool:
    if not isinstance(value, bool):
        raise TypeError(f"{name}: expected a bool, got {type(value).__name__}")
    return value


def check_choice(value, name: str, choices: Iterable[str]) -> str:
    choices = tuple(choices)
    if value not in choices:
        raise ValueError(f"{name}: expected one of {', '.join(map(repr, choices))}, got {value!r}")
    return value


def check_questions(questions, name: str = "questions") -> list:
    """A list of question strings from any sequence of str; a single str is a TypeError
    (``run_batch("q")`` would otherwise answer each character), an empty or blank question a
    ValueError (a system would answer it anyway)."""
    if isinstance(questions, (str, bytes)):
        raise TypeError(f"{name}: expected a sequence of strings, got a single "
                        f"{type(questions).__name__} (use run())")
    questions = list(questions)
    for i, q in enumerate(questions):
        if not isinstance(q, str):
            raise TypeError(f"{name}[{i}]: expected str, got {type(q).__name__}")
        if not q.strip():
            raise ValueError(f"{name}[{i}]: empty; a question needs some text")
    return questions


# -- argparse types (the command line's numbers; rasfast.cli and rasfast.qa_eval use them) --
def int_at_least(low: int) -> Callable[[str], int]:
    """An argparse type: an int >= ``low``."""
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected an integer >= {low}, got {text!r}") from None
        if value < low:
            raise argparse.ArgumentTypeError(f"expected an integer >= {low}, got {value}")
        return value
    parse.__name__ = f"int >= {low}"   # what argparse names in "invalid <type> value"
    return parse


positive_int = int_at_least(1)
