"""Issue 23, part 3 (big indexes): a knowledge index opens without parsing its triples
(layout 4: binary, memory-mapped arrays; triple records and entity strings decoded on
access), a grown index opens without joining its parts, ``compact`` merges the parts into
one, and indexes written by the format-3 code still load, grow and compact."""
import json
import pathlib
import random
import shutil
import sys

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from rasfast.data.qa import Passage
from rasfast.encode import HashingEncoder
from rasfast.graph import TripleGraph
from rasfast.index.knowledge import KnowledgeIndex
from rasfast.index.knowledge import index as kx
from rasfast.index.knowledge.extract import corpus_record
from rasfast.ops.beam import triple_beam_search
from rasfast.systems.gear import graph_expand

from crash_util import drive

FIXTURES = pathlib.Path(__file__).resolve().parent / "fixtures"
ENC, EX = HashingEncoder(32), corpus_record("lazy")
ARRAYS = ("indptr", "indices", "head", "tail", "entity_degree", "passage_ids", "source_index")
POOL = [f"E{i}" for i in range(30)] + ["Ünïcode", "  spaced  out ", "Punct.", "e0"]


def _rows(rng, n):
    out = []
    for _ in range(n):
        ts = []
        for _ in range(rng.randrange(0, 5)):
            if rng.random() < 0.08:
                ts.append(rng.choice([["only", "two"], None, ["a", "b", "c", "d"], ["", "p", "x"]]))
            else:
                ts.append([rng.choice(POOL), rng.choice(["in", "near", "of"]), rng.choice(POOL)])
        out.append(ts)
    return out


def _passages(rows, start):
    return [Passage(start + i, f"T{start + i}", f"passage {start + i} " +
                    " ".join(str(t) for t in ts)) for i, ts in enumerate(rows)]


def _grow(d, chunks, max_degree=None, mmap_every=(True,)):
    """Builds chunk 0 and saves it into d, then per later chunk: load, add, save (one part
    per add). Returns the in-memory index that never touched the disk (the eager path)."""
    eager = KnowledgeIndex.build(_passages(chunks[0], 0), chunks[0], ENC, EX, num_themes=3,
                                 max_degree=max_degree)
    eager.save(d)
    n = len(chunks[0])
    for k, c in enumerate(chunks[1:]):
        ki = KnowledgeIndex.load(d, mmap=mmap_every[k % len(mmap_every)])
        ki.add(_passages(c, n), c, ENC, EX)
        ki.save(d)
        eager.add(_passages(c, n), c, ENC, EX)
        n += len(c)
    return eager


def _queries(ki, nq=3):
    rng = np.random.default_rng(0)
    return rng.standard_normal((nq, ki.dim)).astype(np.float32)


def _answers(ki):
    """Everything a query reads: theme-scoped search, graph expansion, beam search."""
    q = _queries(ki)
    theme = ki.theme
    ids, scores = theme.search(theme.query_ppd(q), q, 2, 5)
    ids = np.asarray(ids)
    out = [ids.tolist(), np.asarray(scores).tobytes()]
    if ki.graph.num_triples:
        row_pid = np.asarray(ki.theme.pids)
        base = [row_pid[r[r >= 0]] for r in ids]
        seeds = graph_expand(ki.graph, ki.triple_emb, q, base, top=4).seeds
        out.append([np.asarray(s).tolist() for s in seeds])
        r = triple_beam_search(ki.graph, ki.triple_emb, q, seeds, beam_width=4, max_len=3,
                               gamma=5.0, max_neighbors=20)
        out += [np.asarray(r.sequences).tolist(), np.asarray(r.scores).tobytes()]
        best = [int(x) for x in np.asarray(r.sequences).reshape(-1) if x >= 0]
        out.append([ki.graph.texts[i] for i in best])
        out.append([ki.graph.triples[i] for i in best])
    return out


def _same(a, b):
    for f in ARRAYS:
        x, y = np.asarray(getattr(a.graph, f)), np.asarray(getattr(b.graph, f))
        assert x.dtype == y.dtype == np.int64 and np.array_equal(x, y), f
    assert list(a.graph.entities) == list(b.graph.entities)
    assert a.graph.n_skipped == b.graph.n_skipped and a.graph.n_hubs == b.graph.n_hubs
    assert list(a.graph.triples) == list(b.graph.triples) and list(a.graph.texts) == list(b.graph.texts)
    assert np.asarray(a.triple_emb, dtype=np.float32).tobytes() == np.asarray(b.triple_emb, dtype=np.float32).tobytes()
    assert list(a.triples) == list(b.triples) and list(a.source_ids) == list(b.source_ids)
    assert a.pids == b.pids and a.triples_by_pid == b.triples_by_pid
    assert _answers(a) == _answers(b)


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 2 ** 31), sizes=st.lists(st.integers(1, 12), min_size=1, max_size=4),
       max_degree=st.sampled_from([None, 3]))
def test_lazy_load_equals_eager_and_compact_equals_one_part(tmp_path_factory, seed, sizes, max_degree):
    rng = random.Random(seed)
    chunks = [_rows(rng, 14)] + [_rows(rng, n) for n in sizes]
    d = tmp_path_factory.mktemp("ix")
    eager = _grow(d / "ix", chunks, max_degree, mmap_every=(True, False))
    m = json.loads((d / "ix" / "knowledge.json").read_text())
    assert m["version"] == 4 and len(m["parts"]) == len(chunks)
    for mmap in (True, False):
        kx.PARSED_RECORDS = 0
        lazy = KnowledgeIndex.load(d / "ix", mmap=mmap)
        assert kx.PARSED_RECORDS == 0          # opening decoded no triples record
        if len(chunks) > 1:                    # several parts: nothing joined at open
            assert {"indptr", "indices", "head", "embeddings"} <= set(lazy.graph._thunks)
        _same(lazy, eager)
    # one generation: compact merges the parts, equal bit for bit to a save elsewhere and
    # to a fresh build of everything
    KnowledgeIndex.load(d / "ix").save(d / "copy")
    KnowledgeIndex.compact(d / "ix")
    m = json.loads((d / "ix" / "knowledge.json").read_text())
    assert len(m["parts"]) == 1 and m["parts"][0]["csr"]["kind"] == "full"
    assert not [p for p in (d / "ix").iterdir() if p.name.startswith(("graph.", "triples."))
                and not p.name.startswith((m["parts"][0]["graph"], f"triples.{m['theme_generation']}."))]
    flat = [r for c in chunks for r in c]
    fresh = KnowledgeIndex.build(_passages(flat, 0), flat, ENC, EX, num_themes=3, max_degree=max_degree)
    for other in (KnowledgeIndex.load(d / "copy", mmap=True), KnowledgeIndex.load(d / "ix", mmap=True)):
        _same(other, eager)
        for f in ARRAYS:
            assert np.array_equal(np.asarray(getattr(other.graph, f)), np.asarray(getattr(fresh.graph, f))), f
        assert np.asarray(other.triple_emb).tobytes() == np.asarray(fresh.triple_emb).tobytes()
    # a compacted index grows again by parts
    ki = KnowledgeIndex.load(d / "ix", mmap=True)
    more = _rows(rng, 3)
    ki.add(_passages(more, len(flat)), more, ENC, EX)
    ki.save(d / "ix")
    eager.add(_passages(more, len(flat)), more, ENC, EX)
    _same(KnowledgeIndex.load(d / "ix", mmap=True), eager)


def test_open_reads_no_triples_and_no_entity_strings(tmp_path, monkeypatch):
    rng = random.Random(5)
    chunks = [_rows(rng, 40), _rows(rng, 6), _rows(rng, 6)]
    _grow(tmp_path / "ix", chunks)
    decoded = []
    real = kx._Strings._item
    monkeypatch.setattr(kx._Strings, "_item", lambda self, i: decoded.append(i) or real(self, i))
    kx.PARSED_RECORDS = 0
    ki = KnowledgeIndex.load(tmp_path / "ix", mmap=True)
    assert kx.PARSED_RECORDS == 0 and decoded == []
    assert isinstance(ki.graph._entity_ids, kx._EntityTable)
    # one triple's text decodes its passage's record only
    ki.graph.texts[7]
    assert kx.PARSED_RECORDS == 1
    # an add looks its entities up in the saved hash tables (no dict of every entity) and
    # decodes only the candidates it compares
    more = [[["E1", "in", "E2"], ["brand new", "of", "E3"]]]
    n_ent = ki.graph.num_entities
    ki.add(_passages(more, 52), more, ENC, EX)
    assert len(decoded) <= 4 and ki.graph.num_entities == n_ent + 1


def test_entity_hash_collisions_are_resolved(tmp_path, monkeypatch):
    """Every entity hashes alike: lookups fall back to comparing the strings, and the merged
    graph still equals a fresh build."""
    monkeypatch.setattr(kx, "_hash_strings", lambda strings: np.zeros(len(strings), dtype=np.uint64))
    rng = random.Random(9)
    chunks = [_rows(rng, 15), _rows(rng, 5), _rows(rng, 5)]
    eager = _grow(tmp_path / "ix", chunks)
    _same(KnowledgeIndex.load(tmp_path / "ix", mmap=True), eager)
    flat = [r for c in chunks for r in c]
    fresh = TripleGraph.from_triples([t for r in flat for t in r],
                                     np.repeat(np.arange(len(flat)), [len(r) for r in flat]))
    got = KnowledgeIndex.load(tmp_path / "ix").graph
    for f in ARRAYS:
        assert np.array_equal(np.asarray(getattr(got, f)), np.asarray(getattr(fresh, f))), f


def test_corrupt_mapped_files_are_named(tmp_path):
    rng = random.Random(2)
    _grow(tmp_path / "ix", [_rows(rng, 10), _rows(rng, 4)])
    m = json.loads((tmp_path / "ix" / "knowledge.json").read_text())
    part = m["parts"][-1]
    ends = tmp_path / "ix" / part["triples_ends"]
    keep = ends.read_bytes()
    ends.write_bytes(keep[:-8])
    with pytest.raises(ValueError, match="triples.*ends.npy"):
        KnowledgeIndex.load(tmp_path / "ix")
    ends.write_bytes(keep)
    tf = tmp_path / "ix" / part["triples"]
    data = tf.read_bytes()
    tf.write_bytes(data[:-5])
    with pytest.raises(ValueError, match="truncated"):
        KnowledgeIndex.load(tmp_path / "ix")
    # a record swapped for another row's: found when it is decoded, naming the file
    lines = data.splitlines(keepends=True)
    if len(lines) > 1:
        tf.write_bytes(lines[1] + lines[0] + b"".join(lines[2:]))
        # same total size; offsets now cut records elsewhere or mismatch the pids
        ki = KnowledgeIndex.load(tmp_path / "ix")
        with pytest.raises(ValueError, match=part["triples"]):
            list(ki.triples)
    tf.write_bytes(data)
    eb = tmp_path / "ix" / part["graph"] / "entities.bin"
    eb.write_bytes(eb.read_bytes() + b"x")
    with pytest.raises(ValueError, match="entities.bin"):
        KnowledgeIndex.load(tmp_path / "ix")


def test_format_3_fixture_loads_grows_and_compacts(tmp_path):
    """tests/fixtures/knowledge_v3: written by the format-3 code (two parts, entities.json,
    no ends files): loads as before, takes a layout-4 part, compacts to one layout-4 part."""
    sys.path.insert(0, str(FIXTURES))
    from make_knowledge_v3 import corpus_rows
    enc, ex = HashingEncoder(16), corpus_record("fixture")
    rows = corpus_rows(19)
    triples = [r["triples"] for r in rows]
    d = tmp_path / "ix"
    shutil.copytree(FIXTURES / "knowledge_v3", d)
    assert json.loads((d / "knowledge.json").read_text())["version"] == 3

    def fresh(n):
        flat = [t for ts in triples[:n] for t in ts]
        return TripleGraph.from_triples(flat, np.repeat(np.arange(n), [len(t) for t in triples[:n]]))

    def check(ki, n):
        g, f = ki.graph, fresh(n)
        for name in ARRAYS:
            assert np.array_equal(np.asarray(getattr(g, name)), np.asarray(getattr(f, name))), name
        assert list(g.entities) == list(f.entities) and list(g.texts) == list(f.texts)
        assert np.asarray(ki.triple_emb).tobytes() == enc.encode(list(f.texts)).astype(np.float32).tobytes()
        assert list(ki.triples) == triples[:n] and ki.pids == list(range(n))
        assert ki.theme.texts == [r["text"] for r in rows[:n]]

    for mmap in (False, True):
        check(KnowledgeIndex.load(d, mmap=mmap), 15)
    ki = KnowledgeIndex.load(d, mmap=True)
    ki.add([Passage(i, r["title"], r["text"]) for i, r in enumerate(rows[15:], 15)], triples[15:], enc, ex)
    ki.save(d)
    m = json.loads((d / "knowledge.json").read_text())
    assert m["version"] == 4 and [p.get("layout") for p in m["parts"]] == [None, None, 4]
    got = KnowledgeIndex.load(d, mmap=True)
    check(got, 19)
    before = _answers(got)
    KnowledgeIndex.compact(d)
    m = json.loads((d / "knowledge.json").read_text())
    assert [p.get("layout") for p in m["parts"]] == [4]
    assert not (d / "graph.1").exists() and not (d / "triples.1.jsonl").exists()
    got = KnowledgeIndex.load(d, mmap=True)
    check(got, 19)
    assert _answers(got) == before


RUN = """
import rasfast.index.knowledge.index as kindex
wrap(kindex, "_write_npy")

def run(d):
    kindex.KnowledgeIndex.compact(d)
"""


@pytest.mark.slow
def test_compact_killed_at_every_step_leaves_a_loadable_index(tmp_path):
    rng = random.Random(4)
    tpl = tmp_path / "template"
    eager = _grow(tpl, [_rows(rng, 12), _rows(rng, 4), _rows(rng, 3)])
    probe = tmp_path / "probe"
    shutil.copytree(tpl, probe)
    assert drive(RUN, [], [(0, probe)]) == {0: 0}
    assert len(json.loads((probe / "knowledge.json").read_text())["parts"]) == 1
    points = int((tmp_path / "points").read_text())
    assert points >= 10
    dirs = {k: tmp_path / f"k{k}" for k in range(1, points + 1)}
    for d in dirs.values():
        shutil.copytree(tpl, d)
    status = drive(RUN, [], list(dirs.items()))
    seen = set()
    for k, d in dirs.items():
        assert status[k] < 0, (k, status[k])
        nparts = len(json.loads((d / "knowledge.json").read_text())["parts"])
        seen.add(nparts)
        _same(KnowledgeIndex.load(d, mmap=True), eager)      # the parts, or the merged part
        KnowledgeIndex.compact(d)                              # running it again finishes it
        assert len(json.loads((d / "knowledge.json").read_text())["parts"]) == 1
        _same(KnowledgeIndex.load(d), eager)
        shutil.rmtree(d)
    assert seen == {1, 3}, seen


def test_lazy_graph_pickles_and_joins_once_across_threads(tmp_path):
    import pickle
    from concurrent.futures import ThreadPoolExecutor
    rng = random.Random(11)
    eager = _grow(tmp_path / "ix", [_rows(rng, 12), _rows(rng, 5), _rows(rng, 5)])
    ki = KnowledgeIndex.load(tmp_path / "ix", mmap=True)
    with ThreadPoolExecutor(4) as ex:
        got = list(ex.map(lambda _: id(ki.graph.indices), range(8)))
    assert len(set(got)) == 1                       # one joined array, shared
    g = pickle.loads(pickle.dumps(ki.graph))
    for f in ARRAYS:
        assert np.array_equal(np.asarray(getattr(g, f)), np.asarray(getattr(eager.graph, f))), f
    assert list(g.texts) == list(eager.graph.texts) and list(g.entities) == list(eager.graph.entities)
    assert np.array_equal(np.asarray(g.embeddings), np.asarray(eager.triple_emb))
    again = pickle.loads(pickle.dumps(list(ki.triples)))
    assert again == list(eager.triples)


def test_systems_run_from_a_lazy_index_decoding_only_what_they_read(tmp_path):
    from rasfast.systems import build_system
    rng = random.Random(13)
    eager = _grow(tmp_path / "ix", [_rows(rng, 60), _rows(rng, 10)])
    questions = ["Where is E1 near E2?", "What of E5?"]
    want = {name: [(r.answer, [p.pid for p in r.passages])
                   for r in build_system(name, eager, encoder=ENC, k=3).run_batch(questions)]
            for name in ("ras", "gear-naive")}
    for name in ("ras", "gear-naive"):
        kx.PARSED_RECORDS = 0
        ki = KnowledgeIndex.load(tmp_path / "ix", mmap=True)
        got = [(r.answer, [p.pid for p in r.passages])
               for r in build_system(name, ki, encoder=ENC, k=3).run_batch(questions)]
        assert got == want[name]
        assert 0 < kx.PARSED_RECORDS < 70, kx.PARSED_RECORDS   # not every passage's record
    tbp = KnowledgeIndex.load(tmp_path / "ix").triples_by_pid
    assert dict(tbp) == eager.triples_by_pid and 5 in tbp and 10_000 not in tbp and len(tbp) == 70
    with pytest.raises(KeyError):
        tbp[10_000]
