"""One LLM stage call for a whole batch, with per-prompt failure isolation (shared by the
systems: StructRAG's stages, KiRAG's constructor and reader).

All prompts go to the backend in ONE ``generate`` call (OpenAIChat sends them concurrently,
HF/vLLM batch them). When some prompts fail for good, OpenAIChat raises a
``PartialBatchError`` carrying every reply, and :func:`call_isolated`
keeps the successes and gives only the failed prompts an exception in their slot (nothing is
sent twice). A backend whose failure carries no partial results, or that returns the wrong
number of replies, is retried one prompt at a time, on the client's own concurrency, and only
the prompts that still fail get an exception: no question is ever dropped.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from .base import PartialBatchError


@dataclass
class ErrorRecord:
    """Why a question stopped early: the stage, the exception type and message, the round."""
    stage: str
    error_type: str
    message: str
    round: int

    @classmethod
    def of(cls, stage: str, exc: BaseException, rnd: int) -> "ErrorRecord":
        return cls(stage, type(exc).__name__, str(exc), rnd)


class BatchCallError(ValueError):
    pass


def call_isolated(fn: Callable[[Sequence[Any]], Sequence[Any]], items: Sequence[Any],
                  concurrency: int = 1) -> Tuple[List[Any], Dict[int, BaseException]]:
    """``fn(items)``; if it raises (or returns the wrong count), ``fn([item])`` per item.

    If ``fn`` raises a :class:`~rasfast.llm.base.PartialBatchError` whose ``inputs`` are
    these very items (same objects, same order), its per-item results are final: the
    successes are kept and the failed items get their own exception, nothing is re-sent
    (an LLM client has already applied its retry policy to each prompt).

    ``concurrency`` > 1 runs the per-item retries on that many threads (for I/O-bound
    components such as HTTP LLM clients, so isolating one bad request does not serialise
    the whole batch). Returns (results with None at failed positions, {position: exception}).
    """
    if not items:
        return [], {}
    try:
        out = list(fn(items))
        if len(out) != len(items):
            raise BatchCallError(f"returned {len(out)} results for {len(items)} inputs")
        return out, {}
    except PartialBatchError as partial:
        if partial.is_for(items):
            errs = partial.errors
            return [None if j in errs else r for j, r in enumerate(partial.results)], errs
        batch_exc: Exception = partial
    except Exception as e:
        batch_exc = e
    if len(items) == 1:
        return [None], {0: batch_exc}
    results: List[Any] = [None] * len(items)
    errors: Dict[int, BaseException] = {}

    def one(j: int) -> None:
        try:
            r = list(fn([items[j]]))
            if len(r) != 1:
                raise BatchCallError(f"returned {len(r)} results for 1 input")
            results[j] = r[0]
        except Exception as e:
            errors[j] = e

    if concurrency > 1 and len(items) > 1:
        from concurrent.futures import ThreadPoolExecutor
        with ThreadPoolExecutor(max_workers=min(concurrency, len(items))) as pool:
            list(pool.map(one, range(len(items))))
    else:
        for j in range(len(items)):
            one(j)
    return results, dict(sorted(errors.items()))


def check_llm(llm, name: str = "llm") -> None:
    if not callable(getattr(llm, "generate", None)):
        raise TypeError(f"{name}: expected an LLM backend with generate(prompts, ...) (rasfast.llm), "
                        f"got {type(llm).__name__}")


def generate_isolated(llm, prompts: Sequence[Any], max_new_tokens: int, temperature: float = 0.0,
                      stop: Optional[Sequence[str]] = None) -> Tuple[List[Optional[str]], Dict[int, BaseException]]:
    """(replies with None where a prompt failed, {position: exception})."""
    if not prompts:
        return [], {}
    conc = getattr(llm, "concurrency", 1)
    out, errs = call_isolated(lambda ps: llm.generate(list(ps), max_new_tokens, stop, temperature),
                              list(prompts), concurrency=conc if isinstance(conc, int) else 1)
    return [None if i in errs else (o if isinstance(o, str) else str(o)) for i, o in enumerate(out)], errs


__all__ = ["ErrorRecord", "BatchCallError", "call_isolated", "check_llm", "generate_isolated"]
