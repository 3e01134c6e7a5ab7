"""RAS's graph encoder, weight-compatible with its PyG modules, with a fused eval path and a cache.

Architecture (RAS's public code): L TransformerConv layers (heads x C concatenated,
edge_dim, root_weight on, beta off) with LayerNorm -> ReLU -> dropout between layers, the
node mean of each subgraph, the mean over the subgraphs, and a projector
Linear(hidden, 2048) -> Sigmoid -> Linear(2048, llm_hidden) giving one soft token.

- eval mode / no grad: :func:`rasfast.graph_transformer_pool` (fused kernels, any backend),
  and each subgraph's pooled vector is cached under the subgraph's content hash, so a RAS
  iteration that adds the i-th subgraph encodes one subgraph, not i.
- training with grad: the same fused layers, differentiable (rasfast.ops.graph_conv's
  autograd: each layer's fused forward keeps its projections and attention output, the
  backward is composed of GEMMs and per-edge torch ops). With dropout > 0 the layers run
  one autograd node each with F.dropout between them (after LayerNorm -> ReLU, as RAS);
  with dropout 0 that is the same computation as the pooled op. No cache in training.
  Under torch.compile / torch.export the registered operators carry the gradient
  (torch.library.register_autograd). backend="torch" trains through the plain torch
  reference layers instead.
The layer submodules use PyG's parameter names (lin_query, lin_key, lin_value, lin_edge,
lin_skip, lin_beta), so PyG state dicts load directly.
"""
from __future__ import annotations

import collections
from typing import List, Optional, Sequence, Union

import torch
import torch.nn.functional as F
from torch import nn

from ..ops._deferred import to_device
from ..ops._library import traced
from ..ops.graph_conv import (flat_layers, graph_transformer_pool, pool_operator, train_pool,
                              transformer_conv)
from ..ops.graph_conv_params import ConvWeights, NormWeights
from ..reference import graph_conv as _ref
from .graph_encoder_export import export_graph_encoder
from .graph_replay import PoolReplay
from .question_graph import QuestionGraph, batch_graphs


class TransformerConvLayer(nn.Module):
    """Parameters of one TransformerConv, named as in torch_geometric (state dicts interchange)."""

    def __init__(self, in_channels: int, channels: int, heads: int = 1, concat: bool = True,
                 beta: bool = False, edge_dim: Optional[int] = None, bias: bool = True,
                 root_weight: bool = True):
        super().__init__()
        self.heads, self.channels, self.concat = heads, channels, concat
        hc = heads * channels
        out = hc if concat else channels
        self.lin_query = nn.Linear(in_channels, hc, bias=bias)
        self.lin_key = nn.Linear(in_channels, hc, bias=bias)
        self.lin_value = nn.Linear(in_channels, hc, bias=bias)
        self.lin_edge = nn.Linear(edge_dim, hc, bias=False) if edge_dim is not None else None
        self.lin_skip = nn.Linear(in_channels, out, bias=bias) if root_weight else None
        self.lin_beta = nn.Linear(3 * out, 1, bias=False) if (beta and root_weight) else None

    @property
    def out_channels(self) -> int:
        return self.heads * self.channels if self.concat else self.channels

    def weights(self, detach: bool = True) -> ConvWeights:
        g = (lambda m, a: None if m is None or getattr(m, a) is None else
             (getattr(m, a).detach() if detach else getattr(m, a)))
        return ConvWeights(self.heads, self.channels, self.concat,
                           g(self.lin_query, "weight"), g(self.lin_query, "bias"),
                           g(self.lin_key, "weight"), g(self.lin_key, "bias"),
                           g(self.lin_value, "weight"), g(self.lin_value, "bias"),
                           g(self.lin_edge, "weight"), g(self.lin_skip, "weight"),
                           g(self.lin_skip, "bias"), g(self.lin_beta, "weight"))


def _to_model(t: torch.Tensor, device: torch.device, dtype: torch.dtype) -> torch.Tensor:
    """Features of a host batch on the model's GPU without a host sync: a pinned staging copy
    and a non-blocking transfer (torch copies pageable memory synchronously: a wait for the
    device's queue on every per-question call), then the dtype there."""
    if t.device.type == "cpu" and device.type == "cuda":
        t = to_device(t, device)
        return t if t.dtype == dtype else t.to(dtype)
    return t.to(device, dtype)


def _host_or(index: torch.Tensor, device: torch.device):
    """An index array of a host batch for a model on a GPU, as a numpy array: the op checks it
    and builds the CSR on the host and moves it in one staging copy, where the tensor moved
    first would be a blocking copy and a sort on the device (rasfast/ops/graph_conv.py)."""
    if index.device.type == "cpu" and device.type != "cpu":
        return index.numpy()
    return index.to(device)


class GraphEncoder(nn.Module):
    """List of question subgraphs -> one vector [llm_hidden] (or [hidden] without projector).

    Args:
        in_channels: node feature width (1024 in RAS's config; 384 for all-MiniLM-L6-v2).
        hidden: heads * channels of every layer (1024 in RAS).
        heads: attention heads (8 in RAS).
        num_layers: TransformerConv layers (3 in RAS).
        edge_dim: edge feature width, or None for no edge features.
        llm_hidden: projector output width; None for no projector.
        projector_hidden: projector inner width (2048 in RAS).
        dropout: dropout after each inner ReLU (training only).
        cache_size: pooled subgraph vectors kept (LRU) for eval-mode reuse.
    """

    def __init__(self, in_channels: int = 1024, hidden: int = 1024, heads: int = 8,
                 num_layers: int = 3, edge_dim: Optional[int] = 1024,
                 llm_hidden: Optional[int] = None, projector_hidden: int = 2048,
                 dropout: float = 0.0, cache_size: int = 4096):
        super().__init__()
        if hidden % heads:
            raise ValueError(f"hidden: {hidden} must be divisible by heads ({heads})")
        if num_layers < 1:
            raise ValueError(f"num_layers: must be >= 1, got {num_layers}")
        dims = [in_channels] + [hidden] * num_layers
        self.convs = nn.ModuleList(TransformerConvLayer(dims[i], hidden // heads, heads, True, False, edge_dim)
                                   for i in range(num_layers))
        self.norms = nn.ModuleList(nn.LayerNorm(hidden) for _ in range(num_layers - 1))
        self.projector = (nn.Sequential(nn.Linear(hidden, projector_hidden), nn.Sigmoid(),
                                        nn.Linear(projector_hidden, llm_hidden))
                          if llm_hidden is not None else None)
        self._init_state(dropout, cache_size)

    def _init_state(self, dropout: float, cache_size: int) -> None:
        self.dropout = dropout
        self.cache_size = cache_size
        self._cache: "collections.OrderedDict[tuple, torch.Tensor]" = collections.OrderedDict()
        self._specs_key = None
        self._specs = None
        self.cache_hits = 0
        self.cache_misses = 0
        self._replay: Optional[PoolReplay] = None

    def enable_cuda_graphs(self, enabled: bool = True, max_graphs: int = 8, graphs=None) -> "GraphEncoder":
        """Eval-mode encodings of host batches on a CUDA model replayed from CUDA graphs, one
        per padded size bucket (:mod:`rasfast.models.graph_replay`): a per-question call then
        costs the host its three input copies and one graph launch instead of every kernel's
        launch. Up to ``max_graphs`` buckets are kept. Training, device-resident index arrays
        and traced calls keep the eager path. ``graphs``: the capture implementation
        (:class:`rasfast.ops.replay.EagerGraphs` runs the same padded path without a GPU).
        Returns self."""
        self._replay = PoolReplay(max_graphs, graphs) if enabled else None
        return self

    # ---- construction from RAS's PyG modules -------------------------------------------
    @classmethod
    def from_pyg(cls, convs: Sequence[nn.Module], norms: Sequence[nn.Module],
                 projector: Optional[nn.Module] = None, dropout: float = 0.0,
                 cache_size: int = 4096) -> "GraphEncoder":
        """Same weights as RAS's modules: TransformerConv list, LayerNorms between them, projector.

        ``norms`` must have len(convs) - 1 entries (LayerNorm -> ReLU after every layer but
        the last). ``projector`` is any module (RAS: Sequential(Linear, Sigmoid, Linear)); it
        is kept as is (a deep copy) and applied to the mean subgraph vector.
        """
        import copy
        convs, norms = list(convs), list(norms)
        if not convs:
            raise ValueError("convs: expected at least one TransformerConv")
        if len(norms) != len(convs) - 1:
            raise ValueError(f"norms: expected {len(convs) - 1} LayerNorms (one between layers), got {len(norms)}")
        enc = cls.__new__(cls)
        nn.Module.__init__(enc)
        layers = []
        for i, c in enumerate(convs):
            if not hasattr(c, "lin_query"):
                raise TypeError(f"convs[{i}]: expected a torch_geometric TransformerConv, got {type(c).__name__}")
            hc = c.lin_query.weight.shape[0]
            layer = TransformerConvLayer(c.lin_query.weight.shape[1], hc // c.heads, c.heads, c.concat,
                                         c.lin_beta is not None,
                                         None if c.lin_edge is None else c.lin_edge.weight.shape[1],
                                         c.lin_query.bias is not None, c.lin_skip is not None and c.root_weight)
            keep = ("lin_query", "lin_key", "lin_value", "lin_edge", "lin_beta") + (
                ("lin_skip",) if layer.lin_skip is not None else ())
            layer.load_state_dict({k: v for k, v in c.state_dict().items() if k.split(".")[0] in keep})
            layers.append(layer.to(c.lin_query.weight.device, c.lin_query.weight.dtype))
        enc.convs = nn.ModuleList(layers)
        for i, n in enumerate(norms):
            if not isinstance(n, nn.LayerNorm):
                raise TypeError(f"norms[{i}]: expected torch.nn.LayerNorm, got {type(n).__name__}")
        enc.norms = nn.ModuleList(copy.deepcopy(n) for n in norms)
        enc.projector = copy.deepcopy(projector) if projector is not None else None
        enc._init_state(dropout, cache_size)
        return enc

    # ---- the fused (inference) path --------------------------------------------------------
    @property
    def hidden(self) -> int:
        return self.convs[-1].out_channels

    def _weights_key(self):
        """Every layer parameter's (data pointer, version, dtype, device), read on each call
        (a per-question call: a replaced, moved or updated parameter changes it). The modules'
        own parameter dicts are walked directly: ``Module.parameters()``' generator and memo set
        made this ~35 us of a replayed call's ~60 us of host work (cProfile, Zen 5)."""
        key = []
        stack = [*self.convs, *self.norms]
        while stack:
            m = stack.pop()
            for p in m._parameters.values():
                if p is not None:
                    key.append((p.data_ptr(), p._version, p.dtype, p.device))
            stack.extend(c for c in m._modules.values() if c is not None)
        return tuple(key)

    def layer_specs(self):
        """[(ConvWeights, NormWeights | None, relu)] for graph_transformer_pool (cached per weights)."""
        key = self._weights_key()
        if self._specs_key != key:
            specs = []
            for i, conv in enumerate(self.convs):
                norm = None
                if i < len(self.norms):
                    n = self.norms[i]
                    norm = NormWeights(None if n.weight is None else n.weight.detach(),
                                       None if n.bias is None else n.bias.detach(), float(n.eps))
                specs.append((conv.weights(), norm, norm is not None))
            self._specs, self._specs_key = specs, key
            self._cache.clear()  # pooled vectors of old weights are stale
        return self._specs

    def _param(self) -> torch.Tensor:
        return self.convs[0].lin_query.weight

    def encode_batch(self, x, edge_index, edge_attr, graph_ptr, backend: str = "auto") -> torch.Tensor:
        """Per-graph node means after all layers: [num_graphs, hidden] (before the projector).

        In training mode with grad enabled the fused kernels of ``backend`` run with their
        backward (gradients reach every parameter; dropout after each inner ReLU);
        otherwise they run without autograd.
        """
        p = self._param()
        if self.convs[0].lin_edge is None:
            edge_attr = None
        if self.training and torch.is_grad_enabled():
            return self._encode_train(x.to(p.device, p.dtype), edge_index.to(p.device),
                                      None if edge_attr is None else edge_attr.to(p.device, p.dtype),
                                      graph_ptr.to(p.device), backend)
        with torch.no_grad():
            if traced(x):  # torch.compile / torch.export: one operator, layers from the modules
                return pool_operator(x.to(p.device, p.dtype), edge_index.to(p.device),
                                     None if edge_attr is None else edge_attr.to(p.device, p.dtype),
                                     graph_ptr.to(p.device), self._layer_args(), backend)
            if self._replays(p.device, edge_index, graph_ptr, backend):
                return self._replay(self.layer_specs(), x, edge_index, edge_attr, graph_ptr,
                                    p.dtype, p.device, backend)
            return graph_transformer_pool(_to_model(x, p.device, p.dtype), _host_or(edge_index, p.device),
                                          None if edge_attr is None else _to_model(edge_attr, p.device, p.dtype),
                                          _host_or(graph_ptr, p.device), self.layer_specs(),
                                          backend=backend)

    def _replays(self, device: torch.device, edge_index, graph_ptr, backend: str) -> bool:
        """The graph-replay path serves this call: enabled, a device it serves, the index
        arrays on the host (padding them is host work), a compiled backend (not "torch")."""
        r = self._replay
        return (r is not None and r.serves(device) and backend != "torch"
                and all(getattr(a, "device", torch.device("cpu")).type == "cpu" for a in (edge_index, graph_ptr)))

    def export(self, x, edge_index, edge_attr, graph_ptr, backend: str = "auto",
               project: bool = False, dynamic: bool = True) -> torch.export.ExportedProgram:
        """``torch.export`` of :meth:`encode_batch` (eval mode) that serves every batch size:
        the node, edge and graph counts are dynamic (one graph and empty batches included).
        See :func:`rasfast.models.graph_encoder_export.export_graph_encoder`."""
        return export_graph_encoder(self, x, edge_index, edge_attr, graph_ptr, backend=backend,
                                    project=project, dynamic=dynamic)

    def _live_specs(self, detach: bool = True):
        """[(ConvWeights, NormWeights | None, relu)] read from the modules as they are (no
        cache keyed on data pointers, which tracing cannot read); ``detach=False`` keeps
        the parameters themselves, for training."""
        d = (lambda t: None if t is None else t.detach()) if detach else (lambda t: t)
        specs = []
        for i, conv in enumerate(self.convs):
            norm = None
            if i < len(self.norms):
                n = self.norms[i]
                norm = NormWeights(d(n.weight), d(n.bias), float(n.eps))
            specs.append((conv.weights(detach=detach), norm, norm is not None))
        return specs

    def _layer_args(self, detach: bool = True):
        """The operator's flat layer arguments (see :meth:`_live_specs`)."""
        return flat_layers(self._live_specs(detach))

    def _encode_train(self, x, edge_index, edge_attr, graph_ptr, backend):
        """Training: the fused layers with their backward, dropout after each inner ReLU."""
        specs = self._live_specs(detach=False)
        if not traced(x):
            return train_pool(x, edge_index, edge_attr, graph_ptr, specs, dropout=self.dropout,
                              backend=backend)
        if not self.dropout:  # one differentiable operator
            return pool_operator(x, edge_index, edge_attr, graph_ptr, flat_layers(specs), backend)
        h = x
        for i, (w, nw, relu) in enumerate(specs):
            h = transformer_conv(h, edge_index, edge_attr, w, norm=nw, relu=relu, backend=backend)
            if i < len(specs) - 1:
                h = F.dropout(h, self.dropout, True)
        return _ref.graph_mean(h, graph_ptr)

    def encode_graphs(self, graphs: Sequence[QuestionGraph], backend: str = "auto") -> torch.Tensor:
        """[len(graphs), hidden] pooled vectors; in eval mode cached per subgraph content."""
        if isinstance(graphs, QuestionGraph):
            graphs = [graphs]
        graphs = list(graphs)
        if not graphs:
            raise ValueError("subgraphs: expected at least one QuestionGraph")
        for i, g in enumerate(graphs):
            if not isinstance(g, QuestionGraph):
                raise TypeError(f"subgraphs[{i}]: expected a QuestionGraph, got {type(g).__name__}")
        if self.training and torch.is_grad_enabled():
            return self.encode_batch(*batch_graphs(graphs), backend=backend)
        self.layer_specs()  # clears the cache if the weights changed
        p = self._param()
        keys = [(g.key(), p.dtype, p.device, backend) for g in graphs]
        todo = list(dict.fromkeys(k for k in keys if k not in self._cache))
        self.cache_hits += len(keys) - len(todo)
        self.cache_misses += len(todo)
        if todo:
            first = {k: g for k, g in zip(keys, graphs)}
            vecs = self.encode_batch(*batch_graphs([first[k] for k in todo]), backend=backend)
            for k, v in zip(todo, vecs):
                self._cache[k] = v
        out = torch.stack([self._cache[k] for k in keys])
        for k in keys:
            self._cache.move_to_end(k)
        while len(self._cache) > self.cache_size:
            self._cache.popitem(last=False)
        return out

    def clear_cache(self) -> None:
        self._cache.clear()

    def forward(self, subgraphs: Union[QuestionGraph, Sequence[QuestionGraph]],
                backend: str = "auto") -> torch.Tensor:
        """Mean of the subgraph vectors, through the projector: [llm_hidden] (or [hidden])."""
        v = self.encode_graphs(subgraphs, backend=backend).mean(0)
        return self.projector(v) if self.projector is not None else v
