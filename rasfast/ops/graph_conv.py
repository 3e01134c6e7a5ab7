"""transformer_conv / graph_transformer_pool: PyG-compatible graph-transformer layers, fused.

One layer computes, for every destination node i and head h (PyG's TransformerConv):
    alpha_ij = softmax_j( q_i . (k_j + e_ij) / sqrt(C) )  over i's incoming edges,
    out_i    = concat_h (or mean_h) sum_j alpha_ij (v_j + e_ij)  + skip_i (or the beta gate),
optionally followed by LayerNorm and ReLU. The dense projections run as one GEMM per layer
(BLAS/cuBLAS); the gather, the online softmax, the weighted sum and the epilogue are one
kernel over destination nodes, so no edges x heads x channels tensor is materialised.
"""
from __future__ import annotations

from typing import NamedTuple, Optional, Sequence

import numpy as np
import torch

from .. import dispatch as _bk
from .._arrays import as_tensor, kind_of, to_kind
from .._validate import (check_bool_arg, check_float, check_int, check_rank, check_same_device,
                         check_same_dtype)
from ..reference import graph_conv as _ref
from .graph_conv_params import as_conv_weights, as_norm_weights
from .._threads import follows_width_rule
from ._deferred import Deferred, check_ids, check_ptr
from ._library import define, traced
from .graph_conv_params import ConvWeights, NormWeights


class Csr(NamedTuple):
    """Edges sorted by destination: i's incoming edges are src[indptr[i]:indptr[i+1]];
    eid maps each CSR position to the row of edge_attr that belongs to it."""
    indptr: torch.Tensor
    src: torch.Tensor
    eid: torch.Tensor

    @property
    def num_edges(self) -> int:
        return self.src.numel()

    def edge_index(self) -> torch.Tensor:
        """[2, E] (source, destination) in CSR order."""
        n = self.indptr.numel() - 1
        dst = torch.repeat_interleave(torch.arange(n, device=self.src.device), self.indptr.diff())
        return torch.stack([self.src, dst])


def _same_device(device: torch.device, **arrays) -> None:
    """torch tensors must be on the op's device; numpy arrays are host arrays, checked on the
    host and copied there."""
    tensors = {k: v for k, v in arrays.items() if isinstance(v, torch.Tensor)}
    if tensors:
        check_same_device(x=torch.empty(0, device=device), **tensors)


def as_csr(edges, num_nodes: int, device: torch.device,
           deferred: Optional[Deferred] = None) -> Csr:
    """Validates ``edges`` (edge_index [2, E] or a dst-sorted CSR tuple (indptr, src)) -> Csr.

    Host (numpy) arrays are checked with numpy. Device arrays are checked on the device
    without a host sync when ``deferred`` is given (its values are read once, at the end of
    the op; the CSR is built from ids clamped into [0, N), so no kernel reads out of
    bounds); without it, at once. The CSR is built without a sync: a stable sort by
    destination and a binary search for the row offsets.
    """
    eager = deferred is None
    deferred = Deferred() if eager else deferred
    if isinstance(edges, (tuple, list)):
        if len(edges) != 2:
            raise TypeError("edges: a CSR tuple must be (indptr[N+1], src[E])")
        indptr, src = as_tensor(edges[0], "edges.indptr"), as_tensor(edges[1], "edges.src")
        check_int(indptr, "edges.indptr")
        check_int(src, "edges.src")
        check_rank(indptr, "edges.indptr", 1, "[N+1]")
        check_rank(src, "edges.src", 1, "[E]")
        _same_device(device, indptr=edges[0], src=edges[1])
        if indptr.numel() != num_nodes + 1:
            raise ValueError(f"edges.indptr: expected N+1 = {num_nodes + 1} entries, got {indptr.numel()}")
        e = src.numel()
        indptr = check_ptr(edges[0] if isinstance(edges[0], np.ndarray) else indptr, "edges.indptr",
                           e, "E", device, deferred,
                           start_end_msg=f"edges.indptr: must start at 0 and end at E = {e}",
                           monotone_msg="edges.indptr: must be non-decreasing")
        src = check_ids(edges[1] if isinstance(edges[1], np.ndarray) else src, "edges.src", 0,
                        num_nodes, device, deferred, _id_message("edges.src", num_nodes))
        if eager:
            deferred.raise_now()
        return Csr(indptr.contiguous(), src.contiguous(), torch.arange(e, device=device))
    ei = as_tensor(edges, "edges")
    check_int(ei, "edges")
    if ei.dim() != 2 or ei.shape[0] != 2:
        raise ValueError(f"edges: expected edge_index of shape [2, E], got {tuple(ei.shape)}")
    _same_device(device, edges=edges)
    ei = check_ids(edges if isinstance(edges, np.ndarray) else ei, "edges", 0, num_nodes, device,
                   deferred, _id_message("edges", num_nodes))
    if eager:
        deferred.raise_now()
    src, dst = ei[0], ei[1]
    dst_sorted, perm = torch.sort(dst, stable=True)
    indptr = torch.searchsorted(dst_sorted, torch.arange(num_nodes + 1, device=device))
    return Csr(indptr, src[perm].contiguous(), perm.contiguous())


def _id_message(name: str, n: int):
    return lambda lo, hi: (f"{name}: node ids must lie in [0, N) with N = {n}; got range "
                           f"[{lo}, {hi}]")


def check_graph_ptr(graph_ptr, num_nodes: int, device: torch.device,
                    deferred: Optional[Deferred] = None) -> torch.Tensor:
    """graph_ptr [G+1]: int, 0 = ptr[0] <= ptr[1] <= ... <= ptr[G] = N (checked as in
    :func:`as_csr`: at once, or through ``deferred`` with a safe copy returned)."""
    gp = as_tensor(graph_ptr, "graph_ptr")
    check_int(gp, "graph_ptr")
    check_rank(gp, "graph_ptr", 1, "[num_graphs + 1]")
    _same_device(device, graph_ptr=graph_ptr)
    if gp.numel() < 1:
        raise ValueError("graph_ptr: needs at least one entry (0)")
    eager = deferred is None
    deferred = Deferred() if eager else deferred
    gp = check_ptr(graph_ptr if isinstance(graph_ptr, np.ndarray) else gp, "graph_ptr", num_nodes,
                   "N", device, deferred,
                   start_end_msg="graph_ptr: must start at 0 and end at N = {total}, got "
                                 "{first} .. {last}",
                   monotone_msg="graph_ptr: must be non-decreasing (monotone)")
    if eager:
        deferred.raise_now()
    return gp.contiguous()


def _check_x(x, in_channels: int) -> torch.Tensor:
    xt = as_tensor(x, "x")
    check_float(xt, "x")
    check_rank(xt, "x", 2, "[N, in_channels]")
    if xt.shape[1] != in_channels:
        raise ValueError(f"x: dim 1 must equal the weights' in_channels ({in_channels}), got "
                         f"shape {tuple(xt.shape)}")
    return xt


def _check_edge_attr(edge_attr, w, csr: Csr, xt: torch.Tensor) -> Optional[torch.Tensor]:
    if w.w_edge is None:
        if edge_attr is not None:
            raise ValueError("edge_attr: given, but the weights have no edge projection (edge_dim=None)")
        return None
    if edge_attr is None:
        raise ValueError(f"edge_attr: required [E, {w.edge_dim}] (the weights have edge_dim={w.edge_dim})")
    ea = as_tensor(edge_attr, "edge_attr")
    check_float(ea, "edge_attr")
    check_rank(ea, "edge_attr", 2, "[E, edge_dim]")
    if tuple(ea.shape) != (csr.num_edges, w.edge_dim):
        raise ValueError(f"edge_attr: expected shape ({csr.num_edges}, {w.edge_dim}) = (E, edge_dim), "
                         f"got {tuple(ea.shape)}")
    check_same_device(x=xt, edge_attr=ea)
    check_same_dtype(x=xt, edge_attr=ea)
    return ea.contiguous()


def _check_flags(w, beta, root_weight) -> None:
    if beta is not None and check_bool_arg(beta, "beta") != w.beta:
        raise ValueError(f"beta: {beta} disagrees with the weights (lin_beta {'present' if w.beta else 'absent'})")
    if root_weight is not None and check_bool_arg(root_weight, "root_weight") != w.root_weight:
        raise ValueError(f"root_weight: {root_weight} disagrees with the weights "
                         f"(lin_skip {'present' if w.root_weight else 'absent'})")


def _check_norm(norm, width: int, name: str):
    nw = as_norm_weights(norm)
    if nw is not None:
        for t, part in ((nw.weight, "weight"), (nw.bias, "bias")):
            if t is not None and tuple(t.shape) != (width,):
                raise ValueError(f"{name}: LayerNorm {part} must have shape ({width},), got {tuple(t.shape)}")
    return nw


@follows_width_rule
def transformer_conv(x, edges, edge_attr, weights, heads: Optional[int] = None,
                     concat: Optional[bool] = None, beta: Optional[bool] = None,
                     root_weight: Optional[bool] = None, norm=None, relu: bool = False,
                     backend: str = "auto"):
    """One TransformerConv layer (same function as torch_geometric's, same weights).

    Args:
        x: float32/float16/bfloat16 node features [N, in_channels] (numpy or torch).
        edges: edge_index [2, E] (row 0 source, row 1 destination), or a CSR tuple
            (indptr[N+1], src[E]) with edges already sorted by destination.
        edge_attr: [E, edge_dim] in x's dtype (rows in the order of ``edges``), or None
            when the layer has no edge projection.
        weights: a ``ConvWeights``, a ``torch_geometric.nn.TransformerConv`` or its
            ``state_dict()`` (then ``heads`` is required).
        heads, concat, beta, root_weight: optional; checked against the weights
            (``heads``/``concat`` describe a state dict).
        norm: optional LayerNorm (torch.nn.LayerNorm or NormWeights) applied to the output,
            then ReLU when ``relu`` -- the epilogue RAS uses between layers.
        backend: "auto" | "cpu" | "cuda" | "triton" | "torch". The compiled backends are
            inference kernels (no autograd); "torch" is differentiable in x and edge_attr.
            To train the weights, use :class:`rasfast.GraphEncoder` in training mode.

    Returns:
        [N, heads*C] (concat) or [N, C], in x's dtype and kind. Nodes without incoming
        edges get only the skip term, as in PyG.
    """
    w = as_conv_weights(weights, heads, concat)
    _check_flags(w, beta, root_weight)
    kind = kind_of(x)
    xt = _check_x(x, w.in_channels)
    if traced(xt):
        nw = _check_norm(norm, w.out_channels, "norm")
        spec = [(w, nw, check_bool_arg(relu, "relu"))]
        return to_kind(_traced_call(_CONV_OP, xt, edges, edge_attr, None, spec, backend), kind)
    # index checks of device arrays: read once after the kernels (no sync before them)
    deferred = Deferred()
    csr = as_csr(edges, xt.shape[0], xt.device, deferred)
    ea = _check_edge_attr(edge_attr, w, csr, xt)
    nw = _check_norm(norm, w.out_channels, "norm")
    relu = check_bool_arg(relu, "relu")
    be = _bk.resolve(backend, xt.device, "transformer_conv")
    w = w.to(xt.device, xt.dtype)
    nw = None if nw is None else nw.to(xt.device, torch.float32)
    xt = xt.contiguous()
    if be != "cuda" or xt.shape[0] == 0:
        deferred.raise_now()
    if xt.shape[0] == 0:
        return to_kind(xt.new_zeros((0, w.out_channels)), kind)
    with _grad_mode(be):
        out = _IMPLS[be].conv_layer(_inputs(xt, be), csr, _inputs(ea, be), w, nw, relu)
    deferred.raise_now()  # cuda: the one host sync, after the kernels (none without checks)
    return to_kind(out, kind)


@follows_width_rule
def graph_transformer_pool(x, edges, edge_attr, graph_ptr, layers: Sequence,
                           backend: str = "auto"):
    """All layers over a batch of graphs, then each graph's node mean: [num_graphs, out].

    Args:
        x, edges, edge_attr: as in :func:`transformer_conv`, for the whole batch (node ids
            global; every edge inside one graph).
        graph_ptr: int [G+1], graph g owns nodes graph_ptr[g]:graph_ptr[g+1] (monotone,
            from 0 to N). Empty graphs pool to zeros (as PyG's global_mean_pool).
        layers: sequence of layers, each ``conv`` or ``(conv, norm)`` (LayerNorm then ReLU
            after that layer) or ``(conv, norm, relu)``; conv as ``weights`` above.
        backend: as in :func:`transformer_conv`.

    Returns:
        [G, out_channels of the last layer] in x's dtype and kind.
    """
    specs = normalise_layers(layers)
    kind = kind_of(x)
    xt = _check_x(x, specs[0][0].in_channels)
    if traced(xt):
        return to_kind(_traced_call(_POOL_OP, xt, edges, edge_attr, graph_ptr, specs, backend),
                       kind)
    deferred = Deferred()  # as in transformer_conv
    csr = as_csr(edges, xt.shape[0], xt.device, deferred)
    gp = check_graph_ptr(graph_ptr, xt.shape[0], xt.device, deferred)
    for i, (w, _, _) in enumerate(specs):
        _check_edge_attr(edge_attr, w, csr, xt)
        if i and w.in_channels != specs[i - 1][0].out_channels:
            raise ValueError(f"layers[{i}]: in_channels {w.in_channels} != previous layer's output "
                             f"{specs[i - 1][0].out_channels}")
    ea = None if edge_attr is None else as_tensor(edge_attr, "edge_attr").contiguous()
    be = _bk.resolve(backend, xt.device, "graph_transformer_pool")
    specs = [(w.to(xt.device, xt.dtype), None if n is None else n.to(xt.device, torch.float32), r)
             for w, n, r in specs]
    if be != "cuda":
        deferred.raise_now()
    with _grad_mode(be):
        out = _IMPLS[be].pool(_inputs(xt.contiguous(), be), csr, _inputs(ea, be), gp, specs)
    deferred.raise_now()  # cuda: the one host sync, after the kernels (none without checks)
    return to_kind(out, kind)


def _grad_mode(backend: str):
    """The compiled backends are inference kernels: no autograd graph through them."""
    return torch.enable_grad() if backend == "torch" and torch.is_grad_enabled() else torch.no_grad()


def _inputs(t, backend: str):
    return t if t is None or backend == "torch" else t.detach()


def normalise_layers(layers: Sequence):
    """[(ConvWeights, NormWeights | None, relu)] from the accepted layer forms."""
    if isinstance(layers, (str, bytes)) or not isinstance(layers, Sequence) or len(layers) == 0:
        raise ValueError("layers: expected a non-empty sequence of layers")
    specs = []
    for i, layer in enumerate(layers):
        if isinstance(layer, (tuple, list)):
            if len(layer) not in (2, 3):
                raise ValueError(f"layers[{i}]: expected conv, (conv, norm) or (conv, norm, relu)")
            w = as_conv_weights(layer[0])
            nw = _check_norm(layer[1], w.out_channels, f"layers[{i}].norm")
            relu = check_bool_arg(layer[2], f"layers[{i}].relu") if len(layer) == 3 else nw is not None
        else:
            w, nw, relu = as_conv_weights(layer), None, False
        specs.append((w, nw, relu))
    return specs


class _Torch:
    @staticmethod
    def conv_layer(x, csr, ea, w, norm, relu):
        ea = None if ea is None else ea[csr.eid]
        return _ref.transformer_conv(x, csr.edge_index(), ea, w, norm, relu)

    @staticmethod
    def pool(x, csr, ea, gp, specs):
        ea = None if ea is None else ea[csr.eid]
        return _ref.graph_transformer_pool(x, csr.edge_index(), ea, gp, specs)


class _Lazy:
    """A backend plan imported on first use (the GPU plans are not needed on CPU)."""

    def __init__(self, module: str, attr: str = ""):
        self.module, self.attr = module, attr

    def _impl(self):
        import importlib
        mod = importlib.import_module(f"rasfast.ops.{self.module}")
        return getattr(mod, self.attr) if self.attr else mod

    def conv_layer(self, *a):
        return self._impl().conv_layer(*a)

    def pool(self, *a):
        return self._impl().pool(*a)


_IMPLS = {"torch": _Torch, "cpu": _Lazy("graph_conv_cpu"), "cuda": _Lazy("graph_conv_gpu", "Cuda"),
          "triton": _Lazy("graph_conv_gpu", "Triton")}


# ----------------------------------------------------------------------------- operators
# torch.ops.rasfast.transformer_conv / graph_transformer_pool (rasfast/ops/_library.py):
# inference operators (no autograd) over flat arguments. Each layer is 12 optional tensors
# (_FIELDS: ConvWeights' tensors, then the LayerNorm's weight and bias) and one entry in
# each of heads, channels, concat, has_norm, eps, relu. The edges are an edge_index [2, E]
# (csr_src None) or a CSR (indptr [N+1] in ``edges``, csr_src [E]).
_FIELDS = ("w_query", "b_query", "w_key", "b_key", "w_value", "b_value", "w_edge", "w_skip",
           "b_skip", "w_beta")
_LAYER_ARGS = ("Tensor?[] weights, int[] heads, int[] channels, bool[] concat, "
               "bool[] has_norm, float[] eps, bool[] relu, str backend")


def flat_layers(specs):
    """[(ConvWeights, NormWeights | None, relu)] -> the operators' layer arguments
    (weights, heads, channels, concat, has_norm, eps, relu)."""
    weights, heads, channels, concat, has_norm, eps, relu = [], [], [], [], [], [], []
    for w, nw, r in specs:
        weights += [getattr(w, f) for f in _FIELDS]
        weights += [None, None] if nw is None else [nw.weight, nw.bias]
        heads.append(w.heads)
        channels.append(w.channels)
        concat.append(w.concat)
        has_norm.append(nw is not None)
        eps.append(1e-5 if nw is None else float(nw.eps))
        relu.append(bool(r))
    return weights, heads, channels, concat, has_norm, eps, relu


# layer arguments -> specs: the ConvWeights objects carry their packed (GEMM-ready) weights,
# so a compiled graph that passes the same parameters again reuses them
_SPECS: "dict" = {}
_SPECS_MAX = 64


def _tensor_key(t):
    return None if t is None else (t.data_ptr(), t._version, tuple(t.shape), t.dtype, t.device)


def _specs_of(weights, heads, channels, concat, has_norm, eps, relu):
    n = len(heads)
    if not (len(weights) == 12 * n and len(channels) == len(concat) == len(has_norm) ==
            len(eps) == len(relu) == n) or n == 0:
        raise ValueError(f"weights: expected 12 tensors per layer and one heads/channels/concat/"
                         f"has_norm/eps/relu entry per layer, got {len(weights)} tensors for "
                         f"{n} layers")
    key = (tuple(_tensor_key(t) for t in weights), tuple(heads), tuple(channels), tuple(concat),
           tuple(has_norm), tuple(eps), tuple(relu))
    hit = _SPECS.get(key)
    if hit is not None:
        return hit
    specs = []
    for i in range(n):
        t = weights[12 * i:12 * i + 12]
        for f, v in zip(_FIELDS[:6:2], t[:6:2]):
            if v is None:
                raise ValueError(f"weights: layer {i}'s {f} is required")
        w = ConvWeights(int(heads[i]), int(channels[i]), bool(concat[i]),
                        **{f: (None if v is None else v.detach()) for f, v in zip(_FIELDS, t[:10])})
        nw = NormWeights(t[10], t[11], float(eps[i])) if has_norm[i] else None
        specs.append((w, nw, bool(relu[i])))
    if len(_SPECS) >= _SPECS_MAX:
        _SPECS.pop(next(iter(_SPECS)))
    _SPECS[key] = specs
    return specs


def _edges_arg(edges, csr_src):
    return edges if csr_src is None else (edges, csr_src)


def _conv_op(x, edges, csr_src, edge_attr, weights, heads, channels, concat, has_norm, eps,
             relu, backend):
    (w, nw, r), = _specs_of(weights, heads, channels, concat, has_norm, eps, relu)
    return transformer_conv.__wrapped__(x, _edges_arg(edges, csr_src), edge_attr, w, norm=nw,
                                        relu=r, backend=backend)  # (the width rule: define())


def _pool_op(x, edges, csr_src, edge_attr, graph_ptr, weights, heads, channels, concat,
             has_norm, eps, relu, backend):
    specs = _specs_of(weights, heads, channels, concat, has_norm, eps, relu)
    return graph_transformer_pool.__wrapped__(x, _edges_arg(edges, csr_src), edge_attr,
                                              graph_ptr, specs, backend=backend)


def _out_width(heads, channels, concat):
    return heads[-1] * channels[-1] if concat[-1] else channels[-1]


_CONV_OP = define(
    "transformer_conv(Tensor x, Tensor edges, Tensor? csr_src, Tensor? edge_attr, "
    + _LAYER_ARGS + ") -> Tensor", _conv_op,
    lambda x, edges, csr_src, edge_attr, weights, heads, channels, concat, has_norm, eps, relu,
    backend: x.new_empty((x.shape[0], _out_width(heads, channels, concat))))
_POOL_OP = define(
    "graph_transformer_pool(Tensor x, Tensor edges, Tensor? csr_src, Tensor? edge_attr, "
    "Tensor graph_ptr, " + _LAYER_ARGS + ") -> Tensor", _pool_op,
    lambda x, edges, csr_src, edge_attr, graph_ptr, weights, heads, channels, concat, has_norm,
    eps, relu, backend: x.new_empty((graph_ptr.shape[0] - 1, _out_width(heads, channels, concat))))


def _traced_call(op, xt, edges, edge_attr, graph_ptr, specs, backend):
    """The traced call of either operator: shapes checked here, values by its kernel."""
    if isinstance(edges, (tuple, list)):
        if len(edges) != 2:
            raise TypeError("edges: a CSR tuple must be (indptr[N+1], src[E])")
        first, src = as_tensor(edges[0], "edges.indptr"), as_tensor(edges[1], "edges.src")
        check_int(first, "edges.indptr")
        check_int(src, "edges.src")
        num_edges = src.shape[0]
    else:
        first, src = as_tensor(edges, "edges"), None
        check_int(first, "edges")
        if first.dim() != 2 or first.shape[0] != 2:
            raise ValueError(f"edges: expected edge_index of shape [2, E], got {tuple(first.shape)}")
        num_edges = first.shape[1]
    ea = None
    if edge_attr is not None:
        ea = as_tensor(edge_attr, "edge_attr")
        check_float(ea, "edge_attr")
        check_rank(ea, "edge_attr", 2, "[E, edge_dim]")
        if ea.shape[0] != num_edges:
            raise ValueError(f"edge_attr: expected {num_edges} rows (E), got {tuple(ea.shape)}")
    for i, (w, _, _) in enumerate(specs):
        if (w.w_edge is None) != (ea is None):
            raise ValueError(f"layers[{i}]: edge_attr given without an edge projection, or "
                             "needed and missing")
        if i and w.in_channels != specs[i - 1][0].out_channels:
            raise ValueError(f"layers[{i}]: in_channels {w.in_channels} != previous layer's output "
                             f"{specs[i - 1][0].out_channels}")
    args = flat_layers(specs)
    if graph_ptr is None:
        return op(xt, first, src, ea, *args, backend)
    gp = as_tensor(graph_ptr, "graph_ptr")
    check_int(gp, "graph_ptr")
    check_rank(gp, "graph_ptr", 1, "[num_graphs + 1]")
    return op(xt, first, src, ea, gp, *args, backend)


def pool_operator(x, edge_index, edge_attr, graph_ptr, layer_args, backend: str = "auto"):
    """``torch.ops.rasfast.graph_transformer_pool`` on an edge_index and the flat layer
    arguments (:func:`flat_layers`' tuple): for callers that hold the layers as modules
    under tracing (``GraphEncoder`` under torch.compile / torch.export)."""
    return _POOL_OP(x, edge_index, None, edge_attr, graph_ptr, *layer_args, backend)
