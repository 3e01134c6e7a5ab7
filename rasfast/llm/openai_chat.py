"""``OpenAIChat``: any OpenAI-compatible chat-completions server (vLLM ``serve``, llama.cpp
``server``, TGI, hosted APIs) as a batched :class:`~rasfast.llm.base.LLM`.

Standard library only (urllib + a thread pool). Every request has a socket timeout; 429,
5xx, connection errors, timeouts and unparseable replies are retried with exponential
backoff (a server's ``Retry-After`` is honoured, capped at ``max_backoff``); other errors
(400, 401, 404, ...) fail at once. A failure raises :class:`LLMRequestError` carrying the
status, the URL, the attempt count and an excerpt of the body, so nothing hangs and nothing
is swallowed.
"""
from __future__ import annotations

import email.utils
import http.client
import json
import os
import random
import socket
import threading
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Dict, List, Mapping, Optional, Sequence

from ._timing import StageTimer
from .base import Prompt, as_messages, check_generate_args, cut_at_stop

RETRY_STATUS = frozenset({408, 409, 425, 429, 500, 502, 503, 504, 520, 521, 522, 524})


class LLMRequestError(RuntimeError):
    """A chat request that failed for good (after retries where retrying made sense)."""

    def __init__(self, message: str, status: Optional[int] = None, url: str = "",
                 attempts: int = 1, body: str = "", index: Optional[int] = None):
        super().__init__(message)
        self.reason = message
        self.status, self.url, self.attempts, self.body, self.index = status, url, attempts, body, index

    def __str__(self) -> str:
        where = f" (prompt {self.index})" if self.index is not None else ""
        return (f"{self.reason}{where}: url={self.url} status={self.status} attempts={self.attempts}"
                + (f" body={self.body!r}" if self.body else ""))


class _Retryable(Exception):
    def __init__(self, message: str, status: Optional[int] = None, body: str = "",
                 retry_after: Optional[float] = None):
        super().__init__(message)
        self.status, self.body, self.retry_after = status, body, retry_after


def _excerpt(raw: bytes, n: int = 300) -> str:
    text = raw.decode("utf-8", errors="replace")
    return text if len(text) <= n else text[:n] + "..."


def _retry_after_seconds(value: Optional[str]) -> Optional[float]:
    """``Retry-After`` as seconds: either delta-seconds or an HTTP date."""
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
        return max(0.0, when.timestamp() - time.time())
    except (TypeError, ValueError, OverflowError):
        return None


class OpenAIChat:
    """Batched client for ``POST {base_url}/chat/completions``.

    Args:
        model: the model name the server expects.
        base_url: e.g. ``http://localhost:8000/v1`` (vLLM) or ``https://api.openai.com/v1``;
            defaults to ``$OPENAI_BASE_URL`` then the OpenAI API.
        api_key_env: environment variable holding the key (sent as ``Authorization: Bearer``);
            a missing variable sends no key (fine for local servers). ``api_key`` overrides it.
        timeout: seconds per request (connect + read), always finite.
        max_retries: retries after the first attempt for retryable failures.
        backoff, max_backoff: first retry delay and its cap (doubling, with jitter).
        concurrency: parallel requests per batch.
        system: optional system message prepended to text prompts.
        extra_body: extra JSON fields for every request (e.g. ``{"top_p": 0.9}``).
    """

    def __init__(self, model: str, base_url: Optional[str] = None, api_key_env: str = "OPENAI_API_KEY",
                 api_key: Optional[str] = None, timeout: float = 60.0, max_retries: int = 4,
                 backoff: float = 0.5, max_backoff: float = 30.0, concurrency: int = 8,
                 system: Optional[str] = None, extra_body: Optional[Mapping[str, Any]] = None):
        if not isinstance(model, str) or not model:
            raise ValueError(f"model: expected a non-empty model name, got {model!r}")
        base_url = base_url or os.environ.get("OPENAI_BASE_URL") or "https://api.openai.com/v1"
        if not isinstance(base_url, str) or not base_url.startswith(("http://", "https://")):
            raise ValueError(f"base_url: expected an http(s) URL such as http://localhost:8000/v1, got {base_url!r}")
        if not isinstance(timeout, (int, float)) or not 0 < timeout < float("inf"):
            raise ValueError(f"timeout: expected a finite number of seconds > 0, got {timeout!r}")
        if not isinstance(max_retries, int) or max_retries < 0:
            raise ValueError(f"max_retries: expected an int >= 0, got {max_retries!r}")
        if not isinstance(concurrency, int) or concurrency < 1:
            raise ValueError(f"concurrency: expected an int >= 1, got {concurrency!r}")
        if not (isinstance(backoff, (int, float)) and backoff >= 0 and isinstance(max_backoff, (int, float))
                and max_backoff >= 0):
            raise ValueError(f"backoff/max_backoff: expected numbers >= 0, got {backoff!r}, {max_backoff!r}")
        self.model = model
        self.base_url = base_url.rstrip("/")
        self.url = self.base_url + "/chat/completions"
        self.api_key = api_key if api_key is not None else os.environ.get(api_key_env)
        self.timeout = float(timeout)
        self.max_retries = max_retries
        self.backoff, self.max_backoff = float(backoff), float(max_backoff)
        self.concurrency = concurrency
        self.system = system
        self.extra_body = dict(extra_body or {})
        self._lock = threading.Lock()
        self.stats = {"requests": 0, "retries": 0, "prompt_tokens": 0, "completion_tokens": 0}
        self.timer = StageTimer(sync_cuda=False)  # "llm.request" spans (category "model")

    def __repr__(self) -> str:
        return f"OpenAIChat(model={self.model!r}, base_url={self.base_url!r})"

    # -- public ---------------------------------------------------------------------------
    def generate(self, prompts: Sequence[Prompt], max_new_tokens: int = 128,
                 stop: Optional[Sequence[str]] = None, temperature: float = 0.0) -> List[str]:
        """One completion per prompt (in input order), requests sent concurrently.

        Raises :class:`LLMRequestError` for the first prompt (in input order) that failed,
        after every request of the batch has finished."""
        stop = check_generate_args(prompts, max_new_tokens, stop, temperature)
        bodies = [self._body(as_messages(p, self.system), max_new_tokens, stop, temperature) for p in prompts]
        if not bodies:
            return []
        results: List[Any] = [None] * len(bodies)

        def run(i: int) -> None:
            try:
                results[i] = cut_at_stop(self._complete(bodies[i]), stop)
            except LLMRequestError as e:
                e.index = i
                results[i] = e

        with self.timer.stage("llm.request"):
            if len(bodies) == 1 or self.concurrency == 1:
                for i in range(len(bodies)):
                    run(i)
            else:
                with ThreadPoolExecutor(max_workers=min(self.concurrency, len(bodies))) as pool:
                    list(pool.map(run, range(len(bodies))))
        for r in results:
            if isinstance(r, BaseException):
                raise r
        return results

    # -- internals ------------------------------------------------------------------------
    def _body(self, messages, max_new_tokens, stop, temperature) -> bytes:
        body: Dict[str, Any] = {"model": self.model, "messages": messages,
                                "max_tokens": max_new_tokens, "temperature": float(temperature)}
        if stop:
            body["stop"] = stop[:4]  # the OpenAI API accepts at most 4; the rest are cut locally
        body.update(self.extra_body)
        return json.dumps(body).encode("utf-8")

    def _headers(self) -> Dict[str, str]:
        h = {"Content-Type": "application/json", "Accept": "application/json"}
        if self.api_key:
            h["Authorization"] = f"Bearer {self.api_key}"
        return h

    def _delay(self, attempt: int, retry_after: Optional[float]) -> float:
        if retry_after is not None:
            return min(retry_after, self.max_backoff)
        d = min(self.backoff * (2 ** attempt), self.max_backoff)
        return d * (0.75 + 0.5 * random.random())  # jitter so concurrent retries spread out

    def _complete(self, body: bytes) -> str:
        last: Optional[_Retryable] = None
        for attempt in range(self.max_retries + 1):
            if attempt:
                with self._lock:
                    self.stats["retries"] += 1
                time.sleep(self._delay(attempt - 1, last.retry_after if last else None))
            try:
                return self._once(body)
            except _Retryable as e:
                last = e
        assert last is not None
        raise LLMRequestError(f"chat request failed after retries: {last}", status=last.status,
                              url=self.url, attempts=self.max_retries + 1, body=last.body)

    def _once(self, body: bytes) -> str:
        with self._lock:
            self.stats["requests"] += 1
        req = urllib.request.Request(self.url, data=body, headers=self._headers(), method="POST")
        try:
            with urllib.request.urlopen(req, timeout=self.timeout) as resp:
                raw = resp.read()  # IncompleteRead on a truncated body: retried below
        except urllib.error.HTTPError as e:
            raw = e.read() if e.fp is not None else b""
            if e.code in RETRY_STATUS:
                raise _Retryable(f"HTTP {e.code}", e.code, _excerpt(raw),
                                 _retry_after_seconds(e.headers.get("Retry-After") if e.headers else None))
            raise LLMRequestError(f"chat request rejected with HTTP {e.code}", status=e.code,
                                  url=self.url, body=_excerpt(raw)) from None
        except (urllib.error.URLError, ConnectionError, socket.timeout, TimeoutError, OSError,
                http.client.HTTPException) as e:
            reason = getattr(e, "reason", e)
            raise _Retryable(f"connection error: {type(reason).__name__}: {reason}") from None
        try:
            data = json.loads(raw)
            choice = data["choices"][0]
            msg = choice.get("message") or {}
            text = msg.get("content")
            if text is None:
                text = choice.get("text")  # some servers answer in completions style
            if not isinstance(text, str):
                raise TypeError("no text content in the first choice")
        except (ValueError, KeyError, IndexError, TypeError, AttributeError) as e:
            raise _Retryable(f"malformed reply ({type(e).__name__}: {e})", 200, _excerpt(raw)) from None
        usage = data.get("usage") if isinstance(data, dict) else None
        if isinstance(usage, dict):
            with self._lock:
                for k in ("prompt_tokens", "completion_tokens"):
                    if isinstance(usage.get(k), int):
                        self.stats[k] += usage[k]
        return text
