"""LlamaIndex retriever over a rasfast knowledge index and system.

    from rasfast.integrations.llama_index import RasfastRetriever
    retriever = RasfastRetriever.from_index("ix/", system="ras", k=5)
    nodes = retriever.retrieve("Where was Alda Morven born?")   # list of NodeWithScore
    nodes[0].node.metadata  # {"pid", "title", "score", "rank", "triples", "system", "answer"}
"""
from __future__ import annotations

from typing import Any, Dict, List, Optional

try:
    from llama_index.core.base.base_retriever import BaseRetriever
    from llama_index.core.schema import NodeWithScore, QueryBundle, TextNode
except ImportError as e:  # pragma: no cover - depends on the optional extra
    raise ImportError("rasfast.integrations.llama_index needs llama-index-core: "
                      "pip install 'rasfast[llamaindex]'") from e

from . import _common


class RasfastRetriever(BaseRetriever):
    """A ``llama_index.core`` retriever: runs ``system`` (registered name or system object)
    over ``kindex`` and returns its ranked passages as NodeWithScore (TextNode id
    ``rasfast-<pid>``)."""

    def __init__(self, kindex, system: Any = "ras", k: int = 5, encoder=None, llm=None,
                 system_options: Optional[Dict[str, Any]] = None, **kwargs):
        if isinstance(k, bool) or not isinstance(k, int) or k < 1:
            raise ValueError(f"k: expected an int >= 1, got {k!r}")
        self.kindex, self.k = kindex, k
        self.system_name = system if isinstance(system, str) else type(system).__name__
        self.runner = _common.make_system(kindex, system, encoder, llm, dict(system_options or {}))
        super().__init__(**kwargs)

    @classmethod
    def from_index(cls, path, system: Any = "ras", **kw) -> "RasfastRetriever":
        from ..index.knowledge import KnowledgeIndex
        return cls(KnowledgeIndex.load(path), system=system, **kw)

    def _retrieve(self, query_bundle: QueryBundle) -> List[NodeWithScore]:
        hits = _common.retrieve(self.runner, self.kindex, query_bundle.query_str, self.k, self.system_name)
        return [NodeWithScore(node=TextNode(text=text, id_=f"rasfast-{meta['pid']}", metadata=meta,
                                            excluded_embed_metadata_keys=["triples", "answer"],
                                            excluded_llm_metadata_keys=["score", "rank"]),
                              score=score)
                for text, score, meta in hits]


__all__ = ["RasfastRetriever"]
