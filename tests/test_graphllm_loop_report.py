"""benchmarks/graphllm_loop_eval.py --report (issue 41 part 5): every number of its table
comes from the per-question records. Hand-made records: EM/F1 means, the planner's sub-query
hits (any gold passage, and a gold passage no earlier step retrieved), recall, LLM calls, and
paired differences against (b) on the questions both variants have."""
import importlib.util
import json
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]


def script():
    spec = importlib.util.spec_from_file_location("bench_graphllm_loop_eval", ROOT / "benchmarks" / "graphllm_loop_eval.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def rec(qid, em, steps, gold=(1, 2), calls=3):
    return {"qid": qid, "type": "2hop:x", "question": qid, "gold": ["g"], "answer": "g" if em else "h",
            "error": None, "em": float(em), "f1": float(em), "acc": float(em), "gold_pids": list(gold),
            "steps": [{"subquery": f"s{i}", "pids": list(p), "gold_hit": bool(set(p) & set(gold))}
                      for i, p in enumerate(steps)],
            "plans": [], "rounds": len(steps), "llm_calls": calls, "seconds_mean_of_batch": 2.0}


def write(out, variant, records):
    with open(out / f"{variant}.jsonl", "w") as f:
        for r in records:
            f.write(json.dumps(r) + "\n")


def test_report_from_records(tmp_path):
    mod = script()
    write(tmp_path, "b", [rec("q1", 1, [[1, 5]]), rec("q2", 0, [[7]]), rec("q3", 1, [[1], [2]], calls=4)])
    # c: q1 a sub-query that re-finds gold 1 (a hit, nothing new); q2 one that finds gold 2 (new)
    write(tmp_path, "c", [rec("q1", 0, [[1], [1, 9]], calls=4), rec("q2", 1, [[7], [2, 3]], calls=4)])
    text = mod.report(str(tmp_path))
    res = json.loads((tmp_path / "report.json").read_text())
    rows = {r["variant"]: r for r in res["rows"]}
    b, c = rows["b"], rows["c"]
    assert b["n"] == 3 and b["em"] == pytest.approx(2 / 3) and b["llm_calls"] == pytest.approx(10 / 3)
    assert b["subqueries_generated"] == 1 and b["subquery_gold_hit"] == 1.0 and b["subquery_new_gold"] == 1.0
    assert b["recall_all"] == pytest.approx((0.5 + 0 + 1) / 3)
    assert c["n"] == 2 and c["subqueries_generated"] == 2
    assert c["subquery_gold_hit"] == 1.0 and c["subquery_new_gold"] == 0.5
    # paired on q1, q2 only: c - b = (0 - 1, 1 - 0) -> mean 0; (b) on those: 0.5
    d = c["em_minus_b"]
    assert d["n"] == 2 and d["mean"] == pytest.approx(0.0) and d["higher"] == 1 and d["lower"] == 1
    assert c["paired_n"] == 2 and c["b_em_same"] == pytest.approx(0.5)
    assert "em_minus_b" not in b
    assert "(c) trained without it" in text and "| 2 (1.00, 0.50) |" in text


def test_report_without_records_says_so(tmp_path):
    with pytest.raises(SystemExit, match="no records"):
        script().report(str(tmp_path))


def test_records_pair_by_world_and_dataset(tmp_path):
    """The same qid in two held-out worlds (or in a QA dataset) is two questions: pairing with
    (b) goes by (dataset, world seed, qid); records written before those fields existed are
    world seed 1001."""
    mod = script()
    old = rec("q1", 1, [[1]])                                   # world 1001, no fields
    w2 = dict(rec("q1", 0, [[1]]), dataset="world", world_seed=1002)
    mq = dict(rec("q1", 1, [[1]]), dataset="musique", world_seed=None)
    write(tmp_path, "b", [old, w2, mq])
    c_old = rec("q1", 0, [[1]])
    c_w2 = dict(rec("q1", 0, [[1]]), dataset="world", world_seed=1002)
    write(tmp_path, "c", [c_old, c_w2])
    assert len({mod.record_key(r) for r in (old, w2, mq)}) == 3
    text = mod.report(str(tmp_path))
    res = json.loads((tmp_path / "report.json").read_text())
    rows = {r["variant"]: r for r in res["rows"]}
    # c pairs with b's world 1001 (em 1) and world 1002 (em 0) records: c - b = (-1, 0)
    assert rows["c"]["paired_n"] == 2 and rows["c"]["b_em_same"] == pytest.approx(0.5)
    assert rows["c"]["em_minus_b"]["mean"] == pytest.approx(-0.5)
    assert res["world_seeds"] == [1001, 1002] and res["datasets"] == ["musique", "world"]
    assert "world seeds 1001, 1002" in text and "MuSiQue questions after the first 50" in text
