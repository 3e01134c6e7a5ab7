"""A whole ``eval qa`` run as one page: the table with paired intervals against dense RAG,
where each system lost its questions (a stacked bar per system), and every question with
its gold, every system's answer and each system's full record page (collapsed).

Filtering to "dense right, system wrong" (or the reverse) is one click on a label and needs
no script: the labels check hidden radio buttons, and one CSS rule per filter hides the
questions without that filter's class.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple

from .charts import stage_bars
from .html import document, esc, fmt, slug, table
from .qgraph_svg import css as graph_css, shared_defs
from .record_page import PageContext, anchor_for, passages_html, record_section, referenced_pids

BASE = "dense"    # the system every other is compared with
# what keeps a 100-question, 6-system report small (well under 20 MB): the passage texts of a
# question are in its block once, for the passages a reader was shown, the gold ones and each
# step's first PAGE_TOP (the others are named, not linked); LLM texts are shown cut to
# CALL_CHARS in the middle (the record keeps 8,000)
PAGE_TOP = 5
CALL_CHARS = 2000


@dataclass
class EvalView:
    """What the page needs beyond the run's summary (``out``) and its records: the question
    order and texts, the corpus, the gold passages, and the attribution of a record to a
    failure stage and to right/wrong (from :mod:`rasfast.qa_eval.records`)."""
    questions: List[Dict[str, Any]]                       # [{"qid", "question", "gold"}] in order
    stage_of: Callable[[dict], str]
    correct: Callable[[dict], bool]
    stages: Sequence[str]
    stage_labels: Mapping[str, str]
    passages: Mapping[int, Any] = field(default_factory=dict)
    gold_pids: Mapping[str, Sequence[int]] = field(default_factory=dict)
    system_labels: Mapping[str, str] = field(default_factory=dict)
    notes: List[str] = field(default_factory=list)


def _settings_line(out: Mapping[str, Any]) -> str:
    keys = (("questions", "questions"), ("llm", "reader LLM"), ("reader", "reader"), ("prompt_style", "prompts"),
            ("retriever", "retriever"), ("encoder", "encoder"), ("k", "k"), ("max_iters", "RAS rounds"),
            ("gear_iters", "GEAR rounds"))
    return " · ".join(f"{label} <b>{esc(out[k])}</b>" for k, label in keys if out.get(k) is not None)


def _flip_counts(records: Mapping[str, List[dict]], correct) -> Dict[str, Dict[str, List[str]]]:
    """system -> {"dr": qids dense got right and it got wrong, "dw": the reverse}."""
    if BASE not in records:
        return {}
    base = {r["qid"]: correct(r) for r in records[BASE]}
    out = {}
    for name, recs in records.items():
        if name == BASE:
            continue
        dr, dw = [], []
        for r in recs:
            if r["qid"] not in base:
                continue
            mine = correct(r)
            if base[r["qid"]] and not mine:
                dr.append(r["qid"])
            elif mine and not base[r["qid"]]:
                dw.append(r["qid"])
        out[name] = {"dr": dr, "dw": dw}
    return out


def _flip_label(name: str, kind: str, flips: Mapping[str, Mapping[str, List[str]]]) -> str:
    """A count that, clicked, shows only its questions (the label of a filter radio)."""
    if name not in flips:
        return "–"
    return (f"<label for=\"f-{kind}-{slug(name)}\" title=\"show only these questions\">"
            f"{len(flips[name][kind])}</label>")


def results_table(out: Mapping[str, Any], flips: Mapping[str, Mapping[str, List[str]]],
                  labels: Optional[Mapping[str, str]] = None) -> str:
    k = out.get("k", 5)
    labels = labels or {}
    paired = out.get("paired") or {}
    head = ["system", "n", "EM", "F1", f"ΔF1 vs {BASE} [95%]", f"R@{k}", "ans. retrieved", "ans. shown", "calls/q",
            "tokens/q", "s/q", "errors", f"{BASE} ✓ system ✗", f"{BASE} ✗ system ✓"]
    rows = []
    for r in out.get("rows") or []:
        name = r["system"]
        p = paired.get(name)
        delta = (f"{p['mean']:+.3f} [{p['lo']:+.3f}, {p['hi']:+.3f}]" if p and p.get("n") else "–")
        tok = (r.get("prompt_tokens_per_q") or 0) + (r.get("completion_tokens_per_q") or 0)
        rows.append([f"<b title=\"{esc(labels.get(name, name))}\">{esc(name)}</b>", esc(r.get("n")),
                     fmt(r.get("em")), fmt(r.get("f1")), delta, fmt(r.get(f"recall@{k}")),
                     fmt(r.get("answer_retrieved"), ".2f"), fmt(r.get("answer_shown"), ".2f"),
                     fmt(r.get("llm_calls_per_q"), ".1f"), fmt(tok, ".0f"), fmt(r.get("seconds_per_q"), ".1f"),
                     esc(r.get("errors", 0)), _flip_label(name, "dr", flips), _flip_label(name, "dw", flips)])
    return table(head, rows, cls="results")


def _filters(systems: Sequence[str], flips: Mapping[str, Mapping[str, List[str]]], n: int) -> Tuple[str, str, str]:
    """(hidden radios, the filter bar, the CSS rules)."""
    radios = ["<input type=\"radio\" name=\"flt\" id=\"f-all\" class=\"flt\" checked>"]
    labels = [f"<label for=\"f-all\">all {n} questions</label>"]
    css = ["#f-all:checked~.filters label[for=f-all]{background:#0969da;color:#fff;border-color:#0969da}"]
    for name in systems:
        if name not in flips:
            continue
        s = slug(name)
        for kind, text in (("dr", f"{BASE} right, {name} wrong"), ("dw", f"{BASE} wrong, {name} right")):
            fid = f"f-{kind}-{s}"
            radios.append(f"<input type=\"radio\" name=\"flt\" id=\"{fid}\" class=\"flt\">")
            labels.append(f"<label for=\"{fid}\">{esc(text)} ({len(flips[name][kind])})</label>")
            css.append(f"#{fid}:checked~#qs .q:not(.{kind}-{s}){{display:none}}"
                       f"#{fid}:checked~.filters label[for={fid}]{{background:#0969da;color:#fff;border-color:#0969da}}")
    bar = "<div class=\"filters\">Show: " + "".join(labels) + "</div>"
    if not flips:
        bar += f"<p class=\"muted small\">No {BASE} records in this run: the right/wrong filters need them.</p>"
    return "".join(radios), bar, "".join(css)


def page_passages(recs, gold_pids) -> Tuple[List[int], set]:
    """(the passages whose text a question's block holds, those a reader was shown)."""
    pids: Dict[int, None] = {}
    shown: set = set()
    for rec in recs:
        for p in (rec.get("shown") or {}).get("passages") or []:
            pids.setdefault(int(p), None)
            shown.add(int(p))
        for p in referenced_pids(rec, top=PAGE_TOP, per_step=PAGE_TOP):
            pids.setdefault(p, None)
    for p in sorted(gold_pids):
        pids.setdefault(p, None)
    return list(pids), shown


def question_block(i: int, q: Mapping[str, Any], by_system: Mapping[str, dict], view: EvalView,
                   flips: Mapping[str, Mapping[str, List[str]]]) -> str:
    qid = q["qid"]
    classes = ["q"] + [f"{kind}-{slug(name)}" for name, f in flips.items() for kind in ("dr", "dw") if qid in f[kind]]
    prefix = f"q{i}"
    gold_pids = set(int(p) for p in view.gold_pids.get(qid, ()))
    pids, shown = page_passages(by_system.values(), gold_pids)
    ctx = PageContext(view.passages, gold_pids, anchor_for(prefix), in_page=set(pids), call_chars=CALL_CHARS)
    chips = []
    for name, rec in by_system.items():
        ok = view.correct(rec)
        ans = rec.get("answer")
        chips.append(f"<span class=\"tag {'ok' if ok else 'bad'}\" title=\"{esc(view.stage_labels.get(view.stage_of(rec), ''))}\">"
                     f"{esc(name)}: {esc(ans if ans is not None else '–')}</span>")
    gold = q.get("gold") or []
    summary = (f"<summary><b>{i}.</b> {esc(q.get('question') or qid)} <span class=\"muted\">— gold:</span> "
               f"<b>{esc(' / '.join(gold) if gold else '?')}</b><br>{''.join(chips)}</summary>")
    body = [f"<p class=\"small muted\">question id {esc(qid)} · gold passages: "
            + (", ".join(f"<a href=\"#{esc(ctx.anchor(p))}\">{p}</a>" for p in sorted(gold_pids)) or "unknown") + "</p>"]
    for name, rec in by_system.items():
        st = view.stage_of(rec)
        body.append(f"<details class=\"sys\"><summary><b>{esc(name)}</b>: {esc(rec.get('answer'))} · "
                    f"<span class=\"stage-{esc(st)}\">{esc(view.stage_labels.get(st, st))}</span></summary>"
                    + record_section(rec, system=name, ctx=ctx, stage=st, stage_label=view.stage_labels.get(st),
                                     with_passages=False) + "</details>")
    body.append(f"<details class=\"sys\"><summary>Passages ({len(pids)}, gold first; shared by the systems above)"
                f"</summary>{passages_html(list(pids), ctx, shown)}</details>")
    return f"<details class=\"{' '.join(classes)}\" id=\"{prefix}\">{summary}{''.join(body)}</details>"


def render(out: Mapping[str, Any], records: Mapping[str, List[dict]], view: EvalView) -> str:
    systems = list(records)
    flips = _flip_counts(records, view.correct)
    by_q: Dict[str, Dict[str, dict]] = {}
    for name in systems:
        for r in records[name]:
            by_q.setdefault(r["qid"], {})[name] = r
    qs = [q for q in view.questions if q["qid"] in by_q]
    radios, bar, css = _filters(systems, flips, len(qs))
    counts = [(name, {s: 0 for s in view.stages}) for name in systems]
    for name, c in counts:
        for r in records[name]:
            c[view.stage_of(r)] += 1
    stage_head = ["system"] + [esc(view.stage_labels.get(s, s)) for s in view.stages]
    stage_rows = [[f"<b>{esc(name)}</b>"] + [str(c[s]) for s in view.stages] for name, c in counts]
    title = f"eval qa: {out.get('dataset', '?')}, {len(qs)} questions, {len(systems)} systems"
    parts = [f"<h1>{esc(title)}</h1>", f"<p class=\"muted\">{_settings_line(out)}</p>"]
    parts += [f"<p class=\"note\">{esc(n)}</p>" for n in view.notes]
    parts += ["<h2>Results</h2>", results_table(out, flips, view.system_labels),
              f"<p class=\"small muted\">ΔF1: paired bootstrap against {BASE} RAG over the questions both answered "
              f"(10,000 resamples). The last two columns count questions one got right and the other wrong; "
              f"click a count to list them.</p>",
              "<h2>Where questions were lost</h2>",
              stage_bars(counts, view.stages, view.stage_labels),
              table(stage_head, stage_rows, cls="small"),
              "<p class=\"small muted\">not retrieved: no retrieved passage holds a gold answer; retrieved but not "
              "shown: one did, but the reader's input did not; shown but misread: the reader saw it and answered "
              "otherwise; unknown: the record does not say (written before schema 2).</p>",
              "<h2>Questions</h2>", radios, bar, "<div id=\"qs\">"]
    for i, q in enumerate(qs, 1):
        parts.append(question_block(i, q, by_q[q["qid"]], view, flips))
    parts.append("</div>")
    return document(title, shared_defs() + "\n".join(parts), extra_css=graph_css() + css)


__all__ = ["render", "EvalView", "results_table", "question_block"]
