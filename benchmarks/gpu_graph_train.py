"""RAS graph encoder TRAINING step on a GPU: rasfast (fused cuda layers + their composed
backward) vs the torch reference path vs PyG's TransformerConv, same weights, same run.

A step = zero grads, forward (3 TransformerConv layers, LayerNorm -> ReLU between, per-graph
mean, RAS's projector), a squared-output loss, backward into every parameter (no optimizer
update: the same for all three). Shapes from graph_conv_workload.py: the per-question 5
subgraphs (30 nodes, 120 directed edges each), and a batch of 512 subgraphs; float32 and
bfloat16 (all three run in the dtype). Median of CUDA-event-timed steps, interleaved.
Issue 39's goal on a GPU: >= 2x PyG forward + backward.

    python benchmarks/gpu_graph_train.py     # writes results/gpu_graph_train.md and .json
"""
from __future__ import annotations

import json
import os
import statistics
import sys
import traceback

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from graph_conv_workload import make_batch, make_modules, pyg_pool, rel_err  # noqa: E402
from kernel_breakdown import breakdown_markdown, kernel_breakdown  # noqa: E402
from machine import header_markdown, machine_info  # noqa: E402

from rasfast.models.graph_encoder import GraphEncoder  # noqa: E402


def _steps(graphs: int, per_question: bool, dtype, dev=torch.device("cuda")):
    fused = "cuda" if dev.type == "cuda" else "cpu"  # cpu: a smoke run of this script
    convs, norms, projector = make_modules(device=dev)
    mods = (*convs, *norms, projector)
    for m in mods:
        m.to(dtype).train()
    enc = GraphEncoder.from_pyg(convs, norms, projector).to(dev, dtype).train()
    x, ei, ea, ptr = make_batch(graphs, device=dev)
    x, ea = x.to(dtype), ea.to(dtype)

    def loss_of(pooled, proj):
        v = pooled.mean(0, keepdim=True) if per_question else pooled
        return proj(v).float().square().mean()

    def pyg_step():
        for m in mods:
            m.zero_grad(set_to_none=True)
        loss = loss_of(pyg_pool(convs, norms, x, ei, ea, ptr), projector)
        loss.backward()
        return loss

    def enc_step(backend):
        def step():
            enc.zero_grad(set_to_none=True)
            loss = loss_of(enc.encode_batch(x, ei, ea, ptr, backend=backend), enc.projector)
            loss.backward()
            return loss
        return step

    fns = {"pyg": pyg_step, "rasfast cuda": enc_step(fused), "torch reference": enc_step("torch")}
    truth = _fp32_grads(graphs, per_question, dev) if dtype != torch.float32 else None
    errs, want = {}, None
    for name, f in list(fns.items()):  # a method that fails is reported, the others still run
        try:
            f()
        except Exception as ex:
            errs[name] = f"{type(ex).__name__}: {str(ex)[:200]}"
            traceback.print_exc()  # where it failed, in the bench log (the table keeps the message)
            del fns[name]
            continue
        mods_ = convs if name == "pyg" else enc.convs
        got = [p.grad.clone() for c in mods_ for p in (c.lin_query.weight, c.lin_value.weight)]
        if truth is not None:  # a half-precision step: how far each method is from float32
            errs[f"{name} vs float32"] = max(rel_err(a, b) for a, b in zip(got, truth))
        if name == "pyg":
            want = got
        elif want is not None:
            errs[name] = max(rel_err(a, b) for a, b in zip(got, want))
    return fns, errs


def _fp32_grads(graphs: int, per_question: bool, dev):
    """The query/value weights' gradients of PyG's float32 step on the same modules and
    batch (make_modules and make_batch are seeded): the truth a bfloat16 step is held to."""
    convs, norms, projector = make_modules(device=dev)
    for m in (*convs, *norms, projector):
        m.float().train()
    x, ei, ea, ptr = make_batch(graphs, device=dev)
    pooled = pyg_pool(convs, norms, x.float(), ei, ea.float(), ptr)
    v = pooled.mean(0, keepdim=True) if per_question else pooled
    projector(v).float().square().mean().backward()
    return [p.grad.clone() for c in convs for p in (c.lin_query.weight, c.lin_value.weight)]


def _time(fns, repeats):
    out = {k: [] for k in fns}
    for _ in range(3):
        for f in fns.values():
            f()
    torch.cuda.synchronize()
    for _ in range(repeats):
        for name, f in fns.items():
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            f()
            b.record()
            torch.cuda.synchronize()
            out[name].append(a.elapsed_time(b))
    return {k: statistics.median(v) for k, v in out.items()}


def main():
    if not torch.cuda.is_available():
        sys.exit("gpu_graph_train.py needs a CUDA device")
    rows, breakdowns = [], []
    for dtype in (torch.float32, torch.bfloat16):
        for graphs, per_q in ((5, True), (512, False)):
            try:
                fns, errs = _steps(graphs, per_q, dtype)
                ms = _time(fns, 20)
                if graphs == 512:  # where a step's device time goes (the 2x goal's measured reason)
                    for name in ("pyg", "rasfast cuda"):
                        if name in fns:
                            try:
                                kr, total = kernel_breakdown(fns[name])
                                breakdowns.append({"dtype": str(dtype).split(".")[-1], "impl": name,
                                                   "total_us": total, "kernels": kr})
                            except Exception as e:
                                print(f"kernel breakdown of {name}: {type(e).__name__}: {e}", flush=True)
                nan = float("nan")
                row = {"dtype": str(dtype).split(".")[-1], "graphs": graphs, "per_question": per_q,
                       "ms": ms, "grad_rel_err_vs_pyg": errs,
                       "speedup_vs_pyg": ms.get("pyg", nan) / ms.get("rasfast cuda", nan),
                       "speedup_vs_reference": ms.get("torch reference", nan) / ms.get("rasfast cuda", nan)}
            except Exception as e:  # the row says what failed; the others still run
                row = {"dtype": str(dtype).split(".")[-1], "graphs": graphs,
                       "error": f"{type(e).__name__}: {str(e)[:300]}"}
            rows.append(row)
            print(row, flush=True)
    res = {"machine": machine_info(), "rows": rows, "breakdowns": breakdowns}
    out = os.path.join(HERE, "results", "gpu_graph_train")
    with open(out + ".json", "w") as f:
        json.dump(res, f, indent=1, default=str)
    L = ["# Graph encoder training step on a GPU (forward + backward)", "", header_markdown(), "",
         "Median ms of 20 CUDA-event-timed steps, interleaved; gradient error = max relative error "
         "of the query/value weights' gradients against PyG's in the same dtype; for bfloat16 also "
         "against PyG's float32 step on the same modules and batch (the truth: PyG, rasfast cuda, "
         "torch reference).", "",
         "| dtype | graphs | PyG ms | rasfast cuda ms | torch reference ms | vs PyG | vs reference | grad err vs PyG (cuda, torch) | grad err vs float32 (PyG, cuda, torch) |",
         "|---|---|---:|---:|---:|---:|---:|---|---|"]
    for r in rows:
        if "error" in r:
            L.append(f"| {r['dtype']} | {r['graphs']} | error: {r['error']} |")
            continue
        m, e = r["ms"], r["grad_rel_err_vs_pyg"]
        f = lambda name: f"{m[name]:.3f}" if name in m else f"error: {e.get(name)}"
        g = lambda name: f"{e[name]:.1e}" if isinstance(e.get(name), float) else "-"
        L.append(f"| {r['dtype']} | {r['graphs']} | {f('pyg')} | {f('rasfast cuda')} | "
                 f"{f('torch reference')} | **{r['speedup_vs_pyg']:.2f}x** | {r['speedup_vs_reference']:.2f}x | "
                 f"{g('rasfast cuda')}, {g('torch reference')} | "
                 f"{g('pyg vs float32')}, {g('rasfast cuda vs float32')}, {g('torch reference vs float32')} |")
    if breakdowns:
        L += ["", "## Where a step's device time goes (512 graphs)", "",
              "torch.profiler's kernel durations over 5 steps (after a warm-up), summed per kernel "
              "name, per step.", ""]
        for b in breakdowns:
            L += breakdown_markdown(f"{b['impl']}, {b['dtype']}", b["kernels"], b["total_us"])
    with open(out + ".md", "w") as f:
        f.write("\n".join(L) + "\n")
    print("\n".join(L))


if __name__ == "__main__":
    main()
