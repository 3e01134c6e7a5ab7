"""Instruction model of select_k's CUDA row passes, from the compiled SASS (no GPU needed).

The H100 profile of the radix passes (docs/gpu.md, "select_k on the GPU") found them
latency-bound, not bandwidth-bound: about 58 issued instructions per entry, 13.8-15.8 cycles
per issued instruction, 50% occupancy (63 registers). Their time follows the instructions
each entry costs and the warps an SM holds, and both can be read from the compiled code
without a GPU:

- ``ptxas -v``: registers and spills per kernel, hence resident blocks per SM;
- the SASS of each kernel (``cuobjdump -sass``): every loop whose body holds 16-byte loads
  (``LDG.E.128``) is an element loop over the row; its instruction count over the entries
  its loads bring (loads x 16 / entry size) is the static instructions per entry. Where the
  body has no branch besides the loop's own, that is what each entry costs when executed;
  with branches inside, it is the sum of all paths, an upper bound.
- the **no-candidate path** of an element loop: the instructions one trip through the loop
  executes when none of its entries is wanted (the common case of the filtering pass at small
  k: on random rows almost every entry is neither in the digit's range nor below it). A walk
  from the loop's head to its back branch follows unconditional branches and, at a forward
  conditional branch inside the loop, jumps over the code it guards when that code does a
  candidate's work (shared or global atomics, shuffles, global stores) but not a key's
  computation (the key transform's NaN bound: that branch skips an unloaded vector's
  entries), or when the branch follows a warp vote (no lane of the warp has a candidate);
  else it falls through. Over the entries the loop's loads bring, that is what an entry
  costs on that path. A second walk, "lane", falls through the branches after warp votes: a
  lane without a candidate in a warp where another lane has one (the filtering pass at
  k = 10,000 on 16 x 1M float32, where about 2-3% of entries are candidates: the old pass's
  55.9 by this walk against 54.4 executed instructions an entry measured by Nsight Compute
  in the sixth H100 session).

For the on-chip sort of sorted answers (``sort_rows_radix``, and the one-launch short-row
select that ends with it, ``select_rows_small_sorted``) the loop counted is its radix
pass (the warp ranking, the scan, the scatter): its instructions over the keys a thread holds
are the instructions per key per pass ("entries" there are keys a thread).

``--rev REV`` compiles ``csrc/select/select_kernels.cu`` as it was at a git revision too,
so both versions are measured by the same compiler in the same run.

    python benchmarks/select_sass_model.py [--rev REV] [--arch 90] [--out results/select_sass_model]
"""
from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Dict, List, Optional

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

ROOT = Path(__file__).resolve().parent.parent
SOURCE = "csrc/select/select_kernels.cu"
DTYPES = {"0": ("float32", 4), "1": ("float16", 2), "2": ("bfloat16", 2)}
KERNELS = ("radix_pass", "write_selected", "filter_topk", "sort_rows_radix", "select_rows_small_sorted")
SORTING = ("sort_rows_radix", "select_rows_small_sorted")  # <dtype, keys a thread>: the on-chip radix sort
MODES = {"0": "histogram only", "1": "first filter", "2": "copy to buffer", "3": "first filter per vector (RASFAST_SELECT_GROUPED=0)"}


def tool(name: str) -> str:
    """nvcc from PATH or /usr/local/cuda; cuobjdump also from triton's bundled binaries."""
    found = shutil.which(name)
    if found:
        return found
    cands = [Path("/usr/local/cuda/bin") / name]
    try:
        import triton
        cands.append(Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / name)
    except ImportError:
        pass
    for c in cands:
        if c.exists():
            return str(c)
    raise SystemExit(f"{name}: not found (PATH, /usr/local/cuda/bin, triton's bundled tools)")


@dataclass
class Loop:
    instructions: int
    loads16: int
    branches: int         # BRA inside the body, the loop's own included
    entries: int = 0      # entries the body's 16-byte loads bring
    per_entry: float = 0.0
    quiet: int = 0        # instructions on the no-candidate path (module docstring)
    quiet_per_entry: float = 0.0
    lane: int = 0         # the same for a lane without one in a warp with one
    lane_per_entry: float = 0.0


@dataclass
class Kernel:
    name: str             # e.g. radix_pass<float32, histogram only>
    registers: int = 0
    spill_bytes: int = 0
    instructions: int = 0
    loops: List[Loop] = field(default_factory=list)


def _label(mangled: str) -> Optional[str]:
    for k in KERNELS:
        if k in mangled:
            if k in SORTING:
                m = re.search(r"DTypeE(\d)ELi(\d+)E", mangled)
                return f"{k}<{DTYPES[m.group(1)][0]}, {m.group(2)} keys a thread>" if m else None
            m = re.search(r"DTypeE(\d)(?:ELi(\d))?", mangled)
            if not m:
                return None
            dt = DTYPES[m.group(1)][0]
            mode = f", {MODES[m.group(2)]}" if m.group(2) is not None else ""
            return f"{k}<{dt}{mode}>"
    return None


def compile_source(src: Path, arch: str, workdir: Path) -> Dict[str, Kernel]:
    cubin = workdir / f"{src.stem}.cubin"
    proc = subprocess.run([tool("nvcc"), "-O3", "-cubin", f"-arch=sm_{arch}", "-Xptxas", "-v",
                           f"-I{ROOT / 'csrc'}", "-std=c++17", str(src), "-o", str(cubin)],
                          capture_output=True, text=True)
    if proc.returncode:
        raise SystemExit(f"nvcc failed on {src}:\n{proc.stderr[-3000:]}")
    kernels: Dict[str, Kernel] = {}
    current = None
    for line in proc.stderr.splitlines():
        m = re.search(r"Compiling entry function '(\S+)'", line)
        if m:
            label = _label(m.group(1))
            current = kernels.setdefault(label, Kernel(label)) if label else None
            continue
        if current is None:
            continue
        m = re.search(r"(\d+) bytes spill stores", line)
        if m:
            current.spill_bytes = int(m.group(1))
        m = re.search(r"Used (\d+) registers", line)
        if m:
            current.registers = int(m.group(1))
    sass = subprocess.run([tool("cuobjdump"), "-sass", str(cubin)], capture_output=True,
                          text=True, check=True).stdout
    for name, body in _functions(sass):
        label = _label(name)
        if label in kernels:
            entry_bytes = next(b for n, b in DTYPES.values() if label.split("<")[1].startswith(n))
            ins = _instructions(body)
            kernels[label].instructions = len(ins)
            if label.startswith(SORTING):
                kernels[label].loops = _sort_pass_loop(ins, int(re.search(r"(\d+) keys", label).group(1)))
            else:
                kernels[label].loops = _element_loops(ins, entry_bytes)
    return kernels


def _functions(sass: str):
    name, lines = None, []
    for line in sass.splitlines():
        m = re.search(r"Function : (\S+)", line)
        if m:
            if name:
                yield name, lines
            name, lines = m.group(1), []
        elif name:
            lines.append(line)
    if name:
        yield name, lines


def _instructions(lines):
    out = []
    for line in lines:
        m = re.match(r"\s*/\*([0-9a-f]{4,})\*/\s+(.*?);", line)
        if m:
            out.append((int(m.group(1), 16), m.group(2).strip()))
    return out


def _backward_spans(ins):
    """(first, last) instruction positions of every loop: a branch back to an earlier address."""
    at = {a: i for i, (a, _) in enumerate(ins)}
    spans = []
    for i, (a, text) in enumerate(ins):
        m = re.search(r"\bBRA (0x[0-9a-f]+)", text)
        if m and int(m.group(1), 16) <= a and int(m.group(1), 16) in at:
            spans.append((at[int(m.group(1), 16)], i))
    return spans


_CANDIDATE_WORK = ("ATOMS", "ATOMG", "RED", "SHFL", "STG")
# the key transform's NaN bound (float32, float16, bfloat16): code that computes keys
_KEY_WORK = re.compile(r"\b0x(7f800000|7c00|7f80)\b")


def _lane_path(ins, s: int, e: int, warp_has_candidate: bool) -> int:
    """Instructions one lane executes from ins[s] to the back branch ins[e] when none of its
    entries is a candidate (the module docstring's walk); warp_has_candidate: another lane's
    is, so the branches after warp votes fall through."""
    at = {a: i for i, (a, _) in enumerate(ins)}
    i, n = s, 0
    while True:
        a, text = ins[i]
        n += 1
        if i == e:
            return n
        m = re.search(r"\bBRA (0x[0-9a-f]+)", text)
        tgt = at.get(int(m.group(1), 16)) if m else None
        if tgt is None:
            i += 1
            continue
        if not text.startswith("@"):
            i = tgt
            continue
        if tgt <= i or tgt > e:  # a loop's own back branch, or a jump out: stay in the loop
            i += 1
            continue
        if "VOTE.ANY" in ins[i - 1][1]:
            i = i + 1 if warp_has_candidate else tgt
            continue
        skipped = [t for _, t in ins[i + 1:tgt] if not re.search(r"\bBRA\b", t)]
        work = any(op in t for t in skipped for op in _CANDIDATE_WORK)
        key = any(_KEY_WORK.search(t) for t in skipped)
        i = tgt if work and not key else i + 1


def _element_loops(ins, entry_bytes: int) -> List[Loop]:
    """The innermost loops (a backward branch's span holding no other such span) whose body
    has 16-byte loads."""
    spans = _backward_spans(ins)
    loops = []
    for j, (s, e) in enumerate(spans):
        if any(s <= s2 and e2 <= e and (s2, e2) != (s, e) for s2, e2 in spans):
            continue  # not innermost
        body = [t for _, t in ins[s:e + 1]]
        loads = sum("LDG.E.128" in t for t in body)
        if not loads:
            continue
        entries = loads * 16 // entry_bytes
        quiet, lane = _lane_path(ins, s, e, False), _lane_path(ins, s, e, True)
        loops.append(Loop(len(body), loads, sum(bool(re.search(r"\bBRA\b", t)) for t in body),
                          entries, round(len(body) / entries, 1), quiet, round(quiet / entries, 1),
                          lane, round(lane / entries, 1)))
    return loops


def _sort_pass_loop(ins, keys: int) -> List[Loop]:
    """The on-chip sort's pass loop (the innermost loop holding the warp ranking's
    MATCH.ANY and the pass's barriers): its instructions over the keys a thread holds. Its
    inner loops (zeroing the counters, summing the warps' totals) run a few times a pass and
    are not counted per key."""
    best = None
    for s, e in _backward_spans(ins):
        body = [t for _, t in ins[s:e + 1]]
        if any("MATCH.ANY" in t for t in body) and sum("BAR.SYNC" in t for t in body) >= 3:
            if best is None or e - s < best[1] - best[0]:
                best = (s, e)
    if best is None:
        return []
    body = [t for _, t in ins[best[0]:best[1] + 1]]
    return [Loop(len(body), 0, sum(bool(re.search(r"\bBRA\b", t)) for t in body), keys,
                 round(len(body) / keys, 1))]


def blocks_per_sm(registers: int, threads: int = 256) -> int:
    """Resident blocks by registers alone (65,536 per SM, allocated per warp in units of 256)."""
    per_warp = -(-max(registers, 1) * 32 // 256) * 256
    return min(65536 // (per_warp * (threads // 32)), 2048 // threads)


def git_source(rev: str, workdir: Path) -> Path:
    text = subprocess.run(["git", "-C", str(ROOT), "show", f"{rev}:{SOURCE}"], capture_output=True,
                          text=True, check=True).stdout
    out = workdir / f"select_kernels_{rev}.cu"
    out.write_text(text)
    return out


def table(title: str, kernels: Dict[str, Kernel]) -> List[str]:
    rows = [f"### {title}", "",
            "| kernel | registers | spill bytes | blocks/SM (registers) | SASS instructions | element loops: instructions / entries (branches) | instructions per entry | no-candidate path per entry: warp, lane |",
            "|---|---|---|---|---|---|---|---|"]
    for name in sorted(kernels):
        k = kernels[name]
        loops = "; ".join(f"{lp.instructions} / {lp.entries} ({lp.branches})" for lp in k.loops)
        per = ", ".join(str(lp.per_entry) for lp in k.loops)
        quiet = ", ".join(f"{lp.quiet_per_entry} / {lp.lane_per_entry}" for lp in k.loops if lp.loads16)
        threads = 512 if name.startswith(SORTING) else 256
        rows.append(f"| {name} | {k.registers} | {k.spill_bytes} | {blocks_per_sm(k.registers, threads)} | "
                    f"{k.instructions} | {loops} | {per} | {quiet} |")
    return rows + [""]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rev", help="also compile select_kernels.cu as of this git revision")
    ap.add_argument("--arch", default="90")
    ap.add_argument("--out", help="write OUT.md and OUT.json")
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        results = {"current": compile_source(ROOT / SOURCE, args.arch, work)}
        if args.rev:
            results[args.rev] = compile_source(git_source(args.rev, work), args.arch, work)
    nvcc = subprocess.run([tool("nvcc"), "--version"], capture_output=True, text=True).stdout
    version = next((ln for ln in nvcc.splitlines() if "release" in ln), "").strip()
    lines = [f"# select_k CUDA kernels: registers and instructions per entry (sm_{args.arch}, from SASS)",
             "", f"nvcc: {version}. Static counts from `benchmarks/select_sass_model.py` "
             "(its docstring says what they mean); no GPU ran.", ""]
    for label, ks in results.items():
        lines += table(f"select_kernels.cu, {label}", ks)
    text = "\n".join(lines)
    print(text)
    if args.out:
        Path(args.out + ".md").write_text(text + "\n")
        Path(args.out + ".json").write_text(json.dumps(
            {label: {n: asdict(k) for n, k in ks.items()} for label, ks in results.items()}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
