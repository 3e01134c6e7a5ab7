"""KiRAG's LLM prompts and their tolerant parsers.

The constructor prompt follows the structure of the paper's Reasoning Chain Constructor
(appendix, Figure 7): worked examples, then the aligner's candidate triples as the context,
the question, and the chain so far as the thought the LLM continues, completing the whole
chain with candidate triples and ending with "So the answer is ...". The loop appends only the
first triple it wrote that is one of the candidates (others are filtered out).

Parsers never raise: any text (empty, truncated, chatty, malformed) parses to a
:class:`ConstructorOutput`, possibly with no triple.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Sequence

from ..ras.qgraph import normalize_entity
from ...types import Triple
from .triples import chain_text

ANSWER_MARK = "the answer is"

# The paper's Reasoning Chain Constructor prompt (its appendix, Figure 7) has this structure:
# an instruction to reason step by step and give the answer, worked examples whose thought is
# a chain of <head; relation; tail> triples ending "So the answer is ...", then the inputs
# "Context: {candidate triples} Question: {question} Thought: {the chain so far}", which the
# model continues. The wording and the examples below are rasfast's own.
CONSTRUCTOR_INSTRUCTION = (
    "Follow the examples: answer the question by reasoning step by step over the knowledge "
    "triples in the context. Write the reasoning as a chain of triples copied exactly from the "
    "context, in the form <head entity; relation; tail entity>, each one linked to the one "
    "before it, then write \"So the answer is\" and a short answer."
)

CONSTRUCTOR_EXAMPLES = (
    ("<Harbor Point; opened in; 1990>, <Harbor Point; located in; Marlow County>, "
     "<Marlow County; county seat; Eastbridge>, <Eastbridge; founded in; 1842>, "
     "<Eastbridge; population; 12,400>",
     "When was the seat of the county that contains Harbor Point founded?",
     "<Harbor Point; located in; Marlow County>, <Marlow County; county seat; Eastbridge>, "
     "<Eastbridge; founded in; 1842>. So the answer is 1842."),
    ("<The Glass Orchard; directed by; Tobin Hale>, <Mara Quell; born in; Lisbon>, "
     "<Mara Quell; played Iris in; The Glass Orchard (2004 film)>, "
     "<The Glass Orchard (2004 film); directed by; Ines Varga>",
     "Who directed the film in which Mara Quell played Iris?",
     "<Mara Quell; played Iris in; The Glass Orchard (2004 film)>, "
     "<The Glass Orchard (2004 film); directed by; Ines Varga>. So the answer is Ines Varga."),
)

def constructor_prompt(question: str, chain: Sequence[Triple], candidates: Sequence[Triple]) -> str:
    """Instruction, worked examples, then Context (the aligner's candidate triples), Question
    and Thought holding the chain so far: the model continues the thought."""
    shots = "\n\n".join(f"Context: {c}\nQuestion: {q}\nThought: {t}" for c, q, t in CONSTRUCTOR_EXAMPLES)
    context = ", ".join(f"<{s}; {p}; {o}>" for s, p, o in candidates) or "(none)"
    thought = chain_text(chain)
    return (f"{CONSTRUCTOR_INSTRUCTION}\n\nExamples:\n\n{shots}\n\n"
            f"Context: {context}\nQuestion: {question}\nThought:" + (f" {thought}," if thought else ""))


# A written triple: <s; p; o> (the prompt's form), or (s; p; o) / [s; p; o]. Names keep
# their own brackets: "Boston (Lincolnshire)", "Blind Shaft (film)" are common titles. Inside
# <...> a field may hold any parentheses; inside (...) or [...] one nested (...) group.
_FIELD_ANGLE = r"[^<>;\n]+?"
_FIELD_ROUND = r"(?:[^<>()\[\];\n]|\([^()\n;]*\))+?"
_TRIPLE = re.compile(
    rf"<\s*({_FIELD_ANGLE})\s*;\s*({_FIELD_ANGLE})\s*;\s*({_FIELD_ANGLE})\s*>"
    rf"|[(\[]\s*({_FIELD_ROUND})\s*;\s*({_FIELD_ROUND})\s*;\s*({_FIELD_ROUND})\s*[)\]]")
_ANSWER = re.compile(re.escape(ANSWER_MARK) + r"\s*:?\s*(.*)", re.IGNORECASE | re.DOTALL)


def _fields(m: "re.Match") -> tuple:
    g = m.groups()
    return g[:3] if g[0] is not None else g[3:]


def _answer_outside(text: str, triples: List["re.Match"]) -> Optional["re.Match"]:
    """The answer marker outside every written triple ("The Answer Is Blowin" may be a name)."""
    masked = list(text)
    for t in triples:
        masked[t.start():t.end()] = " " * (t.end() - t.start())
    return _ANSWER.search("".join(masked))


def _answer_text(text: str, m: "re.Match") -> Optional[str]:
    ans = text[m.start(1):].strip().split("\n")[0].strip().rstrip(".").strip()
    return ans or None


def _key(t: Sequence[str]) -> tuple:
    return tuple(normalize_entity(x) for x in t)


@dataclass
class ConstructorOutput:
    """What a constructor reply says: the triples it wrote (in order, as candidate indices;
    None for a triple outside the candidates), where "the answer is" first occurs relative
    to them, and the answer text."""
    written: List[Optional[int]] = field(default_factory=list)
    answer_after: Optional[int] = None   # number of triples written before "the answer is"
    answer: Optional[str] = None


def parse_constructor(text, candidates: Sequence[Triple]) -> ConstructorOutput:
    if not isinstance(text, str):
        return ConstructorOutput()
    index: Dict[tuple, int] = {}
    for i, t in enumerate(candidates):
        index.setdefault(_key(t), i)
    out = ConstructorOutput()
    triples = list(_TRIPLE.finditer(text))
    m = _answer_outside(text, triples)
    cut = m.start() if m else len(text)
    for t in triples:
        if t.start() >= cut and out.answer_after is None and m:
            out.answer_after = len(out.written)
        out.written.append(index.get(_key(_fields(t))))
    if m:
        if out.answer_after is None:
            out.answer_after = len(out.written)
        out.answer = _answer_text(text, m)
    return out


def parse_answer(text) -> Optional[str]:
    if not isinstance(text, str):
        return None
    m = _answer_outside(text, list(_TRIPLE.finditer(text)))
    if m is None:
        ans = text.strip().split("\n")[0].strip().rstrip(".").strip()
        return ans or None
    return _answer_text(text, m)
