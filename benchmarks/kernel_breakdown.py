"""Where a call's device time goes, kernel by kernel: torch.profiler's per-kernel durations
of a few calls, summed per kernel name, per call. The measured reason behind a GPU ratio
(issue 38: "every target met or the measured reason it is not"), without Nsight Compute.

    rows, total_us = kernel_breakdown(lambda: op(...), calls=5)
    lines = breakdown_markdown("rasfast cuda, bf16, 512 graphs", rows, total_us)

On a CPU-only machine ``activity="cpu"`` profiles the CPU ops instead (used by the tests).
"""
from __future__ import annotations

from collections import defaultdict

import torch


def kernel_breakdown(fn, calls: int = 5, top: int = 12, activity: str = "cuda"):
    """([(name, us per call, launches per call)] largest first, at most ``top``; total us per
    call of every kernel). One warm-up call runs first, outside the profile."""
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile
    cuda = activity == "cuda"
    fn()
    if cuda:
        torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA if cuda else ProfilerActivity.CPU]) as prof:
        for _ in range(calls):
            fn()
        if cuda:
            torch.cuda.synchronize()
    want = DeviceType.CUDA if cuda else DeviceType.CPU
    us, count = defaultdict(float), defaultdict(int)
    for e in prof.events():
        if e.device_type != want or (not cuda and e.cpu_parent is not None):
            continue  # on the CPU, top-level ops only (children's time is inside theirs)
        us[e.name] += e.time_range.elapsed_us()
        count[e.name] += 1
    total = sum(us.values()) / calls
    rows = sorted(((n, t / calls, count[n] / calls) for n, t in us.items()), key=lambda r: -r[1])
    return rows[:top], total


def breakdown_markdown(title: str, rows, total_us: float) -> list:
    """A markdown table of kernel_breakdown's rows: name (cut to 80 characters), us per call,
    share of the call's kernel time, launches per call."""
    out = [f"**{title}**: {total_us:,.0f} us of kernels a call", "",
           "| kernel | us a call | share | launches |", "|---|---:|---:|---:|"]
    for name, t, n in rows:
        short = name.replace("|", "/")
        short = short if len(short) <= 80 else short[:77] + "..."
        out.append(f"| `{short}` | {t:,.1f} | {100 * t / total_us if total_us else 0:.0f}% | {n:g} |")
    return out + [""]
