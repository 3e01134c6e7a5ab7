"""Markdown reports of ``rasfast eval qa --report --layout qa-local`` from the per-question
records (no model runs): the tables of ``benchmarks/results/qa_local.md``.

- the held-out table: several settings (system, base retriever) in one table: EM, F1, the
  paired bootstrap 95% interval of F1 against dense RAG over the same questions, answer
  retrieved / answer shown, what the reader was shown, prompt tokens, LLM calls and seconds
  per question; rasfast's own variants labelled as such;
- the answer in the first 5, 10 and 20 distinct passages each system ranked;
- KiRAG against dense at the same k (3 and 5), zero-shot and with a trained aligner (its
  directory or content id);
- where each system lost its questions; the share of replies per LLM role without the
  asked-for form;
- "before": a previous round's records (each system with its own reader), when given.

Each table sits between ``<!-- qa_local_report: NAME -->`` and ``<!-- /qa_local_report -->``
markers, so :func:`update_file` rewrites the tables of a results file and keeps its prose.
"""
from __future__ import annotations

import pathlib

# (system, base retriever): GEAR runs on its paper's hybrid base, the others on dense
MAIN = [("none", "dense"), ("dense", "dense"), ("ras", "dense"), ("gear", "hybrid"), ("kirag", "dense"),
        ("structrag", "dense"), ("ras+passages", "dense"), ("ras-passages", "dense"), ("structrag-chunk", "dense")]


def _report(ds, systems, cache, label, questions, retriever="dense", k=5, aligner=None, reader_prompts=None,
            n_ctx=None, encoder=None):
    from .run import report_qa
    return report_qa(ds, systems, label, cache_dir=cache, questions=questions, retriever=retriever, k=k,
                     kirag_aligner=aligner, n_ctx=n_ctx, reader_prompts=reader_prompts, encoder=encoder)


def reader_prompts_id(value):
    """``--reader-prompts``: "round3" (the committed records' reader, before the yes/no rule),
    "current" or None (the reader as the code has it now) or a signature."""
    from .config import READER_PROMPTS_ROUND3
    return {"round3": READER_PROMPTS_ROUND3, "current": None}.get(value, value)


def _merge(parts):
    rows, recs, missing = [], {}, {}
    for p in parts:
        rows += p["rows"]
        recs.update(p["records"])
        missing.update(p["missing"])
    return rows, recs, missing


def before_rows(ds, questions, before_dir):
    """The previous round's records (``before_dir``) over the same questions (each system its
    own reader)."""
    from .records import RecordFile
    from .run import _records, _select, parse_questions
    from .tables import paired_against, summarise
    if before_dir is None:
        return [], {}
    qs = _select(ds.questions, parse_questions(questions, None))
    recs = {}
    for f in sorted(pathlib.Path(before_dir).glob(f"{ds.name}-*.jsonl")):
        system = f.name[len(ds.name) + 1:].split("-local_")[0]
        got = _records(qs, RecordFile(f).load())
        if got:
            recs[system] = got
    return [summarise(s, r, 5) for s, r in recs.items()], paired_against(recs)


def aligners_by_dataset(values, datasets):
    """Aligner values (``DIR_OR_ID`` or ``DATASET=DIR_OR_ID``) -> {dataset: aligner or None}. An
    aligner trained on one dataset's tuning questions is that dataset's; the others' KiRAG rows
    use the zero-shot encoder. A bare value applies to every dataset."""
    got = {d: None for d in datasets}
    for v in values:
        name, sep, al = v.partition("=")
        if not sep:
            got = {d: v for d in datasets}
        elif name not in got:
            raise ValueError(f"--kirag-aligner: {name!r} is not one of the datasets {', '.join(datasets)}")
        else:
            got[name] = al
    return got


def f3(x):
    return "–" if x is None else f"{x:.3f}"


def pct(x):
    return "–" if x is None else f"{100 * x:.0f}%"


BLOCK = "<!-- qa_local_report: {} -->"
BLOCK_END = "<!-- /qa_local_report -->"


def blocks_for(name, args_questions, cache, label, aligner, reader_prompts=None, *, settings=MAIN,
               before_dir=None, data_root=None, n_ctx=None, encoder=None):
    """The generated tables of one dataset: [(block name, heading, [lines])], and its JSON.
    ``settings``: the (system, base retriever) pairs of the main table, several retrievers in
    one table; ``reader_prompts``: which reader the records were read with
    (:func:`reader_prompts_id`); ``before_dir``: the previous round's records, if any; ``n_ctx``:
    the LLM context the records were made with (the committed ones: 8192); ``encoder``: the text
    encoder's spec (default MiniLM)."""
    from ..data.qa import load_dataset
    from .records import STAGE_LABELS, STAGES
    from .systems import LABELS
    from .tables import ANSWER_DEPTHS, paired_against
    ds = load_dataset(name, data_root) if isinstance(name, str) else name
    name = ds.name
    settings = list(settings)
    rp = reader_prompts_id(reader_prompts)
    out = []
    # KiRAG's row uses the trained aligner when one is given (the frozen protocol), else MiniLM
    parts = [_report(ds, [s for s, r in settings if r == ret], cache, label, args_questions, ret, aligner=aligner,
                     reader_prompts=rp, n_ctx=n_ctx, encoder=encoder)
             for ret in dict.fromkeys(r for _, r in settings)]
    rows, recs, missing = _merge(parts)
    order = [s for s, _ in settings]
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
        ret = dict(settings)[r["system"]] if r["system"] not in ("none", "dense") else ("–" if r["system"] == "none" else "dense")
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
                          reader_prompts=rp, n_ctx=n_ctx, encoder=encoder)
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
    brows, bpaired = before_rows(ds, args_questions, before_dir)
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


def settings_text(settings) -> str:
    """(system, retriever) pairs as ``--systems`` writes them: ``gear@hybrid`` for a system on
    another retriever than dense."""
    return ",".join(s if r == "dense" else f"{s}@{r}" for s, r in settings)


__all__ = ["MAIN", "BLOCK", "BLOCK_END", "blocks_for", "before_rows", "aligners_by_dataset", "update_file",
           "committed_blocks", "reader_prompts_id", "settings_text"]
