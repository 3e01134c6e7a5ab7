"""CPU plan of the graph-transformer layers: GEMMs (cpu_gemm: oneDNN or BLAS) around the OpenMP kernels of csrc/graph_conv.

Where the time goes (RAS: in = 1024, 8 heads x 128, edge_dim 1024, ~4 edges per node): the
dense projections. PyG projects edge_attr for every edge (E x De x HC flops, as much as four
node projections at E = 4N) and then runs ~25 memory-bound tensor ops. Here:

- query/key/value/skip are ONE GEMM (weights stacked once, cached).
- edge features are not projected per edge when E > 2N ("factored" form): since the edge
  projection is linear, q.(W_e a) = (W_e^T q).a and sum alpha (v + W_e a) = sum alpha v +
  W_e (sum alpha a), so the kernel works on raw edge_attr and two per-node GEMMs
  (N x H x C x De each) replace the per-edge one. With few edges the direct form is cheaper
  and is used instead.
- the last layer of graph_transformer_pool, when nothing nonlinear follows it, is averaged
  before it is projected: mean_i sum_j alpha_ij W_v x_j = W_v (mean_i sum_j alpha_ij x_j),
  so value/edge/skip projections run on G pooled rows instead of N nodes.
"""
from __future__ import annotations

import math

from typing import Optional

import numpy as np
import torch

from .. import dispatch as _bk
from .._arrays import DTYPE_CODES, cpu_buffer, cpu_out
from .._threads import torch_width
from ..reference.graph_conv import graph_mean
from . import cpu_gemm, host_scratch
from .graph_conv_params import cached_on, packed_node_biases, packed_node_weights


def _per_head_t(w, name: str) -> torch.Tensor:
    """Weight ``name`` [H*C, D] as float32 [H, D, C] contiguous (cached): B operand of per-head GEMMs."""
    t = getattr(w, name)
    return cached_on(w, ("per_head_t", name),
                     lambda: t.float().view(w.heads, w.channels, -1).transpose(1, 2).contiguous())

_EMPTY_I64 = np.empty(0, dtype=np.int64)
# the intermediates here are large (64 MB at the RAS size): reused, not allocated per call
_scratch = host_scratch.buffer
clear_workspace = host_scratch.clear


def _empty2(dtype: torch.dtype) -> np.ndarray:
    return cpu_buffer(torch.empty((0, 0), dtype=dtype))[0]


def _factored(num_edges: int, num_nodes: int) -> bool:
    """Project edge_attr per node (two N-row GEMMs) rather than per edge (one E-row GEMM)?"""
    return num_edges > 2 * num_nodes


def _attend(csr, nodes, val, val_dim, val_head, qe, qe_head, ed, ed_head, ed_dim, w, rows,
            graph_ptr=None, tag="", eid=None):
    """Runs graph_conv_attend; returns (out1 [H, rows, val_dim], out2 [H, rows, ed_dim] | None).
    ``eid``: the row of ``ed`` each CSR edge reads (default csr.eid; RowGroups.edge_rows when
    ``ed`` holds only the distinct edge rows)."""
    h, c = w.heads, w.channels
    code = DTYPE_CODES[nodes.dtype]
    out1 = _scratch(tag + "out1", (h, rows, val_dim))
    out2 = _scratch(tag + "out2", (h, rows, ed_dim)) if ed_dim else None
    _bk.cpu_module().graph_conv_attend(
        csr.indptr.numpy(), csr.src.numpy(), csr.eid.numpy() if eid is None else eid, code,
        cpu_buffer(nodes)[0], 0, h * c, cpu_buffer(val)[0], 0 if val is not nodes else 2 * h * c,
        val_head, val_dim,
        cpu_buffer(qe)[0] if ed_dim else _empty2(nodes.dtype), 0, qe_head,
        cpu_buffer(ed)[0] if ed_dim else _empty2(nodes.dtype), 0, ed_head, ed_dim,
        h, c, 1.0 / math.sqrt(c), _EMPTY_I64 if graph_ptr is None else graph_ptr.numpy(),
        cpu_out(out1), cpu_out(out2) if ed_dim else _empty2(torch.float32))
    return out1, out2


def _edge_rows(groups) -> Optional[np.ndarray]:
    return None if groups is None else groups.edge_rows


_PROBES = {}


_BITS = {1: torch.int8, 2: torch.int16, 4: torch.int32, 8: torch.int64}


def _probe(dim: int) -> torch.Tensor:
    """A fixed random odd int64 vector per width, made once: the row-grouping hash."""
    t = _PROBES.get(dim)
    if t is None:
        g = torch.Generator().manual_seed(0x5EED)
        t = _PROBES[dim] = torch.randint(1, 1 << 62, (dim,), generator=g) | 1
    return t


_KEY_COLUMNS = 32


def _row_keys(rows: torch.Tensor) -> torch.Tensor:
    """An int64 hash of each row's bits in up to 32 evenly spaced columns: integer products
    summed with wrap-around, exact and independent of the row's position. (A float product
    rows @ probe is not: the H100 machine's BLAS gave equal rows different keys, so they were
    not grouped.) Rows equal in those columns but not elsewhere collide, which the caller's
    check turns into no grouping, never a wrong one."""
    d = rows.shape[1]
    cols = torch.linspace(0, d - 1, min(d, _KEY_COLUMNS)).round().long().unique()
    bits = rows[:, cols].contiguous().view(_BITS[rows.element_size()]).to(torch.int64)
    return (bits * _probe(cols.numel())).sum(1)


class RowGroups:
    """The distinct rows of a matrix and where each row went, when there are few of them.

    RAS's question graphs repeat themselves: every edge's feature is the embedding of its
    predicate (or "inverse_<predicate>"), and the subgraphs of one question share entities.
    A projection ``rows @ W`` then only needs the distinct rows: ``(distinct @ W)[inverse]``,
    exactly the same values (each output row is computed from an equal input row). Rows are
    grouped by a random projection and verified equal element by element, so a collision
    only costs the saving, never correctness.
    """

    def __init__(self, rows: torch.Tensor, csr=None):
        self.distinct: Optional[torch.Tensor] = None
        self.inverse: Optional[torch.Tensor] = None
        self.edge_rows: Optional[np.ndarray] = None  # per CSR edge, its row of `distinct`
        n = rows.shape[0]
        if n < 64 or rows.dim() != 2:
            return
        key = _row_keys(rows)  # equal rows, equal keys; unequal: almost never
        uniq, inverse = torch.unique(key, return_inverse=True)
        if uniq.numel() > 0.6 * n:          # too few repeats to pay for the gather
            return
        first = torch.full((uniq.numel(),), n, dtype=torch.int64)
        first.scatter_reduce_(0, inverse, torch.arange(n), reduce="amin")
        distinct = rows[first]
        if not torch.equal(distinct[inverse], rows):   # a hash collision: no grouping
            return
        self.distinct, self.inverse = distinct.contiguous(), inverse
        if csr is not None:  # edge features: the kernel reads distinct rows directly
            self.edge_rows = inverse[csr.eid].numpy()

    def linear(self, rows: torch.Tensor, weight: torch.Tensor, bias=None) -> torch.Tensor:
        if self.distinct is None:
            return cpu_gemm.linear(rows, weight, bias)
        return cpu_gemm.linear(self.distinct, weight, bias)[self.inverse]


def _edge_operands(csr, ea, w, nodes, n, ea_groups: Optional[RowGroups] = None,
                   direct: bool = False):
    """(qe, qe_head, ed, ed_head, ed_dim, w_edge per head [H, C, De] or None) for either form.
    With ``ea_groups`` holding distinct edge rows, ``ed`` has only those rows (read through
    ``ea_groups.edge_rows``). ``direct``: the per-edge projection whatever the edge count
    (training: the backward needs the projected rows, so the forward's GEMM is not extra)."""
    h, c = w.heads, w.channels
    if ea is None:
        return None, 0, None, 0, 0, None
    grouped = ea_groups is not None and ea_groups.edge_rows is not None
    if direct or not _factored(csr.num_edges, n):
        # [E or U, HC]: PyG's per-edge projection, once per distinct edge feature
        e = cpu_gemm.linear(ea_groups.distinct if grouped else ea, w.w_edge).contiguous()
        return nodes, c, e, c, c, None
    if grouped:
        ea = ea_groups.distinct
    we = w.w_edge.view(h, c, -1)                        # head h: rows h*C .. h*C+C
    q = nodes[:, :h * c].view(n, h, c).transpose(0, 1)  # [H, N, C]
    qe = cpu_gemm.bmm(q, we, _scratch("qe", (h, n, we.shape[2]), nodes.dtype)).view(h * n, -1)
    return qe, n * qe.shape[1], ea, 0, ea.shape[1], we


def _layer_work(n: int, w) -> int:
    """Multiply-adds of a layer's node projections (the bulk of a small graph's work)."""
    return n * w.in_channels * (3 * w.heads * w.channels + w.out_channels)


def conv_layer(x, csr, ea, w, norm, relu, x_groups: Optional[RowGroups] = None,
               ea_groups: Optional[RowGroups] = None, saved: Optional[dict] = None):
    """One layer on CPU tensors: [N, out_channels] in x's dtype. ``x_groups``/``ea_groups``:
    repeated input rows, projected once (see :class:`RowGroups`). ``saved``: a dict that
    receives the intermediates the backward needs (fresh tensors, not scratch): "nodes"
    [N, 3HC (+ skip)] (the q/k/v/skip projections), "agg" [N, H, C] float32 (the
    attention output before the epilogue) and "e_rows" (edge_attr's rows -- its distinct
    rows with ``ea_groups`` -- projected, [rows, HC]; the direct form is used)."""
    with torch_width(_layer_work(x.shape[0], w)):
        return _conv_layer(x, csr, ea, w, norm, relu, x_groups, ea_groups, saved)


def _packed_for_step(w):
    """(W, b) as :func:`packed_node_weights`, W in this thread's scratch: a training step's
    weights are new every step, so the inference path's cache would not keep them, and a
    fresh [4HC, Din] copy a layer paid its page faults every step (the per-question training
    step on Zen 5: the packing 8.6 ms of 70). Used at once by the layer's projection only."""
    mats = [w.w_query, w.w_key, w.w_value] + ([w.w_skip] if w.w_skip is not None else [])
    rows = sum(m.shape[0] for m in mats)
    wn = torch.cat(mats, 0, out=_scratch("train_packed_w", (rows, mats[0].shape[1]), mats[0].dtype))
    return wn, packed_node_biases(w)


def _conv_layer(x, csr, ea, w, norm, relu, x_groups, ea_groups, saved=None):
    n, h, c = x.shape[0], w.heads, w.channels
    wn, bn = packed_node_weights(w) if saved is None else _packed_for_step(w)
    if x_groups is not None and x_groups.distinct is not None:
        nodes = x_groups.linear(x, wn, bn).contiguous()
    elif saved is not None:
        nodes = cpu_gemm.linear(x, wn, bn).contiguous()
    else:
        nodes = cpu_gemm.linear(x, wn, bn, out=_scratch("nodes", (n, wn.shape[0]), x.dtype))
    qe, qe_head, ed, ed_head, ed_dim, we = _edge_operands(csr, ea, w, nodes, n, ea_groups,
                                                          direct=saved is not None)
    out1, out2 = _attend(csr, nodes, nodes, c, c, qe, qe_head, ed, ed_head, ed_dim, w, n,
                         eid=_edge_rows(ea_groups))
    if out2 is None:
        agg = out1
    elif we is None:
        agg = out1.add_(out2)
    else:
        agg = cpu_gemm.bmm(out2, _per_head_t(w, "w_edge"), _scratch("agg", out1.shape), add=out1)
    if saved is not None:
        saved["nodes"], saved["agg"] = nodes, agg.transpose(0, 1).contiguous()
        saved["e_rows"] = ed
    return _epilogue(agg, nodes, w, norm, relu)


def _epilogue(agg, nodes, w, norm, relu):
    n, f = agg.shape[1], w.out_channels
    out = torch.empty((n, f), dtype=nodes.dtype)
    f32 = lambda t: cpu_buffer(t.float().contiguous())[0]  # noqa: E731
    empty = np.empty(0, dtype=np.float32)
    has_ln = norm is not None
    ln_w = f32(norm.weight) if has_ln and norm.weight is not None else np.ones(f, np.float32)
    ln_b = f32(norm.bias) if has_ln and norm.bias is not None else np.zeros(f, np.float32)
    _bk.cpu_module().graph_conv_epilogue(
        cpu_buffer(agg)[0], w.heads, w.channels, w.concat, DTYPE_CODES[nodes.dtype],
        cpu_buffer(nodes)[0], 3 * w.heads * w.channels, w.root_weight,
        f32(w.w_beta.reshape(-1)) if w.beta else empty, ln_w, ln_b, has_ln,
        float(norm.eps) if has_ln else 0.0, relu, cpu_out(out))
    return out


def _pooled_last_layer(x, csr, ea, gp, w, ea_groups: Optional[RowGroups] = None):
    """Last layer averaged per graph before its value/edge/skip projections: [G, out]."""
    n, h, c = x.shape[0], w.heads, w.channels
    g = gp.numel() - 1
    wn, bn = packed_node_weights(w, with_skip=False)
    nodes = cpu_gemm.linear(x, wn[:2 * h * c], bn[:2 * h * c],             # [N, 2HC]: q, k
                            out=_scratch("nodes_qk", (n, 2 * h * c), x.dtype))
    qe, qe_head, ed, ed_head, ed_dim, we = _edge_operands(csr, ea, w, nodes, n, ea_groups)
    out1, out2 = _attend(csr, nodes, x, x.shape[1], 0, qe, qe_head, ed, ed_head, ed_dim, w, g, gp,
                         "pooled_", eid=_edge_rows(ea_groups))
    counts = gp.diff()
    # share of each graph's nodes that have an incoming edge (their softmax weights sum to 1)
    has_in = (csr.indptr.diff() > 0).float()[:, None]
    frac = graph_mean(has_in, gp)[:, 0]
    f32 = lambda t: t.float()  # noqa: E731
    agg = cpu_gemm.bmm(out1, _per_head_t(w, "w_value"), out1.new_empty((h, g, c)))  # [H, G, C]
    if w.b_value is not None:
        agg += f32(w.b_value).view(h, 1, c) * frac.view(1, g, 1)
    if out2 is not None:
        agg = agg + (out2 if we is None else
                     cpu_gemm.bmm(out2, _per_head_t(w, "w_edge"), out2.new_empty((h, g, c))))
    out = agg.transpose(0, 1).reshape(g, h * c) if w.concat else agg.mean(0)
    if w.w_skip is not None:
        out = out + graph_mean(f32(x), gp) @ f32(w.w_skip).t()
        if w.b_skip is not None:
            out = out + f32(w.b_skip)[None, :] * (counts > 0).float()[:, None]
    return out.to(x.dtype)


def pool(x, csr, ea, gp, specs):
    """All layers, then per-graph node means: [G, out]."""
    with torch_width(sum(_layer_work(x.shape[0], w) for w, _, _ in specs)):
        return _pool(x, csr, ea, gp, specs)


def _pool(x, csr, ea, gp, specs):
    h = x
    *body, last = specs
    # repeated rows (predicates on many edges, entities in several subgraphs): the edge
    # features feed every layer, the node features only the first
    ea_groups = RowGroups(ea, csr) if ea is not None else None
    x_groups = RowGroups(x)
    for i, (w, norm, relu) in enumerate(body):
        h = _conv_layer(h, csr, ea, w, norm, relu, x_groups if i == 0 else None, ea_groups)
    w, norm, relu = last
    if norm is None and not relu and not w.beta and h.shape[0] > 0:
        return _pooled_last_layer(h, csr, ea, gp, w, ea_groups)
    if h.shape[0] > 0:
        h = _conv_layer(h, csr, ea, w, norm, relu, x_groups if not body else None, ea_groups)
    else:
        h = h.new_zeros((0, w.out_channels))
    return graph_mean(h.float(), gp).to(x.dtype)
