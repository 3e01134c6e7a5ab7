"""The router's training data, synthesized as the StructRAG paper does (Section 3.2,
"Hybrid Structure Router"): synthesize tasks -> simulate each structure type -> judge which
answered best -> preference pairs for DPO (:mod:`rasfast.systems.structrag.dpo`).

1. ``synthesize_tasks``: an LLM reads a set of documents and writes a question that needs
   them and its answer (one request per document set, all in one concurrent call).
2. ``simulate``: the whole StructRAG pipeline (structurize -> decompose -> extract -> infer)
   runs every task once per structure type, the router replaced by that fixed type, each
   type's tasks as one batch.
3. ``judge``: each type's answer is scored against the task's answer: token F1 (model-free,
   default), or an LLM judge asked whether the answer is correct (1) or not (0).
4. ``preference_pairs``: for every task whose best score beats another type's, pairs
   (question, core content, chosen = a best type, rejected = a worse type).

Any rasfast.llm backend works (OpenAIChat, HF, the local model); failures of one task's
requests lose only that task, never the batch.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Callable, Dict, List, Optional, Sequence, Tuple

from ...metrics import token_f1
from ...types import RetrievedPassage
from ._llm import check_llm, generate_isolated
from .dpo import Pair
from .router import core_content
from .types import STRUCTURE_TYPES

TASK_INSTRUCTION = (
    "You write exam questions. Read the documents and write ONE question that can only be "
    "answered by combining or comparing information from them, and its short answer (an entity, "
    "a number, a date or a short phrase). Reply exactly in two lines:\n"
    "Question: <the question>\nAnswer: <the answer>")

JUDGE_INSTRUCTION = (
    "Decide whether a predicted answer to a question is correct, given the reference answer. "
    "Reply with one word: correct or incorrect.")


@dataclass
class SynthTask:
    question: str
    answer: str
    documents: List[RetrievedPassage]


@dataclass
class Simulation:
    """Each structure type's answer per task (None: that run failed)."""
    tasks: List[SynthTask]
    answers: Dict[str, List[Optional[str]]] = field(default_factory=dict)


_Q = re.compile(r"question\s*:\s*(.+)", re.IGNORECASE)
_A = re.compile(r"answer\s*:\s*(.+)", re.IGNORECASE)


def parse_task(reply) -> Optional[Tuple[str, str]]:
    """(question, answer) from a "Question: ...\\nAnswer: ..." reply, or None."""
    if not isinstance(reply, str):
        return None
    q, a = _Q.search(reply), _A.search(reply)
    if q is None or a is None:
        return None
    question = q.group(1).strip().split("\n")[0].strip()
    answer = a.group(1).strip().split("\n")[0].strip().rstrip(".")
    return (question, answer) if question and answer else None


def _docs_text(docs: Sequence[RetrievedPassage], max_chars: int) -> str:
    text = "\n\n".join(f"Title: {d.title}\n{d.text}" if d.title else d.text for d in docs)
    return text[:max_chars]


def synthesize_tasks(llm, document_sets: Sequence[Sequence[RetrievedPassage]],
                     max_chars: int = 6000, max_new_tokens: int = 96) -> List[SynthTask]:
    """One task per document set whose reply parses (replies that do not are dropped)."""
    check_llm(llm)
    prompts = [[{"role": "system", "content": TASK_INSTRUCTION},
                {"role": "user", "content": f"Documents:\n{_docs_text(docs, max_chars)}\n\n"
                                            "Question and answer:"}]
               for docs in document_sets]
    replies, _ = generate_isolated(llm, prompts, max_new_tokens)
    out = []
    for docs, r in zip(document_sets, replies):
        qa = parse_task(r)
        if qa is not None:
            out.append(SynthTask(qa[0], qa[1], list(docs)))
    return out


class FixedRouter:
    """Routes every question to one structure type (to simulate that type)."""

    def __init__(self, kind: str):
        if kind not in STRUCTURE_TYPES:
            raise ValueError(f"kind: expected one of {STRUCTURE_TYPES}, got {kind!r}")
        self.kind = kind

    def route(self, items) -> List[str]:
        return [self.kind for _ in items]


def simulate(tasks: Sequence[SynthTask], make_system: Callable[[object], object],
             types: Sequence[str] = STRUCTURE_TYPES) -> Simulation:
    """Runs every task through ``make_system(router)`` (a StructRAG given that router) once
    per structure type in ``types``."""
    sim = Simulation(list(tasks))
    for kind in types:
        system = make_system(FixedRouter(kind))
        results = system.run_batch([t.question for t in tasks], [t.documents for t in tasks])
        sim.answers[kind] = [None if r.error is not None else r.answer for r in results]
    return sim


def judge(sim: Simulation, llm=None) -> List[Dict[str, float]]:
    """Per task, {type: score}: token F1 against the task's answer, or with ``llm`` the
    judge's verdict (1.0 correct, 0.0 incorrect or unparsable). A failed run scores 0."""
    kinds = list(sim.answers)
    scores: List[Dict[str, float]] = [{} for _ in sim.tasks]
    if llm is None:
        for i, t in enumerate(sim.tasks):
            for k in kinds:
                a = sim.answers[k][i]
                scores[i][k] = 0.0 if a is None else token_f1(a, [t.answer])
        return scores
    check_llm(llm)
    jobs = [(i, k) for i in range(len(sim.tasks)) for k in kinds if sim.answers[k][i] is not None]
    prompts = [[{"role": "system", "content": JUDGE_INSTRUCTION},
                {"role": "user", "content": f"Question: {sim.tasks[i].question}\nReference answer: "
                                            f"{sim.tasks[i].answer}\nPredicted answer: "
                                            f"{sim.answers[k][i]}\nVerdict:"}] for i, k in jobs]
    replies, _ = generate_isolated(llm, prompts, 4)
    for i, t in enumerate(sim.tasks):
        for k in kinds:
            scores[i][k] = 0.0
    for (i, k), r in zip(jobs, replies):
        word = (r or "").strip().lower()
        scores[i][k] = 1.0 if word.startswith("correct") else 0.0
    return scores


def preference_pairs(sim: Simulation, scores: Sequence[Dict[str, float]]) -> List[Pair]:
    """(question, core content, chosen, rejected) for every task, every best-scoring type
    against every strictly worse one; tasks where all types tie give no pair."""
    pairs: List[Pair] = []
    for t, sc in zip(sim.tasks, scores):
        if not sc:
            continue
        best = max(sc.values())
        winners = [k for k, v in sc.items() if v == best]
        losers = [k for k, v in sc.items() if v < best]
        content = core_content(t.documents)
        pairs += [(t.question, content, w, l) for w in winners for l in losers]
    return pairs


def synthesize_router_data(llm, document_sets: Sequence[Sequence[RetrievedPassage]],
                           make_system: Callable[[object], object], judge_llm=None,
                           types: Sequence[str] = STRUCTURE_TYPES) -> Tuple[List[Pair], Simulation, List[Dict[str, float]]]:
    """The whole pipeline: (preference pairs, the simulation, the judge's scores)."""
    tasks = synthesize_tasks(llm, document_sets)
    sim = simulate(tasks, make_system, types)
    scores = judge(sim, judge_llm)
    return preference_pairs(sim, scores), sim, scores


__all__ = ["SynthTask", "Simulation", "FixedRouter", "parse_task", "synthesize_tasks", "simulate",
           "judge", "preference_pairs", "synthesize_router_data"]
