"""StructRAG's router-data synthesis (the paper's DPO data): synthesize tasks -> simulate
every structure type through the real pipeline -> judge -> preference pairs, with a scripted
LLM under which only the table structure recovers the answer."""
import pytest

from rasfast.encode import HashingEncoder
from rasfast.types import RetrievedPassage
from rasfast.systems.structrag import StructRAG
from rasfast.systems.structrag.synthesis import (FixedRouter, judge, parse_task, preference_pairs,
                                         simulate, synthesize_router_data, synthesize_tasks)

DOCS = [[RetrievedPassage(1, "Acme", "Acme employs one hundred twenty people in Oslo."),
         RetrievedPassage(2, "Zeta", "Zeta employs eighty people in Bergen.")],
        [RetrievedPassage(3, "Blue", "Blue is a river.")]]


class ScriptedLLM:
    """Replies by prompt kind; the table structurizer writes the numbers as digits."""

    def __init__(self, task_reply="Question: How many people does Acme employ?\nAnswer: 120"):
        self.task_reply, self.calls = task_reply, []

    def generate(self, prompts, max_new_tokens=128, stop=None, temperature=0.0):
        out = []
        for p in prompts:
            system, user = p[0]["content"], p[-1]["content"]
            self.calls.append(system[:30])
            if system.startswith("You write exam questions"):
                out.append(self.task_reply if "Acme" in user else "I cannot.")
            elif "into a table" in system:
                out.append("Description: staff\n| firm | staff |\n| --- | --- |\n| Acme | 120 |\n| Zeta | 80 |")
            elif "into a graph" in system:
                out.append("Description: places\n(Acme | located in | Oslo)\n(Zeta | located in | Bergen)")
            elif system.startswith("You are given a question"):
                out.append("1. How many people does Acme employ?")
            elif system.startswith("Decide whether"):
                out.append("correct" if "Predicted answer: 120" in user else "incorrect")
            elif user.rstrip().endswith("Kept:"):
                out.append(user.split("Knowledge:\n", 1)[1].rsplit("\n\nKept:", 1)[0])
            elif "the entity or value the question asks for" in user:   # the reader contract
                out.append("120" if "120" in user else "unknown")
            else:
                out.append("Description: text\nsome text")
        return out


def _make(llm):
    return lambda router: StructRAG(llm, router=router, encoder=HashingEncoder())


def test_parse_task_is_tolerant():
    assert parse_task("Question: Who?\nAnswer: Bob.") == ("Who?", "Bob")
    assert parse_task("question:  Who? \n\nanswer : Bob") == ("Who?", "Bob")
    for bad in ("no format", "Question: only", None, 3):
        assert parse_task(bad) is None


@pytest.mark.parametrize("llm_judge", [False, True])
def test_pipeline_prefers_the_structure_that_answers(llm_judge):
    llm = ScriptedLLM()
    pairs, sim, scores = synthesize_router_data(llm, DOCS, _make(llm),
                                                judge_llm=llm if llm_judge else None)
    assert [t.question for t in sim.tasks] == ["How many people does Acme employ?"]  # 2nd set unparsed
    assert sim.tasks[0].answer == "120" and sim.tasks[0].documents == DOCS[0]
    assert sim.answers["table"] == ["120"] and sim.answers["graph"] == ["unknown"]
    assert scores[0]["table"] == 1.0 and all(v == 0.0 for k, v in scores[0].items() if k != "table")
    assert {p[2] for p in pairs} == {"table"}
    assert sorted(p[3] for p in pairs) == sorted(k for k in scores[0] if k != "table")
    q, content, _, _ = pairs[0]
    assert q == "How many people does Acme employ?" and "Acme" in content


def test_ties_give_no_pair_and_failed_runs_score_zero():
    llm = ScriptedLLM(task_reply="Question: Where is Acme?\nAnswer: Oslo")
    tasks = synthesize_tasks(llm, DOCS[:1])
    sim = simulate(tasks, _make(llm), types=("table", "graph"))
    scores = judge(sim)
    assert scores[0] == {"table": 0.0, "graph": 0.0}   # neither answers "Oslo"
    assert preference_pairs(sim, scores) == []
    sim.answers["graph"] = ["Oslo"]
    pairs = preference_pairs(sim, judge(sim))
    assert [(p[0], p[2], p[3]) for p in pairs] == [("Where is Acme?", "graph", "table")]
    sim.answers["graph"] = [None]                       # a failed run
    assert judge(sim)[0]["graph"] == 0.0
    with pytest.raises(ValueError, match="kind"):
        FixedRouter("tree")


@pytest.mark.data
def test_cli_router_data_writes_pairs_and_trains_a_router_the_system_loads(data_dir, tmp_path, monkeypatch,
                                                                            capsys):
    """``rasfast structrag router-data``: tasks from random corpus document sets, every structure
    simulated, pairs written as JSONL with a summary, and ``--train-router`` saves a router
    that loads with the encoder it was trained with."""
    import json

    import rasfast.llm.adapters as adapters
    from rasfast.cli import main
    from rasfast.systems.structrag import ROUTER_DIR, load_router

    class Scripted(ScriptedLLM):
        def generate(self, prompts, max_new_tokens=128, stop=None, temperature=0.0):
            out = []
            for p in prompts:
                system, user = p[0]["content"], p[-1]["content"]
                if system.startswith("You write exam questions"):
                    out.append("Question: How many staff are there?\nAnswer: 120")
                elif "into a table" in system:
                    out.append("Description: staff\n| firm | staff |\n| --- | --- |\n| Acme | 120 |")
                else:
                    out.extend(ScriptedLLM.generate(self, [p], max_new_tokens, stop, temperature))
            return out

    specs = []
    monkeypatch.setattr(adapters, "make_llm", lambda kind, *a, **k: specs.append(kind) or Scripted())
    out = tmp_path / "pairs.jsonl"
    assert main(["structrag", "router-data", "--dataset", "musique", "--data-root", str(data_dir),
                 "--llm", "local:smollm2", "--n", "2", "--docs-per-task", "2", "--encoder", "hashing",
                 "--out", str(out), "--train-router", str(tmp_path / "ix")]) == 0
    assert specs == ["local:smollm2"]
    pairs = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(pairs) == 2 * 4 and {p["chosen"] for p in pairs} == {"table"}
    summary = json.loads(out.with_suffix(".summary.json").read_text())
    assert summary["tasks"] == 2 and summary["pairs"] == 8 and len(summary["per_task"][0]["pids"]) == 2
    assert summary["per_task"][0]["scores"]["table"] == 1.0
    text = capsys.readouterr().out
    assert "2 of 2 document sets gave a task; 8 preference pairs" in text and "router trained" in text
    from rasfast.encode import HashingEncoder
    router = load_router(tmp_path / "ix" / ROUTER_DIR, HashingEncoder())
    assert router.route([(pairs[0]["question"], [])]) == ["table"]
    with pytest.raises(SystemExit):
        main(["structrag", "router-data", "--dataset", "musique", "--data-root", str(data_dir),
              "--llm", "local", "--n", "0", "--out", str(out)])
