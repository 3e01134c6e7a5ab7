"""Retriever adapters for RAG frameworks, over a :class:`rasfast.index.knowledge.KnowledgeIndex`
and any registered system (rasfast.systems):

- ``rasfast.integrations.langchain.RasfastRetriever``: a ``langchain_core`` BaseRetriever
  (``pip install 'rasfast[langchain]'``);
- ``rasfast.integrations.llama_index.RasfastRetriever``: a ``llama_index.core``
  BaseRetriever (``pip install 'rasfast[llamaindex]'``).

Both return the framework's own objects (Document / NodeWithScore) with the passage id,
title, score, rank, the passage's triples and the system's answer in metadata.
"""
