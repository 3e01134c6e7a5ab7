"""StructRAG's prompts (paper style, written for rasfast): the hybrid structure router, one
structurizer prompt per structure type, and the utilizer's decompose / extract / infer
prompts. Pure string formatting; every prompt is a chat message list, so any
:mod:`rasfast.llm` backend (OpenAI-compatible, HF, vLLM) sends the same thing.

Structurizer replies start with a ``Description:`` line (what the decomposer reads about
the structure), then the structure in the type's fixed format, which
:mod:`rasfast.systems.structrag.parse` reads tolerantly.
"""
from __future__ import annotations

from typing import Dict, List, Sequence

from .types import STRUCTURE_TYPES

ROUTER_INSTRUCTION = (
    "To answer a question from a set of documents, the documents are first turned into one "
    "knowledge structure. Choose the structure that suits the question best:\n"
    "table - statistical or comparison questions over many entities and attributes (counting, "
    "ranking, totals, averages);\n"
    "graph - long-chain questions that follow relations from entity to entity (multi-hop);\n"
    "algorithm - planning or procedural questions (steps, how to do something);\n"
    "catalogue - summarising questions over long or many documents (overviews, main points);\n"
    "chunk - simple single-hop questions answered by one passage.\n"
    "Reply with exactly one word: table, graph, algorithm, catalogue or chunk.")

# (document core content, question, structure) -- fictional, so no example leaks facts
_ROUTER_SHOTS = [
    ("\"Annual report of Orvane Mining\" \"Annual report of Kestrel Shipping\" \"Annual report of Dunmore Textiles\"",
     "Which of the three companies had the highest net profit, and what was the total revenue of all three?",
     "table"),
    ("\"Harlan Vey\" \"Drussel Academy\" \"Oskarby\"",
     "In which country is the academy where the founder of Velora Studios studied?", "graph"),
    ("\"Setting up the Tarn build server\" \"Tarn release checklist\"",
     "What steps must be taken, in order, to publish a new Tarn release?", "algorithm"),
    ("\"Proceedings of the Castrell Water Summit, day 1\" \"Proceedings of the Castrell Water Summit, day 2\"",
     "Summarise the main positions discussed at the summit.", "catalogue"),
    ("\"Mira Okonkwo\"", "In which year was Mira Okonkwo born?", "chunk"),
]

_DESCRIPTION_RULE = ("Start your reply with one line 'Description: <one sentence saying what the "
                     "structure holds>', then give the structure and nothing else.")

STRUCTURIZER_INSTRUCTIONS: Dict[str, str] = {
    "table": ("Turn the knowledge in the document that is relevant to the question into a table. "
              + _DESCRIPTION_RULE + " Write the table in markdown: a header row, a separator row "
              "(| --- | --- |), then one row per entity with one column per attribute; keep names, "
              "numbers and units exactly as written; write '\\|' for a '|' inside a cell."),
    "graph": ("Turn the knowledge in the document that is relevant to the question into a graph. "
              + _DESCRIPTION_RULE + " Write the graph as head-relation-tail triples, one per line, "
              "in the form (head | relation | tail). Extract only the triples the question needs, "
              "not every fact. Make each head and tail as complete as possible: it may be a name, a "
              "phrase or a whole sentence of the document, kept as written, without abbreviations."),
    "algorithm": ("Turn the procedure in the document that is relevant to the question into an "
                  "algorithm. " + _DESCRIPTION_RULE + " Write the algorithm as numbered pseudo-code "
                  "steps, one per line, with conditions and loops written out (IF / FOR EACH / "
                  "RETURN)."),
    "catalogue": ("Turn the document into a catalogue of its content relevant to the question. "
                  + _DESCRIPTION_RULE + " Write the catalogue as hierarchically numbered entries, "
                  "one per line (1, 1.1, 1.1.2, ...), each entry a heading followed by a colon and "
                  "a one-sentence summary of that part."),
    "chunk": ("Split the document into short, self-contained chunks of the knowledge relevant to "
              "the question. " + _DESCRIPTION_RULE + " Write each chunk as one paragraph that "
              "names its entities in full (no pronouns), separating chunks with a blank line."),
}

DECOMPOSE_INSTRUCTION = (
    "You are given a question and short descriptions of the structured knowledge built from its "
    "documents. Break the question into the simple sub-questions that must be answered from that "
    "knowledge to answer it, in the order they must be answered. Write one sub-question per "
    "line, nothing else. A simple question is its own single sub-question.")

# the paper's decomposer prompt has one worked example (its Figure 6); rasfast's is fictional
_DECOMPOSE_SHOT = (
    "Question:\nIn which country is the academy where the founder of Velora Studios studied?\n\n"
    "Knowledge:\n- A graph of Velora Studios, its founder Mira Okonkwo and her education.\n"
    "- A graph of the Drussel Academy and where it is.\n\nSub-questions:",
    "Who founded Velora Studios?\nWhere did Mira Okonkwo study?\nIn which country is the Drussel Academy?")

EXTRACT_INSTRUCTIONS: Dict[str, str] = {
    "table": ("From the table rows below, keep only the rows and cells that help answer the "
              "sub-question, checking the entities and attributes it mentions. Reply with the "
              "kept rows (with the header) or 'none'."),
    "graph": ("From the triples below, keep only the triples that help answer the sub-question, "
              "following the entities and relations it mentions. Reply with the kept triples, "
              "one per line, or 'none'."),
    "algorithm": ("From the algorithm below, keep only the steps that help answer the "
                  "sub-question. Reply with those steps or 'none'."),
    "catalogue": ("From the catalogue below, keep only the entries that help answer the "
                  "sub-question. Reply with those entries or 'none'."),
    "chunk": ("Answer the sub-question from the chunks below. Reply with the precise facts that "
              "answer it, with the names of their sources, or 'none'."),
    "text": ("Answer the sub-question from the text below. Reply with the precise facts that "
             "answer it or 'none'."),
}

def _chat(instruction: str, shots, user: str, few_shot: bool) -> List[Dict[str, str]]:
    msgs = [{"role": "system", "content": instruction}]
    if few_shot:
        for u, a in shots:
            msgs += [{"role": "user", "content": u}, {"role": "assistant", "content": a}]
    msgs.append({"role": "user", "content": user})
    return msgs


def router_user_message(question: str, core_content: str) -> str:
    return f"Documents:\n{core_content}\n\nQuestion:\n{question}\n\nStructure:"


def router_messages(question: str, core_content: str, few_shot: bool = True) -> List[Dict[str, str]]:
    """The router prompt: question and the documents' core content -> one structure type."""
    shots = [(router_user_message(q, c), t) for c, q, t in _ROUTER_SHOTS]
    return _chat(ROUTER_INSTRUCTION, shots, router_user_message(question, core_content), few_shot)


def router_text(question: str, core_content: str) -> str:
    """The router prompt as one plain string (for local models scoring completions)."""
    return f"{ROUTER_INSTRUCTION}\n\n{router_user_message(question, core_content)}"


def structurizer_messages(kind: str, question: str, title: str, text: str) -> List[Dict[str, str]]:
    """The structurizer prompt for one document and one structure type."""
    if kind not in STRUCTURIZER_INSTRUCTIONS:
        raise ValueError(f"kind: expected one of {STRUCTURE_TYPES}, got {kind!r}")
    doc = f"Title: {title}\n{text}" if title else text
    user = f"Question:\n{question}\n\nDocument:\n{doc}\n\n{kind.capitalize()}:"
    return _chat(STRUCTURIZER_INSTRUCTIONS[kind], (), user, False)


def decompose_messages(question: str, descriptions: Sequence[str]) -> List[Dict[str, str]]:
    info = "\n".join(f"- {d}" for d in descriptions if d) or "- (no structured knowledge)"
    user = f"Question:\n{question}\n\nKnowledge:\n{info}\n\nSub-questions:"
    return _chat(DECOMPOSE_INSTRUCTION, [_DECOMPOSE_SHOT], user, True)


def extract_messages(kind: str, subquestion: str, knowledge: str) -> List[Dict[str, str]]:
    instr = EXTRACT_INSTRUCTIONS.get(kind, EXTRACT_INSTRUCTIONS["text"])
    user = f"Sub-question:\n{subquestion}\n\nKnowledge:\n{knowledge}\n\nKept:"
    return _chat(instr, (), user, False)


__all__ = ["ROUTER_INSTRUCTION", "STRUCTURIZER_INSTRUCTIONS", "DECOMPOSE_INSTRUCTION",
           "EXTRACT_INSTRUCTIONS", "router_messages", "router_text",
           "structurizer_messages", "decompose_messages", "extract_messages"]
