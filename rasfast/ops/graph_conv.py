"""transformer_conv / graph_transformer_pool: PyG-compatible graph-transformer layers, fused.

One layer computes, for every destination node i and head h (PyG's TransformerConv):
    alpha_ij = softmax_j( q_i . (k_j + e_ij) / sqrt(C) )  over i's incoming edges,
    out_i    = concat_h (or mean_h) sum_j alpha_ij (v_j + e_ij)  + skip_i (or the beta gate),
optionally followed by LayerNorm and ReLU. The dense projections run as one GEMM per layer
(BLAS/cuBLAS); the gather, the online softmax, the weighted sum and the epilogue are one
kernel over destination nodes, so no edges x heads x channels tensor is materialised.

Both ops are differentiable (x, edge_attr, every layer tensor): on the compiled backends
each layer is an autograd node whose forward is the fused kernels (keeping their
intermediates) and whose backward is composed of GEMMs and per-edge torch ops (see
"autograd" below); the registered operators carry the same gradient under tracing.
"""
from __future__ import annotations

import contextlib
import math
from typing import NamedTuple, Optional, Sequence

import numpy as np
import torch
import torch.nn.functional as F

from .. import dispatch as _bk
from .._arrays import DTYPE_CODES, FLOAT_DTYPES, as_tensor, kind_of, to_kind
from .._validate import (check_bool_arg, check_choice, check_float, check_int, check_rank, check_same_device,
                         check_same_dtype)
from ..reference import graph_conv as _ref
from .graph_conv_params import as_conv_weights, as_norm_weights
from .._threads import follows_width_rule, torch_width
from ._deferred import VALIDATE, Deferred, check_ids, check_ptr, deferred_for, to_device
from . import _library, cpu_gemm, host_scratch
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
    if isinstance(edges, np.ndarray) and ei.shape[1] <= _HOST_CSR_MAX_EDGES and num_nodes <= 1 << 16:
        return _host_csr(edges, num_nodes, device)
    ei = check_ids(edges if isinstance(edges, np.ndarray) else ei, "edges", 0, num_nodes, device,
                   deferred, _id_message("edges", num_nodes))
    if eager:
        deferred.raise_now()
    src, dst = ei[0], ei[1]
    dst_sorted, perm = torch.sort(dst, stable=True)
    indptr = torch.searchsorted(dst_sorted, torch.arange(num_nodes + 1, device=device))
    return Csr(indptr, src[perm].contiguous(), perm.contiguous())


# A host edge_index of a question-sized batch is sorted on the host: numpy's stable sort of
# 16-bit keys is a radix sort (40 us for 7,680 edges on Zen 5, 300 us for 61,440), where the
# device path copies the array and runs a sort (on CUDA a multi-kernel radix sort of 64-bit
# keys), an arange, a binary search and a gather, each a launch the host pays for.
_HOST_CSR_MAX_EDGES = 1 << 15


def _host_csr(edges: np.ndarray, num_nodes: int, device: torch.device) -> Csr:
    """The CSR of a host edge_index (checked here, as check_ids checks host arrays), built
    with numpy and moved in one copy (indptr, src and eid packed in one array)."""
    a = np.asarray(edges).astype(np.int64, copy=False)
    n_e = a.shape[1]
    if n_e and (int(a.min()) < 0 or int(a.max()) >= num_nodes):
        raise ValueError(_id_message("edges", num_nodes)(int(a.min()), int(a.max())))
    key = a[1].astype(np.uint16)  # num_nodes <= 65,536: a radix sort, as stable as torch's
    perm = np.argsort(key, kind="stable")
    packed = np.empty(num_nodes + 1 + 2 * n_e, np.int64)
    packed[0] = 0
    np.cumsum(np.bincount(key, minlength=num_nodes), out=packed[1:num_nodes + 1])
    packed[num_nodes + 1:num_nodes + 1 + n_e] = a[0][perm]
    packed[num_nodes + 1 + n_e:] = perm
    t = to_device(torch.from_numpy(packed), device)
    return Csr(t[:num_nodes + 1], t[num_nodes + 1:num_nodes + 1 + n_e], t[num_nodes + 1 + n_e:])


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


# float64 is accepted for gradcheck: the compiled backends run it in torch (the kernels
# take float32/float16/bfloat16), through the same autograd layers
_DTYPES = FLOAT_DTYPES + (torch.float64,)


def _check_x(x, in_channels: int) -> torch.Tensor:
    xt = as_tensor(x, "x")
    check_float(xt, "x", _DTYPES)
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
    check_float(ea, "edge_attr", _DTYPES)
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
                     backend: str = "auto", validate: str = "auto"):
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
        backend: "auto" | "cpu" | "cuda" | "triton" | "torch". Every backend is
            differentiable in x, edge_attr and the weights' tensors (when they require
            grad: ``ConvWeights`` built from live parameters; PyG modules and state dicts
            give detached weights): the compiled ones through a composed backward (see
            "autograd" below), "torch" through the reference's torch ops.
        validate: "auto" | "full" (the same: every index checked, on a GPU in one read
            after the kernels) | "none": index arrays on the device are not checked and
            nothing is read back (no host sync, so the call can be captured in a CUDA
            graph); they are clamped into range, so a bad id cannot make a kernel read out
            of bounds, but gives an unspecified result instead of an error. Host (numpy)
            arrays are always checked.

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
        return to_kind(_traced_call(_CONV_OP, xt, edges, edge_attr, None, spec, backend, validate),
                       kind)
    # index checks of device arrays: read once after the kernels (no sync before them)
    deferred = deferred_for(check_choice(validate, "validate", VALIDATE))
    csr = as_csr(edges, xt.shape[0], xt.device, deferred)
    ea = _check_edge_attr(edge_attr, w, csr, xt)
    nw = _check_norm(norm, w.out_channels, "norm")
    relu = check_bool_arg(relu, "relu")
    be = _bk.resolve(backend, xt.device, "transformer_conv")
    if be != "torch" and (xt.dtype == torch.float64 or
                          _wants_grad(xt, ea, *_layer_tensors(w, nw))):
        deferred.raise_now()
        return to_kind(_layers_autograd(xt, csr, ea, None, [(w, nw, relu)], be), kind)
    w = w.to(xt.device, xt.dtype)
    nw = None if nw is None else nw.to(xt.device, _norm_dtype(xt, be))
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
                           backend: str = "auto", validate: str = "auto"):
    """All layers over a batch of graphs, then each graph's node mean: [num_graphs, out].

    Args:
        x, edges, edge_attr: as in :func:`transformer_conv`, for the whole batch (node ids
            global; every edge inside one graph).
        graph_ptr: int [G+1], graph g owns nodes graph_ptr[g]:graph_ptr[g+1] (monotone,
            from 0 to N). Empty graphs pool to zeros (as PyG's global_mean_pool).
        layers: sequence of layers, each ``conv`` or ``(conv, norm)`` (LayerNorm then ReLU
            after that layer) or ``(conv, norm, relu)``; conv as ``weights`` above.
        backend, validate: as in :func:`transformer_conv` (``validate`` covers graph_ptr
            too).

    Returns:
        [G, out_channels of the last layer] in x's dtype and kind.
    """
    specs = normalise_layers(layers)
    kind = kind_of(x)
    xt = _check_x(x, specs[0][0].in_channels)
    if traced(xt):
        return to_kind(_traced_call(_POOL_OP, xt, edges, edge_attr, graph_ptr, specs, backend,
                                    validate), kind)
    deferred = deferred_for(check_choice(validate, "validate", VALIDATE))  # as in transformer_conv
    csr = as_csr(edges, xt.shape[0], xt.device, deferred)
    gp = check_graph_ptr(graph_ptr, xt.shape[0], xt.device, deferred)
    for i, (w, _, _) in enumerate(specs):
        _check_edge_attr(edge_attr, w, csr, xt)
        if i and w.in_channels != specs[i - 1][0].out_channels:
            raise ValueError(f"layers[{i}]: in_channels {w.in_channels} != previous layer's output "
                             f"{specs[i - 1][0].out_channels}")
    ea = None if edge_attr is None else as_tensor(edge_attr, "edge_attr").contiguous()
    be = _bk.resolve(backend, xt.device, "graph_transformer_pool")
    if be != "torch" and (xt.dtype == torch.float64 or _wants_grad(xt, ea, *_specs_tensors(specs))):
        # training (or float64): the layers as autograd nodes over the fused kernels
        deferred.raise_now()
        return to_kind(_layers_autograd(xt, csr, ea, gp, specs, be), kind)
    ln_dtype = _norm_dtype(xt, be)
    specs = [(w.to(xt.device, xt.dtype), None if n is None else n.to(xt.device, ln_dtype), r)
             for w, n, r in specs]
    if be != "cuda":
        deferred.raise_now()
    with _grad_mode(be):
        out = _IMPLS[be].pool(_inputs(xt.contiguous(), be), csr, _inputs(ea, be), gp, specs)
    deferred.raise_now()  # cuda: the one host sync, after the kernels (none without checks)
    return to_kind(out, kind)


def _norm_dtype(x: torch.Tensor, backend: str) -> torch.dtype:
    """The LayerNorm parameters' dtype in a call: the compiled kernels take them in float32
    (float64 for float64 input); the torch backend, the reference, keeps them in x's dtype as
    PyG does, so that no cast detaches trained parameters (a bfloat16 model's norms got no
    gradient through it, and on CUDA layer_norm refused the mixed dtypes: the seventh GPU
    run's bfloat16 training step through the torch reference)."""
    if backend == "torch":
        return x.dtype
    return torch.float64 if x.dtype == torch.float64 else torch.float32


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

    def conv_layer(self, *a, **kw):
        return self._impl().conv_layer(*a, **kw)

    def pool(self, *a):
        return self._impl().pool(*a)


_IMPLS = {"torch": _Torch, "cpu": _Lazy("graph_conv_cpu"), "cuda": _Lazy("graph_conv_gpu", "Cuda"),
          "triton": _Lazy("graph_conv_gpu", "Triton")}


# ----------------------------------------------------------------------------- operators
# torch.ops.rasfast.transformer_conv / graph_transformer_pool (rasfast/ops/_library.py):
# operators over flat arguments, differentiable (register_autograd at the end of this file).
# Each layer is 12 tensors (_FIELDS: ConvWeights' tensors, then the LayerNorm's weight and
# bias; an absent one is an empty 1-d tensor, see _absent: a list of optional tensors would
# get no gradients) and one entry in each of heads, channels, concat, has_norm, eps, relu. The edges are an edge_index [2, E]
# (csr_src None) or a CSR (indptr [N+1] in ``edges``, csr_src [E]).
_FIELDS = ("w_query", "b_query", "w_key", "b_key", "w_value", "b_value", "w_edge", "w_skip",
           "b_skip", "w_beta")
_LAYER_ARGS = ("Tensor[] weights, int[] heads, int[] channels, bool[] concat, "
               "bool[] has_norm, float[] eps, bool[] relu, str backend")


def flat_layers(specs):
    """[(ConvWeights, NormWeights | None, relu)] -> the operators' layer arguments
    (weights, heads, channels, concat, has_norm, eps, relu)."""
    weights, heads, channels, concat, has_norm, eps, relu = [], [], [], [], [], [], []
    for w, nw, r in specs:
        none = w.w_query.new_empty(0)
        weights += [none if t is None else t for t in _layer_tensors(w, nw)]
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
        t = [None if _absent(v) else v for v in weights[12 * i:12 * i + 12]]
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


def _absent(t) -> bool:
    """An absent layer tensor in the operators' weights: None or 1-d empty (every tensor a
    layer has is a 2-d weight or a non-empty bias)."""
    return t is None or (t.dim() == 1 and t.shape[0] == 0)


def _edges_arg(edges, csr_src):
    return edges if csr_src is None else (edges, csr_src)


def _conv_op(x, edges, csr_src, edge_attr, weights, heads, channels, concat, has_norm, eps,
             relu, backend, validate="auto"):
    (w, nw, r), = _specs_of(weights, heads, channels, concat, has_norm, eps, relu)
    with torch.no_grad():  # the operator's autograd is registered (register_autograd below)
        return transformer_conv.__wrapped__(x, _edges_arg(edges, csr_src), edge_attr, w,
                                            norm=nw, relu=r, backend=backend, validate=validate)


def _pool_op(x, edges, csr_src, edge_attr, graph_ptr, weights, heads, channels, concat,
             has_norm, eps, relu, backend, validate="auto"):
    specs = _specs_of(weights, heads, channels, concat, has_norm, eps, relu)
    with torch.no_grad():
        return graph_transformer_pool.__wrapped__(x, _edges_arg(edges, csr_src), edge_attr,
                                                  graph_ptr, specs, backend=backend,
                                                  validate=validate)


def _out_width(heads, channels, concat):
    return heads[-1] * channels[-1] if concat[-1] else channels[-1]


_CONV_OP = define(
    "transformer_conv(Tensor x, Tensor edges, Tensor? csr_src, Tensor? edge_attr, "
    + _LAYER_ARGS + ", str validate=\"auto\") -> Tensor", _conv_op,
    lambda x, edges, csr_src, edge_attr, weights, heads, channels, concat, has_norm, eps, relu,
    backend, validate="auto": x.new_empty((x.shape[0], _out_width(heads, channels, concat))))
_POOL_OP = define(
    "graph_transformer_pool(Tensor x, Tensor edges, Tensor? csr_src, Tensor? edge_attr, "
    "Tensor graph_ptr, " + _LAYER_ARGS + ", str validate=\"auto\") -> Tensor", _pool_op,
    lambda x, edges, csr_src, edge_attr, graph_ptr, weights, heads, channels, concat, has_norm,
    eps, relu, backend, validate="auto":
        x.new_empty((graph_ptr.shape[0] - 1, _out_width(heads, channels, concat))))


def _traced_call(op, xt, edges, edge_attr, graph_ptr, specs, backend, validate="auto"):
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
        check_float(ea, "edge_attr", _DTYPES)
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
    validate = check_choice(validate, "validate", VALIDATE)
    if graph_ptr is None:
        return op(xt, first, src, ea, *args, backend, validate)
    gp = as_tensor(graph_ptr, "graph_ptr")
    check_int(gp, "graph_ptr")
    check_rank(gp, "graph_ptr", 1, "[num_graphs + 1]")
    return op(xt, first, src, ea, gp, *args, backend, validate)


def pool_operator(x, edge_index, edge_attr, graph_ptr, layer_args, backend: str = "auto",
                  validate: str = "auto"):
    """``torch.ops.rasfast.graph_transformer_pool`` on an edge_index and the flat layer
    arguments (:func:`flat_layers`' tuple): for callers that hold the layers as modules
    under tracing (``GraphEncoder`` under torch.compile / torch.export)."""
    return _POOL_OP(x, edge_index, None, edge_attr, graph_ptr, *layer_args, backend, validate)


# ----------------------------------------------------------------------------- autograd
# Training through the fused layers. Each layer is one autograd node (_ConvFn): its forward
# runs the backend's fused kernels and keeps two intermediates they compute anyway, the
# q/k/v/skip projections ("nodes", [N, 3HC (+ skip)]) and the attention output before the
# epilogue ("agg", [N, H, C]); its backward is composed of torch ops (GEMMs plus per-edge
# work, no kernel of its own):
#   1. epilogue (concat/mean, skip or beta gate, LayerNorm, ReLU): recomputed from agg and
#      the skip projection and differentiated by autograd (N x HC elementwise work);
#   2. attention: the softmax weights alpha are recomputed per edge (one dot per edge and
#      head) and, with s_i = sum_j alpha_ij dalpha_ij = dagg_i . agg_i,
#        dlogit_ij = alpha_ij (dagg_i . (v_j + e_ij) - s_i) / sqrt(C),
#        dq_i = sum_j dlogit_ij (k_j + e_ij),  dk_j / dv_j: sums over j's out-edges of
#        dlogit_ij q_i / alpha_ij dagg_i,  de_ij = both terms;
#      edge features are projected (and their gradient reduced) once per DISTINCT row
#      (RowGroups: RAS's edge features are predicate embeddings, few distinct);
#   3. projections: one GEMM for the packed q/k/v/skip weights' gradient, one for dx (only
#      when x needs it), as the forward's one GEMM.
# graph_transformer_pool is then the layers' chain and a differentiable node mean. float64
# inputs (gradcheck) run the same forward in torch, since the kernels take 32/16-bit floats.
_LAYER_FIELDS = _FIELDS + ("ln_weight", "ln_bias")


def _layer_tensors(w: ConvWeights, nw: Optional[NormWeights]):
    return [getattr(w, f) for f in _FIELDS] + ([None, None] if nw is None else [nw.weight, nw.bias])


def _wants_grad(*tensors) -> bool:
    return torch.is_grad_enabled() and any(isinstance(t, torch.Tensor) and t.requires_grad
                                           for t in tensors)


def _specs_tensors(specs):
    return [t for w, nw, _ in specs for t in _layer_tensors(w, nw)]


class _EdgeGraph:
    """Per-batch structure shared by the layers: CSR, per-edge source/destination, and the
    rows of edge_attr each edge reads (its distinct rows when they repeat)."""

    def __init__(self, csr: Csr, ea: Optional[torch.Tensor], n: int):
        self.csr, self.n = csr, n
        e = csr.num_edges
        self.src = csr.src.long()
        self.dst = torch.repeat_interleave(torch.arange(n, device=csr.src.device),
                                           csr.indptr.diff(), output_size=e)
        self.groups = None
        self.rows = self.row_of_edge = self.inverse = None
        if ea is None:
            return
        if ea.device.type == "cpu" and ea.dtype in DTYPE_CODES:
            from .graph_conv_cpu import RowGroups
            self.groups = RowGroups(ea.detach(), csr)
        if self.groups is not None and self.groups.distinct is not None:
            self.inverse = self.groups.inverse                      # original row -> distinct
            self.row_of_edge = self.inverse[csr.eid]
            distinct = self.groups.distinct
            self.rows = lambda ea: distinct
        else:
            self.groups = None
            self.row_of_edge = csr.eid
            self.rows = lambda ea: ea

    _reverse = None
    _ea_csr = None

    def rows_in_csr_order(self, ea):
        """edge_attr's rows in CSR order (row p = the row edge p reads), gathered once per
        batch: the edge weight's gradient is then one GEMM with the CSR-ordered edge
        gradients, instead of a zero fill and a scatter of them into edge order per layer."""
        if self._ea_csr is None or self._ea_csr[0] is not ea:
            self._ea_csr = (ea, ea.index_select(0, self.row_of_edge))
        return self._ea_csr[1]

    def reverse(self):
        """(rptr [N + 1], rpos [E]) int64: the CSR positions grouped by source node, ascending
        within a source (the fused backward's second pass), built once per batch."""
        if self._reverse is None:
            srt = torch.sort(self.src, stable=True)
            # where each source's run starts: no bincount, which reads its size from the
            # device (a host sync on a GPU)
            rptr = torch.searchsorted(srt.values, torch.arange(self.n + 1, device=self.src.device))
            self._reverse = (rptr, srt.indices.contiguous())
        return self._reverse


def _packed(w: ConvWeights, ct: torch.dtype):
    """(W [3HC (+ skip), Din], b) in ``ct``: the forward's packed projection."""
    mats = [w.w_query, w.w_key, w.w_value] + ([w.w_skip] if w.w_skip is not None else [])
    hc = w.heads * w.channels
    sizes = [hc, hc, hc] + ([w.out_channels] if w.w_skip is not None else [])
    bs = [w.b_query, w.b_key, w.b_value] + ([w.b_skip] if w.w_skip is not None else [])
    b = torch.cat([x.to(ct) if x is not None else torch.zeros(s, dtype=ct, device=w.w_query.device)
                   for x, s in zip(bs, sizes)])
    return torch.cat([m.to(ct) for m in mats]), b


def _epilogue_t(agg, skip, w_beta, ln_w, ln_b, concat, has_norm, eps, relu):
    """The layer's epilogue in torch (differentiable): agg [N, H, C] -> [N, out]."""
    n = agg.shape[0]
    out = agg.reshape(n, -1) if concat else agg.mean(1)
    if skip is not None:
        if w_beta is not None:
            b = torch.sigmoid(torch.cat([out, skip, out - skip], -1) @ w_beta.t())
            out = b * skip + (1 - b) * out
        else:
            out = out + skip
    if has_norm:
        out = F.layer_norm(out, (out.shape[1],), ln_w, ln_b, eps)
    return torch.relu(out) if relu else out


def _edge_terms(nodes, graph: _EdgeGraph, ea, w_edge, h, c, ct, e_rows=None, gt=None):
    """Per CSR edge: (q_dst [E,H,C], k_src + e, v_src + e, alpha [E,H], e_rows or None).
    ``e_rows``: the forward's projected edge rows, when it kept them; ``gt``: the dtype of
    the edge projection's GEMM operands when it is recomputed (default ``ct``)."""
    hc, n = h * c, nodes.shape[0]
    q, k, v = (nodes[:, i * hc:(i + 1) * hc].view(n, h, c) for i in range(3))
    kj, vj = k.index_select(0, graph.src), v.index_select(0, graph.src)
    if ea is not None:
        if e_rows is None:
            gt = ct if gt is None else gt
            e_rows = graph.rows(ea).to(gt) @ w_edge.to(gt).t()          # [U or E, HC]
        e_rows = e_rows.to(ct)
        e = e_rows.index_select(0, graph.row_of_edge).view(-1, h, c)
        kj += e
        vj += e
    qd = q.index_select(0, graph.dst)
    logits = torch.einsum("ehc,ehc->eh", qd, kj) / math.sqrt(c)
    alpha = _ref.edge_softmax(logits, graph.dst, n)
    return qd, kj, vj, alpha, e_rows


def _torch_forward(x, graph, ea, w, nw, relu, ct):
    """The layer in torch, with the intermediates the backward keeps (float64 inputs)."""
    h, c, n = w.heads, w.channels, x.shape[0]
    wp, bp = _packed(w, ct)
    nodes = torch.addmm(bp, x.to(ct), wp.t())
    _, _, vj, alpha, _ = _edge_terms(nodes, graph, ea, w.w_edge, h, c, ct)
    agg = torch.zeros((n, h, c), dtype=ct, device=x.device).index_add_(0, graph.dst, vj * alpha[..., None])
    return nodes, agg


def _layer_flags(w, nw, relu):
    return (w.heads, w.channels, w.concat, nw is not None,
            float(nw.eps) if nw is not None else 1e-5, bool(relu))


def _rebuild(flags, ts, detach: bool = True):
    heads, channels, concat, has_norm, eps, _ = flags
    d = (lambda t: None if t is None else t.detach()) if detach else (lambda t: t)
    w = ConvWeights(heads, channels, concat, *[d(t) for t in ts[:10]])
    nw = NormWeights(d(ts[10]), d(ts[11]), eps) if has_norm else None
    return w, nw


class _ConvFn(torch.autograd.Function):
    """One fused layer with the composed backward described above."""

    @staticmethod
    def forward(ctx, graph, be, flags, x, ea, *ts):
        w, nw = _rebuild(flags, ts)
        relu = flags[5]
        ct = torch.float64 if x.dtype == torch.float64 else torch.float32
        saved: dict = {}
        e_rows = None
        if x.dtype == torch.float64 or be == "torch":
            nodes, agg = _torch_forward(x, graph, ea, w, nw, relu, ct)
            skip = nodes[:, 3 * w.heads * w.channels:] if w.root_weight else None
            tt = lambda t: None if t is None else t.to(ct)  # noqa: E731
            out = _epilogue_t(agg, skip, tt(w.w_beta), tt(None if nw is None else nw.weight),
                              tt(None if nw is None else nw.bias), w.concat, nw is not None,
                              flags[4], relu).to(x.dtype)
        else:
            wd = w.to(x.device, x.dtype)
            nwd = None if nw is None else nw.to(x.device, torch.float32)
            xd = x.detach().contiguous()
            ead = None if ea is None else ea.detach().contiguous()
            if be == "cpu":
                out = _IMPLS[be].conv_layer(xd, graph.csr, ead, wd, nwd, relu, None, graph.groups,
                                            saved=saved)
            else:
                out = _IMPLS[be].conv_layer(xd, graph.csr, ead, wd, nwd, relu, saved=saved)
            nodes, agg, e_rows = saved["nodes"], saved["agg"], saved.get("e_rows")
        ctx.graph, ctx.flags, ctx.be = graph, flags, be
        ctx.save_for_backward(x, ea, nodes, agg, out if relu else None, e_rows, *ts)
        return out

    @staticmethod
    def backward(ctx, gout):
        x, ea, nodes, agg, out, e_rows, *ts = ctx.saved_tensors
        need = ctx.needs_input_grad
        # the busy-machine width rule (rasfast/_threads.py), as the forward kernels have it:
        # with the cores busy, small per-edge torch ops at full width wait on descheduled
        # threads (measured: the per-question backward 5x slower at load 5 on 2 cores)
        width = (torch_width(x.shape[0] * (x.shape[1] + ctx.graph.csr.num_edges // max(x.shape[0], 1))
                             * nodes.shape[1]) if x.device.type == "cpu" else contextlib.nullcontext())
        with width:
            grads = _conv_backward(gout, x, ea, nodes, agg, ts, ctx.flags, ctx.graph,
                                   need[3], need[4], out, e_rows, ctx.be)
        return (None, None, None) + grads


def gemm_dtype(x) -> torch.dtype:
    """The dtype of the backward's GEMM operands for an input ``x``: a bfloat16 input's own
    (and a float16 one's on a GPU), as autograd through the torch layers, PyG's included,
    runs them -- the GEMMs accumulate in float32 and are what a training step's time is (on
    an H100, float32 operands run at 67 TFLOPS without TF32, bfloat16 at ~800); float32
    (float64) otherwise. The per-edge softmax terms and the scatter sums stay in float32."""
    if x.dtype == torch.bfloat16 or (x.dtype == torch.float16 and x.device.type != "cpu"):
        return x.dtype
    return torch.float64 if x.dtype == torch.float64 else torch.float32


def _conv_backward(gout, x, ea, nodes, agg, ts, flags, graph: _EdgeGraph, need_x: bool,
                   need_ea: bool, out=None, e_rows=None, backend=None):
    """Gradients (x, edge_attr, the layer's 12 tensors) from the forward's intermediates.
    ``backend``: the forward's (the attention backward runs on the CUDA kernels after a cuda
    forward, and for any float32 work on a GPU where they are built).
    ``out``: the forward's output, whose zeros are the ReLU's mask (recomputed from agg
    otherwise: the recomputation may put an element within rounding of 0 on the other
    side, and a subgradient inconsistent with the values the next layer saw)."""
    w, nw = _rebuild(flags, ts)
    relu = flags[5]
    if relu and out is not None:
        gout, relu = gout * (out > 0), False
    ct = torch.float64 if x.dtype == torch.float64 else torch.float32
    gt = gemm_dtype(x)
    # float32 products on the CPU run on the plans' GEMM (oneDNN where it is the faster one:
    # rasfast/ops/cpu_gemm.py) on the transposes and column slices below, without copies of
    # the right operands
    mm = lambda a, b: cpu_gemm.matmul(a.to(gt), b.to(gt))  # noqa: E731  (the result in gt)
    n, h, c = x.shape[0], w.heads, w.channels
    hc, f = h * c, w.out_channels
    nodes, agg = nodes.to(ct), agg.to(ct)
    tt = lambda t: None if t is None else t.detach().to(ct).requires_grad_()  # noqa: E731
    # 1. the epilogue, recomputed and differentiated by autograd
    with torch.enable_grad():
        a = agg.detach().requires_grad_()
        skip = nodes[:, 3 * hc:3 * hc + f].detach().requires_grad_() if w.root_weight else None
        wb = tt(w.w_beta)
        lw, lb = (tt(nw.weight), tt(nw.bias)) if nw is not None else (None, None)
        y = _epilogue_t(a, skip, wb, lw, lb, w.concat, nw is not None, flags[4], relu)
        ins = [t for t in (a, skip, wb, lw, lb) if t is not None]
        gs = iter(torch.autograd.grad(y, ins, gout.to(ct)))
    d_agg = next(gs)
    d_skip = next(gs) if skip is not None else None
    g_beta = next(gs) if wb is not None else None
    g_lw = next(gs) if lw is not None else None
    g_lb = next(gs) if lb is not None else None
    # 2. attention
    if _cuda_attention_backward(x, ct, backend):
        e = None
        if ea is not None:
            e = e_rows if e_rows is not None else graph.rows(ea).to(gt) @ w.w_edge.to(gt).t()
        rptr, rpos = graph.reverse()
        from .graph_conv_gpu import attention_backward  # the GPU plans load on first use
        d_nodes, de = attention_backward(nodes, d_agg, d_skip, graph.csr, graph.src, graph.dst,
                                         graph.row_of_edge, rptr, rpos, e, h, c, f)
    elif _fused_attention_backward(x, ct, graph):
        d_nodes, de = _attention_backward_cpu(nodes, d_agg, d_skip, graph, ea, w.w_edge, h, c,
                                              f, e_rows, gt)
    else:
        d_nodes, de = _attention_backward_torch(nodes, d_agg, d_skip, graph, ea, w.w_edge, h, c,
                                                f, e_rows, gt, ct)
    g_edge = g_ea = None
    if ea is not None:
        rows = graph.rows(ea)
        if need_ea:  # each edge_attr row is read by one edge (csr.eid is a permutation)
            g_ea = torch.empty((de.shape[0], rows.shape[1]), dtype=ea.dtype, device=x.device)
            g_ea.index_copy_(0, graph.csr.eid, mm(de, w.w_edge).to(ea.dtype))
        if graph.groups is None:  # one row per edge: g = de^T @ (the rows in CSR order)
            g_edge = mm(de.t(), graph.rows_in_csr_order(rows))
        else:  # few distinct rows: sum the edges' gradients into them first
            de_rows = torch.zeros((rows.shape[0], hc), dtype=ct, device=x.device).index_add_(
                0, graph.row_of_edge, de)
            g_edge = mm(de_rows.t(), rows)
        del de
    # 3. the packed projection
    g_wp = mm(d_nodes.t(), x)
    g_bp = d_nodes.sum(0)
    g_x = None
    if need_x:  # block by block: the packed [3HC + F, Din] weight would be a fresh copy
        col = 0
        for m in [w.w_query, w.w_key, w.w_value] + ([w.w_skip] if w.root_weight else []):
            blk = d_nodes[:, col:col + m.shape[0]].to(gt)
            if g_x is None:
                g_x = mm(blk, m)
            elif cpu_gemm.onednn_serves(blk, m):  # oneDNN writes a fresh product: add it
                g_x.add_(mm(blk, m))
            else:
                g_x.addmm_(blk, m.to(gt))
            col += m.shape[0]
        g_x = g_x.to(x.dtype)
    sl = [slice(0, hc), slice(hc, 2 * hc), slice(2 * hc, 3 * hc), slice(3 * hc, 3 * hc + f)]
    by_name = {"w_query": g_wp[sl[0]], "b_query": g_bp[sl[0]], "w_key": g_wp[sl[1]],
               "b_key": g_bp[sl[1]], "w_value": g_wp[sl[2]], "b_value": g_bp[sl[2]],
               "w_edge": g_edge, "w_skip": g_wp[sl[3]] if w.root_weight else None,
               "b_skip": g_bp[sl[3]] if w.root_weight else None, "w_beta": g_beta,
               "ln_weight": g_lw, "ln_bias": g_lb}
    g_ts = tuple(None if t is None or by_name[name] is None else by_name[name].to(t.dtype)
                 for name, t in zip(_LAYER_FIELDS, ts))
    return (g_x, g_ea) + g_ts


def _cuda_attention_backward(x, ct, backend) -> bool:
    """The attention backward's CUDA kernels serve float32 work on a GPU, and, under the
    emulator (RASFAST_CUDA_EMU), the CPU tensors of a backend "cuda" forward."""
    if ct != torch.float32 or not (x.is_cuda or (backend == "cuda" and _bk.cuda_emulated())):
        return False
    try:
        mod = _bk.cuda_module()
    except _bk.BackendUnavailable:  # e.g. a Triton-only install: the torch composition serves
        return False
    return hasattr(mod, "graph_conv_attend_backward") and _bk.cuda_unusable_reason() is None


def _fused_attention_backward(x, ct, graph: _EdgeGraph) -> bool:
    """The compiled attention backward serves float32 work on the CPU (the float64
    gradcheck path and GPU tensors take the torch one)."""
    if x.device.type != "cpu" or ct != torch.float32 or graph.csr.src.device.type != "cpu":
        return False
    try:
        return hasattr(_bk.cpu_module(), "graph_conv_attend_backward")
    except _bk.BackendUnavailable:
        return False


def _attention_backward_cpu(nodes, d_agg, d_skip, graph: _EdgeGraph, ea, w_edge, h, c, f,
                            e_rows, gt):
    """(d_nodes [N, 3HC (+ F)], de [E, HC] in CSR order or None) from the compiled kernel
    (csrc/graph_conv/graph_conv_cpu.cpp, graph_conv_attend_backward). Both are the calling
    thread's scratch (rasfast/ops/host_scratch.py), overwritten by its next call."""
    n, hc, csr = nodes.shape[0], h * c, graph.csr
    e = None
    if ea is not None:
        if e_rows is None:
            e_rows = graph.rows(ea).to(gt) @ w_edge.to(gt).t()
        e = e_rows.to(torch.float32).contiguous()
    rptr, rpos = graph.reverse()
    # both are used up inside the layer's backward (_conv_backward): reused memory, since a
    # fresh 252 MB output at 512 graphs cost the kernel more in page faults than its work
    d_nodes = host_scratch.buffer("attention_backward.d_nodes",
                                  (n, 3 * hc + (f if d_skip is not None else 0)))
    de = host_scratch.buffer("attention_backward.de", (csr.num_edges, hc)) if e is not None else None
    empty = np.empty((0, 0), np.float32)
    _bk.cpu_module().graph_conv_attend_backward(
        csr.indptr.long().contiguous().numpy(), graph.src.contiguous().numpy(),
        graph.row_of_edge.contiguous().numpy() if e is not None else np.empty(0, np.int64),
        rptr.numpy(), rpos.numpy(), graph.dst.contiguous().numpy(),
        nodes.contiguous().numpy(), e.numpy() if e is not None else empty,
        d_agg.reshape(n, hc).contiguous().numpy(), h, c, 1.0 / math.sqrt(c),
        d_nodes.numpy(), de.numpy() if de is not None else empty)
    if d_skip is not None:
        d_nodes[:, 3 * hc:] = d_skip
    return d_nodes, de


def _attention_backward_torch(nodes, d_agg, d_skip, graph: _EdgeGraph, ea, w_edge, h, c, f,
                              e_rows, gt, ct):
    """The same as :func:`_attention_backward_cpu`, composed of torch ops (any device and
    dtype)."""
    n, hc = nodes.shape[0], h * c
    qd, kj, vj, alpha, e_rows = _edge_terms(nodes, graph, ea, w_edge, h, c, ct, e_rows, gt)
    dA = d_agg[graph.dst]                                                  # [E, H, C]
    d_alpha = torch.einsum("ehc,ehc->eh", dA, vj)
    del vj
    s = torch.zeros((n, h), dtype=ct, device=nodes.device).index_add_(0, graph.dst, alpha * d_alpha)
    dl = alpha * (d_alpha - s[graph.dst]) / math.sqrt(c)                   # [E, H]
    z = lambda: torch.zeros((n, h, c), dtype=ct, device=nodes.device)  # noqa: E731
    dq = z().index_add_(0, graph.dst, kj.mul_(dl[..., None]))
    del kj
    dkj = qd.mul_(dl[..., None])
    dk = z().index_add_(0, graph.src, dkj)
    dvj = dA.mul_(alpha[..., None])
    dv = z().index_add_(0, graph.src, dvj)
    de = dkj.add_(dvj).view(-1, hc) if ea is not None else None            # [E, HC]
    d_nodes = torch.cat([dq.view(n, hc), dk.view(n, hc), dv.view(n, hc)]
                        + ([d_skip] if d_skip is not None else []), 1)
    return d_nodes, de


def _layers_autograd(xt, csr, ea, gp, specs, be, dropout: float = 0.0, graph=None):
    """The layers through _ConvFn (dropout after every layer but the last when > 0), then
    the node mean per graph when ``gp`` is given: differentiable in x, edge_attr and every
    tensor of ``specs``."""
    graph = graph if graph is not None else _EdgeGraph(csr, ea, xt.shape[0])
    h = xt
    for i, (w, nw, relu) in enumerate(specs):
        if h.shape[0] == 0:  # nothing to compute; stays connected to x (zero gradient)
            h = h.new_zeros((0, w.out_channels)) + h.sum() * 0
        else:
            h = _ConvFn.apply(graph, be, _layer_flags(w, nw, relu), h, ea, *_layer_tensors(w, nw))
        if dropout > 0 and i < len(specs) - 1:
            h = F.dropout(h, dropout, True)
    if gp is None:
        return h
    return _ref.graph_mean(h.float(), gp).to(h.dtype) if h.dtype in (torch.float16, torch.bfloat16) \
        else _ref.graph_mean(h, gp)


@follows_width_rule
def train_pool(x, edges, edge_attr, graph_ptr, layers: Sequence, dropout: float = 0.0,
               backend: str = "auto"):
    """:func:`graph_transformer_pool` for training: differentiable through the fused layers
    (compiled backends) in x, edge_attr and the layers' tensors, with dropout of rate
    ``dropout`` after every layer but the last (as RAS's encoder, after LayerNorm -> ReLU).

    The layers' tensors are taken as given (not detached): build the ConvWeights /
    NormWeights from the parameters to train (``TransformerConvLayer.weights(detach=False)``).
    With ``dropout == 0`` this is what :func:`graph_transformer_pool` runs when a gradient
    is wanted. Backend "torch" runs the reference layers (autograd through torch ops)."""
    specs = normalise_layers(layers)
    xt = as_tensor(x, "x")
    if not dropout:
        return graph_transformer_pool.__wrapped__(x, edges, edge_attr, graph_ptr, specs,
                                                  backend=backend)
    xt = _check_x(xt, specs[0][0].in_channels)
    csr = as_csr(edges, xt.shape[0], xt.device)
    gp = check_graph_ptr(graph_ptr, xt.shape[0], xt.device)
    ea = None
    for w, _, _ in specs:
        ea = _check_edge_attr(edge_attr, w, csr, xt)
    be = _bk.resolve(backend, xt.device, "graph_transformer_pool")
    if be == "torch":
        ea_csr = None if ea is None else ea[csr.eid]
        h = xt
        for i, (w, nw, relu) in enumerate(specs):
            h = _ref.transformer_conv(h, csr.edge_index(), ea_csr, w, nw, relu)
            if i < len(specs) - 1:
                h = F.dropout(h, dropout, True)
        return _ref.graph_mean(h, gp)
    return _layers_autograd(xt, csr, ea, gp, specs, be, dropout)


# The registered operators' autograd (torch.library.register_autograd): the backward is
# itself an operator, rasfast::graph_conv_backward, so a compiled training graph holds two
# opaque operators and no data-dependent shape. Since the forward operator returns only
# its output, the backward operator recomputes the forward (fused, keeping its
# intermediates) before the composed backward: about one extra forward per step, for
# traced training only (eager training keeps the intermediates, see _ConvFn).
def _backward_op(grad, x, edges, csr_src, edge_attr, graph_ptr, weights, heads, channels,
                 concat, has_norm, eps, relu, backend, validate, needs):
    specs = _specs_of(weights, heads, channels, concat, has_norm, eps, relu)
    leaf = lambda t, need: (None if t is None else t.detach().requires_grad_(need))  # noqa: E731
    xg = leaf(x, needs[0])
    eag = leaf(edge_attr, needs[1])
    ts = [None if _absent(t) else leaf(t, nd) for t, nd in zip(weights, needs[2:])]
    live = [(*_rebuild(_layer_flags(w, nw, r), ts[12 * i:12 * i + 12], detach=False), r)
            for i, (w, nw, r) in enumerate(specs)]
    ins = [t for t in [xg, eag] + ts if t is not None and t.requires_grad]
    with torch.enable_grad():
        if graph_ptr is None:
            (w, nw, r), = live
            out = transformer_conv.__wrapped__(xg, _edges_arg(edges, csr_src), eag, w, norm=nw,
                                               relu=r, backend=backend, validate=validate)
        else:
            out = graph_transformer_pool.__wrapped__(xg, _edges_arg(edges, csr_src), eag,
                                                     graph_ptr, live, backend=backend,
                                                     validate=validate)
        gs = iter(torch.autograd.grad(out, ins, grad, allow_unused=True) if ins else ())
    res = []
    for t in [xg, eag] + ts:
        g = next(gs) if t is not None and t.requires_grad else None
        res.append(x.new_empty(0) if g is None else g)
    return res


def _backward_fake(grad, x, edges, csr_src, edge_attr, graph_ptr, weights, heads, channels,
                   concat, has_norm, eps, relu, backend, validate, needs):
    return [t.new_empty(t.shape) if t is not None and nd and not (i >= 2 and _absent(t))
            else x.new_empty(0) for i, (t, nd) in enumerate(zip([x, edge_attr] + list(weights), needs))]


_BACKWARD_OP = define(
    "graph_conv_backward(Tensor grad, Tensor x, Tensor edges, Tensor? csr_src, "
    "Tensor? edge_attr, Tensor? graph_ptr, " + _LAYER_ARGS + ", str validate, bool[] needs) "
    "-> Tensor[]",
    _backward_op, _backward_fake)


def _setup_context(ctx, inputs, output):
    ctx.inputs = inputs


def _op_backward(ctx, grad, pool: bool):
    a = ctx.inputs
    if pool:
        x, edges, csr_src, ea, gp, weights, *rest = a
    else:
        (x, edges, csr_src, ea, weights, *rest), gp = a, None
    need = ctx.needs_input_grad
    wneed = need[5 if pool else 4]
    wneed = list(wneed) if isinstance(wneed, (list, tuple)) else [bool(wneed)] * len(weights)
    needs = [bool(need[0]), bool(need[3])] + [bool(v) and not _absent(t)
                                              for v, t in zip(wneed, weights)]
    # rest: heads .. backend, and validate when the caller gave it (a schema default is not
    # in ctx.inputs); the backward operator takes it always
    layer_rest = list(rest) + ["auto"] * (8 - len(rest))
    gs = _BACKWARD_OP(grad.contiguous(), x, edges, csr_src, ea, gp, weights, *layer_rest, needs)
    none = lambda g, nd: g if nd else None  # noqa: E731
    gx, gea = none(gs[0], needs[0]), none(gs[1], needs[1])
    gw = [none(g, nd) for g, nd in zip(gs[2:], needs[2:])]
    out = ((gx, None, None, gea, None, gw) if pool else (gx, None, None, gea, gw)) + (None,) * len(rest)
    # one gradient per argument the caller passed: ctx.inputs has the schema's defaults
    # (validate) filled in, needs_input_grad has the caller's arguments only
    return out[:len(need)]


if not getattr(_library, "_graph_conv_autograd", False):  # once (a module reload keeps it)
    _library._graph_conv_autograd = True
    torch.library.register_autograd("rasfast::graph_transformer_pool",
                                    lambda ctx, grad: _op_backward(ctx, grad, True),
                                    setup_context=_setup_context, lib=_library._LIB)
    torch.library.register_autograd("rasfast::transformer_conv",
                                    lambda ctx, grad: _op_backward(ctx, grad, False),
                                    setup_context=_setup_context, lib=_library._LIB)
