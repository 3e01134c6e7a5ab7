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
        from ..index.knowledge import KnowledgeIndex
        return cls(kindex=KnowledgeIndex.load(path), system=system, **kw)

    def _name(self) -> str:
        return self.system if isinstance(self.system, str) else type(self.system).__name__

    def _documents(self, queries: List[str], k: Optional[int]) -> List[List[Document]]:
        found = _common.retrieve_batch(self._runner, self.kindex, queries,
                                       self.k if k is None else k, self._name())
        return [[Document(page_content=text, metadata=meta, id=f"rasfast-{meta['pid']}")
                 for text, _, meta in docs] for docs in found]

    def _get_relevant_documents(self, query: str, *,
                                run_manager: Optional[CallbackManagerForRetrieverRun] = None,
                                k: Optional[int] = None, **kwargs: Any) -> List[Document]:
        """``invoke(query, k=n)`` returns n documents (LangChain's per-call ``k``)."""
        return self._documents([query], k)[0]

    def batch(self, inputs: List[str], config: Any = None, *, return_exceptions: bool = False,
              **kwargs: Any) -> List[Any]:
        """All queries in ONE ``run_batch`` call of the system (its questions advance
        together), instead of LangChain's default of one ``invoke`` per query. On a failure
        with ``return_exceptions``, each query is retried alone so only the failing one
        gets its exception."""
        if not inputs:
            return []
        try:
            return self._documents(list(inputs), kwargs.get("k"))
        except Exception as e:
            if not return_exceptions:
                raise
            out: List[Any] = []
            for q in inputs:
                try:
                    out.append(self._documents([q], kwargs.get("k"))[0])
                except Exception as one:  # noqa: BLE001 - returned, as the caller asked
                    out.append(one)
            return out if len(inputs) > 1 else [e]

    async def abatch(self, inputs: List[str], config: Any = None, *,
                     return_exceptions: bool = False, **kwargs: Any) -> List[Any]:
        import asyncio
        return await asyncio.get_running_loop().run_in_executor(
            None, lambda: self.batch(inputs, config, return_exceptions=return_exceptions, **kwargs))


__all__ = ["RasfastRetriever"]
