"""BM25 as Lucene scores it, in plain numpy: the oracle for rasfast.index.bm25 (bm25s).

    idf(t)      = ln(1 + (N - df(t) + 0.5) / (df(t) + 0.5))
    score(q, d) = sum over the distinct query tokens t of
                  idf(t) * tf(t, d) / (tf(t, d) + k1 * (1 - b + b * |d| / avgdl))

(Lucene 8+ drops the constant (k1 + 1) factor, which ranks the same), over already tokenized
documents (lists of tokens); a query token repeated counts every time, as bm25s counts it.
"""
from __future__ import annotations

import math
from collections import Counter
from typing import List, Sequence

import numpy as np


def bm25_scores(docs: Sequence[Sequence[str]], query: Sequence[str], k1: float = 1.5,
                b: float = 0.75) -> np.ndarray:
    n = len(docs)
    if n == 0:
        return np.zeros(0)
    tfs: List[Counter] = [Counter(d) for d in docs]
    lens = np.array([len(d) for d in docs], dtype=np.float64)
    avgdl = lens.mean() if lens.sum() > 0 else 1.0
    out = np.zeros(n)
    for t in query:
        df = sum(1 for c in tfs if t in c)
        if df == 0:
            continue
        idf = math.log(1 + (n - df + 0.5) / (df + 0.5))
        for i, c in enumerate(tfs):
            tf = c.get(t, 0)
            if tf:
                out[i] += idf * tf / (tf + k1 * (1 - b + b * lens[i] / avgdl))
    return out
