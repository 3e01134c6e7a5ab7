"""benchmarks/results/qa_local.md: every system through one reader, on held-out questions.

Runs no model: it reads the `rasfast eval qa` per-question records (the cache the runs wrote,
or the compressed copies kept in benchmarks/results/qa_records) and writes the tables:

- the held-out table (default questions 51-100; 1-50 were the only ones prompts could be
  looked at on): EM, F1, the paired bootstrap 95% interval of F1 against dense RAG over the
  same questions, answer retrieved / answer shown, what the reader was shown, prompt tokens,
  LLM calls and seconds per question; rasfast's own variants labelled as such;
- KiRAG against dense at the same k (3 and 5), zero-shot and with the aligner trained on
  questions 1-50 (the frozen protocol);
- where each system lost its questions: not retrieved / retrieved but not shown / shown but
  misread / correct;
- the share of replies per LLM role that did not have the asked-for form;
- "before": the previous round's records (benchmarks/results/qa_local_records, each system
  with its own reader) over the same held-out questions.

    .venv/bin/python benchmarks/qa_local_report.py --cache-dir benchmarks/results/qa_records \\
        [--datasets musique hotpotqa] [--questions 51-100] [--aligner [DATASET=]DIR_OR_ID ...]
"""
from __future__ import annotations

import argparse
import json
import os
import pathlib
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from machine import header_markdown, machine_info  # noqa: E402

RESULTS = pathlib.Path(__file__).resolve().parent / "results"
BEFORE = RESULTS / "qa_local_records"
# (system, base retriever): GEAR runs on its paper's hybrid base, the others on dense
MAIN = [("none", "dense"), ("dense", "dense"), ("ras", "dense"), ("gear", "hybrid"), ("kirag", "dense"),
        ("structrag", "dense"), ("ras+passages", "dense"), ("ras-passages", "dense"), ("structrag-chunk", "dense")]


def _report(ds, systems, cache, label, questions, retriever="dense", k=5, aligner=None, reader_prompts=None):
    from rasfast.qa_eval import report_qa
    return report_qa(ds, systems, label, cache_dir=cache, questions=questions, retriever=retriever, k=k,
                     kirag_aligner=aligner, n_ctx=8192, reader_prompts=reader_prompts)


def _reader_prompts(value):
    """``--reader-prompts``: "round3" (the committed records' reader, before the yes/no rule),
    "current" (the reader as the code has it now) or a signature."""
    from rasfast.qa_eval.config import READER_PROMPTS_ROUND3
    return {"round3": READER_PROMPTS_ROUND3, "current": None}.get(value, value)


def _merge(parts):
    rows, recs, missing = [], {}, {}
    for p in parts:
        rows += p["rows"]
        recs.update(p["records"])
        missing.update(p["missing"])
    return rows, recs, missing


def before_rows(ds, questions):
    """The previous round's records over the same questions (each system its own reader)."""
    from rasfast.qa_eval.records import RecordFile
    from rasfast.qa_eval.run import _records, _select, parse_questions
    from rasfast.qa_eval.tables import paired_against, summarise
    qs = _select(ds.questions, parse_questions(questions, None))
    recs = {}
    for f in sorted(BEFORE.glob(f"{ds.name}-*.jsonl")):
        system = f.name[len(ds.name) + 1:].split("-local_")[0]
        got = _records(qs, RecordFile(f).load())
        if got:
            recs[system] = got
    return [summarise(s, r, 5) for s, r in recs.items()], paired_against(recs)


def aligners_by_dataset(values, datasets):
    """``--aligner`` values -> {dataset: aligner or None}. An aligner trained on one dataset's
    tuning questions is that dataset's; the others' KiRAG rows use the zero-shot encoder."""
    got = {d: None for d in datasets}
    for v in values:
        name, sep, al = v.partition("=")
        if not sep:
            got = {d: v for d in datasets}
        elif name not in got:
            raise SystemExit(f"--aligner: {name!r} is not one of --datasets {' '.join(datasets)}")
        else:
            got[name] = al
    return got


def f3(x):
    return "–" if x is None else f"{x:.3f}"


def pct(x):
    return "–" if x is None else f"{100 * x:.0f}%"


BLOCK = "<!-- qa_local_report: {} -->"
BLOCK_END = "<!-- /qa_local_report -->"


def blocks_for(name, args_questions, cache, label, aligner, reader_prompts="round3"):
    """The generated tables of one dataset: [(block name, heading, [lines])], and its JSON.
    ``reader_prompts``: which reader the records were read with (:func:`_reader_prompts`)."""
    from rasfast.data.qa import load_dataset
    from rasfast.qa_eval import LABELS
    from rasfast.qa_eval.records import STAGE_LABELS, STAGES
    from rasfast.qa_eval.tables import ANSWER_DEPTHS, paired_against
    ds = load_dataset(name)
    rp = _reader_prompts(reader_prompts)
    out = []
    # KiRAG's row uses the trained aligner when one is given (the frozen protocol), else MiniLM
    parts = [_report(ds, [s for s, r in MAIN if r == ret], cache, label, args_questions, ret, aligner=aligner,
                     reader_prompts=rp)
             for ret in ("dense", "hybrid")]
    rows, recs, missing = _merge(parts)
    order = [s for s, _ in MAIN]
    rows.sort(key=lambda r: order.index(r["system"]))
    paired = paired_against(recs)
    d = {"rows": rows, "paired": paired, "missing": missing}

    def label_of(system):
        return LABELS[system] + (" (aligner trained on 1–50)" if system == "kirag" and aligner else "")
    md = ["| system | retriever | n | EM | F1 | F1 − dense [95% CI] | answer retrieved | answer shown "
          "| shown: passages / triples | prompt tok/q | calls/q | s/q |",
          "|---|---|---:|---:|---:|---|---:|---:|---|---:|---:|---:|"]
    for r in rows:
        p = paired.get(r["system"])
        ci = "–" if r["system"] == "dense" or not p or not p["n"] else \
            f"{p['mean']:+.3f} [{p['lo']:+.3f}, {p['hi']:+.3f}]"
        ret = dict(MAIN)[r["system"]] if r["system"] not in ("none", "dense") else ("–" if r["system"] == "none" else "dense")
        sp, st = r["shown_passages_per_q"], r["shown_triples_per_q"]
        md.append(f"| {label_of(r['system'])} | {ret} | {r['n']} | {r['em']:.3f} | {r['f1']:.3f} | {ci} "
                  f"| {pct(r['answer_retrieved'])} | {pct(r['answer_shown'])} "
                  f"| {'–' if sp is None else f'{sp:.1f}'} / {'–' if st is None else f'{st:.1f}'} "
                  f"| {r['prompt_tokens_per_q']:,.0f} | {r['llm_calls_per_q']:.1f} | {r['seconds_per_q']:.0f} |")
    absent = [s for s, m in missing.items() if m]
    if absent:
        md += ["", "Not complete: " + ", ".join(f"{s} ({missing[s]} questions missing)" for s in absent) + "."]
    out.append(("main", f"## {name}, questions {args_questions}: every system through the reader contract", md))
    # retrieval at equal depth: what each system could have shown
    md = ["| system | passages ranked/q | answer in any passage retrieved | "
          + " | ".join(f"answer in first {n}" for n in ANSWER_DEPTHS) + " | answer shown |",
          "|---|---:|---:|" + "---:|" * len(ANSWER_DEPTHS) + "---:|"]
    for r in rows:
        if r["system"] == "none":
            continue
        depth = "–" if r["ranked_per_q"] is None else f"{r['ranked_per_q']:.1f}"
        md.append(f"| {label_of(r['system'])} | {depth} "
                  f"| {pct(r['answer_retrieved'])} | " + " | ".join(pct(r[f"answer@{n}"]) for n in ANSWER_DEPTHS)
                  + f" | {pct(r['answer_shown'])} |")
    out.append(("depth", f"### {name}: the answer in the first 5, 10 and 20 distinct passages each system ranked", md))
    # KiRAG at k = 3 and 5, zero-shot and trained aligner
    md = ["| k | aligner | n | dense F1 | KiRAG F1 | KiRAG − dense [95% CI] | KiRAG R@k | dense R@k |",
          "|---:|---|---:|---:|---:|---|---:|---:|"]
    d["kirag"] = []
    for k in (3, 5):
        for al in (None, aligner):
            rep = _report(ds, ["dense", "kirag"], cache, label, args_questions, "dense", k=k, aligner=al,
                          reader_prompts=rp)
            got = {r["system"]: r for r in rep["rows"]}
            if "kirag" in got and "dense" in got:
                p = rep["paired"]["kirag"]
                row = {"k": k, "aligner": "trained on 1-50" if al else "zero-shot (MiniLM)", "n": got["kirag"]["n"],
                       "dense_f1": got["dense"]["f1"], "kirag_f1": got["kirag"]["f1"], "paired": p,
                       "kirag_recall": got["kirag"][f"recall@{k}"], "dense_recall": got["dense"][f"recall@{k}"]}
                d["kirag"].append(row)
                md.append(f"| {k} | {row['aligner']} | {row['n']} | {row['dense_f1']:.3f} | {row['kirag_f1']:.3f} "
                          f"| {p['mean']:+.3f} [{p['lo']:+.3f}, {p['hi']:+.3f}] | {f3(row['kirag_recall'])} "
                          f"| {f3(row['dense_recall'])} |")
            if aligner is None:
                break
    if not d["kirag"]:   # no header without rows: say that nothing ran
        md = ["No KiRAG records for these settings (k = 3 or 5 against dense) yet."]
    out.append(("kirag", f"### {name}: KiRAG against dense RAG at the same k (KiRAG's protocol: same reader, same k)", md))
    md = ["| system | " + " | ".join(STAGE_LABELS[s] for s in STAGES) + " |", "|---|" + "---:|" * len(STAGES)]
    for r in rows:
        md.append(f"| {LABELS[r['system']]} | " + " | ".join(str(r["stages"][s]) for s in STAGES) + " |")
    out.append(("stages", f"### {name}: where the questions were lost", md))
    md = []
    for r in rows:
        pf = ", ".join(f"{role} {v['unparsed']}/{v['replies']}" for role, v in r["parse_failures"].items())
        md.append(f"- {LABELS[r['system']]}: {pf or '–'}")
    out.append(("parse", f"### {name}: replies without the asked-for form (unparsed / replies)", md))
    brows, bpaired = before_rows(ds, args_questions)
    d["before"] = {"rows": brows, "paired": bpaired}
    if brows:
        md = ["| system | n | EM | F1 | F1 − dense [95% CI] | prompt tok/q |", "|---|---:|---:|---:|---|---:|"]
        for r in brows:
            p = bpaired.get(r["system"])
            ci = "–" if r["system"] == "dense" or not p else f"{p['mean']:+.3f} [{p['lo']:+.3f}, {p['hi']:+.3f}]"
            md.append(f"| {r['system']} | {r['n']} | {r['em']:.3f} | {r['f1']:.3f} | {ci} | {r['prompt_tokens_per_q']:,.0f} |")
        out.append(("before", f"### {name}, before this round: the same questions, each system with its own reader", md))
    return [(f"{name} {b}", h, lines) for b, h, lines in out], d


def _marker_name(line):
    head = BLOCK.format("")[:-len("-->")].rstrip()
    if line.startswith(head) and line.rstrip().endswith("-->"):
        return line.rstrip()[len(head):-len("-->")].strip()
    return None


def update_file(path, blocks):
    """Replaces, in ``path``, the lines between each ``<!-- qa_local_report: NAME -->`` marker
    and the next ``<!-- /qa_local_report -->`` with block NAME's fresh lines; returns the
    names of the blocks the file has no marker for. The prose around them is kept."""
    text = pathlib.Path(path).read_text().split("\n")
    fresh = {name: lines for name, _, lines in blocks}
    out, i, seen = [], 0, set()
    while i < len(text):
        out.append(text[i])
        name = _marker_name(text[i])
        if name in fresh:
            j = text.index(BLOCK_END, i + 1)
            out += fresh[name] + [BLOCK_END]
            seen.add(name)
            i = j
        i += 1
    pathlib.Path(path).write_text("\n".join(out))
    return [n for n in fresh if n not in seen]


def committed_blocks(path):
    """{block name: its lines} as ``path`` holds them."""
    text = pathlib.Path(path).read_text().split("\n")
    got, i = {}, 0
    while i < len(text):
        name = _marker_name(text[i])
        if name is not None:
            j = text.index(BLOCK_END, i + 1)
            got[name] = text[i + 1:j]
            i = j
        i += 1
    return got


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cache-dir", default=str(RESULTS / "qa_records"))
    ap.add_argument("--datasets", nargs="+", default=["musique", "hotpotqa"])
    ap.add_argument("--questions", default="51-100")
    ap.add_argument("--aligner", nargs="*", default=[],
                    help="the KiRAG aligner trained on questions 1-50 (a directory or content id); "
                         "DATASET=... names the dataset it was trained on, a bare value applies to every dataset")
    ap.add_argument("--llm", default="local")
    ap.add_argument("--reader-prompts", default="round3",
                    help="the reader the records were read with: round3 (the committed records, before the "
                         "yes/no answer-shape rule of issue 40 C), current, or a reader prompt signature")
    ap.add_argument("--out", default=str(RESULTS / "qa_local"))
    ap.add_argument("--update", metavar="MD",
                    help="rewrite the generated tables inside MD (between its <!-- qa_local_report: NAME --> "
                         "markers), keeping the prose around them")
    args = ap.parse_args(argv)
    from rasfast.qa_eval import llm_label
    cache, label = pathlib.Path(args.cache_dir), llm_label(args.llm)
    aligners = aligners_by_dataset(args.aligner, args.datasets)
    out = {"machine": machine_info(), "llm": label, "questions": args.questions, "datasets": {}}
    md, blocks = [], []
    for name in args.datasets:
        bl, d = blocks_for(name, args.questions, cache, label, aligners[name], args.reader_prompts)
        for bname, heading, lines in bl:
            md += [heading, "", BLOCK.format(bname), *lines, BLOCK_END, ""]
        blocks += bl
        out["datasets"][name] = d
    text = "\n".join(md)
    pathlib.Path(args.out + ".json").write_text(json.dumps(out, indent=1, default=str))
    if args.update:
        left = update_file(args.update, blocks)
        if left:
            print(f"{args.update}: no marker for {', '.join(left)}", file=sys.stderr)
    print(header_markdown() + "\n\n" + text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
