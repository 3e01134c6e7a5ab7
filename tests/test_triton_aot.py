"""CI gate: every Triton kernel variant the dispatch can launch compiles for sm_80 and sm_90.

No GPU is needed: tests/triton_aot_gate.py compiles each variant listed by the kernel
modules' ``aot_variants()`` with ``triton.compile(..., target=GPUTarget("cuda", arch, 32))``
in a subprocess (the interpreter, which conftest.py turns on, never compiles) with a fresh
Triton cache, so ptxas runs and reports registers and spills. The table is printed (see it
with ``pytest -s``); the test fails on a compile error, on shared memory beyond the target's
limit, and on a @triton.jit kernel that no variant covers.
"""
import json
import os
import pathlib
import subprocess
import sys
import textwrap

import pytest
from backends_util import TRITON

pytestmark = pytest.mark.skipif(not TRITON, reason="needs the triton package "
                                "(test_build.py fails when it is missing)")

GATE = pathlib.Path(__file__).with_name("triton_aot_gate.py")
MODULES = {"select", "theme", "graph_conv", "beam"}


def run_gate(tmp_path, *args, pythonpath=None):
    out = tmp_path / "aot.json"
    env = dict(os.environ)
    env.pop("TRITON_INTERPRET", None)
    env["TRITON_CACHE_DIR"] = str(tmp_path / "triton-cache")
    if pythonpath:
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(pythonpath), env.get("PYTHONPATH")]))
    r = subprocess.run([sys.executable, str(GATE), "--json", str(out), *args], env=env,
                       capture_output=True, text=True, timeout=900)
    assert out.exists(), f"the gate wrote no report (rc {r.returncode}):\n{r.stderr[-4000:]}"
    return r, json.loads(out.read_text())


@pytest.mark.slow
def test_every_triton_kernel_compiles_for_sm80_and_sm90(tmp_path):
    r, report = run_gate(tmp_path)
    print("\n" + r.stdout)
    bad = [f"{x['variant']} sm_{x['arch']}: {x['error']}" for x in report["results"] if not x["ok"]]
    assert not report["problems"], report["problems"]
    assert not bad, "\n".join(bad)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    res = report["results"]
    assert {x["module"] for x in res} >= MODULES
    for m in MODULES:
        assert {x["arch"] for x in res if x["module"] == m} == {80, 90}
    # ptxas ran for every variant (a cached compile would hide its registers)
    assert all(x["regs"] for x in res), [x["variant"] for x in res if not x["regs"]]
    assert all(x["spill_stores"] is not None for x in res)


def test_theme_cut_kernel_compiles_for_a_gpu(tmp_path):
    """Regression (fast, not marked slow): _cut_kernel reassigned tl.constexpr names inside
    tl.static_range, which only a real compile rejects; the interpreter never noticed."""
    r, report = run_gate(tmp_path, "--only", "theme", "--kernel", "_cut_kernel", "--arch", "90")
    assert r.returncode == 0, r.stdout[-3000:]
    assert {(x["variant"], x["arch"]) for x in report["results"]} == {
        ("_cut_kernel[BLOCK=256]", 90), ("_cut_kernel[K=1,BLOCK=256]", 90)}


BROKEN = '''
import triton
import triton.language as tl


@triton.jit
def _reassign_kernel(x_ptr, BLOCK: tl.constexpr):
    # the bug _cut_kernel had: a tl.constexpr name reassigned inside tl.static_range
    for p in tl.static_range(2):
        shift: tl.constexpr = 4 * p
        tl.store(x_ptr + tl.arange(0, BLOCK), tl.arange(0, BLOCK) >> shift)


@triton.jit
def _huge_smem_kernel(a_ptr, b_ptr, c_ptr, K, BM: tl.constexpr, BN: tl.constexpr,
                      BK: tl.constexpr):
    rm = tl.arange(0, BM)
    rn = tl.arange(0, BN)
    rk = tl.arange(0, BK)
    acc = tl.zeros([BM, BN], dtype=tl.float32)
    for k in range(0, K, BK):
        a = tl.load(a_ptr + rm[:, None] * K + (k + rk)[None, :])
        b = tl.load(b_ptr + (k + rk)[:, None] * BN + rn[None, :])
        acc = tl.dot(a, b, acc)
    tl.store(c_ptr + rm[:, None] * BN + rn[None, :], acc)


@triton.jit
def _forgotten_kernel(x_ptr):
    tl.store(x_ptr, 1.0)


def aot_variants():
    from rasfast.kernels._aot import variant
    return [variant(_reassign_kernel, dict(x_ptr="*i32"), BLOCK=64),
            variant(_huge_smem_kernel, dict(a_ptr="*fp32", b_ptr="*fp32", c_ptr="*fp32",
                                            K="i32"), BM=128, BN=128, BK=128)]
'''


def test_gate_fails_on_broken_kernels(tmp_path):
    """The gate itself can fail: a compile error, too much shared memory, an unlisted kernel."""
    (tmp_path / "aot_broken_kernels.py").write_text(textwrap.dedent(BROKEN))
    r, report = run_gate(tmp_path, "--only", "aot_broken_kernels", "--module",
                         "aot_broken_kernels", pythonpath=tmp_path)
    assert r.returncode == 1
    by = {(x["variant"].split("[")[0], x["arch"]): x for x in report["results"]}
    for arch in (80, 90):
        assert not by[("_reassign_kernel", arch)]["ok"]
        assert "constexpr cannot be reassigned" in by[("_reassign_kernel", arch)]["error"]
        huge = by[("_huge_smem_kernel", arch)]
        assert not huge["ok"] and f"exceeds the sm_{arch} limit" in huge["error"], huge
    assert any("_forgotten_kernel" in p for p in report["problems"])
    assert "FAIL" in r.stdout and "NOT COVERED" in r.stdout


# --------------------------------------------------------------------------- lists vs launches
_PTR_DTYPES = {"*fp32": "torch.float32", "*fp16": "torch.float16", "*bf16": "torch.bfloat16",
               "*i64": "torch.int64", "*i32": "torch.int32"}


def _launches(monkeypatch):
    """Record every interpreted launch: (module, kernel, constexpr values, pointer dtypes)."""
    import torch
    from triton.runtime.interpreter import GridExecutor
    seen = []
    real = GridExecutor.__call__

    def spy(self, *args, **kwargs):
        bound = dict(zip(self.arg_names, args), **kwargs)
        seen.append((self.fn.__module__, self.fn.__name__,
                     {n: bound[n] for n in self.constexprs if n in bound},
                     {n: str(v.dtype) for n, v in bound.items() if isinstance(v, torch.Tensor)}))
        return real(self, *args, **kwargs)

    monkeypatch.setattr(GridExecutor, "__call__", spy)
    return seen


def _listed(mod, kernel, consts, ptrs):
    """Does some aot_variants() entry of ``mod`` cover this launch?"""
    size_names = getattr(mod, "AOT_SIZE_CONSTEXPRS", {}).get(kernel, ())
    variants = [v for v in mod.aot_variants() if v.kernel.__name__ == kernel]
    for name in size_names:  # a shape-following block size: within the listed range
        listed = [v.constexprs[name] for v in variants]
        if not min(listed) <= consts[name] <= max(listed):
            return False
    for v in variants:
        same_consts = all(v.constexprs.get(n) == c for n, c in consts.items() if n not in size_names)
        same_ptrs = all(_PTR_DTYPES.get(v.signature[n]) == d for n, d in ptrs.items())
        if same_consts and same_ptrs:
            return True
    return False


@pytest.mark.triton
def test_variant_lists_cover_what_the_ops_launch(monkeypatch):
    """Run the select and theme Triton ops on tiny inputs (interpreted) in each dtype and mode,
    and check that each launch (kernel, constexprs, pointer dtypes) is one the AOT gate
    compiles. (graph_conv and beam vary only by dtype, edge/parent flags and a block size that
    follows the shape; their lists are checked by the gate alone.)"""
    import importlib

    import torch

    import rasfast
    from rasfast.dispatch import triton_interpret
    if not triton_interpret():
        pytest.skip("records interpreted launches (TRITON_INTERPRET=1, set by conftest without a GPU)")
    seen = _launches(monkeypatch)
    g = torch.Generator().manual_seed(0)
    for dt in (torch.float32, torch.float16, torch.bfloat16):
        x = torch.randn(2, 50, generator=g).to(dt)
        for largest in (False, True):
            rasfast.select_k(x, 7, largest=largest, backend="triton")
        # small-B QB = 2, 4, 8 and the tl.dot kernel, both metrics, a cut (K < N)
        for B, metric in ((1, "l2"), (3, "ip"), (5, "l2"), (9, "ip"), (9, "l2")):
            q, c = torch.rand(B, 6, generator=g), torch.rand(20, 6, generator=g).to(dt)
            qe, e = torch.rand(B, 4, generator=g), torch.rand(20, 4, generator=g).to(dt)
            rasfast.theme_scoped_search(q, qe, c, e, 5, 3, 0.5, metric, backend="triton")
            rasfast.theme_scoped_search(q[:1], qe[:1], c, e, 30, 3, 0.5, metric,
                                        backend="triton")  # K >= N: every row in scope
        scope = rasfast.theme_scope(q[:1], c, 4, backend="triton")
        rasfast.scoped_dense_search(qe[:1], e, scope, 2, backend="triton")
    rasfast.theme_scope(q[:1], c, 1, backend="triton")  # K = 1, which Triton specialises
    # the cuda theme ops' GEMM path launches split_dot on a GPU (16-bit corpora, both metrics)
    kt = rasfast.dispatch.triton_kernels().theme
    for dt in (torch.float16, torch.bfloat16):
        for B in (1, 20, 40):
            q, c = torch.rand(B, 6, generator=g), torch.rand(20, 6, generator=g).to(dt)
            parts = kt.split_parts(q, dt)
            kt.split_dot(parts, c)
            kt.split_dot(parts, c, torch.rand(20, generator=g), torch.rand(B, generator=g))
            kt.split_queries(q, dt, 16)
    assert seen, "no launch was recorded"
    kernels = {m.__name__: m for m in
               (importlib.import_module(f"rasfast.kernels.{n}") for n in ("select", "theme"))}
    missing = [(m, k, c, p) for m, k, c, p in seen if not _listed(kernels[m], k, c, p)]
    assert not missing, missing[:5]
    launched = {(m, k) for m, k, _, _ in seen}
    listed = {(name, v.kernel.__name__) for name, mod in kernels.items()
              for v in mod.aot_variants()}
    assert listed == launched, listed ^ launched  # and no listed kernel is dead


# --------------------------------------------------------------------------- vector loads
def _theme_values_launch(monkeypatch, dtype):
    """(variant label, integer arguments divisible by 16) of the _split_dot_kernel launch that
    the GPU theme values make at RAS's shape: B = 64 queries, T = 298, the corpus rows padded
    by pad_rows (as ThemeIndex.to stores them). Triton specialises those integers at launch."""
    import torch

    import rasfast
    from rasfast.ops.theme_gemm import corpus_norms, pad_rows, zero_tail
    from triton.runtime.interpreter import GridExecutor
    kt = rasfast.dispatch.triton_kernels().theme
    got = {}

    def spy(self, *args, **kwargs):  # records the launch, runs nothing
        if self.fn.__name__ == "_split_dot_kernel":
            got.update(dict(zip(self.arg_names, args), **kwargs))
            got["_constexprs"] = {n: got[n] for n in self.constexprs if n in got}

    monkeypatch.setattr(GridExecutor, "__call__", spy)
    g = torch.Generator().manual_seed(0)
    q = torch.rand(64, 298, generator=g)
    c = pad_rows(torch.rand(300, 298, generator=g).to(dtype))
    parts, qn = kt.split_queries(q, dtype, kt.loop_width(c, 298))  # as theme_gemm._fused_split
    kt.split_dot(parts, c, corpus_norms(c), qn, zero_tail=zero_tail(c))
    consts = got["_constexprs"]
    label = next(v.label for v in kt.aot_variants() if v.kernel.__name__ == "_split_dot_kernel"
                 and v.constexprs == consts)
    ints = [n for n, v in got.items() if type(v) is int and n not in consts and v % 16 == 0]
    return label, ints


@pytest.mark.triton
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_theme_values_tiles_load_in_16_byte_copies(tmp_path, monkeypatch, dtype):
    """Regression for the theme values at 38% of the H100's copy rate (docs/gpu.md): at
    T = 298 the kernel looped to X = 298 over queries of row stride 298, Triton could not
    prove a tile row aligned, and the PTX held scalar 2-byte global loads (128 a thread per
    step at float16) and no 16-byte copies. split_dot now streams the padded width (304)
    over parts padded as wide: every tile moves in 16-byte cp.async copies on sm_80 and
    sm_90. The launch's own arguments are compiled (recorded from split_dot, interpreted),
    and the old launch's (only the corpus stride divisible) as the control."""
    import torch
    from rasfast.dispatch import triton_interpret
    if not triton_interpret():
        pytest.skip("records an interpreted launch (TRITON_INTERPRET=1, set by conftest without a GPU)")
    label, ints = _theme_values_launch(monkeypatch, getattr(torch, dtype))
    assert {"XL", "stride_a", "stride_c"} <= set(ints), ints
    import rasfast
    listed = next(v for v in rasfast.dispatch.triton_kernels().theme.aot_variants() if v.label == label)
    assert set(listed.divisible) <= set(ints), (listed.divisible, ints)  # the gate compiles this
    for divisible, whole in ((ints, True), (["B", "stride_c"], False)):
        args = ["--only", "theme", "--kernel", "_split_dot_kernel", "--variant", label, "--jobs", "1",
                "--ignore-variant-divisible"]
        for n in divisible:
            args += ["--divisible", n]
        r, report = run_gate(tmp_path, *args)
        assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
        assert {x["arch"] for x in report["results"]} == {80, 90}
        for x in report["results"]:
            loads = x["loads"]
            scalar16 = loads.get("ld.global.b16", 0)
            copies = {k: v for k, v in loads.items() if k.startswith("cp.async")}
            narrow = sum(v for k, v in copies.items() if ":" in k and int(k.rsplit(":", 1)[1]) < 8)
            if whole:  # 16-byte copies (a bfloat16 corpus widened to tf32 on sm_90: 8-byte)
                assert scalar16 == 0 and narrow == 0 and copies, (x["arch"], loads)
                assert loads.get("cp.async.cg.shared.global:16", 0) >= 48, (x["arch"], loads)
            else:  # the control: the old launch loads element by element
                assert scalar16 > 0, (x["arch"], loads)
