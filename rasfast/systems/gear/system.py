"""GEAR as registry systems: a GEAR retriever (:mod:`.agent`) plus the reader contract.

- ``gear``: the multi-step agent (§5), the paper's "GEAR" row;
- ``gear-sync``: single-step SyncGE over the base retriever (§4, "+ SyncGE" rows);
- ``gear-naive``: single-step NaiveGE ("+ NaiveGE" rows; no LLM before the reader).

The QA setting is the paper's Table 3: the reader reads the top ``k`` = 5 passages of the
system's final ranking (:func:`rasfast.llm.reader.read`; ``reader="one-shot"`` is the
paper's own Appendix J.3 prompt).
"""
from __future__ import annotations

from typing import List, Optional, Sequence

from ...profile import Trace


class GEARSystem:
    """``run_batch(questions) -> [SystemResult]``: GEAR's ranking, then the reader over its
    top ``k`` passages (no LLM: no answer)."""

    def __init__(self, gear, llm=None, k: int = 5, reader: str = "contract", name: str = "gear",
                 offline_answerer=None, triples_of=None):
        from ...llm.reader import READERS
        if reader not in READERS:
            raise ValueError(f"reader: expected one of {', '.join(READERS)}, got {reader!r}")
        self.gear, self.llm, self.k, self.reader, self.name = gear, llm, k, reader, name
        # without an LLM: ``offline_answerer.answer([LoopState])`` over the top passages'
        # triples (``triples_of(pid)``), rasfast's model-free baseline, not a reader
        self.offline_answerer, self.triples_of = offline_answerer, triples_of

    def run(self, question: str):
        return self.run_batch([question])[0]

    def run_batch(self, questions: Sequence[str], trace: Optional[Trace] = None) -> List:
        from ...llm.reader import ReaderInput, read
        from ...profile import span
        from ...types import SystemResult
        res = self.gear.run_batch(list(questions), trace)
        inputs = [ReaderInput(r.question, list(r.passages[:self.k])) for r in res]
        live = [j for j, r in enumerate(res) if r.error is None]
        reads = {}
        if self.llm is None and self.offline_answerer is not None and live:
            from ...llm.reader import ReadResult
            from ...types import LoopState
            states = [LoopState(res[j].question, [res[j].question],
                                [[tuple(t) for p in inputs[j].passages for t in (self.triples_of(p.pid) or [])]])
                      for j in live]
            answers = self.offline_answerer.answer(states)
            reads = {j: ReadResult(a, None, inputs[j]) for j, a in zip(live, answers)}
        elif self.llm is not None and live:
            tr = res[0].trace
            with tr.activate(), span("answer", batch=len(live)):
                got = read(self.llm, [inputs[j] for j in live], self.reader)
            reads = dict(zip(live, got))
        out = []
        for j, r in enumerate(res):
            rd = reads.get(j)
            err = r.error if r.error is not None else (f"reader: {rd.error}" if rd is not None and rd.error else None)
            out.append(SystemResult(r.question, rd.answer if rd is not None else None, list(r.passages), r.trace,
                                    list(r.memory), err, r, shown=rd.shown if rd is not None else inputs[j],
                                    reply=rd.reply if rd is not None else None))
        return out


def build(kindex, base, llm=None, mode: str = "agent", k: int = 5, reader: str = "contract",
          max_iters: int = 4, base_k: int = 10, link_k: int = 5, backend: str = "auto",
          beam: Optional[dict] = None, name: str = "gear", offline_answerer=None) -> GEARSystem:
    """A GEARSystem over ``kindex`` with ``base`` as its base retriever."""
    from .agent import GEAR
    if kindex.graph.num_triples == 0:
        raise ValueError(f"system {name}: the index has no triples (build it from a corpus with "
                         "triples or with --extract-triples)")
    g = GEAR(base, kindex.graph, kindex.triple_emb, llm=llm, mode=mode, max_iters=max_iters,
             base_k=base_k, link_k=link_k, beam=beam, backend=backend)
    by_pid = kindex.triples_by_pid
    return GEARSystem(g, llm, k, reader, name, offline_answerer, lambda pid: by_pid.get(pid) or [])


__all__ = ["GEARSystem", "build"]
