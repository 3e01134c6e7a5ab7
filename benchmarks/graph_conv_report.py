"""RAS graph encoder on this CPU: rasfast vs PyG (same weights, same inputs, same run).

1. One forward of 3 TransformerConv layers + per-graph mean over a batch of 64 RAS-shaped
   subgraphs (30 nodes, 60 triples = 120 directed edges each; 1024-d, 8 x 128 heads,
   edge_dim 1024): PyG (TransformerConv + global_mean_pool) vs rasfast.graph_transformer_pool
   (cpu backend), with the relative error of the outputs.
2. The RAS loop: 5 planner iterations, each adding one subgraph; the reference re-encodes
   every subgraph each time (PyG, as RAS's code does), rasfast.GraphEncoder encodes only the
   new one (per-subgraph cache), also shown without the cache.

    .venv/bin/python benchmarks/graph_conv_report.py [--graphs 64] [--repeats 5]
writes benchmarks/results/graph_conv.md and .json.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from graph_conv_workload import (NODES, TRIPLES, make_batch, make_modules, pyg_pool,  # noqa: E402
                                 rel_err, time_interleaved)
from machine import header_markdown, machine_info  # noqa: E402

import rasfast  # noqa: E402
from rasfast.models.graph_encoder import GraphEncoder  # noqa: E402
from rasfast.models.question_graph import QuestionGraph  # noqa: E402
from rasfast.ops.graph_conv import normalise_layers  # noqa: E402


def forward_batch(graphs: int, repeats: int):
    convs, norms, _ = make_modules()
    x, ei, ea, ptr = make_batch(graphs)
    specs = normalise_layers([(convs[0], norms[0]), (convs[1], norms[1]), convs[2]])
    with torch.no_grad():
        ref = pyg_pool(convs, norms, x, ei, ea, ptr)
        out = rasfast.graph_transformer_pool(x, ei, ea, ptr, specs, backend="cpu")
        err = rel_err(out, ref)
        t_pyg, t_ras = time_interleaved(
            [lambda: pyg_pool(convs, norms, x, ei, ea, ptr),
             lambda: rasfast.graph_transformer_pool(x, ei, ea, ptr, specs, backend="cpu")], repeats)
    return {"graphs": graphs, "nodes": graphs * NODES, "edges": graphs * 2 * TRIPLES,
            "pyg_s": statistics.median(t_pyg), "rasfast_cpu_s": statistics.median(t_ras),
            "speedup": statistics.median(t_pyg) / statistics.median(t_ras), "rel_err": err,
            "pyg_all_s": t_pyg, "rasfast_all_s": t_ras}


def ras_loop(iterations: int, repeats: int):
    convs, norms, projector = make_modules()
    x, ei, ea, ptr = make_batch(iterations, seed=1)
    subgraphs = []
    for k in range(iterations):
        a, b = int(ptr[k]), int(ptr[k + 1])
        m = (ei[1] >= a) & (ei[1] < b)
        subgraphs.append(QuestionGraph(x[a:b], ei[:, m] - a, ea[m], [f"n{i}" for i in range(b - a)],
                                       ["p"] * int(m.sum())))

    def reference():  # RAS: every planner call re-encodes all subgraphs so far
        out = []
        for i in range(1, iterations + 1):
            gs = subgraphs[:i]
            xx = torch.cat([g.x for g in gs])
            off = torch.tensor([0] + [g.num_nodes for g in gs]).cumsum(0)
            e2 = torch.cat([g.edge_index + off[j] for j, g in enumerate(gs)], 1)
            a2 = torch.cat([g.edge_attr for g in gs])
            out.append(projector(pyg_pool(convs, norms, xx, e2, a2, off).mean(0)))
        return out

    enc = GraphEncoder.from_pyg(convs, norms, projector).eval()  # built once, as RAS builds its model

    def rasfast_loop(cache: bool):
        enc.clear_cache()
        out = []
        for i in range(1, iterations + 1):
            if not cache:
                enc.clear_cache()
            out.append(enc(subgraphs[:i]))
        return out

    with torch.no_grad():
        ref, got = reference(), rasfast_loop(True)
        err = max(rel_err(a, b) for a, b in zip(got, ref))
        t_ref, t_cache, t_nocache = time_interleaved(
            [reference, lambda: rasfast_loop(True), lambda: rasfast_loop(False)], repeats)
    return {"iterations": iterations, "subgraph_encodings_reference": iterations * (iterations + 1) // 2,
            "subgraph_encodings_cached": iterations, "pyg_reencode_s": statistics.median(t_ref),
            "rasfast_cached_s": statistics.median(t_cache), "rasfast_nocache_s": statistics.median(t_nocache),
            "speedup_cached": statistics.median(t_ref) / statistics.median(t_cache),
            "speedup_nocache": statistics.median(t_ref) / statistics.median(t_nocache), "rel_err": err}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--graphs", type=int, default=64)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--iterations", type=int, default=5)
    ap.add_argument("--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "results"))
    args = ap.parse_args()
    fwd = forward_batch(args.graphs, args.repeats)
    print(f"forward: PyG {fwd['pyg_s']:.3f}s  rasfast cpu {fwd['rasfast_cpu_s']:.3f}s  "
          f"x{fwd['speedup']:.2f}  rel err {fwd['rel_err']:.1e}", flush=True)
    loop = ras_loop(args.iterations, args.repeats)
    print(f"RAS loop: PyG re-encode {loop['pyg_reencode_s']:.3f}s  rasfast cached "
          f"{loop['rasfast_cached_s']:.3f}s (x{loop['speedup_cached']:.2f})  no cache "
          f"{loop['rasfast_nocache_s']:.3f}s (x{loop['speedup_nocache']:.2f})", flush=True)
    os.makedirs(args.out, exist_ok=True)
    result = {"machine": machine_info(), "forward": fwd, "ras_loop": loop,
              "config": {"in": 1024, "hidden": 1024, "heads": 8, "channels": 128, "edge_dim": 1024,
                         "layers": 3, "nodes_per_graph": NODES, "triples_per_graph": TRIPLES}}
    with open(os.path.join(args.out, "graph_conv.json"), "w") as f:
        json.dump(result, f, indent=2)
    md = [f"# graph_conv: RAS graph encoder, rasfast vs PyG (CPU)\n", header_markdown(),
          f"\nRAS configuration: in = hidden = 1024, 8 heads x 128, edge_dim 1024, 3 layers "
          f"(LayerNorm -> ReLU between), per-graph mean; float32; median of {args.repeats} "
          f"interleaved runs; torch threads {torch.get_num_threads()}.\n",
          f"\n## Forward, batch of {fwd['graphs']} graphs x {NODES} nodes x {TRIPLES} triples "
          f"({fwd['nodes']} nodes, {fwd['edges']} directed edges)\n",
          "\n| implementation | time (s) | speedup vs PyG | max rel. error vs PyG |\n|---|---|---|---|\n",
          f"| PyG TransformerConv x3 + global_mean_pool | {fwd['pyg_s']:.3f} | 1.00 | - |\n",
          f"| rasfast.graph_transformer_pool (cpu) | {fwd['rasfast_cpu_s']:.3f} | {fwd['speedup']:.2f} | "
          f"{fwd['rel_err']:.1e} |\n",
          f"\n## RAS loop: {loop['iterations']} iterations, one new subgraph each, projected vector "
          "per iteration\n",
          "\n| implementation | subgraph encodings | time (s) | speedup vs PyG |\n|---|---|---|---|\n",
          f"| PyG, re-encode all subgraphs each iteration (RAS reference) | "
          f"{loop['subgraph_encodings_reference']} | {loop['pyg_reencode_s']:.3f} | 1.00 |\n",
          f"| rasfast GraphEncoder, cache cleared each iteration | {loop['subgraph_encodings_reference']} | "
          f"{loop['rasfast_nocache_s']:.3f} | {loop['speedup_nocache']:.2f} |\n",
          f"| rasfast GraphEncoder with per-subgraph cache | {loop['subgraph_encodings_cached']} | "
          f"{loop['rasfast_cached_s']:.3f} | {loop['speedup_cached']:.2f} |\n",
          f"\nmax rel. error of the loop outputs vs PyG: {loop['rel_err']:.1e}\n"]
    with open(os.path.join(args.out, "graph_conv.md"), "w") as f:
        f.write("".join(md))
    print("".join(md))


if __name__ == "__main__":
    main()
