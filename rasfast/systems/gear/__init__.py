"""GEAR (Graph-enhanced Agent for Retrieval-augmented generation), rasfast's implementation.

- :mod:`.expand`: graph expansion around a base retriever -- NaiveGE and SyncGE seeds, the
  diverse triple beam search (:func:`rasfast.triple_beam_search`), Reciprocal Rank Fusion
  (the paper's §4, Eq. 1-3, Alg. 1);
- :mod:`.prompts`: the paper's online prompts (App. J.2: read with and without the gist
  memory, reasoning for termination, query re-writing) and their tolerant parsers;
- :mod:`.agent`: the multi-step agent (§5: gist memory, reason, rewrite, passageLink, Eq. 4-10);
- :mod:`.system`: the registry's systems ``gear`` (the agent), ``gear-sync`` and
  ``gear-naive`` (the paper's single-step retrievers).

docs/gear.md maps every element of the paper to the code.
"""
from .expand import (RRF_K, ExpansionResult, dense_rankings, evaluate_musique, graph_expand,  # noqa: F401
                     link_triples, reciprocal_rank_fusion, recall_at_k)

__all__ = ["reciprocal_rank_fusion", "graph_expand", "ExpansionResult", "link_triples",
           "recall_at_k", "dense_rankings", "evaluate_musique", "RRF_K"]
