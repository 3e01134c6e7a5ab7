"""Rows, paired intervals and text tables of ``rasfast eval qa`` records (no model needed)."""
from __future__ import annotations

import statistics
from typing import Any, Dict, List, Optional, Sequence

import numpy as np

from .records import STAGE_LABELS, STAGES, failure_stage

RECALL_KS = (5, 10, 15)
# answer in the first N distinct passages each system ranked: retrieval at equal depth
ANSWER_DEPTHS = (5, 10, 20)


def paired_bootstrap(a: Sequence[float], b: Sequence[float], n_boot: int = 10_000, seed: int = 0) -> Dict[str, Any]:
    """System a minus system b over the same questions: mean difference, 95% paired bootstrap
    interval (``n_boot`` resamples of the questions with replacement, seed ``seed``), and the
    questions a is higher / lower / the same on."""
    d = np.asarray(a, dtype=np.float64) - np.asarray(b, dtype=np.float64)
    n = len(d)
    if n == 0:
        return {"n": 0, "mean": None, "lo": None, "hi": None, "higher": 0, "lower": 0, "same": 0}
    rng = np.random.default_rng(seed)
    means = d[rng.integers(0, n, size=(n_boot, n))].mean(axis=1)
    lo, hi = np.quantile(means, [0.025, 0.975])
    return {"n": n, "mean": float(d.mean()), "lo": float(lo), "hi": float(hi),
            "higher": int((d > 0).sum()), "lower": int((d < 0).sum()), "same": int((d == 0).sum())}


def _mean(xs) -> Optional[float]:
    xs = [x for x in xs if x is not None]
    return (sum(xs) / len(xs)) if xs else None


def summarise(name: str, recs: List[dict], k: int, ks: Sequence[int] = RECALL_KS) -> Dict[str, Any]:
    """One row: means over ``recs``. ``recall@K`` is over the first K passages each system
    returned (questions whose record has passages); ``recall_all`` over all it returned;
    ``answer_retrieved`` / ``answer_shown``: shares of the questions whose records say so
    (None where no record knows); ``answer@N``: share whose answer is in the first N distinct
    passages the system ranked (retrieval at equal depth: ``answer_retrieved`` counts every
    passage a system retrieved, 20 for dense, about 6 for RAS); ``ranked_per_q``: the distinct
    passages each system ranked, its depth."""
    n = len(recs)
    mean = lambda key: (sum(float(r.get(key) or 0) for r in recs) / n) if n else 0.0  # noqa: E731
    row: Dict[str, Any] = {"system": name, "n": n, "em": mean("em"), "f1": mean("f1"), "acc": mean("acc")}
    for kk in sorted(set(ks) | {k}):
        row[f"recall@{kk}"] = _mean([r.get(f"recall@{kk}") for r in recs])
    row["recall_all"] = _mean([r.get("recall_all") for r in recs])
    roles: Dict[str, List[int]] = {}
    for r in recs:
        for role, v in (r.get("roles") or {}).items():
            acc = roles.setdefault(role, [0, 0, 0])
            for i, x in enumerate(v):
                acc[i] += x
    shown = [r.get("shown") for r in recs if r.get("shown")]
    secs = [float(r.get("seconds") or 0) for r in recs]
    row.update({
        "passages_per_q": (sum(len(r.get("passages") or []) for r in recs) / n) if n else 0.0,
        "answer_retrieved": _mean([None if r.get("answer_retrieved") is None else float(r["answer_retrieved"])
                                   for r in recs]),
        "answer_shown": _mean([None if r.get("answer_shown") is None else float(r["answer_shown"]) for r in recs]),
        **{f"answer@{d}": _mean([None if r.get(f"answer@{d}") is None else float(r[f"answer@{d}"]) for r in recs])
           for d in ANSWER_DEPTHS},
        "ranked_per_q": _mean([r.get("n_ranked") for r in recs]),
        "shown_passages_per_q": _mean([s.get("n_passages") for s in shown]),
        "shown_triples_per_q": _mean([s.get("n_triples") for s in shown]),
        "llm_calls_per_q": mean("llm_calls"), "prompt_tokens_per_q": mean("prompt_tokens"),
        "completion_tokens_per_q": mean("completion_tokens"),
        "cached_prompt_tokens_per_q": mean("cached_prompt_tokens"),
        "seconds_per_q": mean("seconds"), "seconds_median": statistics.median(secs) if secs else 0.0,
        "errors": sum(1 for r in recs if r.get("error")),
        "stages": {s: sum(1 for r in recs if failure_stage(r) == s) for s in STAGES},
        "parse_failures": {role: {"replies": c, "unparsed": u, "rate": (u / c if c else None), "failed": f}
                           for role, (c, u, f) in sorted(roles.items())},
    })
    return row


def paired_against(recs_by_system: Dict[str, List[dict]], base: str = "dense",
                   metric: str = "f1") -> Dict[str, Dict[str, Any]]:
    """Each system's paired bootstrap against ``base`` over the questions both have."""
    if base not in recs_by_system:
        return {}
    b = {r["qid"]: r for r in recs_by_system[base]}
    out = {}
    for name, recs in recs_by_system.items():
        if name == base:
            continue
        common = [r for r in recs if r["qid"] in b]
        out[name] = paired_bootstrap([float(r.get(metric) or 0) for r in common],
                                     [float(b[r["qid"]].get(metric) or 0) for r in common])
    return out


def _f(x, spec=".3f", none="-"):
    return none if x is None else format(x, spec)


def format_rows(out: Dict[str, Any]) -> str:
    k = out["k"]
    head = (f"{'system':<16}{'n':>4}{'EM':>7}{'F1':>7}{'R@' + str(k):>7}{'R@all':>7}{'ans.ret':>8}"
            + "".join(f"{'ans@' + str(d):>7}" for d in ANSWER_DEPTHS) + f"{'ans.shown':>10}"
            f"{'calls/q':>8}{'tok/q':>8}{'s/q':>7}{'err':>5}")
    lines = [head]
    for r in out["rows"]:
        lines.append(f"{r['system']:<16}{r['n']:>4}{r['em']:>7.3f}{r['f1']:>7.3f}"
                     f"{_f(r.get(f'recall@{k}')):>7}{_f(r.get('recall_all')):>7}"
                     f"{_f(r.get('answer_retrieved'), '.2f'):>8}"
                     + "".join(f"{_f(r.get(f'answer@{d}'), '.2f'):>7}" for d in ANSWER_DEPTHS)
                     + f"{_f(r.get('answer_shown'), '.2f'):>10}"
                     f"{r['llm_calls_per_q']:>8.1f}"
                     f"{r['prompt_tokens_per_q'] + r['completion_tokens_per_q']:>8.0f}{r['seconds_per_q']:>7.1f}"
                     f"{r['errors']:>5}")
    if out.get("paired"):
        lines.append("paired against dense (F1, 95% bootstrap interval over the same questions):")
        for name, p in out["paired"].items():
            if p["n"]:
                lines.append(f"  {name:<16}{p['mean']:+.3f} [{p['lo']:+.3f}, {p['hi']:+.3f}]  "
                             f"(n={p['n']}, higher {p['higher']}, lower {p['lower']}, same {p['same']})")
    lines.append("ans.ret: answer in any passage retrieved; ans@N: in the first N distinct passages ranked; "
                 "ans.shown: in the passages' / triples' own text the reader was shown")
    lines.append("where questions were lost (" + " / ".join(STAGE_LABELS[s] for s in STAGES) + "):")
    for r in out["rows"]:
        st = r["stages"]
        lines.append(f"  {r['system']:<16}" + " / ".join(str(st[s]) for s in STAGES))
    lines.append("parse failures (unparsed / replies) per role:")
    for r in out["rows"]:
        pf = ", ".join(f"{role} {v['unparsed']}/{v['replies']}" + (f" (+{v['failed']} failed)" if v["failed"] else "")
                       for role, v in r["parse_failures"].items())
        lines.append(f"  {r['system']:<16}{pf or '-'}")
    for name, why in out.get("skipped", {}).items():
        lines.append(f"  {name}: not run ({why})")
    for name, m in out.get("missing", {}).items():
        if m:
            lines.append(f"  {name}: {m} of the {out['n']} questions not in the cache")
    for name, d in out.get("duplicates", {}).items():
        if d:
            lines.append(f"  {name}: the cache file holds {d} duplicate record(s) (counted once)")
    return "\n".join(lines)


__all__ = ["summarise", "format_rows", "paired_bootstrap", "paired_against", "RECALL_KS", "ANSWER_DEPTHS"]
