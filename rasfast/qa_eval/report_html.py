"""The offline HTML pages of ``rasfast eval qa --html FILE`` (a whole run, from a run or from
the cache with ``--report``) and ``rasfast ask --html FILE`` (one question, one system).

The records (:mod:`.records`) hold passage ids, not texts: the pages take the texts and each
question's gold passages from the dataset's corpus, loaded here when the caller does not
pass them. Where the corpus cannot be loaded the report is still written, with titles and
texts marked as not available. Rendering is :mod:`rasfast.report`'s.
"""
from __future__ import annotations

import os
import pathlib
from typing import Any, Dict, List, Mapping, Optional, Sequence

from .records import STAGE_LABELS, STAGES, failure_stage, is_correct, upgrade


def _questions(records: Mapping[str, List[dict]], ds=None) -> List[Dict[str, Any]]:
    """Every question some system has a record of: in the dataset's order when the dataset is
    known, else in order of first appearance."""
    seen: Dict[str, Dict[str, Any]] = {}
    for recs in records.values():
        for r in recs:
            q = seen.setdefault(r["qid"], {"qid": r["qid"], "question": None, "gold": None})
            q["question"] = q["question"] or r.get("question")
            q["gold"] = q["gold"] or r.get("gold")
    if ds is None:
        return list(seen.values())
    out = []
    for q in ds.questions:
        if q.qid in seen:
            d = seen[q.qid]
            out.append({"qid": q.qid, "question": d["question"] or q.question, "gold": d["gold"] or q.answers})
    known = {q["qid"] for q in out}
    return out + [q for qid, q in seen.items() if qid not in known]


def _load_dataset(name: Optional[str], data_root):
    """(dataset, None) or (None, why not)."""
    from ..data.qa import load_dataset
    if not name:
        return None, "the run does not name its dataset"
    try:
        return load_dataset(name, data_root), None
    except (FileNotFoundError, ValueError, OSError) as e:
        return None, str(e)


def report_document(out: Mapping[str, Any], records: Mapping[str, Sequence[dict]], *, dataset=None,
                    data_root=None) -> str:
    """The evaluation report as one HTML string. ``dataset``: the run's
    :class:`~rasfast.data.qa.QADataset` (loaded from ``out["dataset"]`` when not given)."""
    from ..report.eval_page import EvalView, render
    from .systems import LABELS
    recs = {name: [upgrade(r) for r in rs] for name, rs in (records or {}).items() if rs}
    notes = []
    ds = dataset
    if ds is None:
        ds, why = _load_dataset(out.get("dataset"), data_root)
        if ds is None:
            notes.append(f"Passage texts and gold passages are not available: the corpus of "
                         f"{out.get('dataset')!r} could not be loaded ({why}).")
    if not recs:
        notes.append("The run has no per-question records: only the table is shown.")
    view = EvalView(questions=_questions(recs, ds), stage_of=failure_stage, correct=is_correct,
                    stages=STAGES, stage_labels=STAGE_LABELS,
                    passages={p.pid: p for p in ds.passages} if ds is not None else {},
                    gold_pids={q.qid: q.gold_pids for q in ds.questions} if ds is not None else {},
                    system_labels=LABELS, notes=notes)
    return render(out, recs, view)


def write_report(path: os.PathLike, out: Mapping[str, Any], records: Optional[Mapping[str, Sequence[dict]]] = None,
                 *, dataset=None, data_root=None) -> pathlib.Path:
    """Writes the evaluation report (``out``: what :func:`.run.evaluate_qa` or
    :func:`.run.report_qa` returned; ``records``: its ``"records"``, which the command line
    pops from ``out`` before writing its JSON). Returns the path written."""
    if records is None:
        records = out.get("records") or {}
    html = report_document(out, records, dataset=dataset, data_root=data_root)
    return _write(path, html)


def record_page(rec: dict, *, system: str, passages: Optional[Mapping[int, Any]] = None,
                gold_pids: Sequence[int] = ()) -> str:
    """One question and one system as a whole page: ``rec`` as ``eval qa`` records it
    (:func:`.run.single_record` makes one); ``passages``: pid -> object with ``title`` and
    ``text``."""
    from ..report.record_page import PageContext, record_document
    r = upgrade(rec)
    known = r.get("em") is not None or r.get("acc") is not None
    stage = failure_stage(r) if known else None
    ctx = PageContext(passages or {}, set(int(p) for p in gold_pids))
    return record_document(r, system=system, ctx=ctx, stage=stage, stage_label=STAGE_LABELS.get(stage))


def write_record_page(path: os.PathLike, rec: dict, *, system: str, passages: Optional[Mapping[int, Any]] = None,
                      gold_pids: Sequence[int] = ()) -> pathlib.Path:
    return _write(path, record_page(rec, system=system, passages=passages, gold_pids=gold_pids))


def _write(path: os.PathLike, html: str) -> pathlib.Path:
    p = pathlib.Path(path)
    p.write_text(html, encoding="utf-8")
    return p


__all__ = ["write_report", "report_document", "record_page", "write_record_page"]
