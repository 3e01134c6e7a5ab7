"""StructRAG structurizer throughput: concurrent vs sequential LLM requests.

The published StructRAG code sends one structurizer request per document, one after the
other. rasfast sends every (question, document) request of a batch in one concurrent call.
This script runs rasfast's LLMStructurizer against the local scripted OpenAI-compatible
server (tests/fake_openai_server.py, a real HTTP server process) where every request
waits a fixed ``--delay`` before replying -- a stand-in for a model server's per-request
latency -- with the same client once at ``concurrency=1`` (sequential, as the paper's code)
and once at ``--concurrency`` (rasfast's default batched path), for all five structure types.

Writes benchmarks/results/structrag_throughput.md (+ .json). Usage:
    .venv/bin/python benchmarks/structrag_throughput.py [--docs 48] [--delay 0.05] [--concurrency 16]
"""
from __future__ import annotations

import argparse
import json
import os
import pathlib
import sys
import time

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "tests"))
from fake_openai_server import FakeServer  # noqa: E402
from machine import header_markdown, machine_info  # noqa: E402

from rasfast.llm.openai_chat import OpenAIChat  # noqa: E402
from rasfast.types import RetrievedPassage  # noqa: E402
from rasfast.systems.structrag import STRUCTURE_TYPES, LLMStructurizer, StructTask  # noqa: E402

REPLY = ("Description: the people and places of the document\n"
         "| name | born in | year |\n| --- | --- | --- |\n| Mira Okonkwo | Castrell | 1931 |\n")


def tasks(n_docs: int, per_question: int):
    docs = [RetrievedPassage(i, f"Doc {i}", f"Mira Okonkwo (born {1900 + i}) is a painter from Castrell.")
            for i in range(n_docs)]
    out = []
    for q, s in enumerate(range(0, n_docs, per_question)):
        kind = STRUCTURE_TYPES[q % len(STRUCTURE_TYPES)]
        out.append(StructTask(f"Question {q} about the documents?", kind, docs[s:s + per_question]))
    return out


def run(server, concurrency, ts, reps):
    llm = OpenAIChat("bench", base_url=server.url, api_key="k", timeout=30.0, concurrency=concurrency,
                     max_retries=0)
    st = LLMStructurizer(llm)
    best, n_struct = float("inf"), 0
    for _ in range(reps):
        t = time.perf_counter()
        out = st.structurize(ts)
        best = min(best, time.perf_counter() - t)
        n_struct = sum(len(o.structures) for o in out)
        assert not any(o.doc_errors for o in out)
    return best, n_struct, llm.stats["requests"] // reps


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--docs", type=int, default=48)
    ap.add_argument("--per-question", type=int, default=6)
    ap.add_argument("--delay", type=float, default=0.05, help="server seconds per request")
    ap.add_argument("--concurrency", type=int, default=16)
    ap.add_argument("--reps", type=int, default=2)
    args = ap.parse_args()

    load0 = os.getloadavg()
    server = FakeServer()
    try:
        server.script([{"contains": "", "reply": REPLY, "fault": {"kind": "slow", "delay": args.delay}}])
        ts = tasks(args.docs, args.per_question)
        run(server, args.concurrency, ts[:1], 1)   # warm-up (server threads, connections)
        seq_s, n_seq, req_seq = run(server, 1, ts, args.reps)
        conc_s, n_conc, req_conc = run(server, args.concurrency, ts, args.reps)
    finally:
        server.close()
    load1 = os.getloadavg()
    assert n_seq == n_conc == args.docs
    floor = args.docs * args.delay
    res = {"machine": machine_info(), "loadavg_start": load0, "loadavg_end": load1,
           "docs": args.docs, "questions": len(ts), "delay_s": args.delay, "concurrency": args.concurrency,
           "reps": args.reps, "requests_per_run": req_conc,
           "sequential_s": seq_s, "concurrent_s": conc_s,
           "sequential_docs_per_s": args.docs / seq_s, "concurrent_docs_per_s": args.docs / conc_s,
           "speedup": seq_s / conc_s, "ideal_speedup": min(args.concurrency, args.docs),
           "sequential_delay_floor_s": floor}
    out = HERE / "results"
    out.mkdir(exist_ok=True)
    (out / "structrag_throughput.json").write_text(json.dumps(res, indent=1))
    high = max(load0[0], load1[0]) > (os.cpu_count() or 1)
    md = ["# StructRAG structurizer throughput: concurrent vs sequential requests\n",
          header_markdown(),
          f"Load average at start {load0[0]:.2f}, at end {load1[0]:.2f} on {os.cpu_count()} cores"
          + (" -- HIGH: the machine was shared with other builds/benchmarks, absolute times are noisy."
             if high else "."),
          "",
          f"{args.docs} documents in {len(ts)} questions (all five structure types), one LLMStructurizer "
          f"request per document, against the local scripted OpenAI-compatible server "
          f"(tests/fake_openai_server.py) with a fixed {args.delay * 1e3:.0f} ms per request. Same client "
          f"(rasfast.llm.OpenAIChat), same prompts and parsing; best of {args.reps}.",
          "",
          "| requests | wall s | documents / s | speed-up |",
          "|---|---:|---:|---:|",
          f"| sequential (concurrency 1, as the published code) | {seq_s:.3f} | {args.docs / seq_s:.1f} | 1.0x |",
          f"| rasfast batched (concurrency {args.concurrency}) | {conc_s:.3f} | {args.docs / conc_s:.1f} | "
          f"{seq_s / conc_s:.1f}x |",
          "",
          f"The sequential run cannot beat {floor:.2f} s ({args.docs} x {args.delay * 1e3:.0f} ms); the ideal "
          f"speed-up at concurrency {args.concurrency} is {min(args.concurrency, args.docs)}x. The gap is "
          "client/server overhead (JSON, HTTP, thread start-up) on a 2-core machine that runs the server too.",
          "", "Reproduce: `.venv/bin/python benchmarks/structrag_throughput.py`", ""]
    (out / "structrag_throughput.md").write_text("\n".join(md))
    print("\n".join(md))


if __name__ == "__main__":
    main()
