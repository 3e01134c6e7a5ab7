"""Resumable LLM triple extraction: the journal (fsync'd appends, torn last line, model and
corpus checks), unparseable replies, failed requests, an injected disk-full, and a real
build process killed by a signal mid-way and restarted against the scripted HTTP server."""
import errno
import json
import os
import signal
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

from rasfast.encode import HashingEncoder
from rasfast.index.knowledge import (ExtractionError, Journal, JournalError, KnowledgeIndex,
                               UnparsedError, build_knowledge_index, extraction_record)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))   # fake_openai_server
ENC = HashingEncoder()
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _corpus(tmp_path, n=12, name="c.jsonl"):
    rows = [{"title": f"Person{i}", "text": f"Person{i} was born in City{i % 4}."} for i in range(n)]
    p = tmp_path / name
    p.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return p


def _reply(i):
    return f"(S> Person{i}| P> born in| O> City{i % 4}), (S> City{i % 4}| P> kind| O> city)"


class ScriptedLLM:
    """In-process stand-in for an LLM backend: replies by passage, counts requests."""
    concurrent_requests = True   # like OpenAIChat: one request per passage, in threads

    def __init__(self, model="m1", unparsed=(), fail=(), delay=0.0):
        self.model, self.unparsed, self.fail, self.delay = model, set(unparsed), set(fail), delay
        self.calls = {}
        self.lock = threading.Lock()
        self.stats = {"prompt_tokens": 0, "completion_tokens": 0}

    def generate(self, prompts, max_new_tokens=128, stop=None, temperature=0.0):
        out = []
        for p in prompts:
            user = p[-1]["content"]
            i = int(user.split("Person")[1].split()[0].split("\n")[0])
            with self.lock:
                self.calls[i] = self.calls.get(i, 0) + 1
                self.stats["prompt_tokens"] += 10
            time.sleep(self.delay)
            if i in self.fail:
                raise RuntimeError(f"server gave up on passage {i}")
            out.append("I cannot help with that." if i in self.unparsed else _reply(i))
        return out


def _build(tmp_path, llm, corpus=None, **kw):
    return build_knowledge_index(corpus or _corpus(tmp_path), tmp_path / "ix", ENC, llm=llm,
                                 extract=True, concurrency=4, num_themes=2, progress=False, **kw)


def test_extract_builds_index_with_model_and_prompt_recorded(tmp_path):
    llm = ScriptedLLM()
    rep = _build(tmp_path, llm)
    ki = KnowledgeIndex.load(rep.path)
    assert ki.extraction == extraction_record("m1") and "S> subject" in ki.extraction["prompt"]
    assert ki.triples_by_pid[5] == [("Person5", "born in", "City1"), ("City1", "kind", "city")]
    assert llm.calls == {i: 1 for i in range(12)} and rep.extraction.tokens == 120
    # a second build over the finished journal sends nothing
    llm2 = ScriptedLLM()
    rep2 = _build(tmp_path, llm2)
    assert llm2.calls == {} and rep2.extraction.resumed == 12
    assert KnowledgeIndex.load(rep2.path).triple_emb.tobytes() == ki.triple_emb.tobytes()


def test_journal_torn_last_line_is_dropped_and_resumed(tmp_path):
    _build(tmp_path, ScriptedLLM())
    j = tmp_path / "ix" / "journal.jsonl"
    lines = j.read_text().splitlines(True)
    j.write_text("".join(lines[:8]) + lines[8][: len(lines[8]) // 2])   # died inside a write
    llm = ScriptedLLM()
    rep = _build(tmp_path, llm)
    assert sum(llm.calls.values()) == 12 - 7 and max(llm.calls.values()) == 1
    assert len(KnowledgeIndex.load(rep.path).graph.triples) == 24
    # a journal killed while writing its header starts afresh
    j2 = tmp_path / "j2.jsonl"
    j2.write_text('{"journal": "rasfast.extr')
    assert Journal(j2, extraction_record("m1")).entries == {}
    assert json.loads(j2.read_text().splitlines()[0])["extraction"] == extraction_record("m1")
    # a broken line in the middle is an error naming it
    lines = j.read_text().splitlines(True)
    j.write_text("".join(lines[:3]) + "garbage\n" + "".join(lines[3:]))
    with pytest.raises(JournalError, match="line 4 is not a journal record"):
        _build(tmp_path, ScriptedLLM())


def test_journal_refuses_another_model_or_changed_corpus(tmp_path):
    _build(tmp_path, ScriptedLLM(model="m1"))
    with pytest.raises(JournalError, match="never mixed"):
        _build(tmp_path, ScriptedLLM(model="m2"))
    rows = [json.loads(x) for x in (tmp_path / "c.jsonl").read_text().splitlines()]
    rows[3]["text"] += " Edited."
    edited = tmp_path / "edited.jsonl"
    edited.write_text("".join(json.dumps(r) + "\n" for r in rows))
    with pytest.raises(JournalError, match="passage 3 was extracted from different text"):
        _build(tmp_path, ScriptedLLM(model="m1"), corpus=edited)


def test_unparsed_replies_block_the_index_until_accepted_or_retried(tmp_path):
    llm = ScriptedLLM(unparsed={2, 7})
    with pytest.raises(UnparsedError, match=r"2 of 12 passages .* \[2, 7\]") as ei:
        _build(tmp_path, llm)
    assert ei.value.pids == [2, 7]
    with pytest.raises(ValueError, match="build did not finish"):
        KnowledgeIndex.load(tmp_path / "ix")
    # accepting them sends no request again and records them
    llm2 = ScriptedLLM(unparsed={2, 7})
    ki = KnowledgeIndex.load(_build(tmp_path, llm2, allow_unparsed=True).path)
    assert llm2.calls == {} and ki.unparsed == [2, 7] and ki.triples_by_pid[2] == []
    # retrying asks only for those two
    llm3 = ScriptedLLM()
    ki = KnowledgeIndex.load(_build(tmp_path, llm3, retry_unparsed=True).path)
    assert llm3.calls == {2: 1, 7: 1} and ki.unparsed == [] and len(ki.triples_by_pid[7]) == 2


def test_failed_requests_stop_the_build_and_rerun_retries_only_them(tmp_path):
    with pytest.raises(ExtractionError, match="2 of 12 requests failed") as ei:
        _build(tmp_path, ScriptedLLM(fail={4, 9}))
    assert sorted(ei.value.failed) == [4, 9]
    with pytest.raises(ValueError, match="knowledge.json: missing"):
        KnowledgeIndex.load(tmp_path / "ix")
    llm = ScriptedLLM()
    _build(tmp_path, llm)
    assert llm.calls == {4: 1, 9: 1}


class _DiskFull:
    """A journal file whose writes fail with ENOSPC after ``ok`` successful appends."""

    def __init__(self, ok):
        self.ok = ok

    def __call__(self, path, mode, encoding=None):
        f = open(path, mode, encoding=encoding)
        outer = self

        class Wrapped:
            def write(self, s):
                if outer.ok <= 0:
                    raise OSError(errno.ENOSPC, "No space left on device")
                outer.ok -= 1
                return f.write(s)

            def __getattr__(self, name):
                return getattr(f, name)
        return Wrapped()


def test_disk_full_in_the_journal_stops_cleanly_and_resumes(tmp_path):
    llm = ScriptedLLM()
    with pytest.raises(JournalError, match="No space left on device.*resume"):
        _build(tmp_path, llm, journal_opener=_DiskFull(ok=5))
    with pytest.raises(ValueError, match="knowledge.json: missing"):
        KnowledgeIndex.load(tmp_path / "ix")
    journaled = Journal(tmp_path / "ix" / "journal.jsonl", extraction_record("m1")).entries
    assert len(journaled) == 5
    llm2 = ScriptedLLM()
    ki = KnowledgeIndex.load(_build(tmp_path, llm2).path)
    assert set(llm2.calls) == set(range(12)) - set(journaled) and max(llm2.calls.values()) == 1
    assert len(ki) == 12 and ki.graph.num_triples == 24


class BatchedLLM(ScriptedLLM):
    """A local-model stand-in: not called from threads, gets batched prompts."""
    concurrent_requests = False

    def __init__(self, **kw):
        super().__init__(**kw)
        self.batches = []

    def generate(self, prompts, max_new_tokens=128, stop=None, temperature=0.0):
        self.batches.append(len(prompts))
        return super().generate(prompts, max_new_tokens, stop, temperature)


def test_local_models_get_batches_and_resume_too(tmp_path):
    llm = BatchedLLM(fail={5})
    with pytest.raises(ExtractionError, match="4 of 12 requests failed"):   # its whole batch of 4
        _build(tmp_path, llm)
    assert llm.batches == [4, 4, 4]
    llm2 = BatchedLLM()
    ki = KnowledgeIndex.load(_build(tmp_path, llm2).path)
    assert llm2.batches == [4] and sorted(llm2.calls) == [4, 5, 6, 7] and ki.graph.num_triples == 24


def test_bad_arguments(tmp_path):
    from rasfast.index.knowledge.extract import extract_triples
    j = Journal(tmp_path / "j.jsonl", extraction_record("m"))
    with pytest.raises(ValueError, match="concurrency"):
        extract_triples([], ScriptedLLM(), j, concurrency=0)
    with pytest.raises(TypeError, match="llm"):
        extract_triples([], object(), j)
    with pytest.raises(ValueError, match="needs an LLM"):
        build_knowledge_index(_corpus(tmp_path), tmp_path / "ix", ENC, extract=True, progress=False)


# -- a real build process, killed by a signal, restarted ------------------------------------
def _cli_build(corpus, out, url, concurrency):
    env = dict(os.environ, PYTHONPATH=REPO + os.pathsep + os.environ.get("PYTHONPATH", ""))
    return subprocess.Popen([sys.executable, "-m", "rasfast.cli", "index", "build", "--corpus", str(corpus),
                             "--out", str(out), "--encoder", "hashing", "--num-themes", "2",
                             "--extract-triples", "--llm", "openai", "--base-url", url, "--model", "fake",
                             "--concurrency", str(concurrency), "--no-progress"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)


def _journal_pids(path):
    if not path.exists():
        return set()
    out = set()
    for line in path.read_text().splitlines()[1:]:
        try:
            out.add(json.loads(line)["pid"])
        except ValueError:
            pass
    return out


def test_killed_build_resumes_without_repeating_a_finished_request(tmp_path):
    from fake_openai_server import FakeServer
    n, conc = 40, 4
    corpus = _corpus(tmp_path, n)
    s = FakeServer()
    try:
        # one rule per passage: the server's per-rule hit count is the per-passage request count
        s.script([{"last_contains": [f"Person{i} was born"], "reply": _reply(i),
                   "fault": {"kind": "slow", "delay": 0.08}} for i in range(n)])
        journal = tmp_path / "ix" / "journal.jsonl"
        proc = _cli_build(corpus, tmp_path / "ix", s.url, conc)
        deadline = time.time() + 60
        while len(_journal_pids(journal)) < 12 and time.time() < deadline and proc.poll() is None:
            time.sleep(0.02)
        proc.send_signal(signal.SIGKILL)
        proc.communicate(timeout=30)
        done_at_kill = _journal_pids(journal)
        assert 12 <= len(done_at_kill) < n, "the build was not killed mid-way"
        assert not (tmp_path / "ix" / "knowledge.json").exists()
        proc = _cli_build(corpus, tmp_path / "ix", s.url, conc)
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err
        assert f"{len(done_at_kill)} resumed" in out
        hits = s.stats()["hits"]
        for i in range(n):
            if i in done_at_kill:
                assert hits[i] == 1, f"finished passage {i} was requested {hits[i]} times"
            else:   # at most the requests in flight at the kill are sent again
                assert 1 <= hits[i] <= 2
        assert sum(h - 1 for h in hits) <= conc
        resumed = KnowledgeIndex.load(tmp_path / "ix")
        # an uninterrupted build (in this process, same server and settings) gives the same index
        from rasfast.llm.openai_chat import OpenAIChat
        build_knowledge_index(corpus, tmp_path / "ix2", ENC, llm=OpenAIChat("fake", base_url=s.url),
                              extract=True, concurrency=conc, num_themes=2, progress=False)
    finally:
        s.close()
    whole = KnowledgeIndex.load(tmp_path / "ix2")
    assert resumed.triples == whole.triples and resumed.extraction == whole.extraction
    for f in ("indptr", "indices", "head", "tail", "passage_ids", "source_index"):
        assert np.array_equal(getattr(resumed.graph, f), getattr(whole.graph, f))
    assert resumed.graph.entities == whole.graph.entities
    assert resumed.triple_emb.tobytes() == whole.triple_emb.tobytes()
    assert np.asarray(resumed.theme.emb).tobytes() == np.asarray(whole.theme.emb).tobytes()


def test_cli_index_add_extracts_new_passages_with_the_same_model(tmp_path, capsys):
    from rasfast.cli import main
    from fake_openai_server import FakeServer
    rows = [{"title": f"Person{i}", "text": f"Person{i} was born in City{i % 4}."} for i in range(10)]
    (tmp_path / "a.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows[:6]))
    (tmp_path / "b.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows[6:]))
    (tmp_path / "all.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    s = FakeServer()
    try:
        s.script([{"last_contains": [f"Person{i} was born"], "reply": _reply(i)} for i in range(10)])
        common = ["--encoder", "hashing", "--llm", "openai", "--base-url", s.url, "--no-progress"]
        assert main(["index", "build", "--corpus", str(tmp_path / "a.jsonl"), "--out", str(tmp_path / "ix"),
                     "--num-themes", "2", "--extract-triples", "--model", "m1"] + common) == 0
        assert main(["index", "add", "--index", str(tmp_path / "ix"), "--corpus", str(tmp_path / "b.jsonl"),
                     "--model", "m2"] + common) == 1   # a failure; 2 is bad usage
        assert "refusing to add triples from 'm2'" in capsys.readouterr().err
        assert main(["index", "add", "--index", str(tmp_path / "ix"), "--corpus", str(tmp_path / "b.jsonl"),
                     "--model", "m1"] + common) == 0
        assert "index now holds 10 passages" in capsys.readouterr().out
        assert s.stats()["hits"] == [1] * 10            # every passage asked exactly once
        assert main(["index", "build", "--corpus", str(tmp_path / "all.jsonl"), "--out", str(tmp_path / "ix2"),
                     "--num-themes", "2", "--extract-triples", "--model", "m1"] + common) == 0
    finally:
        s.close()
    got, whole = KnowledgeIndex.load(tmp_path / "ix"), KnowledgeIndex.load(tmp_path / "ix2")
    assert got.pids == whole.pids and got.triples == whole.triples
    for f in ("indptr", "indices", "head", "tail", "passage_ids"):
        assert np.array_equal(getattr(got.graph, f), getattr(whole.graph, f))
    assert got.triple_emb.tobytes() == whole.triple_emb.tobytes()
    assert len(got.theme.shards) == 2     # the added passages are a new shard


def _closed_port():
    import socket
    with socket.socket() as s:   # bound then closed: nothing listens there
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_unreachable_server_stops_the_build_within_seconds(tmp_path):
    from rasfast.llm.openai_chat import OpenAIChat
    llm = OpenAIChat("m", base_url=f"http://127.0.0.1:{_closed_port()}/v1", api_key="x")
    corpus = _corpus(tmp_path, n=40)
    t0 = time.perf_counter()
    with pytest.raises(ExtractionError, match=r"extraction stopped: LLM server unreachable "
                                              r"\(3 consecutive .*run the same command again"):
        build_knowledge_index(corpus, tmp_path / "ix", ENC, llm=llm, extract=True,
                              concurrency=4, num_themes=2, progress=False)
    took = time.perf_counter() - t0
    assert took < 8, took   # five retries per passage with backoff took minutes
    assert llm.stats["requests"] <= 12, llm.stats   # not 40 passages x 5 attempts


def test_unreachable_counts_only_connection_refusals(tmp_path):
    from rasfast.llm.openai_chat import (LLMRequestError, LLMUnreachableError, OpenAIChat,
                                         server_unreachable)
    port = _closed_port()
    llm = OpenAIChat("m", base_url=f"http://127.0.0.1:{port}/v1", api_key="x", backoff=0.01,
                     max_retries=5, unreachable_after=2)
    with pytest.raises(LLMRequestError, match="unreachable .2 consecutive") as ei:
        llm.generate(["a"])
    assert server_unreachable(ei.value)
    assert llm.stats["requests"] == 2      # stopped retrying after the second refusal
    with pytest.raises(LLMRequestError) as ei:
        llm.generate(["b"])
    assert server_unreachable(ei.value) and isinstance(ei.value.errors[0], LLMUnreachableError)
    assert llm.stats["requests"] == 3      # a later request still tries once
    # an HTTP error from a reachable server is not "unreachable"
    assert not server_unreachable(LLMRequestError("rejected", status=400))
    with pytest.raises(ValueError, match="unreachable_after"):
        OpenAIChat("m", base_url="http://127.0.0.1:1/v1", unreachable_after=0)
    assert issubclass(LLMUnreachableError, LLMRequestError)
