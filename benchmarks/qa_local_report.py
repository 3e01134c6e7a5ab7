"""Tables for benchmarks/results/qa_local.md from the `rasfast eval qa` per-question cache.

Runs no model: it reads the cached records (`rasfast eval qa --report` does the same for one
table) and adds what a single table does not show:

- every system over the *same* questions (the first N that all of them have finished);
- paired differences against dense RAG: questions won / lost / tied on F1, and a paired
  bootstrap 95% interval of the F1 difference (10,000 resamples, seed 0);
- "answer in context": the share of questions where a gold answer (or alias), SQuAD-normalised,
  occurs as whole words in the normalised title + text of a passage the system returned (for
  RAS, every round's passages; its answerer reads their triples) -- retrieval reached the
  answer, so what is lost beyond that is the reader's (or the triples');
- seconds per question as median and mean; StructRAG's routed structure types.

Usage: .venv/bin/python benchmarks/qa_local_report.py --dataset musique \
           --systems none,dense,ras,gear,kirag,structrag --limit 100 [--llm local]
"""
from __future__ import annotations

import argparse
import random
import statistics
from collections import Counter


def paired(a, b, n_boot=10_000, seed=0):
    """(wins, losses, ties, mean diff, lo, hi): system a's F1 minus b's over the same questions."""
    d = [x - y for x, y in zip(a, b)]
    rng = random.Random(seed)
    n = len(d)
    boots = sorted(sum(d[rng.randrange(n)] for _ in range(n)) / n for _ in range(n_boot))
    return (sum(x > 0 for x in d), sum(x < 0 for x in d), sum(x == 0 for x in d), sum(d) / n,
            boots[int(0.025 * n_boot)], boots[int(0.975 * n_boot) - 1])


def main(argv=None) -> int:
    from rasfast.data.qa import load_dataset
    from rasfast.qa_eval import DATASETS, _load_done, _records, _settings_key, llm_label, summarise
    from rasfast.llm.local import cache_dir
    from rasfast.systems.ras.metrics import normalize_answer

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dataset", required=True, choices=sorted(DATASETS))
    ap.add_argument("--systems", default="none,dense,ras,gear,kirag,structrag")
    ap.add_argument("--limit", type=int, default=100)
    ap.add_argument("--llm", default="local")
    ap.add_argument("--k", type=int, default=5)
    ap.add_argument("--max-iters", type=int, default=5)
    ap.add_argument("--cache-dir", default=None)
    ap.add_argument("--data-root", default=None)
    args = ap.parse_args(argv)

    ds = load_dataset(DATASETS[args.dataset], args.data_root)
    cache = cache_dir() / "eval_qa" if args.cache_dir is None else __import__("pathlib").Path(args.cache_dir)
    label = llm_label(args.llm)
    qs = ds.questions[:args.limit]
    done = {}
    for name in [s.strip() for s in args.systems.split(",") if s.strip()]:
        got = _load_done(cache / _settings_key(ds.name, name, label, args.k, args.max_iters))
        if any(q.qid in got for q in qs):
            done[name] = got
    # the first N questions every listed system has finished
    n = 0
    while n < len(qs) and all(qs[n].qid in d for d in done.values()):
        n += 1
    qs = qs[:n]
    # padded with spaces so that an answer matches whole words only ("1" is not in "1999")
    text = {p.pid: f" {normalize_answer(f'{p.title} {p.text}')} " for p in ds.passages}
    k = args.k

    print(f"### {ds.name}: the first {n} questions, every system\n")
    print("| system | n | EM | F1 | R@5 | answer in context | F1 where in context | LLM calls/q | prompt tok/q "
          "| gen tok/q | s/q median | s/q mean | errors |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    recs = {name: _records(qs, d) for name, d in done.items()}
    for name, rs in recs.items():
        row = summarise(name, rs, k)
        golds = [[f" {g} " for g in map(normalize_answer, q.answers) if g] for q in qs]
        in_ctx = [any(g in text[pid] for g in gs for pid in r.get("passages") or []) for gs, r in zip(golds, rs)]
        hit = [r["f1"] for r, c in zip(rs, in_ctx) if c]
        ctx = "- | -" if name == "none" else \
            f"{sum(in_ctx) / len(in_ctx):.2f} | {(sum(hit) / len(hit)) if hit else 0:.3f}"
        rk = row[f"recall@{k}"]
        print(f"| {name} | {row['n']} | {row['em']:.3f} | {row['f1']:.3f} | {'-' if rk is None else f'{rk:.3f}'} "
              f"| {ctx} | {row['llm_calls_per_q']:.1f} | {row['prompt_tokens_per_q']:.0f} "
              f"| {row['completion_tokens_per_q']:.0f} | {statistics.median(r['seconds'] for r in rs):.1f} "
              f"| {row['seconds_per_q']:.1f} | {row['errors']} |")
    print("\nParse failures (unparsed / replies):")
    for name, rs in recs.items():
        pf = summarise(name, rs, k)["parse_failures"]
        print(f"- {name}: " + ", ".join(f"{role} {v['unparsed']}/{v['replies']}" for role, v in pf.items()))
    if "dense" in recs:
        print(f"\nPaired against dense RAG, F1 per question ({n} questions; 95% paired bootstrap interval):\n")
        print("| system | higher | lower | same | mean F1 difference | 95% interval |")
        print("|---|---|---|---|---|---|")
        base = [r["f1"] for r in recs["dense"]]
        for name, rs in recs.items():
            if name == "dense":
                continue
            w, lo_, t, m, lo, hi = paired([r["f1"] for r in rs], base)
            print(f"| {name} | {w} | {lo_} | {t} | {m:+.3f} | [{lo:+.3f}, {hi:+.3f}] |")
    if "structrag" in recs:
        kinds = Counter(r.get("structure", "not recorded") for r in recs["structrag"])
        fb = sum(1 for r in recs["structrag"] if r.get("route_fallback"))
        print("\nStructRAG's routed structure types: "
              + ", ".join(f"{kind} {c}" for kind, c in kinds.most_common())
              + f" (router replies naming no type, fallback used: {fb})")
        by_kind = {}
        for r in recs["structrag"]:
            by_kind.setdefault(r.get("structure", "not recorded"), []).append(r["f1"])
        print("F1 by structure type: " + ", ".join(f"{kind} {sum(v) / len(v):.3f} (n={len(v)})"
                                                    for kind, v in sorted(by_kind.items())))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
