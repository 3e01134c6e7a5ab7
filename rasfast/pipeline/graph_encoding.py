"""Graph encoders for the loop: map each step's subgraph (a triple list) to one vector.

The loop calls ``encode_subgraphs(subgraphs) -> [n, d]`` once per round with the NEW
subgraph of every active question, so each subgraph is encoded exactly once (RAS's reference
code re-encodes all subgraphs at every planner call). ``LoopState.graph_embedding`` averages
the per-step vectors, as RAS does before its projector.

- :class:`MeanTextGraphEncoder`: model-free baseline, the mean of the text encoder's
  embeddings of the subgraph's entities (no message passing).
"""
from __future__ import annotations

from typing import List, Sequence

import numpy as np

from ..encode import CachedEncoder
from ..profile import TimedEncoder
from .types import Triple


class MeanTextGraphEncoder:
    def __init__(self, encoder):
        base = encoder.encoder if isinstance(encoder, TimedEncoder) else encoder
        self.encoder = TimedEncoder(base if isinstance(base, CachedEncoder) else CachedEncoder(base))
        self.dim = encoder.dim

    def encode_subgraphs(self, subgraphs: Sequence[Sequence[Triple]]) -> np.ndarray:
        ents: List[List[str]] = [list(dict.fromkeys(x for s, _, o in sg for x in (s, o))) for sg in subgraphs]
        flat = list(dict.fromkeys(e for es in ents for e in es))
        emb = self.encoder.encode(flat) if flat else np.zeros((0, self.dim), np.float32)
        row = {e: i for i, e in enumerate(flat)}
        out = np.zeros((len(subgraphs), self.dim), dtype=np.float32)
        for j, es in enumerate(ents):
            if es:
                out[j] = emb[[row[e] for e in es]].mean(axis=0)
        return out


__all__ = ["MeanTextGraphEncoder"]
