"""Durable-write primitives shared by every saved index (ThemeIndex, KnowledgeIndex).

The write protocol (docs/index.md "Durability"; DESIGN.md section 9) is built from four pieces:

- :class:`DirLock` -- an ``fcntl.flock`` on ``<dir>/.lock``. Every writer (``save``, an
  in-place ``add``) holds it, so writers are serialised across processes *and* across
  threads and handles of one process (each acquisition opens the file anew, and flock locks
  belong to the open file description). Readers never take it.
- :func:`write_new_file` / :func:`pwrite_at` -- data goes to a new file, or after the
  committed bytes of an existing one; bytes a committed manifest covers are never rewritten
  and files are never truncated below them, so a reader that mapped them keeps working.
- :func:`atomic_write` -- the commit: write a temporary file, fsync it, ``os.replace`` it over
  the target, fsync the directory. A crash leaves either the old or the new file.
- :class:`AppendClaim` -- the record of rows appended in place (``ThemeIndex.add`` on a
  memory-mapped index) but not committed yet: which process and handle own them. Another
  writer may overwrite such bytes only when their owner is gone.
"""
from __future__ import annotations

import errno
import fcntl
import json
import os
import pathlib
import threading
from typing import Any, Dict, Iterable, Optional

LOCK_FILE = ".lock"
CLAIM_FILE = "append.claim"


def fsync_dir(d: pathlib.Path) -> None:
    """Makes renames and new files in ``d`` durable."""
    fd = os.open(str(d), os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def atomic_write(path: pathlib.Path, data: bytes) -> None:
    """Replaces ``path`` by ``data`` atomically and durably (temp + fsync + rename + dir fsync)."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    fsync_dir(path.parent)


def atomic_write_json(path: pathlib.Path, obj: Any, indent: Optional[int] = 1) -> None:
    atomic_write(path, json.dumps(obj, indent=indent, ensure_ascii=False).encode("utf-8"))


def write_new_file(path: pathlib.Path, chunks: Iterable[bytes]) -> int:
    """Writes a file that no committed manifest references yet (a new generation's file, or
    the leftover of an interrupted save of that generation), fsyncs it; returns its size."""
    with open(path, "wb") as f:
        for c in chunks:
            f.write(c)
        f.flush()
        os.fsync(f.fileno())
        return f.tell()


def pwrite_at(path: pathlib.Path, offset: int, chunks: Iterable[bytes]) -> int:
    """Writes ``chunks`` at byte ``offset`` of an existing file (the first byte past its
    committed part), fsyncs; returns the end offset. Never truncates: bytes before
    ``offset`` are committed and may be mapped by readers."""
    fd = os.open(str(path), os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        pos = int(offset)
        for c in chunks:
            view = memoryview(c).cast("B")
            done = 0
            while done < len(view):
                done += os.pwrite(fd, view[done:], pos + done)
            pos += len(view)
        os.fsync(fd)
        return pos
    finally:
        os.close(fd)


class DirLock:
    """Exclusive writer lock of an index directory (``with DirLock(d): ...``), re-entrant
    within one thread so that a save that calls another save of the same directory (a
    KnowledgeIndex saving its ThemeIndex) does not deadlock."""

    _held = threading.local()

    def __init__(self, d: pathlib.Path):
        self.d = pathlib.Path(d)
        self._fd = -1
        self._key = str(self.d.resolve())

    def __enter__(self) -> "DirLock":
        held = self._held.__dict__.setdefault("dirs", {})
        if held.get(self._key, 0):
            held[self._key] += 1
            return self
        self.d.mkdir(parents=True, exist_ok=True)
        self._fd = os.open(str(self.d / LOCK_FILE), os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(self._fd, fcntl.LOCK_EX)
        except BaseException:
            os.close(self._fd)
            self._fd = -1
            raise
        held[self._key] = 1
        return self

    def __exit__(self, *exc) -> None:
        held = self._held.__dict__["dirs"]
        held[self._key] -= 1
        if held[self._key] == 0 and self._fd >= 0:
            fcntl.flock(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
            self._fd = -1


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    except OSError as e:  # pragma: no cover - other errnos: assume alive (never overwrite)
        return e.errno != errno.ESRCH
    return True


class AppendClaim:
    """``<dir>/append.claim``: rows appended in place after generation ``generation`` by
    handle ``token`` of process ``pid``, not yet committed. Read and changed only under the
    directory's :class:`DirLock`."""

    def __init__(self, d: pathlib.Path):
        self.path = pathlib.Path(d) / CLAIM_FILE

    def read(self) -> Optional[Dict[str, Any]]:
        try:
            rec = json.loads(self.path.read_text())
        except (OSError, ValueError):
            return None
        return rec if isinstance(rec, dict) else None

    def blocks(self, token: str, generation: int) -> bool:
        """Whether uncommitted bytes past generation ``generation`` belong to a live other
        handle (then they must not be overwritten)."""
        rec = self.read()
        if rec is None or rec.get("token") == token or rec.get("generation") != generation:
            return False  # none, ours, or left over from before a later commit
        return _alive(int(rec.get("pid", -1)))

    def take(self, token: str, generation: int) -> None:
        atomic_write_json(self.path, {"pid": os.getpid(), "token": token,
                                      "generation": generation})

    def release(self, token: str) -> None:
        rec = self.read()
        if rec is not None and rec.get("token") == token:
            self.path.unlink(missing_ok=True)
