"""Kernel offsets past 2^31 elements, checked on the CPU without allocating that much.

The Triton graph_conv kernel used to compute node offsets (i * W) in int32; they wrap once
N * W >= 2^31. Here the nodes are a strided view whose third row starts just past 2^31
elements, laid over a lazily mapped, never-touched address range (MAP_NORESERVE: only the
three rows' pages ever get memory), and the interpreted kernel must read the same rows as it
does from a compact copy. It runs in a subprocess: a wrapped offset reads unmapped memory and
crashes the interpreter, which must fail this test rather than kill the test session.
"""
import os
import subprocess
import sys
import textwrap

import pytest
import rasfast
from backends_util import TRITON

# the probe runs interpreted Triton, which old Triton versions cannot (dispatch says why)
_PROBLEM = rasfast.dispatch.triton_interpreter_problem() if TRITON else "needs the triton package"
pytestmark = pytest.mark.skipif(_PROBLEM is not None, reason=str(_PROBLEM))

PROBE = textwrap.dedent('''
    import mmap, resource, torch, rasfast
    MAP_NORESERVE = getattr(mmap, "MAP_NORESERVE", 0x4000)  # Linux value
    heads, ch = 2, 4
    width = 3 * heads * ch                # q, k, v of every head
    stride = (1 << 30) + 64               # node 2 starts at 2^31 + 128 elements
    n = 2 * stride + width
    rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    mm = mmap.mmap(-1, 2 * n, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS | MAP_NORESERVE)
    nodes = torch.frombuffer(mm, dtype=torch.float16, count=n).as_strided((3, width), (stride, 1))
    assert 2 * nodes.stride(0) >= 2 ** 31
    g = torch.Generator().manual_seed(0)
    nodes.copy_(torch.randn(3, width, generator=g).half())
    indptr = torch.tensor([0, 1, 3, 6])
    src = torch.tensor([2, 0, 2, 0, 1, 2])   # node 2 (past 2^31) is read by every node
    eid = torch.arange(6)
    attend = rasfast.dispatch.triton_kernels().graph_conv.attend
    got = attend(indptr, src, eid, nodes, None, heads, ch)
    want = attend(indptr, src, eid, nodes.contiguous(), None, heads, ch)
    assert torch.equal(got, want), (got, want)
    assert torch.isfinite(want).all() and want.abs().sum() > 0
    grew = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - rss0
    assert grew < 512 * 1024, f"the view cost {grew} KiB of real memory"
    print("OK")
''')


def test_triton_graph_conv_offsets_past_2_31_elements():
    env = dict(os.environ, TRITON_INTERPRET="1")
    r = subprocess.run([sys.executable, "-c", PROBE], env=env, capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0 and r.stdout.strip().endswith("OK"), (
        f"rc {r.returncode} (negative: killed by a signal, e.g. an int32 offset that wrapped "
        f"and read unmapped memory)\n{r.stdout[-2000:]}\n{r.stderr[-3000:]}")
