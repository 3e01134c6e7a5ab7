"""The index layer: everything a saved corpus is, below the systems.

- :mod:`.theme_index`: ``ThemeIndex`` (passages, dense vectors, theme vectors and model, shards;
  search in memory, memory-mapped, streamed);
- :mod:`.store`, :mod:`.durable`, :mod:`.passages`, :mod:`.stream`: its on-disk format and
  crash-safe write protocol, lazily decoded passages, streamed search;
- :mod:`.distributed`: ``DistributedThemeIndex`` over torch.distributed;
- :mod:`.knowledge`: ``KnowledgeIndex`` (+ triples, triple graph, triple embeddings), the
  one saved index every system runs from.
"""
from .theme_index import IndexConflictError, ThemeIndex, parse_bytes

__all__ = ["ThemeIndex", "IndexConflictError", "parse_bytes"]
