"""benchmarks/results/gear_agent.md: GEAR's retrievers and agent against its paper's tables.

A thin wrapper over ``rasfast eval qa --report --layout gear-agent``
(rasfast/qa_eval/gear_report.py), which runs no LLM: the retrieval-only rows are computed
there, the LLM rows and every EM/F1 come from the ``rasfast eval qa`` per-question records
(see that module for the runs that wrote them). This script adds the committed settings
(the round-3 reader prompts, an 8192-token context) and the machine header under the title:

    .venv/bin/python benchmarks/gear_agent_report.py --cache-dir C [--datasets musique hotpotqa]

is, but for the machine line,

    .venv/bin/rasfast eval qa --report --layout gear-agent --dataset musique,hotpotqa --llm local \\
        --llm-ctx 8192 --cache-dir C --md OUT.md --json OUT.json

(OUT_analysis.md, the hand-written reading of the numbers, is appended when it exists).
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


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cache-dir", required=True)
    ap.add_argument("--datasets", nargs="+", default=["musique", "hotpotqa"])
    ap.add_argument("--llm", default="local")
    ap.add_argument("--reader-prompts", default="current",
                    help="the reader the records were read with: current (the committed records), round3 (the "
                         "committed records read before the yes/no answer-shape rule), or an id")
    ap.add_argument("--out", default=str(RESULTS / "gear_agent"))
    args = ap.parse_args(argv)
    from rasfast.qa_eval import llm_label
    from rasfast.qa_eval.gear_report import gear_agent_report
    md, report = gear_agent_report(args.datasets, args.cache_dir, llm_label(args.llm), encoder="minilm",
                                   reader_prompts=args.reader_prompts, n_ctx=8192, header=header_markdown(),
                                   notes=pathlib.Path(args.out + "_analysis.md"))
    pathlib.Path(args.out + ".json").write_text(json.dumps({"machine": machine_info(), **report}, indent=1))
    pathlib.Path(args.out + ".md").write_text("\n".join(md) + "\n")
    print("\n".join(md))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
