"""Question graphs as RAS builds them: entity nodes, two directed edges per triple.

For a triple (subject, predicate, object) RAS adds subject -> object labelled with the
predicate and object -> subject labelled "inverse_<predicate>". Node features are the
embeddings of the entity strings, edge features those of the edge labels, both from any
:class:`rasfast.encode.Encoder`, memoised so that each distinct string is encoded once
(across all graphs built with the same encoder).
"""
from __future__ import annotations

import dataclasses
import hashlib
import weakref
from typing import Iterable, List, Optional, Sequence, Tuple

import numpy as np
import torch

from ..encode import CachedEncoder, Encoder, default_encoder

INVERSE_PREFIX = "inverse_"


@dataclasses.dataclass(eq=False)
class QuestionGraph:
    """One subgraph: x [n, d], edge_index [2, E] (source, destination), edge_attr [E, d]."""
    x: torch.Tensor
    edge_index: torch.Tensor
    edge_attr: torch.Tensor
    nodes: List[str]
    edge_labels: List[str]
    _key: Optional[str] = dataclasses.field(default=None, repr=False)

    @property
    def num_nodes(self) -> int:
        return self.x.shape[0]

    @property
    def num_edges(self) -> int:
        return self.edge_index.shape[1]

    def key(self) -> str:
        """Content hash of the features and edges (the GraphEncoder cache key)."""
        if self._key is None:
            h = hashlib.blake2b(digest_size=20)
            for t in (self.x, self.edge_index, self.edge_attr):
                t = t.detach().cpu().contiguous()
                h.update(str((t.dtype, tuple(t.shape))).encode())
                h.update(t.view(torch.uint8).numpy().tobytes() if t.numel() else b"")
            self._key = h.hexdigest()
        return self._key


# One string cache per encoder object, so repeated calls never re-encode a string.
_CACHES: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()
_DEFAULT: List[CachedEncoder] = []


def _cached(encoder: Optional[Encoder]) -> CachedEncoder:
    if encoder is None:
        if not _DEFAULT:
            _DEFAULT.append(CachedEncoder(default_encoder()))
        return _DEFAULT[0]
    if isinstance(encoder, CachedEncoder):
        return encoder
    if not hasattr(encoder, "encode") or not hasattr(encoder, "dim"):
        raise TypeError(f"encoder: expected a rasfast.encode.Encoder, got {type(encoder).__name__}")
    try:
        c = _CACHES.get(encoder)
        if c is None:
            c = _CACHES[encoder] = CachedEncoder(encoder)
    except TypeError:  # not weak-referenceable: cache for this call only
        c = CachedEncoder(encoder)
    return c


def _check_triples(triples) -> List[Tuple[str, str, str]]:
    if isinstance(triples, (str, bytes)) or not isinstance(triples, Iterable):
        raise TypeError("triples: expected an iterable of (subject, predicate, object) strings")
    out = []
    for i, t in enumerate(triples):
        if not isinstance(t, (tuple, list)) or len(t) != 3 or not all(isinstance(s, str) for s in t):
            raise ValueError(f"triples[{i}]: expected (subject, predicate, object) strings, got {t!r}")
        out.append((t[0].strip(), t[1].strip(), t[2].strip()))
    return out


def build_question_graph(triples, encoder: Optional[Encoder] = None,
                         inverse_prefix: str = INVERSE_PREFIX,
                         dtype: torch.dtype = torch.float32) -> QuestionGraph:
    """A :class:`QuestionGraph` from (subject, predicate, object) triples, RAS-style.

    Args:
        triples: iterable of 3-tuples of strings; an empty iterable gives an empty graph.
        encoder: any rasfast.encode Encoder (default: all-MiniLM-L6-v2 when installed, else
            the hashing encoder); strings are memoised per encoder object.
        inverse_prefix: label prefix of the reversed edge.
        dtype: dtype of x and edge_attr.

    Returns:
        QuestionGraph with unique entity nodes in order of first appearance, edges
        [s->o (p), o->s (inverse_prefix + p)] per triple, in triple order.
    """
    ts = _check_triples(triples)
    enc = _cached(encoder)
    index = {}
    for s, _, o in ts:
        for name in (s, o):
            index.setdefault(name, len(index))
    nodes = list(index)
    src, dst, labels = [], [], []
    for s, p, o in ts:
        src += [index[s], index[o]]
        dst += [index[o], index[s]]
        labels += [p, inverse_prefix + p]
    feats = enc.encode(nodes + labels) if (nodes or labels) else np.zeros((0, enc.dim), np.float32)
    feats = torch.from_numpy(np.ascontiguousarray(feats, dtype=np.float32)).to(dtype)
    return QuestionGraph(x=feats[:len(nodes)].contiguous(),
                         edge_index=torch.tensor([src, dst], dtype=torch.int64).reshape(2, -1),
                         edge_attr=feats[len(nodes):].contiguous(), nodes=nodes, edge_labels=labels)


def batch_graphs(graphs: Sequence[QuestionGraph]):
    """(x, edge_index, edge_attr, graph_ptr) of several graphs as one disjoint graph."""
    if not graphs:
        raise ValueError("graphs: expected at least one QuestionGraph")
    for i, g in enumerate(graphs):
        if not isinstance(g, QuestionGraph):
            raise TypeError(f"graphs[{i}]: expected a QuestionGraph, got {type(g).__name__}")
    counts = torch.tensor([g.num_nodes for g in graphs], dtype=torch.int64)
    ptr = torch.zeros(len(graphs) + 1, dtype=torch.int64)
    torch.cumsum(counts, 0, out=ptr[1:])
    x = torch.cat([g.x for g in graphs])
    ei = torch.cat([g.edge_index + ptr[k] for k, g in enumerate(graphs)], dim=1)
    ea = torch.cat([g.edge_attr for g in graphs])
    return x, ei, ea, ptr
