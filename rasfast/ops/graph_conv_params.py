"""Weights of one TransformerConv layer (PyG-compatible) and of the LayerNorm after it.

PyG's ``TransformerConv`` holds five Linear layers; :class:`ConvWeights` holds the same
tensors under the same meaning, so a rasfast layer and a PyG layer built from one
state dict compute the same function. :func:`as_conv_weights` accepts a ``ConvWeights``,
a PyG ``TransformerConv`` module, or its ``state_dict()`` (then ``heads`` is required).
"""
from __future__ import annotations

import dataclasses
import weakref
from typing import Mapping, Optional

import torch


@dataclasses.dataclass(frozen=True)
class ConvWeights:
    """One TransformerConv layer: out = attention(q, k + e, v + e) (+ skip, beta gate).

    Shapes (Din = in_channels, HC = heads * channels, De = edge_dim):
    w_query/w_key/w_value [HC, Din] with optional biases [HC]; w_edge [HC, De] or None
    (no edge features); w_skip [HC or C, Din] (+ bias) when root_weight; w_beta [1, 3*HC or
    3*C] when beta.
    """
    heads: int
    channels: int
    concat: bool
    w_query: torch.Tensor
    b_query: Optional[torch.Tensor]
    w_key: torch.Tensor
    b_key: Optional[torch.Tensor]
    w_value: torch.Tensor
    b_value: Optional[torch.Tensor]
    w_edge: Optional[torch.Tensor] = None
    w_skip: Optional[torch.Tensor] = None
    b_skip: Optional[torch.Tensor] = None
    w_beta: Optional[torch.Tensor] = None

    @property
    def in_channels(self) -> int:
        return self.w_query.shape[1]

    @property
    def edge_dim(self) -> Optional[int]:
        return None if self.w_edge is None else self.w_edge.shape[1]

    @property
    def root_weight(self) -> bool:
        return self.w_skip is not None

    @property
    def beta(self) -> bool:
        return self.w_beta is not None

    @property
    def out_channels(self) -> int:
        """Width of the layer's output: heads * channels if concat else channels."""
        return self.heads * self.channels if self.concat else self.channels

    def to(self, device=None, dtype=None) -> "ConvWeights":
        """Same weights on ``device`` in ``dtype`` (``self`` when nothing changes)."""
        t = self.w_query
        if (device is None or torch.device(device) == t.device) and (dtype is None or dtype == t.dtype):
            return self
        conv = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        for k, v in conv.items():
            if isinstance(v, torch.Tensor):
                conv[k] = v.detach().to(device=device, dtype=dtype)
        return ConvWeights(**conv)


def cached_on(w: ConvWeights, key, make):
    """Memoises ``make()`` on the (immutable) weights object under ``key``.

    While torch.compile traces (the public ops' traced branch checks the weights' shapes
    through here) ``make()`` runs unmemoised: Dynamo (torch 2.11) cannot trace the frozen
    dataclass's ``__dict__.setdefault`` ("Dynamo does not know how to trace method
    setdefault", the seventh GPU run's graph_transformer_pool under fullgraph=True), and a
    cache filled while tracing would hold traced values. What is made here runs once per
    trace, not per call."""
    if torch.compiler.is_compiling():
        return make()
    cache = w.__dict__.setdefault("_cache", {})
    if key not in cache:
        cache[key] = make()
    return cache[key]


def packed_node_weights(w: ConvWeights, with_skip: bool = True):
    """(W, b): query/key/value(/skip) stacked so one GEMM projects every node.

    Rows [0, HC) query, [HC, 2HC) key, [2HC, 3HC) value, then skip when present; missing
    biases are zeros. Cached on the (immutable) weights object.
    """
    def make():
        mats = [w.w_query, w.w_key, w.w_value]
        if with_skip and w.w_skip is not None:
            mats.append(w.w_skip)
        return torch.cat(mats, 0).contiguous(), packed_node_biases(w, with_skip)
    return cached_on(w, ("packed", with_skip), make)


def packed_node_biases(w: ConvWeights, with_skip: bool = True) -> torch.Tensor:
    """The biases of :func:`packed_node_weights`' rows (zeros where a bias is missing)."""
    hc = w.heads * w.channels
    biases = [w.b_query, w.b_key, w.b_value]
    sizes = [hc, hc, hc]
    if with_skip and w.w_skip is not None:
        biases.append(w.b_skip)
        sizes.append(w.out_channels)
    z = lambda n: torch.zeros(n, dtype=w.w_query.dtype, device=w.w_query.device)  # noqa: E731
    return torch.cat([b if b is not None else z(n) for b, n in zip(biases, sizes)])


@dataclasses.dataclass(frozen=True)
class NormWeights:
    """LayerNorm over the last dim (weight/bias may be None: elementwise_affine=False)."""
    weight: Optional[torch.Tensor]
    bias: Optional[torch.Tensor]
    eps: float = 1e-5

    def to(self, device=None, dtype=None) -> "NormWeights":
        """Same weights on ``device`` in ``dtype`` (``self`` when nothing changes: no copy)."""
        def same(t):
            return t is None or ((device is None or torch.device(device) == t.device) and
                                 (dtype is None or dtype == t.dtype))
        if same(self.weight) and same(self.bias):
            return self
        # kept per (device, dtype) while the tensors are unmodified: a bfloat16 model's norms
        # were converted to float32 on every call, and each new object made a new CUDA layer
        # plan (graph_conv_gpu._plan), evicting the plan a captured CUDA graph reads
        f = (lambda t: None if t is None else t.detach().to(device=device, dtype=dtype))
        if torch.compiler.is_compiling():  # no __dict__ memo while Dynamo traces (cached_on)
            return NormWeights(f(self.weight), f(self.bias), self.eps)
        memo = self.__dict__.setdefault("_to", {})
        key = (None if device is None else torch.device(device), dtype)
        versions = tuple(None if t is None else t._version for t in (self.weight, self.bias))
        hit = memo.get(key)
        if hit is not None and hit[0] == versions:
            return hit[1]
        out = NormWeights(f(self.weight), f(self.bias), self.eps)
        memo[key] = (versions, out)
        return out


def _opt(sd: Mapping[str, torch.Tensor], key: str) -> Optional[torch.Tensor]:
    v = sd.get(key)
    return None if v is None else v.detach()


def conv_weights_from_state_dict(sd: Mapping[str, torch.Tensor], heads: int,
                                 concat: bool = True) -> ConvWeights:
    """ConvWeights from a PyG TransformerConv ``state_dict()`` (keys ``lin_query.weight``...)."""
    for key in ("lin_query.weight", "lin_key.weight", "lin_value.weight"):
        if key not in sd:
            raise ValueError(f"weights: state dict lacks {key!r}")
    if not isinstance(heads, int) or isinstance(heads, bool) or heads < 1:
        raise ValueError(f"heads: expected an int >= 1, got {heads!r}")
    hc = sd["lin_query.weight"].shape[0]
    if hc % heads:
        raise ValueError(f"heads: {heads} does not divide lin_query's output width {hc}")
    w = ConvWeights(heads=heads, channels=hc // heads, concat=bool(concat),
                    w_query=sd["lin_query.weight"].detach(), b_query=_opt(sd, "lin_query.bias"),
                    w_key=sd["lin_key.weight"].detach(), b_key=_opt(sd, "lin_key.bias"),
                    w_value=sd["lin_value.weight"].detach(), b_value=_opt(sd, "lin_value.bias"),
                    w_edge=_opt(sd, "lin_edge.weight"), w_skip=_opt(sd, "lin_skip.weight"),
                    b_skip=_opt(sd, "lin_skip.bias"), w_beta=_opt(sd, "lin_beta.weight"))
    check_conv_weights(w)
    return w


def as_conv_weights(weights, heads: Optional[int] = None, concat: Optional[bool] = None) -> ConvWeights:
    """Normalises ``weights`` (ConvWeights | PyG TransformerConv | state dict) to ConvWeights."""
    if isinstance(weights, ConvWeights):
        w = weights
    elif isinstance(weights, torch.nn.Module) and hasattr(weights, "lin_query"):
        w = _from_module(weights)
    elif isinstance(weights, Mapping):
        if heads is None:
            raise ValueError("heads: required when weights is a state dict")
        return conv_weights_from_state_dict(weights, heads, True if concat is None else concat)
    else:
        raise TypeError("weights: expected ConvWeights, a torch_geometric TransformerConv or its "
                        f"state_dict, got {type(weights).__name__}")
    if heads is not None and heads != w.heads:
        raise ValueError(f"heads: {heads} disagrees with the weights' {w.heads} heads")
    if concat is not None and bool(concat) != w.concat:
        raise ValueError(f"concat: {concat} disagrees with the weights (concat={w.concat})")
    cached_on(w, "checked", lambda: check_conv_weights(w) or True)  # shapes: once per object
    return w


# Module -> (parameter versions, ConvWeights): repeated calls with one PyG layer reuse its
# packed weights; an in-place update of a parameter (optimizer step) bumps its version.
_MODULE_WEIGHTS: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def _from_module(conv: torch.nn.Module) -> ConvWeights:
    if torch.compiler.is_compiling():
        # while Dynamo traces: no memo (it cannot compare the key's data pointers, and a
        # ConvWeights of traced values must not be kept) and no state_dict() (torch 2.11
        # cannot trace its metadata setattr): the Linear layers' tensors, once per trace
        return _module_weights(conv, _linear_tensors(conv))
    key = tuple((p.data_ptr(), p._version, p.dtype, p.device) for p in conv.parameters())
    hit = _MODULE_WEIGHTS.get(conv)
    if hit is not None and hit[0] == key:
        return hit[1]
    w = _module_weights(conv, dict(conv.state_dict()))
    _MODULE_WEIGHTS[conv] = (key, w)
    return w


def _linear_tensors(conv: torch.nn.Module) -> dict:
    """The state dict's entries of a TransformerConv's Linear layers (torch_geometric's
    names), read from the layers themselves."""
    sd = {}
    for name in ("lin_query", "lin_key", "lin_value", "lin_edge", "lin_skip", "lin_beta"):
        lin = getattr(conv, name, None)
        for attr in ("weight", "bias"):
            t = getattr(lin, attr, None)
            if t is not None:
                sd[f"{name}.{attr}"] = t
    return sd


def _module_weights(conv: torch.nn.Module, sd: dict) -> ConvWeights:
    if not getattr(conv, "root_weight", True):  # PyG builds lin_skip even when unused
        sd = {k: v for k, v in sd.items() if not k.startswith(("lin_skip.", "lin_beta."))}
    return conv_weights_from_state_dict(sd, int(conv.heads), bool(conv.concat))


def as_norm_weights(norm) -> Optional[NormWeights]:
    """NormWeights from None, NormWeights or a torch.nn.LayerNorm over one dim."""
    if norm is None or isinstance(norm, NormWeights):
        return norm
    if isinstance(norm, torch.nn.LayerNorm):
        if len(norm.normalized_shape) != 1:
            raise ValueError("norms: only LayerNorm over the last dim is supported")
        w = None if norm.weight is None else norm.weight.detach()
        b = None if norm.bias is None else norm.bias.detach()
        return NormWeights(w, b, float(norm.eps))
    raise TypeError(f"norms: expected torch.nn.LayerNorm, NormWeights or None, got {type(norm).__name__}")


def check_conv_weights(w: ConvWeights) -> None:
    """Shapes agree with each other (ValueError naming the tensor otherwise)."""
    hc, din = w.heads * w.channels, w.w_query.shape[1] if w.w_query.dim() == 2 else -1

    def shape(name, t, expect):
        if t is not None and tuple(t.shape) != tuple(expect):
            raise ValueError(f"weights.{name}: expected shape {tuple(expect)}, got {tuple(t.shape)}")

    shape("w_query", w.w_query, (hc, din))
    shape("w_key", w.w_key, (hc, din))
    shape("w_value", w.w_value, (hc, din))
    for n in ("b_query", "b_key", "b_value"):
        shape(n, getattr(w, n), (hc,))
    if w.w_edge is not None:
        if w.w_edge.dim() != 2:
            raise ValueError(f"weights.w_edge: expected a 2-d matrix, got {tuple(w.w_edge.shape)}")
        shape("w_edge", w.w_edge, (hc, w.w_edge.shape[1]))
    out = w.out_channels
    shape("w_skip", w.w_skip, (out, din))
    shape("b_skip", w.b_skip, (out,))
    if w.w_beta is not None and w.w_skip is None:
        raise ValueError("weights.w_beta: the beta gate needs root_weight (w_skip)")
    shape("w_beta", w.w_beta, (1, 3 * out))
