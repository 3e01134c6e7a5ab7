"""The prompts of RAS (paper style, written for rasfast): the planner and answerer
instructions the GraphLLM is trained with, few-shot chat prompts for closed/API models, and
the text-to-triples prompt. Triples are written ``(S> subject| P> predicate| O> object)``.

Everything here is pure string formatting over :class:`~rasfast.types.LoopState`
fields, so a prompt is the same whichever backend sends it.
"""
from __future__ import annotations

from typing import Dict, List, Sequence

from ..parse import format_triples  # the loop's writer of the (S> s| P> p| O> o) form
from ..types import Triple

PLANNER_INSTRUCTION = (
    "You plan retrieval for answering a question step by step. You see the question and the "
    "knowledge gathered so far (sub-queries already searched and the triples found). Decide the "
    "next step and reply with exactly one of:\n"
    "[NO_RETRIEVAL] - the question can be answered without looking anything up;\n"
    "[SUFFICIENT] - the knowledge gathered so far is enough to answer the question;\n"
    "[SUBQ] <sub-query> - a short, self-contained question for the single missing fact to "
    "retrieve next (use entity names found so far, not pronouns).")

ANSWERER_INSTRUCTION = (
    "Answer the question using the knowledge provided (a graph of triples gathered by "
    "retrieval) and your own knowledge when it is missing. Reply with the answer only: an "
    "entity, a date, a number or a few words, no explanation.")

TRIPLES_INSTRUCTION = (
    "Convert the passage into knowledge triples. Write every fact as "
    "(S> subject| P> predicate| O> object) and separate triples with commas. Use full entity "
    "names as written in the passage (resolve pronouns to the entity they refer to), keep "
    "predicates short, one fact per triple, and output only the triples.")

# GraphLLM: the instruction before the graph token, and the cue after the question
GRAPH_INSTRUCTIONS: Dict[str, str] = {"plan": PLANNER_INSTRUCTION, "answer": ANSWERER_INSTRUCTION}
GRAPH_CUES: Dict[str, str] = {"plan": "Next step:", "answer": "Answer:"}


def step_segments(subqueries: Sequence[str], step_triples: Sequence[Sequence[Triple]]) -> List[str]:
    """One text segment per retrieval step, oldest first (what truncation drops first)."""
    segs = []
    for i, q in enumerate(subqueries):
        trip = step_triples[i] if i < len(step_triples) else []
        segs.append(f"[{i + 1}] Sub-query: {q}\nTriples: {format_triples(trip) if trip else '(none found)'}")
    return segs


def knowledge_block(subqueries: Sequence[str], step_triples: Sequence[Sequence[Triple]]) -> str:
    segs = step_segments(subqueries, step_triples)
    return "Knowledge so far:\n" + ("\n".join(segs) if segs else "(nothing retrieved yet)")


def planner_user_message(question: str, subqueries, step_triples) -> str:
    return f"Question: {question}\n{knowledge_block(subqueries, step_triples)}\nNext step:"


# Few-shot conversations for API models (fictional facts, so no example leaks world knowledge)
_PLAN_SHOTS = [
    ("What is 17 plus 25?", [], [], "[NO_RETRIEVAL]"),
    ("In which city was the founder of Velora Studios born?",
     ["In which city was the founder of Velora Studios born?"],
     [[("Velora Studios", "founded by", "Mira Okonkwo"), ("Velora Studios", "based in", "Port Elden")]],
     "[SUBQ] In which city was Mira Okonkwo born?"),
    ("In which city was the founder of Velora Studios born?",
     ["In which city was the founder of Velora Studios born?", "In which city was Mira Okonkwo born?"],
     [[("Velora Studios", "founded by", "Mira Okonkwo")], [("Mira Okonkwo", "born in", "Castrell")]],
     "[SUFFICIENT]"),
]
_TRIPLE_SHOT = (
    "Title: Harlan Vey\nHarlan Vey (born 1931) is a painter from Oskarby. He studied at the Drussel Academy, "
    "which was founded in 1890.",
    "(S> Harlan Vey| P> born in| O> 1931), (S> Harlan Vey| P> occupation| O> painter), "
    "(S> Harlan Vey| P> from| O> Oskarby), (S> Harlan Vey| P> studied at| O> Drussel Academy), "
    "(S> Drussel Academy| P> founded in| O> 1890)")


def _chat(instruction, shots, user, few_shot):
    msgs = [{"role": "system", "content": instruction}]
    if few_shot:
        for s_user, s_reply in shots:
            msgs += [{"role": "user", "content": s_user}, {"role": "assistant", "content": s_reply}]
    msgs.append({"role": "user", "content": user})
    return msgs


def planner_messages(question, subqueries, step_triples, few_shot: bool = True) -> List[Dict[str, str]]:
    """Chat prompt for an API model acting as the RAS planner."""
    shots = [(planner_user_message(q, s, t), r) for q, s, t, r in _PLAN_SHOTS]
    return _chat(PLANNER_INSTRUCTION, shots, planner_user_message(question, subqueries, step_triples), few_shot)


def triples_messages(passage_text: str, few_shot: bool = True) -> List[Dict[str, str]]:
    """Chat prompt converting one passage (title + text) to triples."""
    shots = [(f"Passage:\n{_TRIPLE_SHOT[0]}\nTriples:", _TRIPLE_SHOT[1])]
    return _chat(TRIPLES_INSTRUCTION, shots, f"Passage:\n{passage_text}\nTriples:", few_shot)
