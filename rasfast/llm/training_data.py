"""Samples for the GraphLLM and the paper's multitask format.

One model serves both RAS roles through two instructions. A solved reasoning chain
(question, sub-queries, triples per step, answer) yields:

- planning samples: after each step, the target is ``[SUBQ] <next sub-query>``; after the
  last step it is ``[SUFFICIENT]``; a question needing no retrieval gives ``[NO_RETRIEVAL]``
  with an empty graph;
- one answering sample: all steps' knowledge, the target is the answer.
"""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any, Iterable, List, Optional, Sequence, Tuple

from .prompts import step_segments

Triple = Tuple[str, str, str]
TASKS = ("plan", "answer")


@dataclass
class GraphLLMSample:
    """One GraphLLM input (and its training target).

    task: ``"plan"`` or ``"answer"`` (picks the instruction).
    question: the user question (never truncated).
    context: text segments, oldest first (sub-queries and their triples); truncation drops
        the oldest first.
    graph: what the graph encoder takes (a list of subgraphs, oldest first), a precomputed
        graph vector (tensor ``[graph_dim]``), or None for an empty graph.
    target: the text to learn (training only).
    """
    task: str
    question: str
    context: List[str] = field(default_factory=list)
    graph: Any = None
    target: Optional[str] = None

    def __post_init__(self):
        if self.task not in TASKS:
            raise ValueError(f"task: expected one of {TASKS}, got {self.task!r}")
        if not isinstance(self.question, str) or not self.question.strip():
            raise ValueError(f"question: expected a non-empty string, got {self.question!r}")
        if isinstance(self.context, str) or not all(isinstance(c, str) for c in self.context):
            raise TypeError("context: expected a list of strings (segments, oldest first)")


def multitask_samples(question: str, subqueries: Sequence[str], step_triples: Sequence[Sequence[Triple]],
                      answer: str, graphs: Optional[Sequence[Any]] = None) -> List[GraphLLMSample]:
    """The paper's multitask samples for one solved chain.

    ``subqueries[0]`` is the question itself (the loop's first retrieval); ``graphs[i]``, when
    given, is the encoder input after step ``i`` (e.g. the first ``i+1`` subgraphs). An empty
    ``subqueries`` means the question needs no retrieval."""
    if len(step_triples) != len(subqueries):
        raise ValueError(f"step_triples: expected one list per sub-query ({len(subqueries)}), got {len(step_triples)}")
    if graphs is not None and len(graphs) != len(subqueries):
        raise ValueError(f"graphs: expected one per step ({len(subqueries)}), got {len(graphs)}")
    if not subqueries:
        return [GraphLLMSample("plan", question, [], None, "[NO_RETRIEVAL]"),
                GraphLLMSample("answer", question, [], None, answer)]
    out = []
    for i in range(len(subqueries)):
        ctx = step_segments(subqueries[:i + 1], step_triples[:i + 1])
        g = graphs[i] if graphs is not None else None
        target = f"[SUBQ] {subqueries[i + 1]}" if i + 1 < len(subqueries) else "[SUFFICIENT]"
        out.append(GraphLLMSample("plan", question, ctx, g, target))
    out.append(GraphLLMSample("answer", question, step_segments(subqueries, step_triples),
                              graphs[-1] if graphs is not None else None, answer))
    return out


def save_samples_jsonl(samples: Iterable[GraphLLMSample], path: str) -> None:
    """Write samples whose graphs are JSON-serialisable (e.g. triple lists) or None."""
    with open(path, "w", encoding="utf-8") as f:
        for s in samples:
            f.write(json.dumps(asdict(s)) + "\n")


def load_samples_jsonl(path: str) -> List[GraphLLMSample]:
    """Read samples written by :func:`save_samples_jsonl` (fields: task, question, context,
    graph, target); a bad line raises ValueError naming the line."""
    out = []
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                d = json.loads(line)
                out.append(GraphLLMSample(d["task"], d["question"], d.get("context", []), d.get("graph"),
                                          d.get("target")))
            except (ValueError, KeyError, TypeError) as e:
                raise ValueError(f"{path}:{n}: bad sample ({e})") from None
    return out
