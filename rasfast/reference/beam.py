"""triple_beam_search references: GEAR's Algorithm 1 (DESIGN.md section 4), twice.

* :func:`beam_search_python` -- a direct transcription with lists and loops (one query,
  Python floats). It is the readable statement of the algorithm and the "pure-Python"
  benchmark peer.
* :func:`beam_search_torch` -- the vectorised torch reference, the oracle of every
  backend. Scoring is pluggable (:class:`SumScorer`, :class:`TextScorer`; the Triton
  backend plugs in a Triton scorer), the selection logic is shared.

The exact semantics every backend implements (one query):

1. Seeds are deduplicated. Seed t scores ``score(q, [t])``; the top ``b`` by
   (score desc, triple id asc) become the beams, in that order (beam index = position).
2. Step i = 1..l-1. ``V`` = every triple in the current beams. For beam j = <s, T>, each
   neighbour t of T's last triple with t not in V is a candidate with value
   ``v = s + score(q, T+t)`` (float32). The beam's candidates are ranked by (v desc, id
   asc); with ``max_neighbors`` only ranks < max_neighbors are kept. The n-th (0-based)
   gets ``d = v * exp(-min(n, gamma)/gamma)`` computed in float64 (so that the constant
   tail factor never merges two distinct float32 values). All beams' candidates are
   ordered by (d desc, triple id asc, beam index asc); the first b are the new beams with
   score ``float32(d)``. If there is no candidate at all, the search stops and the current
   beams are the result.
3. ``score(q, S) = dot(q, u) / (|q| * sqrt(dot(u, u)))`` (0 when the denominator is 0),
   with ``u`` the float32 running sum of the sequence's triple embeddings (``u(T+t) =
   u(T) + emb(t)``, elementwise), ``|q|`` computed once per query.
"""
from __future__ import annotations

import math
from typing import List, Optional, Sequence, Tuple

import torch


def decay_factors(gamma: float, max_rank: int) -> List[float]:
    """``f[n] = exp(-min(n, gamma)/gamma)`` for n = 0..T; ranks above T use ``f[T]``.

    ``T = min(ceil(gamma), max_rank)``: from ceil(gamma) on the factor is constant
    (exp(-1)), and no rank exceeds ``max_rank`` - 1 (the largest neighbour list).
    """
    t = max(0, min(math.ceil(gamma), int(max_rank)))
    return [math.exp(-min(n, gamma) / gamma) for n in range(t + 1)]


# --------------------------------------------------------------------------------------
# (a) Direct transcription of Algorithm 1: lists, loops, Python floats.
# --------------------------------------------------------------------------------------

def beam_search_python(indptr: Sequence[int], indices: Sequence[int], emb, q: Sequence[float],
                       seeds: Sequence[int], beam_width: int, max_len: int, gamma: float,
                       max_neighbors: Optional[int] = None) -> Tuple[List[List[int]], List[float]]:
    """One query; returns (sequences, scores) of the final beams, best first.

    ``emb[t]`` must give triple t's embedding as an iterable of numbers (a list of lists,
    or a 2-D numpy array). Inputs are assumed valid (the public op validates).
    """
    qv = [float(x) for x in q]
    qnorm = math.sqrt(sum(x * x for x in qv))
    rows = {}

    def row(t):
        if t not in rows:
            rows[t] = [float(x) for x in emb[t]]
        return rows[t]

    def score(u):
        dot = sum(a * b for a, b in zip(qv, u))
        den = qnorm * math.sqrt(sum(x * x for x in u))
        return dot / den if den > 0 else 0.0

    beams = []  # (s, sequence, running sum of its embeddings)
    for t in sorted(set(int(x) for x in seeds)):
        beams.append((score(row(t)), [t], row(t)))
    beams.sort(key=lambda beam: (-beam[0], beam[1][0]))
    beams = beams[:beam_width]
    for _step in range(1, max_len):
        visited = {t for _, seq, _ in beams for t in seq}
        pool = []
        for j, (s, seq, u) in enumerate(beams):
            last = seq[-1]
            cands = []
            for t in indices[indptr[last]:indptr[last + 1]]:
                t = int(t)
                if t in visited:
                    continue
                w = [a + b for a, b in zip(u, row(t))]
                cands.append((s + score(w), t, w))
            cands.sort(key=lambda c: (-c[0], c[1]))
            if max_neighbors is not None:
                cands = cands[:max_neighbors]
            for n, (v, t, w) in enumerate(cands):
                # the decay multiplies the CUMULATIVE value: negative values move toward 0
                pool.append((v * math.exp(-min(n, gamma) / gamma), t, j, seq + [t], w))
        if not pool:
            break  # no beam can extend: the previous beams are the result
        pool.sort(key=lambda c: (-c[0], c[1], c[2]))
        beams = [(d, seq, w) for d, _t, _j, seq, w in pool[:beam_width]]
    return [seq for _, seq, _ in beams], [s for s, _, _ in beams]


# --------------------------------------------------------------------------------------
# (b) Vectorised torch reference (per query; shared selection, pluggable scoring).
# --------------------------------------------------------------------------------------

def cosine(q: torch.Tensor, qnorm: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    """score = dot(q, u) / (|q| * sqrt(dot(u, u))) for each row of u; see cosine_from_parts."""
    return cosine_from_parts(u @ q, (u * u).sum(dim=1), qnorm)


def sqrt_rn(x: torch.Tensor) -> torch.Tensor:
    """The float32 square root correctly rounded, as C++'s std::sqrt and CUDA's sqrtf give it:
    through float64 (53 >= 2 * 24 + 2 bits, so rounding the double root gives the float
    one). torch's own float32 sqrt on the CPU is not always correctly rounded: torch 2.13 on
    a Zen 4 gives 1.6201852560 for sqrt(2.625), one ulp above 1.6201851368; the beam
    backends then disagreed in the last bit and, on a near-tie, in the order of two
    sequences (a ~3% flaky test)."""
    return torch.sqrt(x.double()).to(x.dtype)


def cosine_from_parts(dot: torch.Tensor, nn: torch.Tensor, qnorm: torch.Tensor) -> torch.Tensor:
    """dot / (|q| * sqrt(nn)), 0 where the denominator is 0.

    Raises ValueError when a dot product is not finite (NaN/inf embedding rows, or
    float32 overflow), which every backend checks the same way.
    """
    if not (torch.isfinite(dot).all() and torch.isfinite(nn).all()):
        raise ValueError("triple_emb: a row read by the search contains NaN/inf values "
                         "(or its squared norm overflows float32)")
    den = qnorm * sqrt_rn(nn)
    return torch.where(den > 0, dot / torch.where(den > 0, den, torch.ones_like(den)),
                       torch.zeros_like(dot))


class SumScorer:
    """scoring="sum": cosine(q, running float32 sum of the sequence's embeddings)."""

    def __init__(self, emb: torch.Tensor, q: torch.Tensor, qnorm: torch.Tensor):
        self.emb, self.q, self.qnorm = emb, q.float(), qnorm.float()

    def start(self, i: int, seeds: torch.Tensor):
        u = self.emb[seeds].float()
        return cosine(self.q[i], self.qnorm[i], u), u

    def extend(self, i: int, state: torch.Tensor, seqs: torch.Tensor, parent: torch.Tensor,
               cand: torch.Tensor):
        u = state[parent] + self.emb[cand].float()
        return cosine(self.q[i], self.qnorm[i], u), u


class TextScorer:
    """scoring="text" (exact GEAR): cosine(q, encoder(" ".join(triple texts))).

    All candidate strings of one query and step are encoded in one batch; strings seen
    before in the call are not re-encoded.
    """

    def __init__(self, encoder, texts: Sequence[str], q: torch.Tensor, qnorm: torch.Tensor):
        self.encoder, self.texts = encoder, texts
        self.q, self.qnorm = q.float(), qnorm.float()
        self.cache = {}

    def _scores(self, i: int, seqs: List[List[int]]) -> torch.Tensor:
        strings = [" ".join(self.texts[t] for t in seq) for seq in seqs]
        todo = list(dict.fromkeys(s for s in strings if s not in self.cache))
        if todo:
            out = torch.as_tensor(self.encoder.encode(todo)).float().cpu()
            if out.dim() != 2 or out.shape[0] != len(todo) or out.shape[1] != self.q.shape[1]:
                raise ValueError(f"encoder: encode() must return [n, {self.q.shape[1]}] "
                                 f"embeddings, got shape {tuple(out.shape)}")
            self.cache.update(zip(todo, out))
        u = torch.stack([self.cache[s] for s in strings]).to(self.q.device)
        return cosine(self.q[i], self.qnorm[i], u)

    def start(self, i, seeds):
        return self._scores(i, [[int(t)] for t in seeds]), torch.empty(len(seeds), 0)

    def extend(self, i, state, seqs, parent, cand):
        rows = seqs[parent].tolist()
        full = [r + [int(t)] for r, t in zip(rows, cand.tolist())]
        return self._scores(i, full), torch.empty(len(full), 0)


def neighbours(indptr: torch.Tensor, indices: torch.Tensor, last: torch.Tensor,
               n: int) -> Tuple[torch.Tensor, torch.Tensor]:
    """(parent beam, neighbour id) for every neighbour of every beam's last triple.

    Grouped by parent, in row order. The rows read are checked: ids in [0, n) and
    strictly increasing (sorted, no duplicates), as the CSR contract requires.
    """
    starts, ends = indptr[last], indptr[last + 1]
    counts = ends - starts
    total = int(counts.sum())
    parent = torch.repeat_interleave(torch.arange(len(last), device=last.device), counts)
    first = torch.cumsum(counts, 0) - counts
    offs = torch.arange(total, device=last.device) - first[parent]
    cand = indices[starts[parent] + offs].long()
    if total:
        if bool(((cand < 0) | (cand >= n)).any()):
            raise ValueError(f"graph.indices: a neighbour id is out of range [0, {n})")
        inner = offs[1:] > 0
        if bool((cand[1:][inner] <= cand[:-1][inner]).any()):
            raise ValueError("graph.indices: a neighbour list is not strictly increasing "
                             "(rows must be sorted, without duplicates)")
    return parent, cand


def beam_search_torch(indptr: torch.Tensor, indices: torch.Tensor, n: int, seed_ptr: torch.Tensor,
                      seed_ids: torch.Tensor, scorer, beam_width: int, max_len: int,
                      decay: torch.Tensor, max_neighbors: Optional[int] = None):
    """All queries (a loop), each vectorised. ``seed_ids`` per query must be unique and
    ascending (the op normalises seeds); ``decay`` is :func:`decay_factors` as float64.

    Returns (sequences[B, b, l] int64 -1 padded, scores[B, b] float32 -inf padded,
    lengths[B] int64, num_beams[B] int64).
    """
    dev = seed_ids.device
    B, b, L = len(seed_ptr) - 1, beam_width, max_len
    out_seq = torch.full((B, b, L), -1, dtype=torch.int64, device=dev)
    out_score = torch.full((B, b), float("-inf"), dtype=torch.float32, device=dev)
    lengths = torch.zeros(B, dtype=torch.int64, device=dev)
    counts = torch.zeros(B, dtype=torch.int64, device=dev)
    tail = len(decay) - 1
    for i in range(B):
        seeds = seed_ids[int(seed_ptr[i]):int(seed_ptr[i + 1])]
        if seeds.numel() == 0:
            continue
        sc, state = scorer.start(i, seeds)
        top = torch.sort(sc, descending=True, stable=True).indices[:b]  # ties: lower id
        seqs, s, state = seeds[top].unsqueeze(1), sc[top], state[top]
        for _step in range(1, L):
            parent, cand = neighbours(indptr, indices, seqs[:, -1], n)
            fresh = ~torch.isin(cand, seqs.reshape(-1))  # not in any current beam
            parent, cand = parent[fresh], cand[fresh]
            if cand.numel() == 0:
                break  # no beam can extend: keep the current beams
            sc, new_state = scorer.extend(i, state, seqs, parent, cand)
            v = s[parent] + sc
            # rank within each beam by (v desc, id asc): ids ascend within a parent group,
            # so a stable sort by v then a stable sort by parent gives exactly that order
            o = torch.sort(v, descending=True, stable=True).indices
            o = o[torch.sort(parent[o], stable=True).indices]
            parent, cand, v, new_state = parent[o], cand[o], v[o], new_state[o]
            per_beam = torch.bincount(parent, minlength=len(seqs))
            rank = torch.arange(len(cand), device=dev) - (torch.cumsum(per_beam, 0) - per_beam)[parent]
            if max_neighbors is not None:
                keep = rank < max_neighbors
                parent, cand, v, new_state, rank = (parent[keep], cand[keep], v[keep],
                                                    new_state[keep], rank[keep])
            d = v.double() * decay[rank.clamp(max=tail)]
            # global order (d desc, id asc, beam asc): arrays are in beam order already
            o = torch.sort(cand, stable=True).indices
            o = o[torch.sort(d[o], descending=True, stable=True).indices][:b]
            seqs = torch.cat([seqs[parent[o]], cand[o].unsqueeze(1)], dim=1)
            s, state = d[o].float(), new_state[o]
        k, length = seqs.shape
        out_seq[i, :k, :length] = seqs
        out_score[i, :k] = s
        lengths[i], counts[i] = length, k
    return out_seq, out_score, lengths, counts

