"""The reader contract: how every rasfast system turns what it found into its final answer.

One home for the answering step, so a QA table compares what the systems *found*, not how
differently they asked. Every system's final answer -- dense RAG's, RAS's, GEAR's, KiRAG's,
StructRAG's, and the closed-book baseline's -- goes through :func:`read`:

- **one instruction family**: "Answer the question using the <documents | facts |
  knowledge> above", the same best-guess clause, and one **answer-shape rule**
  per question (:func:`answer_shape`): :data:`YES_NO_SHAPE`, only yes or no, for a question
  that asks whether something is so, such as the comparison "Are X and Y both ...?";
  otherwise :data:`ANSWER_SHAPE`, the entity or value the question asks for, in a few words);
- **one token budget**: :data:`MAX_NEW_TOKENS` generated tokens, greedy;
- **one post-processing**: :func:`finalize_answer` (first line, no ``Answer:`` prefix, no
  quotes or final period, "the answer is X" -> X, a reply shaped like a triple,
  ``s | r | o`` / ``(s, r, o)`` / ``<s; r; o>``, reduced to its answer element, and to a
  yes/no question (:func:`is_yes_no_question`) a reply that opens with "Yes," / "No." reduced
  to "yes" / "no");
- what differs between systems is only the **input** (:class:`ReaderInput`): passages, RAS's
  per-sub-query fact blocks (every triple of every step), StructRAG's structured
  knowledge, or nothing.

Two reader prompts obey the contract (``reader=``):

- ``"contract"`` (default): zero-shot, the structure of KiRAG's reader (its Figure 8:
  instruction, context, question, answer);
- ``"one-shot"``: GEAR's QA prompt (its Appendix J.3, written for rasfast): a reading-
  comprehension preamble, one worked example over passages, then the instruction to give a
  concise definitive answer of at most six words. Passage inputs only.

When the input does not fit the model's context window, :func:`fit_to_context` cuts it:
passages from the end; facts along the question graph (:func:`order_by_question_graph`:
triples touching entities named in the question first, then their 1-hop, 2-hop, ...
neighbourhood over shared heads and tails, as GEAR links triples), never by word overlap.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Sequence, Tuple

from ..types import RetrievedPassage, Triple

MAX_NEW_TOKENS = 32
PASSAGE_CHARS = 1500          # a passage's text is cut here (a few MuSiQue/HotpotQA ones are long)
READERS = ("contract", "one-shot")

READER_SYSTEM = "You answer questions using the context you are given."
# the answer-shape rule, chosen per question (:func:`answer_shape`). The entity rule is round
# 3's rule word for word, so a question that is not yes/no gets the prompt it always got; the
# yes/no rule is a prompt of its own, as one rule naming both shapes made the 1.5B reader
# answer "yes" to "Which actress ...?" questions (issue 40 C)
ANSWER_SHAPE = ("Reply with only the entity or value the question asks for, in a few words "
                "(a name, a date, a number or a short phrase), with no explanation.")
YES_NO_SHAPE = "The question asks whether something is so: reply with only yes or no, with no explanation."
BEST_GUESS = "If the context does not contain the answer, give your best guess."
_NOUN = {"passages": "documents", "facts": "facts", "both": "facts and documents",
         "knowledge": "knowledge"}


def answer_shape(question: str = "") -> str:
    """The answer-shape rule for ``question``: :data:`YES_NO_SHAPE` when it asks whether
    something is so (:func:`is_yes_no_question`), else :data:`ANSWER_SHAPE`."""
    return YES_NO_SHAPE if question and is_yes_no_question(question) else ANSWER_SHAPE


def instruction(kind: str, question: str = "") -> str:
    """The contract's instruction for an input of ``kind`` (see :meth:`ReaderInput.kind`) and
    ``question`` (which picks the answer-shape rule)."""
    shape = answer_shape(question)
    if kind == "none":
        return f"Answer the question. {shape} If you are not sure, give your best guess."
    return f"Answer the question using the {_NOUN[kind]} above. {BEST_GUESS} {shape}"


# GEAR's Appendix J.3 QA prompt, in rasfast's words: the same preamble, one worked example
# over passages (fictional facts, so the example leaks no world knowledge), the same answer
# rule (concise, definitive, at most six words) and layout ("Wikipedia Title: ...").
ONE_SHOT_PREAMBLE = ("As a careful reading-comprehension assistant, your task is to study the text "
                     "passages and the question and to give the correct answer.")
ONE_SHOT_EXAMPLE = (
    ("Orrin Vale", "Orrin Vale (March 3, 1901 – June 14, 1968) was a Canadian stage and film director."),
    ("The Salt Harbour", "The Salt Harbour is a 1934 drama film directed by Orrin Vale. It follows a "
                         "lighthouse keeper on a remote island and was restored in 2010."),
    ("Marta Lindqvist", "Marta Lindqvist is a Swedish novelist best known for her harbour trilogy."),
    ("Karel Dusek", "Karel Dusek was a nineteenth-century bishop of Brno."),
)
ONE_SHOT_QUESTION, ONE_SHOT_ANSWER = "When did the director of the film The Salt Harbour die?", "June 14, 1968."
ONE_SHOT_RULE = ("Given the following text passages and question, give a concise, definitive answer "
                 "with no further explanation, of at most 6 words.")


@dataclass
class ReaderInput:
    """What a system hands the reader for one question.

    ``passages``: ranked documents; ``fact_blocks``: (sub-query, triples) per retrieval step,
    RAS's layout (the sub-query may be ""); ``knowledge``: free text (StructRAG's structured
    knowledge). ``cut`` counts the items :func:`fit_to_context` dropped."""
    question: str
    passages: List[RetrievedPassage] = field(default_factory=list)
    fact_blocks: List[Tuple[str, List[Triple]]] = field(default_factory=list)
    knowledge: str = ""
    cut: int = 0

    def kind(self) -> str:
        facts = any(ts for _, ts in self.fact_blocks)
        if self.knowledge.strip():
            return "knowledge"
        if facts and self.passages:
            return "both"
        if facts or self.fact_blocks:
            return "facts"
        return "passages" if self.passages else "none"

    @property
    def triples(self) -> List[Triple]:
        return [t for _, ts in self.fact_blocks for t in ts]

    def context_text(self) -> str:
        """Everything the reader is shown besides the question and instructions."""
        parts = []
        if self.knowledge.strip():
            parts.append(self.knowledge.strip())
        if self.fact_blocks:
            parts.append(facts_text(self.fact_blocks))
        if self.passages:
            parts.append(passages_text(self.passages))
        return "\n\n".join(parts)


def _fact(t: Sequence[str]) -> str:
    return " | ".join(str(x).strip() for x in t[:3])


def facts_text(blocks: Sequence[Tuple[str, Sequence[Triple]]]) -> str:
    """RAS's per-sub-query layout: one block per step, its search then every new fact (a fact
    already shown in an earlier block is not repeated)."""
    seen, out = set(), []
    for i, (q, trip) in enumerate(blocks):
        facts = []
        for t in trip:
            key = tuple(str(x).strip().lower() for x in t[:3])
            if key in seen:
                continue
            seen.add(key)
            facts.append(_fact(t))
        head = f"Search {i + 1}: {q}\n" if q else ""
        out.append(f"{head}Facts:\n" + ("\n".join(facts) if facts else "(none)"))
    return "\n\n".join(out)


def passages_text(passages: Sequence[RetrievedPassage], max_chars: int = PASSAGE_CHARS) -> str:
    return "\n\n".join(f"Document {i + 1}: {getattr(p, 'title', '')}\n{str(getattr(p, 'text', ''))[:max_chars]}"
                       for i, p in enumerate(passages))


def messages(inp: ReaderInput, reader: str = "contract") -> List[Dict[str, str]]:
    """The chat prompt of ``reader`` for ``inp``."""
    if reader not in READERS:
        raise ValueError(f"reader: expected one of {', '.join(READERS)}, got {reader!r}")
    kind = inp.kind()
    if reader == "one-shot":
        if kind != "passages" and kind != "none":
            raise ValueError(f"reader 'one-shot' (GEAR's App. J.3 prompt) reads passages only; "
                             f"this input has {kind}")
        if kind == "none":   # J.3 without passages: the instruction alone
            return [{"role": "user", "content": f"{ONE_SHOT_RULE}\n\nQuestion: {inp.question}\nAnswer:"}]
        example = "\n\n".join(f"Wikipedia Title: {t}\n{x}" for t, x in ONE_SHOT_EXAMPLE)
        docs = "\n\n".join(f"Wikipedia Title: {p.title}\n{str(p.text)[:PASSAGE_CHARS]}" for p in inp.passages)
        return [{"role": "system", "content": ONE_SHOT_PREAMBLE},
                {"role": "user", "content": f"For example:\n\n{example}\n\nQuestion: {ONE_SHOT_QUESTION}\n"
                                            f"Answer: {ONE_SHOT_ANSWER}\n\n=====\n{ONE_SHOT_RULE}\n\n"
                                            f"{docs}\n\nQuestion: {inp.question}\nAnswer:"}]
    if kind == "none":
        return [{"role": "system", "content": READER_SYSTEM},
                {"role": "user", "content": f"Question: {inp.question}\n\n{instruction('none', inp.question)}"}]
    return [{"role": "system", "content": READER_SYSTEM},
            {"role": "user", "content": f"{inp.context_text()}\n\nQuestion: {inp.question}\n\n{instruction(kind, inp.question)}"}]


# -- post-processing --------------------------------------------------------------------------
_PREFIX = re.compile(r"^\s*(?:\*\*)?(?:final\s+|short\s+)?answer(?:\*\*)?\s*[:\-]\s*(?:\*\*)?", re.IGNORECASE)
_ANSWER_IS = re.compile(r"\b(?:so\s+)?the\s+(?:final\s+|short\s+)?answer\s+is\s*:?\s*(.+)$", re.IGNORECASE)
_TRIPLE_SHAPES = (
    re.compile(r"^\(?\s*[\"']?([^|]+?)[\"']?\s*\|\s*[\"']?([^|]+?)[\"']?\s*\|\s*[\"']?([^|]+?)[\"']?\s*\)?$"),
    re.compile(r"^<\s*([^;<>]+?)\s*;\s*([^;<>]+?)\s*;\s*([^;<>]+?)\s*>$"),
    re.compile(r"^\(\s*\"([^\"]+)\"\s*,\s*\"([^\"]+)\"\s*,\s*\"([^\"]+)\"\s*\)$"),
    re.compile(r"^\(\s*'([^']+)'\s*,\s*'([^']+)'\s*,\s*'([^']+)'\s*\)$"),
    re.compile(r"^\(\s*([^,()]+?)\s*,\s*([^,()]+?)\s*,\s*([^()]+?)\s*\)$"),
)


def _words(s: str) -> set:
    return set(re.findall(r"[a-z0-9]+", s.lower()))


def triple_answer(text: str, question: str = "") -> Optional[str]:
    """The answer element of a reply shaped like a triple, or None: the object, unless the
    object is named in the question and the subject is not (then the subject)."""
    for rx in _TRIPLE_SHAPES:
        m = rx.match(text.strip())
        if m:
            s, _, o = (x.strip().strip("\"'").strip() for x in m.groups())
            qw = _words(question)
            if qw and _words(o) and _words(o) <= qw and not (_words(s) <= qw):
                return s
            return o
    return None


# a question that asks whether something is so opens with an auxiliary or copula verb
# ("Are X and Y both ...?", "Is ...", "Did ...", "Were ... both ...?"); "Which is older, X or
# Y?" asks for an entity
_YES_NO_QUESTION = re.compile(r"^\s*(?:is|are|was|were|do|does|did|can|could|has|have|had|will|would|should|"
                              r"shall|may|might|must)\b", re.IGNORECASE)
# a reply that opens with yes/no followed by punctuation or its end ("Yes, both are ...", "No.")
_YES_NO_REPLY = re.compile(r"^\s*(yes|no)\s*(?:[,.;:!\-\u2013\u2014]|$)", re.IGNORECASE)


def is_yes_no_question(question: str) -> bool:
    """Whether ``question`` asks whether something is so (its answer is yes or no): it opens
    with an auxiliary or copula verb and holds no "or" between choices ("Is X or Y older?"
    asks for one of them)."""
    q = str(question or "")
    if not _YES_NO_QUESTION.match(q):
        return False
    return re.search(r"\bor\b", q, re.IGNORECASE) is None


def finalize_answer(reply: Optional[str], question: str = "") -> str:
    """The contract's post-processing of a reader reply (see the module docstring)."""
    answer = _first_answer(reply, question)
    if question and is_yes_no_question(question):
        m = _YES_NO_REPLY.match(answer)
        if m:
            return m.group(1).lower()
    return answer


def _first_answer(reply: Optional[str], question: str) -> str:
    for line in (reply or "").strip().splitlines():
        line = _PREFIX.sub("", line.strip()).strip()
        line = line.strip("`").strip()
        if not line:
            continue
        m = _ANSWER_IS.search(line)
        if m:
            line = m.group(1).strip()
        t = triple_answer(line, question)
        if t is not None:
            line = t
        line = line.strip().strip('"*`').strip()
        if line.endswith("."):
            line = line[:-1].strip()
        if line:
            return line
    return ""


# -- fitting the input to the context window --------------------------------------------------
def _norm(s: str) -> str:
    return " ".join(re.findall(r"[a-z0-9]+", str(s).lower()))


_STOP = frozenset("the a an of in on at to for by with from and or is was were are be who what which "
                  "when where whom whose how did does do that this as its it his her their".split())


def _linked_from_question(entity: str, question_words: set) -> bool:
    w = [x for x in _norm(entity).split() if x not in _STOP]
    return bool(w) and sum(x in question_words for x in w) * 2 >= len(w) + (len(w) > 1)


def order_by_question_graph(triples: Sequence[Triple], question: str) -> List[int]:
    """Indices of ``triples`` in question-graph order: the triples whose head or tail is an
    entity named in the question first, then those one shared head/tail further out, and so
    on (breadth first over the entity graph the triples form); ties keep the input order;
    triples not connected to a question entity come last, in input order."""
    qw = set(_norm(question).split()) - _STOP
    heads = [_norm(t[0]) for t in triples]
    tails = [_norm(t[2]) for t in triples]
    by_entity: Dict[str, List[int]] = {}
    for i, (h, t) in enumerate(zip(heads, tails)):
        by_entity.setdefault(h, []).append(i)
        by_entity.setdefault(t, []).append(i)
    dist: Dict[str, int] = {}
    frontier = [e for e in by_entity if _linked_from_question(e, qw)]
    for e in frontier:
        dist[e] = 0
    d = 0
    while frontier:
        nxt = []
        for e in frontier:
            for i in by_entity[e]:
                for other in (heads[i], tails[i]):
                    if other not in dist:
                        dist[other] = d + 1
                        nxt.append(other)
        frontier, d = nxt, d + 1
    inf = float("inf")
    key = [min(dist.get(heads[i], inf), dist.get(tails[i], inf)) for i in range(len(triples))]
    return sorted(range(len(triples)), key=lambda i: (key[i], i))


def count_tokens(llm, msgs: List[Dict[str, str]]) -> int:
    """Prompt tokens of ``msgs`` for ``llm`` (exact for a LocalLLM; else ~4 characters a token)."""
    eng = getattr(llm, "engine", None)
    if eng is not None and callable(getattr(llm, "render", None)) and callable(getattr(eng, "tokenize", None)):
        return len(eng.tokenize(llm.render(msgs)))
    return sum(len(m.get("content", "")) for m in msgs) // 4 + 8


def fit_to_context(inp: ReaderInput, llm, reader: str = "contract",
                   max_new_tokens: int = MAX_NEW_TOKENS, n_ctx: Optional[int] = None) -> ReaderInput:
    """``inp`` cut until its prompt fits ``n_ctx`` (default: the backend's ``n_ctx``; no
    limit when it has none) with room for the answer; facts are dropped from the far end of
    the question graph, passages from the end of the ranking."""
    limit = n_ctx or getattr(llm, "n_ctx", None)
    if not limit:
        return inp
    budget = int(limit) - int(max_new_tokens) - 8
    if count_tokens(llm, messages(inp, reader)) <= budget:
        return inp
    blocks = [(q, list(ts)) for q, ts in inp.fact_blocks]
    flat = [(b, j) for b, (_, ts) in enumerate(blocks) for j in range(len(ts))]
    pos = {bj: n for n, bj in enumerate(flat)}
    order = order_by_question_graph([blocks[b][1][j] for b, j in flat], inp.question)
    keep_facts = len(order)
    passages = list(inp.passages)

    def build(nf: int, np_: int) -> ReaderInput:
        kept = set(order[:nf])
        bl = [(q, [t for j, t in enumerate(ts) if pos[(b, j)] in kept]) for b, (q, ts) in enumerate(blocks)]
        return ReaderInput(inp.question, passages[:np_], bl, inp.knowledge,
                           cut=inp.cut + (len(order) - nf) + (len(passages) - np_))

    np_ = len(passages)
    # passages go first when both are present (the facts are the system's structure), one at a time
    while np_ > 0 and count_tokens(llm, messages(build(keep_facts, np_), reader)) > budget:
        np_ -= 1
    if count_tokens(llm, messages(build(keep_facts, np_), reader)) <= budget:
        return build(keep_facts, np_)
    lo, hi = 0, keep_facts          # the most facts that fit, by bisection
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if count_tokens(llm, messages(build(mid, np_), reader)) <= budget:
            lo = mid
        else:
            hi = mid - 1
    out = build(lo, np_)
    if inp.knowledge and count_tokens(llm, messages(out, reader)) > budget:
        # free text: keep the head that fits (about 3 characters a token, checked)
        k = inp.knowledge
        while k and count_tokens(llm, messages(ReaderInput(inp.question, out.passages, out.fact_blocks, k), reader)) > budget:
            k = k[: int(len(k) * 0.8)]
        out = ReaderInput(inp.question, out.passages, out.fact_blocks, k, cut=out.cut + 1)
    return out


@dataclass
class ReadResult:
    answer: Optional[str]     # None when the call failed
    reply: Optional[str]
    shown: ReaderInput        # the input after fitting: exactly what the reader was shown
    error: Optional[str] = None
    exception: Optional[BaseException] = None   # the failed call's exception
    reused: bool = False      # the reply is an earlier one to the same prompt (``read(known=...)``)


def read(llm, inputs: Sequence[ReaderInput], reader: str = "contract",
         max_new_tokens: int = MAX_NEW_TOKENS, known=None) -> List[ReadResult]:
    """The final answers of ``inputs`` through the contract: one batched call, each prompt
    isolated (a failed prompt is that question's error, never the batch's).

    ``known(messages, fitted_input)``, if given, returns an earlier reply of the same model to
    exactly these messages (greedy decoding: the reply it would give again), or None; those
    inputs are not sent to the LLM and their results say ``reused=True``."""
    from .isolated import generate_isolated
    if reader not in READERS:
        raise ValueError(f"reader: expected one of {', '.join(READERS)}, got {reader!r}")
    fitted = [fit_to_context(i, llm, reader, max_new_tokens) for i in inputs]
    msgs = [messages(i, reader) for i in fitted]
    earlier = [known(m, i) if known is not None else None for m, i in zip(msgs, fitted)]
    ask = [j for j, e in enumerate(earlier) if e is None]
    replies: List[Optional[str]] = list(earlier)
    errs: Dict[int, BaseException] = {}
    if ask:
        got, got_errs = generate_isolated(llm, [msgs[j] for j in ask], max_new_tokens)
        for n, j in enumerate(ask):
            replies[j] = got[n]
            if n in got_errs:
                errs[j] = got_errs[n]
    out = []
    for j, (inp, r) in enumerate(zip(fitted, replies)):
        if j in errs or r is None:
            e = errs.get(j)
            out.append(ReadResult(None, None, inp, None if e is None else f"{type(e).__name__}: {e}"[:300], e))
        else:
            out.append(ReadResult(finalize_answer(r, inp.question), r, inp, reused=earlier[j] is not None))
    return out


def settings() -> Dict[str, Any]:
    """The contract's settings (part of every evaluation cache key)."""
    return {"max_new_tokens": MAX_NEW_TOKENS, "passage_chars": PASSAGE_CHARS}


__all__ = ["ReaderInput", "ReadResult", "read", "messages", "finalize_answer", "triple_answer",
           "fit_to_context", "order_by_question_graph", "count_tokens", "facts_text", "passages_text",
           "instruction", "answer_shape", "MAX_NEW_TOKENS", "ANSWER_SHAPE", "YES_NO_SHAPE", "READERS", "settings", "is_yes_no_question"]
