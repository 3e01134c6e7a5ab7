"""``OpenAIChat``: any OpenAI-compatible chat-completions server (vLLM ``serve``, llama.cpp
``server``, TGI, hosted APIs) as a batched :class:`~rasfast.llm.base.LLM`.

Standard library only (http.client + a thread pool). Connections are kept alive and reused
(a small pool of at most ``concurrency`` idle connections per client); a pooled connection
the server has closed is replaced transparently. Every request has a socket timeout; 429,
5xx, connection errors, timeouts and unparseable replies are retried with exponential
backoff (a server's ``Retry-After`` is honoured, capped at ``max_backoff``); other errors
(400, 401, 404, ...) fail at once. A failure raises :class:`LLMRequestError` carrying the
status, the URL, the attempt count and an excerpt of the body, so nothing hangs and nothing
is swallowed. When only some prompts of a batch fail, the error raised is an
:class:`LLMBatchError` that also carries the successful replies (``results``), so a caller
that isolates failures (:func:`rasfast.llm.isolated.call_isolated`) never re-sends a prompt that
already succeeded; ``generate(..., return_exceptions=True)`` returns the errors in their
slots instead.
"""
from __future__ import annotations

import email.utils
import errno
import http.client
import json
import os
import random
import select
import socket
import threading
import time
import urllib.parse
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Dict, List, Mapping, Optional, Sequence

from ._timing import StageTimer
from .base import PartialBatchError, Prompt, as_messages, check_generate_args, cut_at_stop

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


class LLMUnreachableError(LLMRequestError):
    """The server could not be reached (connection refused, unknown host, no route) on
    ``unreachable_after`` consecutive attempts: the client stops retrying and fails requests
    fast, trying each new request once, until one gets through."""


def server_unreachable(e: BaseException) -> bool:
    """Whether a generate() failure means the server cannot be reached at all (every failed
    prompt an :class:`LLMUnreachableError`): callers stop instead of sending more."""
    if isinstance(e, LLMUnreachableError):
        return True
    errors = getattr(e, "errors", None) if isinstance(e, PartialBatchError) else None
    return bool(errors) and all(isinstance(x, LLMUnreachableError) for x in errors.values())


class LLMBatchError(LLMRequestError, PartialBatchError):
    """Some prompts of a batch failed for good. Reads as the first failure (``index``,
    ``status``, ... as :class:`LLMRequestError`); ``results`` holds every prompt's reply or
    its :class:`LLMRequestError`, ``inputs`` the prompts (see :class:`PartialBatchError`)."""

    def __init__(self, first: LLMRequestError, results: Sequence[Any], inputs: Sequence[Any]):
        PartialBatchError.__init__(self, first.reason, results, inputs)
        self.reason = first.reason
        self.status, self.url, self.attempts, self.body, self.index = (first.status, first.url, first.attempts,
                                                                       first.body, first.index)

    def __str__(self) -> str:
        more = len(self.errors) - 1
        return LLMRequestError.__str__(self) + (f" [+{more} more failed prompt(s) of "
                                                f"{len(self.results)}]" if more > 0 else "")


class _Retryable(Exception):
    def __init__(self, message: str, status: Optional[int] = None, body: str = "",
                 retry_after: Optional[float] = None, unreachable: bool = False):
        super().__init__(message)
        self.status, self.body, self.retry_after = status, body, retry_after
        self.unreachable = unreachable


def _is_unreachable(e: BaseException) -> bool:
    """Nothing listens there (or the host does not resolve / route): retrying the same
    address within seconds will not help. A read timeout is not this (a busy server)."""
    if isinstance(e, (ConnectionRefusedError, socket.gaierror)):
        return True
    return isinstance(e, OSError) and e.errno in (errno.EHOSTUNREACH, errno.ENETUNREACH,
                                                  errno.EADDRNOTAVAIL)


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


def _readable_now(sock) -> bool:
    """Whether an idle kept-alive socket has something to read: EOF (the server closed it) or
    stray bytes -- either way it cannot carry the next request. poll, not select: select
    fails for descriptors >= 1024."""
    try:
        if hasattr(select, "poll"):
            p = select.poll()
            p.register(sock, select.POLLIN | select.POLLERR | select.POLLHUP)
            return bool(p.poll(0))
        return bool(select.select([sock], [], [], 0)[0])
    except (OSError, ValueError):
        return True


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
        keep_alive: reuse HTTP connections across requests (at most ``concurrency`` idle
            ones kept); False opens a new connection per request.
        unreachable_after: after this many consecutive attempts (over all requests) that
            could not reach the server, requests fail at once with
            :class:`LLMUnreachableError` instead of backing off and retrying; each later
            request still tries once, and a success resets the count.
    """

    def __init__(self, model: str, base_url: Optional[str] = None, api_key_env: str = "OPENAI_API_KEY",
                 api_key: Optional[str] = None, timeout: float = 60.0, max_retries: int = 4,
                 backoff: float = 0.5, max_backoff: float = 30.0, concurrency: int = 8,
                 system: Optional[str] = None, extra_body: Optional[Mapping[str, Any]] = None,
                 keep_alive: bool = True, unreachable_after: int = 3):
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
        if isinstance(unreachable_after, bool) or not isinstance(unreachable_after, int) \
                or unreachable_after < 1:
            raise ValueError(f"unreachable_after: expected an int >= 1, got {unreachable_after!r}")
        self.unreachable_after = unreachable_after
        self._unreachable = 0  # consecutive attempts that could not reach the server
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
        self.keep_alive = bool(keep_alive)
        self._lock = threading.Lock()
        self._idle: List[http.client.HTTPConnection] = []  # kept-alive connections, LIFO
        parts = urllib.parse.urlsplit(self.url)
        self._https = parts.scheme == "https"
        self._host, self._port = parts.hostname or "", parts.port
        self._path = parts.path + (f"?{parts.query}" if parts.query else "")
        # honour an http(s)_proxy from the environment as urllib did (CONNECT tunnel for https)
        proxy = urllib.request.getproxies().get(parts.scheme)
        self._proxy = (urllib.parse.urlsplit(proxy if "://" in proxy else "http://" + proxy)
                       if proxy and not urllib.request.proxy_bypass(parts.netloc) else None)
        self.stats = {"requests": 0, "retries": 0, "prompt_tokens": 0, "completion_tokens": 0}
        self.timer = StageTimer(sync_cuda=False)  # "llm.request" spans (category "model")

    def __repr__(self) -> str:
        return f"OpenAIChat(model={self.model!r}, base_url={self.base_url!r})"

    # -- public ---------------------------------------------------------------------------
    def generate(self, prompts: Sequence[Prompt], max_new_tokens: int = 128,
                 stop: Optional[Sequence[str]] = None, temperature: float = 0.0,
                 return_exceptions: bool = False) -> List[Any]:
        """One completion per prompt (in input order), requests sent concurrently.

        After every request of the batch has finished: with ``return_exceptions=False`` raises
        :class:`LLMBatchError` (an :class:`LLMRequestError` naming the first failed prompt in
        input order, carrying every reply) if any prompt failed; with ``True`` returns the
        :class:`LLMRequestError` in the failed prompt's slot instead."""
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
        if not return_exceptions:
            first = next((r for r in results if isinstance(r, BaseException)), None)
            if first is not None:
                raise LLMBatchError(first, results, prompts)
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
        attempts = 0
        for attempt in range(self.max_retries + 1):
            if attempt:
                if last is not None and last.unreachable and self._unreachable >= self.unreachable_after:
                    break  # nothing listens there: fail fast instead of backing off
                with self._lock:
                    self.stats["retries"] += 1
                time.sleep(self._delay(attempt - 1, last.retry_after if last else None))
            attempts += 1
            try:
                text = self._once(body)
            except _Retryable as e:
                last = e
                with self._lock:
                    self._unreachable = self._unreachable + 1 if e.unreachable else 0
                continue
            with self._lock:
                self._unreachable = 0
            return text
        assert last is not None
        if last.unreachable and self._unreachable >= self.unreachable_after:
            raise LLMUnreachableError(
                f"LLM server unreachable ({self._unreachable} consecutive connection attempts "
                f"failed, last: {last}); is it running at {self.base_url}?", url=self.url,
                attempts=attempts)
        raise LLMRequestError(f"chat request failed after retries: {last}", status=last.status,
                              url=self.url, attempts=attempts, body=last.body)

    # -- connections ----------------------------------------------------------------------
    def _new_connection(self) -> http.client.HTTPConnection:
        cls = http.client.HTTPSConnection if self._https else http.client.HTTPConnection
        if self._proxy is None:
            return cls(self._host, self._port, timeout=self.timeout)
        if self._https:
            conn = cls(self._proxy.hostname, self._proxy.port, timeout=self.timeout)
            conn.set_tunnel(self._host, self._port)
            return conn
        return http.client.HTTPConnection(self._proxy.hostname, self._proxy.port, timeout=self.timeout)

    def _acquire(self) -> http.client.HTTPConnection:
        """An idle kept-alive connection (one the server has not closed meanwhile), else a
        new, not yet connected one."""
        while True:
            with self._lock:
                conn = self._idle.pop() if self._idle else None
            if conn is None:
                return self._new_connection()
            if conn.sock is not None and not _readable_now(conn.sock):
                return conn
            conn.close()

    def _release(self, conn: http.client.HTTPConnection) -> None:
        with self._lock:
            if self.keep_alive and conn.sock is not None and len(self._idle) < self.concurrency:
                self._idle.append(conn)
                return
        conn.close()

    def close(self) -> None:
        """Close the kept-alive connections (new requests open new ones)."""
        with self._lock:
            idle, self._idle = self._idle, []
        for conn in idle:
            conn.close()

    def __enter__(self) -> "OpenAIChat":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __del__(self):  # a dropped client does not leave its pooled sockets open
        try:
            self.close()
        except Exception:
            pass

    def _post(self, body: bytes):
        """(status, headers, body bytes) of one POST on a pooled connection. A reused
        connection that the server closed before answering is replaced once, at once: that
        is keep-alive housekeeping, not a failed attempt."""
        path = self.url if (self._proxy is not None and not self._https) else self._path
        for fresh_try in (False, True):
            conn = self._new_connection() if fresh_try else self._acquire()
            reused = conn.sock is not None
            try:
                conn.request("POST", path, body=body, headers=self._headers())
                resp = conn.getresponse()
                raw = resp.read()  # IncompleteRead on a truncated body: retried by the caller
            except (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError,
                    ConnectionAbortedError):
                conn.close()
                if reused and not fresh_try:
                    continue
                raise
            except BaseException:
                conn.close()
                raise
            self._release(conn)
            return resp.status, resp.headers, raw
        raise AssertionError("unreachable")

    def _once(self, body: bytes) -> str:
        with self._lock:
            self.stats["requests"] += 1
        try:
            status, headers, raw = self._post(body)
        except (ConnectionError, socket.timeout, TimeoutError, OSError, http.client.HTTPException) as e:
            raise _Retryable(f"connection error: {type(e).__name__}: {e}",
                             unreachable=_is_unreachable(e)) from None
        if not 200 <= status < 300:
            if status in RETRY_STATUS:
                raise _Retryable(f"HTTP {status}", status, _excerpt(raw),
                                 _retry_after_seconds(headers.get("Retry-After") if headers else None))
            raise LLMRequestError(f"chat request rejected with HTTP {status}", status=status,
                                  url=self.url, body=_excerpt(raw))
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
