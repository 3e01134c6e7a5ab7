"""TripleGraph (C++ build) against the pure-Python builder, plus CSR invariants and bad input."""
import math
import random
import time

import numpy as np
import pytest
from hypothesis import given, strategies as st

from rasfast.graph import TripleGraph, synthetic_triples
from rasfast.reference.triple_graph import build_triple_graph, normalize_entity

# surface forms that normalise together, and ones that must stay apart
ENTITY_POOL = [
    "Paris", "paris", " PARIS ", "Paris.", "(Paris)", '"Paris"', "Paris,\t", "paris!!",
    "New  York", "new york", "New\nYork City", "new-york", "C++", "c#", "$100", "100%", "100",
    "...", "!!", " - ", "Foo, Inc.", "foo, inc", "a\x1cb", "x_y", "{x}", "A&B", "U.S.",
    "Göttingen", "GÖTTINGEN", "göttingen.", "Straße", "STRASSE", "strasse", "İstanbul",
    "istanbul", "«Zürich»", "Zürich", "\u00a0Zürich\u3000", "East–West", "east–west —",
    "Ǆemal", "ǆemal", "日本", "日本。", "\ud800lone", "\ud800LONE", "x\u2028y", "ﬁsh", "FISH",
]
PREDICATES = ["is", "in", "born in", "Is", " part of "]


def random_triples(rng, n, pool=ENTITY_POOL, malformed=0.15):
    out = []
    for _ in range(n):
        r = rng.random()
        if r < malformed:
            out.append(rng.choice([
                None, float("nan"), ("a", "b"), ["a", "b", "c", "d"], ("a", "", "c"),
                ("a", "b", "   "), ("a", None, "c"), ("a", "b", math.nan), (1, "b", "c"),
                "abc", {"s": 1}, (), ("\u3000", "b", "c")]))
            continue
        t = (rng.choice(pool), rng.choice(PREDICATES), rng.choice(pool))
        out.append(list(t) if rng.random() < 0.5 else t)
    return out


def check_csr(g: TripleGraph):
    n = g.num_triples
    assert g.indptr.dtype == np.int64 and g.indices.dtype == np.int64
    assert g.indptr.shape == (n + 1,) and g.indptr[0] == 0 and g.indptr[-1] == g.indices.shape[0]
    assert np.all(np.diff(g.indptr) >= 0)
    pairs = set()
    for i in range(n):
        row = g.indices[g.indptr[i]:g.indptr[i + 1]]
        assert np.all(np.diff(row) > 0), "rows sorted and unique"
        assert i not in row, "no self loops"
        assert row.size == 0 or (row.min() >= 0 and row.max() < n)
        pairs.update((i, int(j)) for j in row)
    assert all((j, i) in pairs for i, j in pairs), "symmetric"


def check_same(g: TripleGraph, triples, normalize=True, max_degree=None):
    ref = build_triple_graph(triples, normalize=normalize, max_degree=max_degree)
    assert g.source_index.tolist() == ref["kept"]
    assert g.n_skipped == ref["n_skipped"]
    assert g.entities == ref["entities"]
    assert g.head.tolist() == ref["head"] and g.tail.tolist() == ref["tail"]
    assert g.entity_degree.tolist() == ref["entity_degree"]
    assert [g.neighbors(i).tolist() for i in range(g.num_triples)] == ref["neighbors"]
    check_csr(g)


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("normalize", [True, False])
def test_matches_python_builder(seed, normalize):
    rng = random.Random(seed)
    triples = random_triples(rng, rng.choice([1, 7, 60, 400]))
    g = TripleGraph.from_triples(triples, normalize=normalize)
    check_same(g, triples, normalize=normalize)


@given(st.lists(st.tuples(st.text(max_size=6), st.sampled_from(["p", "q"]), st.text(max_size=6)),
                max_size=40))
def test_matches_python_builder_on_arbitrary_text(triples):
    g = TripleGraph.from_triples(triples)
    check_same(g, triples)


@pytest.mark.parametrize("max_degree", [0, 1, 2, 5, 40])
def test_hub_guard_matches_python_builder(max_degree):
    rng = random.Random(max_degree)
    hubs = ["United States", "Germany"]
    pool = hubs * 20 + [f"entity {i}" for i in range(30)]
    triples = random_triples(rng, 300, pool=pool, malformed=0.05)
    g = TripleGraph.from_triples(triples, max_degree=max_degree)
    check_same(g, triples, max_degree=max_degree)
    assert g.n_hubs == int((g.entity_degree > max_degree).sum())


def test_hub_guard_semantics_by_hand():
    # triples 0,1,2 share "hub"; 2 and 3 also share "x"
    triples = [("hub", "p", "a"), ("b", "p", "Hub"), ("hub", "p", "x"), ("x", "p", "c")]
    full = TripleGraph.from_triples(triples)
    assert [full.neighbors(i).tolist() for i in range(4)] == [[1, 2], [0, 2], [0, 1, 3], [2]]
    guarded = TripleGraph.from_triples(triples, max_degree=2)   # hub has degree 3 > 2
    assert [guarded.neighbors(i).tolist() for i in range(4)] == [[], [], [3], [2]]
    assert guarded.head.tolist() == full.head.tolist()           # ids are kept
    assert TripleGraph.from_triples(triples, max_degree=3).indices.tolist() == full.indices.tolist()


@pytest.mark.parametrize("raw, expected", [
    ("  New \t York  ", "new york"), ("(Paris).", "paris"), ('"U.S."', "u.s"),
    ("Foo, Inc.", "foo, inc"), ("...", "..."), (" - ", "-"), ("C++", "c++"), ("$100", "$100"),
    ("100%", "100"), ("«Zürich»", "zürich"), ("\u00a0Zürich\u3000", "zürich"), ("Straße", "strasse"),
    ("East–West —", "east–west"), ("日本。", "日本"), ("a\x1cb", "a b"), ("ǅemal", "ǆemal"),
])
def test_normalisation_cases(raw, expected):
    assert normalize_entity(raw) == expected
    g = TripleGraph.from_triples([(raw, "p", "zz")])
    assert g.entities[0] == expected


def test_every_ascii_character_normalises_like_python():
    # exercises the C++ ASCII tables (white space, punctuation, case) char by char
    forms = []
    for c in map(chr, range(1, 128)):
        forms += [f"{c}Ab{c}", f"a{c}{c}B", f"{c}", f"{c} x {c}{c}"]
    triples = [(f, "p", "anchor") for f in forms]
    g = TripleGraph.from_triples(triples)
    check_same(g, triples)


def test_unicode_entities_merge_and_round_trip():
    triples = [("Göttingen", "in", "Straße"), ("GÖTTINGEN.", "has", "STRASSE"),
               ("\ud800lone", "x", "日本"), ("\ud800LONE", "y", "日本。")]
    g = TripleGraph.from_triples(triples)
    assert g.entities == ["göttingen", "straße".casefold(), "\ud800lone", "日本"]
    assert g.neighbors(0).tolist() == [1] and g.neighbors(2).tolist() == [3]
    raw = TripleGraph.from_triples(triples, normalize=False)
    assert raw.num_entities == 8 and raw.num_edges == 0


def test_malformed_triples_are_counted_and_mapped():
    triples = [("a", "p", "b"), None, float("nan"), ("a", "p"), ("a", "p", "b", "c"), ("", "p", "b"),
               ("a", "  ", "b"), ("a", 3, "b"), "a p b", ["b", "q", "c"]]
    g = TripleGraph.from_triples(triples, passage_ids=list(range(10)))
    assert g.n_skipped == 8 and g.num_triples == 2
    assert g.source_index.tolist() == [0, 9]
    assert g.passage_ids.tolist() == [0, 9]
    assert g.texts == ["a p b", "b q c"]
    assert g.triples == [("a", "p", "b"), ("b", "q", "c")]


@pytest.mark.parametrize("triples", [[], [None, ("a", "b")], (t for t in [])])
def test_empty_graph(triples):
    g = TripleGraph.from_triples(triples)
    assert g.num_triples == 0 and g.num_entities == 0
    assert g.indptr.tolist() == [0] and g.indices.shape == (0,)
    assert g.degree_stats()["degree_max"] == 0
    assert g.triples_of_passages([0, 1]).shape == (0,)


def test_self_relation_and_duplicate_triples():
    triples = [("a", "is", "A"), ("a", "is", "a"), ("b", "p", "c"), ("b", "p", "c")]
    g = TripleGraph.from_triples(triples)
    check_same(g, triples)
    assert g.entity_degree.tolist() == [2, 2, 2]
    assert g.neighbors(0).tolist() == [1] and g.neighbors(2).tolist() == [3]


def test_inputs_of_other_kinds():
    arr = np.array([["a", "p", "b"], ["b", "q", "c"]])
    assert TripleGraph.from_triples(arr).neighbors(0).tolist() == [1]
    gen = (t for t in [("a", "p", "b"), ("b", "q", "c")])
    g = TripleGraph.from_triples(gen, passage_ids=np.array([4, 2], dtype=np.int32))
    assert g.passage_ids.dtype == np.int64 and g.passage_ids.tolist() == [4, 2]
    assert TripleGraph.from_triples([("a", "p", "b")]).passage_ids.tolist() == [-1]


def test_passage_lookup():
    triples = [("a", "p", "b"), ("c", "p", "d"), ("e", "p", "f"), None, ("g", "p", "h")]
    g = TripleGraph.from_triples(triples, passage_ids=[2, 0, 2, 1, 1])
    assert g.triples_of_passages([2]).tolist() == [0, 2]
    assert g.triples_of_passages([1, 2, 0, 7]).tolist() == [3, 0, 2, 1]
    assert g.triples_of_passages([1]).tolist() == [3]   # the malformed triple is gone


def test_bad_arguments():
    with pytest.raises(TypeError, match="triples"):
        TripleGraph.from_triples("a b c")
    with pytest.raises(TypeError, match="triples"):
        TripleGraph.from_triples(None)
    with pytest.raises(ValueError, match="passage_ids"):
        TripleGraph.from_triples([("a", "p", "b")], passage_ids=[0, 1])
    with pytest.raises(ValueError, match="passage_ids"):
        TripleGraph.from_triples([("a", "p", "b")], passage_ids=[-2])
    with pytest.raises(TypeError, match="passage_ids"):
        TripleGraph.from_triples([("a", "p", "b")], passage_ids=[0.5])
    with pytest.raises(TypeError, match="passage_ids"):
        TripleGraph.from_triples([("a", "p", "b")], passage_ids=[[0]])
    with pytest.raises(ValueError, match="max_degree"):
        TripleGraph.from_triples([("a", "p", "b")], max_degree=-1)
    with pytest.raises(TypeError, match="max_degree"):
        TripleGraph.from_triples([("a", "p", "b")], max_degree=2.0)
    with pytest.raises(ValueError, match="max_edges"):
        TripleGraph.from_triples([("hub", "p", f"e{i}") for i in range(100)], max_edges=9000)
    assert TripleGraph.from_triples([("hub", "p", f"e{i}") for i in range(100)],
                                    max_edges=9900).num_edges == 9900
    with pytest.raises(ValueError, match="max_edges"):
        TripleGraph.from_triples([("a", "p", "b")], max_edges=-5)
    with pytest.raises(TypeError, match="normalize"):
        TripleGraph.from_triples([("a", "p", "b")], normalize="yes")
    g = TripleGraph.from_triples([("a", "p", "b")])
    with pytest.raises(ValueError, match="i"):
        g.neighbors(1)
    with pytest.raises(ValueError, match="dataset"):
        TripleGraph.from_dataset(type("D", (), {"triples": None, "name": "hotpotqa"})())


def test_build_time_1e5():
    triples = synthetic_triples(100_000, 60_000)
    TripleGraph.from_triples(triples[:1000])          # warm-up (module import)
    t0 = time.perf_counter()
    g = TripleGraph.from_triples(triples, max_degree=500)
    dt = time.perf_counter() - t0
    assert g.num_triples == 100_000 and g.num_edges > 0
    assert dt < 5.0, f"building 1e5 triples took {dt:.2f} s"
