"""``rasfast eval qa --report`` options that replaced the report scripts' private calls
(issue 40 A): several settings in one table (``--systems NAME@RETRIEVER``), several datasets,
the KiRAG aligner by its content id (per dataset), ``--layout qa-local`` (qa_local.md's
tables, ``--update``), and their user errors (one line, exit 1). On the scripted tiny
dataset (tests/qa_util.py): real ``eval qa`` runs write the records, the report reads them."""
import json

import pytest

from qa_util import dataset, llm


@pytest.fixture()
def cache(tmp_path_factory):
    """Records of dense (dense base) and RAS on BM25, for datasets named musique and hotpotqa."""
    from rasfast.qa_eval import evaluate_qa, llm_label
    d = tmp_path_factory.mktemp("qacache")
    for name in ("musique", "hotpotqa"):
        for systems, ret in ((["none", "dense"], "dense"), (["ras"], "bm25")):
            evaluate_qa(dataset(name=name), systems, llm(), llm_label("local"), encoder="hashing", cache_dir=d,
                        retriever=ret, progress=False, log=lambda m: None)
    return d


@pytest.fixture()
def report(cache, monkeypatch, capsys):
    import rasfast.data.qa
    import rasfast.llm.adapters
    from rasfast.cli.main import main
    monkeypatch.setattr(rasfast.data.qa, "load_dataset", lambda name, root=None: dataset(name={
        "2wikimultihopqa": "2wikimultihopqa"}.get(name, name)))

    def no_model(*a, **kw):
        raise AssertionError("--report must not load a model")
    monkeypatch.setattr(rasfast.llm.adapters, "make_llm", no_model)

    def run(*argv):
        rc = main(["eval", "qa", "--llm", "local", "--encoder", "hashing", "--cache-dir", str(cache), *argv])
        out, err = capsys.readouterr()
        return rc, out, err
    return run


def test_several_settings_in_one_table(report, tmp_path):
    rc, out, _ = report("--report", "--dataset", "musique", "--systems", "none,dense,ras@bm25",
                        "--json", str(tmp_path / "r.json"))
    assert rc == 0 and "retriever none,dense,ras@bm25" in out
    got = json.loads((tmp_path / "r.json").read_text())
    assert [r["system"] for r in got["rows"]] == ["none", "dense", "ras"]
    assert all(r["n"] == 3 for r in got["rows"]) and set(got["paired"]) >= {"none", "ras"}
    assert got["missing"] == {"none": 0, "dense": 0, "ras": 0} and got["retrievers"]["ras"] == "bm25"
    # on the dense base RAS has no records: the retriever is part of its setting
    rc, out, _ = report("--report", "--dataset", "musique", "--systems", "dense,ras")
    assert rc == 0 and "ras: 3 of the 3 questions not in the cache" in out


def test_several_datasets(report, tmp_path):
    rc, out, _ = report("--report", "--dataset", "musique,hotpotqa", "--systems", "dense",
                        "--json", str(tmp_path / "r.json"))
    assert rc == 0 and out.count("from the cache; nothing ran") == 2
    got = json.loads((tmp_path / "r.json").read_text())["datasets"]
    assert set(got) == {"musique", "hotpotqa"} and all(d["rows"][0]["n"] == 3 for d in got.values())


def test_qa_local_layout_writes_and_updates_the_marked_tables(report, tmp_path):
    from rasfast.qa_eval.report_md import BLOCK, BLOCK_END, committed_blocks
    md = tmp_path / "tables.md"
    rc, out, _ = report("--report", "--layout", "qa-local", "--dataset", "musique", "--questions", "1-3",
                        "--systems", "none,dense,ras@bm25", "--kirag-aligner", "musique=0123456789abcdef",
                        "--md", str(md))
    assert rc == 0
    blocks = committed_blocks(md)
    assert {"musique main", "musique depth", "musique kirag", "musique stages", "musique parse"} <= set(blocks)
    main_rows = [line for line in blocks["musique main"] if line.startswith("| ")][1:]   # under the header
    assert [r.split(" | ")[1] for r in main_rows] == ["–", "dense", "bm25"]   # each system's own retriever
    # --update rewrites only the marked tables of a results file, its prose stays
    target = tmp_path / "results.md"
    target.write_text("prose before\n" + BLOCK.format("musique stages") + "\nold table\n" + BLOCK_END + "\nprose after")
    rc, _, _ = report("--report", "--layout", "qa-local", "--dataset", "musique", "--questions", "1-3",
                      "--systems", "none,dense,ras@bm25", "--update", str(target))
    text = target.read_text()
    assert rc == 0 and "old table" not in text and text.startswith("prose before\n") and text.endswith("prose after")
    assert committed_blocks(target)["musique stages"] == blocks["musique stages"]


@pytest.mark.parametrize("argv,message", [
    (["--dataset", "musique", "--layout", "qa-local"], "eval qa: --layout qa-local needs --report"),
    (["--dataset", "musique,hotpotqa"], "eval qa: several datasets needs --report"),
    (["--report", "--dataset", "musique", "--update", "x.md"], "eval qa: --update goes with --report --layout qa-local"),
    (["--report", "--dataset", "musique", "--layout", "gear-agent", "--before", "d"],
     "eval qa: --before goes with --report --layout qa-local"),
    (["--report", "--dataset", "musique", "--systems", "dense,ras@faiss"], "systems: 'ras@faiss': the retriever"),
    (["--report", "--dataset", "musique", "--systems", "ras,ras@bm25"], "systems: ras named twice"),
    (["--report", "--dataset", "musique", "--kirag-aligner", "nq=0123456789abcdef"], "eval qa: --kirag-aligner: 'nq'"),
    (["--dataset", "musique", "--kirag-aligner", "no-such-aligner"], "eval qa: --kirag-aligner no-such-aligner: "
                                                                     "not a directory"),
    (["--report", "--dataset", "musique", "--layout", "qa-local", "--update", "nowhere.md"],
     "eval qa: --update nowhere.md: no such file"),
])
def test_report_option_errors_are_one_line(report, argv, message):
    rc, _, err = report(*argv)
    assert rc == 1 and err.count("\n") == 1 and err.startswith(message), err


def test_an_aligner_id_is_accepted_by_the_report(report):
    rc, out, _ = report("--report", "--dataset", "musique", "--systems", "dense", "--kirag-aligner", "0123456789abcdef")
    assert rc == 0 and "from the cache" in out
