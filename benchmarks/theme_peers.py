"""The peers theme_scoped_search is measured against (issue 3), as plain functions.

Each takes float32 numpy arrays (q_ppd[B,T], q_emb[B,D], corpus_ppd[N,T], corpus_emb[N,D])
and returns (ids[B,k], scores[B,k]) for theme_weight = 0, metric l2.
"""
from __future__ import annotations

import numpy as np
import torch


class FaissPeer:
    """faiss IndexFlatL2.search(k=K) for the scope, then knn_inner_products_by_idx (the
    restricted dense search over each query's K ids). The index is built once, outside
    the timed call, as a user of faiss would."""

    def __init__(self, corpus_ppd: np.ndarray, corpus_emb: np.ndarray):
        import faiss
        self.faiss = faiss
        self.index = faiss.IndexFlatL2(corpus_ppd.shape[1])
        self.index.add(corpus_ppd)
        self.emb = np.ascontiguousarray(corpus_emb)

    def scope(self, q_ppd: np.ndarray, K: int) -> np.ndarray:
        return self.index.search(q_ppd, K)[1]

    def __call__(self, q_ppd, q_emb, K: int, k: int):
        f = self.faiss
        scope = np.ascontiguousarray(self.scope(q_ppd, K))
        B, D = q_emb.shape
        vals = np.empty((B, k), dtype=np.float32)
        ids = np.empty((B, k), dtype=np.int64)
        q_emb = np.ascontiguousarray(q_emb)
        f.knn_inner_products_by_idx(f.swig_ptr(q_emb), f.swig_ptr(self.emb), f.swig_ptr(scope),
                                    D, B, self.emb.shape[0], K, k, f.swig_ptr(vals),
                                    f.swig_ptr(ids), K)  # explicit ld_ids: some versions default it to ny
        return ids, vals


def torch_peer(q_ppd, q_emb, corpus_ppd, corpus_emb, K: int, k: int, corpus_norms=None):
    """torch: matmul distances + topk + gather + batched matmul + topk."""
    q, c = torch.from_numpy(q_ppd), torch.from_numpy(corpus_ppd)
    qe, e = torch.from_numpy(q_emb), torch.from_numpy(corpus_emb)
    cn = (c * c).sum(1) if corpus_norms is None else corpus_norms
    d = (q * q).sum(1, keepdim=True) + cn[None, :] - 2.0 * (q @ c.T)
    scope = torch.topk(d, K, dim=1, largest=False, sorted=False).indices  # [B, K]
    rows = e[scope]  # [B, K, D] gathered
    s = torch.bmm(rows, qe[:, :, None])[:, :, 0]
    top = torch.topk(s, k, dim=1)
    return torch.gather(scope, 1, top.indices).numpy(), top.values.numpy()


class RasPeer:
    """The RAS reference approach: scope with faiss, then per query gather the K scope
    vectors, build a fresh IndexFlatIP from them and search it."""

    def __init__(self, faiss_peer: FaissPeer):
        self.fp = faiss_peer

    def __call__(self, q_ppd, q_emb, K: int, k: int):
        f = self.fp.faiss
        scope = self.fp.scope(q_ppd, K)
        B = q_emb.shape[0]
        ids = np.empty((B, k), dtype=np.int64)
        vals = np.empty((B, k), dtype=np.float32)
        for b in range(B):
            sub = self.fp.emb[scope[b]]
            idx = f.IndexFlatIP(sub.shape[1])
            idx.add(sub)
            v, i = idx.search(q_emb[b:b + 1], k)
            ids[b] = scope[b][i[0]]
            vals[b] = v[0]
        return ids, vals
