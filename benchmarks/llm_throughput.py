"""LLM generation throughput (batch 1 vs batch 16) and the GraphLLM per-stage cost.

1. HFCausalLM (rasfast's left-padded KV-cache decode loop) on tiny random Llamas built in
   code, 16 prompts x ``--new-tokens`` tokens (EOS ignored so every row decodes the same
   count), one prompt at a time vs one batch of 16; transformers' own ``generate`` (greedy)
   at the same batch sizes as the peer, same run, same weights.
2. GraphLLM: planner calls for 16 questions with 3 subgraphs each, graph encoder = RAS's
   3 x TransformerConv (heads 8 x 128, edge_dim = node dim, LayerNorm/ReLU, mean pool; PyG)
   and, when rasfast.GraphEncoder exists, the fused rasfast encoder with the same weights;
   per-stage times (graph_encode / prepare / generate).
3. OpenAIChat over the scripted local server (tests/fake_openai_server.py, a real HTTP
   process): kept-alive connections vs one connection per request (``keep_alive=False``,
   which is what the client did before), and a batch with one permanently failing prompt
   isolated by ``call_isolated`` keeping the successes vs re-sending every prompt (before).

Writes benchmarks/results/llm_throughput.md (+ .json). Usage:
    .venv/bin/python benchmarks/llm_throughput.py [--threads N] [--new-tokens 32] [--quick]
        [--http-requests 200] [--http-concurrency 8]
"""
from __future__ import annotations

import argparse
import json
import os
import pathlib
import sys
import time

import torch

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from machine import header_markdown, machine_info  # noqa: E402

from rasfast.llm.hf import HFCausalLM  # noqa: E402
from rasfast.llm.tiny import tiny_llama, tiny_tokenizer  # noqa: E402

CONFIGS = {"tiny (h64, 2 layers)": dict(hidden_size=64, num_layers=2, num_heads=4),
           "small (h256, 4 layers)": dict(hidden_size=256, num_layers=4, num_heads=8)}


def prompts(n):
    base = ["Question: In which country was the founder of Velora Studios born?",
            "Sub-query: Who directed the film Blue Tide, released in 1999?",
            "Knowledge so far: (S> Mira Okonkwo| P> born in| O> Castrell)",
            "Which river flows through the capital city of the country?"]
    return [base[i % 4] + f" ({i})" * (1 + i % 3) for i in range(n)]


def best_of(fn, reps):
    best = float("inf")
    for _ in range(reps):
        t = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t)
    return best


def throughput(tok, cfg, n, new_tokens, reps):
    model, _ = tiny_llama(tokenizer=tok, seed=0, **cfg)
    ps = prompts(n)
    rows = []
    for bs in (1, n):
        lm = HFCausalLM(model, tok, batch_size=bs)
        lm.eos_ids = []  # decode exactly new_tokens per row
        lm.generate(ps[:2], max_new_tokens=4)  # warm-up
        t_ours = best_of(lambda: lm.generate(ps, max_new_tokens=new_tokens), reps)

        tok.padding_side = "left"

        def hf():
            for s in range(0, n, bs):
                enc = tok(ps[s:s + bs], return_tensors="pt", padding=True)
                model.generate(**enc, max_new_tokens=new_tokens, min_new_tokens=new_tokens, do_sample=False,
                               pad_token_id=tok.pad_token_id)
        with torch.no_grad():
            hf()
            t_hf = best_of(hf, reps)
        rows.append({"batch": bs, "ours_s": t_ours, "ours_tok_s": n * new_tokens / t_ours,
                     "hf_s": t_hf, "hf_tok_s": n * new_tokens / t_hf})
    return rows


def make_pyg_encoder(node_dim: int = 384, seed: int = 0):
    """RAS's graph encoder as its code holds it: 3 x PyG TransformerConv (heads 8 x 128,
    edge_dim = node dim, root weight, no beta) with LayerNorm -> ReLU between layers,
    per-subgraph node mean, mean over subgraphs. Returns (module, convs, norms)."""
    from torch import nn
    from torch_geometric.nn import TransformerConv

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        convs = nn.ModuleList([TransformerConv(node_dim if i == 0 else 1024, 128, heads=8, edge_dim=node_dim,
                                               root_weight=True, beta=False) for i in range(3)])
        norms = nn.ModuleList([nn.LayerNorm(1024) for _ in range(2)])

    class PygEncoder(nn.Module):
        out_dim = 1024

        def __init__(self):
            super().__init__()
            self.convs, self.norms = convs, norms

        def forward(self, subgraphs):
            outs = []
            for g in subgraphs:
                dev = self.norms[0].weight.device
                x, ei, ea = g.x.to(dev), g.edge_index.to(dev), g.edge_attr.to(dev)
                for i, conv in enumerate(self.convs):
                    x = conv(x, ei, ea)
                    if i < len(self.convs) - 1:
                        x = torch.relu(self.norms[i](x))
                outs.append(x.mean(0))
            return torch.stack(outs).mean(0)

    return PygEncoder(), convs, norms


def random_subgraph(seed: int, node_dim: int = 384, n_nodes: int = 12, n_triples: int = 16):
    """A random rasfast QuestionGraph with both edge directions per triple, as RAS builds it."""
    from rasfast.models.question_graph import QuestionGraph
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n_nodes, node_dim, generator=g)
    s = torch.randint(0, n_nodes, (n_triples,), generator=g)
    o = torch.randint(0, n_nodes, (n_triples,), generator=g)
    ei = torch.cat([torch.stack([s, o]), torch.stack([o, s])], 1)
    ea = torch.randn(2 * n_triples, node_dim, generator=g)
    return QuestionGraph(x, ei, ea, [f"n{i}" for i in range(n_nodes)], [f"p{i}" for i in range(2 * n_triples)])


def planner_samples(n: int, node_dim: int = 384, subgraphs: int = 3):
    from rasfast.llm.training_data import GraphLLMSample
    ctx = ["[1] Sub-query: q\nTriples: (S> Velora| P> founded by| O> Mira Okonkwo)"] * 2
    return [GraphLLMSample("plan", f"In which city was the founder of company {i} born?", ctx,
                           [random_subgraph(subgraphs * i + j, node_dim) for j in range(subgraphs)])
            for i in range(n)]


def graph_encoders(node_dim: int = 384):
    """{name: encoder} with the same weights: RAS's PyG layers, and rasfast.GraphEncoder
    (fused kernels, one pooled call per batch) built from them with ``from_pyg``."""
    pyg, convs, norms = make_pyg_encoder(node_dim)
    out = {"PyG TransformerConv": pyg}
    try:
        from rasfast import GraphEncoder
        out["rasfast.GraphEncoder"] = GraphEncoder.from_pyg(convs, norms)
    except Exception as e:  # gconv not merged / unavailable
        print(f"rasfast.GraphEncoder unavailable: {type(e).__name__}: {e}")
    return out


def graph_llm_trace(tok, n, new_tokens, node_dim, reps):
    """{encoder name: GraphLLM stage summary} for batched planner calls; the rasfast
    encoder's per-subgraph cache is cleared before every call (cold encoding cost)."""
    from rasfast.llm.graph_llm import GraphLLM

    samples = planner_samples(n, node_dim)
    out = {}
    for name, enc in graph_encoders(node_dim).items():
        model, _ = tiny_llama(tokenizer=tok, seed=0, **CONFIGS["tiny (h64, 2 layers)"])
        gl = GraphLLM(model, tok, enc, projector_hidden=2048, seed=0)
        gl.eos_ids = [-1]  # decode the full count
        clear = getattr(enc, "clear_cache", lambda: None)
        gl.generate(samples[:2], max_new_tokens=2)
        gl.timer.reset()
        for _ in range(reps):
            clear()
            gl.generate(samples, max_new_tokens=new_tokens)
        out[name] = gl.timer.summary()
    return out


def http_client(n: int, concurrency: int, reps: int):
    """OpenAIChat against the scripted server: (rows keep-alive vs not, rows partial failure)."""
    sys.path.insert(0, str(HERE.parent / "tests"))
    from fake_openai_server import FakeServer
    from rasfast.llm.base import PartialBatchError
    from rasfast.llm.openai_chat import OpenAIChat
    from rasfast.systems.ras import call_isolated

    echo = [{"contains": "", "echo": True}]
    ps = [f"prompt {i}" for i in range(n)]
    server = FakeServer()
    try:
        conn_rows = []
        for conc in sorted({1, concurrency}):
            for keep in (False, True):
                c = OpenAIChat("bench", base_url=server.url, api_key="x", timeout=10.0,
                               concurrency=conc, keep_alive=keep)
                server.script(echo)
                c.generate(ps[:conc])  # warm-up (and, kept alive, the pool)
                server.script(echo)
                t = best_of(lambda: c.generate(ps), reps)
                st = server.stats()
                conn_rows.append({"concurrency": conc, "keep_alive": keep, "s": t, "req_per_s": n / t,
                                  "requests": st["requests"], "connections": st["connections"]})
                c.close()
        bad = n // 2
        mixed = [p + (" poison" if i == bad else "") for i, p in enumerate(ps)]
        script = [{"contains": "poison", "fault": {"kind": "400"}}] + echo
        c = OpenAIChat("bench", base_url=server.url, api_key="x", timeout=10.0, concurrency=concurrency)

        def before(items):  # what the client raised before: one error, the successes dropped
            try:
                return c.generate(items)
            except PartialBatchError as e:
                raise RuntimeError(str(e)) from None

        iso_rows = []
        for name, fn in (("re-send every prompt (before)", before),
                         ("keep the successes (now)", lambda items: c.generate(items))):
            server.script(script)
            t = time.perf_counter()
            out, errs = call_isolated(fn, mixed, concurrency=concurrency)
            t = time.perf_counter() - t
            assert sorted(errs) == [bad] and sum(o is not None for o in out) == n - 1
            iso_rows.append({"mode": name, "s": t, "requests": server.stats()["requests"]})
        c.close()
        return conn_rows, iso_rows
    finally:
        server.close()


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's)")
    ap.add_argument("--n", type=int, default=16)
    ap.add_argument("--new-tokens", type=int, default=32)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--quick", action="store_true", help="tiny config only, 1 rep")
    ap.add_argument("--http-requests", type=int, default=200)
    ap.add_argument("--http-concurrency", type=int, default=8)
    ap.add_argument("--out", default=str(HERE / "results" / "llm_throughput"))
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    reps = 1 if args.quick else args.reps
    tok = tiny_tokenizer()
    results = {"machine": machine_info(), "n_prompts": args.n, "new_tokens": args.new_tokens,
               "threads": torch.get_num_threads(), "throughput": {}, "graph_llm": None}
    lines = ["# LLM generation throughput and GraphLLM stage costs\n", header_markdown(),
             f"load average at start: {os.getloadavg()[0]:.1f} (a shared machine: timings are noisy)\n",
             f"torch threads: {torch.get_num_threads()}; {args.n} prompts x {args.new_tokens} new tokens "
             f"(EOS ignored), greedy, float32 CPU, best of {reps}. Random weights (speed only).\n",
             "| model | batch | rasfast HFCausalLM s | tokens/s | transformers generate s | tokens/s |",
             "|---|---:|---:|---:|---:|---:|"]
    ratios = []
    for name, cfg in CONFIGS.items():
        if args.quick and not name.startswith("tiny"):
            continue
        rows = throughput(tok, cfg, args.n, args.new_tokens, reps)
        results["throughput"][name] = rows
        for r in rows:
            lines.append(f"| {name} | {r['batch']} | {r['ours_s']:.3f} | {r['ours_tok_s']:.0f} | "
                         f"{r['hf_s']:.3f} | {r['hf_tok_s']:.0f} |")
            print(lines[-1], flush=True)
        b1, b16 = rows
        ratios.append(f"- {name}: batch {args.n} is {b1['ours_s'] / b16['ours_s']:.1f}x batch 1 (rasfast), "
                      f"{b1['hf_s'] / b16['hf_s']:.1f}x (transformers)")
    lines += [""] + ratios
    print("\n".join(ratios))
    per_enc = graph_llm_trace(tok, args.n, 8, 384, reps)
    results["graph_llm"] = per_enc
    lines += ["\n## GraphLLM planner calls: per-stage time\n",
              f"{args.n} questions per call x {reps} calls, 3 subgraphs each (12 nodes, 16 triples -> 32 edges), "
              "node/edge dim 384, graph encoder = 3 x TransformerConv (8 heads x 128) + LayerNorm/ReLU + mean "
              "pool (same weights for both encoders; rasfast's subgraph cache cleared before each call), "
              "projector 1024 -> 2048 -> 64, tiny Llama (h64, 2 layers), 8 new tokens.\n",
              "| graph encoder | stage | calls | total s | mean ms / call | share |", "|---|---|---:|---:|---:|---:|"]
    for enc_name, stages in per_enc.items():
        total = sum(v["total_s"] for v in stages.values())
        for k, v in stages.items():
            lines.append(f"| {enc_name} | {k} | {v['count']} | {v['total_s']:.3f} | {v['mean_ms']:.1f} | "
                         f"{100 * v['total_s'] / total:.0f}% |")
    if len(per_enc) == 2:
        a, b = (per_enc[k]["graph_llm.graph_encode"]["total_s"] for k in per_enc)
        lines.append(f"\ngraph encoding: rasfast.GraphEncoder is {a / b:.1f}x faster than PyG here\n")
    print("\n".join(lines[-(2 + sum(len(v) for v in per_enc.values())):]))
    load_http = os.getloadavg()[0]
    conn_rows, iso_rows = http_client(args.http_requests, args.http_concurrency, reps)
    results["openai_chat"] = {"connections": conn_rows, "partial_failure": iso_rows}
    n_http = args.http_requests
    lines += ["\n## OpenAIChat over the scripted local HTTP server\n",
              f"{n_http} chat requests per batch (echo replies, localhost, no model: this isolates the client's "
              f"HTTP cost), best of {reps} batches; connections = TCP connections the server accepted for "
              "those batches. `keep_alive=False` opens one connection per request, as the client did before "
              "(then through urllib; here through the same http.client code, so the difference is the "
              f"connection reuse alone). Load average at the start of this section: {load_http:.1f} on 2 cores "
              "shared with other engineers' work.\n",
              "| concurrency | keep-alive | s / batch | requests/s | requests | connections |",
              "|---:|---|---:|---:|---:|---:|"]
    for r in conn_rows:
        lines.append(f"| {r['concurrency']} | {'yes' if r['keep_alive'] else 'no'} | {r['s']:.3f} | "
                     f"{r['req_per_s']:.0f} | {r['requests']} | {r['connections']} |")
    for a, b in zip(conn_rows[::2], conn_rows[1::2]):
        lines.append(f"\nconcurrency {a['concurrency']}: keep-alive is {a['s'] / b['s']:.2f}x the requests/s "
                     "of one connection per request")
    lines += [f"\nOne prompt of {n_http} always fails (HTTP 400), the batch isolated by "
              f"`call_isolated(concurrency={args.http_concurrency})`:\n",
              "| mode | chat requests sent | s |", "|---|---:|---:|"]
    lines += [f"| {r['mode']} | {r['requests']} | {r['s']:.3f} |" for r in iso_rows]
    print("\n".join(lines[-(len(conn_rows) * 2 + 10):]))
    pathlib.Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    pathlib.Path(args.out + ".md").write_text("\n".join(lines) + "\n")
    pathlib.Path(args.out + ".json").write_text(json.dumps(results, indent=2, default=str))
    print(f"wrote {args.out}.md")


if __name__ == "__main__":
    main()
