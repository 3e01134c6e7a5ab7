"""``rasfast index build``: corpus -> knowledge index directory.

Steps: read the corpus strictly (rasfast.knowledge.corpus); take triples from the corpus, or
extract them with an LLM through the journal (resumable, concurrent); embed the passages and
fit the theme model; build the triple graph; embed the triples; save (manifest last). Any
failure before the final write leaves a directory that does not load as an index.
"""
from __future__ import annotations

import pathlib
import time
from dataclasses import dataclass
from typing import Any, Dict, List, Optional

from .corpus import read_corpus
from .extract import corpus_record, extract_triples, extraction_record
from .index import MANIFEST, KnowledgeIndex
from .journal import Journal

JOURNAL = "journal.jsonl"


class UnparsedError(RuntimeError):
    """Some LLM replies held no parseable triples and the build was not told to accept that."""

    def __init__(self, message: str, pids: List[int]):
        super().__init__(message)
        self.pids = pids


@dataclass
class BuildReport:
    index: KnowledgeIndex
    path: pathlib.Path
    seconds: float
    extraction: Optional[Any] = None   # ExtractionOutcome when an LLM extracted the triples


def build_knowledge_index(corpus_path, out, encoder, llm=None, model: Optional[str] = None,
                          extract: bool = False, concurrency: int = 8, num_themes: int = 64,
                          allow_unparsed: bool = False, retry_unparsed: bool = False,
                          few_shot: bool = True, max_new_tokens: int = 256,
                          max_degree: Optional[int] = None, progress: bool = True,
                          journal_opener=open) -> BuildReport:
    """Builds and saves a knowledge index (see the module docstring).

    Args:
        llm: an LLM backend; used when ``extract`` is set or the corpus has no triples.
        model: the model name recorded in the manifest (default: ``llm.model``).
        allow_unparsed: accept passages whose reply held no triple (recorded in the manifest
            as ``unparsed``); otherwise the build stops with :class:`UnparsedError`.
        retry_unparsed: send those passages again (their journal entries are dropped first).
        journal_opener: ``open``-like function for journal appends (tests inject failures).
    """
    t0 = time.perf_counter()
    corpus = read_corpus(corpus_path)
    d = pathlib.Path(out)
    d.mkdir(parents=True, exist_ok=True)
    (d / MANIFEST).unlink(missing_ok=True)       # whatever happens next, no stale index loads
    outcome = None
    unparsed: List[int] = []
    if extract or (corpus.triples is None and llm is not None):
        if llm is None:
            raise ValueError("llm: --extract-triples needs an LLM (--llm openai --model NAME ...)")
        rec = extraction_record(model or getattr(llm, "model", None) or type(llm).__name__,
                                few_shot, max_new_tokens)
        with Journal(d / JOURNAL, rec, opener=journal_opener) as journal:
            if retry_unparsed:
                journal.forget([p for p, e in journal.entries.items() if e.get("status") == "unparsed"])
            outcome = extract_triples(corpus.passages, llm, journal, concurrency=concurrency,
                                      few_shot=few_shot, max_new_tokens=max_new_tokens,
                                      progress=progress)
        triples = [outcome.triples[p.pid] for p in corpus.passages]
        unparsed = outcome.unparsed
        if unparsed and not allow_unparsed:
            raise UnparsedError(
                f"triple extraction: {len(unparsed)} of {len(corpus.passages)} passages got a reply "
                f"with no parseable triple (passages {unparsed[:10]}{' ...' if len(unparsed) > 10 else ''}); "
                f"they are journaled in {d / JOURNAL}. No index was written. Re-run with "
                f"--retry-unparsed to ask again, or --allow-unparsed to index them without triples",
                unparsed)
        extraction: Dict[str, Any] = rec
    elif corpus.triples is not None:
        triples, extraction = corpus.triples, corpus_record(corpus.name)
    else:
        triples = [[] for _ in corpus.passages]
        extraction = {"source": "none", "model": None, "prompt": None, "prompt_sha256": None}
    ki = KnowledgeIndex.build(corpus.passages, triples, encoder, extraction,
                              source_ids=corpus.source_ids, num_themes=num_themes,
                              unparsed=unparsed, max_degree=max_degree)
    ki.save(d)
    return BuildReport(ki, d, time.perf_counter() - t0, outcome)


__all__ = ["build_knowledge_index", "BuildReport", "UnparsedError", "JOURNAL"]
