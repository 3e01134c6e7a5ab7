"""StructRAG (ICLR 2025) over rasfast's components: a hybrid structure router, a
scattered-knowledge structurizer and a structured-knowledge utilizer, batched and concurrent.

Usage::

    from rasfast.systems.structrag import StructRAG, from_components
    from rasfast.llm import OpenAIChat
    sr = StructRAG(OpenAIChat("Qwen2.5-7B-Instruct", base_url="http://localhost:8000/v1"),
                   retriever=dense_retriever, triples_by_pid=triples)
    res = sr.run("Which company ...?")                 # or sr.run(question, documents=[...])
    res.answer, res.structure_type, res.subquestions, res.trace.summary()

    sr = StructRAG(retriever=dense_retriever, triples_by_pid=triples)   # offline, no LLM

Stages (one span each): ``retrieve``, ``route``, ``structurize``, ``decompose``, ``extract``,
``infer``. See :mod:`rasfast.systems.structrag.system` for robustness rules.
"""
from .parse import markdown_table, parse_route, parse_structure, parse_subquestions
from .router import ROUTER_DIR, EmbeddingRouter, HeuristicRouter, LLMRouter, core_content, load_router
from .structurize import (HybridStructurizer, LLMStructurizer, StructTask, StructureSet, chunk_structures,
                          graph_structure, table_structure)
from .system import STAGES, StructRAG, from_components
from .types import DEFAULT_TYPE, STRUCTURE_TYPES, TEXT_KIND, Structure, StructRAGResult, as_documents
from .utilize import KnowledgeCutWarning, Selection, Utilizer

__all__ = ["StructRAG", "from_components", "STAGES", "StructRAGResult", "Structure", "STRUCTURE_TYPES",
           "DEFAULT_TYPE", "TEXT_KIND", "as_documents", "LLMRouter", "HeuristicRouter", "EmbeddingRouter",
           "load_router", "ROUTER_DIR",
           "core_content", "HybridStructurizer", "LLMStructurizer", "StructTask", "StructureSet",
           "graph_structure", "table_structure", "chunk_structures", "Utilizer", "Selection",
           "KnowledgeCutWarning",
           "parse_route", "parse_structure", "parse_subquestions", "markdown_table"]
