"""``eval qa --graphllm DIR`` (issue 41 item 4): the system ``ras-graphllm`` runs the RAS loop
with a trained GraphLLM as planner and answerer, and its records keep the GraphLLM's own
answer (the paper's setting), not the one reader's; its cache key holds the run's content id.
The GraphLLM is a scripted stand-in here (tests/test_graphllm_real.py trains a real one)."""
import json
import subprocess
import sys

import pytest

from qa_util import dataset, llm


class Planner:
    """Round 0: retrieve with the question; after one round: enough."""

    def plan(self, states):
        return ["[SUFFICIENT]" if s.subqueries else "[SUBQ] go" for s in states]


class Answerer:
    """Answers the Velora question from the triples the loop gathered (the object of a "born
    in" triple) and nothing else ("unknown", where the reader would say "Elden Fair")."""

    def __init__(self):
        self.calls = 0

    def answer(self, states):
        self.calls += len(states)
        out = []
        for s in states:
            objs = [t[2] for st in s.step_triples for t in st if t[1] == "born in"]
            out.append(objs[0] if objs and "Velora" in s.question else "unknown")
        return out


def fake_run(path, seed: int):
    """A directory shaped like a run of ``rasfast graphllm train`` (what its id hashes)."""
    path.mkdir()
    (path / "train_config.json").write_text(json.dumps({"config": {"seed": seed}, "data": {"path": str(path)}}))
    (path / "graph_llm.json").write_text("{}")
    (path / "modules.pt").write_bytes(bytes([seed]) * 64)
    (path / "adapter").mkdir()
    (path / "adapter" / "adapter_model.safetensors").write_bytes(b"x" * 8)
    return str(path)


@pytest.fixture
def stand_in(monkeypatch):
    import rasfast.llm.adapters as adapters
    answerers = []

    def trained_graph_llm(path, **kw):
        answerers.append(Answerer())
        return Planner(), answerers[-1]
    monkeypatch.setattr(adapters, "trained_graph_llm", trained_graph_llm)
    return answerers


def test_ras_graphllm_answers_itself_and_is_keyed_on_its_run(tmp_path, stand_in):
    from rasfast.qa_eval import LABELS, SYSTEMS, evaluate_qa, report_qa
    from rasfast.qa_eval.signatures import graphllm_id
    assert "ras-graphllm" in SYSTEMS and "paper's setting" in LABELS["ras-graphllm"]
    run = fake_run(tmp_path / "run", 1)
    kw = dict(encoder="hashing", cache_dir=tmp_path / "cache", progress=False, log=lambda m: None)
    out = evaluate_qa(dataset(), ["dense", "ras-graphllm"], llm(), "stand-in", graphllm=run, **kw)
    assert not out["skipped"]
    recs = {r["qid"]: r for r in out["records"]["ras-graphllm"]}
    # its own answer: the stand-in answerer's, from the loop's triples (the reader says other things)
    assert recs["q1"]["answer"] == "Castrell" and recs["q1"]["em"] == 1.0
    assert recs["q3"]["answer"] == "unknown" and recs["q3"]["em"] == 0.0
    assert recs["q1"]["reader"] == "own answer (no reader)" and recs["q1"]["reply"] == "Castrell"
    assert stand_in[-1].calls == 3
    assert recs["q1"]["subqueries"] and recs["q1"]["steps"][0]["triples"]
    # the report finds the records under the same run, not under another one
    rep = report_qa(dataset(), ["ras-graphllm"], "stand-in", graphllm=run, cache_dir=tmp_path / "cache",
                    encoder="hashing", prompt_style="compact")
    assert rep["missing"] == {"ras-graphllm": 0}
    other = fake_run(tmp_path / "other", 2)
    assert graphllm_id(other) != graphllm_id(run)
    rep = report_qa(dataset(), ["ras-graphllm"], "stand-in", graphllm=other, cache_dir=tmp_path / "cache",
                    encoder="hashing", prompt_style="compact")
    assert rep["missing"] == {"ras-graphllm": 3}
    # where the run's data lay is not part of its id; its settings are
    cfg = json.loads((tmp_path / "run" / "train_config.json").read_text())
    cfg["data"]["path"] = "/elsewhere"
    (tmp_path / "run" / "train_config.json").write_text(json.dumps(cfg))
    assert graphllm_id(run) == graphllm_id(str(tmp_path / "run"))


def test_ras_graphllm_needs_a_run(tmp_path, stand_in):
    from rasfast.qa_eval import evaluate_qa
    with pytest.raises(ValueError, match="ras-graphllm: needs --graphllm DIR"):
        evaluate_qa(dataset(), ["ras-graphllm"], llm(), "stand-in", encoder="hashing", cache_dir=tmp_path,
                    progress=False, log=lambda m: None)


def test_cli_refuses_a_missing_run_in_one_line(tmp_path):
    r = subprocess.run([sys.executable, "-m", "rasfast.cli", "eval", "qa", "--dataset", "musique", "--llm", "local",
                        "--systems", "ras-graphllm", "--graphllm", str(tmp_path / "nope")],
                       capture_output=True, text=True)
    assert r.returncode == 1
    assert r.stderr.strip().count("\n") == 0 and "--graphllm" in r.stderr and "not a directory" in r.stderr
