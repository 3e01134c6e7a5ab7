"""Compact prompts for small local models (the 1.5B GGUF of ``--llm local``).

The paper-style RAS prompts (:mod:`rasfast.llm.prompts`: an instruction listing three tags
plus few-shot conversations) suit API models; a 1.5B instruct model given them mostly
repeats the question as its "sub-query". These prompts keep the RAS structure -- a planner
that either asks for one more retrieval or declares the knowledge sufficient, and an
answerer that reads the triples gathered per retrieval step -- but ask for it in plain
words with one fixed reply form each, and they share one system message and the knowledge
block, so a local backend's KV prefix cache serves the answerer (and the next round's
planner) from the planner's prompt.

Replies are mapped back to the loop's tags by :func:`plan_to_tags` (``SEARCH: q`` ->
``[SUBQ] q``, ``ENOUGH`` -> ``[SUFFICIENT]``); :func:`plan_parsed` says whether a reply had
one of the two forms (the parse-failure rate the QA evaluation reports).
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

ANSWER_TASK = ("Task: answer the question using the facts above; if they do not contain the "
               "answer, give your best guess. Reply with the answer only, in a few words (a "
               "name, a date or a number), with no explanation.")

READER_SYSTEM = "You answer questions using the documents you are given."
READER_TASK = ("Answer the question using the documents; if they do not contain the answer, give "
               "your best guess. Reply with the answer only, in a few words (a name, a date or "
               "a number), with no explanation.")
CLOSED_BOOK_TASK = ("Reply with the answer only, in a few words (a name, a date or a number), with "
                    "no explanation; if you are not sure, give your best guess.")


def _fact(t: Sequence[str]) -> str:
    return " | ".join(str(x).strip() for x in t[:3])


_WORD = re.compile(r"[a-z0-9]+")
_STOP = frozenset("the a an of in on at to for by with from and or is was were are be been who what which "
                  "when where whom whose how did does do that this as its it his her their".split())


def _words(text: str) -> set:
    return {w for w in _WORD.findall(str(text).lower()) if w not in _STOP and len(w) > 1}


def rank_triples(triples: Sequence[Triple], query: str, question: str = "") -> List[Triple]:
    """``triples`` ordered by word overlap with the step's search (and, half-weighted, the
    question), stable for ties: a small model reads the few facts it sees first best."""
    qw, qq = _words(query), _words(question)
    def score(t):
        w = _words(" ".join(str(x) for x in t[:3]))
        return len(w & qw) + 0.5 * len(w & qq)
    return sorted(triples, key=lambda t: -score(t))


def knowledge_text(subqueries: Sequence[str], step_triples: Sequence[Sequence[Triple]],
                   max_per_step: int = 10, max_steps: int = 5, question: str = "") -> str:
    """One block per retrieval step: the search and its ``max_per_step`` new facts that share
    the most words with that search and the question (:func:`rank_triples`)."""
    seen, blocks = set(), []
    steps = list(enumerate(subqueries))[-max_steps:]
    for i, q in steps:
        trip = rank_triples(step_triples[i] if i < len(step_triples) else [], q, question)
        facts = []
        for t in trip:
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


def answerer_messages(question: str, subqueries, step_triples, **kw) -> List[Dict[str, str]]:
    return [{"role": "system", "content": SYSTEM},
            {"role": "user", "content": _user(question, subqueries, step_triples, ANSWER_TASK, **kw)}]


def reader_messages(question: str, passages: Sequence = (), max_chars: int = 1200) -> List[Dict[str, str]]:
    """The passage reader (dense RAG) or, with no passages, the closed-book prompt."""
    if not passages:
        return [{"role": "system", "content": "You answer questions."},
                {"role": "user", "content": f"Question: {question}\n\n{CLOSED_BOOK_TASK}"}]
    docs = "\n\n".join(f"Document {i + 1}: {getattr(p, 'title', '')}\n{getattr(p, 'text', '')[:max_chars]}"
                       for i, p in enumerate(passages))
    return [{"role": "system", "content": READER_SYSTEM},
            {"role": "user", "content": f"{docs}\n\nQuestion: {question}\n\n{READER_TASK}"}]


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


def clean_answer(text: Optional[str]) -> str:
    """The first non-empty line, without an ``Answer:`` prefix, quotes or a final period."""
    for line in (text or "").strip().splitlines():
        line = _PREFIX.sub("", line.strip()).strip().strip('"*`').strip()
        if line:
            return line[:-1].strip() if line.endswith(".") else line
    return ""


__all__ = ["SYSTEM", "planner_messages", "answerer_messages", "reader_messages", "knowledge_text",
           "parse_plan_reply", "clean_answer"]
