"""GEAR's online retrieval prompts (the paper's Appendix J.2), written for rasfast, and their
tolerant parsers.

The structure and the reply forms are the paper's:

- **read** (Eq. 1 and 4, "Reader with and without Gist Memory"): find facts that help answer
  the question, written as ("subject", "predicate", "object") triples, after one worked
  example; the documents; with the gist memory, the preliminary facts and a request for
  *additional* facts; a note to output only the relevant facts found when the information
  is insufficient; then ``Question:`` and ``Facts:`` for the model to complete;
- **reason** (Eq. 6, "Reasoning for Termination"): the question and the known facts; reply
  ``Answerable: Yes`` / ``Answer: ...`` or ``Answerable: No`` / ``Why: ...``;
- **rewrite** (Eq. 7, "Query Re-writing"): the question, the facts and the reason; one worked
  example; reply with the next question after ``Next Question:``.

The worked examples are rasfast's own (fictional facts, so no example leaks world
knowledge). Parsers never raise: any reply parses to a (possibly empty) result, and the
agent treats an unreadable verdict as "not answerable" and an unreadable rewrite as "keep the
last query" (see :mod:`.agent`).
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import List, Optional, Sequence

from ...types import RetrievedPassage, Triple

READ_TASK = "Your task is to find facts that help answer an input question."
READ_FORMAT = ("You should present these facts as knowledge triples, which are structured as "
               "(\"subject\", \"predicate\", \"object\").")
READ_EXAMPLE = ("Question: In which year was the employer of Tomas Reyka founded?\n"
                "Facts: (\"Tomas Reyka\", \"employer\", \"Halden Institute\"), "
                "(\"Halden Institute\", \"founded in\", \"1887\")")
READ_NOTE = "Note: if the information you are given is insufficient, output only the relevant facts you can find."

REASON_TASK = "You are given an input question and a set of known facts:"
REASON_FORMAT = ("Your reply must follow the required format:\n"
                 "1. If the provided facts contain the answer to the question, you should reply as follows:\n"
                 "Answerable: Yes\nAnswer: ...\n"
                 "2. If not, you should explain why and reply as follows:\n"
                 "Answerable: No\nWhy: ...")

REWRITE_TASK = ("You will be presented with an input question and a set of known facts. These facts "
                "might be insufficient for answering the question for some reason. Your task is to "
                "analyze the question given the provided facts and determine what else information is "
                "needed for the next step.")
REWRITE_EXAMPLE = ("Question: Which district of the city where Lena Okafor was born contains Birchwood Academy?\n"
                   "Facts: (\"Lena Okafor\", \"born in\", \"Marlow\")\n"
                   "Reason: The facts only say that Lena Okafor was born in Marlow; they do not say which "
                   "district of Marlow contains Birchwood Academy.\n"
                   "Next Question: Which district of Marlow contains Birchwood Academy?")


def facts_text(triples: Sequence[Triple]) -> str:
    """Triples in the prompts' form: ("s", "p", "o"), ... (empty for none)."""
    return ", ".join(f"(\"{s}\", \"{p}\", \"{o}\")" for s, p, o in triples)


def docs_text(passages: Sequence[RetrievedPassage], max_chars: int = 1200) -> str:
    return "\n\n".join(f"Title: {p.title}\n{str(p.text)[:max_chars]}" for p in passages)


def read_prompt(question: str, passages: Sequence[RetrievedPassage],
                memory: Sequence[Triple] = ()) -> str:
    """The read step (Eq. 1 without memory, Eq. 4 with it)."""
    with_memory = bool(memory)
    ask = ("Based on these documents and some preliminary facts provided below, find additional "
           "supporting fact(s) that may help answer the following question."
           if with_memory else
           "Based on these documents, find supporting fact(s) that may help answer the following question.")
    return (f"{READ_TASK}\n{READ_FORMAT}\n\nExample:\n{READ_EXAMPLE}\n\n"
            f"Now you are given some documents:\n\n{docs_text(passages)}\n\n{ask}\n{READ_NOTE}\n\n"
            f"Question: {question}\n" + (f"Preliminary facts: {facts_text(memory)}\n" if with_memory else "")
            + "Facts:")


def reason_prompt(question: str, memory: Sequence[Triple]) -> str:
    """Reasoning for termination (Eq. 6)."""
    return (f"{REASON_TASK}\n\nQuestion: {question}\nFacts: {facts_text(memory) or '(none)'}\n\n"
            f"{REASON_FORMAT}\n\nYour reply:")


def rewrite_prompt(question: str, memory: Sequence[Triple], reason: str) -> str:
    """Query re-writing (Eq. 7)."""
    return (f"{REWRITE_TASK}\n\nExample:\n{REWRITE_EXAMPLE}\n\nYour task:\nQuestion: {question}\n"
            f"Facts: {facts_text(memory) or '(none)'}\nReason: {reason or '(none given)'}\n\nNext Question:")


# -- parsers ------------------------------------------------------------------------------------
_Q = r"\"([^\"\n]{1,300})\"|'([^'\n]{1,300})'|([^,()\"'\n]{1,300}?)"
_Q_LAST = r"\"([^\"\n]{1,300})\"|'([^'\n]{1,300})'|([^()\"'\n]{1,300}?)"   # an object may hold commas
_TRIPLE = re.compile(rf"\(\s*(?:{_Q})\s*,\s*(?:{_Q})\s*,\s*(?:{_Q_LAST})\s*\)")
_PIPE = re.compile(r"^\W*([^|\n]{1,300}?)\s*\|\s*([^|\n]{1,300}?)\s*\|\s*([^|\n]{1,300}?)\W*$")


def _pick(groups, i: int) -> str:
    return next((g for g in groups[3 * i:3 * i + 3] if g is not None), "").strip()


def parse_facts(text: Optional[str]) -> List[Triple]:
    """Triples written ("s", "p", "o") (quotes optional) or one per line as ``s | p | o``;
    duplicates dropped, order kept. Never raises."""
    out: List[Triple] = []
    seen = set()
    text = text or ""
    for m in _TRIPLE.finditer(text):
        t = tuple(_pick(m.groups(), i) for i in range(3))
        if all(t) and t not in seen:
            seen.add(t)
            out.append(t)   # type: ignore[arg-type]
    if not out:
        for line in text.splitlines():
            m = _PIPE.match(line.strip())
            if m:
                t = tuple(x.strip().strip("\"'") for x in m.groups())
                if all(t) and t not in seen:
                    seen.add(t)
                    out.append(t)   # type: ignore[arg-type]
    return out


@dataclass
class Reasoning:
    answerable: bool          # False also when the reply could not be read
    answer: Optional[str]
    why: str
    parsed: bool              # the reply had the asked-for "Answerable: Yes|No" form


_ANSWERABLE = re.compile(r"answerable\s*[:\-]?\s*\**\s*(yes|no)\b", re.IGNORECASE)
_ANSWER = re.compile(r"^\W*answer\s*[:\-]\s*(.+)$", re.IGNORECASE | re.MULTILINE)
_WHY = re.compile(r"^\W*(?:why|reason)\s*[:\-]\s*(.+)$", re.IGNORECASE | re.MULTILINE | re.DOTALL)


def parse_reason(text: Optional[str]) -> Reasoning:
    """The termination verdict. A "Yes" without an answer line is still answerable (the answer
    is then None); an unreadable reply is not answerable (the agent searches on)."""
    text = text or ""
    m = _ANSWERABLE.search(text)
    if not m:
        return Reasoning(False, None, text.strip()[:500], False)
    yes = m.group(1).lower() == "yes"
    rest = text[m.end():]
    a = _ANSWER.search(rest)
    w = _WHY.search(rest)
    return Reasoning(yes, a.group(1).strip() if (yes and a) else None,
                     (w.group(1).strip() if w else rest.strip())[:500], True)


_NEXT = re.compile(r"^\W*(?:next\s+question|question)\s*[:\-]\s*(.+)$", re.IGNORECASE | re.MULTILINE)


def parse_rewrite(text: Optional[str]) -> Optional[str]:
    """The next query: the text after "Next Question:" (or the first non-empty line of a reply
    that only holds the question); None when nothing usable came back."""
    text = (text or "").strip()
    m = _NEXT.search(text)
    line = m.group(1) if m else next((x for x in text.splitlines() if x.strip()), "")
    line = line.strip().strip("\"'*`").strip()
    return line if len(line) >= 3 and any(c.isalpha() for c in line) else None


__all__ = ["read_prompt", "reason_prompt", "rewrite_prompt", "parse_facts", "parse_reason",
           "parse_rewrite", "Reasoning", "facts_text", "READ_TASK", "REASON_TASK", "REWRITE_TASK"]
