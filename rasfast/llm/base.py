"""The ``LLM`` protocol every text-generation backend implements, and its shared helpers.

A backend generates for a whole batch in one call and returns one string per prompt, in
input order. A prompt is either

- a ``str`` (sent as one user message to chat servers, tokenised by local models),
- a list of chat messages ``[{"role": "system"|"user"|"assistant", "content": str}, ...]``, or
- a float tensor ``[length, hidden]`` of input embeddings (local backends only: the way the
  GraphLLM soft token reaches a model).

``stop`` strings end a generation; the returned text never contains them (backends that
cannot stop server-side cut the text afterwards with :func:`cut_at_stop`).
"""
from __future__ import annotations

from typing import Any, Dict, List, Mapping, Optional, Protocol, Sequence, Union, runtime_checkable

Message = Mapping[str, str]
Prompt = Union[str, Sequence[Message], Any]  # Any: a torch.Tensor of input embeddings


@runtime_checkable
class LLM(Protocol):
    """A batched text generator."""

    def generate(self, prompts: Sequence[Prompt], max_new_tokens: int = 128,
                 stop: Optional[Sequence[str]] = None, temperature: float = 0.0) -> List[str]:
        """One completion per prompt, in input order, with stop strings removed."""
        ...


class PartialBatchError(RuntimeError):
    """A batch call where some items failed and the others succeeded.

    ``results`` is aligned with ``inputs`` (the exact objects the call was made with): the
    item's result, or the exception of a failed item. A batch caller that sees this error
    for the very inputs it passed (:func:`rasfast.llm.isolated.call_isolated` checks identity)
    keeps the successes and isolates only the failures, instead of re-sending every item."""

    def __init__(self, message: str, results: Sequence[Any], inputs: Sequence[Any]):
        super().__init__(message)
        self.results, self.inputs = list(results), list(inputs)

    @property
    def errors(self) -> Dict[int, BaseException]:
        """{position: exception} of the failed items."""
        return {i: r for i, r in enumerate(self.results) if isinstance(r, BaseException)}

    def is_for(self, items: Sequence[Any]) -> bool:
        """Whether this error describes a call made with exactly ``items`` (identity)."""
        return len(self.inputs) == len(items) and all(a is b for a, b in zip(self.inputs, items))

    def remapped(self, fn, inputs: Sequence[Any]) -> "PartialBatchError":
        """The same failures for a caller one level up: ``fn`` applied to every successful
        result, the batch now described by that caller's own ``inputs``."""
        return PartialBatchError(str(self), [r if isinstance(r, BaseException) else fn(r)
                                             for r in self.results], inputs)


def cut_at_stop(text: str, stop: Optional[Sequence[str]]) -> str:
    """``text`` up to (excluding) the earliest occurrence of any stop string."""
    if not stop:
        return text
    cut = len(text)
    for s in stop:
        i = text.find(s)
        if i != -1:
            cut = min(cut, i)
    return text[:cut]


def check_generate_args(prompts, max_new_tokens, stop, temperature) -> Optional[List[str]]:
    """Validate the common ``generate`` arguments; returns ``stop`` as a list (or None)."""
    if isinstance(prompts, (str, bytes)) or not isinstance(prompts, Sequence):
        raise TypeError(f"prompts: expected a sequence of prompts (list), got {type(prompts).__name__}")
    if isinstance(max_new_tokens, bool) or not isinstance(max_new_tokens, int) or max_new_tokens < 1:
        raise ValueError(f"max_new_tokens: expected an int >= 1, got {max_new_tokens!r}")
    if isinstance(temperature, bool) or not isinstance(temperature, (int, float)) or not temperature >= 0:
        raise ValueError(f"temperature: expected a float >= 0, got {temperature!r}")
    if stop is None:
        return None
    if isinstance(stop, str):
        stop = [stop]
    stop = list(stop)
    if not all(isinstance(s, str) and s for s in stop):
        raise TypeError(f"stop: expected a list of non-empty strings, got {stop!r}")
    return stop


def as_messages(prompt: Prompt, system: Optional[str] = None) -> List[Dict[str, str]]:
    """A text prompt or message list as a chat message list (``system`` prepended when the
    prompt has no system message of its own)."""
    if isinstance(prompt, str):
        msgs = [{"role": "user", "content": prompt}]
    elif isinstance(prompt, Sequence) and all(isinstance(m, Mapping) for m in prompt) and prompt:
        msgs = []
        for m in prompt:
            if not isinstance(m.get("role"), str) or not isinstance(m.get("content"), str):
                raise TypeError(f"prompts: a chat message needs str 'role' and 'content', got {dict(m)!r}")
            msgs.append({"role": m["role"], "content": m["content"]})
    else:
        raise TypeError("prompts: each prompt must be a str or a non-empty list of chat messages "
                        f"{{'role', 'content'}}, got {type(prompt).__name__}")
    if system and msgs[0]["role"] != "system":
        msgs.insert(0, {"role": "system", "content": system})
    return msgs


def messages_to_text(messages: Sequence[Message]) -> str:
    """Plain-text rendering of a chat for models without a chat template."""
    return "\n\n".join(m["content"] for m in messages)
