"""Graph-transformer reference: PyG's TransformerConv + LayerNorm/ReLU + global mean pool in plain torch.

Written op by op after torch_geometric's transformer_conv.py (edge term added to both key
and value, logits / sqrt(C), softmax over each destination's incoming edges, sum
aggregation, skip term, beta gate over cat([out, skip, out - skip])). Autograd-friendly:
the training path of GraphEncoder runs exactly this code.
"""
from __future__ import annotations

import math
from typing import TYPE_CHECKING, Optional, Sequence, Tuple

import torch
import torch.nn.functional as F

if TYPE_CHECKING:  # annotations only: the oracle does not depend on the ops layer
    from ..ops.graph_conv_params import ConvWeights, NormWeights


def edge_softmax(logits: torch.Tensor, dst: torch.Tensor, num_nodes: int) -> torch.Tensor:
    """Softmax of logits[E, H] over the edges sharing a destination (stable: max subtracted)."""
    h = logits.shape[1]
    mx = torch.full((num_nodes, h), float("-inf"), dtype=logits.dtype, device=logits.device)
    mx = mx.scatter_reduce(0, dst[:, None].expand(-1, h), logits, "amax", include_self=True)
    ex = (logits - mx[dst]).exp()
    den = torch.zeros((num_nodes, h), dtype=logits.dtype, device=logits.device).index_add(0, dst, ex)
    return ex / den[dst]


def transformer_conv(x: torch.Tensor, edge_index: torch.Tensor, edge_attr: Optional[torch.Tensor],
                     w: ConvWeights, norm: Optional[NormWeights] = None,
                     relu: bool = False) -> torch.Tensor:
    """One layer; edge_index [2, E] = (source, destination). Optional LayerNorm then ReLU."""
    n, hd, c = x.shape[0], w.heads, w.channels
    src, dst = edge_index[0].long(), edge_index[1].long()
    q = F.linear(x, w.w_query, w.b_query).view(n, hd, c)
    k = F.linear(x, w.w_key, w.b_key).view(n, hd, c)[src]
    v = F.linear(x, w.w_value, w.b_value).view(n, hd, c)[src]
    if w.w_edge is not None:
        e = F.linear(edge_attr, w.w_edge).view(-1, hd, c)
        k, v = k + e, v + e
    alpha = edge_softmax((q[dst] * k).sum(-1) / math.sqrt(c), dst, n)
    out = torch.zeros((n, hd, c), dtype=v.dtype, device=x.device).index_add(0, dst, v * alpha[..., None])
    out = out.reshape(n, hd * c) if w.concat else out.mean(dim=1)
    if w.w_skip is not None:
        skip = F.linear(x, w.w_skip, w.b_skip)
        if w.w_beta is not None:
            b = torch.sigmoid(F.linear(torch.cat([out, skip, out - skip], dim=-1), w.w_beta))
            out = b * skip + (1 - b) * out
        else:
            out = out + skip
    if norm is not None:
        out = F.layer_norm(out, (out.shape[-1],), norm.weight, norm.bias, norm.eps)
    return torch.relu(out) if relu else out


def graph_mean(x: torch.Tensor, graph_ptr: torch.Tensor) -> torch.Tensor:
    """Mean of the node rows of each graph (graph_ptr [G+1] over nodes); 0 for an empty graph."""
    counts = (graph_ptr[1:] - graph_ptr[:-1]).long()
    batch = torch.repeat_interleave(torch.arange(counts.numel(), device=x.device), counts)
    s = torch.zeros((counts.numel(), x.shape[1]), dtype=x.dtype, device=x.device).index_add(0, batch, x)
    return s / counts.clamp(min=1)[:, None].to(x.dtype)


def graph_transformer_pool(x: torch.Tensor, edge_index: torch.Tensor,
                           edge_attr: Optional[torch.Tensor], graph_ptr: torch.Tensor,
                           layers: Sequence[Tuple[ConvWeights, Optional[NormWeights], bool]]) -> torch.Tensor:
    """All layers ((weights, norm, relu) each) over a batch of graphs, then per-graph node means."""
    h = x
    for w, norm, relu in layers:
        h = transformer_conv(h, edge_index, edge_attr, w, norm, relu)
    return graph_mean(h, graph_ptr)
