"""Which prompt an LLM call was (its role), whether its reply had the asked-for form, and the
calls of one question as the records keep them."""
from __future__ import annotations

from collections import Counter
from typing import Any, Dict, List

from .records import cut_text


def _role_table():
    """(marker text, role, parse check) for every prompt rasfast sends; first match wins: the
    reader contract's two prompts, then every registered system spec's roles
    (:func:`.systems.role_rows`, in registration order)."""
    from ..llm import reader as rd
    from .systems import role_rows

    nonempty = lambda t: bool(rd.finalize_answer(t))  # noqa: E731
    return [(rd.ONE_SHOT_RULE, "reader.one-shot", nonempty),
            (rd.ANSWER_SHAPE, "reader", nonempty),
            (rd.YES_NO_SHAPE, "reader", nonempty),
            *role_rows()]


def prompt_text(p) -> str:
    if isinstance(p, str):
        return p
    try:
        return "\n".join(str(m.get("content", "")) for m in p)
    except (TypeError, AttributeError):
        return ""


class RoleRecorder:
    """Wraps an LLM backend: forwards ``generate`` unchanged, counts per role (which prompt it
    was) the replies and the replies its parser could not read, and keeps the calls
    (:attr:`log`, cleared by the caller per question).

    ``prompt_style`` overrides the backend's (what the adapters read to pick a prompt set)."""

    def __init__(self, llm, prompt_style=None):
        self.llm = llm
        self.table = _role_table()
        self.calls: Counter = Counter()
        self.unparsed: Counter = Counter()
        self.failed: Counter = Counter()
        self.log: List[Dict[str, Any]] = []
        if prompt_style is not None:
            self.prompt_style = prompt_style

    def __getattr__(self, name):   # stats, timer, concurrency, prompt_style, n_ctx, engine, ...
        return getattr(self.llm, name)

    def role(self, prompt) -> str:
        text = prompt_text(prompt)
        for marker, role, _ in self.table:
            if marker and marker[:120] in text:
                return role
        return "other"

    def _record(self, role: str, prompt, reply) -> None:
        self.log.append({"role": role, "prompt": cut_text(prompt_text(prompt)),
                         "reply": None if isinstance(reply, BaseException) else cut_text(str(reply)),
                         **({"error": f"{type(reply).__name__}: {reply}"[:300]}
                            if isinstance(reply, BaseException) else {})})
        if isinstance(reply, BaseException):
            self.failed[role] += 1
            return
        self.calls[role] += 1
        check = next((c for _, r, c in self.table if r == role), None)
        try:
            ok = check(reply) if check else bool(reply)
        except Exception:  # noqa: BLE001 - a parser crash is a parse failure
            ok = False
        if not ok:
            self.unparsed[role] += 1

    def generate(self, prompts, max_new_tokens: int = 128, stop=None, temperature: float = 0.0):
        from ..llm.base import PartialBatchError
        prompts = list(prompts)
        roles = [self.role(p) for p in prompts]
        try:
            out = self.llm.generate(prompts, max_new_tokens, stop, temperature)
        except PartialBatchError as e:
            for r, p, o in zip(roles, prompts, e.results):
                self._record(r, p, o)
            raise
        except Exception as e:
            for r, p in zip(roles, prompts):
                self._record(r, p, e)
            raise
        for r, p, o in zip(roles, prompts, out):
            self._record(r, p, o)
        return out

    def snapshot(self) -> Dict[str, List[int]]:
        roles = set(self.calls) | set(self.failed)
        return {r: [self.calls[r], self.unparsed[r], self.failed[r]] for r in sorted(roles)}


__all__ = ["RoleRecorder", "prompt_text"]
