"""Reference for the segment ops (KiRAG's aligner step and document ranking; DESIGN.md s.8).

Written per query with plain torch, to be obviously correct. Both ops use one total order:

- ``segment_topk_scores``: candidates rank by (score desc, candidate position asc), where a
  candidate's position is its index j in the flat CSR candidate list (row j of ``cand_emb``,
  or entry j of ``cand_ids``).
- ``segment_max_rank``: a group's score is the max of its items' scores; groups rank by
  (score desc, group id asc). Items with score -inf are absent (a group only made of them is
  not returned, as it would be indistinguishable from padding).

Fewer than n (or k) results pad ids with -1 and scores with -inf. Scores accumulate in
float32 from any storage dtype.
"""
from __future__ import annotations

from typing import Optional, Tuple

import torch


def candidate_scores(q: torch.Tensor, cand: torch.Tensor, ptr: torch.Tensor,
                     cand_ids: Optional[torch.Tensor] = None) -> torch.Tensor:
    """float32 [M]: score of candidate j = q[query of j] . row j (or table row cand_ids[j])."""
    out = torch.empty(int(ptr[-1]), dtype=torch.float32, device=q.device)
    for b in range(q.shape[0]):
        s, e = int(ptr[b]), int(ptr[b + 1])
        rows = cand[cand_ids[s:e].long()] if cand_ids is not None else cand[s:e]
        out[s:e] = rows.float() @ q[b].float()
    return out


def segment_topk_from_scores(scores: torch.Tensor, ptr: torch.Tensor,
                             n: int) -> Tuple[torch.Tensor, torch.Tensor]:
    """Top-n candidates per segment of ``scores`` by (score desc, position asc)."""
    B = len(ptr) - 1
    ids = torch.full((B, n), -1, dtype=torch.int64, device=scores.device)
    vals = torch.full((B, n), float("-inf"), dtype=torch.float32, device=scores.device)
    for b in range(B):
        s, e = int(ptr[b]), int(ptr[b + 1])
        # a stable descending sort keeps equal scores in position order (lower first)
        order = torch.sort(scores[s:e], descending=True, stable=True).indices[:n]
        ids[b, :len(order)] = order + s
        vals[b, :len(order)] = scores[s:e][order]
    return ids, vals


def segment_topk_scores(q: torch.Tensor, cand: torch.Tensor, ptr: torch.Tensor, n: int,
                        cand_ids: Optional[torch.Tensor] = None):
    return segment_topk_from_scores(candidate_scores(q, cand, ptr, cand_ids), ptr, n)


def segment_max_rank(item_scores: torch.Tensor, item_to_group: torch.Tensor, ptr: torch.Tensor,
                     k: int) -> Tuple[torch.Tensor, torch.Tensor]:
    """Top-k groups per segment by (max item score desc, group id asc)."""
    B = len(ptr) - 1
    ids = torch.full((B, k), -1, dtype=torch.int64, device=item_scores.device)
    vals = torch.full((B, k), float("-inf"), dtype=torch.float32, device=item_scores.device)
    for b in range(B):
        s, e = int(ptr[b]), int(ptr[b + 1])
        best = {}
        for g, v in zip(item_to_group[s:e].tolist(), item_scores[s:e].float().tolist()):
            if v != float("-inf") and (g not in best or v > best[g]):
                best[g] = v
        ranked = sorted(best.items(), key=lambda gv: (-gv[1], gv[0]))[:k]
        for j, (g, v) in enumerate(ranked):
            ids[b, j] = g
            vals[b, j] = v
    return ids, vals
