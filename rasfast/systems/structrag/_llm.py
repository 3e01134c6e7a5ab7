"""StructRAG's LLM calls go through the shared per-prompt isolation (rasfast.llm.isolated);
kept here as the import path StructRAG's modules use."""
from ...llm.isolated import check_llm, generate_isolated

__all__ = ["check_llm", "generate_isolated"]
