"""The knowledge index: build, save/load bit-for-bit equal to a fresh build, add, corpus
errors that never leave a loadable index, load errors naming the file."""
import json

import numpy as np
import pytest

from rasfast.data.qa import Passage
from rasfast.encode import HashingEncoder
from rasfast.graph import TripleGraph
from rasfast.index.knowledge import KnowledgeIndex, build_knowledge_index, read_corpus
from rasfast.index.knowledge.extract import corpus_record, extraction_record

ENC = HashingEncoder()


def _rows(n, start=0):
    rows = []
    for i in range(start, start + n):
        rows.append({"id": f"doc-{i}", "title": f"Person{i}",
                     "text": f"Person{i} was born in City{i % 5} and works for Firm{i % 3}.",
                     "triples": [[f"Person{i}", "born in", f"City{i % 5}"],
                                 [f"Person{i}", "works for", f"Firm{i % 3}."],   # normalised away
                                 [f"City{i % 5}", "in", float("nan")] if i % 4 == 0 else
                                 [f"Firm{i % 3}", "based in", f"City{(i + 1) % 5}"]]})
    return rows


def _write_jsonl(path, rows):
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    return path


GRAPH_FIELDS = ("indptr", "indices", "head", "tail", "passage_ids", "source_index", "entity_degree")


def _assert_graph_equal(a: TripleGraph, b: TripleGraph):
    for f in GRAPH_FIELDS:
        x, y = np.asarray(getattr(a, f)), np.asarray(getattr(b, f))
        assert x.dtype == y.dtype and np.array_equal(x, y), f
    assert list(a.entities) == list(b.entities)
    assert a.triples == b.triples and a.texts == b.texts
    assert a.n_skipped == b.n_skipped and a.n_hubs == b.n_hubs


def test_build_save_load_equals_fresh_build(tmp_path):
    corpus = _write_jsonl(tmp_path / "c.jsonl", _rows(20))
    rep = build_knowledge_index(corpus, tmp_path / "ix", ENC, num_themes=4, progress=False)
    ki = KnowledgeIndex.load(tmp_path / "ix")
    assert len(ki) == 20 and ki.extraction == corpus_record("c")
    assert ki.source_ids[3] == "doc-3" and ki.graph.n_skipped == 5   # the NaN triples
    # a fresh build straight from the corpus, nothing shared with the saved index
    raw = [r["triples"] for r in _rows(20)]
    flat = [t for ts in raw for t in ts]
    pids = np.repeat(np.arange(20), [len(t) for t in raw])
    fresh = TripleGraph.from_triples(flat, pids)
    _assert_graph_equal(ki.graph, fresh)
    fresh_emb = ENC.encode(fresh.texts)
    assert ki.triple_emb.dtype == np.float32 and ki.triple_emb.tobytes() == fresh_emb.astype(np.float32).tobytes()
    _assert_graph_equal(ki.graph, rep.index.graph)
    assert np.array_equal(np.asarray(ki.theme.emb), np.asarray(rep.index.theme.emb))
    assert ki.triples_by_pid[1] == [("Person1", "born in", "City1"), ("Person1", "works for", "Firm1."),
                                    ("Firm1", "based in", "City2")]
    # memory-mapped load reads the same bytes
    km = KnowledgeIndex.load(tmp_path / "ix", mmap=True)
    _assert_graph_equal(km.graph, fresh)
    assert np.array_equal(km.triple_emb, ki.triple_emb)


def test_add_equals_fresh_build_of_all_passages(tmp_path):
    rows = _rows(24)
    c1 = read_corpus(_write_jsonl(tmp_path / "a.jsonl", rows[:16]))
    call = read_corpus(_write_jsonl(tmp_path / "all.jsonl", rows))
    ex = corpus_record("x")
    ki = KnowledgeIndex.build(c1.passages, c1.triples, ENC, ex, c1.source_ids, num_themes=4)
    ki.save(tmp_path / "ix")
    ki = KnowledgeIndex.load(tmp_path / "ix")
    ki.add(call.passages[16:], call.triples[16:], ENC, ex, call.source_ids[16:])
    ki.save(tmp_path / "ix")
    got = KnowledgeIndex.load(tmp_path / "ix")
    full = KnowledgeIndex.build(call.passages, call.triples, ENC, ex, call.source_ids, num_themes=4)
    _assert_graph_equal(got.graph, full.graph)
    assert got.triple_emb.tobytes() == full.triple_emb.tobytes()
    assert got.pids == list(range(24)) and got.source_ids == full.source_ids
    assert np.array_equal(np.asarray(got.theme.emb), np.asarray(full.theme.emb))
    assert got.theme.ppd.shape == (24, got.theme.num_themes)
    # the new passages are searchable: their own text finds them first
    q = ENC.encode([call.passages[20].content])
    ids, _ = got.theme.dense_search(q, 1)
    assert got.pids[int(ids[0, 0])] == 20


def test_add_refuses_other_extraction_and_duplicates(tmp_path):
    c = read_corpus(_write_jsonl(tmp_path / "c.jsonl", _rows(6)))
    ki = KnowledgeIndex.build(c.passages[:4], c.triples[:4], ENC, extraction_record("model-a"), num_themes=2)
    with pytest.raises(ValueError, match="refusing to mix"):
        ki.add(c.passages[4:], c.triples[4:], ENC, extraction_record("model-b"))
    with pytest.raises(ValueError, match="refusing to mix"):
        ki.add(c.passages[4:], c.triples[4:], ENC, corpus_record("c"))
    with pytest.raises(ValueError, match="already in the index"):
        ki.add(c.passages[:1], c.triples[:1], ENC, extraction_record("model-a"))
    with pytest.raises(ValueError, match="encoder"):
        ki.add(c.passages[4:], c.triples[4:], HashingEncoder(dim=64), extraction_record("model-a"))


@pytest.mark.parametrize("content, match", [
    ('{"title": "a", "text": "x"}\n{"title": "b", "text": \n', r"line 2 is not JSON"),
    ('{"title": "a", "text": "x"}\n\n{"title": "b", "text": "   "}\n', r"line 3: passage has no text"),
    ('{"title": "a"}\n', r"line 1: passage has no text"),
    ('["a", "b"]\n', r"line 1: expected a JSON object"),
    ('{"title": "a", "text": "x", "triples": "s p o"}\n', r"line 1: 'triples' must be a list"),
    ("", r"no passages"),
    # the same id twice: which of the two a search returns would be undefined (issue 31)
    ('{"id": "a", "text": "x"}\n{"id": "b", "text": "y"}\n{"id": "a", "text": "z"}\n',
     r"line 3: id 'a' repeats line 1's; every passage's id must be unique"),
    ('{"pid": 7, "text": "x"}\n{"pid": 7, "text": "x"}\n', r"line 2: pid 7 repeats line 1's"),
    ('{"idx": 1, "text": "x"}\n{"idx": 1, "text": "y"}\n', r"line 2: idx 1 repeats line 1's"),
])
def test_bad_corpus_gives_clear_error_and_no_loadable_index(tmp_path, content, match):
    corpus = tmp_path / "c.jsonl"
    corpus.write_text(content)
    with pytest.raises(ValueError, match=match):
        build_knowledge_index(corpus, tmp_path / "ix", ENC, progress=False)
    with pytest.raises(ValueError, match="knowledge.json: missing"):
        KnowledgeIndex.load(tmp_path / "ix")


def test_a_json_corpus_with_a_repeated_id_names_both_records(tmp_path):
    corpus = tmp_path / "c.json"
    corpus.write_text('[{"id": 1, "text": "x"}, {"id": 2, "text": "y"}, {"id": 1, "text": "z"}]')
    with pytest.raises(ValueError, match=r"c.json: record 2: id 1 repeats record 0's"):
        build_knowledge_index(corpus, tmp_path / "ix", ENC, progress=False)
    assert not (tmp_path / "ix").exists()   # the corpus is read before anything is written


def test_passage_ids_must_be_unique_in_build_and_add():
    rows = [Passage(0, "a", "x"), Passage(1, "b", "y"), Passage(0, "c", "z")]
    with pytest.raises(ValueError, match=r"passages: pid 0 is used by passages 0 and 2"):
        KnowledgeIndex.build(rows, [[], [], []], ENC, corpus_record("c"), num_themes=1)
    ki = KnowledgeIndex.build(rows[:2], [[], []], ENC, corpus_record("c"), num_themes=1)
    with pytest.raises(ValueError, match=r"passages: pid 5 is used by passages 0 and 1"):
        ki.add([Passage(5, "d", "u"), Passage(5, "e", "v")], [[], []], ENC, corpus_record("c"))
    assert len(ki) == 2


def test_bad_corpus_leaves_an_existing_index_untouched_and_a_failed_rebuild_unloadable(tmp_path):
    good = _write_jsonl(tmp_path / "c.jsonl", _rows(5))
    build_knowledge_index(good, tmp_path / "ix", ENC, num_themes=2, progress=False)
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"title": "a", "text": "x"}\nnot json\n')
    with pytest.raises(ValueError, match="line 2 is not JSON"):   # read before anything is written
        build_knowledge_index(bad, tmp_path / "ix", ENC, progress=False)
    assert len(KnowledgeIndex.load(tmp_path / "ix")) == 5
    # a rebuild that fails after it started writing leaves no loadable (old or partial) index
    with pytest.raises(ValueError, match="needs an LLM"):
        build_knowledge_index(good, tmp_path / "ix", ENC, extract=True, progress=False)
    with pytest.raises(ValueError, match="knowledge.json: missing"):
        KnowledgeIndex.load(tmp_path / "ix")


def test_load_names_truncated_or_inconsistent_files(tmp_path):
    build_knowledge_index(_write_jsonl(tmp_path / "c.jsonl", _rows(8)), tmp_path / "ix", ENC,
                          num_themes=2, progress=False)
    files = json.loads((tmp_path / "ix" / "knowledge.json").read_text())["files"]
    emb = tmp_path / "ix" / files["triple_emb"]
    raw = emb.read_bytes()
    emb.write_bytes(raw[: len(raw) // 2])
    with pytest.raises(ValueError, match=r"triple_emb\.1\.npy"):
        KnowledgeIndex.load(tmp_path / "ix")
    emb.write_bytes(raw)
    tri = tmp_path / "ix" / files["triples"]
    lines = tri.read_text().splitlines(True)
    tri.write_text("".join(lines[:-1]))
    with pytest.raises(ValueError, match=r"triples\.1\.jsonl"):
        KnowledgeIndex.load(tmp_path / "ix")
    tri.write_text("".join(lines))
    (tmp_path / "ix" / files["graph"] / "indices.npy").unlink()
    with pytest.raises(ValueError, match="indices.npy: missing"):
        KnowledgeIndex.load(tmp_path / "ix")


def test_corpus_without_triples_indexes_passages_only(tmp_path):
    corpus = _write_jsonl(tmp_path / "c.jsonl", [{"title": "A", "text": "A is a town."},
                                                 {"title": "B", "contents": "B is a river."}])
    rep = build_knowledge_index(corpus, tmp_path / "ix", ENC, num_themes=1, progress=False)
    ki = KnowledgeIndex.load(rep.path)
    assert ki.extraction["source"] == "none" and ki.graph.num_triples == 0
    assert ki.triple_emb.shape == (0, ENC.dim) and ki.passages[1].text == "B is a river."


@pytest.mark.data
def test_musique_openie_file_is_a_corpus_with_triples(data_dir):
    f = data_dir / "musique" / "openie_musique_train_results_ner_gpt-3.5-turbo-1106_1890.json"
    c = read_corpus(f)
    assert len(c.passages) == 1890 and sum(len(t) for t in c.triples) == 17419
    corpus = json.loads((data_dir / "musique" / "musique_train_corpus.json").read_text())
    assert [(p.title, p.text) for p in c.passages[:50]] == [(r["title"], r["text"]) for r in corpus[:50]]
    g = TripleGraph.from_triples([t for ts in c.triples for t in ts])
    assert g.num_triples > 17000
