"""Public ops: one thin documented function per op -> validation -> backend dispatch.

Importing this package defines them as PyTorch operators, ``torch.ops.rasfast.<name>``
(rasfast/ops/_library.py): ``import rasfast.ops`` (or use any public op once, e.g.
``rasfast.select_k``) before calling ``torch.ops.rasfast.*`` directly.
"""
from . import select, theme, segment, beam, graph_conv, graph_build  # noqa: F401  (each defines its operators)
