"""Every system runs from a saved knowledge index: the registry, ras and gear end to end,
kirag/structrag through their from_components factories (a clear error when the module is
absent), `rasfast ask --system`, `rasfast eval --index`, and the demo's kernel report."""
import importlib
import json
import sys
import types

import pytest

from rasfast.cli import main
from rasfast.data.demo import generate_world
from rasfast.encode import HashingEncoder
from rasfast.index.knowledge import KnowledgeIndex
from rasfast.index.knowledge.extract import corpus_record
from rasfast.systems.ras.metrics import golden_match
from rasfast.types import RetrievedPassage
from rasfast.systems import build_system, register_system, system_names

ENC = HashingEncoder()
N = 300


@pytest.fixture(autouse=True)
def _cache(tmp_path, monkeypatch):
    monkeypatch.setenv("RASFAST_CACHE", str(tmp_path / "cache"))


@pytest.fixture(scope="module")
def world():
    return generate_world(seed=0, n_passages=N, n_questions=300)


@pytest.fixture(scope="module")
def saved(world, tmp_path_factory):
    d = tmp_path_factory.mktemp("kix") / "ix"
    KnowledgeIndex.build(world.passages, world.triples, ENC, corpus_record("demo"), num_themes=8).save(d)
    return d


def _questions(world, n=6):
    return [q for q in world.questions if q.type.startswith("2hop")][:n]


@pytest.mark.parametrize("name, opts", [("ras", {}), ("ras", {"scope_k": 80, "expand": True}),
                                        ("gear-naive", {"scope_k": 120})])
def test_systems_run_from_the_saved_index(world, saved, name, opts):
    ki = KnowledgeIndex.load(saved)
    system = build_system(name, ki, encoder=ENC, k=5, **opts)
    qs = _questions(world)
    res = system.run_batch([q.question for q in qs])
    assert [r.question for r in res] == [q.question for q in qs]
    for q, r in zip(qs, res):
        assert r.error is None and r.passages and isinstance(r.passages[0], RetrievedPassage)
        assert r.trace is res[0].trace
    hit = sum(any(p.pid in q.gold_pids for p in r.passages) for q, r in zip(qs, res))
    assert hit >= len(qs) - 1                             # (nearly) every question finds a gold passage
    if name == "ras":                                     # multi-round: the baseline answers most
        assert sum(golden_match(r.answer or "", q.answers) for q, r in zip(qs, res)) >= len(qs) // 2
    names = {s.name for s in res[0].trace.spans}
    assert "dense" in names and ("expand" in names) == (name == "gear-naive" or opts.get("expand", False))
    if opts.get("scope_k"):
        assert "scope" in names


def test_gear_uses_the_loaded_graph_not_a_rebuilt_one(world, saved, monkeypatch):
    import rasfast.graph
    ki = KnowledgeIndex.load(saved)
    monkeypatch.setattr(rasfast.graph.TripleGraph, "from_triples",
                        classmethod(lambda *a, **k: pytest.fail("graph rebuilt at query time")))
    monkeypatch.setattr(rasfast.graph.TripleGraph, "embed", lambda *a, **k: pytest.fail("re-embedded"))
    r = build_system("gear-naive", ki, encoder=ENC).run_batch([_questions(world, 1)[0].question])[0]
    assert r.error is None and r.passages


class _FakeSystemModule:
    """What rasfast.systems.kirag / rasfast.systems.structrag expose: from_components(...)."""

    def __init__(self):
        self.got = None

    def from_components(self, retriever, triples_by_pid, encoder, llm=None, **opts):
        self.got = (retriever, triples_by_pid, encoder, llm, opts)
        from rasfast.systems import SystemResult

        class S:
            def run_batch(self, questions):
                hits = retriever.retrieve(list(questions), 3)
                return [SystemResult(q, None, h, None) for q, h in zip(questions, hits)]
        return S()


@pytest.mark.parametrize("name", ["kirag", "structrag"])
def test_component_systems_are_built_from_the_index(world, saved, name, monkeypatch):
    ki = KnowledgeIndex.load(saved)
    try:
        importlib.import_module(f"rasfast.systems.{name}")
        real = True
    except ImportError:
        real = False
    if real:   # merged in: it must run from the index
        res = build_system(name, ki, encoder=ENC).run_batch([_questions(world, 1)[0].question])
        assert res[0].passages and hasattr(res[0], "answer")
        return
    with pytest.raises(ValueError, match=f"rasfast.systems.{name} is not available"):
        build_system(name, ki, encoder=ENC)
    fake = _FakeSystemModule()
    monkeypatch.setitem(sys.modules, f"rasfast.systems.{name}", types.SimpleNamespace(from_components=fake.from_components))
    import rasfast.systems as systems
    monkeypatch.delitem(systems._FACTORIES, name, raising=False)
    res = build_system(name, ki, encoder=ENC, llm="llm-object", scope_k=50, budget=3, k=4).run_batch(["Who?"])
    retriever, tbp, enc, llm, opts = fake.got
    assert tbp == ki.triples_by_pid and enc is ENC and llm == "llm-object"
    assert opts == {"budget": 3, ("top_k" if name == "kirag" else "k"): 4}
    assert retriever.K == 50 and len(res[0].passages) == 3


def test_registry_errors_and_custom_systems(saved):
    ki = KnowledgeIndex.load(saved)
    assert {"ras", "gear-naive", "kirag", "structrag"} <= set(system_names())
    with pytest.raises(ValueError, match="system: expected one of"):
        build_system("nope", ki, encoder=ENC)
    with pytest.raises(ValueError, match="encoder: the index was built with 'hashing-384'"):
        build_system("ras", ki, encoder=HashingEncoder(dim=64))
    with pytest.raises(TypeError, match="factory"):
        register_system("x", 3)
    register_system("echo", lambda kindex, *, encoder, llm=None, **o: ("echo", len(kindex), o))
    assert build_system("echo", ki, encoder=ENC, a=1) == ("echo", N, {"a": 1})


def test_gear_on_an_index_without_triples_says_so(tmp_path):
    c = tmp_path / "c.jsonl"
    c.write_text('{"title": "A", "text": "A is a town."}\n{"title": "B", "text": "B is a river."}\n')
    assert main(["index", "build", "--corpus", str(c), "--out", str(tmp_path / "ix"), "--encoder",
                 "hashing", "--num-themes", "1", "--no-progress"]) == 0
    with pytest.raises(SystemExit, match="no triples"):
        main(["ask", "x", "--index", str(tmp_path / "ix"), "--encoder", "hashing", "--system", "gear-naive"])


def test_cli_ask_system_and_eval_index(world, tmp_path, capsys):
    corpus = tmp_path / "demo.jsonl"
    corpus.write_text("".join(json.dumps({"title": p.title, "text": p.text, "triples": t}) + "\n"
                              for p, t in zip(world.passages, world.triples)))
    assert main(["index", "build", "--corpus", str(corpus), "--out", str(tmp_path / "ix"),
                 "--encoder", "hashing", "--num-themes", "8", "--no-progress"]) == 0
    assert "with triples" in capsys.readouterr().out
    q = _questions(world, 1)[0]
    for system in ("ras", "gear-naive"):
        assert main(["ask", q.question, "--index", str(tmp_path / "ix"), "--encoder", "hashing",
                     "--system", system, "--scope-k", "100", "--json"]) == 0
        out, err = capsys.readouterr()
        res = json.loads(out)[0]       # --json: stdout is only the JSON, the trace on stderr
        assert res["question"] == q.question and set(q.gold_pids) & set(res["passages"])
        assert f"system: {system}" in err
    assert main(["eval", "--index", str(tmp_path / "ix"), "--dataset", "demo", "--passages", str(N),
                 "--system", "gear-naive", "--n", "8", "--encoder", "hashing", "--json", str(tmp_path / "m.json")]) == 0
    m = json.loads((tmp_path / "m.json").read_text())
    assert m["n"] == 8 and m["system"] == "gear-naive" and m["metrics"]["R@all"] > 0.4
    with pytest.raises(SystemExit, match="not the demo corpus"):
        main(["eval", "--index", str(tmp_path / "ix"), "--dataset", "demo", "--passages", "200",
              "--encoder", "hashing"])


def test_demo_shows_kernels_with_backends_and_speedups(tmp_path, capsys):
    trace = tmp_path / "t.json"
    assert main(["demo", "--passages", "400", "--questions", "4", "--trace", str(trace)]) == 0
    out = capsys.readouterr().out
    for stage, kernel in (("scope", "theme model"), ("dense", "theme_scoped_search [cpu]"),
                          ("expand", "triple_beam_search [cpu]"),
                          ("graph_encode", "graph_transformer_pool [cpu]")):
        line = next(x for x in out.splitlines() if x.startswith(stage + " "))
        assert kernel in line
    for kernel in ("theme_scoped_search", "triple_beam_search", "graph_transformer_pool"):
        line = next(x for x in out.splitlines() if x.strip().startswith(kernel))
        assert "torch reference" in line and line.split()[-1].endswith(")") and "x" in line
    events = json.loads(trace.read_text())["traceEvents"]
    kernels = {e["name"]: e["args"].get("kernel") for e in events if e.get("ph") == "X"}
    assert kernels["expand"] == "triple_beam_search [cpu]" and "graph_transformer_pool" in kernels["graph_encode"]


def test_kirag_reuses_the_index_triple_embeddings(world, saved):
    """Issue 21: KiRAG's zero-shot aligner is the index's encoder, so the index's triple
    embeddings are its triple embeddings: nothing is encoded again, same results."""
    ki = KnowledgeIndex.load(saved, mmap=True)

    class Recording:
        name, dim = ENC.name, ENC.dim

        def __init__(self):
            self.seen = []

        def encode(self, texts, batch_size=64):
            self.seen += list(texts)
            return ENC.encode(texts, batch_size)

    triple_texts = set(ki.graph.texts)
    qs = [q.question for q in _questions(world, 4)]
    enc = Recording()
    reuse = build_system("kirag", ki, encoder=enc, k=5)
    assert reuse.triple_emb.reused and reuse.triple_emb.table.shape[0] == ki.graph.num_triples
    got = reuse.run_batch(qs)
    assert enc.seen and not triple_texts & set(enc.seen)   # only queries were encoded
    enc2 = Recording()
    fresh = build_system("kirag", ki, encoder=enc2, k=5, triple_table=None)
    assert not fresh.triple_emb.reused
    want = fresh.run_batch(qs)
    assert triple_texts & set(enc2.seen)                    # without reuse: triples encoded
    assert [r.pids for r in got] == [r.pids for r in want]
    assert [r.chain for r in got] == [r.chain for r in want]
    # a trained (other) aligner gets no reuse
    other = build_system("kirag", ki, encoder=ENC, k=5, aligner=HashingEncoder(64))
    assert not other.triple_emb.reused
