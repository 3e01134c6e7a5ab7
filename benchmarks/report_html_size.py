"""How long the ``eval qa`` HTML report of a 100-question, 6-system run takes to build and
how large it is, through the real command line (``rasfast eval qa --report --html``, from
the cache, no model).

There is no real schema-2 cache of such a run on this machine, so this script writes one:
synthetic records for the 100 MuSiQue questions and none, dense, ras, gear, kirag and
structrag, shaped like the real ones (:mod:`rasfast.qa_eval.records`) and as large: real
corpus passages and their real OpenIE triples in the steps, the reader prompts built by the
reader contract itself over the passages shown, per-role prompts carrying passage texts as
the systems' do (StructRAG 12 calls a question, GEAR 4 rounds with 20 passages, 10 chains
and a gist memory each), per-stage timings. Answers are right at roughly the rates
measured in docs/llm.md. The cache files get the names ``report_qa`` looks up, so the CLI
reads them like any cache.

    python benchmarks/report_html_size.py [--out DIR] [--keep]
"""
from __future__ import annotations

import argparse
import json
import os
import pathlib
import random
import resource
import shutil
import subprocess
import sys
import tempfile
import time

HERE = pathlib.Path(__file__).resolve().parent
SYSTEMS = ("none", "dense", "ras", "gear", "kirag", "structrag")
CORRECT_RATE = {"none": 0.05, "dense": 0.25, "ras": 0.2, "gear": 0.22, "kirag": 0.2, "structrag": 0.06}


def _ranking(rng, q, n_pass, n=20):
    """A plausible ranked list: gold passages somewhere near the top, the rest random."""
    pool = [p for p in q.gold_pids if rng.random() < 0.7]
    pool += rng.sample(range(n_pass), n * 2)
    rng.shuffle(pool)
    out = list(dict.fromkeys(pool))[:n]
    return [[pid, round(0.8 - 0.02 * i - rng.random() * 0.01, 5)] for i, pid in enumerate(out)]


def _triples(ds, pids, n):
    out = []
    for p in pids:
        for t in ds.triples[p]:
            if isinstance(t, list) and len(t) == 3 and all(isinstance(x, str) for x in t):
                out.append(list(t))
    return out[:n]


def _prompt(head, ds, pids, question, chars=600):
    docs = "\n\n".join(f"Document {i + 1}: {ds.passages[p].title}\n{ds.passages[p].text[:chars]}"
                       for i, p in enumerate(pids))
    return f"{head}\n\n{docs}\n\nQuestion: {question}"


def make_record(system, q, ds, rng):
    from rasfast.llm.reader import ReaderInput, messages
    from rasfast.qa_eval.records import answer_in_text, shown_record
    from rasfast.systems.ras.metrics import answer_scores
    from rasfast.types import RetrievedPassage
    n_pass = len(ds.passages)
    steps, calls, trail, timings = [], [], {}, {}
    blocks, shown_pids, knowledge = [], [], ""

    def rp(p):
        return RetrievedPassage(p, ds.passages[p].title, ds.passages[p].text, 0.0)
    if system == "dense":
        r = _ranking(rng, q, n_pass)
        steps = [{"query": q.question, "passages": r}]
        shown_pids = [p for p, _ in r[:5]]
        timings = {"retrieve": 8.0 + rng.random() * 4}
    elif system == "ras":
        for i in range(rng.choice((1, 2, 3))):
            r = _ranking(rng, q, n_pass)
            ts = _triples(ds, [p for p, _ in r[:5]], 25)
            sq = q.question if i == 0 else f"What is the {rng.choice(('capital', 'founder', 'country'))} of {ts[0][2] if ts else 'it'}?"
            steps.append({"query": sq, "passages": r, "triples": ts,
                          "note": f"plan: {'subquery' if i else 'retrieve'} (Sub-query: {sq})"})
            blocks.append((sq, [tuple(t) for t in ts]))
            calls.append({"role": "ras.planner", "prompt": _prompt("Plan the next search.", ds, [], q.question)
                          + "\n\nFacts so far:\n" + "\n".join(" | ".join(t) for t in ts[:15]), "reply": f"Sub-query: {sq}"})
        trail = {"subqueries": [s["query"] for s in steps], "stopped": rng.choice(("sufficient", "max_iters"))}
        timings = {"plan (model)": 900.0, "retrieve": 20.0, "extract triples": 3.0, "question graph": 1.5}
    elif system == "gear":
        memory = []
        for i in range(4):
            r = _ranking(rng, q, n_pass)
            ts = _triples(ds, [p for p, _ in r[:5]], 12)
            chains = [[t] + _triples(ds, [rng.randrange(n_pass)], 2) for t in ts[:10]]
            memory += ts[:3]
            steps.append({"query": q.question if i == 0 else f"{q.question} (round {i + 1})", "passages": r,
                          "base": [p for p, _ in r[:20]], "triples": ts, "chains": chains,
                          "note": f"answerable: {'yes' if i == 3 else 'no'} (need more on {ts[0][0] if ts else '?'})",
                          "tokens": {"prompt": 1800, "completion": 90}})
            calls.append({"role": "gear.reader", "prompt": _prompt("Read the passages; extract proximal triples.",
                                                                   ds, [p for p, _ in r[:5]], q.question),
                          "reply": "\n".join(str(tuple(t)) for t in ts[:6])})
            calls.append({"role": "gear.gist", "prompt": "Gist memory:\n" + "\n".join(" | ".join(t) for t in memory)
                          + f"\n\nQuestion: {q.question}\nIs the question answerable?", "reply": "No. Need more."})
        trail = {"stopped": "answerable", "agent_answer": q.answer, "memory": memory,
                 "iterations": [{"round": i, "passages": [p for p, _ in s["passages"][:15]], "prompt": 1800,
                                 "completion": 90} for i, s in enumerate(steps)]}
        shown_pids = [p for p, _ in steps[-1]["passages"][:5]]
        timings = {"retrieve": 30.0, "read (agent)": 2400.0, "expand": 12.0, "link": 4.0}
    elif system == "kirag":
        chain = []
        for i in range(rng.choice((2, 3, 4))):
            r = _ranking(rng, q, n_pass, 10)
            cands = _triples(ds, [p for p, _ in r], 20)
            if cands:
                chain.append(cands[0])
            steps.append({"query": q.question + (" " + " ".join(" ".join(t) for t in chain) if chain else ""),
                          "passages": [[p, None] for p, _ in r], "triples": cands,
                          "chains": [[chain[-1]]] if chain else [], "note": "constructor: continue"})
            calls.append({"role": "kirag.constructor", "prompt": f"Question: {q.question}\nChain so far:\n"
                          + "\n".join(" | ".join(t) for t in chain) + "\nCandidates:\n"
                          + "\n".join(f"{j}. " + " | ".join(t) for j, t in enumerate(cands)), "reply": "1"})
        trail = {"stopped": "stop", "chain": chain, "constructor_answer": None}
        shown_pids = [p for p, _ in steps[-1]["passages"][:5]]
        timings = {"retrieve": 40.0, "align": 60.0, "construct (model)": 1800.0}
    elif system == "structrag":
        r = _ranking(rng, q, n_pass)
        steps = [{"query": q.question, "passages": r, "note": "routed to table", "subquestions": [q.question]}]
        top = [p for p, _ in r[:5]]
        calls.append({"role": "structrag.router", "prompt": _prompt("Choose a structure type.", ds, top, q.question, 200),
                      "reply": "table"})
        calls.append({"role": "structrag.decompose", "prompt": f"Decompose: {q.question}", "reply": q.question})
        for p in top:
            calls.append({"role": "structrag.structurizer", "prompt": _prompt("Build a table from:", ds, [p], q.question, 2000),
                          "reply": "| entity | relation | value |\n|---|---|---|\n" + "\n".join(
                              f"| {t[0]} | {t[1]} | {t[2]} |" for t in _triples(ds, [p], 8))})
        for _ in range(4):
            calls.append({"role": "structrag.utilizer.extract", "prompt": "Tables:\n" + calls[2]["reply"] * 3,
                          "reply": "| a | b |"})
        knowledge = "\n".join(c["reply"] for c in calls[2:7])
        trail = {"structure": "table", "route_fallback": False}
        timings = {"route (model)": 600.0, "structurize (model)": 9000.0, "utilize (model)": 4000.0}
    correct = rng.random() < CORRECT_RATE[system]
    answer = q.answer if correct else rng.choice([t[2] for t in _triples(ds, [rng.randrange(n_pass)], 5)] or ["unknown"])
    inp = ReaderInput(q.question, [rp(p) for p in shown_pids] if system != "ras" else [], blocks, knowledge)
    msgs = messages(inp)
    calls.append({"role": "reader" if system != "none" else "reader.closed_book",
                  "prompt": "\n\n".join(m["content"] for m in msgs), "reply": answer})
    timings["read (model)"] = 700.0 + rng.random() * 500
    retrieved = list(dict.fromkeys(p for s in steps for p, _ in s["passages"]))
    m = answer_scores(answer, q.answers)
    text = "\n".join(ds.passages[p].content for p in retrieved)
    ranked = [p for p, _ in (steps[-1]["passages"] if steps else [])]
    rec = {"qid": q.qid, "schema": 2, "question": q.question, "answer": answer, "gold": q.answers,
           "reply": answer, "em": m["em"], "f1": m["f1"], "acc": m["acc"], "recall@5": None,
           "passages": ranked[:50], "error": None, "prompt_style": "compact" if system == "ras" else None,
           "reader": "contract", "retriever": None if system == "none" else "dense", **trail, "steps": steps,
           "answer_retrieved": answer_in_text(q.answers, text) if system != "none" else False,
           **shown_record(inp, q.answers), "llm_calls": len(calls),
           "prompt_tokens": sum(len(c["prompt"]) // 4 for c in calls),
           "completion_tokens": sum(len(c["reply"]) // 4 for c in calls), "cached_prompt_tokens": 0,
           "seconds": sum(timings.values()) / 1000, "calls": calls,
           "roles": {c["role"]: [1, 0, 0] for c in calls}, "timings": timings}
    return json.loads(json.dumps(rec))


def write_cache(cache: pathlib.Path, ds, llm_label: str, seed: int = 0) -> None:
    """Synthetic records under the names report_qa reads for the CLI's default settings."""
    from rasfast.qa_eval.run import cache_file, settings_for
    from rasfast.qa_eval.systems import knowledge_id
    from rasfast.systems.gear.agent import MAX_ITERS
    rng = random.Random(seed)
    cache.mkdir(parents=True, exist_ok=True)
    for name in SYSTEMS:
        st = settings_for(name, k=5, max_iters=5, reader="contract", prompt_style="compact", retriever="dense",
                          gear_iters=MAX_ITERS.get(ds.name, 4), kirag_aligner=None, router=None,
                          knowledge=knowledge_id(ds))
        with open(cache / cache_file(ds.name, name, llm_label, st), "w") as f:
            for q in ds.questions[:100]:
                f.write(json.dumps(make_record(name, q, ds, rng)) + "\n")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default=None, help="directory for the cache and report.html (default: a temp dir)")
    ap.add_argument("--keep", action="store_true", help="keep the temp dir")
    a = ap.parse_args(argv)
    from rasfast.data.qa import load_dataset
    from rasfast.qa_eval.run import llm_label
    out = pathlib.Path(a.out or tempfile.mkdtemp(prefix="rasfast-report-"))
    ds = load_dataset("musique")
    label = llm_label("local")
    t0 = time.perf_counter()
    write_cache(out / "cache", ds, label)
    print(f"synthetic cache: {len(SYSTEMS)} systems x 100 questions in {time.perf_counter() - t0:.1f} s, "
          f"{sum(f.stat().st_size for f in (out / 'cache').glob('*.jsonl')) / 1e6:.1f} MB of JSONL")
    html = out / "report.html"
    cmd = [str(pathlib.Path(sys.executable).parent / "rasfast"), "eval", "qa", "--report", "--dataset", "musique",
           "--systems", ",".join(SYSTEMS), "--llm", "local", "--cache-dir", str(out / "cache"), "--limit", "100",
           "--html", str(html)]
    t0, ru0 = time.perf_counter(), resource.getrusage(resource.RUSAGE_CHILDREN)
    p = subprocess.run(cmd, capture_output=True, text=True)
    wall, ru1 = time.perf_counter() - t0, resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (ru1.ru_utime - ru0.ru_utime) + (ru1.ru_stime - ru0.ru_stime)
    if p.returncode != 0:
        print(p.stdout[-2000:], p.stderr[-3000:], file=sys.stderr)
        return 1
    print(p.stdout.splitlines()[0])
    load = os.getloadavg()
    print(f"`rasfast eval qa --report --html`: {wall:.1f} s wall, {cpu:.1f} s CPU (process start, imports, corpus, "
          f"cache, bootstrap, HTML), load average {load[0]:.2f} on {os.cpu_count()} cores; "
          f"report.html {html.stat().st_size / 1e6:.2f} MB")
    from rasfast.qa_eval.report_html import report_document
    from rasfast.qa_eval.run import report_qa
    t0, c0 = time.perf_counter(), time.process_time()
    res = report_qa("musique", SYSTEMS, label, limit=100, cache_dir=out / "cache")
    t1, c1 = time.perf_counter(), time.process_time()
    doc = report_document(res, res["records"], dataset=ds)
    t2, c2 = time.perf_counter(), time.process_time()
    print(f"in process: report_qa {t1 - t0:.1f} s wall / {c1 - c0:.1f} s CPU, rendering the HTML "
          f"{t2 - t1:.1f} s wall / {c2 - c1:.1f} s CPU ({len(doc.encode()) / 1e6:.2f} MB)")
    print(f"files in {out}")
    if not a.out and not a.keep:
        shutil.rmtree(out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
