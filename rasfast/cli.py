"""The ``rasfast`` command line.

Subcommands: ``demo`` (what ``make demo`` runs), ``bench``. The RAS loop adds ``index``,
``ask``, ``profile`` and ``eval``.
"""
from __future__ import annotations

import argparse
import sys
from typing import List, Optional


def _cmd_demo(args) -> int:
    from . import backends
    from .bench import format_table, select_table

    info = backends()
    avail = [n for n, v in info.items() if v["available"]]
    print(f"rasfast backends available: {', '.join(avail)}")
    print("select_k timings (best of 3), B=16, N=1,000,000, float32:")
    print(format_table(select_table(B=args.batch, N=args.n)))
    return 0


def _cmd_bench(args) -> int:
    from .bench import format_table, select_table

    if args.what == "select":
        print(format_table(select_table(B=args.batch, N=args.n)))
    return 0


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="rasfast", description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="command", required=True)
    d = sub.add_parser("demo", help="run the demo")
    d.add_argument("--batch", type=int, default=16)
    d.add_argument("--n", type=int, default=1_000_000)
    d.set_defaults(func=_cmd_demo)
    b = sub.add_parser("bench", help="quick timing tables")
    b.add_argument("what", choices=["select"])
    b.add_argument("--batch", type=int, default=16)
    b.add_argument("--n", type=int, default=1_000_000)
    b.set_defaults(func=_cmd_bench)
    return p


def main(argv: Optional[List[str]] = None) -> int:
    args = build_parser().parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
