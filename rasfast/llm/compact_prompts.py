"""Compact prompts for small local models (the 1.5B GGUF of ``--llm local``).

The paper-style RAS prompts (:mod:`rasfast.llm.prompts`: an instruction listing three tags
plus few-shot conversations) suit API models; a 1.5B instruct model given them mostly
repeats the question as its "sub-query". This prompt keeps RAS's planner -- it either asks
for one more retrieval or declares the knowledge sufficient -- but asks for it in plain words
with one fixed reply form. The answering step is the reader contract's
(:mod:`rasfast.llm.reader`), in both prompt styles.

Replies are mapped back to the loop's tags by :func:`parse_plan_reply` (``SEARCH: q`` ->
``[SUBQ] q``, ``ENOUGH`` -> ``[SUFFICIENT]``), which also says whether a reply had one of the
two forms (the parse-failure rate the QA evaluation reports).
"""
from __future__ import annotations

import re
from typing import Dict, List, Optional, Sequence, Tuple

from ..types import Triple

SYSTEM = ("You answer multi-hop questions step by step, using facts found by searching a "
          "collection of documents. Facts are written as: subject | relation | object.")

PLAN_TASK = ("Task: decide the next step. If the facts above already contain the answer to the "
             "question, reply with the single word ENOUGH. Otherwise reply on one line with the "
             "next search, a short question about the one missing fact, using the names found "
             "above (no pronouns), in this form:\nSEARCH: <question>")

def _fact(t: Sequence[str]) -> str:
    return " | ".join(str(x).strip() for x in t[:3])


def knowledge_text(subqueries: Sequence[str], step_triples: Sequence[Sequence[Triple]],
                   max_per_step: int = 10, max_steps: int = 5, question: str = "") -> str:
    """One block per retrieval step: the search and up to ``max_per_step`` of its new facts,
    chosen along the question graph (:func:`rasfast.llm.reader.order_by_question_graph`: the
    facts about entities the question names first, then their neighbourhood) -- the
    planner's compact view; the reader sees every fact."""
    from .reader import order_by_question_graph
    seen, blocks = set(), []
    steps = list(enumerate(subqueries))[-max_steps:]
    for i, q in steps:
        trip = list(step_triples[i]) if i < len(step_triples) else []
        facts = []
        for j in order_by_question_graph(trip, f"{question} {q}"):   # the sub-query names the bridge
            t = trip[j]
            key = tuple(str(x).strip().lower() for x in t[:3])
            if key in seen:
                continue
            seen.add(key)
            facts.append(_fact(t))
            if len(facts) >= max_per_step:
                break
        blocks.append(f"Search {i + 1}: {q}\nFacts found:\n" + ("\n".join(facts) if facts else "(none)"))
    return "\n\n".join(blocks) if blocks else "(no searches yet)"


def _user(question: str, subqueries, step_triples, task: str, **kw) -> str:
    return f"Question: {question}\n\n{knowledge_text(subqueries, step_triples, question=question, **kw)}\n\n{task}"


def planner_messages(question: str, subqueries, step_triples, **kw) -> List[Dict[str, str]]:
    return [{"role": "system", "content": SYSTEM},
            {"role": "user", "content": _user(question, subqueries, step_triples, PLAN_TASK, **kw)}]


_SEARCH = re.compile(r"^\W*(?:search|next search|query|sub-?query)\s*\d*\s*[:\-]\s*(.+)$", re.IGNORECASE)
_ENOUGH = re.compile(r"^\W*(enough|sufficient)\b", re.IGNORECASE)
_PREFIX = re.compile(r"^\s*(?:\*\*)?(?:final\s+)?answer(?:\*\*)?\s*[:\-]\s*", re.IGNORECASE)


def parse_plan_reply(text: Optional[str]) -> Tuple[str, bool]:
    """(the reply in the loop's tag form, whether it had one of the two asked-for forms).
    An unparsed reply becomes ``[SUFFICIENT]``: the loop answers from what it has instead of
    searching for a sentence that is not a query."""
    for line in (text or "").strip().splitlines():
        line = line.strip().strip("`").strip()
        if not line:
            continue
        m = _SEARCH.match(line)
        if m and m.group(1).strip():
            return "[SUBQ] " + m.group(1).strip().strip('"').strip(), True
        if _ENOUGH.match(line):
            return "[SUFFICIENT]", True
        break
    return "[SUFFICIENT]", False


__all__ = ["SYSTEM", "planner_messages", "knowledge_text", "parse_plan_reply"]
