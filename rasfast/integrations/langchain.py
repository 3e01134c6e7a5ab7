"""LangChain retriever over a rasfast knowledge index and system.

    from rasfast.integrations.langchain import RasfastRetriever
    retriever = RasfastRetriever.from_index("ix/", system="gear", k=5)
    docs = retriever.invoke("Where was Alda Morven born?")   # list of langchain Documents
    docs[0].metadata  # {"pid", "title", "score", "rank", "triples", "system", "answer"}
"""
from __future__ import annotations

from typing import Any, Dict, List, Optional

try:
    from langchain_core.callbacks import CallbackManagerForRetrieverRun
    from langchain_core.documents import Document
    from langchain_core.retrievers import BaseRetriever
    from pydantic import ConfigDict, Field
except ImportError as e:  # pragma: no cover - depends on the optional extra
    raise ImportError("rasfast.integrations.langchain needs langchain-core: "
                      "pip install 'rasfast[langchain]'") from e

from . import _common


class RasfastRetriever(BaseRetriever):
    """A ``langchain_core`` retriever: runs ``system`` (a registered name such as "ras",
    "gear", "kirag", "structrag", or a ready system object) over ``kindex`` and returns its
    ranked passages as Documents."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    kindex: Any
    system: Any = "ras"
    k: int = Field(default=5, ge=1)
    encoder: Any = None
    llm: Any = None
    system_options: Dict[str, Any] = Field(default_factory=dict)
    _runner: Any = None

    def model_post_init(self, __context: Any) -> None:
        self._runner = _common.make_system(self.kindex, self.system, self.encoder, self.llm,
                                           dict(self.system_options))

    @classmethod
    def from_index(cls, path, system: Any = "ras", **kw) -> "RasfastRetriever":
        from ..knowledge import KnowledgeIndex
        return cls(kindex=KnowledgeIndex.load(path), system=system, **kw)

    def _get_relevant_documents(self, query: str, *,
                                run_manager: Optional[CallbackManagerForRetrieverRun] = None) -> List[Document]:
        name = self.system if isinstance(self.system, str) else type(self.system).__name__
        return [Document(page_content=text, metadata=meta, id=f"rasfast-{meta['pid']}")
                for text, _, meta in _common.retrieve(self._runner, self.kindex, query, self.k, name)]


__all__ = ["RasfastRetriever"]
