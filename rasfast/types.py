"""The contract between the RAS loop and its components.

The loop (rasfast.systems.ras) owns the control flow; components are small protocols, all
batched: each call receives the still-active questions of one round together, and returns
one result per input, in order. Components never see each other, only these types.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, List, Optional, Protocol, Sequence, Tuple, runtime_checkable

# (subject, predicate, object), already stripped strings
Triple = Tuple[str, str, str]


@dataclass
class RetrievedPassage:
    pid: int
    title: str
    text: str
    score: float = 0.0

    @property
    def content(self) -> str:
        return f"{self.title}\n{self.text}"


@dataclass
class LoopState:
    """What planners and answerers see for one question at one round."""
    question: str
    subqueries: List[str] = field(default_factory=list)           # retrieved so far; [0] = question
    step_triples: List[List[Triple]] = field(default_factory=list)  # one list per retrieval step
    step_passages: List[List[RetrievedPassage]] = field(default_factory=list)
    graph: Optional[Any] = None  # the merged question graph (rasfast.systems.ras's QuestionGraph)
    # one vector per step's subgraph when the loop has a graph encoder (each encoded once)
    graph_embeddings: List[Any] = field(default_factory=list)
    # set by the answerer: what the final reader was shown (rasfast.llm.reader.ReaderInput)
    # and its raw reply
    reader_input: Optional[Any] = None
    reader_reply: Optional[str] = None

    @property
    def triples(self) -> List[Triple]:
        """All triples so far, step order, duplicates removed."""
        return list(dict.fromkeys(t for step in self.step_triples for t in step))

    @property
    def graph_embedding(self) -> Optional[Any]:
        """Mean of the per-subgraph vectors (RAS's single graph token input), or None."""
        if not self.graph_embeddings:
            return None
        import numpy as np
        return np.mean(np.stack([np.asarray(v, dtype=np.float32) for v in self.graph_embeddings]), axis=0)


@dataclass
class SystemResult:
    """One question's result from a registered system (rasfast.systems.build_system)."""
    question: str
    answer: Optional[str]
    passages: List[Any]                 # ranked RetrievedPassage list
    trace: Any
    triples: List[Triple] = field(default_factory=list)
    error: Optional[Any] = None
    detail: Any = None                  # the system's own result (e.g. RASResult, GEARResult)
    shown: Any = None                   # what the final reader was shown (rasfast.llm.reader.ReaderInput)
    reply: Optional[str] = None         # the reader's raw reply


@runtime_checkable
class Retriever(Protocol):
    def retrieve(self, queries: Sequence[str], k: int) -> List[List[RetrievedPassage]]:
        """Top-k passages per query."""
        ...


@runtime_checkable
class TripleExtractor(Protocol):
    def extract(self, passages: Sequence[RetrievedPassage]) -> List[List[Triple]]:
        """Triples per passage."""
        ...


@runtime_checkable
class Planner(Protocol):
    def plan(self, states: Sequence[LoopState]) -> List[str]:
        """Raw planner text per state: '[NO_RETRIEVAL]', '[SUBQ] ...' or '[SUFFICIENT]'
        (the loop parses it tolerantly)."""
        ...


@runtime_checkable
class Answerer(Protocol):
    def answer(self, states: Sequence[LoopState]) -> List[str]:
        """Answer text per state."""
        ...

__all__ = ['Triple', 'RetrievedPassage', 'LoopState', 'SystemResult', 'Retriever', 'TripleExtractor', 'Planner', 'Answerer']
