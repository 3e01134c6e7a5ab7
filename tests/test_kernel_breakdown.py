"""benchmarks/kernel_breakdown.py: the per-kernel time table the GPU benchmarks give for a
ratio's measured reason. On the CPU it profiles CPU ops (its CUDA mode needs a GPU run)."""
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
from kernel_breakdown import breakdown_markdown, kernel_breakdown  # noqa: E402


def test_the_largest_op_comes_first_and_counts_are_per_call():
    a, b = torch.randn(400, 400), torch.randn(400, 400)
    small = torch.randn(10)

    def fn():
        (a @ b).sum()
        small.add(1)
        small.add(2)
    rows, total = kernel_breakdown(fn, calls=4, activity="cpu")
    names = [r[0] for r in rows]
    assert names[0] == "aten::matmul", rows
    assert dict((n, c) for n, _, c in rows)["aten::add"] == 2  # launches per call, not in all
    assert total >= sum(t for _, t, _ in rows) - 1e-6 and total > 0
    md = "\n".join(breakdown_markdown("cpu ops", rows, total))
    assert "| `aten::matmul` |" in md and md.startswith("**cpu ops**")
