"""KiRAG: knowledge-driven iterative retrieval of triples, batched over questions.

- :class:`KiRAG` / :func:`from_components`: the loop (``run_batch``: one retriever, one
  aligner and one constructor call per round), document ranking, per-stage trace.
- Constructors: :class:`HeuristicConstructor` (model-free default), :class:`LLMConstructor`
  (the paper's prompt for any rasfast.llm backend).
- Aligner training: :func:`train_aligner`, :func:`save_aligner`, :func:`load_aligner`, with
  silver chains from MuSiQue (:mod:`rasfast.systems.kirag.silver`).
- :func:`evaluate_kirag_musique`: R@k of dense, dense + GEAR, KiRAG (zero-shot / trained).
"""
from .aligner import TrainedAligner, load_aligner, save_aligner, train_aligner
from .constructor import (ConstructorInput, Decision, HeuristicConstructor, LLMConstructor,
                          heuristic_decision)
from .loop import KiRAG, KiRAGResult, KiRAGStep, from_components
from .silver import (AlignerPair, SilverChain, load_musique_chains, silver_chains, training_pairs,
                     verify_chains)
from .triples import TripleEmbeddings, TripleStore


def evaluate_kirag_musique(*args, **kwargs):
    from .eval import evaluate_kirag_musique as _run
    return _run(*args, **kwargs)


__all__ = ["KiRAG", "KiRAGResult", "KiRAGStep", "from_components", "HeuristicConstructor",
           "LLMConstructor", "ConstructorInput", "Decision", "heuristic_decision",
           "train_aligner", "save_aligner", "load_aligner", "TrainedAligner", "AlignerPair",
           "SilverChain", "silver_chains", "training_pairs", "verify_chains", "load_musique_chains",
           "TripleStore", "TripleEmbeddings", "evaluate_kirag_musique"]
