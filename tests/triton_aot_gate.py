"""AOT-compile every Triton kernel variant in rasfast.kernels for sm_80 and sm_90; no GPU needed.

    python tests/triton_aot_gate.py [--json out.json] [--jobs 2] [--only theme]
                                    [--kernel _cut_kernel] [--module other.kernels]
                                    [--variant LABEL] [--divisible XL]
                                    [--ignore-variant-divisible]

Every module of rasfast.kernels lists what its host code launches in ``aot_variants()``
(kernels/_aot.py). Each variant is compiled with ``triton.compile(ASTSource(...),
target=GPUTarget("cuda", arch, 32))`` with Triton's default options (the launches pass none)
and 16-byte aligned pointers (what torch allocations give a real launch). Reported per
variant and target: registers and spill bytes (from ptxas's own -v log) and shared memory
(Triton's metadata), and the PTX's global loads by kind (``loads``: ``ld.global.b16`` is a
scalar 2-byte load, ``cp.async.cg.shared.global:16`` a 16-byte asynchronous copy). Integer
arguments are compiled unspecialised unless the variant (``Variant.divisible``: what its
launches give) or ``--divisible`` names them: Triton specialises one divisible by 16 at
launch, which decides whether masked tiles load in vectors, and with that the registers and
spills (see tests/test_triton_aot.py's split_dot check). A variant fails on any compile error, or when its shared memory exceeds
the target's per-block opt-in limit. Every @triton.jit function of a module must be a listed
kernel or a helper that one of them calls, so a new kernel cannot slip past.

Run as a script it prints the table and exits 1 on any failure; tests/test_triton_aot.py
runs it in a subprocess (TRITON_INTERPRET unset, a fresh Triton cache so ptxas runs).
"""
from __future__ import annotations

import argparse
import contextlib
import importlib
import inspect
import io
import json
import os
import pkgutil
import re
import sys
import time
import traceback
from concurrent.futures import ProcessPoolExecutor
from typing import Dict, List

# the launches use Triton's default (fusion on in 3.9); saying so silences its warning
os.environ.setdefault("TRITON_DEFAULT_FP_FUSION", "1")

# per-block shared memory limits (opt-in maximum): A100 163 KB, H100/H200 227 KB
SHARED_LIMIT = {80: 163 * 1024, 90: 227 * 1024}
ARCHS = (80, 90)


def kernel_modules(extra=()):
    import rasfast.kernels as pkg
    names = [f"{pkg.__name__}.{m.name}" for m in pkgutil.iter_modules(pkg.__path__)
             if not m.name.startswith("_")]
    return [importlib.import_module(n) for n in names + list(extra)]


def _jit_functions(mod):
    from triton.runtime.jit import JITFunction
    return {name: obj for name, obj in vars(mod).items()
            if isinstance(obj, JITFunction) and obj.fn.__module__ == mod.__name__}


def _short(name: str) -> str:
    return name.rsplit(".", 1)[1] if name.startswith("rasfast.kernels.") else name


def _where(name: str) -> str:
    return f"kernels/{_short(name)}.py" if name.startswith("rasfast.kernels.") else name


def collect(extra=()):
    """(variants by module, problems): problems name modules/kernels the gate cannot cover."""
    variants, problems = {}, []
    for mod in kernel_modules(extra):
        jits = _jit_functions(mod)
        if not jits:
            continue
        where = _where(mod.__name__)
        if not hasattr(mod, "aot_variants"):
            problems.append(f"{where} has @triton.jit kernels ({', '.join(sorted(jits))}) "
                            "but no aot_variants(); list its launches (see kernels/_aot.py)")
            continue
        vs = mod.aot_variants()
        variants[mod.__name__] = vs
        # covered: launched kernels, then (transitively) the helpers their source calls
        covered = {v.kernel.__name__ for v in vs}
        grew = True
        while grew:
            grew = False
            srcs = "\n".join(inspect.getsource(jits[n].fn) for n in covered if n in jits)
            for name in jits:
                if name not in covered and re.search(rf"\b{name}\s*\(", srcs):
                    covered.add(name)
                    grew = True
        for name in sorted(set(jits) - covered):
            problems.append(f"{where}: @triton.jit {name} is neither in aot_variants() "
                            "nor called by a kernel that is")
    return variants, problems


_PTXAS_REGS = re.compile(r"Used (\d+) registers")
_PTXAS_SPILL = re.compile(r"(\d+) bytes spill stores, (\d+) bytes spill loads")
# a global load's opcode; an asynchronous copy's with its size in bytes ("cp.async.cg...:16")
_PTX_LOADS = re.compile(r"\b(ld\.global[\w.]*|cp\.async\.bulk[\w.:]*|"
                        r"cp\.async\.c[ag]\.shared\.global[\w.]*)(?:\s*\[[^]]*\],\s*\[[^]]*\],"
                        r"\s*(0x[0-9a-fA-F]+|\d+))?")


def compile_one(job):
    """Compile one (module, index, arch) job in this process; returns a result dict."""
    modname, idx, arch, divisible, own = job
    import triton
    from triton import knobs
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource
    v = importlib.import_module(modname).aot_variants()[idx]
    divisible = tuple(sorted(set(divisible) | (set(v.divisible) if own else set())))
    res = {"module": _short(modname), "variant": v.label, "arch": arch, "ok": False, "regs": None,
           "spill_stores": None, "spill_loads": None, "shared": None, "loads": None,
           "divisible": list(divisible), "error": None, "seconds": None}
    t0 = time.perf_counter()
    try:
        target = GPUTarget("cuda", arch, 32)
        options = triton.compiler.make_backend(target).parse_options({})
        names = list(v.kernel.arg_names)
        attrs = {(names.index(n),): [["tt.divisibility", 16]]
                 for n, t in v.signature.items()
                 if t.startswith("*") or n in divisible}
        src = ASTSource(fn=v.kernel, signature=v.signature, constexprs=v.constexprs, attrs=attrs)
        knobs.nvidia.dump_ptxas_log = True  # ptxas -v: registers and spills
        log = io.StringIO()
        with contextlib.redirect_stdout(log):
            k = triton.compile(src, target=target, options=options.__dict__)
        text = log.getvalue()
        regs = _PTXAS_REGS.findall(text)
        spills = _PTXAS_SPILL.findall(text)
        res["regs"] = int(regs[-1]) if regs else None
        if spills:
            res["spill_stores"], res["spill_loads"] = (int(x) for x in spills[-1])
        res["shared"] = int(k.metadata.shared)
        loads: Dict[str, int] = {}
        for op, size in _PTX_LOADS.findall(k.asm["ptx"]):
            key = f"{op}:{int(size, 0)}" if size else op
            loads[key] = loads.get(key, 0) + 1
        res["loads"] = loads
        if res["shared"] > SHARED_LIMIT[arch]:
            res["error"] = (f"shared memory {res['shared']} B exceeds the sm_{arch} limit "
                            f"{SHARED_LIMIT[arch]} B")
        else:
            res["ok"] = True
    except Exception as e:  # a compile error of any kind fails the variant
        msg = "".join(traceback.format_exception_only(type(e), e)).strip()
        res["error"] = msg[-2000:]
    res["seconds"] = round(time.perf_counter() - t0, 2)
    return res


def run(jobs: int = 2, only: List[str] = (), extra: List[str] = (),
        kernels: List[str] = (), archs=ARCHS, labels: List[str] = (),
        divisible: List[str] = (), variant_divisible: bool = True) -> Dict[str, object]:
    t0 = time.perf_counter()
    variants, problems = collect(extra)
    work = [(name, i, arch, tuple(divisible), variant_divisible) for name, vs in variants.items()
            if not only or _short(name) in only
            for i, v in enumerate(vs) if (not kernels or v.kernel.__name__ in kernels)
            and (not labels or v.label in labels)
            for arch in archs]
    if jobs > 1:
        with ProcessPoolExecutor(max_workers=jobs) as ex:
            results = list(ex.map(compile_one, work))
    else:
        results = [compile_one(w) for w in work]
    return {"results": results, "problems": problems,
            "seconds": round(time.perf_counter() - t0, 1), "jobs": jobs}


def table(report) -> str:
    lines = [f"{'kernel variant':<72} {'sm':>3} {'regs':>5} {'spill':>6} {'shared':>7}  status"]
    for r in report["results"]:
        spill = "-" if r["spill_stores"] is None else str(r["spill_stores"] + r["spill_loads"])
        status = "ok" if r["ok"] else "FAIL: " + (r["error"] or "").splitlines()[-1][:200]
        lines.append(f"{r['variant']:<72} {r['arch']:>3} {str(r['regs']):>5} {spill:>6} "
                     f"{str(r['shared']):>7}  {status}")
    for p in report["problems"]:
        lines.append(f"NOT COVERED: {p}")
    n_fail = sum(not r["ok"] for r in report["results"]) + len(report["problems"])
    lines.append(f"{len(report['results'])} compiles, {n_fail} failures, "
                 f"{report['seconds']} s with {report['jobs']} processes")
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", help="write the report here")
    ap.add_argument("--md", help="write the table with machine info here (benchmarks/results/)")
    ap.add_argument("--jobs", type=int, default=min(2, os.cpu_count() or 1))
    ap.add_argument("--only", action="append", default=[], help="kernel module(s) to check")
    ap.add_argument("--kernel", action="append", default=[], help="only these kernel(s)")
    ap.add_argument("--arch", action="append", type=int, choices=ARCHS, help="only these SMs")
    ap.add_argument("--module", action="append", default=[],
                    help="also check this importable module (it needs aot_variants())")
    ap.add_argument("--variant", action="append", default=[], help="only these variant labels")
    ap.add_argument("--divisible", action="append", default=[],
                    help="integer argument(s) compiled as divisible by 16")
    ap.add_argument("--ignore-variant-divisible", action="store_true",
                    help="compile the integers a variant lists as divisible unspecialised")
    a = ap.parse_args(argv)
    if os.environ.get("TRITON_INTERPRET", "0") not in ("", "0"):
        print("unset TRITON_INTERPRET: the interpreter never compiles", file=sys.stderr)
        return 2
    load0 = os.getloadavg()
    report = run(a.jobs, a.only, a.module, a.kernel, tuple(a.arch or ARCHS), a.variant,
                 a.divisible, not a.ignore_variant_divisible)
    print(table(report))
    if a.md:
        sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        from benchmarks.machine import header_markdown
        import triton
        with open(a.md, "w") as f:
            f.write(f"# Triton AOT compile report (sm_80, sm_90)\n\n{header_markdown()}\n"
                    f"Triton {triton.__version__}; load average {load0[0]:.1f} at start, "
                    f"{os.getloadavg()[0]:.1f} at end (the machine is shared). Registers and "
                    "spills from ptxas -v, shared memory from Triton's metadata; times are "
                    "compile times.\n\n```\n" + table(report) + "\n```\n")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(report, f, indent=1)
    ok = all(r["ok"] for r in report["results"]) and not report["problems"]
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
