"""The LLM adapters in the RAS loop: OpenAIChat against the scripted local server driving
plan -> retrieve -> extract -> answer on the generated demo corpus, the CLI's --llm openai,
and the GraphLLM planner/answerer (tiny random Llama) end to end with its stage trace."""
import pytest
import torch

from fake_openai_server import FakeServer
from llm_util import torch_threads
from rasfast.data.demo import generate_world, hops
from rasfast.encode import HashingEncoder
from rasfast.llm.adapters import (GraphLLMAnswerer, GraphLLMPlanner, LLMAnswerer, LLMPlanner,
                                  LLMTripleExtractor, from_cli, make_llm)
from rasfast.llm.openai_chat import OpenAIChat
from rasfast.systems.ras import RAS, format_triples, make_retriever
from rasfast.types import LoopState, RetrievedPassage
from rasfast.profile import Trace

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module")
def server():
    s = FakeServer()
    yield s
    s.close()


@pytest.fixture(scope="module")
def world():
    return generate_world(seed=3, n_passages=300, n_questions=40)


def client(server, **kw):
    return OpenAIChat("scripted-model", base_url=server.url, api_key="k", timeout=5, max_retries=3,
                      backoff=0.01, **kw)


def chain_rules(world, questions):
    """Planner/answerer/extractor replies a perfect model would give on these questions:
    step r+1 asks about the r-th gold passage's entity; after the last hop, [SUFFICIENT]."""
    rules = []
    for q in questions:
        qq = f"Question: {q.question}\n"
        g = q.gold_pids
        rules.append({"last_contains": [qq, "the entity or value the question asks for"], "reply": q.answer})
        rules.append({"last_contains": [qq, f"[{len(g)}] Sub-query:", "Next step:"], "reply": "[SUFFICIENT]"})
        for r in range(len(g) - 1, 0, -1):
            rules.append({"last_contains": [qq, f"[{r}] Sub-query:", "Next step:"],
                          "reply": f"[SUBQ] What is known about {world.passages[g[r]].title}?\nbecause ..."})
        rules.append({"last_contains": [qq, "(nothing retrieved yet)"], "reply": f"[SUBQ] {q.question}"})
    for p in world.passages:  # the extractor: the passage's gold triples, with chatter around
        rules.append({"last_contains": [f"Passage:\n{p.content}\nTriples:"],
                      "reply": "Sure! " + format_triples([tuple(t) for t in world.triples[p.pid]]) + " (S> broken"})
    return rules


def test_prompts_reach_the_server_in_the_paper_format(server):
    server.script([{"last_contains": "Next step:", "reply": "  \n[SUBQ] Who founded Velora?\nextra"},
                   {"last_contains": "the entity or value the question asks for", "reply": "Mira Okonkwo\nsince ..."}])
    llm = client(server)
    st = LoopState("Who founded Velora?", ["Who founded Velora?"], [[("Velora", "founded by", "Mira")]])
    assert LLMPlanner(llm).plan([st, LoopState("2+2?")]) == ["[SUBQ] Who founded Velora?"] * 2
    assert LLMAnswerer(llm).answer([st]) == ["Mira Okonkwo"]
    log = server.stats()["log"]  # the two planner requests arrive concurrently, in any order
    plan = next(b["messages"] for b in log[:2] if "Velora" in b["messages"][-1]["content"])
    assert plan[0]["role"] == "system" and "[SUFFICIENT]" in plan[0]["content"]
    assert any(m["role"] == "assistant" and m["content"] == "[NO_RETRIEVAL]" for m in plan)  # few-shot
    assert "(S> Velora| P> founded by| O> Mira)" in plan[-1]["content"]
    zero = [b for b in log[:2] if "(nothing retrieved yet)" in b["messages"][-1]["content"]]
    assert len(zero) == 1


def test_triple_extractor_memoises_by_pid(server):
    server.script([{"last_contains": "alpha", "reply": "(S> A| P> likes| O> B), (S> A| P> knows C"},
                   {"last_contains": "beta", "reply": "nothing here"}])
    ex = LLMTripleExtractor(client(server))
    ps = [RetrievedPassage(1, "t", "alpha"), RetrievedPassage(2, "t", "beta"), RetrievedPassage(1, "t", "alpha")]
    assert ex.extract(ps) == [[("A", "likes", "B")], [], [("A", "likes", "B")]]
    assert ex.dropped == 1 and ex.calls == 2
    assert ex.extract(ps[:2]) == [[("A", "likes", "B")], []]
    assert server.stats()["requests"] == 2  # nothing converted twice


def test_ras_loop_over_http_on_demo_corpus(server, world):
    qs = [q for q in world.questions if hops(q) == 2][:4] + [q for q in world.questions if hops(q) == 3][:2]
    poison = world.questions[-1]
    rules = chain_rules(world, qs)
    rules.insert(0, {"last_contains": [f"Question: {poison.question}\n", "Next step:"], "fault": {"kind": "400"}})
    rules.insert(0, {"last_contains": ["Passage:"], "fault": {"kind": "500", "times": 1}})  # one transient fault
    rules.insert(1, {"last_contains": [f"Passage:\n{world.passages[0].content}"], "reply": "(S> x| P> y| O> z)"})
    server.script(rules, default="")
    llm = client(server, concurrency=8)
    retriever = make_retriever("dense", world.passages, HashingEncoder())
    extractor = LLMTripleExtractor(llm)
    ras = RAS(retriever, extractor, LLMPlanner(llm), LLMAnswerer(llm), max_iters=4, k=3)
    trace = Trace("llm loop")
    res = ras.run_batch([q.question for q in qs] + [poison.question], trace=trace)
    assert res[-1].error is not None and res[-1].error.stage == "plan"
    assert isinstance(res[-1].error, object) and "400" in str(res[-1].error)
    recall = 0
    for q, r in zip(qs, res):
        assert r.error is None, r.error
        assert r.answer == q.answer
        assert len(r.subqueries) == hops(q) and r.subqueries[0] == q.question
        assert r.subqueries[1] == f"What is known about {world.passages[q.gold_pids[1]].title}?"
        got = set(r.retrieved_pids)
        recall += all(p in got for p in q.gold_pids)
        for pid in set(q.gold_pids) & got:  # extracted triples of a retrieved gold passage reached the graph
            assert set(map(tuple, world.triples[pid])) <= set(r.triples)
    assert recall >= len(qs) - 1
    # every distinct passage was converted exactly once, across steps and questions
    log = server.stats()["log"]
    ext = [b["messages"][-1]["content"] for b in log if b["messages"][-1]["content"].startswith("Passage:")]
    assert len(ext) == len(set(ext)) + 1  # + the one retried 500
    assert extractor.calls == len(set(ext))
    names = {s.name for s in trace.spans}
    assert {"plan", "retrieve", "extract", "answer", "llm.request"} <= names
    assert trace.model_time() > 0


def test_cli_demo_against_the_server(server, capsys, tmp_path):
    from rasfast import cli
    server.script([{"last_contains": ["(nothing retrieved yet)"], "reply": "[SUBQ] go"},
                   {"last_contains": ["[1] Sub-query:", "Next step:"], "reply": "[SUFFICIENT]"},
                   {"last_contains": ["the entity or value the question asks for"], "reply": "scripted answer"}])
    rc = cli.main(["demo", "--llm", "openai", "--base-url", server.url, "--model", "demo-model",
                   "--encoder", "hashing", "--passages", "300", "--questions", "4", "--no-progress",
                   "--trace", str(tmp_path / "t.json")])
    out = capsys.readouterr().out
    assert rc == 0 and out.count("scripted answer") >= 4
    assert {b["model"] for b in server.stats()["log"]} == {"demo-model"}
    assert (tmp_path / "t.json").exists()


def test_from_cli_and_make_llm(server):
    class A:
        llm, base_url, model = "openai", server.url, "m"
    p, a = from_cli(A)
    assert isinstance(p, LLMPlanner) and isinstance(a, LLMAnswerer) and p.llm.base_url == server.url
    A.model = None
    with pytest.raises(ValueError, match="--model"):
        from_cli(A)
    with pytest.raises(ValueError, match="llm"):
        make_llm("gpt-magic")
    with pytest.raises(TypeError, match="llm"):
        LLMPlanner(object())


def test_graph_llm_planner_and_answerer_in_the_loop(world):
    """rasfast.GraphEncoder + GraphLLM (tiny random Llama) as the loop's planner/answerer; the
    loop encodes each step's subgraph once through GraphLLM.subgraph_encoder."""
    from rasfast import GraphEncoder
    from rasfast.llm.graph_llm import GraphLLM
    from rasfast.llm.tiny import tiny_llama
    from rasfast.systems.ras import CachedTripleExtractor

    with torch_threads(1):
        model, tok = tiny_llama(hidden_size=32, num_layers=2, num_heads=2, seed=0, initializer_range=0.1)
        enc = HashingEncoder(64)
        genc = GraphEncoder(in_channels=64, hidden=32, heads=4, num_layers=2, edge_dim=64)
        gl = GraphLLM(model, tok, genc, projector_hidden=32)
        assert gl.graph_dim == 32
        ras = RAS(make_retriever("dense", world.passages, enc), CachedTripleExtractor.from_dataset(world),
                  GraphLLMPlanner(gl, max_new_tokens=6), GraphLLMAnswerer(gl, max_new_tokens=4),
                  graph_encoder=gl.subgraph_encoder(enc), max_iters=2, k=3)
        qs = [q.question for q in world.questions[:4]]
        trace = Trace("graph llm")
        res = ras.run_batch(qs, trace=trace)
        assert all(r.error is None for r in res), [r.error for r in res]
        assert all(isinstance(r.answer, str) for r in res)
        names = {s.name for s in trace.spans}
        assert {"plan", "answer", "graph_encode", "graph_llm.graph_encode", "graph_llm.generate"} <= names
        assert all(s.category == "model" for s in trace.spans if s.name.startswith("graph_llm."))
        retrieved = [r for r in res if r.step_triples]
        assert retrieved and all(len(r.graph_embeddings) == len(r.step_triples) for r in retrieved)
        # each step's subgraph went through the encoder once (the planner only projects the mean)
        assert genc.cache_misses == len({tuple(t) for r in res for t in r.step_triples if t})


def test_graph_llm_reads_question_graphs_from_the_text_encoder(world):
    """Without loop-side vectors, GraphInputs builds rasfast question graphs per step (once)
    and the GraphLLM encodes them in one pooled call per batch."""
    from rasfast import GraphEncoder, build_question_graph
    from rasfast.llm.graph_llm import GraphLLM
    from rasfast.llm.tiny import tiny_llama

    with torch_threads(1):
        model, tok = tiny_llama(hidden_size=32, num_layers=2, num_heads=2, seed=0, initializer_range=0.1)
        enc = HashingEncoder(64)
        genc = GraphEncoder(in_channels=64, hidden=32, heads=4, num_layers=2, edge_dim=64)
        gl = GraphLLM(model, tok, genc, projector_hidden=32)
        steps = [[tuple(t) for t in world.triples[p]] for p in (0, 1, 2)]
        states = [LoopState("q1?", ["q1?", "s"], steps[:2]), LoopState("q2?", ["q2?"], steps[2:]), LoopState("q3?")]
        planner = GraphLLMPlanner(gl, text_encoder=enc, max_new_tokens=4)
        out = planner.plan(states)
        assert len(out) == 3 and genc.cache_misses == 3
        planner.plan(states)
        assert genc.cache_misses == 3 and len(planner.graphs._cache) == 3
        # the pooled batch equals encoding each sample on its own
        qg = [[build_question_graph(s, enc) for s in steps[:2]], [build_question_graph(steps[2], enc)]]
        with torch.no_grad():
            both = gl.encode_graphs(qg)
            assert torch.allclose(both[0], genc(qg[0]), atol=1e-5) and torch.allclose(both[1], genc(qg[1]), atol=1e-5)


@pytest.mark.slow
def test_cli_demo_with_the_tiny_graph_llm(capsys, tmp_path):
    """`rasfast demo --llm graph-tiny`: the GraphLLM planner/answerer path end to end offline,
    its stages in the printed latency table."""
    from rasfast import cli
    with torch_threads(1):
        rc = cli.main(["demo", "--llm", "graph-tiny", "--graph-encoder", "gnn", "--encoder", "hashing",
                       "--passages", "300", "--questions", "2", "--max-iters", "2", "--no-progress",
                       "--trace", str(tmp_path / "t.json")])
    out = capsys.readouterr().out
    assert rc == 0 and "graph_llm.generate" in out and "graph_llm.graph_encode" in out


def test_graph_inputs_prefer_loop_vectors_and_drop_oldest():
    import numpy as np
    from rasfast.llm.adapters import GraphInputs
    st = LoopState("q", ["q", "s"], [[("a", "p", "b")], [("b", "p", "c")]])
    st.graph_embeddings = [np.ones(4, np.float32), np.full(4, 3.0, np.float32)]
    assert torch.equal(GraphInputs()(st), torch.full((4,), 2.0))
    assert torch.equal(GraphInputs(max_subgraphs=1)(st), torch.full((4,), 3.0))
    assert GraphInputs()(LoopState("q")) is None
    assert GraphInputs(graph_of=lambda s: "custom")(st) == "custom"
