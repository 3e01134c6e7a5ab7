"""How the ``rasfast`` command line reports a user error (issue 31): ONE line on stderr
naming the problem, exit status 1, never a traceback.

- :class:`OneLineParser`: argparse's errors (an unknown option, ``--k abc``, a number out of
  range) as ``rasfast ask: error: argument --k: ... (see rasfast ask --help)`` instead of
  the usage block, exit 1.
- number types for options (:func:`int_at_least`, :func:`positive_float`): ``--k 0`` is
  refused when parsed, naming the option, not deep inside a system.
- :func:`user_errors`: around a command, the exceptions that mean "the input is wrong"
  (``ValueError`` -- rasfast's validation names the argument or file --, ``OSError`` -- a
  path that is missing, a directory, unwritable --, ``ImportError`` of an optional
  component, and the index/LLM errors below) become that one line. Anything else is a bug
  and keeps its traceback; ``RASFAST_TRACEBACK=1`` shows the traceback of user errors too.
"""
from __future__ import annotations

import argparse
import contextlib
import os
from typing import Iterator, NoReturn


def one_line(text: str) -> str:
    """``text`` on one line (a message's own newlines become "; ")."""
    return "; ".join(part.strip() for part in str(text).splitlines() if part.strip())


class OneLineParser(argparse.ArgumentParser):
    """An ArgumentParser whose usage errors are one line and exit 1 (its subparsers too)."""

    def error(self, message: str) -> NoReturn:
        self.exit(1, f"{self.prog}: error: {one_line(message)} (see {self.prog} --help)\n")


from .._validate import int_at_least, positive_int  # noqa: E402,F401 (argparse types, one home)


def positive_float(text: str) -> float:
    """An argparse type: a finite number > 0."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number > 0, got {text!r}") from None
    if not (value > 0 and value != float("inf")):
        raise argparse.ArgumentTypeError(f"expected a finite number > 0, got {text}")
    return value


def _user_error_types() -> tuple:
    from ..dispatch import BackendUnavailable
    from ..index.knowledge.build import UnparsedError
    from ..index.knowledge.extract import ExtractionError
    from ..index.knowledge.journal import JournalError
    from ..llm.openai_chat import LLMRequestError
    return (ValueError, OSError, ImportError, BackendUnavailable, UnparsedError,
            ExtractionError, JournalError, LLMRequestError)


def _describe(e: BaseException) -> str:
    if isinstance(e, OSError) and e.filename is not None and e.strerror:
        return f"{e.filename}: {e.strerror}"   # "[Errno 21] Is a directory: 'x'" -> "x: Is a directory"
    return str(e) or type(e).__name__


@contextlib.contextmanager
def user_errors(command: str) -> Iterator[None]:
    """Turns a user error raised inside into ``SystemExit("rasfast <command>: error: ...")``
    (one line on stderr, exit 1)."""
    try:
        yield
    except _user_error_types() as e:
        if os.environ.get("RASFAST_TRACEBACK"):
            raise
        raise SystemExit(f"rasfast {command}: error: {one_line(_describe(e))}") from None


def exit_message(e: SystemExit) -> None:
    """A command's ``SystemExit("message")`` on one line (Python prints it as given)."""
    if isinstance(e.code, str):
        e.code = one_line(e.code)


__all__ = ["OneLineParser", "int_at_least", "positive_int", "positive_float", "user_errors",
           "one_line", "exit_message"]
