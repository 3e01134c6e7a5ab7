"""GraphLLM on a GPU: per-stage trace (graph encode / prepare / generate) of batched planner
calls, a training step, and HFCausalLM batch-1 vs batch-16 throughput, in bf16 (fp16 where
bf16 is unsupported). For a GPU session: ``.venv/bin/python benchmarks/gpu_graph_llm.py``.

The LM is a random Llama of ~1B-parameter shape built in code (``--size 1b``: hidden 2048,
16 layers, 32 heads, intermediate 5632; ``--size tiny`` for a smoke run) with the tiny
byte-level tokenizer -- speed only, no download. The graph encoder is RAS's 3 x PyG
TransformerConv (and rasfast.GraphEncoder.from_pyg with the same weights when present).
Writes benchmarks/results/gpu_graph_llm.md/.json and a Chrome trace next to them.
"""
from __future__ import annotations

import argparse
import json
import pathlib
import sys
import time

import torch

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from llm_throughput import graph_encoders, planner_samples, prompts  # noqa: E402
from machine import header_markdown, machine_info  # noqa: E402

SIZES = {"tiny": dict(hidden_size=64, num_layers=2, num_heads=4),
         "1b": dict(hidden_size=2048, num_layers=16, num_heads=32, intermediate_size=5632)}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size", choices=sorted(SIZES), default="1b")
    ap.add_argument("--new-tokens", type=int, default=32)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--out", default=str(HERE / "results" / "gpu_graph_llm"))
    ap.add_argument("--device", default="cuda", help="cpu only for a smoke test of this script")
    args = ap.parse_args()
    if args.device == "cuda" and not torch.cuda.is_available():
        sys.exit("gpu_graph_llm.py needs a CUDA device (use llm_throughput.py on CPU)")
    cuda = args.device == "cuda"
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    from rasfast.llm.graph_llm import GraphLLM
    from rasfast.llm.hf import HFCausalLM
    from rasfast.llm.tiny import tiny_llama, tiny_tokenizer
    from rasfast.profile import Trace

    tok = tiny_tokenizer()
    lines = ["# GraphLLM on GPU\n", header_markdown(),
             f"LM: random Llama `{args.size}` {SIZES[args.size]}, dtype auto (bf16 when supported); "
             f"graph encoder: 3 x TransformerConv (8 x 128), 3 subgraphs x 12 nodes x 32 edges per question.\n"]
    res = {"machine": machine_info(), "size": args.size}

    # 1. HFCausalLM throughput, batch 1 vs 16
    model, _ = tiny_llama(tokenizer=tok, seed=0, **SIZES[args.size])
    ps = prompts(16)
    lines += ["| batch | s | tokens/s |", "|---:|---:|---:|"]
    res["throughput"] = []
    for bs in (1, 16):
        lm = HFCausalLM(model, tok, device=args.device, batch_size=bs)
        lm.eos_ids = []
        lm.generate(ps[:2], max_new_tokens=4)
        best = float("inf")
        for _ in range(args.reps):
            sync()
            t = time.perf_counter()
            lm.generate(ps, max_new_tokens=args.new_tokens)
            sync()
            best = min(best, time.perf_counter() - t)
        res["throughput"].append({"batch": bs, "s": best, "tok_s": 16 * args.new_tokens / best})
        lines.append(f"| {bs} | {best:.3f} | {16 * args.new_tokens / best:.0f} |")
    lines.append(f"\ndtype: {lm.dtype}\n")
    model = model.to("cpu")

    # 2. GraphLLM per-stage trace, PyG encoder vs fused rasfast encoder
    encoders = graph_encoders(384)
    res["graph_llm"] = {}
    for name, enc in encoders.items():
        model, _ = tiny_llama(tokenizer=tok, seed=0, **SIZES[args.size])
        gl = GraphLLM(model, tok, enc, projector_hidden=2048, device=args.device, seed=0)
        eos, gl.eos_ids = gl.eos_ids, [-1]  # decode the full count (restored for training)
        samples = planner_samples(16, 384)
        gl.generate(samples[:2], max_new_tokens=2)
        gl.timer.reset()
        trace = Trace(f"graph_llm {name}")
        for bs in (1, 16):
            for _ in range(args.reps):
                getattr(enc, "clear_cache", lambda: None)()  # cold subgraph encoding each rep
                with trace.activate(), trace.span(f"planner batch {bs}", category="loop"):
                    for s in range(0, 16, bs):
                        gl.generate(samples[s:s + bs], max_new_tokens=args.new_tokens)
        # a training step (LoRA + projector + encoder)
        gl.eos_ids = eos
        for s in samples:
            s.target = "[SUFFICIENT]"
        opt = torch.optim.AdamW(gl.trainable_parameters(), lr=1e-4)
        gl.train_step(samples, opt)
        sync()
        t = time.perf_counter()
        for _ in range(args.reps):
            gl.train_step(samples, opt)
        sync()
        step = (time.perf_counter() - t) / args.reps
        trace.to_chrome(args.out + f"_{name.split('.')[0].split()[0].lower()}_trace.json")
        summ = gl.timer.summary()
        res["graph_llm"][name] = {"stages": summ, "train_step_s": step, "trace_summary": trace.summary()}
        lines += [f"\n## GraphLLM, {name} graph encoder (batch 1 and 16 calls, {args.reps} reps each)\n",
                  "```", trace.summary(), "```", f"\ntrain step (16 samples): {step * 1e3:.1f} ms; peak memory "
                  f"{(torch.cuda.max_memory_allocated() if cuda else 0) / 2**30:.2f} GiB\n"]
        del gl, model
        if cuda:
            torch.cuda.empty_cache()
    pathlib.Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    pathlib.Path(args.out + ".md").write_text("\n".join(lines) + "\n")
    pathlib.Path(args.out + ".json").write_text(json.dumps(res, indent=2, default=str))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
