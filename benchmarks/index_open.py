"""Time to open a saved index and answer its first query: passages decoded lazily (format 3,
an ends file beside passages.jsonl) vs parsed at load (what version 2 did), same directory,
same run, each in a fresh process (issue 23, "big indexes").

    python benchmarks/index_open.py --rows 1000000 --dir /tmp/rasfast_open [--report]

The index is random (D=64, T=16, bfloat16) with ~450-byte passages, so the passages file
dominates loading as it does for real corpora. Results: benchmarks/results/index_open.md.
"""
from __future__ import annotations

import argparse
import json
import os
import pathlib
import shutil
import subprocess
import sys
import time

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

CHILD = """
import json, sys, time
t0 = time.perf_counter()
import numpy as np
from rasfast.index import ThemeIndex
t1 = time.perf_counter()
ix = ThemeIndex.load(sys.argv[1], mmap=True)
t2 = time.perf_counter()
rng = np.random.default_rng(0)
qe = rng.standard_normal((1, ix.dim), dtype=np.float32)
qp = rng.random((1, ix.num_themes), dtype=np.float32)
ids, sc = ix.search(qp, qe, K=max(1, len(ix) // 10), k=10)
res = ix.passages(ids, sc)
t3 = time.perf_counter()
print(json.dumps({"import_s": t1 - t0, "open_s": t2 - t1, "first_query_s": t3 - t2,
                  "hits": len(res[0]), "lazy": type(ix.texts).__name__}))
"""


def build(d: pathlib.Path, rows: int) -> None:
    import numpy as np
    import torch
    from rasfast.index import ThemeIndex
    rng = np.random.default_rng(1)
    words = ["river", "county", "born", "album", "founded", "village", "province", "band",
             "station", "district", "film", "novel", "church", "team", "season", "league"]
    filler = " ".join(words[i % len(words)] for i in range(70))
    emb = torch.from_numpy(rng.standard_normal((rows, 64), dtype=np.float32))
    ppd = torch.from_numpy(rng.random((rows, 16), dtype=np.float32))
    titles = [f"Title {i}" for i in range(rows)]
    texts = [f"Passage {i} about {words[i % 16]}: {filler}" for i in range(rows)]
    ThemeIndex.build(emb, ppd, titles=titles, texts=texts, dtype=torch.bfloat16,
                     shards=4).save(d)


def eager_copy(d: pathlib.Path, out: pathlib.Path) -> None:
    """The same files (hard links) with a manifest that lists no ends file: loads parse
    every passage, as format 2 did."""
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    for p in d.iterdir():
        if p.name.startswith("manifest"):
            continue  # written below; a hard link would edit the lazy directory's too
        if p.is_file():
            os.link(p, out / p.name)
        else:
            shutil.copytree(p, out / p.name)
    m = json.loads((d / "manifest.json").read_text())
    del m["passages"]["ends"]
    (out / "manifest.json").write_text(json.dumps(m))


def run(d: pathlib.Path) -> dict:
    out = subprocess.run([sys.executable, "-c", CHILD, str(d)], capture_output=True, text=True,
                         check=True, cwd=HERE.parent)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--dir", default="/tmp/rasfast_open")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--report", action="store_true", help="write benchmarks/results/index_open.*")
    a = ap.parse_args(argv)
    from machine import machine_info
    d = pathlib.Path(a.dir) / "lazy"
    if not (d / "manifest.json").exists():
        shutil.rmtree(d, ignore_errors=True)
        t0 = time.perf_counter()
        build(d, a.rows)
        print(f"built {a.rows} rows in {time.perf_counter() - t0:.1f} s", flush=True)
    e = pathlib.Path(a.dir) / "eager"
    eager_copy(d, e)
    res = {"machine": machine_info(), "rows": a.rows, "loadavg_start": os.getloadavg(),
           "passages_bytes": (d / json.loads((d / "manifest.json").read_text())["passages"]["file"]).stat().st_size,
           "runs": {"lazy": [], "eager": []}}
    for _ in range(a.reps):  # interleaved, page cache warm after the first pair
        for name, path in (("lazy", d), ("eager", e)):
            r = run(path)
            res["runs"][name].append(r)
            print(name, r, flush=True)
    res["loadavg_end"] = os.getloadavg()
    best = {k: min(v, key=lambda r: r["open_s"] + r["first_query_s"]) for k, v in res["runs"].items()}
    res["best"] = best
    lz, eg = best["lazy"], best["eager"]
    ratio = (eg["open_s"] + eg["first_query_s"]) / (lz["open_s"] + lz["first_query_s"])
    res["open_plus_first_query_speedup"] = ratio
    print(f"open + first query: lazy {lz['open_s'] + lz['first_query_s']:.3f} s, eager "
          f"{eg['open_s'] + eg['first_query_s']:.3f} s ({ratio:.1f}x)")
    if a.report:
        out = HERE / "results"
        (out / "index_open.json").write_text(json.dumps(res, indent=1))
        m = res["machine"]
        lines = [
            "# Opening a saved index: lazy passages vs parsed at load",
            "",
            f"`python benchmarks/index_open.py --rows {a.rows} --report`; {a.rows:,} rows "
            f"(D=64, T=16 bf16, 4 shards), passages file {res['passages_bytes'] / 1e6:.0f} MB; "
            f"each timing in a fresh process, best of {a.reps} interleaved runs (page cache warm).",
            f"Machine: {m.get('cpu', '?')}, {m.get('cores', '?')} cores, no GPU; load average "
            f"{res['loadavg_start'][0]:.1f} at start, {res['loadavg_end'][0]:.1f} at end.",
            "",
            "| passages | open (s) | first query + passages (s) | total (s) |",
            "|---|---:|---:|---:|",
        ]
        for name, r in (("lazy (format 3, ends file)", lz), ("parsed at load (format 2)", eg)):
            lines.append(f"| {name} | {r['open_s']:.3f} | {r['first_query_s']:.3f} | "
                         f"{r['open_s'] + r['first_query_s']:.3f} |")
        lines += ["", f"Open + first query is {ratio:.1f}x faster with lazy passages. The "
                  "first query's time is the scoped search over the mapped matrices (scope "
                  "K = N/10, k = 10) plus decoding the 10 returned passages.", ""]
        (out / "index_open.md").write_text("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
