"""The reader's answer-shape rule on questions nobody looked at (issue 40 C).

Three rules, each the only change to the reader contract's prompt, dense RAG (MiniLM top 5)
with the local 1.5B model, greedy:

- ``entity``: round 3's rule ("only the entity or value the question asks for"), which lost
  every yes/no question of a held-out trial;
- ``one-rule``: the first fix, one rule naming both shapes ("yes or no if the question asks
  whether something is so ..., otherwise the entity or value"), which answered "yes" to
  HotpotQA 51, a "Which actress ...?" question;
- ``per-question`` (the reader now, :func:`rasfast.llm.reader.answer_shape`): the yes/no rule
  for a yes/no question, round 3's words for every other.

The per-question form was chosen after reading HotpotQA 51's reply, a held-out question, so
it is measured here on 2WikiMultihopQA questions from 101 on, which no one has read: the
first ``--n-yes-no`` yes/no questions and the first ``--n-other`` others
(:func:`rasfast.llm.reader.is_yes_no_question` sorts them; the selection reads no answer).
Each rule's records live in its own cache directory (``CACHE/RULE``; the corpus's index,
``CACHE/index``, is shared and not committed); ``--report`` prints the tables from them
without a model or an index (``rasfast.qa_eval.report_qa``). EM/F1 under 2Wiki's official
yes/no rule; paired 95% bootstrap intervals.

    .venv/bin/python benchmarks/answer_shape_rule.py --cache-dir DIR [--llm-threads 2]     # the reads
    .venv/bin/python benchmarks/answer_shape_rule.py --report \\
        --cache-dir benchmarks/results/answer_shape_records --out benchmarks/results/answer_shape_rule
"""
from __future__ import annotations

import argparse
import json
import os
import pathlib
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from machine import header_markdown, machine_info  # noqa: E402

ONE_RULE = ("Reply with only the answer, in a few words, with no explanation: yes or no if the "
            "question asks whether something is so (e.g. \"Are X and Y both ...?\", \"Is X ...?\"), "
            "otherwise the entity or value the question asks for (a name, a date, a number or a "
            "short phrase).")
RULES = ("entity", "one-rule", "per-question")


def shape_of(rule: str):
    from rasfast.llm import reader as R
    return {"entity": lambda q="": R.ANSWER_SHAPE, "one-rule": lambda q="": ONE_RULE,
            "per-question": R.answer_shape}[rule]


def pick(ds, start: int, n_yes_no: int, n_other: int):
    """The first ``n_yes_no`` yes/no questions and the first ``n_other`` others from 1-based
    question ``start`` on, by the question's words alone."""
    from rasfast.llm.reader import is_yes_no_question
    yn, other = [], []
    for i, q in enumerate(ds.questions[start - 1:], start):
        (yn if is_yes_no_question(q.question) else other).append((i, q))
    return yn[:n_yes_no], other[:n_other]


def run_rule(rule, ds, llm, label, cache: pathlib.Path):
    from rasfast.llm import reader as R
    from rasfast.qa_eval import evaluate_qa
    d = cache / rule
    d.mkdir(parents=True, exist_ok=True)
    (cache / "index").mkdir(exist_ok=True)
    if not (d / "index").exists():   # one knowledge index of the corpus for every rule
        (d / "index").symlink_to(pathlib.Path("..") / "index")
    keep = R.answer_shape
    R.answer_shape = shape_of(rule)
    try:
        out = evaluate_qa(ds, ["dense"], llm, label, cache_dir=d, progress=False,
                          log=lambda m: print(m, file=sys.stderr))
    finally:
        R.answer_shape = keep
    return {r["qid"]: r for r in out["records"]["dense"]}


def report_rule(rule, ds, label, cache: pathlib.Path, n_ctx: int):
    from rasfast.qa_eval import report_qa
    out = report_qa(ds, ["dense"], label, cache_dir=cache / rule, n_ctx=n_ctx)
    if out["missing"]["dense"]:
        raise SystemExit(f"{cache / rule}: {out['missing']['dense']} questions have no record (run without --report)")
    return {r["qid"]: r for r in out["records"]["dense"]}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dataset", default="2wikimultihopqa")
    ap.add_argument("--start", type=int, default=101, help="first question considered (1-based)")
    ap.add_argument("--n-yes-no", type=int, default=20)
    ap.add_argument("--n-other", type=int, default=20)
    ap.add_argument("--cache-dir", required=True)
    ap.add_argument("--llm-threads", type=int, default=2)
    ap.add_argument("--llm-ctx", type=int, default=8192)
    ap.add_argument("--out", help="write OUT.md and OUT.json")
    ap.add_argument("--report", action="store_true", help="print from the records only (no model runs)")
    args = ap.parse_args(argv)
    from rasfast.data.qa import QADataset, load_dataset
    from rasfast.llm.adapters import make_llm
    from rasfast.qa_eval.run import llm_label
    from rasfast.qa_eval.tables import paired_bootstrap
    full = load_dataset(args.dataset)
    yn, other = pick(full, args.start, args.n_yes_no, args.n_other)
    ds = QADataset(full.name, full.passages, [q for _, q in yn + other], full.triples)
    label = llm_label("local", None)
    cache = pathlib.Path(args.cache_dir)
    if args.report:
        recs = {rule: report_rule(rule, ds, label, cache, args.llm_ctx) for rule in RULES}
    else:
        llm = make_llm("local", None, None, "OPENAI_API_KEY", n_threads=args.llm_threads, n_ctx=args.llm_ctx)
        recs = {rule: run_rule(rule, ds, llm, label, cache) for rule in RULES}
    groups = {"yes/no": [q.qid for _, q in yn], "other": [q.qid for _, q in other]}
    rows, pairs = [], []
    for g, qids in groups.items():
        for rule in RULES:
            f1 = [recs[rule][q]["f1"] for q in qids]
            em = [recs[rule][q]["em"] for q in qids]
            answers = [str(recs[rule][q]["answer"] or "").strip().lower() for q in qids]
            rows.append({"questions": g, "rule": rule, "n": len(qids), "em": sum(em) / len(em), "f1": sum(f1) / len(f1),
                         "yes": answers.count("yes"), "no": answers.count("no"),
                         "replies": [recs[rule][q]["answer"] for q in qids]})
        for a, b in (("per-question", "entity"), ("per-question", "one-rule")):
            pb = paired_bootstrap([recs[a][q]["f1"] for q in qids], [recs[b][q]["f1"] for q in qids])
            pairs.append({"questions": g, "a": a, "b": b, **pb})
    ids = {g: [i for i, _ in sel] for g, sel in (("yes/no", yn), ("other", other))}
    gold_yes = sum(1 for _, q in yn if str(q.answer).strip().lower() == "yes")
    lines = [f"# The reader's answer-shape rule on questions nobody looked at ({full.name})", "",
             header_markdown(), "",
             "Printed by `benchmarks/answer_shape_rule.py --report` from its per-question records "
             f"(`{args.cache_dir}/RULE/`). Dense RAG (MiniLM top 5), local Qwen2.5-Coder-1.5B Q4_K_M, greedy, "
             f"{args.llm_threads} threads, n_ctx {args.llm_ctx}; EM/F1 with the dataset's official yes/no rule.",
             "", f"- yes/no questions: {', '.join(map(str, ids['yes/no']))} (gold: yes {gold_yes}, no {len(yn) - gold_yes})",
             f"- other questions: {', '.join(map(str, ids['other']))}", "",
             "| questions | rule | n | EM | F1 | answered yes / no / other |", "|---|---|---:|---:|---:|---|"]
    lines += [f"| {r['questions']} | {r['rule']} | {r['n']} | {r['em']:.3f} | {r['f1']:.3f} | "
              f"{r['yes']} / {r['no']} / {r['n'] - r['yes'] - r['no']} |" for r in rows]
    lines += ["", "Paired F1 differences (95% bootstrap interval, 10,000 resamples):", "",
              "| questions | a − b | mean | interval | a higher / lower / same |", "|---|---|---:|---|---|"]
    lines += [f"| {p['questions']} | {p['a']} − {p['b']} | {p['mean']:+.3f} | [{p['lo']:+.3f}, {p['hi']:+.3f}] | "
              f"{p['higher']} / {p['lower']} / {p['same']} |" for p in pairs]
    md = "\n".join(lines) + "\n"
    print(md)
    if args.out:
        out = pathlib.Path(args.out)
        out.with_suffix(".md").write_text(md)
        out.with_suffix(".json").write_text(json.dumps({"machine": machine_info(), "dataset": full.name,
                                                         "questions": ids, "rows": rows, "paired": pairs},
                                                        indent=1, default=str) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
