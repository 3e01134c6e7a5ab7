"""TripleGraph.merge (C++ triple_graph_merge) against the oracle, a from-scratch build of the
whole input; the knowledge index's appended parts against a fresh build; bad input."""
import json
import random

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import rasfast.dispatch as _bk
from rasfast.encode import HashingEncoder
from rasfast.graph import TripleGraph, synthetic_triples
from rasfast.index.knowledge import KnowledgeIndex
from rasfast.index.knowledge.extract import corpus_record
from rasfast.data.qa import Passage

from test_triple_graph import ENTITY_POOL, PREDICATES, check_csr, random_triples

FIELDS = ("indptr", "indices", "head", "tail", "entity_degree", "passage_ids", "source_index")


FIXTURES = __import__("pathlib").Path(__file__).resolve().parent / "fixtures"


def assert_same(a: TripleGraph, b: TripleGraph):
    for f in FIELDS:
        x, y = np.asarray(getattr(a, f)), np.asarray(getattr(b, f))
        assert x.dtype == np.int64 and y.dtype == np.int64, f
        assert np.array_equal(x, y), f
    assert list(a.entities) == list(b.entities)
    assert a.n_skipped == b.n_skipped and a.n_hubs == b.n_hubs
    assert a.triples == b.triples and a.texts == b.texts


def merged_chain(chunks, pid_chunks=None, **kw):
    """from_triples(chunk 0) merged with every later chunk, in order."""
    pid_chunks = pid_chunks or [None] * len(chunks)
    g = TripleGraph.from_triples(chunks[0], pid_chunks[0], **kw)
    for c, p in zip(chunks[1:], pid_chunks[1:]):
        g = g.merge(c, p)
    return g


def rebuilt(chunks, pid_chunks=None, **kw):
    flat = [t for c in chunks for t in c]
    pids = None if pid_chunks is None else np.concatenate([np.asarray(p, dtype=np.int64) for p in pid_chunks])
    return TripleGraph.from_triples(flat, pids, **kw)


# ---------------------------------------------------------------------------- merged == rebuilt
@settings(max_examples=100, deadline=None)
@given(seed=st.integers(0, 2 ** 32 - 1), n=st.integers(0, 120), cuts=st.lists(st.floats(0, 1), max_size=3),
       max_degree=st.sampled_from([None, 0, 1, 2, 4, 8, 30]), normalize=st.booleans(),
       pool_size=st.integers(2, len(ENTITY_POOL)))
def test_merge_equals_rebuild_random(seed, n, cuts, max_degree, normalize, pool_size):
    rng = random.Random(seed)
    pool = rng.sample(ENTITY_POOL, pool_size)       # small pools make hubs, big ones new entities
    triples = random_triples(rng, n, pool=pool)
    bounds = sorted({0, n, *(int(c * n) for c in cuts)})
    chunks = [triples[a:b] for a, b in zip(bounds, bounds[1:])] or [[]]
    if rng.random() < 0.3:
        chunks.append([])                            # an empty add
    pids = [np.asarray([rng.randrange(50) for _ in c], dtype=np.int64) for c in chunks]
    got = merged_chain(chunks, pids, normalize=normalize, max_degree=max_degree)
    want = rebuilt(chunks, pids, normalize=normalize, max_degree=max_degree)
    assert_same(got, want)
    check_csr(got)


@pytest.mark.parametrize("max_degree", [None, 3, 50])
def test_merge_synthetic_zipf_many_adds(max_degree):
    t = synthetic_triples(3000, 400, zipf=1.1, offset=3, seed=5)
    chunks = [t[:2000], t[2000:2100], t[2100:2101], [], t[2101:2900], t[2900:]]
    assert_same(merged_chain(chunks, max_degree=max_degree), rebuilt(chunks, max_degree=max_degree))


def test_empty_adds_and_empty_base():
    t = [("a", "r", "b"), ("b", "r", "c")]
    for chunks in ([t, []], [[], t], [[], []], [t, [None, ("x", "y"), ("", "r", "q")]]):
        got = merged_chain(chunks)
        assert_same(got, rebuilt(chunks))
    g = TripleGraph.from_triples(t)
    assert g.merge([]) is not g and g.merge([]).num_triples == 2


def test_add_touching_only_new_entities_copies_old_rows():
    old = [(f"e{i}", "r", f"e{i + 1}") for i in range(50)]
    new = [(f"n{i}", "r", f"n{i % 3}") for i in range(20)]
    g = TripleGraph.from_triples(old)
    m = g.merge(new)
    assert_same(m, rebuilt([old, new]))
    assert np.array_equal(m.indptr[:51], g.indptr) and np.array_equal(m.indices[:g.num_edges], g.indices)
    assert m._delta_base[2].size == 0      # no old row changed


def test_add_hitting_a_hub():
    old = [("Hub", "r", f"x{i}") for i in range(200)] + [(f"x{i}", "r", f"y{i}") for i in range(200)]
    new = [(f"z{i}", "r", " hub. ") for i in range(30)] + [("HUB", "is", "hub")]
    for md in (None, 200, 215, 300):      # 215: the hub stops linking during the add
        assert_same(merged_chain([old, new], max_degree=md), rebuilt([old, new], max_degree=md))
    g = TripleGraph.from_triples(old, max_degree=215).merge(new)
    assert g._delta_base[4].tolist() == list(range(200))   # rows that lost neighbours: stored whole
    assert g.n_hubs == 1


def test_duplicates_and_case_whitespace_variants():
    old = [("Paris", "in", "France"), ("Paris", "in", "France"), ("paris ", "capital of", "FRANCE.")]
    new = [("  PARIS", "in", "france"), ("Paris", "in", "France"), ("Göttingen", "in", "germany"),
           ("GÖTTINGEN", "in", "Germany!"), ("Straße", "x", "STRASSE"), ("new\tyork", "in", "New  York")]
    for normalize in (True, False):
        got = merged_chain([old, new], normalize=normalize)
        assert_same(got, rebuilt([old, new], normalize=normalize))
    g = merged_chain([old, new])
    assert g.num_entities == len({"paris", "france", "göttingen", "germany", "strasse", "new york"})
    assert g.entities[:2] == ["paris", "france"]


def test_merge_leaves_the_old_graph_unchanged_and_can_branch():
    t = synthetic_triples(500, 80, seed=1, offset=2)
    g = TripleGraph.from_triples(t[:300])
    before = {f: np.asarray(getattr(g, f)).copy() for f in FIELDS}
    a = g.merge(t[300:400])
    b = g.merge(t[400:])                 # the entity table moved to `a`: rebuilt for `g`
    for f in FIELDS:
        assert np.array_equal(getattr(g, f), before[f])
    assert_same(a, rebuilt([t[:300], t[300:400]]))
    assert_same(b, rebuilt([t[:300], t[400:]]))
    assert_same(a.merge(t[400:]), rebuilt([t[:300], t[300:400], t[400:]]))


def test_merge_refuses_like_the_builder():
    old = [("h", "r", f"x{i}") for i in range(10)]
    new = [("h", "r", f"y{i}") for i in range(10)]
    g = TripleGraph.from_triples(old, max_edges=90)
    with pytest.raises(ValueError, match="max_degree: the triple adjacency would exceed max_edges"):
        g.merge(new, max_edges=90)
    with pytest.raises(ValueError, match="max_degree"):
        TripleGraph.from_triples(old + new, max_edges=90)
    assert g.merge(new, max_edges=380).num_edges == 380


# ---------------------------------------------------------------------------- bad input
def test_merge_bad_input_names_the_argument():
    g = TripleGraph.from_triples([("a", "r", "b")])
    with pytest.raises(TypeError, match="triples"):
        g.merge("abc")
    with pytest.raises(TypeError, match="triples"):
        g.merge(5)
    with pytest.raises(ValueError, match="passage_ids"):
        g.merge([("a", "r", "c")], [1, 2])
    with pytest.raises(ValueError, match="passage_ids"):
        g.merge([("a", "r", "c")], [-3])
    with pytest.raises(TypeError, match="passage_ids"):
        g.merge([("a", "r", "c")], ["x"])
    with pytest.raises(ValueError, match="max_edges"):
        g.merge([("a", "r", "c")], max_edges=-1)
    with pytest.raises(TypeError, match="max_edges"):
        g.merge([("a", "r", "c")], max_edges=1.5)


def test_kernel_bad_buffers_raise_value_error():
    cpu = _bk.cpu_module()
    g = TripleGraph.from_triples([("a", "r", "b"), ("b", "r", "c")])
    i8 = lambda *v: np.asarray(v, dtype=np.int64)   # noqa: E731
    ok = dict(indptr=g.indptr, indices=g.indices, head=g.head, tail=g.tail,
              entity_degree=g.entity_degree, new_head=i8(0), new_tail=i8(3), n_entities=4,
              max_degree=-1, max_edges=100)
    r = cpu.triple_graph_merge(**ok)
    assert r["indptr"].tolist() == [0, 2, 3, 4] and r["indices"].tolist() == [1, 2, 0, 0]
    bad = [(dict(indptr=i8(0, 5, 2)), "indptr"), (dict(indptr=g.indptr.astype(np.int32)), "indptr"),
           (dict(head=i8(0, 9)), "head/tail"), (dict(tail=i8(0)), "tail"),
           (dict(new_head=i8(7)), "new_head"), (dict(new_tail=i8(-1)), "new_head/new_tail"),
           (dict(n_entities=1), "n_entities"), (dict(max_degree=-2), "max_degree"),
           (dict(indices=np.zeros((1, 2), np.int64)), "indices"), (dict(new_tail=i8(0, 1)), "new_tail")]
    for change, match in bad:
        with pytest.raises(ValueError, match=match):
            cpu.triple_graph_merge(**dict(ok, **change))
    with pytest.raises(ValueError, match="rows"):
        cpu.csr_concat_blocks(3, [(None, i8(0, 1), i8(2)), (i8(5), i8(0, 1), i8(0))])
    with pytest.raises(ValueError, match="ptr"):
        cpu.csr_concat_blocks(3, [(None, i8(0, 2), i8(2))])
    with pytest.raises(ValueError, match="n_rows"):
        cpu.csr_concat_blocks(-1, [])
    ptr, ind = cpu.csr_concat_blocks(3, [(None, i8(0, 1, 1), i8(9)), (i8(0, 2), i8(0, 1, 3), i8(4, 5, 6))])
    assert ptr.tolist() == [0, 2, 2, 4] and ind.tolist() == [9, 4, 5, 6]
    ptr, ind = cpu.csr_concat_blocks(2, [(None, i8(0, 2, 3), i8(7, 8, 9)),
                                         (i8(0, 1), i8(0, 1, 3), i8(5, 1, 2), i8(1))])
    assert ptr.tolist() == [0, 3, 5] and ind.tolist() == [7, 8, 5, 1, 2]   # row 1 replaced
    with pytest.raises(ValueError, match="replace"):
        cpu.csr_concat_blocks(3, [(None, i8(0, 1, 1), i8(9)), (i8(0,), i8(0, 1), i8(4), i8(2))])


# ---------------------------------------------------------------------------- knowledge index
ENC = HashingEncoder(64)
EX = corpus_record("t")


def _passages(triples_per_passage, start):
    return [Passage(start + i, f"T{start + i}", " ; ".join(" ".join(t) for t in ts if isinstance(t, (list, tuple)) and all(isinstance(x, str) for x in t)) or "empty")
            for i, ts in enumerate(triples_per_passage)]


def _fresh(rows, max_degree):
    flat = [t for ts in rows for t in ts]
    pids = np.repeat(np.arange(len(rows)), [len(t) for t in rows])
    return TripleGraph.from_triples(flat, pids, max_degree=max_degree)


def _triple_rows(rng, n, pool):
    return [random_triples(rng, rng.randrange(0, 5), pool=pool, malformed=0.1) for _ in range(n)]


@pytest.mark.parametrize("max_degree", [None, 6])
@pytest.mark.parametrize("seed", range(4))
def test_knowledge_add_save_load_equals_fresh_build(tmp_path, seed, max_degree):
    rng = random.Random(seed)
    pool = rng.sample(ENTITY_POOL, 12)
    first, adds = _triple_rows(rng, 10, pool), [_triple_rows(rng, rng.randrange(1, 6), pool) for _ in range(3)]
    d = tmp_path / "ix"
    ki = KnowledgeIndex.build(_passages(first, 0), first, ENC, EX, num_themes=2, max_degree=max_degree)
    ki.save(d)
    rows = list(first)
    for k, add in enumerate(adds):
        ki = KnowledgeIndex.load(d, mmap=k % 2 == 1)
        ki.add(_passages(add, len(rows)), add, ENC, EX)
        if k == 1:                              # two adds between saves
            more = _triple_rows(rng, 2, pool)
            ki.add(_passages(more, len(rows) + len(add)), more, ENC, EX)
            add = add + more
        ki.save(d)
        rows += add
        for mmap in (False, True):
            got = KnowledgeIndex.load(d, mmap=mmap)
            fresh = _fresh(rows, max_degree)
            assert_same(got.graph, fresh)
            assert np.asarray(got.triple_emb).tobytes() == ENC.encode(fresh.texts).astype(np.float32).tobytes()
            assert json.dumps(list(got.triples)) == json.dumps(rows)   # (tuples come back as lists; a lazy sequence)
            assert got.pids == list(range(len(rows)))
    m = json.loads((d / "knowledge.json").read_text())
    assert len(m["parts"]) == 4 and m["parts"][0]["csr"]["kind"] == "full"
    # compact merges the parts into one; so does a save elsewhere
    KnowledgeIndex.compact(d)
    assert_same(KnowledgeIndex.load(d).graph, _fresh(rows, max_degree))
    KnowledgeIndex.load(d).save(tmp_path / "copy")
    m2 = json.loads((tmp_path / "copy" / "knowledge.json").read_text())
    assert len(m2["parts"]) == 1
    assert_same(KnowledgeIndex.load(tmp_path / "copy").graph, _fresh(rows, max_degree))


def test_knowledge_part_holds_only_the_new_rows(tmp_path):
    t = synthetic_triples(2000, 300, seed=3, offset=5)
    rows = [t[i:i + 4] for i in range(0, 2000, 4)]
    d = tmp_path / "ix"
    KnowledgeIndex.build(_passages(rows[:480], 0), rows[:480], ENC, EX, num_themes=2).save(d)
    ki = KnowledgeIndex.load(d)
    ki.add(_passages(rows[480:], 480), rows[480:], ENC, EX)
    ki.save(d)
    m = json.loads((d / "knowledge.json").read_text())
    new = m["parts"][-1]
    assert new["rows"] == [1920, 2000] and new["csr"]["kind"] == "delta"
    gd = d / new["graph"]
    assert np.load(gd / "head.npy").shape == (80,)
    assert np.load(d / new["triple_emb"]).shape == (80, 64)
    assert len((d / new["triples"]).read_text().splitlines()) == 20
    # the delta block: only changed rows, only what they gained, plus the new rows in full
    full = KnowledgeIndex.load(d).graph
    assert np.load(gd / "csr_indices.npy").shape[0] < full.num_edges
    assert np.load(gd / "csr_indices.npy").shape[0] == full.num_edges - m["parts"][0]["csr"]["nnz"]
    assert_same(full, _fresh(rows, None))


def test_knowledge_hub_removal_stores_those_rows_whole(tmp_path):
    first = [[("Hub", "r", f"x{i}"), (f"x{i}", "r", "Other")] for i in range(3)]
    more = [[("hub", "r", "y")], [("y", "r", "z")]]
    again = [[("other", "r", "z")], [("Other", "r", "w"), ("w", "r", "x0")]]
    d = tmp_path / "ix"
    KnowledgeIndex.build(_passages(first, 0), first, ENC, EX, num_themes=2, max_degree=3).save(d)
    ki = KnowledgeIndex.load(d)
    ki.add(_passages(more, 3), more, ENC, EX)          # "hub" reaches degree 4: stops linking
    ki.save(d)
    assert_same(KnowledgeIndex.load(d).graph, _fresh(first + more, 3))
    ki.add(_passages(again[:1], 5), again[:1], ENC, EX)   # two adds, one save; "other" stops linking
    ki.add(_passages(again[1:], 6), again[1:], ENC, EX)
    ki.save(d)
    m = json.loads((d / "knowledge.json").read_text())
    assert [p["csr"]["kind"] for p in m["parts"]] == ["full", "delta", "delta"]
    assert m["parts"][1]["csr"]["replace"] == 3 and m["parts"][2]["csr"]["replace"] == 3
    for mmap in (False, True):
        assert_same(KnowledgeIndex.load(d, mmap=mmap).graph, _fresh(first + more + again, 3))


def test_corrupt_delta_part_is_named(tmp_path):
    rows = [[("a", "r", f"b{i}")] for i in range(6)]
    d = tmp_path / "ix"
    KnowledgeIndex.build(_passages(rows[:4], 0), rows[:4], ENC, EX, num_themes=2).save(d)
    ki = KnowledgeIndex.load(d)
    ki.add(_passages(rows[4:], 4), rows[4:], ENC, EX)
    ki.save(d)
    part = json.loads((d / "knowledge.json").read_text())["parts"][-1]
    p = d / part["graph"] / "csr_rows.npy"
    np.save(p, np.load(p)[::-1].copy())
    with pytest.raises(ValueError, match="csr_rows.npy: .*not strictly increasing"):
        KnowledgeIndex.load(d)   # checked at open (O(changed rows)); the join waits for first use
    (d / part["graph"] / "csr_ptr.npy").unlink()
    with pytest.raises(ValueError, match="csr_ptr.npy: missing"):
        KnowledgeIndex.load(d)


def test_version_2_directory_loads_and_grows_by_a_part(tmp_path):
    # a one-part format-3 index written by the format-3 code (tests/fixtures/make_knowledge_v3.py)
    # relabelled as version 2: what rasfast wrote before parts existed
    import shutil
    import sys
    sys.path.insert(0, str(FIXTURES))
    from make_knowledge_v3 import corpus_rows
    enc, ex = HashingEncoder(16), corpus_record("fixture")
    rows = [r["triples"] for r in corpus_rows(15)]
    d = tmp_path / "ix"
    shutil.copytree(FIXTURES / "knowledge_v3_one", d)
    m = json.loads((d / "knowledge.json").read_text())
    del m["parts"]
    m["version"] = 2
    (d / "knowledge.json").write_text(json.dumps(m))
    assert_same(KnowledgeIndex.load(d).graph, _fresh(rows[:12], None))
    ki = KnowledgeIndex.load(d)
    ki.add(_passages(rows[12:], 12), rows[12:], enc, ex)
    ki.save(d)
    m = json.loads((d / "knowledge.json").read_text())
    assert m["version"] == 4 and [p["csr"]["kind"] for p in m["parts"]] == ["full", "delta"]
    assert m["parts"][0]["graph"] == "graph.1" and "layout" not in m["parts"][0]
    assert m["parts"][1]["layout"] == 4
    assert_same(KnowledgeIndex.load(d).graph, _fresh(rows, None))
    assert_same(KnowledgeIndex.load(d, mmap=True).graph, _fresh(rows, None))
