"""``rasfast eval qa --report --layout gear-agent``: GEAR's retrievers and agent against its
paper's tables (``benchmarks/results/gear_agent.md``).

Runs no LLM. The retrieval-only rows (dense, BM25, hybrid, + NaiveGE) are computed here; the
rows that need the LLM (hybrid + SyncGE, the GEAR agent) and every EM/F1 come from the
``rasfast eval qa`` per-question records written by these runs (one local model, greedy):

    rasfast eval qa --dataset D --systems gear-sync --reader one-shot --retriever hybrid --questions 1-100 \\
        --llm local --llm-ctx 8192 --cache-dir C
    rasfast eval qa --dataset D --systems gear --reader one-shot --retriever hybrid --questions 1-100 ...
    rasfast eval qa --dataset D --systems dense,bm25,hybrid,gear-naive,gear --reader one-shot \\
        --retriever hybrid --questions 51-100 ...

Recall is over all 100 questions (no prompt was tuned on recall); EM/F1 over the held-out
questions 51-100 only (prompts could be looked at on 1-50), with paired bootstrap intervals
against dense RAG through the same reader (GEAR's App. J.3 one-shot prompt, top 5 passages).
"""
from __future__ import annotations

import pathlib
from collections import Counter

import numpy as np

KS = (5, 10, 15)
# the paper's Table 2 (Recall@5/10/15, GPT-4o-mini, full corpora; SBERT = all-mpnet-base-v2)
PAPER_RECALL = {
    "musique": {"BM25": (33.8, 38.5, 41.3), "SBERT": (31.1, 37.9, 41.6), "Hybrid": (39.9, 46.3, 49.1),
                "Hybrid + NaiveGE": (41.8, 49.4, 53.0), "Hybrid + SyncGE": (48.7, 57.7, 61.2),
                "SBERT + NaiveGE": (32.2, 41.4, 45.4), "GEAR": (58.4, 67.6, 71.5)},
    "hotpotqa": {"BM25": (74.2, 83.6, 86.3), "SBERT": (72.1, 79.3, 84.0), "Hybrid": (77.8, 85.8, 89.7),
                 "Hybrid + NaiveGE": (80.6, 89.4, 92.7), "Hybrid + SyncGE": (87.4, 93.3, 95.2),
                 "SBERT + NaiveGE": (76.1, 84.7, 88.8), "GEAR": (93.4, 96.8, 97.3)},
}
# the paper's Table 3 (EM / F1 through its App. J.3 reader, top-5 passages)
PAPER_QA = {"musique": {"No passages": (2.6, 12.5), "Hybrid + SyncGE": (14.0, 27.1), "GEAR": (19.0, 35.6)},
            "hotpotqa": {"No passages": (19.5, 34.3), "Hybrid + SyncGE": (45.0, 63.4), "GEAR": (50.4, 69.4)}}
ROW = {"dense": "dense (SBERT: MiniLM)", "bm25": "BM25", "hybrid": "hybrid", "gear-naive": "hybrid + NaiveGE",
       "dense+naive": "dense + NaiveGE", "gear-sync": "hybrid + SyncGE", "gear": "GEAR (agent)", "none": "closed book"}
PAPER_ROW = {"dense": "SBERT", "bm25": "BM25", "hybrid": "Hybrid", "gear-naive": "Hybrid + NaiveGE",
             "dense+naive": "SBERT + NaiveGE", "gear-sync": "Hybrid + SyncGE", "gear": "GEAR"}


def recall(ranked, gold, k):
    from ..metrics import recall_at_k
    return recall_at_k(ranked, gold, k)


def retrieval_rows(ds, ki, enc):
    """Recall@k of the model-free retrievers over every question."""
    from .systems import make_preparer
    out = {}
    for name, prep, base in (("dense", "dense", "dense"), ("bm25", "bm25", "dense"), ("hybrid", "hybrid", "dense"),
                             ("gear-naive", "gear-naive", "hybrid"), ("dense+naive", "gear-naive", "dense")):
        p = make_preparer(prep, None, ki, enc, 5, 5, retriever=base)
        ranked = [[int(x) for x, _ in p(q.question).ranked] for q in ds.questions]
        out[name] = {f"recall@{k}": float(np.mean([recall(r, q.gold_pids, k) for r, q in zip(ranked, ds.questions)]))
                     for k in KS}
        out[name]["n"] = len(ds.questions)
        out[name]["ranked"] = {q.qid: r for q, r in zip(ds.questions, ranked)}
    return out


def same_questions(ds, d, recs_by):
    """Recall@k of every retriever and of each LLM system in ``recs_by`` over the questions all
    of those systems have records for, and per question R@15 wins and losses against hybrid."""
    gold = {q.qid: q.gold_pids for q in ds.questions}
    mine = {s: {r["qid"]: r["passages"] for r in recs if r.get("passages")} for s, recs in recs_by.items()}
    mine = {s: m for s, m in mine.items() if m}
    if not mine:
        return None
    qids = [q.qid for q in ds.questions if all(q.qid in m for m in mine.values())]
    rows, vs = {}, {}
    for key, r in d["retrieval"].items():
        if "ranked" in r:
            rows[key] = {f"recall@{k}": float(np.mean([recall(r["ranked"][q], gold[q], k) for q in qids])) for k in KS}
    from .tables import paired_bootstrap
    hyb = d["retrieval"]["hybrid"]["ranked"]
    for system, m in mine.items():
        rows[system] = {f"recall@{k}": float(np.mean([recall(m[q], gold[q], k) for q in qids])) for k in KS}
        diff = [recall(m[q], gold[q], 15) - recall(hyb[q], gold[q], 15) for q in qids]
        vs[system] = {"better": sum(x > 0 for x in diff), "worse": sum(x < 0 for x in diff),
                      "same": sum(x == 0 for x in diff),
                      "paired": {k: paired_bootstrap([recall(m[q], gold[q], k) for q in qids],
                                                     [recall(hyb[q], gold[q], k) for q in qids]) for k in KS}}
    return {"n": len(qids), "rows": rows, "vs_hybrid_r15": vs}


def cached(ds, systems, questions, cache, label, retriever="hybrid", reader_prompts=None, n_ctx=None):
    """The records of ``systems`` through GEAR's one-shot reader (``reader_prompts``: the reader
    signature they were read with; the committed ones: round 3, before the yes/no rule)."""
    from .run import report_qa
    return report_qa(ds, systems, label, cache_dir=cache, questions=questions, reader="one-shot",
                     retriever=retriever, n_ctx=n_ctx, reader_prompts=reader_prompts)


def usage(recs):
    n = len(recs) or 1
    return {"llm_calls": sum(r.get("llm_calls") or 0 for r in recs) / n,
            "prompt_tokens": sum(r.get("prompt_tokens") or 0 for r in recs) / n,
            "completion_tokens": sum(r.get("completion_tokens") or 0 for r in recs) / n,
            "seconds": sum(r.get("seconds") or 0 for r in recs) / n}


def per_iteration(ds, recs, max_iters):
    """R@15 of the final ranking as of round i (carried forward after a question stopped), and
    the prompt / completion tokens of round i, per question (Figures 2 and 4)."""
    gold = {q.qid: q.gold_pids for q in ds.questions}
    r15, tok_in, tok_out, alive = [], [], [], []
    for i in range(max_iters):
        vals, ti, to, a = [], 0, 0, 0
        for r in recs:
            its = r.get("iterations") or []
            if not its:
                continue
            it = its[min(i, len(its) - 1)]
            vals.append(recall(it["passages"], gold[r["qid"]], 15))
            if i < len(its):
                a += 1
                ti += its[i].get("prompt_tokens", 0)
                to += its[i].get("completion_tokens", 0)
        n = len(vals) or 1
        r15.append(float(np.mean(vals)) if vals else None)
        tok_in.append(ti / n)
        tok_out.append(to / n)
        alive.append(a)
    return {"recall@15": r15, "prompt_tokens": tok_in, "completion_tokens": tok_out, "questions_in_round": alive}


def agent_evidence(recs, ki):
    """What the agent's rounds looked like: stop reasons, rounds, proximal triples per read, reads
    with no triple, and how close tripleLink's nearest corpus triple was (exact field match)."""
    stops = Counter(r.get("stopped") for r in recs)
    rounds = [len(r.get("steps") or []) for r in recs]
    prox = [len(s.get("triples") or []) for r in recs for s in (r.get("steps") or [])]
    corpus = {tuple(str(x).lower() for x in t) for t in ki.graph.triples}
    mem = [tuple(str(x).lower() for x in t) for r in recs for t in (r.get("memory") or [])]
    verdicts = Counter((s.get("note") or "").split(" (")[0] for r in recs for s in (r.get("steps") or []))
    return {"stopped": dict(stops), "rounds_mean": float(np.mean(rounds)) if rounds else 0.0,
            "rounds": dict(Counter(rounds)), "proximal_per_read": float(np.mean(prox)) if prox else 0.0,
            "reads_without_triples": int(sum(1 for x in prox if x == 0)), "reads": len(prox),
            "memory_triples": len(mem), "memory_triples_in_corpus": int(sum(t in corpus for t in mem)),
            "verdicts": dict(verdicts)}


def pct(x):
    return "–" if x is None else f"{100 * x:.1f}"


def gear_agent_report(datasets, cache, label, *, encoder="minilm", data_root=None, reader_prompts=None,
                      n_ctx=None, header=None, notes=None):
    """gear_agent.md's tables for ``datasets`` from the records in ``cache``: (markdown lines,
    the report as JSON). Encodes each corpus with ``encoder`` (the retrieval-only rows run
    here, no LLM); ``n_ctx``: the LLM context the records were made with (the committed ones:
    8192); ``header`` (e.g. the machine) goes under the title, ``notes`` (a file of
    hand-written analysis) is appended when it exists."""
    from ..data.qa import load_dataset
    from ..encode import make_encoder
    from ..systems.gear.agent import MAX_ITERS
    from .report_md import reader_prompts_id
    from .systems import knowledge_index
    cache = pathlib.Path(cache)
    rp = reader_prompts_id(reader_prompts)
    enc = make_encoder(encoder)
    report = {"llm": label, "datasets": {}}
    md = ["# GEAR: its retrievers and its agent, against the paper's tables", ""]
    if header:
        md += [header, ""]
    for name in datasets:
        ds = load_dataset(name, data_root) if isinstance(name, str) else name
        name = ds.name
        ki = knowledge_index(ds, enc, cache)
        d = {"retrieval": retrieval_rows(ds, ki, enc)}
        allq = cached(ds, ["gear-sync", "gear"], "1-100", cache, label, reader_prompts=rp, n_ctx=n_ctx)
        for row in allq["rows"]:
            d["retrieval"][row["system"]] = {f"recall@{k}": row[f"recall@{k}"] for k in KS} | {"n": row["n"]}
        held = cached(ds, ["none", "dense", "bm25", "hybrid", "gear-naive", "gear-sync", "gear"], "51-100", cache, label,
                      reader_prompts=rp, n_ctx=n_ctx)
        d["qa"] = {r["system"]: {"n": r["n"], "em": r["em"], "f1": r["f1"], "answer_retrieved": r["answer_retrieved"],
                                 "answer_shown": r["answer_shown"], "stages": r["stages"]} for r in held["rows"]}
        d["paired"] = held["paired"]
        d["usage"] = {s: usage(recs) for s, recs in held["records"].items()}
        d["same_questions"] = same_questions(ds, d, {s: held["records"].get(s, []) for s in ("gear-sync", "gear")})
        d["vs_hybrid_all"] = same_questions(ds, d, {s: allq["records"].get(s, []) for s in ("gear-sync", "gear")})
        gear_all = allq["records"].get("gear", [])
        d["per_iteration"] = per_iteration(ds, gear_all, MAX_ITERS[name]) if gear_all else None
        d["agent"] = agent_evidence(gear_all, ki) if gear_all else None
        d["missing"] = {"1-100": allq["missing"], "51-100": held["missing"]}
        md += render(name, ds, ki, d)
        for r in d["retrieval"].values():
            r.pop("ranked", None)
        report["datasets"][name] = d
    # the hand-written reading of these numbers (per-question evidence) lives beside them and is
    # appended, so that regenerating the tables keeps it
    if notes is not None and pathlib.Path(notes).exists():
        md += ["", pathlib.Path(notes).read_text()]
    return md, report


def render(name, ds, ki, d):
    ex = ki.extraction.get("source")
    md = [f"## {name}: {len(ds.questions)} questions, {len(ds.passages):,} passages, "
          f"{ki.graph.num_triples:,} triples ({'the dataset’s GPT-3.5 OpenIE triples' if ex != 'model-free' else 'rasfast’s model-free sentence-pattern triples: HotpotQA ships none'})", ""]
    md += ["### Recall@k over all 100 questions (%), the paper's Table 2 beside it", "",
           "| retriever | R@5 | R@10 | R@15 | n | paper R@5 / R@10 / R@15 |", "|---|---:|---:|---:|---:|---|"]
    paper = PAPER_RECALL.get(name, {})
    for key in ("dense", "bm25", "hybrid", "dense+naive", "gear-naive", "gear-sync", "gear"):
        r = d["retrieval"].get(key)
        p = paper.get(PAPER_ROW[key])
        if r is None:
            md.append(f"| {ROW[key]} | not run | | | | {' / '.join(map(str, p)) if p else ''} |")
            continue
        md.append(f"| {ROW[key]} | {pct(r['recall@5'])} | {pct(r['recall@10'])} | {pct(r['recall@15'])} | {r['n']} "
                  f"| {' / '.join(map(str, p)) if p else '–'} |")
    for system, v in ((d.get("vs_hybrid_all") or {}).get("vs_hybrid_r15") or {}).items():
        ci = "; ".join(f"R@{k} {100 * v['paired'][k]['mean']:+.1f} [{100 * v['paired'][k]['lo']:+.1f}, "
                       f"{100 * v['paired'][k]['hi']:+.1f}]" for k in KS)
        md += ["", f"{ROW[system]} minus hybrid over the {d['vs_hybrid_all']['n']} questions, points with paired "
               f"95% bootstrap intervals: {ci}. Per question R@15 better on {v['better']}, worse on "
               f"{v['worse']}, the same on {v['same']}."]
    sq = d.get("same_questions")
    if sq:
        md += ["", f"### Recall@k on the held-out questions 51–100 (%; the {sq['n']} questions of the EM / F1 rows "
               "below), every retriever on the same questions", "",
               "| retriever | R@5 | R@10 | R@15 |", "|---|---:|---:|---:|"]
        for key in ("dense", "bm25", "hybrid", "dense+naive", "gear-naive", "gear-sync", "gear"):
            r = sq["rows"].get(key)
            if r:
                md.append(f"| {ROW[key]} | {pct(r['recall@5'])} | {pct(r['recall@10'])} | {pct(r['recall@15'])} |")
        for system, v in sq["vs_hybrid_r15"].items():
            md += ["", f"Per question on 51–100, {ROW[system]}'s R@15 against hybrid's: better on {v['better']}, "
                   f"worse on {v['worse']}, the same on {v['same']}."]
    md += ["", "### EM / F1 on the held-out questions 51–100, one reader (GEAR's App. J.3 one-shot prompt, top 5 "
           "passages), paired against dense", "",
           "| system | n | EM | F1 | F1 − dense [95% CI] | answer retrieved | answer shown | calls/q | prompt tok/q "
           "| gen tok/q | s/q | paper EM / F1 |", "|---|---:|---:|---:|---|---:|---:|---:|---:|---:|---:|---|"]
    pq = PAPER_QA.get(name, {})
    for key in ("none", "dense", "bm25", "hybrid", "gear-naive", "gear-sync", "gear"):
        q = d["qa"].get(key)
        if q is None:
            continue
        p = d["paired"].get(key)
        u = d["usage"].get(key, {})
        ci = "–" if key == "dense" or not p or not p["n"] else f"{p['mean']:+.3f} [{p['lo']:+.3f}, {p['hi']:+.3f}]"
        paper_key = {"none": "No passages", "gear-sync": "Hybrid + SyncGE", "gear": "GEAR"}.get(key)
        pv = pq.get(paper_key) if paper_key else None
        md.append(f"| {ROW[key]} | {q['n']} | {q['em']:.3f} | {q['f1']:.3f} | {ci} | {pct(q['answer_retrieved'])} "
                  f"| {pct(q['answer_shown'])} | {u.get('llm_calls', 0):.1f} | {u.get('prompt_tokens', 0):,.0f} "
                  f"| {u.get('completion_tokens', 0):,.0f} | {u.get('seconds', 0):.0f} | {' / '.join(map(str, pv)) if pv else '–'} |")
    if d["per_iteration"]:
        it = d["per_iteration"]
        md += ["", "### The agent per round (Figures 2 and 4): R@15 of the final ranking as of round i "
               "(carried forward after a question stopped) and the round's tokens per question", "",
               "| round | R@15 | questions still searching | prompt tok/q | gen tok/q |", "|---:|---:|---:|---:|---:|"]
        for i, r in enumerate(it["recall@15"]):
            md.append(f"| {i + 1} | {pct(r)} | {it['questions_in_round'][i]} | {it['prompt_tokens'][i]:,.0f} "
                      f"| {it['completion_tokens'][i]:,.0f} |")
    if d["agent"]:
        a = d["agent"]
        rounds = ", ".join(f"{k} rounds: {v}" for k, v in sorted(a["rounds"].items()))
        stops = ", ".join(f"{k} {v}" for k, v in a["stopped"].items())
        verdicts = ", ".join(f"{k or 'none'} {v}" for k, v in a["verdicts"].items())
        md += ["", f"Agent rounds: mean {a['rounds_mean']:.2f} ({rounds}); stopped: {stops}; verdicts: "
               f"{verdicts}. Reads: {a['reads']}, "
               f"{a['proximal_per_read']:.1f} proximal triples each, {a['reads_without_triples']} with none; "
               f"{a['memory_triples_in_corpus']} of {a['memory_triples']} gist triples are corpus triples verbatim."]
    md.append("")
    return md


__all__ = ["gear_agent_report", "render", "retrieval_rows", "same_questions", "per_iteration", "agent_evidence",
           "PAPER_RECALL", "PAPER_QA", "KS"]
