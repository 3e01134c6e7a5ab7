"""The one home of rasfast's answer and retrieval measures: every evaluation (``eval qa`` and
its reports, RAS's, GEAR's and KiRAG's retrieval evaluations, the benchmark scripts) scores
with these.

Answers (SQuAD normalisation: lower case, no punctuation, no articles, white space
collapsed; best over the gold answer and its aliases):

- :func:`exact_match` (EM): the normalised answer equals a normalised gold answer;
- :func:`token_f1`: SQuAD token F1; ``yes_no=True`` follows the official HotpotQA (and 2Wiki)
  script: a yes/no/noanswer answer or gold that differs from the other scores 0 (plain token
  F1 would give "no" against "no answer" partial credit);
- :func:`golden_match` ("contains the gold", RAS's "Acc"): a normalised gold answer occurs, as
  whole words, inside the normalised answer. Not a correctness measure: "Both E. B. White and
  Dan Masterson were American writers" contains "American" at F1 0.18;
- :func:`answer_scores`: the three at once.

Answers in text:

- :func:`answer_in_text`: a gold answer occurs in a text as whole words after normalisation
  ("1" is not in "1999");
- :func:`answer_in_texts`: in one of several texts, each searched on its own, so a match never
  spans two passages, two triples, or a label the prompt put between them ("Document 4:" is
  scaffolding, not text a system found).

Retrieval:

- :func:`recall_at_k`: share of a question's gold passages among its first k retrieved;
- :func:`mean_recall_at_k`: its mean over questions (questions without gold skipped);
- :func:`distinct_prefix`: the first n *distinct* ids of a ranking (a ranking that lists a
  passage twice shows it once);
- :func:`pad_ranking`: a ranking shorter than k filled with the next passages of a fallback
  ranking (GEAR's and KiRAG's retrieval evaluations compare full-depth rankings).
"""
from __future__ import annotations

import collections
import re
import string
from typing import Dict, Iterable, List, Sequence

import numpy as np

_ARTICLES = re.compile(r"\b(a|an|the)\b")
_PUNCT = set(string.punctuation)
YES_NO = frozenset(("yes", "no", "noanswer"))


# -- answers --------------------------------------------------------------------------------------
def normalize_answer(s: str) -> str:
    s = (s or "").lower()
    s = "".join(ch for ch in s if ch not in _PUNCT)
    s = _ARTICLES.sub(" ", s)
    return " ".join(s.split())


def exact_match(pred: str, golds: Sequence[str]) -> float:
    p = normalize_answer(pred)
    return float(any(p == normalize_answer(g) for g in golds))


def golden_match(pred: str, golds: Sequence[str]) -> float:
    """"Contains the gold": a normalised gold answer occurs as whole words in the answer."""
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


def _f1_yes_no(pred: str, gold: str) -> float:
    """HotpotQA's official F1: a yes/no/noanswer prediction or gold that differs from the
    other scores 0."""
    p, g = normalize_answer(pred), normalize_answer(gold)
    if (p in YES_NO or g in YES_NO) and p != g:
        return 0.0
    return _f1(pred, gold)


def token_f1(pred: str, golds: Sequence[str], yes_no: bool = False) -> float:
    """SQuAD token F1, best over the gold answers; ``yes_no``: HotpotQA's rule."""
    f = _f1_yes_no if yes_no else _f1
    return max((f(pred, g) for g in golds), default=0.0)


def answer_scores(pred: str, golds: Sequence[str], yes_no: bool = False) -> Dict[str, float]:
    """``acc`` (contains the gold), ``f1`` and ``em`` of ``pred``; ``yes_no``: F1 follows the
    official HotpotQA (and 2Wiki) script's yes/no/noanswer rule."""
    pred = pred or ""
    return {"acc": golden_match(pred, golds), "f1": token_f1(pred, golds, yes_no), "em": exact_match(pred, golds)}


# -- answers in text ------------------------------------------------------------------------------
def normalized_golds(golds: Iterable[str]) -> List[str]:
    """The non-empty normalised gold answers, each padded with a space on both sides."""
    return [f" {g} " for g in (normalize_answer(x) for x in golds) if g]


def answer_in_text(golds: Sequence[str], text: str) -> bool:
    """A gold answer (or alias) occurs in ``text`` as whole words after normalisation."""
    t = f" {normalize_answer(text)} "
    return any(g in t for g in normalized_golds(golds))


def answer_in_texts(golds: Sequence[str], texts: Iterable[str]) -> bool:
    """A gold answer occurs in one of ``texts``, each searched on its own."""
    gs = normalized_golds(golds)
    if not gs:
        return False
    for text in texts:
        t = f" {normalize_answer(text)} "
        if any(g in t for g in gs):
            return True
    return False


# -- retrieval ------------------------------------------------------------------------------------
def recall_at_k(retrieved: Sequence[int], gold: Iterable[int], k: int) -> float:
    """|gold ∩ first k retrieved| / |gold| for one question (0.0 without gold)."""
    gold = set(int(g) for g in gold)
    if not gold:
        return 0.0
    return len(gold & set(int(x) for x in list(retrieved)[:k])) / len(gold)


def mean_recall_at_k(ranked: Sequence[Sequence[int]], gold: Sequence[Sequence[int]], k: int) -> float:
    """Mean over questions of :func:`recall_at_k` (questions without gold are skipped)."""
    from ._validate import check_int_arg
    k = check_int_arg(k, "k", 1)
    vals = [recall_at_k(np.asarray(r).tolist(), g, k) for r, g in zip(ranked, gold) if len(g)]
    return float(np.mean(vals)) if vals else 0.0


def distinct_prefix(ranked: Iterable, n: int) -> list:
    """The first ``n`` distinct items of ``ranked``, in order."""
    seen, out = set(), []
    for x in ranked:
        if x in seen:
            continue
        seen.add(x)
        out.append(x)
        if len(out) >= n:
            break
    return out


def pad_ranking(ranked: np.ndarray, fallback: np.ndarray, k: int) -> np.ndarray:
    """``ranked`` filled to ``k`` with the next passages of ``fallback`` not yet in it."""
    if len(ranked) >= k:
        return ranked
    extra = fallback[~np.isin(fallback, ranked)]
    return np.concatenate([ranked, extra[:k - len(ranked)]])


__all__ = ["normalize_answer", "exact_match", "golden_match", "token_f1", "answer_scores", "YES_NO",
           "normalized_golds", "answer_in_text", "answer_in_texts", "recall_at_k", "mean_recall_at_k",
           "distinct_prefix", "pad_ranking"]
