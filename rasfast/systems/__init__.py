"""The four systems side by side, over one registry and one set of types (:mod:`rasfast.types`):

- :mod:`.ras`: the RAS loop (planner → retrieve → triples → question graph → answer);
- :mod:`.gear`: GEAR's graph expansion (NaiveGE / SyncGE);
- :mod:`.kirag`: KiRAG's knowledge-driven iterative retrieval;
- :mod:`.structrag`: StructRAG's router, structurizers and utilizer;
- :mod:`.registry`: ``build_system(name, knowledge_index, ...)`` serving each by name.

Each system declares its own stage order for the profiler (``STAGES``).
"""
from .registry import LoopSystem, SystemResult, build_system, register_system, system_names

__all__ = ["register_system", "build_system", "system_names", "SystemResult", "LoopSystem"]
