"""LLM backends (OpenAI-compatible HTTP, transformers, vLLM, local GGUF via llama.cpp), the GraphLLM (graph soft token
+ LoRA) and the adapters that plug them into the RAS loop as planner, answerer and triple
extractor. Heavy dependencies (transformers, peft, vllm) are imported only when used.

Usage::

    from rasfast.llm import OpenAIChat, LLMPlanner, LLMAnswerer, LLMTripleExtractor
    llm = OpenAIChat("Qwen2.5-7B-Instruct", base_url="http://localhost:8000/v1")  # key: $OPENAI_API_KEY
    ras = rasfast.RAS(retriever, LLMTripleExtractor(llm), LLMPlanner(llm), LLMAnswerer(llm))

    # the RAS model: graph encoder + projector + LoRA causal LM, one soft graph token
    from rasfast.llm import GraphLLM, GraphLLMPlanner, GraphLLMAnswerer, HFCausalLM
    from rasfast.llm.training_data import multitask_samples
    g = GraphLLM(AutoModelForCausalLM.from_pretrained(path), tokenizer,
                 rasfast.GraphEncoder(in_channels=384, edge_dim=384))   # LoRA r=8, alpha=16, q/v
    g.fit(multitask_samples(question, subqueries, step_triples, answer, graphs) + ...)
    g.save("ckpt/"); g.load("ckpt/")
    ras = rasfast.RAS(retriever, extractor, GraphLLMPlanner(g), GraphLLMAnswerer(g),
                      graph_encoder=g.subgraph_encoder(text_encoder))  # each subgraph encoded once
"""
from __future__ import annotations

import importlib

_LAZY = {
    "LLM": "rasfast.llm.base",
    "cut_at_stop": "rasfast.llm.base",
    "OpenAIChat": "rasfast.llm.openai_chat",
    "LLMRequestError": "rasfast.llm.openai_chat",
    "LLMUnreachableError": "rasfast.llm.openai_chat",
    "HFCausalLM": "rasfast.llm.hf",
    "VLLM": "rasfast.llm.vllm_backend",
    "LocalLLM": "rasfast.llm.local",
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
