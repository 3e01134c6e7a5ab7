"""One LLM stage call for a whole batch, with per-prompt failure isolation (shared by the
systems: StructRAG's stages, KiRAG's constructor and reader).

All prompts go to the backend in ONE ``generate`` call (OpenAIChat sends them concurrently,
HF/vLLM batch them). When some prompts fail for good, OpenAIChat raises a
``PartialBatchError`` carrying every reply, and :func:`rasfast.pipeline.loop.call_isolated`
keeps the successes and gives only the failed prompts an exception in their slot (nothing is
sent twice). A backend whose failure carries no partial results, or that returns the wrong
number of replies, is retried one prompt at a time, on the client's own concurrency, and only
the prompts that still fail get an exception: no question is ever dropped.
"""
from __future__ import annotations

from typing import Any, Dict, List, Optional, Sequence, Tuple


def check_llm(llm, name: str = "llm") -> None:
    if not callable(getattr(llm, "generate", None)):
        raise TypeError(f"{name}: expected an LLM backend with generate(prompts, ...) (rasfast.llm), "
                        f"got {type(llm).__name__}")


def generate_isolated(llm, prompts: Sequence[Any], max_new_tokens: int, temperature: float = 0.0,
                      stop: Optional[Sequence[str]] = None) -> Tuple[List[Optional[str]], Dict[int, BaseException]]:
    """(replies with None where a prompt failed, {position: exception})."""
    from ..pipeline.loop import call_isolated  # the generic batch-isolation helper
    if not prompts:
        return [], {}
    conc = getattr(llm, "concurrency", 1)
    out, errs = call_isolated(lambda ps: llm.generate(list(ps), max_new_tokens, stop, temperature),
                              list(prompts), concurrency=conc if isinstance(conc, int) else 1)
    return [None if i in errs else (o if isinstance(o, str) else str(o)) for i, o in enumerate(out)], errs


__all__ = ["check_llm", "generate_isolated"]
