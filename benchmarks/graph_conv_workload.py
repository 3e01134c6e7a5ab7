"""The RAS graph-encoder workload shared by the graph_conv benchmarks.

RAS configuration: in = hidden = 1024, 8 heads x 128 (concat), edge_dim 1024, 3 layers with
LayerNorm -> ReLU between them, per-graph node mean. A batch is G graphs of 30 nodes and 60
triples (120 directed edges: each triple adds subject->object and object->subject).
Features are random (seeded); weights are PyG's own initialisation with non-zero biases.
"""
from __future__ import annotations

import time
from typing import Callable, List

import torch

D, HEADS, LAYERS = 1024, 8, 3
NODES, TRIPLES = 30, 60


def make_batch(graphs: int, device="cpu", seed: int = 0, dim: int = D):
    """(x, edge_index, edge_attr, graph_ptr) for `graphs` RAS-shaped subgraphs."""
    g = torch.Generator().manual_seed(seed)
    s = torch.randint(0, NODES, (graphs, TRIPLES), generator=g)
    o = torch.randint(0, NODES, (graphs, TRIPLES), generator=g)
    off = (torch.arange(graphs) * NODES)[:, None]
    src = torch.stack([s, o], 2).reshape(graphs, -1) + off   # s->o and o->s per triple
    dst = torch.stack([o, s], 2).reshape(graphs, -1) + off
    ei = torch.stack([src.reshape(-1), dst.reshape(-1)])
    x = torch.randn(graphs * NODES, dim, generator=g)
    ea = torch.randn(graphs * 2 * TRIPLES, dim, generator=g)
    ptr = torch.arange(graphs + 1) * NODES
    return x.to(device), ei.to(device), ea.to(device), ptr.to(device)


def make_modules(device="cpu", seed: int = 0, dim: int = D, llm_hidden: int = 2048):
    """RAS's PyG modules: 3 TransformerConv, 2 LayerNorm, projector."""
    from torch_geometric.nn import TransformerConv
    torch.manual_seed(seed)
    convs = [TransformerConv(dim, dim // HEADS, heads=HEADS, edge_dim=dim).eval() for _ in range(LAYERS)]
    norms = [torch.nn.LayerNorm(dim) for _ in range(LAYERS - 1)]
    with torch.no_grad():
        for m in (*convs, *norms):
            for p in m.parameters():
                if p.dim() == 1:
                    p.normal_(0, 0.1)
    projector = torch.nn.Sequential(torch.nn.Linear(dim, 2048), torch.nn.Sigmoid(),
                                    torch.nn.Linear(2048, llm_hidden))
    mods = [m.to(device).eval() for m in (*convs, *norms, projector)]
    return mods[:LAYERS], mods[LAYERS:2 * LAYERS - 1], mods[-1]


def pyg_pool(convs, norms, x, ei, ea, ptr):
    """RAS's forward with PyG: layers, LayerNorm -> ReLU between, global_mean_pool (size given)."""
    from torch_geometric.nn import global_mean_pool
    h = x
    for i, c in enumerate(convs):
        h = c(h, ei, ea)
        if i < len(norms):
            h = torch.relu(norms[i](h))
    batch = torch.repeat_interleave(torch.arange(ptr.numel() - 1, device=x.device), ptr.diff())
    return global_mean_pool(h, batch, size=ptr.numel() - 1)


def rel_err(a: torch.Tensor, b: torch.Tensor) -> float:
    """max |a - b| / max |b|."""
    return float((a.float() - b.float()).abs().max() / b.float().abs().max().clamp(min=1e-30))


def time_interleaved(fns: List[Callable], repeats: int, sync: Callable = lambda: None) -> List[List[float]]:
    """Seconds per call of each fn, alternating fns each round so drift hits all alike."""
    out: List[List[float]] = [[] for _ in fns]
    for _ in range(repeats):
        for k, f in enumerate(fns):
            sync()
            t0 = time.perf_counter()
            f()
            sync()
            out[k].append(time.perf_counter() - t0)
    return out
