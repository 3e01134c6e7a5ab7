"""A rerun of the read phase takes an unchanged prompt's reply from an earlier reader's
records (rasfast.qa_eval.reuse): issue 40's yes/no rule changed only the yes/no questions'
prompts, so only those are read again. Scripted stand-in LLM (tests/qa_util.py)."""
import pytest

from qa_util import PASSAGES, QUESTIONS, TRIPLES, llm
from rasfast.data.qa import QADataset, Question
from rasfast.llm import reader as rd
from rasfast.qa_eval import evaluate_qa
from rasfast.qa_eval import run as run_mod
from rasfast.qa_eval.config import prompt_signature
from rasfast.qa_eval.reuse import known_reply

pytestmark = pytest.mark.timeout(600)
YES_NO = Question("q4", "Is Castrell a port city on the river Aun?", "yes", [], [2])


def ds():
    return QADataset("tiny", PASSAGES, QUESTIONS + [YES_NO], TRIPLES)


def run(tmp_path, model, systems=("dense", "ras")):
    return evaluate_qa(ds(), list(systems), model, "stand-in", encoder="hashing", cache_dir=tmp_path / "cache",
                       progress=False, log=lambda m: None)


def test_the_answer_shape_rule_is_chosen_per_question_and_keeps_round_3s_words_for_the_others():
    other = rd.ReaderInput(QUESTIONS[0].question, [])
    yes_no = rd.ReaderInput(YES_NO.question, [])
    assert rd.ANSWER_SHAPE in rd.messages(other)[-1]["content"]
    assert rd.YES_NO_SHAPE not in rd.messages(other)[-1]["content"]
    assert rd.YES_NO_SHAPE in rd.messages(yes_no)[-1]["content"]
    assert rd.ANSWER_SHAPE not in rd.messages(yes_no)[-1]["content"]
    # round 3's rule, word for word: its records' prompts are what a non-yes/no question still gets
    assert rd.ANSWER_SHAPE == ("Reply with only the entity or value the question asks for, in a few words "
                               "(a name, a date, a number or a short phrase), with no explanation.")


def test_a_changed_yes_no_rule_rereads_only_the_yes_no_question(tmp_path, monkeypatch):
    model = llm()
    first = run(tmp_path, model)
    before = {s: {r["qid"]: r for r in recs} for s, recs in first["records"].items()}
    sig1 = prompt_signature("reader")
    n = model.engine.calls
    monkeypatch.setattr(rd, "YES_NO_SHAPE", rd.YES_NO_SHAPE + " Say it plainly.")
    assert prompt_signature("reader") != sig1                     # new read files ...
    monkeypatch.setattr(run_mod, "EARLIER_READER_PROMPTS", (sig1,))
    second = run(tmp_path, model)
    assert model.engine.calls == n + 2                            # ... one new read per system, q4's
    for system, recs in second["records"].items():
        for r in recs:
            old = before[system][r["qid"]]
            reads = [c for c in r["calls"] if c["role"] == "reader"]
            assert len(reads) == 1
            if r["qid"] == "q4":
                assert "reply_from" not in r and "Say it plainly." in reads[0]["prompt"]
            else:   # the earlier call, reply, tokens and seconds, said to be so
                assert r["reply_from"] == sig1
                for key in ("answer", "reply", "em", "f1", "prompt_tokens", "completion_tokens", "llm_calls",
                            "seconds", "shown", "calls"):
                    assert r[key] == old[key], (system, r["qid"], key)
                assert r["timings"]["read (model)"] == pytest.approx(old["timings"]["read (model)"], abs=1e-3)
    # a third run reads nothing: its own records now hold every question
    third = run(tmp_path, model)
    assert model.engine.calls == n + 2
    assert [r["answer"] for r in third["records"]["dense"]] == [r["answer"] for r in second["records"]["dense"]]


def test_without_the_earlier_signature_everything_is_read_again(tmp_path, monkeypatch):
    model = llm()
    run(tmp_path, model)
    n = model.engine.calls
    monkeypatch.setattr(rd, "YES_NO_SHAPE", rd.YES_NO_SHAPE + " Say it plainly.")
    monkeypatch.setattr(run_mod, "EARLIER_READER_PROMPTS", ())
    out = run(tmp_path, model)
    assert model.engine.calls == n + 8                            # 4 questions x 2 systems
    assert not any("reply_from" in r for recs in out["records"].values() for r in recs)


def _record(prompt, shown, reply="Castrell", error=None):
    return {"error": error, "shown": shown, "calls": [{"role": "reader", "prompt": prompt, "reply": reply}]}


def test_known_reply_needs_the_same_prompt_and_the_same_input():
    inp = rd.ReaderInput(QUESTIONS[0].question, [PASSAGES[0], PASSAGES[1]])
    msgs = rd.messages(inp)
    from rasfast.qa_eval.records import shown_record
    from rasfast.qa_eval.roles import prompt_text
    shown = shown_record(inp, ["Castrell"])["shown"]
    assert known_reply(_record(prompt_text(msgs), shown), ["Castrell"])(msgs, inp) == "Castrell"
    other = rd.messages(rd.ReaderInput(QUESTIONS[0].question, [PASSAGES[1], PASSAGES[0]]))
    assert known_reply(_record(prompt_text(msgs), shown), ["Castrell"])(other, inp) is None        # prompt
    assert known_reply(_record(prompt_text(msgs), dict(shown, passages=[1, 0])), ["Castrell"])(msgs, inp) is None
    assert known_reply(_record(prompt_text(msgs), shown, error="reader: boom"), ["Castrell"])(msgs, inp) is None
    assert known_reply(_record(prompt_text(msgs), shown, reply=None), ["Castrell"])(msgs, inp) is None
    two = _record(prompt_text(msgs), shown)
    two["calls"] = two["calls"] * 2                               # not one reader call: not a plain read
    assert known_reply(two, ["Castrell"])(msgs, inp) is None


def test_a_read_phase_rerun_takes_the_kirag_aligner_by_id_and_refuses_it_for_a_preparation(tmp_path):
    """The trained aligner's 88 MB model is not committed, only its id: a rerun whose KiRAG
    preparations are cached needs no aligner; one that must prepare names the id."""
    import shutil
    from rasfast.qa_eval.config import EvalConfig
    model = llm()
    aid = "0123456789abcdef"
    out = evaluate_qa(ds(), ["kirag"], model, "stand-in", encoder="hashing", cache_dir=tmp_path / "c",
                      progress=False, log=lambda m: None, kirag_aligner=aid)
    assert "kirag" in out["skipped"] and aid in out["skipped"]["kirag"] and "cached" in out["skipped"]["kirag"]
    run(tmp_path, model, systems=("kirag",))                              # the zero-shot preparations
    cfg = EvalConfig.make("tiny", "stand-in", backend=model, encoder=hashing_name())
    cache = tmp_path / "cache"
    src = cache / cfg.prep_file("kirag")
    dst = cache / cfg.with_(kirag_aligner=aid).prep_file("kirag")
    shutil.copy(src, dst)                                                 # as if prepared with aid
    n = model.engine.calls
    got = evaluate_qa(ds(), ["kirag"], model, "stand-in", encoder="hashing", cache_dir=cache,
                      progress=False, log=lambda m: None, kirag_aligner=aid)
    assert not got["skipped"] and len(got["records"]["kirag"]) == 4
    assert model.engine.calls == n + 4                                    # the reads only


def hashing_name():
    from rasfast.encode import make_encoder
    return make_encoder("hashing").name
