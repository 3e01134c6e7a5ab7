"""OpenAIChat against a real local HTTP server process (tests/fake_openai_server.py):
scripted replies, order under concurrency, every fault retried or reported, bounded time."""
import time

import pytest

from fake_openai_server import FakeServer
from rasfast.llm.openai_chat import LLMRequestError, OpenAIChat, _retry_after_seconds

pytestmark = pytest.mark.timeout(60)


@pytest.fixture(scope="module")
def server():
    s = FakeServer(api_key="sekret")
    yield s
    s.close()


@pytest.fixture
def client(server, monkeypatch):
    monkeypatch.setenv("RASFAST_TEST_KEY", "sekret")
    with OpenAIChat("fake-model", base_url=server.url, api_key_env="RASFAST_TEST_KEY", timeout=2.0,
                    max_retries=3, backoff=0.01, max_backoff=0.5, concurrency=8) as c:
        yield c


def test_scripted_reply_and_request_format(server, client):
    server.script([{"contains": ["capital", "France"], "reply": "Paris"}], default="unknown")
    assert client.generate(["What is the capital of France?", "Who?"], max_new_tokens=7,
                           temperature=0.0) == ["Paris", "unknown"]
    log = server.stats()["log"]
    assert {b["model"] for b in log} == {"fake-model"}
    assert {b["max_tokens"] for b in log} == {7}
    assert any(b["messages"] == [{"role": "user", "content": "What is the capital of France?"}] for b in log)
    assert client.stats["prompt_tokens"] > 0


def test_batch_results_in_input_order_under_concurrency(server, client):
    server.script([{"contains": "slowpoke", "echo": True, "fault": {"kind": "slow", "delay": 0.3}},
                   {"contains": "", "echo": True}])
    prompts = [f"prompt {i}" + (" slowpoke" if i % 3 == 0 else "") for i in range(20)]
    t = time.perf_counter()
    assert client.generate(prompts) == prompts
    # 7 slow prompts at 0.3 s each: concurrent requests finish far sooner than 2.1 s serially
    assert time.perf_counter() - t < 1.8


def test_messages_system_and_stop(server, client):
    server.script([{"contains": "", "reply": "alpha STOP beta"}])
    c = OpenAIChat("m", base_url=server.url, api_key="sekret", system="be brief", timeout=2.0)
    assert c.generate([[{"role": "user", "content": "hi"}]], stop=["STOP"]) == ["alpha "]
    body = server.stats()["log"][-1]
    assert body["messages"][0] == {"role": "system", "content": "be brief"}
    assert body["stop"] == ["STOP"]
    # stops beyond the 4 the API accepts are applied on the client side
    assert c.generate(["x"], stop=["a1", "a2", "a3", "a4", "beta"]) == ["alpha STOP "]


@pytest.mark.parametrize("kind", ["500", "503", "malformed", "truncated", "drop"])
def test_transient_faults_are_retried(server, client, kind):
    server.script([{"contains": "", "reply": "fine", "fault": {"kind": kind, "times": 2}}])
    assert client.generate(["q"]) == ["fine"]
    assert server.stats()["hits"] == [3]


def test_429_honours_retry_after(server, client):
    server.script([{"contains": "", "reply": "fine", "fault": {"kind": "429", "times": 1, "retry_after": 0.4}}])
    t = time.perf_counter()
    assert client.generate(["q"]) == ["fine"]
    assert time.perf_counter() - t >= 0.35
    assert server.stats()["hits"] == [2]


def test_slow_reply_times_out_then_retries(server):
    server.script([{"contains": "", "reply": "late but fine", "fault": {"kind": "slow", "delay": 1.5, "times": 1}}])
    c = OpenAIChat("m", base_url=server.url, api_key="sekret", timeout=0.4, max_retries=2, backoff=0.01)
    assert c.generate(["q"]) == ["late but fine"]
    assert c.stats["retries"] == 1


def test_persistent_faults_are_reported_not_hung(server):
    c = OpenAIChat("m", base_url=server.url, api_key="sekret", timeout=0.3, max_retries=2,
                   backoff=0.01, max_backoff=0.05)
    for fault, status in [({"kind": "500"}, 500), ({"kind": "malformed"}, 200), ({"kind": "slow", "delay": 1.0}, None),
                          ({"kind": "429", "retry_after": 100}, 429)]:
        server.script([{"contains": "", "reply": "never", "fault": fault}])
        t = time.perf_counter()
        with pytest.raises(LLMRequestError) as ei:
            c.generate(["ok?", "bad"])
        assert time.perf_counter() - t < 5  # 3 attempts x 0.3 s timeout + capped backoff
        e = ei.value
        assert e.status == status and e.attempts == 3 and e.index == 0
        assert "prompt 0" in str(e) and server.url in str(e)
        if fault["kind"] == "malformed":
            assert '{"choices"' in e.body  # body excerpt for diagnosis


def test_only_the_failing_prompt_is_named(server, client):
    server.script([{"contains": "poison", "fault": {"kind": "400"}}, {"contains": "", "echo": True}])
    with pytest.raises(LLMRequestError) as ei:
        client.generate(["fine 0", "fine 1", "poison 2", "fine 3"])
    assert ei.value.index == 2 and ei.value.status == 400 and ei.value.attempts == 1
    assert "scripted 400" in ei.value.body


def test_client_errors_fail_fast(server):
    server.script([{"contains": "", "reply": "x"}])
    c = OpenAIChat("m", base_url=server.url, api_key="wrong", max_retries=5)
    t = time.perf_counter()
    with pytest.raises(LLMRequestError, match="401") as ei:
        c.generate(["q"])
    assert ei.value.attempts == 1 and time.perf_counter() - t < 2
    c = OpenAIChat("m", base_url=server.root + "/nope", api_key="sekret", max_retries=5)
    with pytest.raises(LLMRequestError, match="404"):
        c.generate(["q"])


def test_http_proxy_from_the_environment_is_used(server, monkeypatch):
    # the scripted server stands in for the proxy: it receives the absolute-form request
    # line a plain-HTTP proxy gets, which it does not route (404 naming the target URL)
    monkeypatch.setenv("http_proxy", server.root)
    monkeypatch.delenv("no_proxy", raising=False)
    monkeypatch.delenv("NO_PROXY", raising=False)
    c = OpenAIChat("m", base_url="http://llm.invalid:8000/v1", api_key="sekret", max_retries=0)
    with pytest.raises(LLMRequestError, match="404") as ei:
        c.generate(["q"])
    assert "http://llm.invalid:8000/v1/chat/completions" in ei.value.body


def test_connection_refused_is_retried_then_reported():
    import socket
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()  # nothing listens there now
    c = OpenAIChat("m", base_url=f"http://127.0.0.1:{port}/v1", api_key="k", timeout=1, max_retries=2, backoff=0.01)
    with pytest.raises(LLMRequestError, match="connection error") as ei:
        c.generate(["q"])
    assert ei.value.attempts == 3 and c.stats["requests"] == 3


def test_empty_batch_and_bad_arguments(server, client):
    assert client.generate([]) == []
    with pytest.raises(TypeError, match="prompts"):
        client.generate("not a list")
    with pytest.raises(TypeError, match="prompts"):
        client.generate([123])
    with pytest.raises(TypeError, match="role"):
        client.generate([[{"content": "x"}]])
    with pytest.raises(ValueError, match="max_new_tokens"):
        client.generate(["x"], max_new_tokens=0)
    with pytest.raises(ValueError, match="temperature"):
        client.generate(["x"], temperature=-1)
    with pytest.raises(TypeError, match="stop"):
        client.generate(["x"], stop=[""])
    with pytest.raises(ValueError, match="base_url"):
        OpenAIChat("m", base_url="localhost:8000")
    with pytest.raises(ValueError, match="model"):
        OpenAIChat("", base_url="http://x/v1")
    with pytest.raises(ValueError, match="timeout"):
        OpenAIChat("m", base_url="http://x/v1", timeout=float("inf"))
    with pytest.raises(ValueError, match="concurrency"):
        OpenAIChat("m", base_url="http://x/v1", concurrency=0)


def test_retry_after_parsing():
    assert _retry_after_seconds("3") == 3.0
    assert _retry_after_seconds(None) is None and _retry_after_seconds("soon") is None
    import email.utils
    future = email.utils.formatdate(time.time() + 30, usegmt=True)
    assert 25 < _retry_after_seconds(future) <= 31


# -- partial failures: successes are never requested twice ---------------------------------
def _requests_per_prompt(server):
    counts = {}
    for body in server.stats()["log"]:
        key = body["messages"][-1]["content"]
        counts[key] = counts.get(key, 0) + 1
    return counts


def test_partial_failure_keeps_successes(server, client):
    from rasfast.llm.base import PartialBatchError
    server.script([{"contains": "poison", "fault": {"kind": "400"}}, {"contains": "", "echo": True}])
    prompts = ["fine 0", "fine 1", "poison 2", "fine 3"]
    out = client.generate(prompts, return_exceptions=True)
    assert out[:2] == prompts[:2] and out[3] == prompts[3]
    assert isinstance(out[2], LLMRequestError) and out[2].index == 2 and out[2].status == 400
    with pytest.raises(LLMRequestError) as ei:  # default: raises, still naming the failed prompt
        client.generate(prompts)
    e = ei.value
    assert isinstance(e, PartialBatchError) and e.index == 2 and e.status == 400
    assert e.results[:2] == prompts[:2] and e.results[3] == prompts[3] and set(e.errors) == {2}
    assert e.is_for(prompts)


def test_call_isolated_never_resends_a_success(server, client):
    from rasfast.systems.ras import call_isolated
    from rasfast.systems.structrag._llm import generate_isolated
    server.script([{"contains": "poison", "fault": {"kind": "400"}}, {"contains": "", "echo": True}])
    prompts = [f"fine {i}" for i in range(7)] + ["poison 7", "fine 8", "poison 9"]
    out, errs = call_isolated(lambda ps: client.generate(ps), prompts)
    assert set(errs) == {7, 9} and all(isinstance(errs[j], LLMRequestError) and errs[j].status == 400
                                       for j in errs)
    assert [o for j, o in enumerate(out) if j not in errs] == [p for p in prompts if "poison" not in p]
    assert out[7] is None and out[9] is None
    assert _requests_per_prompt(server) == {p: 1 for p in prompts}  # nothing sent twice
    server.script([{"contains": "poison", "fault": {"kind": "400"}}, {"contains": "", "echo": True}])
    replies, errs = generate_isolated(client, prompts, max_new_tokens=8)  # StructRAG's path
    assert set(errs) == {7, 9} and replies[0] == "fine 0" and replies[7] is None
    assert _requests_per_prompt(server) == {p: 1 for p in prompts}


def test_ras_adapters_keep_successes(server, client):
    from rasfast.llm.adapters import LLMAnswerer, LLMTripleExtractor
    from rasfast.systems.ras import call_isolated
    from rasfast.types import LoopState, RetrievedPassage
    server.script([{"last_contains": "poison", "fault": {"kind": "400"}},
                   {"contains": "", "reply": "an answer\n(S> a| P> b| O> c)"}])
    states = [LoopState(f"question {i}" + (" poison" if i == 2 else "")) for i in range(5)]
    out, errs = call_isolated(LLMAnswerer(client, few_shot=False).answer, states)
    assert set(errs) == {2} and errs[2].status == 400
    assert [out[j] for j in (0, 1, 3, 4)] == ["an answer"] * 4
    assert sorted(_requests_per_prompt(server).values()) == [1] * 5
    server.script([{"last_contains": "poison", "fault": {"kind": "400"}},
                   {"contains": "", "reply": "(S> a| P> b| O> c)"}])
    ex = LLMTripleExtractor(client, few_shot=False)
    passages = [RetrievedPassage(i, f"t{i}", "poison" if i == 1 else f"text {i}") for i in range(4)]
    passages.append(passages[0])  # a duplicate pid is extracted once
    out, errs = call_isolated(ex.extract, passages)
    assert set(errs) == {1} and out[0] == out[4] == [("a", "b", "c")] and out[3] == [("a", "b", "c")]
    assert server.stats()["requests"] == 4 and sorted(ex.memo) == [0, 2, 3]


# -- keep-alive connections ---------------------------------------------------------------
@pytest.mark.parametrize("concurrency", [1, 4])
def test_connections_are_reused(server, client, concurrency):
    server.script([{"contains": "", "echo": True}])
    client.concurrency = concurrency
    n = 0
    for batch in range(3):
        prompts = [f"p{batch}.{i}" for i in range(12)]
        assert client.generate(prompts) == prompts
        n += len(prompts)
    st = server.stats()
    assert st["requests"] == n and 1 <= st["connections"] <= concurrency < n
    assert client.stats["retries"] == 0
    server.script([{"contains": "", "echo": True}])
    client.keep_alive = False  # the old behaviour: one connection per request
    client.close()
    assert client.generate(prompts) == prompts
    assert server.stats()["connections"] == len(prompts)


@pytest.mark.parametrize("notice_eof", [True, False])
def test_server_closed_connection_is_replaced(server, monkeypatch, notice_eof):
    import rasfast.llm.openai_chat as oc
    if not notice_eof:  # the stale socket looks alive: the request itself hits the closed socket
        monkeypatch.setattr(oc, "_readable_now", lambda sock: False)
    server.script([{"contains": "bye", "reply": "closing", "close": True}, {"contains": "", "echo": True}])
    c = OpenAIChat("m", base_url=server.url, api_key="sekret", timeout=2.0, max_retries=0, concurrency=1)
    assert c.generate(["hello"]) == ["hello"]
    assert c.generate(["bye"]) == ["closing"]
    time.sleep(0.05)  # let the server's close reach the client's socket
    assert c.generate(["again", "more"]) == ["again", "more"]  # max_retries=0: no retry to hide behind
    st = server.stats()
    assert st["requests"] == 4 and st["connections"] == 2 and c.stats["retries"] == 0
    c.close()
    assert c.generate(["after close"]) == ["after close"]
