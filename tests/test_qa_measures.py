"""The measures of ``rasfast eval qa`` (issue 40, part B), on hand-made records and reader
inputs: answer shown searches only the shown passages' and triples' own text (never the
prompt's "Document N:" / "Search N:" labels), answer retrieved at equal depth, "correct" is
EM with "contains the gold" its own stage, ``shown.n_triples`` counts what the prompt shows
(unique triples), and one metrics module serves every evaluation."""
from dataclasses import dataclass

import numpy as np
import pytest

from rasfast.llm.reader import ReaderInput
from rasfast.qa_eval import records
from rasfast.qa_eval.records import failure_stage, shown_record, stage_counts
from rasfast.types import RetrievedPassage


@dataclass
class P:   # a corpus passage (rasfast.data.qa.Passage's fields)
    pid: int
    title: str
    text: str

    @property
    def content(self):
        return f"{self.title}\n{self.text}"


@dataclass
class Q:   # a question (rasfast.data.qa.Question's fields the records need)
    qid: str
    answers: list
    gold_pids: list


CORPUS = {i: P(i, f"Title {chr(64 + i)}", f"Text of passage {chr(64 + i)}.") for i in range(1, 9)}
CORPUS[7] = P(7, "Lake Orra", "Lake Orra has 4 islands.")
CORPUS[8] = P(8, "Orra village", "The village lies on the lake's north shore.")


def _rp(p):
    return RetrievedPassage(p.pid, p.title, p.text, 0.0)


# -- 1. answer shown: the shown texts themselves, not the prompt's labels --------------------------
def test_gold_4_is_not_shown_through_document_4():
    inp = ReaderInput("How many islands has Lake Orra?", [_rp(CORPUS[i]) for i in (1, 2, 3, 4, 5)])
    assert "Document 4:" in inp.context_text()
    rec = shown_record(inp, ["4"])
    assert rec["answer_shown"] is False
    # shown in a passage's own text, it counts
    inp2 = ReaderInput("How many islands has Lake Orra?", [_rp(CORPUS[i]) for i in (1, 7)])
    assert shown_record(inp2, ["4"])["answer_shown"] is True


def test_gold_is_not_shown_through_search_labels_or_sub_queries():
    blocks = [("Where is Lake Orra?", [("Lake Orra", "located in", "Vessa")]),
              ("What is 2 plus 2?", [("Orra village", "lies on", "Lake Orra")])]
    inp = ReaderInput("q", [], blocks)
    # "Search 2:" and the sub-query are the prompt's layout, not facts the system found
    assert shown_record(inp, ["2"])["answer_shown"] is False
    assert shown_record(inp, ["Vessa"])["answer_shown"] is True


def test_stored_records_are_remeasured_from_their_shown_passages_and_triples():
    # a record written when "answer shown" searched the whole prompt (Document 4: -> "4")
    old = {"qid": "q1", "schema": 2, "em": 0.0, "acc": 0.0, "answer_retrieved": False, "answer_shown": True,
           "shown": {"passages": [1, 2, 3, 4, 5], "triples": [], "n_passages": 5, "n_triples": 0}}
    new = records.remeasure(old, ["4"], CORPUS.get)
    assert new["answer_shown"] is False and old["answer_shown"] is True   # the input is not modified
    assert failure_stage(new) == "not_retrieved" and failure_stage(old) == "shown_misread"
    assert records.remeasure(dict(old, shown=dict(old["shown"], passages=[7])), ["4"], CORPUS.get)["answer_shown"] is True
    # triples: each triple's own words
    trip = {"passages": [], "triples": [["Search", "1", "x"], ["Lake Orra", "has", "4 islands"]]}
    assert records.remeasure(dict(old, shown=trip), ["4 islands"], CORPUS.get)["answer_shown"] is True
    # a reader shown neither (StructRAG's free-text knowledge) keeps its stored flag
    know = dict(old, shown={"passages": [], "triples": [], "chars": 120})
    assert records.remeasure(know, ["4"], CORPUS.get)["answer_shown"] is True


def test_the_report_path_remeasures_answer_shown():
    from rasfast.qa_eval.run import _records
    from rasfast.qa_eval.tables import summarise
    q = Q("q1", ["4"], [7])
    stored = {"q1": {"qid": "q1", "schema": 2, "em": 0.0, "f1": 0.0, "acc": 0.0, "passages": [1, 2, 3, 4, 5],
                     "answer_retrieved": False, "answer_shown": True,
                     "shown": {"passages": [1, 2, 3, 4, 5], "triples": [], "n_passages": 5, "n_triples": 0}}}
    row = summarise("dense", _records([q], stored, passage_of=CORPUS.get), 5)
    assert row["answer_shown"] == 0.0


# -- 2. answer retrieved at equal depth ----------------------------------------------------------------
def test_answer_in_the_first_n_distinct_ranked_passages():
    from rasfast.qa_eval.run import _records
    from rasfast.qa_eval.tables import summarise
    q = Q("q1", ["4"], [7])
    deep = {"qid": "q1", "schema": 2, "em": 0.0, "f1": 0.0, "acc": 0.0, "answer_retrieved": True,
            "passages": [1, 1, 2, 2, 3, 4, 5, 6, 7] + [8] * 3}   # 7 is the 7th distinct passage
    shallow = dict(deep, passages=[7, 1])
    none = dict(deep, passages=[], answer_retrieved=False)
    got = {n: _records([q], {"q1": r}, passage_of=CORPUS.get)[0] for n, r in
           (("deep", deep), ("shallow", shallow), ("none", none))}
    assert (got["deep"]["answer@5"], got["deep"]["answer@10"], got["deep"]["answer@20"]) == (False, True, True)
    assert got["deep"]["n_ranked"] == 8
    assert got["shallow"]["answer@5"] is True and got["shallow"]["n_ranked"] == 2
    assert got["none"]["answer@5"] is False and got["none"]["n_ranked"] == 0
    row = summarise("x", [got["deep"], got["shallow"]], 5)
    assert row["answer@5"] == 0.5 and row["answer@10"] == 1.0 and row["ranked_per_q"] == 5.0


# -- 3. correct is EM; contains the gold is its own column --------------------------------------------
def test_contains_the_gold_is_not_correct():
    from rasfast.systems.ras.metrics import answer_scores
    m = answer_scores("Both E. B. White and Dan Masterson were American writers", ["American"])
    assert m["acc"] == 1.0 and m["em"] == 0.0 and m["f1"] < 0.2
    rec = {"qid": "q", "em": m["em"], "acc": m["acc"], "f1": m["f1"], "answer_retrieved": True, "answer_shown": True}
    assert failure_stage(rec) == "contains_gold"
    counts = stage_counts([rec, dict(rec, em=1.0)])
    assert counts["contains_gold"] == 1 and counts["correct"] == 1
    from rasfast.qa_eval.records import STAGE_LABELS
    assert STAGE_LABELS["correct"] == "correct (EM)" and "contains the gold" in STAGE_LABELS["contains_gold"]


# -- 4. shown.n_triples: unique, as the prompt shows them ----------------------------------------------
def test_n_triples_counts_what_the_prompt_shows():
    t = ("Lake Orra", "located in", "Vessa")
    blocks = [("a", [t, ("Orra village", "lies on", "Lake Orra")]), ("b", [t, ("lake orra", "Located in", "Vessa ")])]
    inp = ReaderInput("q", [], blocks)
    assert inp.context_text().count("Vessa") == 1          # the facts layout drops repeats
    rec = shown_record(inp, ["Vessa"])
    assert rec["shown"]["n_triples"] == 2 and len(rec["shown"]["triples"]) == 2
    stored = {"qid": "q", "shown": {"passages": [], "triples": [list(t)] * 3, "n_triples": 3}}
    assert records.remeasure(stored, ["x"], CORPUS.get)["shown"]["n_triples"] == 1


# -- 5. one metrics module ---------------------------------------------------------------------------
def test_one_metrics_module_serves_every_evaluation():
    import inspect

    import rasfast.metrics as M
    import rasfast.systems.gear as gear
    import rasfast.systems.kirag.eval as kirag_eval
    import rasfast.systems.ras.metrics as ras_metrics
    assert ras_metrics.recall_at_k is M.recall_at_k and ras_metrics.answer_scores is M.answer_scores
    assert gear.recall_at_k is M.mean_recall_at_k and not hasattr(gear, "_pad")
    assert "_pad" not in inspect.getsource(kirag_eval) and kirag_eval.pad_ranking is M.pad_ranking
    assert records.answer_in_text is M.answer_in_text
    src = {name: inspect.getsource(mod) for name, mod in
           (("gear.expand", __import__("rasfast.systems.gear.expand", fromlist=["x"])),)}
    assert "def recall_at_k" not in src["gear.expand"] and "def _pad" not in src["gear.expand"]
    # EM, F1 with the HotpotQA yes/no rule, recall@k, answer in text
    assert M.exact_match("The Eiffel Tower.", ["eiffel tower"]) == 1.0
    assert M.token_f1("no answer", ["no"]) > 0 and M.token_f1("no answer", ["no"], yes_no=True) == 0.0
    assert M.token_f1("yes", ["yes"], yes_no=True) == 1.0
    assert M.recall_at_k([3, 1, 2], [1, 9], 2) == 0.5 and M.recall_at_k([1], [], 1) == 0.0
    assert M.mean_recall_at_k([np.array([3, 1, 2]), np.array([9])], [[1, 9], [9]], 1) == 0.5
    with pytest.raises(ValueError):
        M.mean_recall_at_k([np.array([1])], [[1]], 0)
    assert M.answer_in_text(["1"], "born 1999") is False and M.answer_in_text(["1999"], "born 1999.")
    assert M.answer_in_texts(["New York"], ["a New", "York b"]) is False
    assert list(M.pad_ranking(np.array([5]), np.array([5, 2, 3]), 3)) == [5, 2, 3]
    assert M.distinct_prefix([1, 1, 2, 3], 2) == [1, 2]


def test_benchmark_scripts_use_the_metrics_module():
    import pathlib
    root = pathlib.Path(__file__).resolve().parents[1]
    # gear_agent.md's report moved into rasfast (eval qa --report --layout gear-agent)
    for path, line in (("rasfast/qa_eval/gear_report.py", "from ..metrics import recall_at_k"),
                       ("benchmarks/theme_survival_musique.py", "from rasfast.metrics import recall_at_k")):
        src = (root / path).read_text()
        assert line in src, path
        assert "/ len(set(gold))" not in src and "/ len(g) for" not in src, path


# -- 7. the KiRAG aligner's training record names the questions it trained on ---------------------------
def test_aligner_training_record_lists_its_question_ids(tmp_path):
    import json

    from rasfast.systems.kirag.aligner import META, TrainedAligner, save_aligner

    class Model:
        def save(self, path):
            (tmp_path / "out" / "model.bin").write_bytes(b"x")
    tr = TrainedAligner(Model(), [1.0, 0.5], {"epochs": 1}, 0.1)
    save_aligner(tr, tmp_path / "out", trained_on={"dataset": "musique", "questions": "1-2", "qids": ["a", "b"]})
    meta = json.loads((tmp_path / "out" / META).read_text())
    assert meta["trained_on"]["qids"] == ["a", "b"] and meta["losses"] == [1.0, 0.5]


def test_the_committed_aligner_record_lists_questions_1_to_50():
    import json
    import pathlib
    rec = json.loads((pathlib.Path(__file__).resolve().parents[1] / "benchmarks" / "results" / "qa_records"
                      / "kirag_aligner-musique-q1-50.json").read_text())
    assert rec["trained_on"]["questions"] == "1-50" and len(rec["trained_on"]["qids"]) == 50
