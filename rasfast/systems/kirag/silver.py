"""Silver reasoning chains from MuSiQue, and the aligner's training pairs cut from them.

How a chain is built (one per question, from data shipped in ../shared/data):

1. MuSiQue's ``question_decomposition`` lists the hops: a sub-question (``#k`` refers to hop
   k's answer, substituted here), its answer, and ``paragraph_support_idx``, the supporting
   paragraph among the question's own 20 paragraphs. That paragraph is matched to the corpus
   on the exact (title, text) pair (SOURCES.md), which gives its passage id.
2. The hop's silver triple is the supporting passage's GPT-3.5 OpenIE triple that best fits
   the hop: +2 if the hop's answer occurs in the triple's subject or object (normalised text),
   +1 if the previous hop's answer (the bridge entity) does, plus the fraction of the
   sub-question's content words found in the triple. Ties go to the lower triple id.
3. A hop whose passage has no triples ends the chain there (``complete`` is then False).

Training pairs (KiRAG's aligner objective): for hop k, the query is the question plus
" knowledge triples: " and the silver chain's first k triples, the positive is triple k, and
the negatives are the triples of the documents a retriever returns for that query (the
paper's candidate set; without a retriever, the question's own 20 paragraphs, MuSiQue's
distractors), minus the chain's triples, sampled up to ``max_negatives`` with a fixed seed.
:func:`verify_chains` keeps only the chains from which a reader LLM answers correctly, as
the paper checks its chains.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np

from ...metrics import normalize_answer
from .loop import QUERY_JOIN
from .triples import TripleStore, chain_text

_STOP = set("a an the of in on at to for by with from and or is was were are be been who whom "
            "what which when where why how did does do that this as its his her their it".split())
_HOP_REF = re.compile(r"#(\d+)")


def _words(s: str) -> set:
    return {w for w in normalize_answer(s).split() if w not in _STOP}


@dataclass
class SilverChain:
    qid: str
    question: str
    triple_ids: List[int]                 # into TripleStore.from_dataset(musique)
    hop_questions: List[str]
    paragraph_pids: List[int] = field(default_factory=list)   # the question's 20 passages
    complete: bool = True


def _hop_triple(store: TripleStore, pid: int, subq: str, answer: str,
                bridge: Optional[str]) -> Optional[int]:
    ids = store.passage_triples(pid)
    if len(ids) == 0:
        return None
    ans, br, qw = normalize_answer(answer), normalize_answer(bridge or ""), _words(subq)
    best, best_score = None, -1.0
    for t in ids:
        s, p, o = store.triples[int(t)]
        ends = normalize_answer(s) + " | " + normalize_answer(o)
        score = 2.0 * bool(ans and ans in ends) + 1.0 * bool(br and br in ends)
        tw = _words(f"{s} {p} {o}")
        score += len(qw & tw) / max(len(qw), 1)
        if score > best_score:
            best, best_score = int(t), score
    return best


def silver_chains(ds, raw_questions: Sequence[dict], store: Optional[TripleStore] = None
                  ) -> List[SilverChain]:
    """One silver chain per MuSiQue question (``raw_questions``: the musique_train.json records,
    in the order of ``ds.questions``)."""
    store = store or TripleStore.from_dataset(ds)
    by_pair: Dict[Tuple[str, str], int] = {(p.title, p.text): p.pid for p in ds.passages}
    out = []
    for q in raw_questions:
        paras = {p["idx"]: by_pair[(p["title"], p["paragraph_text"])] for p in q["paragraphs"]}
        answers: List[str] = []
        chain, hops, complete = [], [], True
        for k, hop in enumerate(q["question_decomposition"]):
            subq = _HOP_REF.sub(lambda m: answers[int(m.group(1)) - 1]
                                if 0 < int(m.group(1)) <= len(answers) else m.group(0), hop["question"])
            answers.append(hop["answer"])
            hops.append(subq)
            pid = paras.get(hop["paragraph_support_idx"])
            t = None if pid is None else _hop_triple(store, pid, subq, hop["answer"],
                                                     answers[-2] if k else None)
            if t is None:
                complete = False
                break
            if t not in chain:
                chain.append(t)
        out.append(SilverChain(q["id"], q["question"], chain, hops, sorted(set(paras.values())),
                               complete))
    return out


def load_musique_chains(root=None):
    """(dataset, store, chains) for MuSiQue from the shared data folder."""
    from ...data import load_dataset
    from ...data.qa import _dataset_dir

    ds = load_dataset("musique", root)
    raw = json.loads((_dataset_dir(root, "musique") / "musique_train.json").read_text())
    store = TripleStore.from_dataset(ds)
    return ds, store, silver_chains(ds, raw, store)


@dataclass
class AlignerPair:
    query: str
    positive: str
    negatives: List[str]


def training_pairs(chains: Sequence[SilverChain], store: TripleStore, max_negatives: int = 7,
                   seed: int = 0, retriever=None, K0: int = 10) -> List[AlignerPair]:
    """Pairs for hop k of every chain: query = question (+ chain so far), positive = triple
    k. Negatives: with a ``retriever``, as the paper builds them, the triples of the ``K0``
    documents retrieved for that step's query (the candidate set the aligner ranks at that
    step; one retriever call for all steps); without one, the triples of the question's
    own paragraphs. Chain triples are never negatives; up to ``max_negatives`` (paper: 7)
    are sampled with a fixed seed."""
    rng = np.random.default_rng(seed)
    steps = []
    for c in chains:
        for k, t in enumerate(c.triple_ids):
            chain = [store.triples[i] for i in c.triple_ids[:k]]
            steps.append((c, t, c.question + QUERY_JOIN + chain_text(chain) if chain else c.question))
    retrieved = None
    if retriever is not None and steps:
        retrieved = retriever.retrieve([q for _, _, q in steps], K0)
    pairs = []
    for j, (c, t, query) in enumerate(steps):
        pids = [p.pid for p in retrieved[j]] if retrieved is not None else c.paragraph_pids
        pool = np.concatenate([store.passage_triples(p) for p in pids] or [np.zeros(0, np.int64)])
        pool = np.unique(pool[~np.isin(pool, c.triple_ids)])
        negs = rng.choice(pool, size=min(max_negatives, len(pool)), replace=False) if len(pool) else []
        pairs.append(AlignerPair(query, store.texts[t], [store.texts[int(i)] for i in negs]))
    return pairs


def verify_chains(chains: Sequence[SilverChain], store: TripleStore,
                  answers: Dict[str, Sequence[str]], reader, max_new_tokens: int = 32
                  ) -> List[SilverChain]:
    """The chains from which ``reader`` (a rasfast.llm backend) answers the question
    correctly -- the paper keeps a TRACE chain only when a reader answers from it. The
    reader sees the question and the chain's triples; its answer must contain a gold answer
    (``golden_match``). One batched call; a failed prompt drops its chain."""
    from ...llm.isolated import check_llm
    from ...llm.reader import ReaderInput, read
    from ...metrics import golden_match
    check_llm(reader, "reader")
    got = read(reader, [ReaderInput(c.question, [], [("", [store.triples[i] for i in c.triple_ids])])
                        for c in chains], max_new_tokens=max_new_tokens)
    return [c for c, r in zip(chains, got)
            if r.answer is not None and golden_match(r.answer, list(answers.get(c.qid, ()))) > 0]
