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
    assert manifest["passages"] == 3 and manifest["encoder"] == "hashing-384"
    assert main(["ask", "Where was Alda Morven born?", "--index", str(tmp_path / "ix"),
                 "--encoder", "hashing", "--k", "2", "--json"]) == 0
    out = capsys.readouterr().out
    res = json.loads(out[out.index("[\n"):])
    assert res[0]["question"] == "Where was Alda Morven born?" and res[0]["error"] is None
    assert res[0]["answer"] == "Tarsk"
    with pytest.raises(SystemExit, match="encoder"):   # index built with another encoder
        main(["ask", "x", "--index", str(tmp_path / "ix"), "--encoder", "minilm"])


def test_index_refuses_truncated(tmp_path):
    from rasfast.pipeline.corpus import load_flat_index, save_flat_index
    from rasfast.data.qa import Passage
    import numpy as np
    d = save_flat_index(tmp_path / "ix", [Passage(0, "a", "b"), Passage(1, "c", "d")],
                        np.ones((2, 4), np.float32), "e")
    assert load_flat_index(d)[1].shape == (2, 4)
    lines = (d / "passages.jsonl").read_text().splitlines()
    (d / "passages.jsonl").write_text(lines[0] + "\n")
    with pytest.raises(ValueError, match="truncated"):
        load_flat_index(d)
    np.save(d / "embeddings.npy", np.ones((1, 4), np.float32))
    with pytest.raises(ValueError, match="mismatched or truncated"):
        load_flat_index(d)
    with pytest.raises(FileNotFoundError, match="manifest"):
        load_flat_index(tmp_path)


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
