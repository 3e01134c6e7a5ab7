"""The per-question records of ``rasfast eval qa``: their file, their schema, and where a
question was lost.

**The file.** One JSON object per line, appended as the questions finish, so an interrupted
run continues where it stopped. A record is either fully in the file or absent:

- each record is written with ONE ``os.write`` of the whole line (newline included) to a
  descriptor opened with ``O_APPEND``, then ``fsync``-ed: a kill leaves at most a torn
  *last* line, never a torn line followed by good ones;
- :meth:`RecordFile.open_for_append` repairs a torn last line (bytes after the last
  newline) before anything is appended, truncating it away, so a resumed run never glues
  its first record onto a fragment;
- a file kept compressed as ``<name>.jsonl.gz`` (as under benchmarks/results) is read the
  same way when the plain file is absent;
- a question recorded twice (two runs over the same cache at once, or a hand-made merge)
  counts once, at its first complete record; :attr:`RecordFile.duplicates` says how many
  lines were ignored that way and :attr:`RecordFile.torn` whether a torn tail was found.

**The schema** (version 2; every field beyond the first group may be missing in a version-1
record, which then reads as *unknown*, never as false):

- ``qid``, ``answer`` (the reader's answer after the contract's post-processing), ``gold``,
  ``em``, ``f1``, ``acc``, ``recall@k``, ``passages`` (the ranked pids the system returned,
  first 50), ``llm_calls``, ``prompt_tokens``, ``completion_tokens``,
  ``cached_prompt_tokens``, ``seconds``, ``error``, ``roles`` (per LLM role: replies,
  unparsed, failed);
- ``schema`` = 2, ``question``, ``prompt_style``, ``reader`` (the reader prompt's name);
- ``steps``: what each retrieval step did, a list of ``{"query", "passages": [[pid, score],
  ...], "scope", "triples": [[s, p, o], ...], "chains": [[[s, p, o], ...], ...],
  "note"}`` (``scope``: the theme scope size, ``chains``: graph-expansion beams, ``note``: the
  step's decision, e.g. a plan or an answerability verdict);
- ``shown``: what the final reader was shown: ``{"passages": [pids], "triples": [[s, p, o],
  ...], "n_passages", "n_triples", "chars", "cut"}`` (``triples``: the unique triples the
  prompt shows; records written before this held repeats, :func:`remeasure` counts them once);
- ``answer_retrieved``: a gold answer occurs (whole words, SQuAD-normalised) in a passage the
  system retrieved at any step; ``answer_shown``: in the passages' and triples' own texts the
  reader was shown, never in the prompt's labels ("Document 4:" does not show gold "4");
  records written before this searched the whole context text, and :func:`remeasure`
  recomputes it from their ``shown`` passages and triples;
- ``calls``: the LLM calls in order, ``[{"role", "prompt", "reply"}]`` (texts cut at
  :data:`CALL_TEXT_CHARS`).
"""
from __future__ import annotations

import json
import os
import pathlib
from typing import Any, Dict, Iterable, List, Optional, Sequence

from ..metrics import answer_in_text, normalized_golds  # noqa: F401 - their home is rasfast.metrics

SCHEMA = 2
CALL_TEXT_CHARS = 8000

# the failure stages, in pipeline order (what the report's chart stacks)
STAGES = ("not_retrieved", "retrieved_not_shown", "shown_misread", "contains_gold", "correct", "unknown")
STAGE_LABELS = {"not_retrieved": "not retrieved", "retrieved_not_shown": "retrieved but not shown",
                "shown_misread": "shown but misread", "contains_gold": "answer contains the gold (not EM)",
                "correct": "correct (EM)", "unknown": "unknown"}


class RecordFile:
    """The JSONL records of one (dataset, system, settings) run; see the module docstring."""

    def __init__(self, path: os.PathLike):
        self.path = pathlib.Path(path)
        self.torn = False        # a torn last line was found by the last load
        self.duplicates = 0      # complete records ignored because their qid came earlier
        self.bad_lines = 0       # complete lines that are not a record (not JSON, no qid)

    def load(self) -> Dict[str, dict]:
        """qid -> its first complete record. A torn last line is skipped (and noted)."""
        self.torn, self.duplicates, self.bad_lines = False, 0, 0
        done: Dict[str, dict] = {}
        # records kept compressed (benchmarks/results) come first; a plain file beside them
        # holds what was appended since (an empty one, made by an append, hides nothing)
        gz = self.path.with_name(self.path.name + ".gz")
        data = b""
        if gz.is_file():
            import gzip
            data = gzip.decompress(gz.read_bytes())
            if data and not data.endswith(b"\n"):
                data += b"\n"
        if self.path.is_file():
            data += self.path.read_bytes()
        elif not gz.is_file():
            return done
        lines = data.split(b"\n")
        if lines and lines[-1] != b"":       # bytes after the last newline: a torn record
            self.torn = True
        for raw in lines[:-1]:
            if not raw.strip():
                continue
            try:
                rec = json.loads(raw)
            except ValueError:
                self.bad_lines += 1
                continue
            if not isinstance(rec, dict) or "qid" not in rec:
                self.bad_lines += 1
                continue
            if rec["qid"] in done:
                self.duplicates += 1
                continue
            done[rec["qid"]] = rec
        return done

    def repair(self) -> int:
        """Truncates a torn last line away; returns the bytes removed."""
        if not self.path.is_file():
            return 0
        size = self.path.stat().st_size
        if size == 0:
            return 0
        with open(self.path, "rb+") as f:
            # find the last newline from the end, a block at a time
            pos, block = size, 65536
            keep = 0
            while pos > 0:
                start = max(0, pos - block)
                f.seek(start)
                chunk = f.read(pos - start)
                i = chunk.rfind(b"\n")
                if i != -1:
                    keep = start + i + 1
                    break
                pos = start
            if keep < size:
                f.truncate(keep)
                f.flush()
                os.fsync(f.fileno())
            return size - keep

    def open_for_append(self) -> "RecordWriter":
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.repair()
        return RecordWriter(self.path)


class RecordWriter:
    """Appends whole records: one ``os.write`` per line on an ``O_APPEND`` descriptor, then
    fsync (a context manager)."""

    def __init__(self, path: pathlib.Path):
        self.fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)

    def write(self, rec: dict) -> None:
        line = (json.dumps(rec, default=_jsonable) + "\n").encode()
        n = os.write(self.fd, line)
        while n < len(line):            # a short write (a full disk, a signal): finish it
            n += os.write(self.fd, line[n:])
        os.fsync(self.fd)

    def close(self) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def _jsonable(x):
    if hasattr(x, "tolist"):
        return x.tolist()
    if isinstance(x, (set, tuple)):
        return list(x)
    return str(x)


# -- answers in text ----------------------------------------------------------------------------
def is_correct(rec: dict) -> bool:
    """Counted as answered: an exact match (EM). A reply that merely contains the gold
    ("Both E. B. White and Dan Masterson were American writers" for "American") is
    :func:`contains_gold`, its own stage, not correct."""
    return bool(rec.get("em"))


def contains_gold(rec: dict) -> bool:
    """The answer contains a gold answer as whole words (the record's ``acc``), EM or not."""
    return bool(rec.get("acc")) or bool(rec.get("em"))


def failure_stage(rec: dict) -> str:
    """Where a question was lost: ``correct`` (EM); ``contains_gold`` (not EM, but the answer
    contains a gold answer); ``shown_misread`` (the reader saw the answer);
    ``retrieved_not_shown`` (a retrieved passage held it, the reader's input did not);
    ``not_retrieved``; or ``unknown`` for a record that does not say what was retrieved or
    shown (schema 1). A system without retrieval (closed book) is ``not_retrieved`` unless
    its answer is correct or contains the gold."""
    if is_correct(rec):
        return "correct"
    if contains_gold(rec):
        return "contains_gold"
    shown, retrieved = rec.get("answer_shown"), rec.get("answer_retrieved")
    if shown:
        return "shown_misread"
    if retrieved:
        return "retrieved_not_shown" if shown is False else "unknown"
    if retrieved is False:
        return "not_retrieved"
    return "unknown"


def stage_counts(recs: Sequence[dict]) -> Dict[str, int]:
    out = {s: 0 for s in STAGES}
    for r in recs:
        out[failure_stage(r)] += 1
    return out


def upgrade(rec: dict) -> dict:
    """A record of any schema as schema 2: the fields a version-1 record lacks are present
    and None (unknown)."""
    r = dict(rec)
    r.setdefault("schema", 1)
    for key in ("question", "prompt_style", "reader", "steps", "shown", "answer_retrieved",
                "answer_shown", "calls"):
        r.setdefault(key, None)
    return r


def unique_triples(triples: Iterable[Sequence]) -> List[list]:
    """``triples`` without repeats, first occurrence kept: what the reader's facts layout
    (:func:`rasfast.llm.reader.facts_text`) shows, which never repeats a fact."""
    seen, out = set(), []
    for t in triples:
        key = tuple(str(x).strip().lower() for x in list(t)[:3])
        if key in seen:
            continue
        seen.add(key)
        out.append(list(t))
    return out


def _passage_texts(title: str, text: str) -> List[str]:
    from ..llm.reader import PASSAGE_CHARS
    return [str(title or ""), str(text or "")[:PASSAGE_CHARS]]


def shown_texts(reader_input) -> List[str]:
    """The texts a reader input shows, each on its own, without the prompt's scaffolding
    ("Document N:" labels, "Search N:" heads, "Facts:"): the knowledge text, each triple's
    words, each passage's title and (cut) text."""
    out = [reader_input.knowledge] if reader_input.knowledge.strip() else []
    out += [" ".join(str(x) for x in t[:3]) for t in unique_triples(reader_input.triples)]
    for p in reader_input.passages:
        out += _passage_texts(getattr(p, "title", ""), getattr(p, "text", ""))
    return out


def shown_record(reader_input, golds: Sequence[str]) -> Dict[str, Any]:
    """``shown`` and ``answer_shown`` of a record from a :class:`rasfast.llm.reader.ReaderInput`.
    ``triples`` / ``n_triples``: the unique triples the prompt shows; ``answer_shown``: a gold
    answer occurs in the shown texts themselves (:func:`shown_texts`), never through a label."""
    from ..metrics import answer_in_texts
    if reader_input is None:
        return {"shown": None, "answer_shown": None}
    text = reader_input.context_text()
    trip = unique_triples(reader_input.triples)
    shown = {"passages": [int(p.pid) for p in reader_input.passages], "triples": trip,
             "n_passages": len(reader_input.passages), "n_triples": len(trip), "chars": len(text),
             "cut": int(getattr(reader_input, "cut", 0))}
    return {"shown": shown, "answer_shown": answer_in_texts(golds, shown_texts(reader_input))}


def remeasure(rec: dict, golds: Sequence[str], passage_of) -> dict:
    """A stored record's measures recomputed from what it holds (no model): ``shown.n_triples``
    as the unique triples; ``answer_shown`` from the shown passages' and triples' own texts
    (``passage_of(pid)``: the corpus passage), so records written when "answer shown" searched
    the whole prompt text ("Document 4:" matched gold "4") read as they should. A record whose
    reader was shown neither passages nor triples (closed book; StructRAG's free-text
    knowledge, which holds no labels) keeps its stored ``answer_shown``; so does one naming a
    passage the corpus lacks."""
    from ..metrics import answer_in_texts
    r = dict(rec)
    sh = r.get("shown")
    if not isinstance(sh, dict):
        return r
    trip = unique_triples(sh.get("triples") or [])
    pids = list(sh.get("passages") or [])
    r["shown"] = dict(sh, n_triples=len(trip))
    if not trip and not pids:
        return r
    ps = [passage_of(int(p)) for p in pids]
    if any(p is None for p in ps):
        return r
    texts = [" ".join(str(x) for x in t[:3]) for t in trip]
    for p in ps:
        texts += _passage_texts(p.title, p.text)
    r["answer_shown"] = answer_in_texts(golds, texts)
    return r


def cut_text(s: Optional[str], n: int = CALL_TEXT_CHARS) -> Optional[str]:
    if s is None or len(s) <= n:
        return s
    return s[: n // 2] + f"\n[... {len(s) - n} characters cut ...]\n" + s[-n // 2:]


__all__ = ["RecordFile", "RecordWriter", "SCHEMA", "STAGES", "STAGE_LABELS", "answer_in_text",
           "failure_stage", "stage_counts", "is_correct", "contains_gold", "upgrade", "shown_record",
           "shown_texts", "unique_triples", "remeasure", "cut_text"]
