"""rasfast: compiled kernels for graph-structured retrieval-augmented generation.

Public names are resolved lazily (PEP 562) so ``import rasfast`` stays cheap and optional
extras (triton, transformers, torch-geometric) are imported only when used.
"""
from __future__ import annotations

import importlib
from typing import Dict

from .dispatch import BackendUnavailable, backends, get_num_threads, set_num_threads

__version__ = "0.1.0"

# public name -> module that defines it
_LAZY: Dict[str, str] = {
    # ops (csrc/, kernels/, rasfast/ops/)
    "select_k": "rasfast.ops.select",
    "theme_scope": "rasfast.ops.theme",
    "scoped_dense_search": "rasfast.ops.theme",
    "theme_scoped_search": "rasfast.ops.theme",
    "triple_beam_search": "rasfast.ops.beam",
    "BeamResult": "rasfast.ops.beam",
    "segment_topk_scores": "rasfast.ops.segment",
    "segment_max_rank": "rasfast.ops.segment",
    "transformer_conv": "rasfast.ops.graph_conv",
    "graph_transformer_pool": "rasfast.ops.graph_conv",
    "triple_adjacency": "rasfast.ops.graph_build",
    # data structures and models
    "ThemeIndex": "rasfast.index.theme_index",
    "DistributedThemeIndex": "rasfast.index.distributed",
    "TripleGraph": "rasfast.graph",
    "GraphEncoder": "rasfast.models.graph_encoder",
    "build_question_graph": "rasfast.models.question_graph",
    "GraphLLM": "rasfast.llm.graph_llm",
    # the loop
    "RAS": "rasfast.systems.ras",
    # the knowledge index and the system registry
    "KnowledgeIndex": "rasfast.index.knowledge.index",
    "build_system": "rasfast.systems.registry",
    "Trace": "rasfast.profile",
    "KiRAG": "rasfast.systems.kirag",
}

_SUBMODULES = ("dispatch", "ops", "reference", "index", "theme", "graph", "models", "encode", "types",
               "parse", "llm", "profile", "data", "cli", "kernels", "systems", "integrations",
               "distributed")

__all__ = sorted(["backends", "BackendUnavailable", "__version__", "set_num_threads",
                  "get_num_threads", *_LAZY])


def __getattr__(name: str):
    if name in _LAZY:
        value = getattr(importlib.import_module(_LAZY[name]), name)
        globals()[name] = value
        return value
    if name in _SUBMODULES:
        return importlib.import_module(f"rasfast.{name}")
    raise AttributeError(f"module 'rasfast' has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(_LAZY) | set(_SUBMODULES))
