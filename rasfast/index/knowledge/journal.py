"""The extraction journal: one JSON line per finished passage, appended and fsync'd, so a
killed build resumes without repeating a finished request.

Layout (``journal.jsonl`` in the index directory)::

    {"journal": "rasfast.extraction", "version": 1, "extraction": {...model, prompt...}}
    {"pid": 0, "sha": "<sha1 of title+text>", "status": "ok", "triples": [[s, p, o], ...]}
    {"pid": 7, "sha": "...", "status": "unparsed", "triples": [], "raw": "<reply excerpt>"}

- The header records what produced the triples (model, prompt); resuming with another
  model or prompt is refused, so triples of two models never mix silently.
- Each entry carries the passage's content hash; a journal written for a different corpus
  is refused.
- A torn LAST line (the process died inside a write) is dropped on open and the file is
  truncated to the last complete line; a malformed line anywhere else is an error naming it.
- Every append is ``write + flush + os.fsync`` before it returns (concurrent appends share
  one fsync: group commit), so an entry on disk is a finished request.
"""
from __future__ import annotations

import hashlib
import json
import os
import pathlib
import threading
from typing import Any, Dict, Optional

FORMAT = "rasfast.extraction"
VERSION = 1


class JournalError(RuntimeError):
    """The journal cannot be read, does not match this build, or could not be written."""


def content_sha(title: str, text: str) -> str:
    return hashlib.sha1(f"{title}\n{text}".encode("utf-8")).hexdigest()


class Journal:
    """Append-only, fsync'd JSONL journal of finished passages (see the module docstring).

    Args:
        path: the journal file (created with its header when missing).
        extraction: the extraction record (model, prompt, ...) this build uses; an existing
            journal must carry the same one.
        opener: ``open``-like callable used for appending (tests inject write failures).
    """

    def __init__(self, path: os.PathLike, extraction: Dict[str, Any], opener=open):
        self.path = pathlib.Path(path)
        self.extraction = dict(extraction)
        self.entries: Dict[int, Dict[str, Any]] = {}
        self.dropped_torn_line = False
        self._lock = threading.Lock()          # file writes and entries
        self._sync_lock = threading.Lock()     # one fsync at a time (group commit)
        self._written = self._synced = 0       # lines written / known fsync'd by this object
        if self.path.exists():
            self._read()
        if not self.path.exists():   # new, or killed while writing its header (nothing finished)
            self.path.parent.mkdir(parents=True, exist_ok=True)
            header = {"journal": FORMAT, "version": VERSION, "extraction": self.extraction}
            with open(self.path, "w", encoding="utf-8") as f:
                f.write(json.dumps(header, ensure_ascii=False) + "\n")
                f.flush()
                os.fsync(f.fileno())
        self._f = opener(self.path, "a", encoding="utf-8")

    def _read(self) -> None:
        raw = self.path.read_bytes()
        lines = raw.split(b"\n")
        complete = raw.endswith(b"\n")
        keep_bytes = 0
        for i, line in enumerate(lines):
            last = i == len(lines) - 1
            if last and not line:
                break
            if last and not complete:   # torn final write (never fsync'd as a whole): drop it
                self.dropped_torn_line = True
                break
            try:
                rec = json.loads(line.decode("utf-8"))
                if not isinstance(rec, dict):
                    raise ValueError("not an object")
            except (ValueError, UnicodeDecodeError) as e:
                raise JournalError(f"{self.path}: line {i + 1} is not a journal record ({e}); "
                                   f"delete the journal to start the extraction over") from None
            if i == 0:
                if rec.get("journal") != FORMAT or rec.get("version") != VERSION:
                    raise JournalError(f"{self.path}: not a {FORMAT} v{VERSION} journal")
                if rec.get("extraction") != self.extraction:
                    raise JournalError(
                        f"{self.path}: written by extraction {_describe(rec.get('extraction'))}, "
                        f"this build uses {_describe(self.extraction)}; triples of two models or "
                        f"prompts are never mixed: use the same --model/prompt, or another --out")
            else:
                try:
                    self.entries[int(rec["pid"])] = rec
                except (KeyError, TypeError, ValueError):
                    raise JournalError(f"{self.path}: line {i + 1} has no passage id") from None
            keep_bytes += len(line) + 1
        if keep_bytes == 0:      # empty or torn header: no passage finished, start it afresh
            self.path.unlink()
            self.dropped_torn_line = False
            return
        if self.dropped_torn_line:
            with open(self.path, "r+b") as f:   # cut the torn tail so appends start clean
                f.truncate(keep_bytes)
                f.flush()
                os.fsync(f.fileno())

    def check_passage(self, pid: int, sha: str) -> Optional[Dict[str, Any]]:
        """The finished entry of passage ``pid`` (None if not finished); refuses an entry whose
        content hash differs (the corpus changed under the journal)."""
        rec = self.entries.get(pid)
        if rec is not None and rec.get("sha") != sha:
            raise JournalError(f"{self.path}: passage {pid} was extracted from different text; "
                               f"the corpus changed since this journal was written (use another --out)")
        return rec

    def append(self, rec: Dict[str, Any]) -> None:
        """Appends one finished passage durably: returns once the line is fsync'd. Concurrent
        appends share fsyncs (group commit: one fsync covers every line written before it).
        OSError (e.g. disk full) becomes JournalError."""
        line = json.dumps(rec, ensure_ascii=False) + "\n"
        try:
            with self._lock:
                self._f.write(line)
                self._f.flush()
                self._written += 1
                mine = self._written
            with self._sync_lock:
                if self._synced < mine:
                    with self._lock:
                        upto = self._written
                    os.fsync(self._f.fileno())
                    self._synced = upto
        except OSError as e:
            raise JournalError(f"{self.path}: journal write failed ({e}); the build stopped. "
                               f"Finished passages are kept: free space and run the same "
                               f"command again to resume") from e
        with self._lock:
            self.entries[int(rec["pid"])] = rec

    def forget(self, pids) -> int:
        """Drops the entries of ``pids`` (e.g. unparsed replies to ask again); the journal is
        rewritten to a temporary file and atomically replaced. Returns how many were dropped."""
        drop = {int(p) for p in pids} & set(self.entries)
        if not drop:
            return 0
        with self._lock:
            self._f.close()
            tmp = self.path.with_suffix(".tmp")
            with open(self.path, encoding="utf-8") as src, open(tmp, "w", encoding="utf-8") as dst:
                for i, line in enumerate(src):
                    if i and int(json.loads(line)["pid"]) in drop:
                        continue
                    dst.write(line)
                dst.flush()
                os.fsync(dst.fileno())
            os.replace(tmp, self.path)
            for p in drop:
                del self.entries[p]
            self._f = open(self.path, "a", encoding="utf-8")
        return len(drop)

    def close(self) -> None:
        try:
            self._f.close()
        except OSError:
            pass

    def __enter__(self) -> "Journal":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _describe(ex) -> str:
    if not isinstance(ex, dict):
        return repr(ex)
    return f"model={ex.get('model')!r} prompt_sha256={str(ex.get('prompt_sha256'))[:12]}"


__all__ = ["Journal", "JournalError", "content_sha"]
