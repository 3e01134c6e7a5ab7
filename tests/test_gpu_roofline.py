"""The prepared roofline command (tools/gpu_session.sh roofline) works before a GPU is at hand:
without a device it runs benchmarks/gpu_roofline.py on the CUDA emulator, which must find
select_k exact on every case and write its report with every section."""
import os
import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
pytestmark = [pytest.mark.cuda_emu]


def test_roofline_command_runs_on_the_emulator(tmp_path):
    env = dict(os.environ, OUT=str(tmp_path), PY=sys.executable, RASFAST_CUDA_EMU="1")
    res = subprocess.run(["bash", str(ROOT / "tools" / "gpu_session.sh"), "roofline"], cwd=ROOT, env=env,
                         capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-2000:]
    md = (tmp_path / "gpu_roofline.md").read_text()
    for section in ("## Host synchronisations per call", "## select_k (cuda): parity and CUDA graph",
                    "## select_k timings", "## Nsight Compute"):
        assert section in md
    assert "Failures:" not in md
    # every op was called, none failed to run
    for op in ("select_k", "theme_scoped_search", "theme_scope", "triple_beam_search",
               "segment_topk_scores", "graph_transformer_pool"):
        assert f"| {op}" in md, op
    assert "| error |" not in md
    # select_k reads nothing back on the device path
    assert "| select_k (8 x 50k, k=100) | 0 |" in md
    assert "| segment_topk_scores validate='none' | 0 |" in md


def test_the_theme_benchmark_paths_run_on_the_emulator():
    """benchmarks/gpu_theme.py (the roofline's bench stage) needs a GPU as a whole; its
    paths() -- every cuda path at several B, the GEMM path's steps, the masked and sorted
    dense select, 4 and 8 warps -- runs here on small emulated inputs, so a broken step is
    found before a GPU session spends its minutes on it."""
    import time

    import torch
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import gpu_theme
    env = {"RASFAST_CUDA_EMU": "1"}
    old = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        g = torch.Generator().manual_seed(0)
        unit = lambda x: (x / x.norm(dim=1, keepdim=True)).to(torch.float16)  # noqa: E731
        c, e = unit(torch.rand(600, 30, generator=g)), unit(torch.randn(600, 16, generator=g))
        q, qe = unit(torch.rand(8, 30, generator=g)), unit(torch.randn(8, 16, generator=g))
        tm = {}

        def run(name, fn, repeats=1):
            t0 = time.perf_counter()
            out = fn()
            tm[name] = time.perf_counter() - t0
            return out
        res = gpu_theme.paths(q, qe, c, e, 60, 5, run, tm)
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    for name in ("dense products under the scope mask", "whole call, dense select by mask",
                 "whole call, dense select by sort", "dense products (split GEMM), 8 warps"):
        assert name in res["steps_s"], name
    rows = res["rows"]
    assert [r["B"] for r in rows] == [8, 4, 1]
    assert all(r.get("ids_agree") == 1.0 and "gemm_s" in r for r in rows), rows
