"""Replies the reader already gave to the same prompt, kept in an earlier run's records.

When the reader's prompt code changes (its signature, and so every read file's key, with it),
most prompts may still be byte for byte what an earlier run sent: issue 40's yes/no rule
changes the prompt of yes/no questions only. The local model decodes greedily, so its reply to
an unchanged prompt is the one it gave; reading it again costs about 15 s a question on this
CPU and tells nothing new. :func:`earlier_records` loads the same setting's records read under
the earlier reader signatures (:data:`.config.EARLIER_READER_PROMPTS`); :func:`known_reply`
hands ``rasfast.llm.reader.read`` a question's earlier reply when, and only when, the new
prompt is the one the earlier record logged (its text as the records keep it, and the same
shown passages and triples); the record then carries the earlier call, tokens and seconds,
and says so in ``reply_from``.
"""
from __future__ import annotations

import json
import pathlib
from typing import Any, Callable, Dict, Optional, Sequence, Tuple

from .records import RecordFile, cut_text, shown_record, unique_triples
from .roles import prompt_text

USAGE_KEYS = ("llm_calls", "prompt_tokens", "completion_tokens", "cached_prompt_tokens", "seconds")


def earlier_records(cache: pathlib.Path, cfg, system: str, signatures: Sequence[str]) -> Dict[str, Tuple[str, dict]]:
    """{qid: (signature, record)} of ``system``'s records read under each earlier reader
    signature in ``signatures`` (the first that has the question wins); the current
    signature's own file is not among them."""
    current = cfg.records_file(system)
    out: Dict[str, Tuple[str, dict]] = {}
    for sig in signatures:
        name = cfg.with_(reader_prompts=sig).records_file(system)
        if name == current:
            continue
        f = RecordFile(pathlib.Path(cache) / name)
        for qid, rec in (f.load() or {}).items():
            out.setdefault(qid, (sig, rec))
    return out


def _reader_calls(rec: dict):
    return [c for c in rec.get("calls") or [] if str(c.get("role", "")).startswith("reader")]


def _plain(x):
    return json.loads(json.dumps(x))


def known_reply(rec: dict, golds: Sequence[str]) -> Callable[[Any, Any], Optional[str]]:
    """``known(messages, fitted_input)`` for :func:`rasfast.llm.reader.read`: ``rec``'s reply
    when its one reader call logged exactly these messages and showed the same input; else
    None (the reader runs)."""
    calls = _reader_calls(rec)

    def known(msgs, inp) -> Optional[str]:
        if rec.get("error") is not None or len(calls) != 1 or calls[0].get("reply") is None:
            return None
        if calls[0].get("prompt") != cut_text(prompt_text(msgs)):
            return None
        if _shown_key(shown_record(inp, golds)["shown"]) != _shown_key(rec.get("shown")):
            return None
        return calls[0]["reply"]
    return known


def _shown_key(shown) -> Optional[tuple]:
    """What a record's ``shown`` says the prompt held: the passages, the unique triples (older
    records kept repeats the prompt drops), the context's characters and what was cut."""
    if not isinstance(shown, dict):
        return None
    return (_plain(shown.get("passages")), _plain(unique_triples(shown.get("triples") or [])),
            shown.get("chars"), shown.get("cut"))


def reused_usage(rec: dict, prep_usage: Optional[dict]) -> Tuple[Dict[str, Any], float]:
    """(the read's usage, its 'read (model)' milliseconds) as ``rec`` measured them: its totals
    less the preparation's (the same preparation file), its reader call and reader roles."""
    prep_usage = prep_usage or {}
    usage: Dict[str, Any] = {k: rec.get(k, 0) - prep_usage.get(k, 0) for k in USAGE_KEYS}
    usage["calls"] = _reader_calls(rec)
    usage["roles"] = {r: v for r, v in (rec.get("roles") or {}).items() if r.startswith("reader")}
    return usage, float((rec.get("timings") or {}).get("read (model)", 1000 * usage["seconds"]))


__all__ = ["earlier_records", "known_reply", "reused_usage", "USAGE_KEYS"]
