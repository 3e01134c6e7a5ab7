"""GEAR as its paper's system (rasfast.systems.gear): the agent's gist memory, termination
and query re-writing with a scripted LLM, passageLink and the RRF of Eq. 9/10 on a
hand-computed example, malformed replies, and the registry's gear systems."""
import numpy as np
import pytest

from rasfast.data.qa import Passage
from rasfast.encode import HashingEncoder
from rasfast.index.knowledge import KnowledgeIndex
from rasfast.llm import LocalLLM
from rasfast.systems import build_system
from rasfast.systems.gear import prompts as P
from rasfast.systems.gear.agent import GEAR
from rasfast.systems.gear.expand import RRF_K, reciprocal_rank_fusion
from rasfast.systems.registry import base_retriever

pytestmark = pytest.mark.timeout(300)

PASSAGES = [Passage(0, "Velora Studios", "Velora Studios is a game company founded by Mira Okonkwo."),
            Passage(1, "Mira Okonkwo", "Mira Okonkwo is a designer born in Castrell."),
            Passage(2, "Castrell", "Castrell is a port city on the river Aun."),
            Passage(3, "Port Elden", "Port Elden hosts the Elden Fair every spring."),
            Passage(4, "Aun", "The Aun is a river that flows into the Grey Sea.")]
TRIPLES = [[["Velora Studios", "founded by", "Mira Okonkwo"]], [["Mira Okonkwo", "born in", "Castrell"]],
           [["Castrell", "located on", "Aun"]], [["Port Elden", "hosts", "Elden Fair"]],
           [["Aun", "flows into", "Grey Sea"]]]
Q = "In which city was the founder of Velora Studios born?"
ENC = HashingEncoder()


@pytest.fixture(scope="module")
def ki():
    return KnowledgeIndex.build(PASSAGES, TRIPLES, ENC, {"source": "test", "model": None, "prompt": None,
                                                         "prompt_sha256": None}, num_themes=1)


class Script:
    """An engine answering GEAR's three prompts from rules: ``read`` / ``reason`` /
    ``rewrite`` are lists of replies, one per call, in order (the last repeats)."""
    n_ctx = 8192

    def __init__(self, read=(), reason=(), rewrite=(), reader="Castrell", fail=None):
        self.replies = {"read": list(read), "reason": list(reason), "rewrite": list(rewrite)}
        self.reader, self.fail = reader, fail
        self.prompts = {"read": [], "reason": [], "rewrite": [], "reader": []}

    def render(self, messages):
        return "\n".join(m["content"] for m in messages)

    def tokenize(self, text):
        return text.split(" ")

    def complete(self, tokens, max_new_tokens, temperature, stop_check):
        text = " ".join(tokens)
        role = ("read" if P.READ_TASK in text else "reason" if P.REASON_TASK in text
                else "rewrite" if P.REWRITE_TASK[:60] in text else "reader")
        self.prompts[role].append(text)
        if self.fail and self.fail in text and role == "read":
            raise RuntimeError("server error 500")
        if role == "reader":
            return self.reader, 1, 0
        got = self.replies[role]
        reply = got[min(len(self.prompts[role]) - 1, len(got) - 1)] if got else ""
        return reply, len(reply.split()), 0


def gear(ki, script, mode="agent", max_iters=4, **kw):
    llm = LocalLLM("stand-in", engine=script)
    return GEAR(base_retriever(ki, ENC, "dense"), ki.graph, ki.triple_emb, llm=llm, mode=mode,
                max_iters=max_iters, base_k=3, **kw)


def test_the_gist_memory_accumulates_and_no_rewrites_then_yes_stops(ki):
    s = Script(read=['("Velora Studios", "founded by", "Mira Okonkwo")',
                     '("Mira Okonkwo", "born in", "Castrell"), ("Velora Studios", "founded by", "Mira Okonkwo")'],
               reason=["Answerable: No\nWhy: the facts do not say where Mira Okonkwo was born.",
                       "Answerable: Yes\nAnswer: Castrell"],
               rewrite=["Next Question: Where was Mira Okonkwo born?"])
    r = gear(ki, s).run(Q)
    assert r.stopped == "answerable" and r.agent_answer == "Castrell" and len(r.steps) == 2
    # Eq. 5: the memory is the concatenation of every round's new proximal triples
    assert r.memory == [("Velora Studios", "founded by", "Mira Okonkwo"), ("Mira Okonkwo", "born in", "Castrell")]
    # round 1 reads without memory (Eq. 1), round 2 with it (Eq. 4); both read the question q
    assert "Preliminary facts" not in s.prompts["read"][0] and Q in s.prompts["read"][0]
    assert 'Preliminary facts: ("Velora Studios", "founded by", "Mira Okonkwo")' in s.prompts["read"][1]
    # "No" -> the re-written query (Eq. 7) drives round 2's retrieval; the reason went into it
    assert [st.query for st in r.steps] == [Q, "Where was Mira Okonkwo born?"]
    assert "do not say where Mira Okonkwo was born" in s.prompts["rewrite"][0]
    assert [st.verdict for st in r.steps] == ["no", "yes"] and len(s.prompts["reason"]) == 2
    # the termination reasoning sees the whole memory
    assert '("Mira Okonkwo", "born in", "Castrell")' in s.prompts["reason"][1]
    # round 2 retrieved with the new query: Mira Okonkwo's passage comes first
    assert r.steps[1].base[0] == 1
    assert len(r.iteration_lists) == 2 and r.iteration_lists[-1][:len(r.passages)] == [p.pid for p in r.passages][:50]


def test_yes_at_once_stops_after_one_round_and_max_iters_bounds_the_loop(ki):
    s = Script(read=['("Mira Okonkwo", "born in", "Castrell")'], reason=["Answerable: Yes\nAnswer: Castrell"])
    r = gear(ki, s).run(Q)
    assert len(r.steps) == 1 and r.stopped == "answerable" and s.prompts["rewrite"] == []
    s = Script(read=['("a", "b", "c")'], reason=["Answerable: No\nWhy: missing"], rewrite=["Next Question: more?"])
    r = gear(ki, s, max_iters=2).run(Q)
    assert len(r.steps) == 2 and r.stopped == "max_iters" and len(s.prompts["rewrite"]) == 1


def test_malformed_replies_never_crash_a_question(ki):
    # a read with no triple, a verdict in no known form, a rewrite with nothing usable
    s = Script(read=["I could not find anything useful, sorry."], reason=["Maybe? Hard to say."],
               rewrite=["   ..."])
    r = gear(ki, s).run(Q)
    assert r.error is None and r.stopped == "rewrite" and len(r.steps) == 1
    assert r.steps[0].verdict == "unparsed" and r.memory == [] and r.steps[0].seeds == []
    assert r.steps[0].passages[:3] == r.steps[0].base[:3]       # no seeds: the base list
    assert len(r.passages) > 0
    # one question's failed call is its own error; the other question goes on
    s = Script(read=['("Mira Okonkwo", "born in", "Castrell")'], reason=["Answerable: Yes\nAnswer: Castrell"],
               fail="poison")
    a, b = gear(ki, s).run_batch(["poison: who founded Velora Studios?", Q])
    assert a.error is not None and a.error.stage == "read" and "500" in a.error.message
    assert b.error is None and b.stopped == "answerable"


@pytest.mark.parametrize("reply, answerable, answer, parsed", [
    ("Answerable: Yes\nAnswer: 1862", True, "1862", True),
    ("**Answerable:** yes\nAnswer: Paris.", True, "Paris.", True),
    ("Answerable: No\nWhy: nothing about X", False, None, True),
    ("answerable - no", False, None, True),
    ("Yes, it is answerable", False, None, False),
    ("", False, None, False), (None, False, None, False),
])
def test_parse_reason(reply, answerable, answer, parsed):
    v = P.parse_reason(reply)
    assert (v.answerable, v.answer, v.parsed) == (answerable, answer, parsed)


@pytest.mark.parametrize("reply, query", [("Next Question: Where was X born?", "Where was X born?"),
                                          ("Where was X born?", "Where was X born?"),
                                          ("Reason: ...\nNext Question: \"What is Y?\"", "What is Y?"),
                                          ("", None), ("  ?? ", None), (None, None)])
def test_parse_rewrite(reply, query):
    assert P.parse_rewrite(reply) == query


def test_parse_facts_reads_the_papers_form_and_tolerates_the_rest():
    assert P.parse_facts('("Neville A. Stanton", "employer", "University of Southampton"), '
                         '("University of Southampton", "founded in", "1862")') == [
        ("Neville A. Stanton", "employer", "University of Southampton"),
        ("University of Southampton", "founded in", "1862")]
    assert P.parse_facts("(Boston, population, 35,124)") == [("Boston", "population", "35,124")]
    assert P.parse_facts("Mira Okonkwo | born in | Castrell\nnoise") == [("Mira Okonkwo", "born in", "Castrell")]
    assert P.parse_facts("nothing here") == [] and P.parse_facts(None) == []


def test_passage_link_and_the_final_rrf_match_a_hand_computed_example(ki, monkeypatch):
    g = gear(ki, Script())

    class Base:                                   # h_base(t, C): passages 3 then 1
        kind = "dense"
        encoder = ENC

        def search_text(self, queries, k, q_emb=None):
            rows = np.full((1, k), -1)
            rows[0, :2] = [3, 1]
            return rows, np.zeros((1, k), np.float32)
    g.base = Base()
    monkeypatch.setattr(g, "_triple_pids", lambda text, q, k: np.array([1, 2]))   # h_base(t, T) -> passages 1, 2
    # Eq. 10: RRF([3, 1], [1, 2]) = 1 (1/62 + 1/61), 3 (1/61), 2 (1/62)
    ids = g._link(("a", "b", "c"))
    assert ids.tolist() == [1, 3, 2]
    ids_, scores = reciprocal_rank_fusion([[3, 1], [1, 2]])
    assert scores[0] == pytest.approx(1 / (RRF_K + 2) + 1 / (RRF_K + 1))
    # Eq. 9: RRF(linked lists of every gist triple, every round's list)
    monkeypatch.setattr(g, "_link", lambda t: {"t1": np.array([1, 3, 2]), "t2": np.array([2])}[t])

    class Step:
        def __init__(self, passages):
            self.passages = passages
    ids, scores = g._fuse([Step([3, 4])], ["t1", "t2"])
    want = {1: 1 / 61, 3: 1 / 62 + 1 / 61, 2: 1 / 63 + 1 / 61, 4: 1 / 62}
    assert ids.tolist() == [3, 2, 1, 4]
    assert scores.tolist() == pytest.approx([want[i] for i in [3, 2, 1, 4]])


def test_registry_systems_and_their_reader(ki):
    s = Script(read=['("Mira Okonkwo", "born in", "Castrell")'], reason=["Answerable: Yes\nAnswer: Castrell"])
    llm = LocalLLM("stand-in", engine=s)
    for name, calls in (("gear", {"read": 1, "reason": 1}), ("gear-sync", {"read": 1, "reason": 0}),
                        ("gear-naive", {"read": 0, "reason": 0})):
        for role in s.prompts:
            s.prompts[role].clear()
        r = build_system(name, ki, encoder=ENC, llm=llm, retriever="hybrid", k=2).run_batch([Q])[0]
        assert r.answer == "Castrell" and r.error is None
        assert {k: len(s.prompts[k]) for k in calls} == calls and len(s.prompts["reader"]) == 1
        # the reader reads the system's top k = 2 passages (GEAR's Table 3 setting, at k)
        assert r.shown.passages == r.passages[:2] and "Document 2:" in s.prompts["reader"][0]
        assert "Document 3:" not in s.prompts["reader"][0]
    with pytest.raises(ValueError, match="needs an LLM"):
        build_system("gear", ki, encoder=ENC)
    offline = build_system("gear-naive", ki, encoder=ENC, k=2).run_batch([Q])[0]   # model-free baseline
    assert offline.error is None and len(offline.passages) >= 2
