"""Open + first query of a big knowledge index (issue 23, part 3: "a 5M-row index opens and
answers its first query in under 2 s").

Builds a KnowledgeIndex of --n synthetic triples (4 per passage, rasfast.graph.
synthetic_triples with --entities entities, Zipf --zipf; HashingEncoder(64), 16 themes),
saves it, then runs --repeats fresh Python processes that each import rasfast, open the
index with ``KnowledgeIndex.load(dir, mmap=True)`` and answer one first query (4 queries at
once: theme-scoped search, graph expansion, triple beam search, the best triples' texts;
benchmarks/graph_add.py first_query), timing open and first query inside the process (the
files are in the page cache: the first process after the save finds them there too). The
same for a small index (--small triples) to show that open time does not grow.

    .venv/bin/python benchmarks/knowledge_open.py [--n 5000000] [--repeats 3]
"""
from __future__ import annotations

import argparse
import json
import os
import pathlib
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from machine import header_markdown  # noqa: E402

CHILD = r"""
import json, os, sys, time
sys.path.insert(0, {here!r})
import numpy as np
from rasfast.encode import HashingEncoder
from rasfast.index.knowledge import KnowledgeIndex
from rasfast.index.knowledge import index as kx
from graph_add import first_query
qs = json.loads(sys.argv[2])
q = np.ascontiguousarray(HashingEncoder(64).encode(qs), dtype=np.float32)
t0 = time.perf_counter(); c0 = time.process_time()
ki = KnowledgeIndex.load(sys.argv[1], mmap=True)
t1 = time.perf_counter(); c1 = time.process_time()
parsed = kx.PARSED_RECORDS
ids, texts = first_query(ki, q)
t2 = time.perf_counter(); c2 = time.process_time()
print(json.dumps({{"open": t1 - t0, "query": t2 - t1, "cpu_open": c1 - c0, "cpu_query": c2 - c1,
                  "parsed_at_open": parsed, "parsed_after_query": kx.PARSED_RECORDS,
                  "peak_rss_mb": int(next(l.split()[1] for l in open("/proc/self/status")
                                          if l.startswith("VmHWM"))) / 1024,
                  "answer": texts[:3], "load": os.getloadavg()}}))
"""


def build(n, n_ent, zipf, d):
    from rasfast.data.qa import Passage
    from rasfast.encode import HashingEncoder
    from rasfast.graph import synthetic_triples
    from rasfast.index.knowledge import KnowledgeIndex
    from rasfast.index.knowledge.extract import corpus_record
    t = synthetic_triples(n, n_ent, zipf=zipf, offset=1000, seed=0)
    per = 4
    rows = [list(map(list, t[i:i + per])) for i in range(0, n, per)]
    del t
    passages = [Passage(i, f"P{i}", " ; ".join(" ".join(x) for x in ts)) for i, ts in enumerate(rows)]
    queries = [passages[i].text for i in (3, len(rows) // 3, len(rows) // 2, len(rows) - 5)]
    t0 = time.perf_counter()
    ki = KnowledgeIndex.build(passages, rows, HashingEncoder(64), corpus_record("synthetic"), num_themes=16)
    ki.save(d)
    stats = {"passages": len(rows), "triples": ki.graph.num_triples, "entities": ki.graph.num_entities,
             "edges": ki.graph.num_edges, "build_save_s": time.perf_counter() - t0,
             "bytes": sum(p.stat().st_size for p in pathlib.Path(d).rglob("*") if p.is_file())}
    return stats, queries


def measure(d, queries, repeats):
    out = []
    for _ in range(repeats):
        r = subprocess.run([sys.executable, "-c", CHILD.format(here=str(HERE)), str(d), json.dumps(queries)],
                           capture_output=True, text=True, env=dict(os.environ, OMP_NUM_THREADS="2"))
        if r.returncode:
            raise SystemExit(r.stderr[-3000:])
        out.append(json.loads(r.stdout.strip().splitlines()[-1]))
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--n", type=int, default=5_000_000)
    ap.add_argument("--entities", type=int, default=0, help="default: 2 x n")
    ap.add_argument("--zipf", type=float, default=0.7)
    ap.add_argument("--small", type=int, default=10_000)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--out", default=str(HERE / "results" / "knowledge_open.md"))
    args = ap.parse_args()
    work = pathlib.Path(tempfile.mkdtemp(prefix="knowledge_open_"))
    os.environ["RASFAST_CACHE"] = str(work / "cache")
    res = {}
    try:
        for label, n in (("big", args.n), ("small", args.small)):
            print(f"[{label}] building {n:,} triples", flush=True)
            stats, queries = build(n, args.entities or 2 * n, args.zipf, work / label)
            print(f"  {stats}", flush=True)
            runs = measure(work / label, queries, args.repeats)
            for r in runs:
                print(f"  open {r['open']:.3f}s, first query {r['query']:.3f}s, load {r['load']}", flush=True)
            res[label] = {"stats": stats, "runs": runs}
            shutil.rmtree(work / label)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    L = ["# Open + first query of a big knowledge index\n", header_markdown(),
         "Shared machine (another job ran alongside); load averages are those each process read "
         "after its query.", "",
         f"Command: `.venv/bin/python benchmarks/knowledge_open.py --n {args.n} --small {args.small} "
         f"--repeats {args.repeats} --zipf {args.zipf} --entities {args.entities}`", "",
         "Each row: a fresh process (rasfast imported first, not timed) opens the saved index with "
         "`KnowledgeIndex.load(dir, mmap=True)` and answers one first query (4 queries at once: "
         "theme-scoped search, graph expansion, triple beam search, the best triples' texts); "
         "files in the page cache. Records decoded = triples records parsed (at open: none).", "",
         "| index | passages | triples | entities | graph entries | on disk | open (s) | first query (s) "
         "| open + first query (s) | CPU s open / query | records decoded at open / after the query "
         "| peak RSS (VmHWM) | load avg |", "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for label in ("big", "small"):
        s = res[label]["stats"]
        for r in res[label]["runs"]:
            L.append(f"| {label} | {s['passages']:,} | {s['triples']:,} | {s['entities']:,} | {s['edges']:,} | "
                     f"{s['bytes'] / 2**30:.2f} GiB | {r['open']:.3f} | {r['query']:.3f} | "
                     f"{r['open'] + r['query']:.3f} | {r['cpu_open']:.3f} / {r['cpu_query']:.3f} | "
                     f"{r['parsed_at_open']} / {r['parsed_after_query']} | "
                     f"{r['peak_rss_mb']:.0f} MB | "
                     f"{' '.join(f'{x:.2f}' for x in r['load'])} |")
    big = res["big"]["runs"]
    L += ["", f"Median open + first query, {res['big']['stats']['triples']:,} triples: "
          f"{statistics.median(r['open'] + r['query'] for r in big):.3f} s; "
          f"{res['small']['stats']['triples']:,} triples: "
          f"{statistics.median(r['open'] + r['query'] for r in res['small']['runs']):.3f} s. "
          f"Build + save of the big index: {res['big']['stats']['build_save_s']:.0f} s (not the subject)."]
    out = pathlib.Path(args.out)
    out.write_text("\n".join(L) + "\n")
    out.with_suffix(".json").write_text(json.dumps(res, indent=1))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
