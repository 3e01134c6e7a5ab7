"""The three evaluation scripts are thin wrappers over ``rasfast eval loop|gear|kirag`` (issue 40 A:
"the evaluation scripts become flags or go"): each one's options map onto the CLI's command line,
which it runs in-process, and it only adds the write-up. Nothing here runs a real evaluation
except the loop on a few demo questions with the hashing encoder."""
import importlib.util
import json
import pathlib
import types

import pytest

from rasfast.cli.main import build_parser

ROOT = pathlib.Path(__file__).resolve().parents[1]


def script(name):
    spec = importlib.util.spec_from_file_location(f"bench_{name}", ROOT / "benchmarks" / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


# -- loop_eval.py -> rasfast eval loop ------------------------------------------------------------

def test_loop_eval_runs_are_eval_loop_command_lines(tmp_path):
    mod = script("loop_eval")
    runs = mod.commands(mod.parse_args(["--encoder", "hashing", "--dataset", "demo", "--dataset", "musique",
                                        "--n", "7", "--k", "3"]), tmp_path)
    assert [(e, d) for e, d, _ in runs] == [("hashing", "demo"), ("hashing", "musique")]
    for e, d, argv in runs:
        assert argv[:2] == ["eval", "loop"]
        a = build_parser().parse_args(argv)
        assert (a.what, a.dataset, a.encoder, a.k, a.n, a.batch, a.max_iters, a.retriever) == (
            "loop", d, "hashing", 3, 7, 32, 5, "dense")
        assert (a.index, a.llm, a.graph_encoder, a.llm_extract, a.progress) == (None, None, None, False, False)
        assert a.json == str(tmp_path / f"hashing-{d}.json")
    # the defaults: both encoders x the three datasets, every question
    runs = mod.commands(mod.parse_args([]), tmp_path)
    assert [(e, d) for e, d, _ in runs] == [(e, d) for e in ("minilm", "hashing")
                                           for d in ("demo", "musique", "hotpotqa")]
    assert all(build_parser().parse_args(argv).n is None for _, _, argv in runs)


def test_loop_eval_writes_its_report_from_the_cli_runs(tmp_path, monkeypatch):
    monkeypatch.setenv("RASFAST_CACHE", str(tmp_path / "cache"))
    mod = script("loop_eval")
    out = tmp_path / "loop"
    assert mod.main(["--encoder", "hashing", "--dataset", "demo", "--n", "6", "--out", str(out)]) == 0
    md, payload = (out.with_suffix(".md")).read_text(), json.loads(out.with_suffix(".json").read_text())
    assert md.startswith("# RAS loop evaluation") and "| demo | hashing-384 | 6 |" in md
    assert "By question type: demo, hashing-384" in md and "demo (all)" in md
    assert payload["k"] == 5 and "machine" in payload
    (run,) = payload["runs"]
    assert (run["dataset"], run["encoder"], run["n"]) == ("demo", "hashing-384", 6)
    assert set(run) == {"dataset", "encoder", "n", "metrics", "by_type", "seconds"}


# -- eval_gear_musique.py -> rasfast eval gear ----------------------------------------------------

def test_gear_script_is_eval_gear_with_its_settings():
    mod = script("eval_gear_musique")
    args = mod.parse_args(["--out", "R/gear.md", "--max-degree", "50", "--data", "D"])
    argv = mod.command(args)
    assert argv[:2] == ["eval", "gear"]
    a = build_parser().parse_args(argv)
    assert (a.what, a.base_sizes, a.fusion_depths, a.max_degree, a.backend, a.data_root, a.json, a.encoder) == (
        "gear", [2, 5, 10, 15, 20], [0, 50], 50, "auto", "D", "R/gear.json", "minilm")
    a = build_parser().parse_args(mod.command(mod.parse_args([])))
    assert (a.max_degree, a.data_root) == (None, None)
    # the CLI's own defaults are unchanged: one run, fused at the base size
    a = build_parser().parse_args(["eval", "gear"])
    assert (a.base_sizes, a.fusion_depths, a.max_degree, a.backend) == ([5, 10, 15, 20], [0], None, "auto")


def _fake_gear(calls):
    def evaluate_musique(data_root=None, ks=(5, 10, 15), base_sizes=(5,), encoder=None, max_degree=None,
                         fusion_depth=None, backend="auto"):
        calls.append(dict(data_root=data_root, base_sizes=list(base_sizes), max_degree=max_degree,
                          fusion_depth=fusion_depth, backend=backend))
        rec = {f"recall@{k}": 0.5 for k in ks}
        rows = [{"method": "dense", "base_size": None, **rec}]
        rows += [{"method": "dense + NaiveGE", "base_size": m, "fusion_depth": fusion_depth or m,
                  "mean_expansion_passages": 3.0, **rec} for m in base_sizes]
        return {"rows": rows, "graph": {"triples": 10, "skipped": 0, "entities": 5, "edges": 20},
                "n_questions": 4, "encoder": "stub",
                "settings": {"beam_width": 10, "max_len": 2, "gamma": 20.0, "max_neighbors": 100,
                             "max_degree": max_degree, "fusion_depth": fusion_depth, "rrf_k": 60, "scoring": "sum"}}
    return evaluate_musique


def test_gear_script_writes_its_table_from_eval_gear(tmp_path, monkeypatch):
    import rasfast.cli.evaluate as ev
    import rasfast.systems.gear as gear
    calls = []
    monkeypatch.setattr(gear, "evaluate_musique", _fake_gear(calls))
    monkeypatch.setattr(ev, "_encoder", lambda args: types.SimpleNamespace(name="stub"))
    mod = script("eval_gear_musique")
    out = tmp_path / "gear.md"
    assert mod.main(["--base-sizes", "2", "5", "--out", str(out), "--backend", "torch"]) == 0
    assert [c["fusion_depth"] for c in calls] == [None, 50]
    assert all(c["base_sizes"] == [2, 5] and c["backend"] == "torch" for c in calls)
    res = json.loads(out.with_suffix(".json").read_text())
    assert "machine" in res
    assert [(r["method"], r["base_size"], r.get("fusion_depth")) for r in res["rows"]] == [
        ("dense", None, None), ("dense + NaiveGE", 2, 2), ("dense + NaiveGE", 5, 5),
        ("dense + NaiveGE", 2, 50), ("dense + NaiveGE", 5, 50)]   # the dense row once
    md = out.read_text()
    assert md.startswith("# GEAR NaiveGE on MuSiQue: Recall@k")
    assert "| dense + NaiveGE | 5 | 50 | 3.0 | 50.0 | 50.0 | 50.0 |" in md


# -- eval_kirag_musique.py -> rasfast eval kirag --------------------------------------------------

KIRAG_FIELDS = ("kirag_folds", "kirag_epochs", "kirag_train_batch", "kirag_lr", "kirag_temperature",
                "kirag_max_negatives", "kirag_negatives", "kirag_max_steps", "kirag_seed", "kirag_train")


def test_kirag_script_is_eval_kirag_with_its_settings(tmp_path):
    mod = script("eval_kirag_musique")
    args = mod.parse_args(["--epochs", "3", "--max-steps", "9", "--negatives", "paragraphs", "--data", "D"])
    argv = mod.command(args, tmp_path / "k.json")
    assert argv[:2] == ["eval", "kirag"]
    a = build_parser().parse_args(argv)
    assert tuple(getattr(a, f) for f in KIRAG_FIELDS) == (2, 3, 8, 3e-5, 0.05, 15, "paragraphs", 9, 0, True)
    assert (a.what, a.dataset, a.encoder, a.data_root, a.json) == (
        "kirag", "musique", "minilm", "D", str(tmp_path / "k.json"))
    assert args.out.endswith("kirag_musique.md")
    # --paper: the frozen protocol is the CLI's own defaults (PAPER_TRAINING)
    paper = mod.parse_args(["--paper"])
    assert paper.out.endswith("kirag_musique_frozen.md")
    a = build_parser().parse_args(mod.command(paper, "k.json"))
    d = build_parser().parse_args(["eval", "kirag", "--dataset", "musique"])
    assert all(getattr(a, f) == getattr(d, f) for f in KIRAG_FIELDS), \
        {f: (getattr(a, f), getattr(d, f)) for f in KIRAG_FIELDS}


def test_kirag_script_writes_its_report_from_eval_kirag(tmp_path, monkeypatch):
    import rasfast.cli.evaluate as ev
    import rasfast.systems.kirag.eval as keval
    seen = {}

    def fake(data_root=None, encoder=None, folds=2, epochs=1, batch_size=1, lr=1.0, temperature=1.0,
             max_negatives=1, max_steps=None, train=True, seed=0, progress=False, negatives="retrieved"):
        seen.update(epochs=epochs, batch_size=batch_size, lr=lr, negatives=negatives)
        rec = lambda v: {"recall@3": v, "recall@5": v, "recall@10": v}  # noqa: E731
        return {"rows": [{"method": "dense", **rec(0.5)}, {"method": "KiRAG, trained aligner", **rec(0.6)}],
                "folds": [{"fold": 0, "n_test": 2, "train_pairs": 4, "train_seconds": 1.0,
                           "loss_first_5_mean": 1.0, "loss_last_5_mean": 0.5, "dense": rec(0.5),
                           "zero_shot": rec(0.5), "trained": rec(0.6)}],
                "n_questions": 4, "encoder": "stub", "silver_chains": {"questions": 4, "complete": 3, "mean_len": 2.0},
                "settings": dict(K0=10, N=20, L=5, folds=folds, epochs=epochs, batch_size=batch_size, lr=lr,
                                 temperature=temperature, max_negatives=max_negatives, max_steps=max_steps,
                                 seed=seed, constructor="heuristic", negatives=negatives),
                "seconds": 2.0}

    monkeypatch.setattr(keval, "evaluate_kirag_musique", fake)
    monkeypatch.setattr(ev, "_encoder", lambda args: types.SimpleNamespace(name="stub"))
    mod = script("eval_kirag_musique")
    out = tmp_path / "kirag.md"
    assert mod.main(["--out", str(out)]) == 0
    assert seen == {"epochs": 2, "batch_size": 8, "lr": 3e-5, "negatives": "retrieved"}
    md = out.read_text()
    assert md.startswith("# KiRAG on MuSiQue: Recall@k\n") and "Protocol: tuned." in md
    assert "| KiRAG, trained aligner | 60.0 | 60.0 | 60.0 |" in md and "Reached: +10.0 points (met)" in md
    res = json.loads(out.with_suffix(".json").read_text())
    assert {"machine", "load_start", "load_end"} <= set(res) and res["settings"]["epochs"] == 2


@pytest.mark.parametrize("name", ["loop_eval", "eval_gear_musique", "eval_kirag_musique"])
def test_the_scripts_evaluate_nothing_themselves(name):
    """Each script takes its evaluation from the CLI: it calls no evaluation function of rasfast."""
    text = (ROOT / "benchmarks" / f"{name}.py").read_text()
    for fn in ("evaluate_musique(", "evaluate_kirag_musique(", "evaluate(", "build_ras("):
        assert fn not in text, fn
    assert "from rasfast.cli import main as rasfast" in text
