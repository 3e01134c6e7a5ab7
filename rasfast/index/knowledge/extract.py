"""Resumable, concurrent triple extraction with an LLM (the paper's text-to-triples prompt).

:func:`extract_triples` sends one request per passage not yet in the journal, ``concurrency``
at a time (each through the backend's own retries, e.g. OpenAIChat's backoff on 429/5xx;
local models such as HFCausalLM/VLLM get batches of ``concurrency`` prompts instead),
parses the reply with the loop's tolerant parser and appends the finished passage to the
journal (fsync'd) the moment it returns. A killed run therefore resumes where it stopped and
never repeats a finished request; only requests in flight at the kill are sent again.

Outcome per passage:
- ``ok``: at least one triple parsed;
- ``unparsed``: the reply held no parseable triple (empty, prose, garbage). This is recorded
  in the journal (the request is not repeated on resume) and reported; the index build then
  refuses to finish unless told to accept such passages as having no triples
  (``allow_unparsed``), so an index never loads as complete while missing triples silently;
- a request that failed for good (LLMRequestError after retries) is NOT journaled: the build
  stops with an error after the other requests finish, and a re-run retries just those.

A journal write failure (disk full, I/O error) stops the run at once with a JournalError.
"""
from __future__ import annotations

import hashlib
import sys
import threading
import time
from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Sequence

from ...llm.base import PartialBatchError
from ...llm.openai_chat import server_unreachable
from ...llm.prompts import TRIPLES_INSTRUCTION, _TRIPLE_SHOT, triples_messages
from ...parse import parse_triples
from .journal import Journal, JournalError, content_sha


class ExtractionError(RuntimeError):
    """Some passages could not be extracted (their requests failed after retries)."""

    def __init__(self, message: str, failed: Dict[int, str]):
        super().__init__(message)
        self.failed = failed


def extraction_record(model: str, few_shot: bool = True, max_new_tokens: int = 256) -> Dict[str, Any]:
    """What the manifest and the journal record about the extraction: the model and the exact
    prompt (instruction + few-shot example), with the prompt's sha256 for quick comparison."""
    prompt = TRIPLES_INSTRUCTION + ("\n\n" + "\n".join(_TRIPLE_SHOT) if few_shot else "")
    return {"source": "llm", "model": str(model), "prompt": prompt,
            "prompt_sha256": hashlib.sha256(prompt.encode("utf-8")).hexdigest(),
            "few_shot": bool(few_shot), "max_new_tokens": int(max_new_tokens)}


def corpus_record(name: str) -> Dict[str, Any]:
    """Extraction record for triples that came with the corpus (no model, no prompt)."""
    return {"source": "corpus", "model": f"corpus:{name}", "prompt": None, "prompt_sha256": None}


@dataclass
class ExtractionOutcome:
    triples: Dict[int, List[list]]          # pid -> triples (every passage)
    unparsed: List[int]                     # pids whose reply held no parseable triple
    requested: int                          # requests sent in this run
    resumed: int                            # passages already in the journal
    seconds: float
    tokens: int = 0
    failed: Dict[int, str] = field(default_factory=dict)


def _tokens(llm) -> int:
    st = getattr(llm, "stats", None)
    if isinstance(st, dict):
        return int(st.get("prompt_tokens", 0)) + int(st.get("completion_tokens", 0))
    return 0


class _Progress:
    """tqdm bar (passages/s, tokens, ETA) when tqdm is installed, else a line every 10%."""

    def __init__(self, total: int, initial: int, llm, enabled: bool):
        self.llm, self.bar, self.enabled = llm, None, enabled
        self.total, self.n, self.t0 = total, initial, time.perf_counter()
        self.tok0 = _tokens(llm)
        if not enabled:
            return
        try:
            from tqdm import tqdm
            self.bar = tqdm(total=total, initial=initial, desc="extract triples", unit="passage",
                            file=sys.stderr, dynamic_ncols=True)
        except ImportError:
            self.bar = None

    def update(self) -> None:
        self.n += 1
        if not self.enabled:
            return
        tok = _tokens(self.llm) - self.tok0
        if self.bar is not None:
            self.bar.set_postfix(tokens=tok, refresh=False)
            self.bar.update(1)
        elif self.n == self.total or self.n % max(1, self.total // 10) == 0:
            dt = time.perf_counter() - self.t0
            print(f"extract triples: {self.n}/{self.total} passages, {tok} tokens, {dt:.1f} s",
                  file=sys.stderr)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


def _reason(e: BaseException) -> str:
    first = next(iter(e.errors.values())) if isinstance(e, PartialBatchError) and e.errors else e
    return getattr(first, "reason", None) or str(first)


def _per_request(llm) -> bool:
    """Concurrent single-prompt requests for HTTP backends (OpenAIChat, or any backend that
    sets ``concurrent_requests = True``); batched calls for local models (HF, vLLM)."""
    from ...llm.openai_chat import OpenAIChat
    return isinstance(llm, OpenAIChat) or bool(getattr(llm, "concurrent_requests", False))


def extract_triples(passages: Sequence, llm, journal: Journal, concurrency: int = 8,
                    few_shot: bool = True, max_new_tokens: int = 256,
                    progress: bool = True) -> ExtractionOutcome:
    """Triples for every passage (``pid``/``title``/``text`` objects), resuming from
    ``journal``; see the module docstring for outcomes and errors."""
    if not callable(getattr(llm, "generate", None)):
        raise TypeError(f"llm: expected an LLM backend with generate(prompts, ...), got {type(llm).__name__}")
    if isinstance(concurrency, bool) or not isinstance(concurrency, int) or concurrency < 1:
        raise ValueError(f"concurrency: expected an int >= 1, got {concurrency!r}")
    t0 = time.perf_counter()
    todo, resumed = [], 0
    for p in passages:
        if journal.check_passage(int(p.pid), content_sha(p.title, p.text)) is None:
            todo.append(p)
        else:
            resumed += 1
    bar = _Progress(len(passages), resumed, llm, progress)
    failed: Dict[int, str] = {}
    stop = threading.Event()
    fatal: List[BaseException] = []

    def prompt(p):
        return triples_messages(f"{p.title}\n{p.text}" if p.title else p.text, few_shot)

    def finish(p, text) -> None:
        parsed = parse_triples(text if isinstance(text, str) else "")
        rec = {"pid": int(p.pid), "sha": content_sha(p.title, p.text),
               "status": "ok" if parsed.triples else "unparsed",
               "triples": [list(t) for t in parsed.triples]}
        if not parsed.triples:
            rec["raw"] = str(text)[:300]
        try:
            journal.append(rec)
        except JournalError as e:
            fatal.append(e)
            stop.set()
            return
        bar.update()

    def one(p) -> None:
        if stop.is_set():
            return
        try:
            text = llm.generate([prompt(p)], max_new_tokens, None, 0.0)[0]
        except Exception as e:   # failed after the backend's retries: not journaled
            if server_unreachable(e):  # stop the whole build: no request can succeed now
                fatal.append(e)
                stop.set()
                return
            failed[int(p.pid)] = f"{type(e).__name__}: {e}"
            return
        finish(p, text)

    try:
        if _per_request(llm):
            with ThreadPoolExecutor(max_workers=min(concurrency, max(1, len(todo)))) as pool:
                pending = set()
                # keep at most `concurrency` requests queued so a stop leaves nothing half-sent
                for p in todo:
                    pending.add(pool.submit(one, p))
                    if len(pending) >= concurrency:
                        done, pending = wait(pending, return_when=FIRST_COMPLETED)
                        if stop.is_set():
                            break
                wait(pending)
        else:   # a local model: one batched generate call per `concurrency` passages
            for s in range(0, len(todo), concurrency):
                chunk = todo[s:s + concurrency]
                try:
                    texts = llm.generate([prompt(p) for p in chunk], max_new_tokens, None, 0.0)
                except Exception as e:
                    if server_unreachable(e):
                        fatal.append(e)
                        break
                    for p in chunk:
                        failed[int(p.pid)] = f"{type(e).__name__}: {e}"
                    continue
                for p, text in zip(chunk, texts):
                    finish(p, text)
                    if stop.is_set():
                        break
                if stop.is_set():
                    break
    finally:
        bar.close()
    if fatal:
        if server_unreachable(fatal[0]):
            raise ExtractionError(
                f"triple extraction stopped: {_reason(fatal[0])}. Nothing more was sent; "
                f"{len(journal.entries)} finished passages are journaled: start the server and "
                f"run the same command again to resume", dict(failed)) from None
        raise fatal[0]
    triples = {pid: rec["triples"] for pid, rec in journal.entries.items()}
    unparsed = sorted(pid for pid, rec in journal.entries.items() if rec.get("status") == "unparsed")
    out = ExtractionOutcome(triples, unparsed, len(todo), resumed, time.perf_counter() - t0,
                            _tokens(llm) - bar.tok0, failed)
    if failed:
        first = next(iter(sorted(failed.items())))
        raise ExtractionError(f"triple extraction: {len(failed)} of {len(todo)} requests failed "
                              f"after retries (first: passage {first[0]}: {first[1]}); the "
                              f"{len(journal.entries)} finished passages are journaled: run the "
                              f"same command again to retry only the failed ones", failed)
    return out


__all__ = ["extract_triples", "extraction_record", "corpus_record", "ExtractionOutcome",
           "ExtractionError"]
