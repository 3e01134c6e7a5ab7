"""Answer and retrieval metrics as RAS and the multi-hop QA literature use them.

- ``exact_match``: normalised prediction == a normalised gold answer (SQuAD normalisation:
  lower case, no punctuation, no articles, white space collapsed);
- ``token_f1``: SQuAD token-level F1, best over gold answers;
- ``golden_match`` (RAS's "Acc"): some normalised gold answer occurs inside the normalised
  prediction;
- ``recall_at_k``: share of gold passages among the first k retrieved.
"""
from __future__ import annotations

import collections
import re
import string
from typing import Dict, Iterable, Sequence

_ARTICLES = re.compile(r"\b(a|an|the)\b")
_PUNCT = set(string.punctuation)


def normalize_answer(s: str) -> str:
    s = (s or "").lower()
    s = "".join(ch for ch in s if ch not in _PUNCT)
    s = _ARTICLES.sub(" ", s)
    return " ".join(s.split())


def exact_match(pred: str, golds: Sequence[str]) -> float:
    p = normalize_answer(pred)
    return float(any(p == normalize_answer(g) for g in golds))


def golden_match(pred: str, golds: Sequence[str]) -> float:
    p = f" {normalize_answer(pred)} "
    return float(any(normalize_answer(g) and f" {normalize_answer(g)} " in p for g in golds))


def _f1(pred: str, gold: str) -> float:
    pt, gt = normalize_answer(pred).split(), normalize_answer(gold).split()
    common = collections.Counter(pt) & collections.Counter(gt)
    same = sum(common.values())
    if not pt or not gt:
        return float(pt == gt)
    if same == 0:
        return 0.0
    prec, rec = same / len(pt), same / len(gt)
    return 2 * prec * rec / (prec + rec)


YES_NO = frozenset(("yes", "no", "noanswer"))


def _f1_yes_no(pred: str, gold: str) -> float:
    """HotpotQA's official F1: a yes/no/noanswer prediction or gold that differs from the
    other scores 0 (plain token F1 would give partial credit, e.g. "no" vs "no answer")."""
    p, g = normalize_answer(pred), normalize_answer(gold)
    if (p in YES_NO or g in YES_NO) and p != g:
        return 0.0
    return _f1(pred, gold)


def token_f1(pred: str, golds: Sequence[str], yes_no: bool = False) -> float:
    """SQuAD token F1, best over the gold answers; ``yes_no``: HotpotQA's rule (_f1_yes_no)."""
    f = _f1_yes_no if yes_no else _f1
    return max((f(pred, g) for g in golds), default=0.0)


def recall_at_k(retrieved: Sequence[int], gold: Iterable[int], k: int) -> float:
    gold = set(gold)
    if not gold:
        return 0.0
    return len(gold & set(list(retrieved)[:k])) / len(gold)


def answer_scores(pred: str, golds: Sequence[str], yes_no: bool = False) -> Dict[str, float]:
    """acc, F1 and EM of ``pred``; ``yes_no``: F1 follows the official HotpotQA (and 2Wiki)
    script's yes/no/noanswer rule."""
    pred = pred or ""
    return {"acc": golden_match(pred, golds), "f1": token_f1(pred, golds, yes_no), "em": exact_match(pred, golds)}


__all__ = ["normalize_answer", "exact_match", "golden_match", "token_f1", "recall_at_k", "answer_scores"]
