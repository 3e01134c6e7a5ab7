"""Graph encoders for the loop: map each step's subgraph (a triple list) to one vector.

The loop calls ``encode_subgraphs(subgraphs) -> [n, d]`` once per round with the NEW
subgraph of every active question, so each subgraph is encoded exactly once (RAS's reference
code re-encodes all subgraphs at every planner call). ``LoopState.graph_embedding`` averages
the per-step vectors, as RAS does before its projector.

- :class:`MeanTextGraphEncoder`: model-free baseline, the mean of the text encoder's
  embeddings of the subgraph's entities (no message passing).
- :class:`GNNGraphEncoder`: RAS's graph encoder: each subgraph becomes a RAS question graph
  (``rasfast.build_question_graph``: entity nodes, predicate and inverse-predicate edges,
  text-encoder features) and ``rasfast.GraphEncoder.encode_graphs`` (fused graph-transformer
  kernels, per-subgraph cache) pools it to one vector.
"""
from __future__ import annotations

from typing import List, Sequence

import numpy as np

from ...encode import CachedEncoder
from ...profile import TimedEncoder
from ...types import Triple


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


class GNNGraphEncoder:
    """Adapter from the loop's ``encode_subgraphs`` to :class:`rasfast.GraphEncoder`.

    Args:
        model: a ``rasfast.GraphEncoder`` (eval mode is used for inference), or None for a
            randomly initialised small one (``in_channels`` = the text encoder's dim; for
            profiling the graph-encoding cost, not for answers).
        text_encoder: the encoder of entity and predicate strings (each string encoded once).
    """

    def __init__(self, model=None, text_encoder=None, hidden: int = 256, heads: int = 4,
                 num_layers: int = 3, seed: int = 0):
        import torch
        from ...models.graph_encoder import GraphEncoder
        if text_encoder is None:
            from ...encode import HashingEncoder
            text_encoder = HashingEncoder()
        base = text_encoder.encoder if isinstance(text_encoder, TimedEncoder) else text_encoder
        self.text_encoder = TimedEncoder(base if isinstance(base, CachedEncoder) else CachedEncoder(base))
        if model is None:
            torch.manual_seed(seed)
            model = GraphEncoder(in_channels=text_encoder.dim, hidden=hidden, heads=heads,
                                 num_layers=num_layers, edge_dim=text_encoder.dim)
        self.model = model.eval()
        self.dim = getattr(model, "hidden", hidden)

    def encode_subgraphs(self, subgraphs: Sequence[Sequence[Triple]]) -> np.ndarray:
        import torch
        from ...models.question_graph import build_question_graph
        out = np.zeros((len(subgraphs), self.dim), dtype=np.float32)
        live = [j for j, sg in enumerate(subgraphs) if len(sg)]   # an empty subgraph stays zero
        if live:
            graphs = [build_question_graph(list(subgraphs[j]), self.text_encoder) for j in live]
            with torch.no_grad():
                vecs = self.model.encode_graphs(graphs)
            out[live] = vecs.detach().float().cpu().numpy()
        return out


__all__ = ["MeanTextGraphEncoder", "GNNGraphEncoder"]
