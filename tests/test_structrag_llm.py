"""StructRAG against the local scripted OpenAI-compatible server: routing (garbage replies
included), the five LLM structurizers, the utilizer reading a select_k selection, batch
isolation, 429/500 faults and slow replies, the CLI demo over HTTP."""
import time

import pytest

from fake_openai_server import FakeServer
from rasfast.llm.openai_chat import OpenAIChat
from rasfast.types import RetrievedPassage
from rasfast.systems.structrag import LLMStructurizer, StructRAG, StructTask, Utilizer, graph_structure
from rasfast.systems.structrag.parse import split_row

pytestmark = pytest.mark.timeout(90)

ROUTE = "Choose the structure"          # in the router's system prompt
DECOMPOSE = "Break the question into"   # in the decomposer's
INFER = "the entity or value the question asks for"   # in the reader contract's


@pytest.fixture(scope="module")
def server():
    s = FakeServer()
    yield s
    s.close()


def _llm(server, **kw):
    opts = dict(timeout=3.0, max_retries=3, backoff=0.01, max_backoff=0.05, concurrency=8)
    opts.update(kw)
    return OpenAIChat("fake", base_url=server.url, api_key="k", **opts)


def _doc(pid, title, text="some text."):
    return RetrievedPassage(pid, title, text)


def _sent(server, marker):
    return [b for b in server.stats()["log"] if any(marker in m["content"] for m in b["messages"])]


def test_llm_router_parses_replies_and_counts_garbage(server):
    server.script([{"contains": ROUTE, "last_contains": "alpha", "reply": "Graph."},
                   {"contains": ROUTE, "last_contains": "beta", "reply": "**table**\nbecause counting"},
                   {"contains": ROUTE, "last_contains": "gamma", "reply": "banana bread"},
                   {"contains": ROUTE, "last_contains": "delta", "reply": ""}], default="OK")
    llm = _llm(server)
    sr = StructRAG(llm)
    qs = ["alpha question?", "beta question?", "gamma question?", "delta question?"]
    res = sr.run_batch(qs, [[_doc(0, "Doc A")], [_doc(1, "Doc B")], [_doc(2, "Doc C")], [_doc(3, "Doc D")]])
    assert [r.structure_type for r in res] == ["graph", "table", "chunk", "chunk"]
    assert [r.route_fallback for r in res] == [False, False, True, True]
    assert res[2].route_raw == "banana bread"
    assert sr.stats["route_fallback"] == 2
    assert all(r.ok for r in res), [r.error for r in res]
    # the structurizer's "OK" for a graph is malformed: kept as text, the question still answered
    assert res[0].structures[0].kind == "text" and res[0].structures[0].content == "OK"
    assert [r.answer for r in res] == ["OK"] * 4
    # the router prompt carries the documents' titles and the few-shot examples
    body = _sent(server, ROUTE)[0]
    assert any('"Doc ' in m["content"] for m in body["messages"] if m["role"] == "user")
    assert len(body["messages"]) > 3


REPLIES = {
    "table": "Description: staff counts of two firms\n| firm | staff |\n| --- | --- |\n| Acme \\| Co | 120 |\n| Zeta | 80 |",
    "graph": "Description: who founded what\n(Velora Studios | founded by | Mira Okonkwo)\n(Mira Okonkwo | born in | Castrell)",
    "algorithm": "Description: release procedure\n1. build the package\n2. IF tests pass THEN upload\n3. RETURN version",
    "catalogue": "Description: summit outline\n1 Water: the main topic\n1.1 Rivers: river rights\n1.1.2 Dams: two dams\n2 Energy: briefly",
    "chunk": "Description: facts about Mira\nMira Okonkwo is a painter.\n\nMira Okonkwo was born in Castrell.",
}


def test_all_five_llm_structurizers(server):
    rules = [{"last_contains": f"Title: doc-{k}", "reply": v} for k, v in REPLIES.items()]
    rules.append({"last_contains": "Title: doc-broken", "reply": "Sorry, I cannot make a table of this."})
    server.script(rules)
    st = LLMStructurizer(_llm(server))
    tasks = [StructTask(f"question {k}", k, [_doc(i, f"doc-{k}", f"text of {k}")]) for i, k in enumerate(REPLIES)]
    tasks.append(StructTask("question broken", "table", [_doc(9, "doc-broken")]))
    out = st.structurize(tasks)
    s = {k: o.structures[0] for k, o in zip(REPLIES, out)}
    assert all(o.doc_errors == [] for o in out)
    assert s["table"].kind == "table" and [split_row(r) for r in s["table"].items] == [["Acme | Co", "120"], ["Zeta", "80"]]
    assert s["table"].description == "doc-table: staff counts of two firms"
    assert s["graph"].kind == "graph" and s["graph"].items == [("Velora Studios", "founded by", "Mira Okonkwo"),
                                                              ("Mira Okonkwo", "born in", "Castrell")]
    assert s["algorithm"].kind == "algorithm" and len(s["algorithm"].items) == 3
    assert s["catalogue"].kind == "catalogue" and [i.split()[0] for i in s["catalogue"].items] == ["1", "1.1", "1.1.2", "2"]
    assert s["chunk"].kind == "chunk" and len(s["chunk"].items) == 2
    assert all(x.pids == [i] for i, x in enumerate(s.values()))
    broken = out[-1].structures[0]
    assert broken.kind == "text" and broken.content == "Sorry, I cannot make a table of this."
    # one request per document, each with its type's instruction, all in one concurrent batch
    log = server.stats()["log"]
    assert len(log) == 6
    assert any("markdown" in b["messages"][0]["content"] for b in log)
    assert any("hierarchically numbered" in b["messages"][0]["content"] for b in log)


def test_utilizer_reads_the_whole_knowledge_when_it_fits_else_the_selection(server):
    from rasfast.encode import HashingEncoder
    from rasfast.systems.structrag import KnowledgeCutWarning
    triples = [(f"Entity{i}", "relates to", f"Entity{i + 1}") for i in range(60)]
    triples += [("Velora Studios", "founded by", "Mira Okonkwo"), ("Mira Okonkwo", "born in", "Castrell")]
    g = graph_structure([(0, triples)])
    server.script([{"contains": DECOMPOSE, "reply": "1. Who founded Velora Studios?\n2. Where was Mira Okonkwo born?"},
                   {"last_contains": ["Kept:", "Who founded"], "reply": "(Velora Studios | founded by | Mira Okonkwo)"},
                   {"last_contains": ["Kept:", "Where was"], "reply": "(Mira Okonkwo | born in | Castrell)"},
                   {"contains": INFER, "last_contains": ["Mira Okonkwo | born in | Castrell"],
                    "reply": "Answer: Castrell\n(the founder, Mira Okonkwo, was born there)"}],
                  default="none")
    q = "Where was the founder of Velora Studios born?"
    # 62 triples fit the default max_chars: the model reads all of them (the paper's utilizer)
    u = Utilizer(_llm(server), HashingEncoder(), extract_k=4, graph_hops=1)
    subqs = u.decompose([(q, [g])])[0]
    assert subqs == ["Who founded Velora Studios?", "Where was Mira Okonkwo born?"]
    before = len(_sent(server, "Kept:"))
    sels = u.extract([(subqs, [g])])[0]
    assert [s.text for s in sels] == ["(Velora Studios | founded by | Mira Okonkwo)", "(Mira Okonkwo | born in | Castrell)"]
    for b in _sent(server, "Kept:")[before:]:
        assert b["messages"][-1]["content"].split("Knowledge:\n", 1)[1].count("(") == 62
    assert u.stats == {"whole": 2, "preselected": 0, "cut": 0}
    # the reader contract's post-processing: the first line, less its "Answer:" prefix
    (r,) = u.infer([(q, subqs, sels, [g])])
    assert r.answer == "Castrell" and r.reply.startswith("Answer: Castrell\n")
    assert "[2] Sub-question: Where was Mira Okonkwo born?" in r.shown.knowledge
    # longer than max_chars: rasfast's top-k pre-selection, with a visible warning
    small = Utilizer(_llm(server), HashingEncoder(), extract_k=4, graph_hops=1, max_chars=400)
    before = len(_sent(server, "Kept:"))
    with pytest.warns(KnowledgeCutWarning, match="max_chars=400"):
        sels = small.extract([(subqs, [g])])[0]
    assert small.stats["preselected"] == 2
    for b in _sent(server, "Kept:")[before:]:
        knowledge = b["messages"][-1]["content"].split("Knowledge:\n", 1)[1]
        assert 1 <= knowledge.count("(") <= 8   # extract_k seeds + extract_k neighbours
    assert any("Mira Okonkwo, born in, Castrell" in b["messages"][-1]["content"]
               for b in _sent(server, "Where was Mira"))


def test_batch_isolation_failing_document_and_question(server):
    server.script([{"contains": ROUTE, "reply": "chunk"},
                   {"last_contains": "Title: poison", "fault": {"kind": "400"}},   # rejected for good
                   {"contains": DECOMPOSE, "last_contains": "q-bad", "fault": {"kind": "400"}},
                   {"contains": DECOMPOSE, "echo": True},
                   {"contains": INFER, "last_contains": "q-one", "reply": "one"},
                   {"contains": INFER, "last_contains": "q-two", "reply": "two"},
                   {"contains": INFER, "last_contains": "q-three", "reply": "three"}], default="none")
    llm = _llm(server)
    from rasfast.systems.structrag import HybridStructurizer
    sr = StructRAG(llm, structurizer=HybridStructurizer(llm, llm_chunks=True))
    qs = ["q-one?", "q-bad?", "q-two?", "q-three?"]
    docs = [[_doc(0, "fine"), _doc(1, "poison")], [_doc(2, "fine")], [_doc(3, "fine")], [_doc(4, "poison")]]
    res = sr.run_batch(qs, docs)
    assert [r.answer for r in res] == ["one", None, "two", "three"]
    assert res[1].error.stage == "decompose" and res[1].error.error_type == "LLMRequestError"
    assert [len(r.doc_errors) for r in res] == [1, 0, 0, 1]
    assert "document 1" in res[0].doc_errors[0].message
    assert [len(r.structures) for r in res] == [1, 1, 1, 0]
    assert sr.stats["error_decompose"] == 1


class _Boom:
    """A router that fails for one question: raising for the batch, then per item."""

    def route(self, items):
        if any("explode" in q for q, _ in items):
            raise RuntimeError("router exploded")
        return ["graph" for _ in items]


def test_raising_component_isolated_per_question():
    triples = {0: [("Alice Vey", "born in", "Lyon")], 1: [("Carl Orm", "born in", "Oslo")]}
    sr = StructRAG(router=_Boom(), triples_by_pid=triples)
    res = sr.run_batch(["Where was Alice Vey born?", "explode?", "Where was Carl Orm born?"],
                       [[_doc(0, "Alice Vey")], [_doc(1, "Carl Orm")], [_doc(1, "Carl Orm")]])
    assert [r.answer for r in res] == ["Lyon", None, "Oslo"]
    assert res[1].error.stage == "route" and "exploded" in res[1].error.message


def test_429_and_500_are_retried_and_slow_replies_overlap(server):
    server.script([{"contains": ROUTE, "fault": {"kind": "429", "times": 2, "retry_after": 0}},
                   {"contains": ROUTE, "fault": {"kind": "500", "times": 2}},
                   {"contains": ROUTE, "reply": "algorithm"},
                   {"contains": "numbered pseudo-code", "reply": "Description: steps\n1. do it",
                    "fault": {"kind": "slow", "delay": 0.25}},
                   {"contains": INFER, "reply": "done"}], default="none")
    llm = _llm(server, concurrency=8)
    sr = StructRAG(llm)
    docs = [_doc(i, f"d{i}") for i in range(8)]
    t = time.perf_counter()
    res = sr.run_batch(["How do I do it?", "How do I undo it?"], [docs[:4], docs[4:]])
    wall = time.perf_counter() - t
    assert [r.answer for r in res] == ["done", "done"] and all(r.ok for r in res)
    assert [r.structure_type for r in res] == ["algorithm", "algorithm"]
    assert all(s.kind == "algorithm" for r in res for s in r.structures) and len(res[0].structures) == 4
    assert llm.stats["retries"] >= 4
    # 8 slow structurizer requests at 0.25 s: concurrent, far below the 2 s a sequential pass takes
    assert wall < 1.5
    rows = {r["stage"]: r for r in res[0].trace.summary_rows()}
    assert {"route", "structurize", "decompose", "extract", "infer"} <= set(rows)
    assert rows["structurize"]["total_ms"] >= 250


def test_cli_demo_over_http(server, capsys):
    from rasfast.cli import main
    server.script([{"contains": ROUTE, "reply": "graph"},
                   {"contains": DECOMPOSE, "echo": True},
                   {"contains": INFER, "reply": "Castrell"}], default="none")
    assert main(["demo", "--system", "structrag", "--llm", "openai", "--base-url", server.url,
                 "--model", "fake", "--questions", "2", "--passages", "200", "--no-progress",
                 "--trace", "/tmp/rasfast_structrag_test_trace.json"]) == 0
    out = capsys.readouterr().out
    assert "route: graph" in out and "answer: 'Castrell'" in out
    for stage in ("route", "structurize", "decompose", "extract", "infer"):
        assert f"\n{stage} " in out
    # with an LLM the paper's structurizer reads every retrieved document (issue 21): the
    # world's stored triples are only the model-free fallback
    assert len(_sent(server, "head-relation-tail")) >= 2
    assert len(_sent(server, ROUTE)) == 2


def test_with_an_llm_graph_and_table_documents_go_to_the_llm_structurizer(server):
    """Issue 21: with an LLM, the paper's question-aware structurizer reads each document;
    the stored triples are only the model-free fallback (or an explicit opt-in)."""
    from rasfast.systems.structrag import HybridStructurizer
    server.script([{"last_contains": "Title: doc-g", "reply": REPLIES["graph"]},
                   {"last_contains": "Title: doc-t", "reply": REPLIES["table"]}])
    before = len(server.stats()["log"])
    stored = {1: [("Stored", "triple", "only")], 2: [("Other", "stored", "triple")]}
    hs = HybridStructurizer(_llm(server), triples_by_pid=stored)
    out = hs.structurize([StructTask("who founded Velora?", "graph", [_doc(1, "doc-g")]),
                          StructTask("staff counts?", "table", [_doc(2, "doc-t")])])
    sent = server.stats()["log"][before:]
    assert len(sent) == 2 and hs.stats["llm"] == 2 and hs.stats["triples"] == 0
    assert any("who founded Velora?" in m["content"] for b in sent for m in b["messages"])
    assert out[0].structures[0].items == [("Velora Studios", "founded by", "Mira Okonkwo"),
                                          ("Mira Okonkwo", "born in", "Castrell")]
    assert out[1].structures[0].kind == "table"
    # the model-free fallback and the explicit opt-in still use the stored triples
    assert HybridStructurizer(None, triples_by_pid=stored).structurize(
        [StructTask("q", "graph", [_doc(1, "doc-g")])])[0].structures[0].items == [("Stored", "triple", "only")]
    opt = HybridStructurizer(_llm(server), triples_by_pid=stored, use_triples=True)
    opt.structurize([StructTask("q", "graph", [_doc(1, "doc-g")])])
    assert opt.stats["triples"] == 1 and opt.stats["llm"] == 0


def test_structurizer_reports_documents_it_cuts(server):
    from rasfast.systems.structrag import KnowledgeCutWarning
    server.script([], default="none")
    st = LLMStructurizer(_llm(server), max_doc_chars=50)
    with pytest.warns(KnowledgeCutWarning, match="1 document.*max_doc_chars=50.*passage 7"):
        st.structurize([StructTask("q", "table", [_doc(7, "long", "x" * 80), _doc(8, "short", "y")])])
    assert st.stats["docs_cut"] == 1
