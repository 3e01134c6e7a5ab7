"""The LangChain and LlamaIndex retrievers, through each framework's own API (invoke /
batch, retrieve), over a saved knowledge index and the ras / gear systems."""
import pytest

from rasfast.data.demo import generate_world
from rasfast.encode import HashingEncoder
from rasfast.index.knowledge import KnowledgeIndex
from rasfast.index.knowledge.extract import corpus_record
from rasfast.systems import build_system

ENC = HashingEncoder()


@pytest.fixture(autouse=True)
def _cache(tmp_path, monkeypatch):
    monkeypatch.setenv("RASFAST_CACHE", str(tmp_path / "cache"))


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    w = generate_world(seed=1, n_passages=250, n_questions=300)
    d = tmp_path_factory.mktemp("kix") / "ix"
    KnowledgeIndex.build(w.passages, w.triples, ENC, corpus_record("demo"), num_themes=6).save(d)
    q = next(q for q in w.questions if q.type.startswith("2hop"))
    return d, q


def _expected(d, q, system, k):
    ki = KnowledgeIndex.load(d)
    r = build_system(system, ki, encoder=ENC, k=k).run_batch([q.question])[0]
    return ki, [p.pid for p in r.passages[:k]], r


@pytest.mark.parametrize("system", ["ras", "gear-naive"])
def test_langchain_retriever(setup, system):
    pytest.importorskip("langchain_core", reason="rasfast[langchain] extra not installed")
    from langchain_core.documents import Document
    from langchain_core.retrievers import BaseRetriever
    from rasfast.integrations.langchain import RasfastRetriever
    d, q = setup
    ki, pids, r = _expected(d, q, system, 4)
    ret = RasfastRetriever.from_index(d, system=system, k=4)
    assert isinstance(ret, BaseRetriever)
    docs = ret.invoke(q.question)
    assert all(isinstance(x, Document) for x in docs)
    assert [x.metadata["pid"] for x in docs] == pids and [x.metadata["rank"] for x in docs] == list(range(len(pids)))
    assert set(pids) & set(q.gold_pids)
    top = docs[0]
    p = ki.passages[ki.pids.index(top.metadata["pid"])]
    assert top.page_content == f"{p.title}\n{p.text}" and top.id == f"rasfast-{p.pid}"
    assert top.metadata["triples"] == [list(t) for t in ki.triples_by_pid[p.pid]]
    assert top.metadata["system"] == system and top.metadata["answer"] == r.answer
    assert isinstance(top.metadata["score"], float)
    both = ret.batch([q.question, "Where is nothing?"])      # the framework's batch API
    assert [x.metadata["pid"] for x in both[0]] == pids and len(both) == 2


def test_langchain_retriever_validates(setup):
    pytest.importorskip("langchain_core", reason="rasfast[langchain] extra not installed")
    from rasfast.integrations.langchain import RasfastRetriever
    d, _ = setup
    ki = KnowledgeIndex.load(d)
    with pytest.raises(ValueError, match="system: expected one of"):
        RasfastRetriever(kindex=ki, system="nope")
    with pytest.raises(TypeError, match="run_batch"):
        RasfastRetriever(kindex=ki, system=object())
    with pytest.raises(Exception, match="greater than or equal to 1"):
        RasfastRetriever(kindex=ki, k=0)


@pytest.mark.parametrize("system", ["ras", "gear-naive"])
def test_llama_index_retriever(setup, system):
    pytest.importorskip("llama_index.core", reason="rasfast[llamaindex] extra not installed")
    from llama_index.core.base.base_retriever import BaseRetriever
    from llama_index.core.schema import NodeWithScore, QueryBundle
    from rasfast.integrations.llama_index import RasfastRetriever
    d, q = setup
    ki, pids, r = _expected(d, q, system, 3)
    ret = RasfastRetriever.from_index(d, system=system, k=3)
    assert isinstance(ret, BaseRetriever)
    nodes = ret.retrieve(q.question)
    assert all(isinstance(n, NodeWithScore) for n in nodes)
    assert [n.node.metadata["pid"] for n in nodes] == pids and set(pids) & set(q.gold_pids)
    top = nodes[0]
    assert top.node.node_id == f"rasfast-{pids[0]}" and top.score == top.node.metadata["score"]
    assert top.node.metadata["triples"] == [list(t) for t in ki.triples_by_pid[pids[0]]]
    assert top.node.get_content().startswith(ki.passages[ki.pids.index(pids[0])].title)
    assert [n.node.metadata["pid"] for n in ret.retrieve(QueryBundle(q.question))] == pids
    with pytest.raises(ValueError, match="k: expected"):
        RasfastRetriever(ki, k=0)


def test_langchain_per_call_k_and_one_run_batch_per_batch(setup):
    """invoke(query, k=n) returns n documents; batch() runs the system once for all queries."""
    pytest.importorskip("langchain_core", reason="rasfast[langchain] extra not installed")
    from rasfast.integrations.langchain import RasfastRetriever
    d, q = setup
    ki = KnowledgeIndex.load(d)
    inner = build_system("gear-naive", ki, encoder=ENC, k=5)

    class Counting:
        calls = []

        def run_batch(self, questions):
            self.calls.append(list(questions))
            return inner.run_batch(questions)

    sys_ = Counting()
    ret = RasfastRetriever(kindex=ki, system=sys_, k=4)
    assert len(ret.invoke(q.question)) == 4
    assert len(ret.invoke(q.question, k=1)) == 1          # was: k ignored, 4 returned
    Counting.calls.clear()
    out = ret.batch([q.question, "Where is nothing?", q.question], k=2)
    assert Counting.calls == [[q.question, "Where is nothing?", q.question]]   # one call
    assert [len(x) for x in out] == [2, 2, 2]
    assert [x.metadata["pid"] for x in out[0]] == [x.metadata["pid"] for x in out[2]]
    import asyncio
    assert len(asyncio.run(ret.abatch([q.question, q.question]))) == 2
    with pytest.raises(ValueError, match="k: expected an int >= 1"):
        ret.invoke(q.question, k=0)
