"""rasfast eval qa (rasfast.qa_eval) on a tiny in-memory corpus with a scripted stand-in
LocalLLM (tests/qa_util.py): every system through the one reader contract, what the records
keep (steps, what the reader was shown, answer retrieved / shown, calls), the prepare/read
phases and their caches, stale-cache safety, failure stages, the resumable cache under
SIGKILL, argument errors, and the compact prompts' reply parsers."""
import json
import os
import random
import signal
import subprocess
import sys
import time

import pytest

from qa_util import PASSAGES, QUESTIONS, dataset, llm
from rasfast.data.qa import QADataset
from rasfast.llm import compact_prompts as cp
from rasfast.llm import reader as rd
from rasfast.qa_eval import (RecordFile, RoleRecorder, SYSTEMS, evaluate_qa, failure_stage, format_rows,
                             paired_bootstrap, report_qa, stage_counts)

pytestmark = pytest.mark.timeout(600)
HERE = os.path.dirname(os.path.abspath(__file__))


def run(tmp_path, model, systems=("none", "dense", "ras"), **kw):
    return evaluate_qa(dataset(), list(systems), model, "stand-in", encoder="hashing",
                       cache_dir=tmp_path / "cache", progress=False, log=lambda m: None, **kw)


def test_every_system_answers_through_the_one_reader_contract(tmp_path):
    from rasfast.qa_eval.systems import get_spec
    # the one exception, labelled as the paper's setting: RAS with its trained GraphLLM answers
    # itself (tests/test_eval_qa_graphllm.py)
    readers = [s for s in SYSTEMS if not get_spec(s).own_answer]
    assert set(SYSTEMS) - set(readers) == {"ras-graphllm"}
    out = run(tmp_path, llm(), systems=readers)
    rows = {r["system"]: r for r in out["rows"]}
    assert list(rows) == readers and out["n"] == 3 and not out["skipped"]
    for name, r in rows.items():
        assert r["n"] == 3 and r["em"] == pytest.approx(1.0) and r["errors"] == 0, name
        # exactly one reader call per question, in the contract's prompt, for every system
        assert r["parse_failures"]["reader"] == {"replies": 3, "unparsed": 0, "rate": 0.0, "failed": 0}, name
        for rec in out["records"][name]:
            reads = [c for c in rec["calls"] if c["role"] == "reader"]
            assert len(reads) == 1 and rd.ANSWER_SHAPE in reads[-1]["prompt"], name
            assert rec["reader"] == "contract" and rec["schema"] == 2
    assert rows["none"]["recall@5"] is None and rows["dense"]["recall@5"] == pytest.approx(1.0)
    # ras: round 0 retrieves the question without asking; then SEARCH, ENOUGH, the reader
    assert rows["ras"]["llm_calls_per_q"] == 3
    assert rows["ras"]["parse_failures"]["ras.planner"] == {"replies": 6, "unparsed": 0, "rate": 0.0, "failed": 0}
    assert rows["gear-naive"]["llm_calls_per_q"] == 1          # NaiveGE: no LLM before the reader
    assert "gear.read" in rows["gear"]["parse_failures"] and "gear.reason" in rows["gear"]["parse_failures"]


def test_records_say_what_each_step_retrieved_and_what_the_reader_was_shown(tmp_path):
    out = run(tmp_path, llm(), systems=("dense", "ras", "ras+passages", "ras-passages", "kirag"))
    recs = {name: out["records"][name][0] for name in out["records"]}    # question 1
    d = recs["dense"]
    assert d["shown"]["passages"] == d["passages"][:5] and d["shown"]["n_triples"] == 0
    assert d["steps"][0]["query"] == QUESTIONS[0].question and d["answer_shown"] and d["answer_retrieved"]
    r = recs["ras"]
    assert r["subqueries"] == [QUESTIONS[0].question, "Where was Mira Okonkwo born?"] and r["stopped"] == "sufficient"
    assert [s["query"] for s in r["steps"]] == r["subqueries"]
    # RAS's reader: every triple of every step, no passage; the variants add / swap in passages
    # n_triples: the unique triples of the steps, as the facts layout shows them (no repeats)
    uniq = {tuple(str(x).strip().lower() for x in t) for s in r["steps"] for t in s["triples"]}
    assert r["shown"]["n_passages"] == 0 and r["shown"]["n_triples"] == len(uniq)
    assert ["Mira Okonkwo", "born in", "Castrell"] in r["shown"]["triples"]
    rp, rq = recs["ras+passages"], recs["ras-passages"]
    assert rp["shown"]["n_triples"] == r["shown"]["n_triples"] and rp["shown"]["n_passages"] > 0
    assert rq["shown"]["n_triples"] == 0 and rq["shown"]["passages"] == rp["shown"]["passages"]
    assert recs["kirag"]["shown"]["n_passages"] == min(5, len(PASSAGES)) and recs["kirag"]["steps"]
    for rec in recs.values():
        assert rec["timings"] and rec["seconds"] >= 0 and rec["prompt_tokens"] > 0


def test_one_preparation_serves_several_readers_and_variants(tmp_path):
    model = llm()
    run(tmp_path, model, systems=("ras",))
    calls = model.engine.calls
    run(tmp_path, model, systems=("ras+passages", "ras-passages"))
    assert model.engine.calls == calls + 6            # 3 questions x 2 variants: the reader only
    run(tmp_path, model, systems=("ras",), k=3)          # another k: another RAS loop (k per sub-query)
    assert model.engine.calls > calls + 6 + 3
    before = model.engine.calls
    run(tmp_path, model, systems=("dense",), k=3)
    run(tmp_path, model, systems=("dense",), k=5, reader="one-shot")
    assert model.engine.calls == before + 6           # dense's retrieval is cached; 2 readers read


def test_a_changed_prompt_runs_afresh_and_an_unchanged_one_reuses_the_records(tmp_path, monkeypatch):
    from rasfast.systems.kirag import prompts as kp
    model = llm()
    run(tmp_path, model, systems=("dense", "kirag"))
    n = model.engine.calls
    run(tmp_path, model, systems=("dense", "kirag"))
    assert model.engine.calls == n                     # everything from the cache
    monkeypatch.setattr(kp, "CONSTRUCTOR_INSTRUCTION", kp.CONSTRUCTOR_INSTRUCTION + " Be brief.")
    run(tmp_path, model, systems=("dense", "kirag"))
    kirag_calls = model.engine.calls - n
    assert kirag_calls >= 6                            # KiRAG ran again (constructor + reader) ...
    n = model.engine.calls
    monkeypatch.setattr(rd, "ANSWER_SHAPE", rd.ANSWER_SHAPE + " Use English.")
    run(tmp_path, model, systems=("dense",))
    assert model.engine.calls == n + 3                 # ... and a changed reader re-reads dense


def test_a_changed_triple_extractor_rebuilds_the_index_and_reruns_the_triple_readers(tmp_path, monkeypatch):
    """A corpus without triples gets the model-free extractor's; their index and the records
    of the systems that read triples are keyed on the extractor's code, so a changed
    extractor never reuses triples or answers made with the old one (dense keeps its own)."""
    from rasfast.index.knowledge.index import KnowledgeIndex
    from rasfast.qa_eval import systems as qs
    ds = QADataset("notriples", PASSAGES, QUESTIONS, None)
    model = llm()

    def go():
        return evaluate_qa(ds, ["dense", "ras"], model, "stand-in", encoder="hashing",
                           cache_dir=tmp_path / "cache", progress=False, log=lambda m: None)
    go()
    index_dir = next((tmp_path / "cache" / "index").iterdir())
    first = KnowledgeIndex.load(index_dir).extraction
    assert first["source"] == "model-free" and len(first["extractor_sha256"]) == 16
    n = model.engine.calls
    go()
    assert model.engine.calls == n                     # same extractor: index and records reused
    mod = tmp_path / "extractor_changed_x.py"
    mod.write_text("class SentenceTripleExtractor:\n"
                   "    def extract(self, passages):\n"
                   "        return [[(p.title, 'is', 'changed')] for p in passages]\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setitem(qs.MODEL_FREE, "sentence-patterns",
                        ("extractor_changed_x",) + qs.MODEL_FREE["sentence-patterns"][1:])
    go()
    again = KnowledgeIndex.load(index_dir).extraction
    assert again["extractor_sha256"] != first["extractor_sha256"]          # index rebuilt
    assert model.engine.calls - n >= len(QUESTIONS) * 2   # RAS planned and read again; dense did not
    n = model.engine.calls
    evaluate_qa(ds, ["dense"], model, "stand-in", encoder="hashing", cache_dir=tmp_path / "cache",
                progress=False, log=lambda m: None)
    assert model.engine.calls == n


def test_code_signature_follows_the_code_not_its_comments(tmp_path, monkeypatch):
    from rasfast.qa_eval.run import code_signature
    mod = tmp_path / "promptmod_x.py"
    monkeypatch.syspath_prepend(str(tmp_path))
    sigs = []
    for src in ('"""doc"""\ndef p(q):\n    return f"Answer {q}"  # a comment\n',
                '"""other doc"""\ndef p(q):\n    # another comment\n    return f"Answer {q}"\n',
                '"""doc"""\ndef p(q):\n    return f"Answer briefly {q}"\n'):
        mod.write_text(src)
        sys.modules.pop("promptmod_x", None)
        sigs.append(code_signature("promptmod_x"))
    assert sigs[0] == sigs[1] != sigs[2]


def test_prompt_style_is_a_setting_of_its_own(tmp_path):
    a = run(tmp_path, llm(), systems=("ras", "dense"), prompt_style="compact")
    b = run(tmp_path, llm(), systems=("ras", "dense"), prompt_style="paper")
    assert a["prompt_style"] == "compact" and b["prompt_style"] == "paper"
    assert a["records"]["ras"][0]["prompt_style"] == "compact" and b["records"]["ras"][0]["prompt_style"] == "paper"
    files = sorted(p.name for p in (tmp_path / "cache").glob("tiny-ras-*.jsonl"))
    assert len(files) == 2                              # never mixed in one file
    assert len(list((tmp_path / "cache").glob("tiny-dense-*.jsonl"))) == 1   # dense has no prompt style
    roles = b["rows"][0]["parse_failures"]
    assert "ras.planner(paper)" in roles and "ras.planner" not in roles


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


def test_question_ranges_select_a_held_out_half(tmp_path):
    ds = dataset(9)
    out = evaluate_qa(ds, ["dense"], llm(), "stand-in", encoder="hashing", cache_dir=tmp_path, progress=False,
                      questions="4-9", log=lambda m: None)
    assert out["n"] == 6 and out["questions"] == "4-9"
    assert [r["qid"] for r in out["records"]["dense"]] == [q.qid for q in ds.questions[3:9]]
    for bad in ("9-4", "0-3", "a-b", "5"):
        with pytest.raises(ValueError, match="questions"):
            evaluate_qa(ds, ["dense"], llm(), "x", encoder="hashing", cache_dir=tmp_path, questions=bad)


@pytest.mark.parametrize("kw, name", [({"systems": ["dense", "bm42"]}, "systems"), ({"systems": []}, "systems"),
                                      ({"limit": 0}, "limit"), ({"dataset": "squad"}, "dataset"),
                                      ({"reader": "two-shot"}, "reader"), ({"retriever": "faiss"}, "retriever"),
                                      ({"prompt_style": "terse"}, "prompt_style")])
def test_bad_arguments_name_the_argument(tmp_path, kw, name):
    args = {"dataset": dataset(), "systems": ["none"], "llm": llm(), "llm_name": "x", "encoder": "hashing",
            "cache_dir": tmp_path, "progress": False}
    args.update(kw)
    with pytest.raises(ValueError, match=name):
        evaluate_qa(**args)


def test_a_system_that_cannot_run_is_reported(tmp_path):
    ds = QADataset("tiny-notriples", PASSAGES, QUESTIONS, None)   # model-free triples are extracted ...
    out = evaluate_qa(ds, ["dense", "gear-naive"], llm(), "x", encoder="hashing", cache_dir=tmp_path,
                      progress=False, log=lambda m: None)
    assert [r["system"] for r in out["rows"]] == ["dense", "gear-naive"]   # ... so GEAR has a graph
    from rasfast.qa_eval.systems import model_free_triples
    assert any(model_free_triples(ds))


def test_the_one_shot_reader_refuses_a_triples_input_per_question(tmp_path):
    out = run(tmp_path, llm(), systems=("dense", "ras"), reader="one-shot")
    rows = {r["system"]: r for r in out["rows"]}
    assert rows["dense"]["errors"] == 0 and rows["dense"]["em"] == pytest.approx(1.0)
    assert rows["ras"]["errors"] == 3 and "passages only" in out["records"]["ras"][0]["error"]


def test_role_recorder_forwards_classifies_and_logs():
    inner = llm()
    rec = RoleRecorder(inner, prompt_style="paper")
    assert rec.stats is inner.stats and rec.prompt_style == "paper" and RoleRecorder(inner).prompt_style == "compact"
    assert rec.role(rd.messages(rd.ReaderInput("q?", []))) == "reader"
    assert rec.role(cp.planner_messages("q?", ["q?"], [[("a", "b", "c")]])) == "ras.planner"
    assert rec.role("hello") == "other"
    rec.generate([rd.messages(rd.ReaderInput("What does Port Elden host?", []))], 8)
    assert rec.log[-1]["role"] == "reader" and rec.log[-1]["reply"] == "Elden Fair"


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


def test_report_aggregates_the_cache_without_running_anything(tmp_path):
    ran = run(tmp_path, llm(), systems=("none", "dense"), limit=2)
    rep = dict(cache_dir=tmp_path / "cache", encoder="hashing", prompt_style="compact")
    out = report_qa(dataset(), ["none", "dense", "ras"], "stand-in", limit=2, **rep)
    assert out["rows"] == ran["rows"] and out["missing"] == {"none": 0, "dense": 0, "ras": 2}
    more = report_qa(dataset(), ["dense"], "stand-in", **rep)   # all 3 asked, 2 cached
    assert more["n"] == 3 and more["rows"][0]["n"] == 2 and more["missing"] == {"dense": 1}
    assert "dense: 1 of the 3 questions not in the cache" in format_rows(more)
    assert report_qa(dataset(), ["dense"], "other-model", **rep)["rows"] == []
    with pytest.raises(ValueError, match="systems"):
        report_qa(dataset(), ["bm42"], "stand-in", cache_dir=tmp_path)


def test_schema_1_records_load_with_the_missing_parts_unknown(tmp_path):
    out = run(tmp_path, llm(), systems=("dense",))
    (f,) = (tmp_path / "cache").glob("tiny-dense-*k5*.jsonl")
    old = [{k: v for k, v in json.loads(line).items()
            if k in ("qid", "answer", "gold", "em", "f1", "acc", "recall@5", "passages", "llm_calls",
                     "prompt_tokens", "completion_tokens", "seconds", "error", "roles")}
           for line in f.read_text().splitlines()]
    f.write_text("".join(json.dumps(r) + "\n" for r in old))
    rep = report_qa(dataset(), ["dense"], "stand-in", cache_dir=tmp_path / "cache", encoder="hashing")
    (row,) = rep["rows"]
    assert row["f1"] == out["rows"][0]["f1"] and row["answer_shown"] is None and row["answer_retrieved"] is None
    assert rep["records"]["dense"][0]["steps"] is None and rep["records"]["dense"][0]["schema"] == 1
    assert row["stages"]["correct"] == 3                 # correct is known from the scores alone


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
    # user errors are one line and exit 1
    assert main(["eval", "qa", "--dataset", "musique", "--systems", "bm42", "--llm", "local", "--report",
                 "--cache-dir", str(tmp_path)]) == 1
    assert "systems" in capsys.readouterr().err


def test_hotpotqa_f1_follows_the_official_yes_no_rule():
    from rasfast.systems.ras.metrics import answer_scores
    assert answer_scores("no answer", ["no"])["f1"] == pytest.approx(2 / 3)        # plain SQuAD F1
    assert answer_scores("no answer", ["no"], yes_no=True)["f1"] == 0.0            # official HotpotQA
    assert answer_scores("yes", ["yes"], yes_no=True)["f1"] == 1.0
    assert answer_scores("yes it is", ["no"], yes_no=True)["f1"] == 0.0
    assert answer_scores("Paris France", ["Paris"], yes_no=True)["f1"] == pytest.approx(2 / 3)


def test_failure_stages_of_hand_made_records():
    base = {"em": 0.0, "acc": 0.0}
    assert failure_stage({"em": 1.0}) == "correct"
    assert failure_stage({"em": 0.0, "acc": 1.0}) == "contains_gold"      # correct is EM
    assert failure_stage({**base, "answer_retrieved": True, "answer_shown": True}) == "shown_misread"
    assert failure_stage({**base, "answer_retrieved": True, "answer_shown": False}) == "retrieved_not_shown"
    assert failure_stage({**base, "answer_retrieved": False, "answer_shown": False}) == "not_retrieved"
    assert failure_stage({**base, "answer_retrieved": False}) == "not_retrieved"
    assert failure_stage({**base}) == "unknown"                                     # schema 1: unknown
    assert failure_stage({**base, "answer_retrieved": True}) == "unknown"
    counts = stage_counts([{"em": 1.0}, {**base}, {**base, "answer_retrieved": False}])
    assert counts == {"not_retrieved": 1, "retrieved_not_shown": 0, "shown_misread": 0, "contains_gold": 0,
                      "correct": 1, "unknown": 1}


def test_paired_bootstrap():
    p = paired_bootstrap([1.0, 1.0, 0.0, 1.0], [0.0, 1.0, 0.0, 0.0])
    assert p["mean"] == pytest.approx(0.5) and p["higher"] == 2 and p["same"] == 2 and p["lower"] == 0
    assert 0.0 <= p["lo"] <= 0.5 <= p["hi"] <= 1.0
    assert paired_bootstrap([0.3] * 5, [0.3] * 5)["hi"] == 0.0
    assert paired_bootstrap([], [])["n"] == 0


def test_a_torn_last_record_is_repaired_and_a_duplicate_counts_once(tmp_path):
    rf = RecordFile(tmp_path / "r.jsonl")
    with rf.open_for_append() as w:
        w.write({"qid": "a", "f1": 1.0})
        w.write({"qid": "b", "f1": 0.0})
    with open(rf.path, "ab") as f:
        f.write(b'{"qid": "c", "f1": 0.')           # killed mid-record
    done = rf.load()
    assert sorted(done) == ["a", "b"] and rf.torn
    with rf.open_for_append() as w:                 # repaired before anything is appended
        w.write({"qid": "c", "f1": 0.5})
        w.write({"qid": "a", "f1": 0.0})            # a second record of a: ignored
    done = rf.load()
    assert not rf.torn and done["c"]["f1"] == 0.5 and done["a"]["f1"] == 1.0 and rf.duplicates == 1
    assert all(json.loads(line) for line in rf.path.read_text().splitlines())


@pytest.mark.slow
def test_sigkill_at_random_points_never_changes_the_final_table(tmp_path):
    """eval qa killed (SIGKILL) at random points, then resumed, >= 20 times: the final records
    equal an uninterrupted run's, question by question, with no torn or duplicate record."""
    n, delay = 30, 0.03
    KILLED_SYSTEMS = ("none", "dense", "ras", "gear-naive")   # tests/qa_eval_worker.py's
    worker = [sys.executable, os.path.join(HERE, "qa_eval_worker.py")]

    def launch(cache):
        return subprocess.Popen(worker + [str(cache), str(n), str(delay)], stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)
    t0 = time.perf_counter()
    p = launch(tmp_path / "whole")
    out, err = p.communicate(timeout=300)
    assert p.returncode == 0 and "finished" in out, err
    full = time.perf_counter() - t0
    from qa_util import dataset as ds_of
    ds = ds_of(n)
    # the stand-in is a LocalLLM (compact prompts) under a label that does not say so
    want = {s: report_qa(ds, [s], "stand-in", cache_dir=tmp_path / "whole", encoder="hashing", prompt_style="compact")
            for s in KILLED_SYSTEMS}
    keys = ("qid", "answer", "em", "f1", "acc", "passages", "answer_shown", "answer_retrieved", "shown")
    rng = random.Random(7)
    kills, rounds = 0, 0
    # A resumed run has less left to do, so on a fast machine a series of kills can finish
    # before 20 of them landed: then it is checked, and a fresh series starts in a new folder.
    while kills < 20:
        rounds += 1
        killed = tmp_path / f"killed{rounds}"
        while True:
            p = launch(killed)
            try:   # start-up (imports, the index) takes most of a second: each run gets a little further
                p.wait(timeout=rng.uniform(0.3, min(full, 3.5)))
            except subprocess.TimeoutExpired:
                p.send_signal(signal.SIGKILL)
                p.wait()
                kills += 1
                continue
            out, err = p.communicate(timeout=300)
            if p.returncode == 0:
                break
        for system in KILLED_SYSTEMS:
            got = report_qa(ds, [system], "stand-in", cache_dir=killed, encoder="hashing", prompt_style="compact")
            assert got["missing"] == {system: 0} and got["duplicates"] == {system: 0}
            assert [{k: r[k] for k in keys} for r in got["records"][system]] == \
                [{k: r[k] for k in keys} for r in want[system]["records"][system]], system
            assert got["rows"][0]["f1"] == want[system]["rows"][0]["f1"]
        for f in killed.glob("*.jsonl"):
            data = f.read_bytes()
            assert data.endswith(b"\n") and all(json.loads(x) for x in data.splitlines())
        assert rounds < 40, f"only {kills} kills landed in {rounds} series"


def test_records_kept_compressed_load_like_plain_ones(tmp_path):
    import gzip
    out = run(tmp_path, llm(), systems=("dense",))
    for f in (tmp_path / "cache").glob("*.jsonl"):
        f.with_name(f.name + ".gz").write_bytes(gzip.compress(f.read_bytes()))
        f.unlink()
    rep = report_qa(dataset(), ["dense"], "stand-in", cache_dir=tmp_path / "cache", encoder="hashing")
    assert rep["rows"] == out["rows"]


def test_a_plain_file_beside_compressed_records_adds_to_them_and_an_empty_one_hides_nothing(tmp_path):
    """A run over committed ``.jsonl.gz`` records appends to a plain ``.jsonl`` beside them:
    the load reads both (an empty plain file, made by an append that wrote nothing, once hid
    the compressed records and every preparation ran again)."""
    import gzip
    model = llm()
    out = run(tmp_path, model, systems=("dense",))
    for f in (tmp_path / "cache").glob("*.jsonl"):
        lines = f.read_bytes().splitlines(keepends=True)
        f.with_name(f.name + ".gz").write_bytes(gzip.compress(b"".join(lines[:2])))
        f.write_bytes(b"".join(lines[2:]))                       # the third question's record
    n = model.engine.calls
    again = run(tmp_path, model, systems=("dense",))
    assert model.engine.calls == n and again["rows"] == out["rows"]
    for f in (tmp_path / "cache").glob("*.jsonl"):
        f.write_bytes(b"")                                       # an empty plain file
    for rf in (tmp_path / "cache").glob("*.jsonl"):
        assert len(RecordFile(rf).load()) == 2
    run(tmp_path, model, systems=("dense",))
    assert model.engine.calls == n + 1                           # only the third question again
