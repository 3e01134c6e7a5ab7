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
