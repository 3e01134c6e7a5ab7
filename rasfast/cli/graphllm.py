"""CLI of the GraphLLM (issue 41): ``rasfast graphllm data`` builds the paper's training data,
``rasfast graphllm train`` trains the graph encoder + projector + LoRA on a base model.

Heavy imports (transformers, the data) happen inside the handlers, so building the parser
stays cheap.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from typing import List, Optional, Tuple

from .errors import int_at_least, positive_float, positive_int


def _range(text: str) -> Optional[Tuple[int, int]]:
    """``A-B`` (1-based, inclusive) or ``none``."""
    if text.strip().lower() in ("none", "0", ""):
        return None
    a, sep, b = text.partition("-")
    try:
        lo, hi = int(a), int(b if sep else a)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected A-B (e.g. 1-50) or none, got {text!r}") from None
    if lo < 1 or hi < lo:
        raise argparse.ArgumentTypeError(f"expected A-B with 1 <= A <= B, got {text!r}")
    return lo, hi


def _seeds(text: str) -> List[int]:
    try:
        out = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}") from None
    if not out:
        raise argparse.ArgumentTypeError("expected at least one seed")
    return out


def _threads(args) -> None:
    if getattr(args, "threads", None):
        import torch
        torch.set_num_threads(args.threads)


def add_parser(subparsers) -> None:
    """Registers ``rasfast graphllm data|train``."""
    g = subparsers.add_parser("graphllm", help="RAS's GraphLLM: build its training data, train it")
    gs = g.add_subparsers(dest="graphllm_command", required=True)

    d = gs.add_parser("data", help="planner/answerer samples as the paper builds them (JSONL + statistics)")
    d.add_argument("--out", required=True, help="directory for train.jsonl, heldout.jsonl, stats.json, stats.md")
    d.add_argument("--musique", type=_range, default=(1, 50), metavar="A-B", help="MuSiQue questions for training (1-50; none)")
    d.add_argument("--hotpotqa", type=_range, default=(1, 50), metavar="A-B", help="HotpotQA questions for training (1-50; none)")
    d.add_argument("--heldout-musique", type=_range, default=(51, 100), metavar="A-B",
                   help="MuSiQue questions written to heldout.jsonl (51-100; none)")
    d.add_argument("--heldout-hotpotqa", type=_range, default=(51, 100), metavar="A-B",
                   help="HotpotQA questions written to heldout.jsonl (51-100; none)")
    d.add_argument("--world-seeds", type=_seeds, default=[1, 2, 3], help="generated worlds for training (1,2,3)")
    d.add_argument("--world-questions", type=int_at_least(0), default=1000, help="questions per training world (1000)")
    d.add_argument("--world-passages", type=int_at_least(100), default=2000, help="passages per world (2000)")
    d.add_argument("--heldout-seeds", type=_seeds, default=[1001], help="generated worlds for the held-out part (1001)")
    d.add_argument("--heldout-questions", type=int_at_least(0), default=400,
                   help="held-out world questions, none touching a training world's entities (400)")
    d.add_argument("--no-retrieval-check", default="base", choices=["base", "none"],
                   help="label [NO_RETRIEVAL] the questions the base model answers exactly without retrieval "
                        "(the paper's Algorithm 1), or skip the check")
    d.add_argument("--no-retrieval-sources", default="musique,hotpotqa",
                   help="the sources whose questions go to the check (musique,hotpotqa; 'all' adds the generated "
                        "world, whose fictional entities no base model knows: ~20 min for 3,000 questions on 2 cores)")
    d.add_argument("--no-retrieval-match", default="words", choices=["words", "em"],
                   help="correct = the gold as whole words in the reply (default; the small model answers in "
                        "sentences) or exact match (the paper's A^ = A)")
    d.add_argument("--arithmetic", type=int_at_least(0), default=150,
                   help="arithmetic questions offered to the [NO_RETRIEVAL] check (150)")
    d.add_argument("--base", default="smollm2", help="base model for the check and the token counts (smollm2)")
    d.add_argument("--data-root", default=None, help="../shared/data by default")
    d.add_argument("--threads", type=positive_int, default=None, help="torch CPU threads")
    d.add_argument("--quiet", dest="progress", action="store_false")
    d.set_defaults(func=cmd_data)

    t = gs.add_parser("train", help="train the graph encoder + projector + LoRA (multi-task, resumable)")
    t.add_argument("--data", required=True, help="a directory of `graphllm data` (its train.jsonl) or a JSONL file")
    t.add_argument("--out", required=True, help="run directory (weights, checkpoint/, loss curve)")
    t.add_argument("--base", default="smollm2", help="smollm2 | qwen2.5-coder-1.5b | PATH.gguf | a transformers directory")
    t.add_argument("--text-encoder", default="minilm", choices=["minilm", "hashing"], help="question graph features")
    t.add_argument("--graph-hidden", type=positive_int, default=256)
    t.add_argument("--graph-heads", type=positive_int, default=4)
    t.add_argument("--graph-layers", type=positive_int, default=2)
    t.add_argument("--projector-hidden", type=positive_int, default=2048)
    t.add_argument("--lora-r", type=int_at_least(0), default=8, help="LoRA rank (0: no adapter)")
    t.add_argument("--no-graph-token", dest="graph_token", action="store_false",
                   help="the paper's 'No GraphToken' variant: no soft token, LoRA only")
    t.add_argument("--no-chat-format", dest="chat_format", action="store_false",
                   help="plain instruction text instead of the base model's chat template")
    t.add_argument("--max-length", type=int_at_least(64), default=512)
    t.add_argument("--batch-size", type=positive_int, default=4)
    t.add_argument("--lr", type=positive_float, default=2e-4)
    t.add_argument("--warmup-steps", type=int_at_least(0), default=10)
    t.add_argument("--epochs", type=positive_int, default=1)
    t.add_argument("--max-steps", type=positive_int, default=None, help="stop after this many steps")
    t.add_argument("--limit", type=positive_int, default=None,
                   help="train on this many samples, drawn with --seed from the file (default: all)")
    t.add_argument("--sources", default=None, help="comma-separated sources to keep (world,musique,hotpotqa,arithmetic)")
    t.add_argument("--eval-n", type=int_at_least(0), default=0,
                   help="held-out samples (from heldout.jsonl beside the data) whose loss is measured before and after")
    t.add_argument("--seed", type=int, default=0)
    t.add_argument("--checkpoint-every", type=positive_int, default=25)
    t.add_argument("--no-resume", dest="resume", action="store_false", help="ignore an existing checkpoint/")
    t.add_argument("--device", default=None, help="cpu | cuda (default: cuda when available)")
    t.add_argument("--dtype", default="auto", help="auto (fp32 on CPU, bf16 on GPU) | float32 | bfloat16")
    t.add_argument("--threads", type=positive_int, default=None, help="torch CPU threads")
    t.add_argument("--quiet", dest="progress", action="store_false")
    t.set_defaults(func=cmd_train)


# -- data ---------------------------------------------------------------------------------------
def cmd_data(args) -> int:
    from ..systems.ras import graphllm_data as D
    _threads(args)
    os.makedirs(args.out, exist_ok=True)
    train, held, extractors = [], [], {}
    for name, fn, rng, hrng in (("musique", D.musique_chains, args.musique, args.heldout_musique),
                                ("hotpotqa", D.hotpotqa_chains, args.hotpotqa, args.heldout_hotpotqa)):
        if rng:
            if hrng and not (rng[1] < hrng[0] or hrng[1] < rng[0]):
                raise ValueError(f"--{name} {rng[0]}-{rng[1]} overlaps --heldout-{name} {hrng[0]}-{hrng[1]}")
            ch, extractors[name] = fn(rng[0], rng[1], args.data_root)
            train += ch
        if hrng:
            ch, extractors[name] = fn(hrng[0], hrng[1], args.data_root, split="heldout")
            held += ch
    if args.world_questions or args.heldout_questions:
        wt, wh = D.world_sources(args.world_seeds if args.world_questions else [], args.world_questions,
                                 args.heldout_seeds, args.heldout_questions, args.world_passages)
        train += wt
        held += wh
        extractors["world"] = "generated world gold triples"
    if not train:
        raise ValueError("no training questions: every source is set to none")
    tokenizer, nr = None, {"note": "no base model check: no [NO_RETRIEVAL] samples"}
    base_info = None
    if args.no_retrieval_check == "base":
        from ..llm.graph_llm import load_base_model
        from ..llm.hf import HFCausalLM
        print(f"loading the base model {args.base} for the [NO_RETRIEVAL] check ...", file=sys.stderr)
        model, tokenizer, base_info = load_base_model(args.base)
        llm = HFCausalLM(model, tokenizer, device=model.device, batch_size=32)
        answer = lambda qs: D.direct_answers(llm, qs, progress=args.progress)  # noqa: E731
        srcs = None if args.no_retrieval_sources == "all" else [
            x.strip() for x in args.no_retrieval_sources.split(",") if x.strip()]
        train, nr = D.apply_no_retrieval(train, D.arithmetic_questions(args.arithmetic), answer, args.progress,
                                         sources=srcs, match=args.no_retrieval_match)
    n_train = D.write_jsonl(train, os.path.join(args.out, "train.jsonl"))
    n_held = D.write_jsonl(held, os.path.join(args.out, "heldout.jsonl"))
    count, unit = D.token_counter(tokenizer)
    stats = {"unit": unit, "extractors": extractors, "no_retrieval_check": nr, "base": base_info,
             "sources": {}, "train": D.sample_statistics(D.samples_of(train), count),
             "heldout": D.sample_statistics(D.samples_of(held), count) if held else None,
             "files": {"train.jsonl": n_train, "heldout.jsonl": n_held}}
    for c in train + held:
        k = f"{c.split}/{c.source}"
        stats["sources"].setdefault(k, {"questions": 0, "samples": 0})
        stats["sources"][k]["questions"] += 1
        stats["sources"][k]["samples"] += len(D.chain_samples(c))
    with open(os.path.join(args.out, "stats.json"), "w") as f:
        json.dump(stats, f, indent=1)
    md = [D.format_statistics(stats["train"], f"Training data ({unit} of the {args.base} tokenizer)"
                              if tokenizer is not None else f"Training data (whitespace {unit})")]
    if held:
        md += ["", D.format_statistics(stats["heldout"], "Held-out data")]
    md += ["", "| split/source | questions | samples | triples from |", "|---|---:|---:|---|"]
    md += [f"| {k} | {v['questions']:,} | {v['samples']:,} | {extractors.get(k.split('/')[1], '-')} |"
           for k, v in sorted(stats["sources"].items())]
    if nr.get("checked"):
        md += ["", f"[NO_RETRIEVAL] check: the base model answered {nr['no_retrieval']} of {nr['checked']} questions "
                   f"correctly ({'exact match' if nr['match'] == 'em' else 'gold as whole words in the reply'}) without retrieval ({', '.join(f'{k} {v}' for k, v in sorted(nr['by_source'].items())) or 'none'}; "
                   f"{nr['arithmetic_offered']} arithmetic candidates offered"
                   + (f"; not checked: {', '.join(nr['sources_not_checked'])}" if nr.get('sources_not_checked') else "")
                   + ")"]
    else:
        md += ["", f"[NO_RETRIEVAL]: {nr['note']}"]
    text = "\n".join(md)
    with open(os.path.join(args.out, "stats.md"), "w") as f:
        f.write(text + "\n")
    print(text)
    print(f"\nwrote {n_train:,} training samples and {n_held:,} held-out samples to {args.out}")
    return 0


# -- train --------------------------------------------------------------------------------------
def _read_samples(path: str, sources: Optional[List[str]]):
    """Samples of a JSONL file with their ``source`` field (None when absent)."""
    from ..llm.training_data import GraphLLMSample
    out, src = [], []
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                d = json.loads(line)
                s = GraphLLMSample(d["task"], d["question"], d.get("context", []), d.get("graph"), d.get("target"))
            except (ValueError, KeyError, TypeError) as e:
                raise ValueError(f"{path}:{n}: bad sample ({e})") from None
            if sources and d.get("source") not in sources:
                continue
            if s.target is None:
                raise ValueError(f"{path}:{n}: a training sample needs a target")
            out.append(s)
            src.append(d.get("source"))
    return out, src


def cmd_train(args) -> int:
    import random
    from ..llm.graph_llm_train import TrainConfig, train
    _threads(args)
    path = os.path.join(args.data, "train.jsonl") if os.path.isdir(args.data) else args.data
    held_path = os.path.join(os.path.dirname(path), "heldout.jsonl")
    sources = [s.strip() for s in args.sources.split(",")] if args.sources else None
    samples, src = _read_samples(path, sources)
    if not samples:
        raise ValueError(f"{path}: no training samples" + (f" from sources {args.sources}" if sources else ""))
    n_all = len(samples)
    if args.limit and args.limit < len(samples):
        pick = sorted(random.Random(args.seed).sample(range(len(samples)), args.limit))
        samples, src = [samples[i] for i in pick], [src[i] for i in pick]
    evals = None
    if args.eval_n:
        if not os.path.isfile(held_path):
            raise FileNotFoundError(f"--eval-n: {held_path} not found")
        hs, _ = _read_samples(held_path, sources)
        evals = [hs[i] for i in sorted(random.Random(args.seed + 1).sample(range(len(hs)), min(args.eval_n, len(hs))))]
    cfg = TrainConfig(base=args.base, text_encoder=args.text_encoder, graph_hidden=args.graph_hidden,
                      graph_heads=args.graph_heads, graph_layers=args.graph_layers,
                      projector_hidden=args.projector_hidden, lora_r=args.lora_r, graph_token=args.graph_token,
                      chat_format=args.chat_format, max_length=args.max_length, batch_size=args.batch_size,
                      lr=args.lr, warmup_steps=args.warmup_steps, epochs=args.epochs, max_steps=args.max_steps,
                      seed=args.seed, checkpoint_every=args.checkpoint_every)
    by_src = {}
    for s in src:
        by_src[s or "?"] = by_src.get(s or "?", 0) + 1
    data_info = {"path": os.path.abspath(path), "samples": len(samples), "of": n_all, "by_source": by_src,
                 "plan": sum(s.task == "plan" for s in samples), "answer": sum(s.task == "answer" for s in samples)}
    print(f"training on {len(samples):,} of {n_all:,} samples ({', '.join(f'{k} {v}' for k, v in sorted(by_src.items()))}); "
          f"base {args.base}, graph token {'on' if args.graph_token else 'off'}", file=sys.stderr)
    run = train(samples, cfg, args.out, resume=args.resume, progress=args.progress, device=args.device,
                dtype=args.dtype, data_info=data_info, eval_samples=evals)
    ls = run["losses"]
    k = max(1, min(10, len(ls) // 4))
    print(f"trained {run['step']} steps ({run['samples_seen']:,} samples) in {run['train_seconds']:.1f} s: "
          f"loss {sum(ls[:k]) / k:.4f} (first {k}) -> {sum(ls[-k:]) / k:.4f} (last {k}); "
          f"{run['tokens_per_second']:.1f} input tokens/s on {run['torch_threads']} thread(s)")
    if run.get("eval_loss_after") is not None:
        print(f"held-out loss ({run['eval_samples']} samples): {run.get('eval_loss_before', float('nan')):.4f} -> "
              f"{run['eval_loss_after']:.4f}")
    print(f"saved to {args.out} (loss_curve.json{', loss_curve.png' if run.get('png') else ''}, checkpoint/)")
    return 0
