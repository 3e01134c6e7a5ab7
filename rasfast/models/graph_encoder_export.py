"""torch.export of a GraphEncoder for every graph batch: one program, any node, edge and graph count.

A plain ``torch.export.export`` of ``encode_batch`` specialises the program on the example's
sizes, and RAS's question graphs differ in size every question. With the sizes declared
dynamic, torch still specialises a size of 1 (its "0/1 specialisation": a dimension of
size 1 is treated as broadcastable), and the pooled output's graph dimension is
``graph_ptr``'s length - 1, so a one-graph batch (RAS's commonest) would need a program
of its own. Export under ``backed_size_oblivious`` reasons about every size as if it
could be any value >= 0, which removes that guard; the program then serves empty batches,
graphs without nodes or edges, and one or many graphs (tests/test_graph_encoder_export.py).

The exported program holds one ``torch.ops.rasfast.graph_transformer_pool`` call (plus the
projector's torch ops with ``project=True``). To run a saved program in another process,
``import rasfast.ops`` before ``torch.export.load``: it defines the operators the program
names (a bare ``import rasfast`` defers that to the first op call).
"""
from __future__ import annotations

from typing import Optional

import torch
from torch import nn
from torch.export import Dim


class _BatchEncoder(nn.Module):
    """``encode_batch`` as a module's forward (and, with ``project``, RAS's soft token:
    the projector over the mean of the graph vectors)."""

    def __init__(self, encoder: nn.Module, backend: str, project: bool):
        super().__init__()
        self.encoder, self.backend, self.project = encoder, backend, project

    def forward(self, x, edge_index, edge_attr, graph_ptr):
        v = self.encoder.encode_batch(x, edge_index, edge_attr, graph_ptr, backend=self.backend)
        if not self.project:
            return v
        return self.encoder.projector(v.mean(0))


def export_graph_encoder(encoder: nn.Module, x: torch.Tensor, edge_index: torch.Tensor,
                         edge_attr: Optional[torch.Tensor], graph_ptr: torch.Tensor, *,
                         backend: str = "auto", project: bool = False,
                         dynamic: bool = True) -> torch.export.ExportedProgram:
    """Exports ``encoder.encode_batch(x, edge_index, edge_attr, graph_ptr)``.

    The example tensors fix the dtypes, the devices and the feature widths; with
    ``dynamic`` (the default) the node count, the edge count and the graph count are free,
    so the program runs any batch of question graphs. ``project=True`` exports RAS's soft
    token instead (``encoder.projector`` over the mean of the graph vectors: [llm_hidden]).
    The encoder must be in eval mode (this exports inference; training compiles with
    ``torch.compile``, whose graph carries the operator's registered backward)."""
    if not isinstance(encoder, nn.Module) or not hasattr(encoder, "encode_batch"):
        raise TypeError(f"encoder: expected a GraphEncoder, got {type(encoder).__name__}")
    if encoder.training:
        raise ValueError("encoder: export needs eval mode (call encoder.eval() first); "
                         "a training step compiles with torch.compile instead")
    if project and getattr(encoder, "projector", None) is None:
        raise ValueError("project: the encoder has no projector (built with llm_hidden=None)")
    for name, t in (("x", x), ("edge_index", edge_index), ("graph_ptr", graph_ptr)):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{name}: expected a torch.Tensor example, got {type(t).__name__}")
    if edge_attr is not None and not isinstance(edge_attr, torch.Tensor):
        raise TypeError(f"edge_attr: expected a torch.Tensor example or None, got {type(edge_attr).__name__}")
    module = _BatchEncoder(encoder, backend, project)
    args = (x, edge_index, edge_attr, graph_ptr)
    if not dynamic:
        return torch.export.export(module, args)
    nodes, edges, ptr = Dim("num_nodes", min=0), Dim("num_edges", min=0), Dim("num_graphs_plus_1", min=1)
    shapes = ({0: nodes}, {1: edges}, None if edge_attr is None else {0: edges}, {0: ptr})
    with torch.fx.experimental._config.patch(backed_size_oblivious=True):
        return torch.export.export(module, args, dynamic_shapes=shapes)


__all__ = ["export_graph_encoder"]
