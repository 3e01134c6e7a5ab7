"""Cost of the operator layer (issue 39 item 5): a call of ``torch.ops.rasfast.<op>`` against
the direct call of the same kernel function (Python + pybind11, what the eager public op
runs), at RAS's per-question shapes on the CPU, backend "cpu".

    python benchmarks/op_overhead.py            # prints the table
    python benchmarks/op_overhead.py --write    # also writes benchmarks/results/op_overhead.md

Variants, per op:
- pybind11: the bare pybind11 call of the C++ kernel, its numpy views and output arrays made
  beforehand (the floor of any Python caller; the five ops with a C++ operator kernel);
- kernel: the op's Python kernel function called directly, under the busy-machine
  width rule as the operator runs it (resolve the backend, value checks, output
  allocation, the pybind11 call); the eager public op adds its argument checks and
  numpy/torch plumbing around this;
- registered: ``torch.ops.rasfast.<op>.default(...)``: through the dispatcher to the op's CPU
  kernel, C++ (rasfast._torch_ops) where it was built for the op, else the Python kernel
  function (which repeats the cheap argument checks for direct callers);
- registered, Python kernel: ``torch.ops.rasfast.<op>_python`` (the Python kernel behind the
  dispatcher, what ``registered`` was before the C++ kernels);
- custom_op: the same kernel function as a ``torch.library.custom_op`` (select_k and
  theme_scoped_search only: the API rasfast did not take);
- public: the eager public function on torch tensors.
Overhead = registered - kernel. Goal: < 15 us and <= 10% of the op's time (public).
Timing: rounds of 200 calls per variant, the variants interleaved within each round
(machine load drifts between rounds, not between variants); the median over rounds.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import rasfast  # noqa: E402
import rasfast.ops  # noqa: E402,F401
from rasfast.ops import beam, graph_conv, segment, select, theme  # noqa: E402
from rasfast.models.graph_encoder import GraphEncoder  # noqa: E402
from rasfast._threads import follows_width_rule  # noqa: E402
from rasfast._arrays import cpu_buffer, cpu_out  # noqa: E402
from rasfast.ops._library import native, native_ops  # noqa: E402

CALLS, ROUNDS = 200, 15


_WRAPPED = {}


def W(fn):
    """The kernel function under the width rule, as the registered operator runs it."""
    if fn not in _WRAPPED:
        _WRAPPED[fn] = follows_width_rule(fn)
    return _WRAPPED[fn]


def _custom_ops():
    """custom_op wrappers of two kernel functions, for comparison."""
    @torch.library.custom_op("rasfast_bench::select_k", mutates_args=())
    def sk(x: torch.Tensor, k: int, largest: bool, sorted: bool,
           backend: str) -> tuple[torch.Tensor, torch.Tensor]:
        return W(select._select_k)(x, k, largest, sorted, backend)

    @torch.library.custom_op("rasfast_bench::theme_scoped_search", mutates_args=())
    def tss(q: torch.Tensor, qe: torch.Tensor, c: torch.Tensor, e: torch.Tensor, K: int, k: int,
            w: float, metric: str, backend: str, validate: str) -> tuple[torch.Tensor, torch.Tensor]:
        return theme._theme_scoped_search(q, qe, c, e, K, k, w, metric, backend, validate)
    return sk, tss


def _py_registered(name):
    """torch.ops.rasfast.<name>_python.default where the op has a C++ CPU kernel, else None."""
    return getattr(torch.ops.rasfast, f"{name}_python").default if native(name) else None


def _with(variants, **extra):
    variants.update({k: v for k, v in extra.items() if v is not None})
    return variants


def cases():
    rng = np.random.default_rng(0)
    mod = rasfast.dispatch.cpu_module()
    t = lambda a: torch.from_numpy(np.ascontiguousarray(a))  # noqa: E731
    sk, tss = _custom_ops()
    out = []
    # StructRAG: sub-questions x items
    x = t(rng.standard_normal((4, 500), dtype=np.float32))
    xb, xcode = cpu_buffer(x)
    so_i, so_v = np.empty((4, 10), np.int64), np.empty((4, 10), np.float32)
    py = _py_registered("select_k")
    out.append(("select_k (4 x 500, k=10)", _with({
        "pybind11": lambda: mod.select_k(xb, xcode, 10, True, True, so_i, so_v),
        "kernel": lambda: W(select._select_k)(x, 10, True, True, "cpu"),
        "registered": lambda: torch.ops.rasfast.select_k.default(x, 10, True, True, "cpu"),
        "custom_op": lambda: sk(x, 10, True, True, "cpu"),
        "public": lambda: rasfast.select_k(x, 10, largest=True, backend="cpu")},
        python_registered=py and (lambda f=py: f(x, 10, True, True, "cpu")))))
    # RAS per question: 384 dims, 2,000 passages with 64 themes (the demo world), K = 500, k = 5
    for Q in (1, 16):
        q = t(rng.standard_normal((Q, 384), dtype=np.float32))
        qp = t(rng.random((Q, 64), dtype=np.float32))
        e = t(rng.standard_normal((2000, 384), dtype=np.float32))
        p = t(rng.random((2000, 64), dtype=np.float32))
        args = (qp, q, p, e, 500, 5, 0.0, "l2", "cpu", "auto")
        pb, pcode = cpu_buffer(p)
        eb, ecode = cpu_buffer(e)
        qn, qpn = q.numpy(), qp.numpy()
        fo_i, fo_s = np.empty((Q, 5), np.int64), np.empty((Q, 5), np.float32)
        py = _py_registered("theme_scoped_search")
        out.append((f"theme_scoped_search ({Q} q, 2k rows, K=500, k=5)", _with({
            "pybind11": lambda a=(qpn, pb, pcode, qn, eb, ecode, fo_i, fo_s):
                mod.theme_scoped_search(a[0], a[1], a[2], a[3], a[4], a[5], 500, 5, 0.0, False,
                                        a[6], a[7]),
            "kernel": lambda a=args: W(theme._theme_scoped_search)(*a),
            "registered": lambda a=args: torch.ops.rasfast.theme_scoped_search.default(*a),
            "custom_op": lambda a=args: tss(*a),
            "public": lambda a=args: rasfast.theme_scoped_search(*a[:4], 500, 5, backend="cpu")},
            python_registered=py and (lambda a=args, f=py: f(*a)))))
    q1 = t(rng.standard_normal((1, 384), dtype=np.float32))
    p1 = t(rng.random((1, 64), dtype=np.float32))
    p1n, sc_o = p1.numpy(), np.empty((1, 500), np.int64)
    py = _py_registered("theme_scope")
    out.append(("theme_scope (1 q, 2k rows, K=500)", _with({
        "pybind11": lambda: mod.theme_scope(p1n, pb, pcode, 500, False, sc_o),
        "kernel": lambda: W(theme._theme_scope)(p1, p, 500, "l2", "cpu", "auto"),
        "registered": lambda: torch.ops.rasfast.theme_scope.default(p1, p, 500, "l2", "cpu", "auto"),
        "public": lambda: rasfast.theme_scope(p1, p, 500, backend="cpu")},
        python_registered=py and (lambda f=py: f(p1, p, 500, "l2", "cpu", "auto")))))
    # RAS's unfused dense step: one query inside its 500-row theme scope
    scope1 = torch.from_numpy(rng.permutation(2000)[:500].reshape(1, 500).astype(np.int64))
    q1n, s1n = q1.numpy(), scope1.numpy()
    sd_i, sd_s = np.empty((1, 5), np.int64), np.empty((1, 5), np.float32)
    py = _py_registered("scoped_dense_search")
    out.append(("scoped_dense_search (1 q, 500 scoped of 2k rows, k=5)", _with({
        "pybind11": lambda: mod.theme_scoped_dense(q1n, eb, ecode, s1n, 5, sd_i, sd_s),
        "kernel": lambda: W(theme._scoped_dense_search)(q1, e, scope1, 5, "cpu", "auto"),
        "registered": lambda: torch.ops.rasfast.scoped_dense_search.default(q1, e, scope1, 5, "cpu", "auto"),
        "public": lambda: rasfast.scoped_dense_search(q1, e, scope1, 5, backend="cpu")},
        python_registered=py and (lambda f=py: f(q1, e, scope1, 5, "cpu", "auto")))))
    # KiRAG: 16 questions x 60 candidates of MuSiQue's 17k triples
    q16 = t(rng.standard_normal((16, 384), dtype=np.float32))
    table = t(rng.standard_normal((17_000, 384), dtype=np.float32))
    cand = t(rng.integers(0, 17_000, 16 * 60))
    cptr = torch.arange(0, 16 * 60 + 1, 60)
    tb, tcode = cpu_buffer(table)
    q16n, candn, cptrn = q16.numpy(), cand.numpy(), cptr.numpy()
    st_i, st_s = np.empty((16, 10), np.int64), np.empty((16, 10), np.float32)
    py = _py_registered("segment_topk_scores")
    out.append(("segment_topk_scores (16 q x 60 of 17k, n=10)", _with({
        "pybind11": lambda: mod.segment_topk_scores(q16n, tb, tcode, candn, True, cptrn, 10, st_i, st_s),
        "kernel": lambda: W(segment._segment_topk_scores)(q16, table, cptr, 10, cand, "cpu"),
        "registered": lambda: torch.ops.rasfast.segment_topk_scores.default(q16, table, cptr, 10,
                                                                            cand, "cpu"),
        "public": lambda: rasfast.segment_topk_scores(q16, table, cptr, 10, cand_ids=cand,
                                                      backend="cpu")},
        python_registered=py and (lambda f=py: f(q16, table, cptr, 10, cand, "cpu")))))
    item = t(rng.standard_normal(16 * 60, dtype=np.float32))
    groups = t(rng.integers(0, 2000, 16 * 60))
    itemn, groupsn = item.numpy(), groups.numpy()
    mr_i, mr_s = np.empty((16, 5), np.int64), np.empty((16, 5), np.float32)
    py = _py_registered("segment_max_rank")
    out.append(("segment_max_rank (16 q x 60 items, k=5)", _with({
        "pybind11": lambda: mod.segment_max_rank(itemn, groupsn, cptrn, 5, mr_i, mr_s),
        "kernel": lambda: W(segment._segment_max_rank)(item, groups, cptr, 5, "cpu"),
        "registered": lambda: torch.ops.rasfast.segment_max_rank.default(item, groups, cptr, 5, "cpu"),
        "public": lambda: rasfast.segment_max_rank(item, groups, cptr, 5, backend="cpu")},
        python_registered=py and (lambda f=py: f(item, groups, cptr, 5, "cpu")))))
    # GEAR: 16 questions over 4,000 triples, ~8 neighbours each, 5 seeds, beam 10, length 2
    n = 4000
    deg = rng.integers(0, 16, n)
    indptr = torch.from_numpy(np.concatenate([[0], np.cumsum(deg)]).astype(np.int64))
    indices = torch.from_numpy(np.concatenate([np.sort(rng.choice(n, d, replace=False)) for d in deg])
                               .astype(np.int64))
    temb = t(rng.standard_normal((n, 384), dtype=np.float32))
    sptr = torch.arange(0, 16 * 5 + 1, 5)
    sids = t(rng.integers(0, n, 16 * 5))
    bargs = (indptr, indices, temb, q16, sptr, sids, 10, 2, 20.0, None, "cpu")
    out.append(("triple_beam_search (16 q, 4k triples, beam 10, len 2)", {
        "kernel": lambda: W(beam._beam_op)(*bargs),
        "registered": lambda: torch.ops.rasfast.triple_beam_search.default(*bargs),
        "public": lambda: rasfast.triple_beam_search((indptr, indices), temb, q16, (sptr, sids),
                                                     beam_width=10, max_len=2, backend="cpu")}))
    # RAS's graph encoder on one question graph (20 nodes, 40 edges), 128-dim features
    torch.manual_seed(0)
    enc = GraphEncoder(in_channels=128, hidden=128, heads=4, num_layers=3, edge_dim=128).eval()
    gx = torch.randn(20, 128)
    gei = torch.randint(0, 20, (2, 40))
    gea = torch.randn(40, 128)
    gptr = torch.tensor([0, 20])
    largs = enc._layer_args()
    specs = enc.layer_specs()
    out.append(("graph_transformer_pool (1 graph, 20 nodes, 3 layers of 128)", {
        "kernel": lambda: W(graph_conv._pool_op)(gx, gei, None, gea, gptr, *largs, "cpu"),
        "registered": lambda: torch.ops.rasfast.graph_transformer_pool.default(
            gx, gei, None, gea, gptr, *largs, "cpu"),
        "public": lambda: rasfast.graph_transformer_pool(gx, gei, gea, gptr, specs, backend="cpu")}))
    return out


def measure(variants):
    """Per variant, the median of single-call times, the variants called in turn call by call
    (this VM's load and clock drift within a round of 200 calls by more than the overhead
    measured: round-interleaved medians moved by 20-50 us between runs); the overhead is the
    median of the paired differences registered - kernel of consecutive calls."""
    for f in variants.values():  # warm up (caches, first-call setup)
        for _ in range(20):
            f()
    names = list(variants)
    fs = [variants[n] for n in names]
    times = {n: [] for n in names}
    pc = time.perf_counter_ns
    for _ in range(CALLS * ROUNDS):
        for n, f in zip(names, fs):
            t0 = pc()
            f()
            times[n].append((pc() - t0) / 1e3)
    out = {k: statistics.median(v) for k, v in times.items()}
    out["overhead"] = statistics.median(r - k for r, k in zip(times["registered"], times["kernel"]))
    if "pybind11" in times:
        out["over_pybind"] = statistics.median(r - k for r, k in zip(times["registered"], times["pybind11"]))
    out["overhead_p10"] = float(np.percentile(times["registered"], 10) - np.percentile(times["kernel"], 10))
    return out


def dispatcher_floor():
    """A do-nothing kernel with theme_scope's schema, registered as rasfast registers its ops
    (``Library`` + ``impl`` of a Python function), against the same function called directly:
    the part of the overhead that is torch's own (boxing the arguments, the dispatcher, the
    Python kernel call)."""
    lib = torch.library.Library("rasfast_floor", "FRAGMENT")
    lib.define("noop(Tensor q_ppd, Tensor corpus_ppd, int K, str metric, str backend, str validate) -> Tensor")
    q, c = torch.zeros(1, 298), torch.zeros(8, 298)

    def noop(q_ppd, corpus_ppd, K, metric, backend, validate):
        return q_ppd.new_empty((1, K))
    lib.impl("noop", noop, "CPU")
    op = torch.ops.rasfast_floor.noop.default
    return lib, {"kernel": lambda: noop(q, c, 5, "l2", "cpu", "auto"),
                 "registered": lambda: op(q, c, 5, "l2", "cpu", "auto"),
                 "public": lambda: noop(q, c, 5, "l2", "cpu", "auto")}


def _us(v):
    return "" if v is None else f"{v:.1f}"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--write", action="store_true", help="write benchmarks/results/op_overhead.md")
    a = ap.parse_args()
    from benchmarks.machine import header_markdown
    names, reason = native_ops()
    rows = []
    with torch.no_grad():
        lib, floor = dispatcher_floor()
        r = measure(floor)
        rows.append(f"| torch's floor: a do-nothing Python kernel, theme_scope's schema |  | {r['kernel']:.1f} | "
                    f"{r['registered']:.1f} | {r['overhead']:+.1f} | {r['overhead_p10']:+.1f} | – |  |  |  |  | – |")
        print(rows[-1], flush=True)
        for label, variants in cases():
            r = measure(variants)
            over = r["overhead"]
            co = r.get("custom_op")
            co_text = "" if co is None else f"{co:.1f} ({co - r['kernel']:+.1f})"
            ob, pub = r.get("over_pybind"), r["public"]
            rows.append(f"| {label} | {_us(r.get('pybind11'))} | {r['kernel']:.1f} | {r['registered']:.1f} | "
                        f"{over:+.1f} | {r['overhead_p10']:+.1f} | {100 * over / r['public']:.1f}% | "
                        f"{'' if ob is None else f'{ob:+.1f}'} | "
                        f"{'' if ob is None else f'{100 * ob / pub:.1f}%'} | "
                        f"{_us(r.get('python_registered'))} | {co_text} | "
                        f"{r['public']:.1f} |")
            print(rows[-1], flush=True)
    served = (f"C++ CPU operator kernels (rasfast._torch_ops) serve: {', '.join(sorted(names))}"
              if reason is None else f"C++ CPU operator kernels: not in use ({reason})")
    text = ("# Cost of the operator layer: torch.ops.rasfast.* against the direct kernel call\n\n"
            "`python benchmarks/op_overhead.py --write` (issue 39 item 5). "
            + header_markdown() + "\n" + served + ".\n\n"
            "CPU tensors, backend \"cpu\", torch.no_grad(). Times in microseconds per call: the median "
            f"of {ROUNDS * CALLS} single calls per variant, the variants called in turn, call by call. "
            "pybind11 = the bare pybind11 call of the C++ kernel, numpy views and outputs made beforehand "
            "(the floor of a Python caller); "
            "kernel = the op's Python kernel function called directly under the width rule "
            "(what the eager public op ran before the C++ operator kernels, less its argument checks: "
            "backend, value checks, outputs, the pybind11 call); registered = `torch.ops.rasfast.<op>.default` "
            "(dispatcher + the op's CPU kernel: C++ for the ops listed above, else the Python kernel "
            "function with its argument checks); registered, Python kernel = `torch.ops.rasfast.<op>_python` "
            "(the same op with its Python kernel behind the dispatcher: what registered was before); "
            "custom_op = the Python kernel as a `torch.library.custom_op` (not used by rasfast; in "
            "brackets its cost over kernel); public = the eager public function. Overhead = registered "
            "- kernel: the median of the differences of consecutive calls; overhead (p10) = the "
            "difference of the two variants' 10th percentiles (their quick calls); over pybind11 = "
            "registered - pybind11, paired the same way (what the operator costs over the bare call, "
            "argument and value checks and output allocation included); "
            "share = overhead / public, share over pybind11 = over pybind11 / public. "
            "Goal: < 15 us and <= 10%.\n\n"
            "| op (per-question shape) | pybind11 (us) | kernel (us) | registered (us) | overhead (us) "
            "| overhead, p10 (us) | share | over pybind11 (us) | share over pybind11 "
            "| registered, Python kernel (us) | custom_op (us) | public (us) |\n"
            "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n"
            + "\n".join(rows) + "\n")
    if a.write:
        out = ROOT / "benchmarks" / "results" / "op_overhead.md"
        out.write_text(text)
        print(f"wrote {out}")


if __name__ == "__main__":
    main()
