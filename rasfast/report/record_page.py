"""Everything one system did on one question, from its ``eval qa`` record (schema:
:mod:`rasfast.qa_eval.records`): the answer against the gold, where the question was lost,
the question graph, each step (query or plan, passages with scores, theme scope, triples,
expansion chains, the step's decision), what the reader was shown, the LLM calls with their
prompts and replies (collapsed), the stage timings and the passages' texts (gold ones
marked).

A field a record lacks (a schema-1 record, or a system that has no such part) is shown as
*unknown*, never as empty. Every data text is escaped (:func:`rasfast.report.html.esc`).
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Callable, Collection, Dict, List, Mapping, Optional, Sequence

from .charts import timing_bars
from .html import esc, fmt, slug
from .qgraph_svg import question_graph_figure, step_colour

# record keys every system has (shown in fixed places); any other key is the system's trail
STANDARD_KEYS = {"qid", "schema", "question", "answer", "gold", "reply", "em", "f1", "acc", "passages", "error",
                 "prompt_style", "reader", "retriever", "steps", "answer_retrieved", "answer_shown", "shown",
                 "llm_calls", "prompt_tokens", "completion_tokens", "cached_prompt_tokens", "seconds", "calls",
                 "roles", "timings", "system", "recall_all", "stage"}
STEP_KEYS = {"query", "passages", "scope", "triples", "chains", "note"}
STEP_PASSAGES = 10     # passages listed per step (the record keeps up to 20)
STEP_TRIPLES = 15      # triples listed per step (all of them are drawn, up to the graph's cap)
UNKNOWN = "<span class=\"unknown\">unknown (not in this record)</span>"


@dataclass
class PageContext:
    """What a record does not hold: passage texts (pid -> object with ``title`` and
    ``text``), the question's gold passages, and where a passage's text is in the page."""
    passages: Mapping[int, Any] = field(default_factory=dict)
    gold_pids: Collection[int] = ()
    anchor: Callable[[int], str] = lambda pid: f"p{pid}"
    # the passages whose text the page holds (None: every one a record mentions); the others
    # are named, not linked
    in_page: Optional[Collection[int]] = None
    # LLM prompts and replies longer than this are shown cut in the middle (None: as recorded)
    call_chars: Optional[int] = None


def _title(ctx: PageContext, pid: int) -> str:
    p = ctx.passages.get(int(pid))
    return p.title if p is not None else f"passage {pid}"


def passage_link(ctx: PageContext, pid: int) -> str:
    gold = " <span class=\"tag gold\">gold</span>" if int(pid) in ctx.gold_pids else ""
    name = f"[{int(pid)}] {esc(_title(ctx, pid))}"
    if ctx.in_page is not None and int(pid) not in ctx.in_page:
        return name + gold
    return f"<a href=\"#{esc(ctx.anchor(int(pid)))}\">{name}</a>{gold}"


def triple_html(t: Sequence[Any]) -> str:
    if not isinstance(t, (list, tuple)) or len(t) < 3:
        return esc(t)
    return f"{esc(t[0])} <i>— {esc(t[1])} →</i> {esc(t[2])}"


def triples_list(ts: Sequence[Any], limit: int = STEP_TRIPLES) -> str:
    if not ts:
        return "<span class=\"muted\">none</span>"
    items = "".join(f"<li>{triple_html(t)}</li>" for t in ts[:limit])
    more = f"<li class=\"muted\">… {len(ts) - limit} more</li>" if len(ts) > limit else ""
    return f"<ul class=\"triples\">{items}{more}</ul>"


def _correct(rec: dict) -> Optional[bool]:
    if rec.get("em") is None and rec.get("acc") is None:
        return None
    return bool(rec.get("em")) or bool(rec.get("acc"))


def _yes_no(x: Optional[bool]) -> str:
    return "<span class=\"unknown\">unknown</span>" if x is None else ("<span class=\"ok\">yes</span>" if x else "<span class=\"bad\">no</span>")


def header(rec: dict, system: str, stage: Optional[str], stage_label: Optional[str]) -> str:
    ok = _correct(rec)
    mark = "" if ok is None else (" <span class=\"tag ok\">correct</span>" if ok else " <span class=\"tag bad\">wrong</span>")
    gold = [g for g in rec.get("gold") or [] if g]
    answer = esc(rec["answer"]) if rec.get("answer") is not None else "<span class=\"muted\">none</span>"
    parts = [f"<p class=\"answer\">Answer: {answer}{mark}</p>"]
    if gold:
        parts.append("<p>Gold: " + ", ".join(f"<b>{esc(g)}</b>" for g in gold)
                     + (f" · lost at: <b class=\"stage-{esc(stage)}\">{esc(stage_label or stage)}</b>" if stage else "")
                     + (f" · EM {fmt(rec.get('em'), '.0f')} · F1 {fmt(rec.get('f1'), '.2f')}"
                        if rec.get("f1") is not None else "") + "</p>")
        where = (f"answer in a retrieved passage: {_yes_no(rec.get('answer_retrieved'))} · "
                 f"answer in what the reader was shown: {_yes_no(rec.get('answer_shown'))} · ")
    else:
        parts.append("<p class=\"muted\">No gold answer given: nothing is scored.</p>")
        where = ""
    parts += [f"<p class=\"small muted\">{where}"
             f"LLM calls {esc(rec.get('llm_calls', '–'))} · tokens {esc((rec.get('prompt_tokens') or 0) + (rec.get('completion_tokens') or 0))}"
             f" · {fmt(rec.get('seconds'), '.1f')} s · retriever {esc(rec.get('retriever') or '–')} · reader "
             f"{esc(rec.get('reader') or '–')}" + (f" · prompts {esc(rec['prompt_style'])}" if rec.get("prompt_style") else "")
             + "</p>"]
    if rec.get("error"):
        parts.append(f"<p class=\"note\">Error: {esc(rec['error'])}</p>")
    if rec.get("reply") is not None:
        parts.append(f"<details><summary>The reader's raw reply</summary><pre>{esc(rec['reply'])}</pre></details>")
    return "".join(parts)


def step_triples(rec: dict) -> List[List[Any]]:
    """Per step, its triples and its expansion chains' triples (what the graph draws)."""
    out = []
    for s in rec.get("steps") or []:
        ts = list(s.get("triples") or [])
        for chain in s.get("chains") or []:
            ts += [t for t in chain if isinstance(t, (list, tuple))]
        out.append(ts)
    return out


def _value_html(v: Any) -> str:
    if isinstance(v, list) and v and all(isinstance(t, (list, tuple)) and len(t) >= 3
                                         and all(isinstance(x, str) for x in t[:3]) for t in v):
        return triples_list(v)
    if isinstance(v, list) and v and all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in v):
        return esc(", ".join(str(x) for x in v))
    if isinstance(v, list) and all(isinstance(x, str) for x in v):
        return "<ol>" + "".join(f"<li>{esc(x)}</li>" for x in v) + "</ol>" if v else "<span class=\"muted\">none</span>"
    if isinstance(v, (str, int, float, bool)) or v is None:
        return esc(v)
    text = json.dumps(v, ensure_ascii=False, default=str)
    return f"<pre>{esc(text[:3000] + (' …' if len(text) > 3000 else ''))}</pre>"


def steps_html(rec: dict, ctx: PageContext) -> str:
    steps = rec.get("steps")
    if steps is None:
        return f"<p>Steps: {UNKNOWN}</p>"
    if not steps:
        return "<p class=\"muted\">No retrieval steps (closed book).</p>"
    shown = set((rec.get("shown") or {}).get("passages") or [])
    out = []
    for i, s in enumerate(steps):
        colour = step_colour(i)
        head = f"<b>Step {i + 1}</b>: {esc(s.get('query'))}" if s.get("query") is not None else f"<b>Step {i + 1}</b>"
        bits = [f"<div class=\"step\" style=\"border-left-color:{colour}\"><div>{head}</div>"]
        if s.get("note"):
            bits.append(f"<div class=\"small\">decision: {esc(s['note'])}</div>")
        if s.get("scope") is not None:
            bits.append(f"<div class=\"small\">theme scope: {esc(s['scope'])} passages</div>")
        ps = s.get("passages") or []
        if ps:
            rows = []
            for rank, pair in enumerate(ps[:STEP_PASSAGES], 1):
                pid, score = (pair[0], pair[1]) if isinstance(pair, (list, tuple)) else (pair, None)
                tag = " <span class=\"tag shown\">shown</span>" if int(pid) in shown else ""
                rows.append(f"<tr><td>{rank}</td><td>{passage_link(ctx, pid)}{tag}</td><td>{fmt(score, '.3f')}</td></tr>")
            more = (f"<tr><td></td><td class=\"muted\">… {len(ps) - STEP_PASSAGES} more retrieved</td><td></td></tr>"
                    if len(ps) > STEP_PASSAGES else "")
            bits.append("<table class=\"small ranked\"><thead><tr><th>#</th><th>passage retrieved</th>"
                        f"<th>score</th></tr></thead><tbody>{''.join(rows)}{more}</tbody></table>")
        if "triples" in s:
            bits.append(f"<div class=\"small\">triples ({len(s.get('triples') or [])}):</div>"
                        + triples_list(s.get("triples") or []))
        if s.get("chains"):
            chains = "".join("<li>" + " ⟶ ".join(triple_html(t) for t in c) + "</li>" for c in s["chains"][:10])
            bits.append(f"<div class=\"small\">expansion chains ({len(s['chains'])}):</div><ol class=\"triples\">{chains}</ol>")
        for k, v in s.items():
            if k not in STEP_KEYS and v not in (None, [], {}, ""):
                bits.append(f"<div class=\"small\">{esc(k)}: {_value_html(v)}</div>")
        bits.append("</div>")
        out.append("".join(bits))
    return "".join(out)


def shown_html(rec: dict, ctx: PageContext) -> str:
    sh = rec.get("shown")
    if sh is None:
        return f"<p>{UNKNOWN}</p>"
    ps = sh.get("passages") or []
    facts = sh.get("triples") or []
    cut = sh.get("cut")
    parts = [f"<p class=\"small\">{esc(sh.get('n_passages', len(ps)))} passages, {esc(sh.get('n_triples', len(facts)))} "
             f"triples, {esc(sh.get('chars', '–'))} characters"
             + (f", {esc(cut)} cut to fit the reader's budget" if cut else "") + "</p>"]
    if ps:
        parts.append("<ol class=\"small\">" + "".join(f"<li>{passage_link(ctx, p)}</li>" for p in ps) + "</ol>")
    if facts:
        parts.append(triples_list(facts, limit=60))
    if not ps and not facts:
        parts.append("<p class=\"muted small\">Neither passages nor triples (closed book, or knowledge text only).</p>")
    return "".join(parts)


def trail_html(rec: dict) -> str:
    extra = {k: v for k, v in rec.items() if k not in STANDARD_KEYS and not k.startswith("recall@")}
    if not extra:
        return ""
    rows = "".join(f"<tr><th>{esc(k)}</th><td>{_value_html(v)}</td></tr>" for k, v in extra.items())
    return f"<h4>The system's trail</h4><table class=\"small\"><tbody>{rows}</tbody></table>"


def _cut(s: Optional[str], n: Optional[int]) -> str:
    if s is None:
        return ""
    if n is None or len(s) <= n:
        return s
    return s[: n * 2 // 3] + f"\n[... {len(s) - n} characters not shown here ...]\n" + s[-(n // 3):]


def calls_html(rec: dict, ctx: PageContext) -> str:
    calls = rec.get("calls")
    if calls is None:
        return f"<p>LLM calls: {UNKNOWN}" + (f" ({esc(rec['llm_calls'])} made)" if rec.get("llm_calls") else "") + "</p>"
    if not calls:
        return "<p class=\"muted\">No LLM calls.</p>"
    out = []
    for i, c in enumerate(calls, 1):
        prompt, reply = c.get("prompt"), c.get("reply")
        out.append(f"<details><summary>call {i}: <b>{esc(c.get('role') or '?')}</b> · prompt {len(prompt or '')} chars · "
                   f"reply {len(reply or '') if reply is not None else 'none'}</summary>"
                   f"<div class=\"small muted\">prompt</div><pre>{esc(_cut(prompt, ctx.call_chars))}</pre>"
                   f"<div class=\"small muted\">reply</div>"
                   f"<pre>{esc(_cut(reply, ctx.call_chars)) if reply is not None else '(no reply)'}</pre>"
                   "</details>")
    return "".join(out)


def referenced_pids(rec: dict, top: int = 5, per_step: int = STEP_PASSAGES) -> List[int]:
    """The passages a record's page links to, in order of first mention: every step's
    first ``per_step`` passages, the passages shown to the reader, the system's top ``top``."""
    seen: Dict[int, None] = {}
    for s in rec.get("steps") or []:
        for pair in (s.get("passages") or [])[:per_step]:
            seen.setdefault(int(pair[0] if isinstance(pair, (list, tuple)) else pair), None)
    for p in (rec.get("shown") or {}).get("passages") or []:
        seen.setdefault(int(p), None)
    for p in (rec.get("passages") or [])[:top]:
        seen.setdefault(int(p), None)
    return list(seen)


def passages_html(pids: Sequence[int], ctx: PageContext, shown: Collection[int] = ()) -> str:
    """The texts of ``pids`` (gold first), each at its anchor."""
    if not pids:
        return "<p class=\"muted\">No passages.</p>"
    order = sorted(pids, key=lambda p: (p not in ctx.gold_pids,))
    out = []
    for pid in order:
        p = ctx.passages.get(int(pid))
        gold = int(pid) in ctx.gold_pids
        tags = (" <span class=\"tag gold\">gold</span>" if gold else "") + \
               (" <span class=\"tag shown\">shown to the reader</span>" if int(pid) in shown else "")
        text = f"<div class=\"text\">{esc(p.text)}</div>" if p is not None else \
            "<div class=\"text muted\">text not available (the corpus was not loaded)</div>"
        out.append(f"<div class=\"psg{' isgold' if gold else ''}\" id=\"{esc(ctx.anchor(int(pid)))}\">"
                   f"<b>[{int(pid)}] {esc(_title(ctx, pid))}</b>{tags}{text}</div>")
    return "".join(out)


def record_section(rec: dict, *, system: str, ctx: PageContext, stage: Optional[str] = None,
                   stage_label: Optional[str] = None, with_passages: bool = True) -> str:
    """One system's run on one question as an HTML fragment; ``with_passages=False`` when the
    surrounding page holds the passage texts (the evaluation report, once per question)."""
    shown_triples = None if rec.get("shown") is None else (rec["shown"].get("triples") or [])
    parts = [f"<section class=\"rec\" data-system=\"{esc(system)}\">", header(rec, system, stage, stage_label),
             "<h4>Question graph</h4>",
             question_graph_figure(step_triples(rec), shown_triples, answer=rec.get("answer"), golds=rec.get("gold") or ())
             if rec.get("steps") is not None else f"<p>{UNKNOWN}</p>",
             "<h4>Steps</h4>", steps_html(rec, ctx),
             "<h4>What the reader was shown</h4>", shown_html(rec, ctx),
             trail_html(rec),
             f"<h4>LLM calls ({len(rec['calls']) if rec.get('calls') is not None else 'unknown'})</h4>", calls_html(rec, ctx),
             "<h4>Timings</h4>", timing_bars(rec.get("timings") or {}) if rec.get("timings") is not None
             else f"<p>{UNKNOWN}</p>"]
    if with_passages:
        shown = set((rec.get("shown") or {}).get("passages") or [])
        parts += ["<h4>Passages</h4>", passages_html(referenced_pids(rec), ctx, shown)]
    parts.append("</section>")
    return "".join(parts)


def record_document(rec: dict, *, system: str, ctx: Optional[PageContext] = None, stage: Optional[str] = None,
                    stage_label: Optional[str] = None) -> str:
    """A whole page for one question and one system (``rasfast ask --html``)."""
    from .html import document
    from .qgraph_svg import css, shared_defs
    ctx = ctx or PageContext()
    body = (shared_defs() + f"<h1>{esc(rec.get('question') or rec.get('qid'))}</h1>"
            f"<p class=\"muted\">system <b>{esc(system)}</b>" + (f" · question {esc(rec['qid'])}" if rec.get("qid") else "")
            + "</p>" + record_section(rec, system=system, ctx=ctx, stage=stage, stage_label=stage_label))
    return document(f"{system}: {rec.get('question') or rec.get('qid')}", body, extra_css=css())


def anchor_for(prefix: str) -> Callable[[int], str]:
    p = slug(prefix)
    return lambda pid: f"{p}-p{pid}"


__all__ = ["PageContext", "record_section", "record_document", "referenced_pids", "passages_html", "step_triples",
           "anchor_for", "triple_html", "STANDARD_KEYS"]
