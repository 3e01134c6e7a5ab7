"""Recall@5/10/15 on MuSiQue (100 questions, 1,890 passages, GPT-3.5 OpenIE triples):
dense retrieval (all-MiniLM-L6-v2) alone vs dense + NaiveGE (GEAR's beam settings).

    .venv/bin/python benchmarks/eval_gear_musique.py [--data ../shared/data] [--base-sizes 5 10 15 20]

A thin wrapper over ``rasfast eval gear``, run in this process:

    .venv/bin/rasfast eval gear --base-sizes 2 5 10 15 20 --fusion-depths 0 50 [--max-degree N] \
        [--backend auto] [--data-root DIR] --json benchmarks/results/gear_musique.json

this script adds the machine header and the write-up around the command's table.

Writes benchmarks/results/gear_musique.md (+ .json). The first run encodes ~19k texts on the
CPU (minutes); embeddings are cached in ~/.cache/rasfast afterwards.
"""
from __future__ import annotations

import argparse
import json
import pathlib
import sys
import time

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from machine import header_markdown, machine_info  # noqa: E402


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--data", default=None, help="shared data root (default: $RASFAST_DATA or ../shared/data)")
    ap.add_argument("--base-sizes", type=int, nargs="+", default=[2, 5, 10, 15, 20])
    ap.add_argument("--fusion-depths", type=int, nargs="+", default=[0, 50],
                    help="dense list length fused with the expansion; 0 = the base size m")
    ap.add_argument("--max-degree", type=int, default=None)
    ap.add_argument("--backend", default="auto")
    ap.add_argument("--out", default=str(pathlib.Path(__file__).parent / "results" / "gear_musique.md"))
    return ap.parse_args(argv)


def command(args) -> list:
    """The ``rasfast eval gear`` command line of these options (its JSON beside ``--out``)."""
    argv = ["eval", "gear", "--base-sizes", *map(str, args.base_sizes),
            "--fusion-depths", *map(str, args.fusion_depths), "--backend", args.backend,
            "--json", str(pathlib.Path(args.out).with_suffix(".json"))]
    if args.max_degree is not None:
        argv += ["--max-degree", str(args.max_degree)]
    if args.data:
        argv += ["--data-root", args.data]
    return argv


def main(argv=None) -> int:
    args = parse_args(argv)
    from rasfast.cli import main as rasfast

    out = pathlib.Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    rc = rasfast(command(args))
    if rc:
        return rc
    res = json.loads(out.with_suffix(".json").read_text())
    elapsed = time.perf_counter() - t0
    s, g = res["settings"], res["graph"]
    lines = [
        "# GEAR NaiveGE on MuSiQue: Recall@k\n", header_markdown(), "",
        f"{res['n_questions']} questions (HippoRAG's MuSiQue subset), 1,890 passages, encoder "
        f"{res['encoder']} (passages as \"title\\ntext\", triples as \"subject predicate object\").",
        f"Triple graph: {g['triples']:,} well-formed triples ({g['skipped']} malformed skipped), "
        f"{g['entities']:,} entities, {g['edges']:,} adjacency entries, max_degree "
        f"{s['max_degree']}.",
        f"Beam search: width {s['beam_width']}, length {s['max_len']}, gamma {s['gamma']}, "
        f"{s['max_neighbors']} neighbours, scoring \"{s['scoring']}\"; RRF k = {s['rrf_k']}.",
        "NaiveGE with base size m: the dense top-m passages seed the search (all their triples); "
        "the expansion's passages (breadth-first beam order) are fused by RRF with the dense "
        "top-d list (d = fusion depth: m itself, or a longer dense list); a fused list shorter "
        "than k is filled with the next dense passages.",
        "Recall@k = mean over questions of |gold passages in top k| / |gold passages|.", "",
        "| method | base size m | fusion depth d | passages from expansion (mean) | R@5 | R@10 | R@15 |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in res["rows"]:
        m = r["base_size"] if r["base_size"] is not None else "-"
        e = f"{r['mean_expansion_passages']:.1f}" if "mean_expansion_passages" in r else "-"
        d = r.get("fusion_depth", "-")
        lines.append(f"| {r['method']} | {m} | {d} | {e} | {100 * r['recall@5']:.1f} | "
                     f"{100 * r['recall@10']:.1f} | {100 * r['recall@15']:.1f} |")
    lines += ["", f"Total run time {elapsed:.1f} s (including encoding unless cached)."]
    out.write_text("\n".join(lines) + "\n")
    out.with_suffix(".json").write_text(json.dumps({"machine": machine_info(), **res}, indent=2))
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
