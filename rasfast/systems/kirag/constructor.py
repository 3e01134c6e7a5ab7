"""Reasoning Chain Constructors: pick the next triple of each question's chain, or stop.

A constructor gets one round's still-active questions together (``construct(inputs)``) and
returns one :class:`Decision` per input.

- :class:`HeuristicConstructor` (model-free default): among candidates that add an entity
  not yet in the chain, the best-scoring one that shares an entity with the chain's last
  triple, else the best one; stop when no candidate adds a new entity.
- :class:`LLMConstructor`: the paper's constructor prompt for any ``rasfast.llm`` backend,
  one batched ``generate`` per round. The first written triple that is a candidate is
  appended (others are filtered out). The question stops when "the answer is" comes before
  any such triple (the chain already answers it) or right after it (this triple completes
  the chain). A reply with no usable triple and no answer, or a failed LLM call, falls back
  to the heuristic decision for that question alone (``Decision.fallback``; a failed call is
  recorded in ``Decision.error``), so malformed output never stops or crashes the loop.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import List, Optional, Protocol, Sequence

from ...llm.isolated import generate_isolated
from ...types import Triple
from .prompts import constructor_prompt, parse_constructor
from .triples import entities


@dataclass
class ConstructorInput:
    question: str
    chain: List[Triple]
    candidates: List[Triple]     # the aligner's top-N, best first
    scores: List[float]


@dataclass
class Decision:
    choice: Optional[int]        # index into candidates to append, or None
    stop: bool = False           # the chain is finished after this decision
    answer: Optional[str] = None
    raw: Optional[str] = None    # the LLM's reply, if any
    fallback: bool = False       # the heuristic decided because the reply was unusable
    error: Optional[str] = None  # the LLM call for this question failed (then fallback)


class Constructor(Protocol):
    def construct(self, inputs: Sequence[ConstructorInput]) -> List[Decision]:
        ...


def heuristic_decision(inp: ConstructorInput) -> Decision:
    seen = {e for t in inp.chain for e in entities(t)}
    in_chain = set(inp.chain)
    fresh = [i for i, t in enumerate(inp.candidates)
             if t not in in_chain and any(e not in seen for e in entities(t))]
    if not fresh:
        return Decision(None, stop=True)
    if inp.chain:
        last = set(entities(inp.chain[-1]))
        for i in fresh:
            if last & set(entities(inp.candidates[i])):
                return Decision(i)
    return Decision(fresh[0])


class HeuristicConstructor:
    """Model-free: follow the entity links of the chain (see the module docstring)."""

    def construct(self, inputs: Sequence[ConstructorInput]) -> List[Decision]:
        return [heuristic_decision(x) for x in inputs]


class LLMConstructor:
    """The paper's constructor prompt through any rasfast.llm backend (``llm.generate``)."""

    def __init__(self, llm, max_new_tokens: int = 128, temperature: float = 0.0):
        if not callable(getattr(llm, "generate", None)):
            raise TypeError(f"llm: expected a rasfast.llm backend with .generate(prompts), got "
                            f"{type(llm).__name__}")
        self.llm, self.max_new_tokens, self.temperature = llm, max_new_tokens, temperature

    def construct(self, inputs: Sequence[ConstructorInput]) -> List[Decision]:
        prompts = [constructor_prompt(x.question, x.chain, x.candidates) for x in inputs]
        # per-question isolation: one failed prompt (or a short reply list) falls back for
        # that question alone; the other questions keep their replies
        replies, errors = generate_isolated(self.llm, prompts, self.max_new_tokens,
                                            self.temperature)
        out = []
        for i, (x, r) in enumerate(zip(inputs, replies)):
            if i in errors:
                d = heuristic_decision(x)
                e = errors[i]
                d.raw, d.fallback, d.error = None, True, f"{type(e).__name__}: {e}"
                out.append(d)
            else:
                out.append(self._decide(x, r))
        return out

    @staticmethod
    def _decide(inp: ConstructorInput, reply) -> Decision:
        out = parse_constructor(reply, inp.candidates)
        in_chain = set(inp.chain)
        usable = [(pos, i) for pos, i in enumerate(out.written)
                  if i is not None and inp.candidates[i] not in in_chain]
        raw = reply if isinstance(reply, str) else repr(reply)
        if out.answer_after is not None and (not usable or usable[0][0] >= out.answer_after):
            return Decision(None, stop=True, answer=out.answer, raw=raw)
        if usable:
            pos, i = usable[0]
            done = out.answer_after is not None and out.answer_after == pos + 1
            return Decision(i, stop=done, answer=out.answer if done else None, raw=raw)
        d = heuristic_decision(inp)
        d.raw, d.fallback = raw, True
        return d
