"""LangChain's own standard retriever suite (langchain-tests) on RasfastRetriever: the
adapter follows the framework's conventions (invoke/ainvoke return Documents, k as a
constructor parameter and as a per-call keyword)."""
import pytest

pytest.importorskip("langchain_tests", reason="langchain-tests (the dev extra) not installed")

from langchain_tests.integration_tests import RetrieversIntegrationTests  # noqa: E402

from rasfast.data.demo import generate_world  # noqa: E402
from rasfast.encode import HashingEncoder  # noqa: E402
from rasfast.integrations.langchain import RasfastRetriever  # noqa: E402
from rasfast.index.knowledge import KnowledgeIndex  # noqa: E402
from rasfast.index.knowledge.extract import corpus_record  # noqa: E402

_WORLD = generate_world(seed=0, n_passages=120, n_questions=20)
_INDEX = KnowledgeIndex.build(_WORLD.passages, _WORLD.triples, HashingEncoder(),
                              corpus_record("demo"), num_themes=4)


class TestRasfastRetrieverStandard(RetrieversIntegrationTests):
    @property
    def retriever_constructor(self):
        return RasfastRetriever

    @property
    def retriever_constructor_params(self):
        return {"kindex": _INDEX, "system": "gear-naive", "encoder": HashingEncoder()}

    @property
    def retriever_query_example(self):
        return _WORLD.questions[0].question
