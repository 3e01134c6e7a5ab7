"""``rasfast index build``: corpus -> knowledge index directory.

Steps: read the corpus strictly (rasfast.index.knowledge.corpus); take triples from the corpus, or
extract them with an LLM through the journal (resumable, concurrent); embed the passages and
fit the theme model; build the triple graph; embed the triples; save (manifest last). Any
failure before the final write leaves a directory that does not load as an index.
"""
from __future__ import annotations

import pathlib
import time
from dataclasses import dataclass
from typing import Any, Dict, List, Optional

from ...data.qa import Passage
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


def _extract(passages, d: pathlib.Path, llm, rec, concurrency, allow_unparsed, retry_unparsed,
             few_shot, max_new_tokens, progress, journal_opener):
    """(triples per passage, unparsed pids, outcome) through the directory's journal."""
    with Journal(d / JOURNAL, rec, opener=journal_opener) as journal:
        if retry_unparsed:
            journal.forget([p for p, e in journal.entries.items() if e.get("status") == "unparsed"])
        outcome = extract_triples(passages, llm, journal, concurrency=concurrency, few_shot=few_shot,
                                  max_new_tokens=max_new_tokens, progress=progress)
    mine = {p.pid for p in passages}
    unparsed = [p for p in outcome.unparsed if p in mine]
    if unparsed and not allow_unparsed:
        raise UnparsedError(
            f"triple extraction: {len(unparsed)} of {len(passages)} passages got a reply with no "
            f"parseable triple (passages {unparsed[:10]}{' ...' if len(unparsed) > 10 else ''}); "
            f"they are journaled in {d / JOURNAL}. No index was written. Re-run with "
            f"--retry-unparsed to ask again, or --allow-unparsed to index them without triples",
            unparsed)
    return [outcome.triples[p.pid] for p in passages], unparsed, outcome


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
        extraction: Dict[str, Any] = extraction_record(
            model or getattr(llm, "model", None) or type(llm).__name__, few_shot, max_new_tokens)
        triples, unparsed, outcome = _extract(corpus.passages, d, llm, extraction, concurrency,
                                              allow_unparsed, retry_unparsed, few_shot,
                                              max_new_tokens, progress, journal_opener)
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


def add_to_knowledge_index(index_dir, corpus_path, encoder, llm=None, concurrency: int = 8,
                           allow_unparsed: bool = False, retry_unparsed: bool = False,
                           progress: bool = True, journal_opener=open) -> BuildReport:
    """Appends a corpus's passages to a saved index (``KnowledgeIndex.add``), with triples the
    way the index got its own: from the corpus, or extracted by the SAME model and prompt as
    recorded in the manifest (through the index's journal, so an interrupted add resumes).
    New passage ids continue after the largest id in the index."""
    t0 = time.perf_counter()
    d = pathlib.Path(index_dir)
    ki = KnowledgeIndex.load(d)
    corpus = read_corpus(corpus_path)
    start = max(ki.pids) + 1 if len(ki) else 0
    passages = [Passage(start + i, p.title, p.text) for i, p in enumerate(corpus.passages)]
    ex = ki.extraction
    outcome, unparsed = None, []
    if ex.get("source") == "llm":
        if llm is None:
            raise ValueError(f"llm: this index's triples were extracted by {ex.get('model')!r}; "
                             f"pass --llm ... --model {ex.get('model')} to extract the new passages")
        rec = extraction_record(getattr(llm, "model", None) or type(llm).__name__,
                                ex.get("few_shot", True), ex.get("max_new_tokens", 256))
        if (rec["model"], rec["prompt_sha256"]) != (ex.get("model"), ex.get("prompt_sha256")):
            raise ValueError(f"model: the index holds triples from {ex.get('model')!r} (prompt sha "
                             f"{str(ex.get('prompt_sha256'))[:12]}), refusing to add triples from "
                             f"{rec['model']!r}")
        triples, unparsed, outcome = _extract(passages, d, llm, ex, concurrency, allow_unparsed,
                                              retry_unparsed, rec["few_shot"], rec["max_new_tokens"],
                                              progress, journal_opener)
    elif ex.get("source") == "corpus":
        if corpus.triples is None:
            raise ValueError(f"{corpus_path}: the index was built from corpus triples; the added "
                             f"corpus has none (a 'triples' field per record)")
        triples, ex = corpus.triples, corpus_record(corpus.name)
    else:
        triples = [[] for _ in passages]
    ki.add(passages, triples, encoder, ex, corpus.source_ids, unparsed)
    ki.save(d)
    return BuildReport(ki, d, time.perf_counter() - t0, outcome)


__all__ = ["build_knowledge_index", "add_to_knowledge_index", "BuildReport", "UnparsedError", "JOURNAL"]
