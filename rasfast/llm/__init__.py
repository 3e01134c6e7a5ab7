"""LLM backends (OpenAI-compatible HTTP, transformers, vLLM), the GraphLLM (graph soft token
+ LoRA) and the adapters that plug them into the RAS loop as planner, answerer and triple
extractor. Heavy dependencies (transformers, peft, vllm) are imported only when used."""
from __future__ import annotations

import importlib

_LAZY = {
    "LLM": "rasfast.llm.base",
    "cut_at_stop": "rasfast.llm.base",
    "OpenAIChat": "rasfast.llm.openai_chat",
    "LLMRequestError": "rasfast.llm.openai_chat",
    "HFCausalLM": "rasfast.llm.hf",
    "VLLM": "rasfast.llm.vllm_backend",
    "GraphLLM": "rasfast.llm.graph_llm",
    "GraphLLMSample": "rasfast.llm.training_data",
    "LoraSettings": "rasfast.llm.graph_llm",
    "LLMPlanner": "rasfast.llm.adapters",
    "LLMAnswerer": "rasfast.llm.adapters",
    "GraphLLMPlanner": "rasfast.llm.adapters",
    "GraphLLMAnswerer": "rasfast.llm.adapters",
    "LLMTripleExtractor": "rasfast.llm.adapters",
    "tiny_llama": "rasfast.llm.tiny",
}

__all__ = sorted(_LAZY)


def __getattr__(name):
    if name in _LAZY:
        value = getattr(importlib.import_module(_LAZY[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'rasfast.llm' has no attribute {name!r}")
