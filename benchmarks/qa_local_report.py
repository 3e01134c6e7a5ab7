"""benchmarks/results/qa_local.md: every system through one reader, on held-out questions.

A thin wrapper over ``rasfast eval qa --report --layout qa-local`` (rasfast/qa_eval/report_md.py),
which runs no model: it reads the per-question records (the cache the runs wrote, or the
compressed copies kept in benchmarks/results/qa_records) and prints the tables. This script
adds the committed defaults and the machine header; the same tables come from

    .venv/bin/rasfast eval qa --report --layout qa-local --dataset musique,hotpotqa \\
        --kirag-aligner musique=29cf4f04b089b742 --llm local --llm-ctx 8192 \\
        --cache-dir benchmarks/results/qa_records --before benchmarks/results/qa_local_records \\
        [--update benchmarks/results/qa_local.md] [--json benchmarks/results/qa_local.json]

    .venv/bin/python benchmarks/qa_local_report.py --cache-dir benchmarks/results/qa_records \\
        [--datasets musique hotpotqa] [--questions 51-100] [--aligner [DATASET=]DIR_OR_ID ...] [--update MD]
"""
from __future__ import annotations

import argparse
import json
import os
import pathlib
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from machine import header_markdown, machine_info  # noqa: E402

RESULTS = pathlib.Path(__file__).resolve().parent / "results"


def command(args) -> list:
    """The ``rasfast eval qa --report --layout qa-local`` command line of these options."""
    argv = ["eval", "qa", "--report", "--layout", "qa-local", "--dataset", ",".join(args.datasets),
            "--questions", args.questions, "--llm", args.llm, "--llm-ctx", "8192", "--cache-dir", args.cache_dir,
            "--before", str(RESULTS / "qa_local_records"), "--reader-prompts", args.reader_prompts,
            "--json", args.out + ".json"]
    if args.aligner:
        argv += ["--kirag-aligner", ",".join(args.aligner)]
    if args.update:
        argv += ["--update", args.update]
    return argv


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cache-dir", default=str(RESULTS / "qa_records"))
    ap.add_argument("--datasets", nargs="+", default=["musique", "hotpotqa"])
    ap.add_argument("--questions", default="51-100")
    ap.add_argument("--aligner", nargs="*", default=[],
                    help="the KiRAG aligner trained on questions 1-50 (a directory or content id); "
                         "DATASET=... names the dataset it was trained on, a bare value applies to every dataset")
    ap.add_argument("--llm", default="local")
    ap.add_argument("--reader-prompts", default="current",
                    help="the reader the records were read with: current (the committed records), round3 (the "
                         "committed records read before the yes/no answer-shape rule of issue 40 C), or a reader "
                         "prompt signature")
    ap.add_argument("--out", default=str(RESULTS / "qa_local"))
    ap.add_argument("--update", metavar="MD",
                    help="rewrite the generated tables inside MD (between its <!-- qa_local_report: NAME --> "
                         "markers), keeping the prose around them")
    args = ap.parse_args(argv)
    from rasfast.cli import main as rasfast
    print(header_markdown() + "\n")
    rc = rasfast(command(args))
    out = pathlib.Path(args.out + ".json")
    if rc == 0 and out.exists():   # the machine beside the tables, as before
        out.write_text(json.dumps({"machine": machine_info(), **json.loads(out.read_text())}, indent=1, default=str))
    return rc


if __name__ == "__main__":
    raise SystemExit(main())
