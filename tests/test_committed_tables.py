"""The tables of benchmarks/results/qa_local.md rebuild, unchanged, from the committed
per-question records (benchmarks/results/qa_records) through the report command itself,
``rasfast eval qa --report --layout qa-local`` (no model runs). Every block between the
file's ``<!-- qa_local_report: NAME -->`` markers is compared with what the command writes
now, so a changed measure fails here until the committed file is regenerated
(``benchmarks/qa_local_report.py --update benchmarks/results/qa_local.md``, the same command
with the committed settings).

gear_agent.md is not rebuilt here: its report (``--layout gear-agent``) encodes the whole
MuSiQue and HotpotQA corpora with MiniLM and runs three retrievers over 200 questions
(minutes on 2 cores)."""
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"


@pytest.mark.parametrize("dataset,aligner", [("musique", "29cf4f04b089b742"), ("hotpotqa", None)])
def test_qa_local_tables_rebuild_from_the_committed_records(dataset, aligner, tmp_path, capsys):
    from rasfast.cli import main
    from rasfast.data.qa import load_dataset
    from rasfast.qa_eval.report_md import committed_blocks
    try:
        load_dataset(dataset)
    except (OSError, FileNotFoundError, ValueError) as e:
        pytest.skip(f"{dataset} data not available here: {e}")
    md = tmp_path / "tables.md"
    argv = ["eval", "qa", "--report", "--layout", "qa-local", "--dataset", dataset, "--questions", "51-100",
            "--llm", "local", "--llm-ctx", "8192", "--cache-dir", str(RESULTS / "qa_records"),
            "--before", str(RESULTS / "qa_local_records"), "--reader-prompts", "current", "--md", str(md)]
    if aligner:
        argv += ["--kirag-aligner", f"{dataset}={aligner}"]
    assert main(argv) == 0
    committed, blocks = committed_blocks(RESULTS / "qa_local.md"), committed_blocks(md)
    assert len(blocks) >= 5 and all(name.startswith(dataset + " ") for name in blocks)
    for name, lines in blocks.items():
        assert name in committed, f"qa_local.md has no <!-- qa_local_report: {name} --> block"
        assert committed[name] == lines, f"qa_local.md block {name!r} differs from the records"
    assert md.read_text().rstrip("\n") == capsys.readouterr().out.rstrip("\n")


def test_the_report_script_is_the_command_with_the_committed_settings():
    import importlib.util
    spec = importlib.util.spec_from_file_location("qa_local_report", ROOT / "benchmarks" / "qa_local_report.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    import argparse
    args = argparse.Namespace(datasets=["musique", "hotpotqa"], questions="51-100", llm="local",
                              cache_dir="C", reader_prompts="current", out="O", aligner=["musique=29cf4f04b089b742"],
                              update="benchmarks/results/qa_local.md")
    argv = mod.command(args)
    assert argv[:5] == ["eval", "qa", "--report", "--layout", "qa-local"]
    from rasfast.cli.main import build_parser
    a = build_parser().parse_args(argv)
    assert (a.dataset, a.kirag_aligner, a.reader_prompts, a.llm_ctx, a.update) == (
        "musique,hotpotqa", "musique=29cf4f04b089b742", "current", 8192, "benchmarks/results/qa_local.md")


def test_the_answer_shape_table_rebuilds_from_its_committed_records(tmp_path):
    """benchmarks/results/answer_shape_rule.md (issue 40 C, 2WikiMultihopQA questions nobody
    had read) from its per-question records, through the script's --report (no model)."""
    import importlib.util
    from rasfast.data.qa import load_dataset
    try:
        load_dataset("2wikimultihopqa")
    except (OSError, FileNotFoundError, ValueError) as e:
        pytest.skip(f"2wikimultihopqa data not available here: {e}")
    spec = importlib.util.spec_from_file_location("answer_shape_rule", ROOT / "benchmarks" / "answer_shape_rule.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    out = tmp_path / "rule"
    assert mod.main(["--report", "--cache-dir", str(RESULTS / "answer_shape_records"), "--out", str(out)]) == 0
    table = lambda text: [x for x in text.splitlines() if x.startswith(("|", "- yes/no", "- other"))]  # noqa: E731
    got, committed = table(out.with_suffix(".md").read_text()), table((RESULTS / "answer_shape_rule.md").read_text())
    assert len(got) >= 10 and got == committed
