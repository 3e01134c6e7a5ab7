"""CLI smoke tests: demo, index build + ask, eval, profile, bench select."""
import json

import pytest

from rasfast.cli import main


@pytest.fixture(autouse=True)
def _cache(tmp_path, monkeypatch):
    monkeypatch.setenv("RASFAST_CACHE", str(tmp_path / "cache"))


def test_demo(tmp_path, capsys):
    trace = tmp_path / "demo.json"
    assert main(["demo", "--passages", "400", "--questions", "4", "--trace", str(trace)]) == 0
    out = capsys.readouterr().out
    assert "sub-query:" in out and "answer:" in out and "triples (" in out
    assert "per-stage latency" in out and "p95 ms" in out and "dense" in out
    assert "answered correctly" in out
    assert json.loads(trace.read_text())["traceEvents"]


def test_index_build_and_ask(tmp_path, capsys):
    corpus = tmp_path / "c.jsonl"
    rows = [{"title": "Alda Morven", "text": "Alda Morven was born in Tarsk in 1954."},
            {"title": "Tarsk", "text": "Tarsk is a city in Velland."},
            {"title": "Velland", "text": "Velland is a country whose capital is Oru."}]
    corpus.write_text("\n".join(json.dumps(r) for r in rows))
    assert main(["index", "build", "--corpus", str(corpus), "--out", str(tmp_path / "ix"),
                 "--encoder", "hashing"]) == 0
    assert "indexed 3 passages" in capsys.readouterr().out
    manifest = json.loads((tmp_path / "ix" / "manifest.json").read_text())
    assert manifest["num_rows"] == 3 and manifest["encoder"] == "hashing-384"
    assert main(["ask", "Where was Alda Morven born?", "--index", str(tmp_path / "ix"),
                 "--encoder", "hashing", "--k", "2", "--json"]) == 0
    out = capsys.readouterr().out
    res = json.loads(out[out.index("[\n"):])
    assert res[0]["question"] == "Where was Alda Morven born?" and res[0]["error"] is None
    assert res[0]["answer"] == "Tarsk"
    with pytest.raises(SystemExit, match="encoder"):   # index built with another encoder
        main(["ask", "x", "--index", str(tmp_path / "ix"), "--encoder", "minilm"])


def _build_entity_index(tmp_path):
    """`rasfast index build` over 12 passages "EntityN is in PlaceN%3." with their triples."""
    corpus = tmp_path / "c.json"
    rows = [{"title": f"T{i}", "text": f"Entity{i} is in Place{i % 3}.",
             "triples": [[f"Entity{i}", "located in", f"Place{i % 3}"]]} for i in range(12)]
    corpus.write_text(json.dumps(rows))
    assert main(["index", "build", "--corpus", str(corpus), "--out", str(tmp_path / "ix"),
                 "--encoder", "hashing", "--num-themes", "3"]) == 0


def test_index_keeps_triples_and_scopes(tmp_path, capsys):
    _build_entity_index(tmp_path)
    assert "with triples" in capsys.readouterr().out
    assert main(["ask", "Where is Entity4 located?", "--index", str(tmp_path / "ix"), "--encoder",
                 "hashing", "--scope-k", "6", "--k", "3", "--json"]) == 0
    out = capsys.readouterr().out
    res = json.loads(out[out.index("[\n"):])
    assert res[0]["answer"] == "Place1" and ["Entity4", "located in", "Place1"] in res[0]["triples"][0]
    # a knowledge index's commit is knowledge.json (it names its theme generation's
    # numbered manifest); without it and manifest.json nothing loads
    (tmp_path / "ix" / "knowledge.json").unlink()
    (tmp_path / "ix" / "manifest.json").unlink()
    with pytest.raises(SystemExit, match="manifest"):   # one line, exit 1 (tests/test_cli_errors.py)
        main(["ask", "x", "--index", str(tmp_path / "ix"), "--encoder", "hashing"])


def test_eval_demo(tmp_path, capsys):
    out_json = tmp_path / "m.json"
    assert main(["eval", "--dataset", "demo", "--passages", "600", "--n", "30", "--encoder", "hashing",
                 "--no-progress", "--json", str(out_json)]) == 0
    out = capsys.readouterr().out
    for col in ("acc", "f1", "em", "R@2", "R@5", "2hop", "3hop"):
        assert col in out
    m = json.loads(out_json.read_text())
    assert m["n"] == 30 and 0.0 <= m["metrics"]["acc"] <= 1.0 and m["metrics"]["R@5"] > 0.5


def test_profile(tmp_path, capsys):
    out = tmp_path / "prof"
    assert main(["profile", "--dataset", "demo", "--passages", "400", "--n", "12", "--batch", "6",
                 "--encoder", "hashing", "--no-progress", "--out", str(out)]) == 0
    text = capsys.readouterr().out
    assert "rasfast overhead" in text and "p95 ms" in text
    assert json.loads((out / "profile_demo.json").read_text())["traceEvents"]
    assert (out / "profile_demo.png").read_bytes()[:4] == b"\x89PNG"


def test_bench_select(capsys):
    assert main(["bench", "select", "--batch", "2", "--n", "2000"]) == 0
    assert "rasfast cpu" in capsys.readouterr().out


def test_bad_command():
    with pytest.raises(SystemExit):
        main(["nope"])


@pytest.mark.data
@pytest.mark.parametrize("name", ["musique", "hotpotqa"])
def test_eval_shared_data(data_dir, name, capsys, tmp_path):
    out_json = tmp_path / "m.json"
    assert main(["eval", "--dataset", name, "--encoder", "hashing", "--n", "10", "--data-root",
                 str(data_dir), "--no-progress", "--json", str(out_json)]) == 0
    assert f"{name}: 10 questions" in capsys.readouterr().out
    m = json.loads(out_json.read_text())["metrics"]
    assert m["errors"] == 0 and 0 < m["R@5"] <= 1      # the loop retrieves some gold passages


def test_ask_with_llm_extractor_over_http(tmp_path, capsys):
    """--llm-extract: passages without triples go to the LLM (a scripted OpenAI-compatible
    server process) once each; the loop parses its triples and answers from them."""
    from fake_openai_server import FakeServer
    corpus = tmp_path / "c.jsonl"
    corpus.write_text("\n".join(json.dumps({"title": t, "text": x}) for t, x in [
        ("Alda Morven", "Alda Morven grew up near the sea."), ("Tarsk", "Tarsk is a port.")]))
    assert main(["index", "build", "--corpus", str(corpus), "--out", str(tmp_path / "ix"),
                 "--encoder", "hashing", "--num-themes", "1"]) == 0
    s = FakeServer()
    try:
        s.script([{"last_contains": ["Alda Morven grew up"], "reply": "(S> Alda Morven| P> born in| O> Tarsk)"},
                  {"last_contains": ["Tarsk is a port"], "reply": "(S> Tarsk| P> country| O> Velland"},
                  {"contains": ["Next step:"], "reply": "[SUFFICIENT]"},
                  {"contains": ["the entity or value the question asks for"], "reply": "Velland"}], default="[SUFFICIENT]")
        assert main(["ask", "In which country was Alda Morven born?", "--index", str(tmp_path / "ix"),
                     "--encoder", "hashing", "--k", "2", "--llm", "openai", "--base-url", s.url,
                     "--model", "m", "--llm-extract", "--json"]) == 0
        out = capsys.readouterr().out
        res = json.loads(out[out.index("[\n"):])[0]
        assert res["error"] is None and res["answer"] == "Velland"
        assert sorted(map(tuple, res["triples"][0])) == [("Alda Morven", "born in", "Tarsk"),
                                                         ("Tarsk", "country", "Velland")]
        extract_calls = [b for b in s.stats()["log"] if "grew up" in json.dumps(b) or "is a port" in json.dumps(b)]
        assert len(extract_calls) == 2          # each passage converted once
    finally:
        s.close()
    with pytest.raises(SystemExit, match="llm-extract"):
        main(["ask", "x", "--index", str(tmp_path / "ix"), "--encoder", "hashing", "--llm-extract"])


def test_ask_json_writes_only_json_to_stdout(tmp_path, capsys):
    """`rasfast ask --json | jq` must parse: the human-readable trace goes to stderr."""
    _build_entity_index(tmp_path)
    capsys.readouterr()
    for extra in (["--index", str(tmp_path / "ix"), "--system", "gear-naive", "--scope-k", "6"],
                  ["--dataset", "demo", "--passages", "300"],
                  ["--system", "structrag", "--passages", "300"]):
        assert main(["ask", "Where is Entity4 located?", "--encoder", "hashing", "--k", "3",
                     "--json", *extra]) == 0
        out, err = capsys.readouterr()
        res = json.loads(out)            # the whole of stdout is the JSON
        assert res[0]["question"] == "Where is Entity4 located?" and "answer" in res[0]
        assert "Q: Where is Entity4 located?" in err or "Where is Entity4" in err


def test_bad_usage_and_failures_are_one_line_and_exit_1(tmp_path, capsys):
    with pytest.raises(SystemExit) as e:          # argparse: bad usage, one line (issue 31)
        main(["index", "build", "--no-such-option"])
    assert e.value.code == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "rasfast index build: error:" in err
    bad = tmp_path / "c.jsonl"
    bad.write_text('{"title": "a", "text": "x"}\nnot json\n')
    assert main(["index", "build", "--corpus", str(bad), "--out", str(tmp_path / "ix"),
                 "--encoder", "hashing", "--no-progress"]) == 1   # a failure, said on stderr
    assert "index build failed" in capsys.readouterr().err
