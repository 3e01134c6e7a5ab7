"""Where a question was lost (rasfast.qa_eval.records.failure_stage / stage_counts), on
hand-made records: each stage, the precedence between them, and old (schema-1) records,
whose missing parts read as unknown, never as a stage they did not record."""
import pytest

from rasfast.qa_eval.records import STAGE_LABELS, STAGES, failure_stage, stage_counts, upgrade


def rec(em=0.0, acc=0.0, retrieved=None, shown=None, **kw):
    r = {"qid": kw.pop("qid", "q"), "schema": 2, "em": em, "acc": acc, "f1": em,
         "answer_retrieved": retrieved, "answer_shown": shown}
    r.update(kw)
    return r


@pytest.mark.parametrize("r,stage", [
    (rec(em=1.0, retrieved=True, shown=True), "correct"),
    # a gold answer contained in the answer is its own stage, not correct (correct is EM)
    (rec(acc=1.0, retrieved=False, shown=False), "contains_gold"),
    (rec(acc=1.0, retrieved=True, shown=True), "contains_gold"),
    (rec(em=1.0, acc=1.0, retrieved=True, shown=True), "correct"),
    (rec(em=1.0), "correct"),                                    # correct needs no trail
    (rec(retrieved=True, shown=True), "shown_misread"),
    (rec(retrieved=False, shown=True), "shown_misread"),         # shown wins: the reader had it
    (rec(retrieved=True, shown=False), "retrieved_not_shown"),
    (rec(retrieved=False, shown=False), "not_retrieved"),
    (rec(retrieved=False, shown=None), "not_retrieved"),
    # retrieved, but the record does not say what was shown: not a stage it recorded
    (rec(retrieved=True, shown=None), "unknown"),
    (rec(retrieved=None, shown=None), "unknown"),
    (rec(retrieved=None, shown=False), "unknown"),
], ids=lambda x: x if isinstance(x, str) else "")
def test_each_stage(r, stage):
    assert failure_stage(r) == stage


def test_closed_book_is_not_retrieved_unless_correct():
    # eval qa writes answer_retrieved False and an empty reader input for "none"
    assert failure_stage(rec(retrieved=False, shown=False, passages=[])) == "not_retrieved"
    assert failure_stage(rec(em=1.0, retrieved=False, shown=False, passages=[])) == "correct"


def test_schema_1_records_read_as_unknown():
    old = {"qid": "q1", "answer": "Lilu", "gold": ["a spirit"], "em": 0.0, "f1": 0.0, "acc": 0.0,
           "recall@5": 1.0, "passages": [5, 9], "llm_calls": 1}
    up = upgrade(old)
    assert up["schema"] == 1
    for key in ("steps", "shown", "answer_retrieved", "answer_shown", "calls", "question"):
        assert key in up and up[key] is None
    assert failure_stage(up) == "unknown" and failure_stage(old) == "unknown"
    assert failure_stage(upgrade(dict(old, em=1.0))) == "correct"
    assert old == {"qid": "q1", "answer": "Lilu", "gold": ["a spirit"], "em": 0.0, "f1": 0.0, "acc": 0.0,
                   "recall@5": 1.0, "passages": [5, 9], "llm_calls": 1}, "upgrade must not modify its input"


def test_stage_counts_cover_every_stage_and_sum():
    recs = [rec(em=1.0), rec(em=1.0), rec(retrieved=True, shown=True), rec(retrieved=True, shown=False),
            rec(retrieved=False, shown=False), rec(retrieved=False, shown=False), rec(retrieved=False, shown=False),
            {"qid": "old", "em": 0.0}]
    c = stage_counts(recs)
    assert list(c) == list(STAGES)
    assert c == {"not_retrieved": 3, "retrieved_not_shown": 1, "shown_misread": 1, "contains_gold": 0, "correct": 2,
                 "unknown": 1}
    assert sum(c.values()) == len(recs)
    assert stage_counts([]) == {s: 0 for s in STAGES}
    assert set(STAGE_LABELS) == set(STAGES)
