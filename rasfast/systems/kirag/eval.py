"""Recall@k on MuSiQue: dense, dense + GEAR NaiveGE, KiRAG (zero-shot and trained aligner).

All systems rank passages for the same 100 questions with the same encoder
(all-MiniLM-L6-v2 by default). KiRAG retrieves with the dense retriever, aligns with the
zero-shot encoder or a trained aligner, constructs with the model-free heuristic (no LLM
here), and ranks documents by their best candidate triple; a list shorter than k is filled
with the question's next dense passages (as rasfast.systems.gear does for NaiveGE). The trained
aligner is evaluated with n-fold cross-validation over the questions: fold f's questions are
ranked by an aligner trained only on the other folds' silver chains, so no question is
scored by an aligner that saw it.
"""
from __future__ import annotations

import time
from typing import Dict, List, Optional, Sequence

import numpy as np

from ..._validate import check_int_arg
from ...metrics import mean_recall_at_k as recall_at_k
from ...metrics import pad_ranking
from ..gear import dense_rankings
from .aligner import PAPER_TRAINING, train_aligner
from .loop import KiRAG
from .silver import load_musique_chains, training_pairs


def _kirag_rankings(retriever, store, aligner, questions, dense, depth, K0, N, L, batch=100):
    sys = KiRAG(retriever, store, aligner, K0=K0, N=N, L=L, top_k=depth)
    out, lengths = [], []
    for s in range(0, len(questions), batch):
        for r, d in zip(sys.run_batch(questions[s:s + batch]), dense[s:s + batch]):
            out.append(pad_ranking(np.asarray(r.pids, np.int64), d, depth))
            lengths.append(len(r.chain))
    return out, float(np.mean(lengths)) if lengths else 0.0


def evaluate_kirag_musique(data_root=None, encoder=None, ks: Sequence[int] = (3, 5, 10),
                           K0: int = 10, N: int = 20, L: int = 5, folds: int = 2,
                           epochs: int = PAPER_TRAINING["epochs"],
                           batch_size: int = PAPER_TRAINING["batch_size"],
                           lr: float = PAPER_TRAINING["lr"],
                           temperature: float = PAPER_TRAINING["temperature"],
                           max_negatives: int = PAPER_TRAINING["max_negatives"],
                           max_steps: Optional[int] = None, train: bool = True, seed: int = 0,
                           progress: bool = False, negatives: str = "retrieved") -> Dict[str, object]:
    """Rows of recall@k per system (see the module docstring) and per-fold details.

    ``negatives``: where each training step's negative triples come from -- "retrieved"
    (the paper: the triples of the K0 documents the dense retriever returns for that step's
    query) or "paragraphs" (the question's own 20 MuSiQue paragraphs, the earlier default).
    """
    if negatives not in ("retrieved", "paragraphs"):
        raise ValueError(f"negatives: expected 'retrieved' or 'paragraphs', got {negatives!r}")
    from ...encode import SentenceTransformerEncoder, encode_cached
    from ..gear import evaluate_musique as gear_eval
    from ..ras.retrievers import DenseRetriever

    ks = [check_int_arg(k, "ks", 1) for k in ks]
    folds = check_int_arg(folds, "folds", 2)
    depth = max(ks)
    say = print if progress else (lambda *a, **k: None)
    ds, store, chains = load_musique_chains(data_root)
    enc = encoder or SentenceTransformerEncoder()
    p_emb = encode_cached(enc, [p.content for p in ds.passages])
    q_emb = encode_cached(enc, [q.question for q in ds.questions])
    gold = [q.gold_pids for q in ds.questions]
    questions = [q.question for q in ds.questions]
    dense = dense_rankings(q_emb, p_emb, 3 * depth)
    retriever = DenseRetriever(ds.passages, p_emb, enc)

    def row(name, ranked, idx=None, **extra):
        idx = range(len(gold)) if idx is None else idx
        return {"method": name, **extra,
                **{f"recall@{k}": recall_at_k([ranked[i] for i in idx], [gold[i] for i in idx], k)
                   for k in ks}}

    t0 = time.perf_counter()
    rows = [row("dense", list(dense))]
    say("dense done")
    g = gear_eval(data_root, ks=ks, base_sizes=(K0,), encoder=enc)
    ge = [r for r in g["rows"] if r["method"] == "dense + NaiveGE"][0]
    rows.append({"method": "dense + GEAR NaiveGE", "base_size": K0,
                 **{f"recall@{k}": ge[f"recall@{k}"] for k in ks}})
    say("GEAR done")
    # the zero-shot aligner is the retrieval encoder: reuse the triple embeddings GEAR's
    # evaluation cached on disk (same texts, "s p o") instead of encoding them again
    from ...encode import CachedEncoder
    from ...graph import TripleGraph
    texts = TripleGraph.from_dataset(ds).texts
    zs_aligner = CachedEncoder(enc)
    zs_aligner._cache.update(zip(texts, encode_cached(enc, texts)))
    t = time.perf_counter()
    zs, zs_len = _kirag_rankings(retriever, store, zs_aligner, questions, dense, depth, K0, N, L)
    rows.append(row("KiRAG zero-shot aligner", zs, mean_chain_len=zs_len,
                    seconds=time.perf_counter() - t))
    say("KiRAG zero-shot done")

    fold_of = np.random.default_rng(seed).permutation(len(questions)) % folds
    per_fold = []
    if train:
        trained_rank: List[Optional[np.ndarray]] = [None] * len(questions)
        lens = []
        for f in range(folds):
            test = [i for i in range(len(questions)) if fold_of[i] == f]
            train_chains = [chains[i] for i in range(len(questions)) if fold_of[i] != f]
            pairs = training_pairs(train_chains, store, max_negatives=max_negatives, seed=seed,
                                   retriever=retriever if negatives == "retrieved" else None, K0=K0)
            say(f"fold {f}: training on {len(pairs)} pairs from {len(train_chains)} questions")
            tr = train_aligner(pairs, epochs=epochs, batch_size=batch_size, lr=lr,
                               temperature=temperature, max_negatives=max_negatives,
                               max_steps=max_steps, seed=seed, progress=progress)
            aligner = tr.encoder(name=f"kirag-aligner-fold{f}")
            ranked, mlen = _kirag_rankings(retriever, store, aligner, [questions[i] for i in test],
                                           [dense[i] for i in test], depth, K0, N, L)
            for i, r in zip(test, ranked):
                trained_rank[i] = r
            lens.append(mlen)
            per_fold.append({"fold": f, "n_test": len(test), "train_pairs": len(pairs),
                             "train_seconds": tr.seconds, "loss_first": tr.losses[0],
                             "loss_last": tr.losses[-1],
                             "loss_first_5_mean": float(np.mean(tr.losses[:5])),
                             "loss_last_5_mean": float(np.mean(tr.losses[-5:])),
                             "dense": row("dense", list(dense), test),
                             "zero_shot": row("KiRAG zero-shot", zs, test),
                             "trained": row("KiRAG trained", trained_rank, test)})
            say(f"fold {f} done: {per_fold[-1]['trained']}")
        rows.append(row(f"KiRAG trained aligner ({folds}-fold CV, held-out)", trained_rank,
                        mean_chain_len=float(np.mean(lens))))
    return {"rows": rows, "folds": per_fold, "n_questions": len(questions), "encoder": enc.name,
            "silver_chains": {"questions": len(chains),
                              "complete": sum(c.complete for c in chains),
                              "mean_len": float(np.mean([len(c.triple_ids) for c in chains]))},
            "settings": dict(K0=K0, N=N, L=L, folds=folds, epochs=epochs, batch_size=batch_size,
                             lr=lr, temperature=temperature, max_negatives=max_negatives,
                             max_steps=max_steps, seed=seed, constructor="heuristic",
                             negatives=negatives),
            "seconds": time.perf_counter() - t0}


def format_table(out: Dict[str, object]) -> str:
    ks = [c for c in out["rows"][0] if c.startswith("recall@")]
    lines = ["| method | " + " | ".join(k.replace("recall@", "R@") for k in ks) + " |",
             "|---|" + "---:|" * len(ks)]
    for r in out["rows"]:
        lines.append(f"| {r['method']} | " + " | ".join(f"{100 * r[k]:.1f}" for k in ks) + " |")
    return "\n".join(lines)
