"""GPU plans of the graph-transformer layers (cuda and triton backends).

On a GPU the dense projections are cheap cuBLAS GEMMs, so both backends use PyG's direct
form: one GEMM for query/key/value/skip, one for the edge features; the fused attention
kernel (CUDA: warp per node and head; Triton: program per node and head) then gathers,
runs the online softmax and the weighted sum without per-edge intermediates. The CUDA
backend also fuses the epilogue and the pooling; the Triton one does those in torch.
"""
from __future__ import annotations

import math
from typing import NamedTuple

import torch
import torch.nn.functional as F

from .. import _env
from .. import dispatch as _bk
from .._arrays import device_guard, DTYPE_CODES, cuda_stream, device_ptr
from ..reference.graph_conv import graph_mean
from .graph_conv_params import packed_node_weights


def _project(x, ea, w):
    wn, bn = packed_node_weights(w)
    nodes = torch.addmm(bn, x, wn.t()).contiguous()
    e = None if ea is None else F.linear(ea, w.w_edge).contiguous()
    return nodes, e


def _ptr(t) -> int:
    return 0 if t is None else device_ptr(t)


def _f32(t):
    return None if t is None else t.float().contiguous()


class _LayerPlan(NamedTuple):
    """What a CUDA layer launch needs of its weights, made once per (weights, norm) pair: the
    packed projection, the float32 copies of the beta gate and LayerNorm parameters and
    their pointers (the per-call host path had ~20 tensor conversions and pointer reads a
    layer; docs/gpu.md, host time)."""
    wn: torch.Tensor
    bn: torch.Tensor
    keep: tuple            # the float32 tensors whose pointers follow (kept alive here)
    wb: int
    lw: int
    lb: int
    eps: float


def _plan(w, norm) -> _LayerPlan:
    """The layer's plan, cached on the (immutable) weights per norm object."""
    plans = w.__dict__.setdefault("_cuda_plans", {})
    hit = plans.get(id(norm))
    if hit is not None and hit[0] is norm:
        return hit[1]
    wn, bn = packed_node_weights(w)
    dev = w.w_query.device
    wb = _f32(w.w_beta.reshape(-1)) if w.beta else None
    lw = lb = None
    if norm is not None:
        f = w.out_channels
        lw = _f32(norm.weight) if norm.weight is not None else torch.ones(f, device=dev)
        lb = _f32(norm.bias) if norm.bias is not None else torch.zeros(f, device=dev)
    plan = _LayerPlan(wn, bn, (wb, lw, lb), _ptr(wb), _ptr(lw), _ptr(lb),
                      float(norm.eps) if norm is not None else 0.0)
    if len(plans) >= 8:  # norms made afresh per call (converted each time): keep a few
        plans.clear()
    plans[id(norm)] = (norm, plan)
    return plan


# (heads, channels, concat) -> whether the module's one-launch layer kernel takes them;
# RASFAST_GRAPH_CONV_FUSED=0 keeps attend and epilogue apart (benchmarks time both)
_FUSABLE: dict = {}


def _fusable(mod, h: int, c: int, concat: bool) -> bool:
    if _env.get("RASFAST_GRAPH_CONV_FUSED") == "0" or not hasattr(mod, "graph_conv_layer"):
        return False
    key = (h, c, concat)
    ok = _FUSABLE.get(key)
    if ok is None:
        ok = _FUSABLE[key] = bool(mod.graph_conv_layer_fusable(h, c, concat))
    return ok


def _edge_rows(ea, specs):
    """Every layer's projected edge rows from one GEMM, [E, sum of H*C], or None (no edge
    features, or one layer): the layers all project the same edge_attr, so one product
    replaces one launch a layer; each layer's attention reads its columns (a row stride).
    The stacked weights are kept on the first layer's (immutable) weights object, per tuple
    of the later ones: they live as long as the weights, never evicted, so a CUDA graph
    captured with these weights (rasfast.models.graph_replay) keeps reading live memory."""
    if ea is None or len(specs) < 2:
        return None
    ws = tuple(w for w, _, _ in specs)
    stacks = ws[0].__dict__.setdefault("_edge_stacks", {})
    key = tuple(id(w) for w in ws[1:])
    hit = stacks.get(key)
    if hit is None or any(a is not b for a, b in zip(hit[0], ws[1:])):
        hit = stacks[key] = (ws[1:], torch.cat([w.w_edge for w in ws]))
    return F.linear(ea, hit[1])


class Cuda:
    @staticmethod
    def conv_layer(x, csr, ea, w, norm, relu, saved=None, mod=None, stream=None, e=None):
        """``saved``: a dict that receives "nodes" and "agg" [N, H, C] float32 for the backward.
        ``mod``/``stream``: the CUDA module and x's stream, when the caller has them; ``e``:
        this layer's projected edge rows (columns of :func:`_edge_rows`), when made already."""
        n, h, c = x.shape[0], w.heads, w.channels
        if mod is None:
            mod, stream = _bk.cuda_module(), cuda_stream(x.device)
        p = _plan(w, norm)
        nodes = torch.addmm(p.bn, x, p.wn.t())
        if e is None and ea is not None:
            e = F.linear(ea, w.w_edge)
        code = DTYPE_CODES[x.dtype]
        out = torch.empty((n, w.out_channels), dtype=x.dtype, device=x.device)
        width = nodes.shape[1]
        e_ptr, e_stride = (0 if e is None or not e.numel() else e.data_ptr()), (0 if e is None else e.stride(0))
        if saved is None and _fusable(mod, h, c, w.concat):  # one launch: the layer kernel
            with device_guard(x.device):
                mod.graph_conv_layer(_ptr(csr.indptr), _ptr(csr.src), _ptr(csr.eid), code,
                                     nodes.data_ptr(), width, e_ptr, e_stride, n, h, c,
                                     1.0 / math.sqrt(c), w.concat, 3 * h * c, w.root_weight, p.wb,
                                     p.lw, p.lb, p.eps, relu, out.data_ptr(), stream)
            return out
        agg = torch.empty((n, h, c), dtype=torch.float32, device=x.device)
        with device_guard(x.device):
            mod.graph_conv_attend(_ptr(csr.indptr), _ptr(csr.src), _ptr(csr.eid), code,
                                  nodes.data_ptr(), width, e_ptr, e_stride, n, h, c,
                                  1.0 / math.sqrt(c), agg.data_ptr(), stream)
            mod.graph_conv_epilogue(agg.data_ptr(), n, h, c, w.concat, code, nodes.data_ptr(), width,
                                    3 * h * c, w.root_weight, p.wb, p.lw, p.lb, p.eps, relu,
                                    out.data_ptr(), stream)
        if saved is not None:
            saved["nodes"], saved["agg"], saved["e_rows"] = nodes, agg, e
        return out

    @staticmethod
    def pool(x, csr, ea, gp, specs):
        mod, stream = _bk.cuda_module(), cuda_stream(x.device)
        edge = _edge_rows(ea, specs) if x.shape[0] else None
        h, col = x, 0
        for w, norm, relu in specs:
            hc = w.heads * w.channels
            e = None if edge is None else edge[:, col:col + hc]
            col += hc
            h = (Cuda.conv_layer(h, csr, ea, w, norm, relu, mod=mod, stream=stream, e=e) if h.shape[0]
                 else h.new_zeros((0, w.out_channels)))
        g, f = gp.numel() - 1, h.shape[1]
        out = torch.empty((g, f), dtype=torch.float32, device=x.device)
        with device_guard(x.device):
            mod.graph_conv_pool(_ptr(h.contiguous()), DTYPE_CODES[h.dtype], _ptr(gp), g, f,
                                _ptr(out), stream)
        return out.to(x.dtype)


def epilogue_torch(agg, nodes, w, norm, relu, dtype):
    """agg [N, H, C] float32 -> the layer output (concat/mean, skip or beta gate, LN, ReLU)."""
    n, hc = agg.shape[0], w.heads * w.channels
    out = agg.reshape(n, hc) if w.concat else agg.mean(1)
    if w.root_weight:
        skip = nodes[:, 3 * hc:3 * hc + w.out_channels].float()
        if w.beta:
            b = torch.sigmoid(torch.cat([out, skip, out - skip], -1) @ w.w_beta.float().t())
            out = b * skip + (1 - b) * out
        else:
            out = out + skip
    if norm is not None:
        out = F.layer_norm(out, (out.shape[1],), _f32(norm.weight), _f32(norm.bias), norm.eps)
    if relu:
        out = torch.relu(out)
    return out.to(dtype)


class Triton:
    @staticmethod
    def conv_layer(x, csr, ea, w, norm, relu, saved=None):
        nodes, e = _project(x, ea, w)
        agg = _bk.triton_kernels().graph_conv.attend(csr.indptr, csr.src, csr.eid, nodes, e,
                                                     w.heads, w.channels)
        if saved is not None:
            saved["nodes"], saved["agg"] = nodes, agg.float().reshape(x.shape[0], w.heads, w.channels)
            saved["e_rows"] = e
        return epilogue_torch(agg, nodes, w, norm, relu, x.dtype)

    @staticmethod
    def pool(x, csr, ea, gp, specs):
        h = x
        for w, norm, relu in specs:
            h = Triton.conv_layer(h, csr, ea, w, norm, relu) if h.shape[0] else h.new_zeros((0, w.out_channels))
        return graph_mean(h.float(), gp).to(x.dtype)


def attention_backward(nodes, d_agg, d_skip, csr, src, dst, row_of_edge, rptr, rpos, e, h, c, f):
    """The attention backward on the CUDA kernels (csrc/graph_conv/graph_conv.cu,
    attend_back_*), float32: (d_nodes [N, 3HC (+ F)], de [E, HC] in CSR order or None), as the
    CPU kernel and the torch composition of rasfast/ops/graph_conv.py give them. ``e``: the
    projected edge rows [rows, HC] (row ``row_of_edge[p]`` for CSR position p) or None;
    ``rptr``/``rpos``: the CSR positions grouped by source node; ``dst``: each position's
    destination. Two launches, no atomics (deterministic), no [E, H, C] intermediate."""
    mod = _bk.cuda_module()
    n, hc, ne, dev = nodes.shape[0], h * c, csr.num_edges, nodes.device
    nodes = nodes.float().contiguous()
    dagg = d_agg.reshape(n, hc).float().contiguous()
    d_nodes = torch.empty((n, 3 * hc + (f if d_skip is not None else 0)), dtype=torch.float32,
                          device=dev)
    de = torch.empty((ne, hc), dtype=torch.float32, device=dev) if e is not None else None
    scratch = torch.empty((2, max(ne, 1), h), dtype=torch.float32, device=dev)  # dl, alpha
    ints = [t.long().contiguous() for t in (csr.indptr, src, rptr, rpos, dst)]
    roe = row_of_edge.long().contiguous() if e is not None else None
    with device_guard(dev):
        mod.graph_conv_attend_backward(
            device_ptr(ints[0]), _ptr(ints[1]), _ptr(roe), device_ptr(ints[2]), _ptr(ints[3]),
            _ptr(ints[4]), device_ptr(nodes), nodes.shape[1], _ptr(_f32(e)), device_ptr(dagg), n, h, c,
            1.0 / math.sqrt(c), device_ptr(d_nodes), d_nodes.shape[1], _ptr(de),
            device_ptr(scratch[0]), device_ptr(scratch[1]), cuda_stream(dev))
    if d_skip is not None:
        d_nodes[:, 3 * hc:] = d_skip
    return d_nodes, de
