"""Does theme scoping keep the dense top-k? KMeansThemeModel on the MuSiQue corpus.

MuSiQue corpus (1,890 passages, title + text) and its 100 questions, embedded with
all-MiniLM-L6-v2. For each k-means theme model (T centroids, softmax scale s, 3 seeds) the
corpus and query PPDs are L2-normalised (as RAS does) and each question is searched with
exact global scoping at K = 10%, 25%, 50% of N (rasfast.ThemeIndex.search, cpu backend).
Reported per setting:

- survival: fraction of the unscoped dense top-10 that is still in the scoped top-10
  (= the fraction of the dense top-10 inside the scope);
- recall@10 of the gold passages, unscoped and scoped.

(T, s) is chosen on the first 50 questions (survival at K = 10%) and reported on the other
50 as well as on all 100, so the headline is not tuned on the numbers it reports.

    .venv/bin/python benchmarks/theme_survival_musique.py [--quick]
Writes benchmarks/results/theme_survival.md and .json.
"""
from __future__ import annotations

import argparse
import json
import os
import pathlib
import sys
import time

import numpy as np

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from machine import header_markdown, machine_info  # noqa: E402

from rasfast.data import load_dataset  # noqa: E402
from rasfast.encode import SentenceTransformerEncoder, encode_cached  # noqa: E402
from rasfast.index import ThemeIndex  # noqa: E402
from rasfast.theme import KMeansThemeModel  # noqa: E402

FRACTIONS = (0.10, 0.25, 0.50)
K_TOP = 10


def _data_root():
    if os.environ.get("RASFAST_DATA"):
        return None
    for cand in (HERE.parent.parent / "shared" / "data", HERE.parent.parent.parent / "shared" / "data"):
        if (cand / "musique").is_dir():
            return cand
    return None


def _recall(ids: np.ndarray, gold) -> np.ndarray:
    """Per question recall of the gold passages over all of its ids (rasfast.metrics.recall_at_k)."""
    from rasfast.metrics import recall_at_k
    return np.array([recall_at_k(r.tolist(), g, len(r)) for r, g in zip(ids, gold)])


def _survival(scoped: np.ndarray, dense: np.ndarray) -> np.ndarray:
    return np.array([len(set(a.tolist()) & set(b.tolist())) / len(b) for a, b in zip(scoped, dense)])


def evaluate(E, Q, gold, dense_ids, T, scale, seed, K_values):
    """Per-question survival and recall arrays per K for one theme model."""
    model = KMeansThemeModel(num_themes=T, scale=scale, seed=seed).fit(E)
    index = ThemeIndex.build(E, theme_model=model)  # PPD rows L2-normalised
    q_ppd = model.query_ppd(Q)
    out = {}
    for K in K_values:
        ids, _ = index.search(q_ppd, Q, K, K_TOP, scope="global", backend="cpu")
        out[K] = {"survival": _survival(ids, dense_ids), "recall": _recall(ids, gold)}
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="fewer settings (smoke run)")
    ap.add_argument("--out", default=str(HERE / "results" / "theme_survival"))
    args = ap.parse_args(argv)

    t0 = time.time()
    ds = load_dataset("musique", _data_root())
    enc = SentenceTransformerEncoder()
    E = encode_cached(enc, [p.content for p in ds.passages])
    Q = encode_cached(enc, [q.question for q in ds.questions])
    N, nq = E.shape[0], Q.shape[0]
    gold = [set(q.gold_pids) for q in ds.questions]
    K_values = [int(round(f * N)) for f in FRACTIONS]
    flat = ThemeIndex.build(E, theme_model=False)
    dense_ids, _ = flat.dense_search(Q, K_TOP, backend="cpu")
    dense_recall = _recall(dense_ids, gold)
    t_embed = time.time() - t0

    Ts = (32, 64, 298) if args.quick else (16, 32, 64, 128, 298)
    scales = (10.0, 20.0) if args.quick else (5.0, 10.0, 20.0, 40.0)
    seeds = (0,) if args.quick else (0, 1, 2)
    dev, test = np.arange(nq) < nq // 2, np.arange(nq) >= nq // 2
    grid = []
    for T in Ts:
        for s in scales:
            runs = [evaluate(E, Q, gold, dense_ids, T, s, seed, K_values) for seed in seeds]
            row = {"T": T, "scale": s}
            for K, f in zip(K_values, FRACTIONS):
                surv = np.stack([r[K]["survival"] for r in runs])  # [seeds, questions]
                rec = np.stack([r[K]["recall"] for r in runs])
                row[f"{f:.2f}"] = {
                    "survival_all": float(surv.mean()), "survival_seed_std": float(surv.mean(1).std()),
                    "survival_dev": float(surv[:, dev].mean()), "survival_test": float(surv[:, test].mean()),
                    "recall_all": float(rec.mean()), "recall_test": float(rec[:, test].mean()),
                }
            grid.append(row)
            print(f"T={T:4d} scale={s:5.1f} " + "  ".join(
                f"K={f:.0%}: surv {row[f'{f:.2f}']['survival_all']:.3f} rec {row[f'{f:.2f}']['recall_all']:.3f}"
                for f in FRACTIONS), flush=True)
    best = max(grid, key=lambda r: r["0.10"]["survival_dev"])
    default = next((r for r in grid if r["T"] == 64 and r["scale"] == 20.0), None)
    result = {"machine": machine_info(), "N": N, "questions": nq, "k": K_TOP,
              "K_values": dict(zip([f"{f:.2f}" for f in FRACTIONS], K_values)),
              "encoder": enc.name, "dense_recall_all": float(dense_recall.mean()),
              "dense_recall_test": float(dense_recall[test].mean()),
              "seeds": list(seeds), "grid": grid, "selected": {"T": best["T"], "scale": best["scale"]},
              "seconds": {"embed_and_dense": t_embed, "total": time.time() - t0}}

    out = pathlib.Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".json").write_text(json.dumps(result, indent=2))
    out.with_suffix(".md").write_text(_markdown(result, best, default))
    print(f"wrote {out.with_suffix('.md')} ({time.time() - t0:.0f} s)")


def _markdown(r, best, default) -> str:
    fr = [f"{f:.2f}" for f in FRACTIONS]
    Ks = ", ".join(f"{int(float(f) * 100)}% = {r['K_values'][f]}" for f in fr)
    lines = [
        "# Theme scoping on MuSiQue: does the dense top-10 survive?", "",
        header_markdown(), "",
        f"Corpus: MuSiQue, N = {r['N']} passages (title + text), {r['questions']} questions; "
        f"encoder {r['encoder']} (384-d, normalised). Theme model: KMeansThemeModel (spherical "
        "k-means on the passage embeddings, faiss), PPD = softmax(scale * cosine to centroids), "
        "rows L2-normalised; exact global scoping (squared L2), K = " + Ks + f"; k = {r['k']}; "
        "ThemeIndex.search, cpu backend, theme_weight = 0.",
        "",
        "survival = fraction of the unscoped dense top-10 still in the scoped top-10. "
        f"recall = recall@10 of the gold passages (unscoped dense: {r['dense_recall_all']:.3f} "
        f"on all 100, {r['dense_recall_test']:.3f} on questions 51-100). "
        f"Each cell is the mean over seeds {r['seeds']} and all questions.", "",
        f"## Selected setting (chosen on questions 1-50 by survival at K = 10%): "
        f"T = {best['T']}, scale = {best['scale']:g}", "",
        "| K | survival (q 51-100, held out) | survival (all) | recall@10 scoped (q 51-100) | "
        "recall@10 scoped (all) |", "|---|---|---|---|---|",
    ]
    for f in fr:
        c = best[f]
        lines.append(f"| {int(float(f) * 100)}% ({r['K_values'][f]}) | {c['survival_test']:.3f} | "
                     f"{c['survival_all']:.3f} ± {c['survival_seed_std']:.3f} | {c['recall_test']:.3f} | "
                     f"{c['recall_all']:.3f} |")
    if default is not None:
        lines += ["", "Library default (T = 64, scale = 20): survival " + ", ".join(
            f"{int(float(f) * 100)}%: {default[f]['survival_all']:.3f}" for f in fr) +
            "; recall@10 " + ", ".join(f"{int(float(f) * 100)}%: {default[f]['recall_all']:.3f}" for f in fr)
            + "."]
    lines += ["", "## Full grid (all 100 questions; ± = std of the per-seed means)", "",
              "| T | scale | " + " | ".join(f"surv {int(float(f) * 100)}%" for f in fr) + " | " +
              " | ".join(f"recall {int(float(f) * 100)}%" for f in fr) + " |",
              "|---|---|" + "---|" * (2 * len(fr))]
    for row in r["grid"]:
        lines.append(f"| {row['T']} | {row['scale']:g} | " +
                     " | ".join(f"{row[f]['survival_all']:.3f} ± {row[f]['survival_seed_std']:.3f}" for f in fr)
                     + " | " + " | ".join(f"{row[f]['recall_all']:.3f}" for f in fr) + " |")
    lines += ["", f"Run time: {r['seconds']['total']:.0f} s (embedding from the on-disk cache when "
              "present).", ""]
    return "\n".join(lines)


if __name__ == "__main__":
    main()
