"""The tables of benchmarks/results/qa_local.md rebuild, unchanged, from the committed
per-question records (benchmarks/results/qa_records) with the report command's own code
(benchmarks/qa_local_report.py; no model runs). Every block between the file's
``<!-- qa_local_report: NAME -->`` markers is compared with what the report makes now, so a
changed measure fails here until the committed file is regenerated
(``qa_local_report.py ... --update benchmarks/results/qa_local.md``).

gear_agent.md is not rebuilt here: its report encodes the whole MuSiQue and HotpotQA corpora
with MiniLM and runs three retrievers over 200 questions (minutes on 2 cores)."""
import importlib.util
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"


def _report_module():
    spec = importlib.util.spec_from_file_location("qa_local_report", ROOT / "benchmarks" / "qa_local_report.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.parametrize("dataset,aligner", [("musique", "29cf4f04b089b742"), ("hotpotqa", None)])
def test_qa_local_tables_rebuild_from_the_committed_records(dataset, aligner):
    from rasfast.data.qa import load_dataset
    from rasfast.qa_eval import llm_label
    try:
        load_dataset(dataset)
    except (OSError, FileNotFoundError, ValueError) as e:
        pytest.skip(f"{dataset} data not available here: {e}")
    mod = _report_module()
    committed = mod.committed_blocks(RESULTS / "qa_local.md")
    # the committed records were read before the yes/no answer-shape rule (issue 40 C): the
    # report names that reader's prompt signature (the current reader's records need a new read)
    blocks, _ = mod.blocks_for(dataset, "51-100", RESULTS / "qa_records", llm_label("local"), aligner, "round3")
    assert blocks
    for name, _, lines in blocks:
        assert name in committed, f"qa_local.md has no <!-- qa_local_report: {name} --> block"
        assert committed[name] == lines, f"qa_local.md block {name!r} differs from the records"
