"""How often a model-free triple extractor keeps a HotpotQA answer: per question, is the gold
answer (or an alias) in the text of the question's gold passages, and is it in those
passages' triples? Yes/no questions are left out. Questions 1-50 are the tuning half (where
sentence-patterns-2's patterns were chosen), 51-100 are held out. No model; a few seconds.

    .venv/bin/python benchmarks/triples_answer_kept.py [--out benchmarks/results/triples_answer_kept]
"""
from __future__ import annotations

import argparse
import json
import os
import pathlib
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from machine import header_markdown, machine_info  # noqa: E402

HERE = pathlib.Path(__file__).resolve().parent


def kept(ds, triples_by_pid, lo: int, hi: int):
    from rasfast.qa_eval.records import answer_in_text
    by = {p.pid: p for p in ds.passages}
    n_text = n_triples = 0
    lost = []
    for q in ds.questions[lo:hi]:
        golds = [q.answer] + list(q.aliases or [])
        if any(g.strip().lower() in ("yes", "no") for g in golds):
            continue
        text = " ".join(by[pid].text for pid in q.gold_pids)
        trip = " . ".join(" ".join(t) for pid in q.gold_pids for t in triples_by_pid[pid])
        a, b = answer_in_text(golds, text), answer_in_text(golds, trip)
        n_text += bool(a)
        n_triples += bool(b)
        if a and not b:
            lost.append(q.answer)
    return {"questions": f"{lo + 1}-{hi}", "answer_in_passages": n_text, "answer_in_triples": n_triples,
            "lost": lost}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=str(HERE / "results" / "triples_answer_kept"))
    ap.add_argument("--data-root", default=None)
    a = ap.parse_args(argv)
    from rasfast.data.qa import load_dataset
    from rasfast.qa_eval.run import DATASETS
    from rasfast.qa_eval.systems import MODEL_FREE, model_free_triples
    ds = load_dataset(DATASETS["hotpotqa"], a.data_root)
    res = {"machine": machine_info(), "dataset": "hotpotqa", "extractors": {}}
    lines = ["# Model-free triples: is a HotpotQA answer kept?\n", header_markdown(),
             "Questions whose gold answer is in the text of their gold passages, and of those, whose "
             "answer is also in the passages' triples (yes/no questions left out). 1-50: tuning "
             "(sentence-patterns-2 was written against these), 51-100: held out.\n",
             "| extractor | triples/passage | 1-50: in passages | 1-50: in triples | 51-100: in passages | "
             "51-100: in triples |", "|---|---:|---:|---:|---:|---:|"]
    for name in MODEL_FREE:
        got = model_free_triples(ds, name)
        by_pid = {p.pid: t for p, t in zip(ds.passages, got)}
        halves = [kept(ds, by_pid, 0, 50), kept(ds, by_pid, 50, 100)]
        per = sum(map(len, got)) / len(got)
        res["extractors"][name] = {"triples_per_passage": per, "halves": halves}
        lines.append(f"| {name} | {per:.1f} | {halves[0]['answer_in_passages']} | {halves[0]['answer_in_triples']} | "
                     f"{halves[1]['answer_in_passages']} | {halves[1]['answer_in_triples']} |")
    lines.append("")
    for name, r in res["extractors"].items():
        for h in r["halves"]:
            lines.append(f"- {name}, {h['questions']}: lost in extraction: "
                         + (", ".join(f"`{x}`" for x in h["lost"]) or "none"))
    pathlib.Path(a.out + ".md").write_text("\n".join(lines) + "\n")
    pathlib.Path(a.out + ".json").write_text(json.dumps(res, indent=1))
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
