"""Adding triples to a TripleGraph / KnowledgeIndex: merge vs full rebuild (issue 23, part 3).

1. Graph: a synthetic graph of --n triples (Zipf entity popularity, rasfast.graph.
   synthetic_triples), then --add new triples drawn from the same distribution (so they hit
   popular old entities and bring new ones). Times, interleaved, median of --repeats:
   ``TripleGraph.merge`` (entity table already built; and once cold, building it), the C++
   kernel alone, a from-scratch ``TripleGraph.from_triples`` of the union (what ``add`` did
   before), and a plain copy of the old ``indices`` (the floor any non-in-place merge pays).
   The merged graph is checked equal to the rebuilt one.
2. End to end: a KnowledgeIndex with the same triples (4 per passage, HashingEncoder(64)),
   saved; then load + add + save into the same directory, with this branch's code and with
   the code of ``--base-ref`` (its knowledge index module), each on a fresh copy of the
   saved directory, interleaved, median of --e2e-repeats. Loads map the files (mmap=True)
   unless --no-mmap.
3. Open + first query: the saved index (one part) and the grown one (two parts) opened
   with mmap=True by both codes, then one query (theme-scoped search, graph expansion,
   triple beam search, the best triples' texts), then the same query again; and the open
   time of a small index (--small triples) with the same code, to show it does not grow.

Writes benchmarks/results/graph_add.md (+ .json).

    .venv/bin/python benchmarks/graph_add.py [--n 1000000] [--add 10000] [--repeats 7]
"""
from __future__ import annotations

import argparse
import gc
import importlib.util
import json
import os
import pathlib
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from machine import header_markdown, machine_info  # noqa: E402

import rasfast.dispatch as _bk  # noqa: E402
from rasfast.graph import TripleGraph, synthetic_triples  # noqa: E402

FIELDS = ("indptr", "indices", "head", "tail", "entity_degree", "passage_ids", "source_index")


def load_avg() -> str:
    return " ".join(open("/proc/loadavg").read().split()[:3])


def lscpu_model() -> str:
    out = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
    return next((ln.split(":", 1)[1].strip() for ln in out.splitlines() if ln.startswith("Model name")), "?")


CPU = {}   # label -> CPU seconds of this process (all threads) of the last timed() call


def timed(fn, label=None):
    """Wall seconds and result of fn(); its process CPU time goes to CPU[label]: on a shared
    machine CPU time depends much less on the other jobs than wall time does."""
    c0, t0 = time.process_time(), time.perf_counter()
    out = fn()
    t1, c1 = time.perf_counter(), time.process_time()
    if label:
        CPU[label] = c1 - c0
    return t1 - t0, out


def same(a, b) -> bool:
    return all(np.array_equal(np.asarray(getattr(a, f)), np.asarray(getattr(b, f))) for f in FIELDS) \
        and list(a.entities) == list(b.entities) and a.n_hubs == b.n_hubs


def graph_bench(label, n, add, n_ent, zipf, offset, md, repeats):
    print(f"[{label}] generating {n:,} + {add:,} triples", flush=True)
    t = synthetic_triples(n + add, n_ent, zipf=zipf, offset=offset, seed=7)
    old, new = t[:n], t[n:]
    union = old + new
    g = TripleGraph.from_triples(old, max_degree=md)
    la0 = load_avg()
    cold_t, m = timed(lambda: g.merge(new))          # builds the entity table inside
    ids = g._entity_index()
    e_old = g.num_entities
    cpu = _bk.cpu_module()
    times = {"merge": [], "kernel": [], "rebuild": [], "copy": []}
    cpu_s = {k: [] for k in times}
    info = {}
    for r in range(repeats):
        g._entity_ids = ids
        dt, m = timed(lambda: g.merge(new), "merge")
        times["merge"].append(dt)
        for key in m.entities[e_old:]:               # give the table back its old contents
            del ids[key]
        nh, nt = m.head[n:].copy(), m.tail[n:].copy()
        dt, k = timed(lambda: cpu.triple_graph_merge(g.indptr, g.indices, g.head, g.tail, g.entity_degree,
                                                     nh, nt, m.num_entities, -1 if md is None else md,
                                                     2 ** 62), "kernel")
        times["kernel"].append(dt)
        if r == 0:
            info = {"changed_old_rows": int(k["changed"].shape[0]), "removed": bool(k["removed"])}
        del k
        dt, _ = timed(lambda: g.indices.copy(), "copy")
        times["copy"].append(dt)
        dt, rb = timed(lambda: TripleGraph.from_triples(union, max_degree=md), "rebuild")
        times["rebuild"].append(dt)
        for key in cpu_s:
            cpu_s[key].append(CPU[key])
        if r == 0:
            assert same(m, rb), "merged graph differs from the rebuilt one"
            info.update(nnz_old=g.num_edges, nnz_new=rb.num_edges, entities_old=e_old,
                        entities_new=rb.num_entities, top_degree=int(rb.entity_degree.max()),
                        hubs=rb.n_hubs)
        del rb, m
        print(f"  repeat {r}: " + ", ".join(f"{k} {v[-1]:.3f}s" for k, v in times.items()), flush=True)
    med = {k: statistics.median(v) for k, v in times.items()}
    res = dict(label=label, n=n, add=add, n_entities_drawn=n_ent, zipf=zipf, offset=offset,
               max_degree=md, repeats=repeats, median_s=med, all_s=times, cold_merge_s=cold_t,
               cpu_median_s={k: statistics.median(v) for k, v in cpu_s.items()}, cpu_all_s=cpu_s,
               load_before=la0, load_after=load_avg(), **info)
    print(f"  median: {med}, cold merge {cold_t:.3f}s; rebuild/merge = {med['rebuild'] / med['merge']:.1f}x",
          flush=True)
    return res, old, new


def _old_index_module(ref: str):
    """The knowledge index module as of ``ref`` (rebuild + full rewrite), loaded as a module of
    the installed package (same relative imports; the compiled module is a superset)."""
    # refs from before the systems/ and index/ folders (rasfast/knowledge/index.py) are not
    # loadable any more: their relative imports name modules that no longer exist
    for rel, package in (("rasfast/index/knowledge/index.py", "rasfast.index.knowledge"),):
        got = subprocess.run(["git", "show", f"{ref}:{rel}"], capture_output=True, text=True,
                             cwd=HERE.parent)
        if got.returncode == 0:
            break
    else:
        raise SystemExit(f"--base-ref {ref}: no knowledge index module there")
    path = pathlib.Path(tempfile.mkdtemp()) / "index_base.py"
    path.write_text(got.stdout)
    spec = importlib.util.spec_from_file_location(f"{package}._index_base", path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    mod.RESOLVED = subprocess.run(["git", "rev-parse", "--short", ref], capture_output=True, text=True,
                                  cwd=HERE.parent).stdout.strip()
    return mod


def _dir_bytes(d: pathlib.Path) -> dict:
    return {p.relative_to(d).as_posix(): p.stat().st_size for p in d.rglob("*") if p.is_file()}


def first_query(ki, q):
    """What a first query touches: theme-scoped search, graph expansion, beam search, the
    texts of the best triples (the answer)."""
    from rasfast.ops.beam import triple_beam_search
    from rasfast.systems.gear import graph_expand
    th = ki.theme
    ids, _ = th.search(th.query_ppd(q), q, 4, 10)
    ids = np.asarray(ids)
    row_pid = np.asarray(th.pids)
    base = [row_pid[r[r >= 0]] for r in ids]
    seeds = graph_expand(ki.graph, ki.triple_emb, q, base, top=5).seeds
    r = triple_beam_search(ki.graph, ki.triple_emb, q, seeds, beam_width=10, max_len=2, gamma=20.0,
                           max_neighbors=100)
    best = [int(x) for x in np.asarray(r.sequences).reshape(-1) if x >= 0][:20]
    return ids.tolist(), [ki.graph.texts[i] for i in best]


def open_query_bench(impls, enc, queries, repeats):
    """impls: label -> (cls, directory). Alternating: open (mmap) + first query + second."""
    q = np.ascontiguousarray(enc.encode(queries), dtype=np.float32)
    out = {k: {"open": [], "q1": [], "q2": [], "cpu_open": [], "cpu_q1": []} for k in impls}
    answers = {}
    la0 = load_avg()
    keys = list(impls)
    for r in range(repeats):
        for k in (keys if r % 2 == 0 else keys[::-1]):
            cls, d = impls[k]
            gc.collect()
            dt, ki = timed(lambda: cls.load(d, mmap=True), "open")
            out[k]["open"].append(dt)
            out[k]["cpu_open"].append(CPU["open"])
            dt, ans = timed(lambda: first_query(ki, q), "q1")
            out[k]["q1"].append(dt)
            out[k]["cpu_q1"].append(CPU["q1"])
            dt, _ = timed(lambda: first_query(ki, q))
            out[k]["q2"].append(dt)
            answers[k] = ans
            del ki
    return out, answers, la0, load_avg()


def e2e_bench(old, new, md, repeats, base_ref, work: pathlib.Path, mmap=True, small=10_000):
    from rasfast.data.qa import Passage
    from rasfast.encode import HashingEncoder
    from rasfast.index.knowledge import KnowledgeIndex
    from rasfast.index.knowledge.extract import corpus_record
    enc, ex = HashingEncoder(64), corpus_record("synthetic")
    per = 4
    rows = [list(map(list, old[i:i + per])) for i in range(0, len(old), per)]
    add_rows = [list(map(list, new[i:i + per])) for i in range(0, len(new), per)]
    text = lambda ts: " ; ".join(" ".join(t) for t in ts)   # noqa: E731
    passages = [Passage(i, f"P{i}", text(ts)) for i, ts in enumerate(rows)]
    add_passages = [Passage(len(rows) + i, f"P{len(rows) + i}", text(ts)) for i, ts in enumerate(add_rows)]
    print(f"[e2e] building a knowledge index of {len(passages):,} passages, {len(old):,} triples", flush=True)
    t_build, ki = timed(lambda: KnowledgeIndex.build(passages, rows, enc, ex, num_themes=16, max_degree=md))
    base_mod = _old_index_module(base_ref)
    tpl_new, tpl_old = work / "tpl_new", work / "tpl_old"
    ki.save(tpl_new)
    base_mod.KnowledgeIndex(ki.theme, ki.triples, ki.source_ids, ki.graph, ki.triple_emb, ki.extraction,
                            max_degree=md).save(tpl_old)
    del ki
    cache = work / "cache"
    os.environ["RASFAST_CACHE"] = str(cache)
    times = {f"{impl}_{step}": [] for impl in ("new", "base") for step in ("load", "add", "save")}
    written, graphs = {}, {}
    cpu_s = {k: [] for k in times}
    la0 = load_avg()
    for r in range(repeats):
        order = [("new", KnowledgeIndex, tpl_new), ("base", base_mod.KnowledgeIndex, tpl_old)]
        for impl, cls, tpl in (order if r % 2 == 0 else order[::-1]):   # alternate who goes first
            d = work / f"run_{impl}"
            if d.exists():
                shutil.rmtree(d)
            shutil.copytree(tpl, d)
            shutil.rmtree(cache, ignore_errors=True)     # both encode the new triples afresh
            before = _dir_bytes(d)
            gc.collect()
            dt, k = timed(lambda: cls.load(d, mmap=mmap), "load")
            times[f"{impl}_load"].append(dt)
            dt, _ = timed(lambda: k.add(add_passages, add_rows, enc, ex), "add")
            times[f"{impl}_add"].append(dt)
            dt, _ = timed(lambda: k.save(d), "save")
            times[f"{impl}_save"].append(dt)
            for step in ("load", "add", "save"):
                cpu_s[f"{impl}_{step}"].append(CPU[step])
            after = _dir_bytes(d)
            written[impl] = sum(s - before.get(p, 0) for p, s in after.items() if s != before.get(p))
            if r == 0:
                graphs[impl] = (KnowledgeIndex if impl == "new" else base_mod.KnowledgeIndex).load(d).graph
            del k
        if r == 0:
            assert same(graphs["new"], graphs["base"]), "new and base add disagree"
            graphs.clear()
        print(f"  repeat {r}: " + ", ".join(f"{k} {v[-1]:.2f}s" for k, v in times.items()), flush=True)
    # loading alone (the templates, alternating), both modes
    only = {f"{impl} mmap={mm}": [] for impl in ("new", "base") for mm in (False, True)}
    for r in range(3):
        order = [("new", KnowledgeIndex, tpl_new), ("base", base_mod.KnowledgeIndex, tpl_old)]
        for impl, cls, tpl in (order if r % 2 == 0 else order[::-1]):
            for mm in (False, True):
                gc.collect()
                dt, k = timed(lambda: cls.load(tpl, mmap=mm), "load")
                only[f"{impl} mmap={mm}"].append((dt, CPU["load"]))
                del k
    # open + first query: the templates (one part) and the grown directories of the last
    # repeat (two parts), both codes; and a small index with this branch's code
    print("[open+query]", flush=True)
    small_rows = rows[:small // per]
    small_dir = work / "small"
    KnowledgeIndex.build(passages[:len(small_rows)], small_rows, enc, ex, num_themes=16,
                         max_degree=md).save(small_dir)
    queries = [text(rows[i]) for i in (3, 777, 12345 % len(rows), len(rows) - 5)]
    impls = {"new, 1 part": (KnowledgeIndex, tpl_new), "base, 1 part": (base_mod.KnowledgeIndex, tpl_old),
             "new, 2 parts": (KnowledgeIndex, work / "run_new"),
             "base, 2 parts": (base_mod.KnowledgeIndex, work / "run_base"),
             f"new, {len(small_rows) * per:,} triples": (KnowledgeIndex, small_dir)}
    oq, answers, oq_la0, oq_la1 = open_query_bench(impls, enc, queries, 3)
    assert answers["new, 1 part"] == answers["base, 1 part"], "open+query: new and base disagree"
    assert answers["new, 2 parts"] == answers["base, 2 parts"], "open+query: new and base disagree"
    for k, v in oq.items():
        print(f"  {k}: open {statistics.median(v['open']):.3f}s, q1 {statistics.median(v['q1']):.3f}s, "
              f"q2 {statistics.median(v['q2']):.3f}s", flush=True)
    med = {k: statistics.median(v) for k, v in times.items()}
    ratios = [(times["base_add"][r] + times["base_save"][r]) / (times["new_add"][r] + times["new_save"][r])
              for r in range(repeats)]
    return dict(base_commit=base_mod.RESOLVED, load_only=only, mmap=mmap, open_query=oq,
                open_query_load=(oq_la0, oq_la1), small_triples=len(small_rows) * per, ratios_add_save=ratios, cpu_median_s={k: statistics.median(v) for k, v in cpu_s.items()},
                cpu_all_s=cpu_s, passages=len(passages), triples=len(old), add_passages=len(add_passages),
                add_triples=len(new), build_s=t_build, repeats=repeats, median_s=med, all_s=times,
                bytes_written=written, load_before=la0, load_after=load_avg())


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--n", type=int, default=1_000_000)
    ap.add_argument("--add", type=int, default=10_000)
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--e2e-repeats", type=int, default=5)
    ap.add_argument("--skip-e2e", action="store_true")
    ap.add_argument("--no-mmap", action="store_true", help="e2e loads read the arrays (mmap=False)")
    ap.add_argument("--small", type=int, default=10_000, help="triples of the small index (open time)")
    ap.add_argument("--base-ref", default="main")
    ap.add_argument("--work", default=None, help="scratch directory for the e2e indexes")
    ap.add_argument("--out", default=str(HERE / "results" / "graph_add.md"))
    args = ap.parse_args()
    TripleGraph.from_triples([("a", "p", "b")]).merge([("b", "p", "c")])   # load the module
    n, add = args.n, args.add
    configs = [  # (label, n_entities, zipf, offset, max_degree)
        ("Zipf 0.9, top degree ~220, no hub guard", n, 0.9, 1000, None),
        ("Zipf 1.0, top degree ~2.3k, max_degree 500", int(0.6 * n), 1.0, 100, 500),
    ]
    results = {"machine": machine_info(), "lscpu_model": lscpu_model(), "nproc": os.cpu_count(),
               "graph": [], "e2e": None}
    e2e_input = None
    for label, n_ent, zipf, offset, md in configs:
        res, old, new = graph_bench(label, n, add, n_ent, zipf, offset, md, args.repeats)
        results["graph"].append(res)
        if e2e_input is None:
            e2e_input = (old, new, md)
        del old, new
    if not args.skip_e2e:
        work = pathlib.Path(args.work or tempfile.mkdtemp(prefix="graph_add_"))
        try:
            results["e2e"] = e2e_bench(*e2e_input, args.e2e_repeats, args.base_ref, work,
                                       mmap=not args.no_mmap, small=args.small)
        finally:
            shutil.rmtree(work, ignore_errors=True)
    out = pathlib.Path(args.out)
    out.with_suffix(".json").write_text(json.dumps(results, indent=1))
    out.write_text(report(results, args))
    print(f"wrote {out}")


def report(R, args) -> str:
    L = ["# `index add`: merging new triples vs rebuilding the triple graph\n", header_markdown(),
         f"`lscpu` model name: {R['lscpu_model']}; `nproc`: {R['nproc']}. The machine is shared "
         "(other engineers' jobs ran alongside): compare the ratios, measured in the same run with "
         "interleaved repeats; load averages (1, 5, 15 min) are those read at the start and end of "
         "each section.", "",
         f"Command: `.venv/bin/python benchmarks/graph_add.py --n {args.n} --add {args.add} "
         f"--repeats {args.repeats} --e2e-repeats {args.e2e_repeats} --base-ref {args.base_ref}"
         f"{' --no-mmap' if args.no_mmap else ''}`", "",
         "## TripleGraph: merge vs rebuild", "",
         "merge = `TripleGraph.merge(new)` with the entity table already built (a graph that merged "
         "before, or the second add of a session); cold = the same, building the table (one pass "
         "over the old entity strings) inside; kernel = the C++ `triple_graph_merge` alone; "
         "rebuild = `TripleGraph.from_triples(old + new)`, what `add` did before; copy = "
         "`indices.copy()` of the old graph, the floor of any merge that returns new arrays. "
         "Medians of the interleaved repeats (wall time; CPU s = this process's CPU time, all "
         "threads, which the other jobs on the machine disturb much less); the merged graph equals the rebuilt one (checked). "
         "The first repeat of each row is the first time the process writes that much fresh "
         "memory: on this VM its page faults cost about a second (a plain 630 MB copy measured "
         "1.2 s on first touch, 0.06 s after), whichever code pays them.", "",
         "| graph | old adjacency entries | new entries | old rows changed | merge (s) | cold merge (s) "
         "| kernel (s) | old-indices copy (s) | rebuild (s) | rebuild / merge | CPU s: merge / rebuild "
         "| load avg start → end |",
         "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for g in R["graph"]:
        m = g["median_s"]
        L.append(f"| {g['n']:,} + {g['add']:,} triples, {g['label']} | {g['nnz_old']:,} | "
                 f"{g['nnz_new'] - g['nnz_old']:+,} | {g['changed_old_rows']:,} | {m['merge']:.3f} | "
                 f"{g['cold_merge_s']:.3f} | {m['kernel']:.3f} | {m['copy']:.3f} | {m['rebuild']:.3f} | "
                 f"{m['rebuild'] / m['merge']:.1f}x | {g['cpu_median_s']['merge']:.3f} / "
                 f"{g['cpu_median_s']['rebuild']:.3f} = {g['cpu_median_s']['rebuild'] / g['cpu_median_s']['merge']:.1f}x | "
                 f"{g['load_before']} → {g['load_after']} |")
    L.append("")
    for g in R["graph"]:
        L.append(f"- {g['label']}: all repeats (s): " + "; ".join(
            f"{k} " + ", ".join(f"{x:.3f}" for x in v) for k, v in g["all_s"].items())
            + f". Hub entities after the add: {g['hubs']:,}; an old entry removed by the hub guard: "
              f"{g['removed']}.")
    e = R["e2e"]
    if e:
        m = e["median_s"]
        tot = {k: m[f"{k}_add"] + m[f"{k}_save"] for k in ("new", "base")}
        L += ["", "## KnowledgeIndex: load + add + save into the same directory", "",
              f"{e['passages']:,} passages with {e['triples']:,} triples (4 per passage, the first "
              f"graph above), HashingEncoder(64), 16 themes; add {e['add_passages']:,} passages with "
              f"{e['add_triples']:,} triples (the same new triples). `new` = this branch (layout 4: "
              "mapped arrays, triple records and entity strings decoded on access, entity lookups "
              "in saved hash tables, triple embeddings of the add kept as a block joined on first "
              f"use); `base` = the knowledge index module of `{args.base_ref}` "
              f"(commit {e['base_commit']}: merge + appended part, but every triples record parsed "
              "at load and the embeddings concatenated at add), same ThemeIndex and TripleGraph "
              f"code. Loads with mmap={e.get('mmap', False)}. Each repeat starts from a "
              "fresh copy of the saved directory and an empty embedding cache; medians of "
              f"{e['repeats']} interleaved repeats. Bytes written = growth of the directory's files.", "",
              "| code | load (s) | add (s) | save (s) | add + save (s) | CPU s: load / add / save "
              "| bytes written by the save |",
              "|---|---|---|---|---|---|---|"]
        c = e["cpu_median_s"]
        for k in ("new", "base"):
            L.append(f"| {k} | {m[f'{k}_load']:.2f} | {m[f'{k}_add']:.2f} | {m[f'{k}_save']:.2f} | "
                     f"{tot[k]:.2f} | {c[f'{k}_load']:.2f} / {c[f'{k}_add']:.2f} / {c[f'{k}_save']:.2f} "
                     f"| {e['bytes_written'][k]:,} |")
        L += ["", f"add + save: base / new = {tot['base'] / tot['new']:.1f}x (ratio of medians); per "
              "repeat (the two codes back to back, the order alternating): "
              + ", ".join(f"{x:.1f}x" for x in e["ratios_add_save"])
              + f" (median {statistics.median(e['ratios_add_save']):.1f}x); load + add + save: "
              f"{(tot['base'] + m['base_load']) / (tot['new'] + m['new_load']):.1f}x. "
              f"Load average {e['load_before']} → {e['load_after']}. All repeats (s): "
              + "; ".join(f"{k} " + ", ".join(f"{x:.2f}" for x in v) for k, v in e["all_s"].items()) + ".",
              "", "Loading alone (the two saved templates, 3 alternating loads each per mode; wall / CPU s): "
              + "; ".join(f"{k} " + ", ".join(f"{a:.2f}/{b:.2f}" for a, b in v) + f" (median wall "
                          f"{statistics.median(a for a, _ in v):.2f})" for k, v in e["load_only"].items())
              + ". With mmap=False both codes read every array into memory (O(bytes)); the base "
              "code also parses every triples record and the entities.json."]
        oq = e.get("open_query")
        if oq:
            L += ["", "## KnowledgeIndex: open + first query", "",
                  "Open = `KnowledgeIndex.load(dir, mmap=True)`; first query = 4 queries at once through "
                  "theme-scoped search (K=4, k=10), GEAR graph expansion (top 5) and the triple beam "
                  "search (width 10, length 2), then the texts of the best triples (the same answers "
                  "from both codes, checked); second = the same again on the open index. `1 part` = "
                  "the saved template; `2 parts` = the directory after the last e2e repeat (template "
                  "+ the appended part; the base code joins the parts at open, the new code on first "
                  f"use of each array); `{e['small_triples']:,} triples` = a small index, same code. "
                  f"Medians of 3 alternating repeats; load average {e['open_query_load'][0]} → "
                  f"{e['open_query_load'][1]}.", "",
                  "| index, code | open (s) | first query (s) | open + first query (s) | second query (s) "
                  "| CPU s: open / first query |", "|---|---|---|---|---|---|"]
            for k, v in oq.items():
                md_ = {x: statistics.median(v[x]) for x in v}
                L.append(f"| {k} | {md_['open']:.3f} | {md_['q1']:.3f} | {md_['open'] + md_['q1']:.3f} | "
                         f"{md_['q2']:.3f} | {md_['cpu_open']:.3f} / {md_['cpu_q1']:.3f} |")
            L += ["", "All repeats (s): " + "; ".join(
                f"{k}: open " + ", ".join(f"{x:.3f}" for x in v["open"]) + ", first "
                + ", ".join(f"{x:.3f}" for x in v["q1"]) for k, v in oq.items()) + "."]
    return "\n".join(L) + "\n"


if __name__ == "__main__":
    main()
