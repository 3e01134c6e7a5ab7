"""The emulator's dry run and device-time counter (csrc/emu/runtime: set_dry_run, device_ns),
which benchmarks/host_time_emu.py uses to time a cuda op's host path without a GPU."""
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import rasfast

from conftest import EMULATED

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.cuda_emu
@pytest.mark.skipif(not EMULATED, reason="needs RASFAST_CUDA_EMU=1")
def test_dry_run_counts_launches_but_runs_nothing():
    mod = rasfast.dispatch.cuda_module()
    x = torch.randn(6, 3000)
    ref_vals, ref_idx = rasfast.select_k(x, 1000, backend="torch")
    out, vals = torch.full((6, 1000), -7, dtype=torch.int64), torch.zeros(6, 1000)
    nbytes = mod.select_k_workspace_bytes(0, 6, 3000, 1000, True)
    ws = torch.empty(nbytes, dtype=torch.uint8)

    def launch():
        mod.select_k(x.data_ptr(), 0, 6, 3000, 1000, False, True, out.data_ptr(), vals.data_ptr(),
                     ws.data_ptr(), nbytes, 0)

    before = mod.emu_counters()
    mod.emu_set_dry_run(True)
    try:
        launch()
    finally:
        mod.emu_set_dry_run(False)
    mid = mod.emu_counters()
    assert mid["launches"] > before["launches"]          # counted ...
    assert mid["device_ns"] - before["device_ns"] < 1e6  # ... (device time: none to speak of)
    assert (out == -7).all()                             # ... not run
    launch()
    after = mod.emu_counters()
    assert after["launches"] - mid["launches"] == mid["launches"] - before["launches"]
    assert after["device_ns"] > mid["device_ns"]         # a real run takes device time
    assert torch.equal(out, ref_idx) and torch.equal(vals, ref_vals)


def test_host_time_benchmark_runs():
    """benchmarks/host_time_emu.py --quick (its own process: it patches the width rule)."""
    env = dict(os.environ, RASFAST_CUDA_EMU="1")
    res = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "host_time_emu.py"), "--quick"],
                         cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stderr[-2000:]
    lines = [ln for ln in res.stdout.splitlines() if " us (min " in ln]
    assert len(lines) == 23, res.stdout
    # a per-question call replayed from a CUDA graph: its host side launches fewer (on the
    # emulator a host batch's own torch steps count too: its tensors are CPU tensors)
    for what in ("GraphEncoder", "ThemeIndex.search"):
        replay = next(ln for ln in lines if ln.startswith(what) and "replay: host side" in ln)
        eager = next(ln for ln in lines if ln.startswith(what) and ", eager " in ln)
        assert int(replay.split("launches ")[1].split()[0]) < int(eager.split("launches ")[1].split()[0]), (replay, eager)
    assert any("host arrays" in ln for ln in lines), res.stdout  # beam search's host-seed path
    # short rows at 2,048 < k: one launch, against the radix passes' several (select off)
    one = next(ln for ln in lines if "k = 3000 (C++ CUDA kernel)" in ln)
    off = next(ln for ln in lines if "k = 3000, short-row select off" in ln)
    assert "launches 1 " in one and "launches 1 " not in off, res.stdout
    # each op with a C++ CUDA kernel is timed both ways in the same run
    for op in ("select_k", "segment_topk_scores", "segment_max_rank"):
        assert any(ln.startswith(op) and "C++ CUDA kernel" in ln for ln in lines), (op, res.stdout)
        assert any(ln.startswith(op) and "Python kernel" in ln for ln in lines), (op, res.stdout)


def test_launch_shapes_benchmark_runs():
    """benchmarks/launch_shapes_emu.py --quick: every op's launch table, the per-question
    theme gather spread over blocks (its 200 scope rows at the 64-row minimum: 4 blocks,
    where 4,096 rows a block made one)."""
    env = dict(os.environ, RASFAST_CUDA_EMU="1")
    env.pop("CUEMU_SMS", None)
    res = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "launch_shapes_emu.py"), "--quick"],
                         cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stderr[-2000:]
    sections = res.stdout.split("## ")[1:]
    assert len(sections) == 9, res.stdout
    per_question = next(s for s in sections if s.startswith("theme_scoped_search per question"))
    row = next(ln for ln in per_question.splitlines() if "gather_score_kernel" in ln)
    assert int(row.split("|")[2]) == 4, row
    assert all("| kernel | blocks |" in s for s in sections)
