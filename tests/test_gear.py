"""GEAR graph expansion: RRF by hand, NaiveGE/SyncGE on a hand-made graph, batching, MuSiQue."""
import numpy as np
import pytest

from rasfast.systems.gear import (ExpansionResult, dense_rankings, evaluate_musique, graph_expand,
                          link_triples, recall_at_k, reciprocal_rank_fusion)
from rasfast.graph import TripleGraph, synthetic_triples


# ---------------------------------------------------------------------------- RRF

def test_rrf_by_hand():
    ids, scores = reciprocal_rank_fusion([[1, 2, 3], [3, 1, 4]])
    assert ids.tolist() == [1, 3, 2, 4]
    np.testing.assert_allclose(scores, [1 / 61 + 1 / 62, 1 / 63 + 1 / 61, 1 / 62, 1 / 63])
    assert ids.dtype == np.int64 and scores.dtype == np.float64


def test_rrf_ties_prefer_earlier_lists_then_rank():
    # 7 and 8 both score 1/61 + 1/62 ; 5 and 9 both 1/63
    ids, _ = reciprocal_rank_fusion([[7, 8, 5], [8, 7, 9]])
    assert ids.tolist() == [7, 8, 5, 9]
    ids, _ = reciprocal_rank_fusion([[8, 7, 9], [7, 8, 5]])
    assert ids.tolist() == [8, 7, 9, 5]


def test_rrf_three_lists_equal_rank_sets_tie_exactly():
    # every id has ranks {1, 2, 3}: identical floats (whatever the list order), ties by
    # first appearance
    ids, scores = reciprocal_rank_fusion([[0, 1, 2], [2, 0, 1], [1, 2, 0]], k=1)
    assert ids.tolist() == [0, 1, 2]
    assert scores[0] == scores[1] == scores[2]
    ids, _ = reciprocal_rank_fusion([[5, 6], [6, 5]])
    assert ids.tolist() == [5, 6]


def test_rrf_duplicates_empty_top_and_k():
    ids, scores = reciprocal_rank_fusion([[4, 4, 2], []], k=0)
    assert ids.tolist() == [4, 2] and scores.tolist() == [1.0, 1 / 3]
    ids, scores = reciprocal_rank_fusion([[], []])
    assert ids.shape == (0,) and scores.shape == (0,)
    ids, _ = reciprocal_rank_fusion([np.array([3, 1, 2]), np.array([2])], top=2)
    assert ids.tolist() == [2, 3]
    assert reciprocal_rank_fusion([])[0].shape == (0,)


def test_rrf_bad_input():
    with pytest.raises(TypeError, match="rankings"):
        reciprocal_rank_fusion("abc")
    with pytest.raises(TypeError, match=r"rankings\[1\]"):
        reciprocal_rank_fusion([[1], [0.5]])
    with pytest.raises(TypeError, match=r"rankings\[0\]"):
        reciprocal_rank_fusion([[[1, 2]]])
    with pytest.raises(ValueError, match="k"):
        reciprocal_rank_fusion([[1]], k=-1)
    with pytest.raises(ValueError, match="k"):
        reciprocal_rank_fusion([[1]], k=float("nan"))
    with pytest.raises(ValueError, match="top"):
        reciprocal_rank_fusion([[1]], top=-1)


# ---------------------------------------------------------------------------- a hand-made graph
#  t0 (A r B) p0 --B-- t2 (B r E) p1        q = e_x
#  t1 (C r D) p0 --D-- t3 (D r F) p2        t4 (G r H) p3 isolated
TRIPLES = [("A", "r", "B"), ("C", "r", "D"), ("B", "r", "E"), ("D", "r", "F"), ("G", "r", "H")]
EMB = np.array([[1.0, 0.0, 0.0],      # t0: cos 1
                [0.6, 0.8, 0.0],      # t1: cos 0.6
                [-1.0, 0.0, 0.1],     # t2: [t0, t2] sums to (0, 0, .1): cos 0
                [1.0, 0.0, 0.0],      # t3: [t1, t3] sums to (1.6, .8, 0): cos .894
                [0.0, 0.0, -1.0]], dtype=np.float32)
Q = np.array([[1.0, 0.0, 0.0]], dtype=np.float32)
# beams: [t1, t3] = 0.6 + 0.894 = 1.494 ; [t0, t2] = 1 + 0 = 1.0
# breadth first: t1, t0, t3, t2 -> passages 0, 0, 2, 1 -> [0, 2, 1]


@pytest.fixture(scope="module")
def tiny():
    return TripleGraph.from_triples(TRIPLES, passage_ids=[0, 0, 1, 2, 3])


def test_naive_ge_by_hand(tiny):
    res = graph_expand(tiny, EMB, Q, [[0, 3]], seed_passages=1)
    assert isinstance(res, ExpansionResult)
    assert sorted(res.seeds[0].tolist()) == [0, 1]
    assert res.expansion[0].tolist() == [0, 2, 1]
    # RRF([0, 3], [0, 2, 1]): 0 = 2/61; 3 and 2 tie at 1/62 -> base first; 1 = 1/63
    assert res.passages[0].tolist() == [0, 3, 2, 1]
    np.testing.assert_allclose(res.scores[0], [2 / 61, 1 / 62, 1 / 62, 1 / 63])
    beams = np.asarray(res.beams.sequences)[0]
    assert beams[:2].tolist() == [[1, 3], [0, 2]]
    np.testing.assert_allclose(np.asarray(res.beams.scores)[0, :2], [0.6 + 1.6 / np.sqrt(3.2), 1.0],
                               rtol=1e-5)
    import torch
    res_t = graph_expand(tiny, torch.from_numpy(EMB), torch.from_numpy(Q), [torch.tensor([0, 3])],
                         seed_passages=1)
    assert res_t.passages[0].tolist() == [0, 3, 2, 1] and isinstance(res_t.passages[0], np.ndarray)


def test_naive_ge_seeds_all_base_passages_by_default(tiny):
    res = graph_expand(tiny, EMB, Q, [[0, 3]])
    assert sorted(res.seeds[0].tolist()) == [0, 1, 4]
    # t4 cannot extend while the others can: Algorithm 1 keeps only extended beams
    assert res.expansion[0].tolist() == [0, 2, 1]
    assert res.passages[0].tolist() == [0, 3, 2, 1]


def test_sync_ge_links_proximal_triples(tiny):
    prox = [np.array([[0.55, 0.85, 0.0]], dtype=np.float32)]  # nearest corpus triple: t1
    res = graph_expand(tiny, EMB, Q, [[1]], mode="sync", proximal=prox)
    assert res.seeds[0].tolist() == [1]
    assert res.expansion[0].tolist() == [0, 2]
    assert res.passages[0].tolist() == [1, 0, 2]   # 1 and 0 tie at 1/61: base first
    # an isolated seed cannot extend: its one-triple beam is the result
    res = graph_expand(tiny, EMB, Q, [[0]], mode="sync", proximal=[EMB[4:5] * 2])
    assert res.expansion[0].tolist() == [3]


class TableEncoder:
    """Maps known strings to fixed vectors (a stand-in for an LLM-triple encoder)."""
    name, dim = "table", 3

    def __init__(self, table):
        self.table = table

    def encode(self, texts, batch_size=64):
        return np.stack([self.table[t] for t in texts]).astype(np.float32)


def test_sync_ge_with_text_proximal_triples(tiny):
    enc = TableEncoder({"c r d": EMB[1], "g r h": EMB[4]})
    res = graph_expand(tiny, EMB, np.repeat(Q, 2, 0), [[1], [2]], mode="sync",
                       proximal=[[("c", "r", "d")], ["g r h"]], encoder=enc)
    assert [s.tolist() for s in res.seeds] == [[1], [4]]
    assert [e.tolist() for e in res.expansion] == [[0, 2], [3]]


def test_text_scoring_matches_sum_scoring_for_an_additive_encoder(tiny):
    # an encoder that sums fixed word vectors and normalises: cosine(q, enc(" ".join(texts)))
    # equals cosine(q, sum of per-triple vectors) -> both scorings give the same passages
    words = {w: v for w, v in zip("ABCDEFGHr", np.eye(9, dtype=np.float32))}

    class Additive:
        name, dim = "additive", 9

        def encode(self, texts, batch_size=64):
            m = np.stack([sum(words[w] for w in t.split()) for t in texts]).astype(np.float32)
            return m / np.linalg.norm(m, axis=1, keepdims=True)

    enc = Additive()
    emb = np.stack([sum(words[w] for w in t.split()) for t in tiny.texts]).astype(np.float32)
    q = enc.encode(["B E D"])
    by_text = graph_expand(tiny, None, q, [[0]], scoring="text", encoder=enc)
    by_sum = graph_expand(tiny, emb, q, [[0]])
    assert by_text.expansion[0].tolist() == by_sum.expansion[0].tolist()
    assert by_text.passages[0].tolist() == by_sum.passages[0].tolist()


def test_link_triples_top_k_unique():
    emb = np.eye(4, dtype=np.float32)
    prox = np.array([[1, 0.5, 0, 0], [0.9, 0.1, 0, 0], [0, 0, 0, 1]], dtype=np.float32)
    assert link_triples(prox, emb, 1).tolist() == [0, 3]
    assert link_triples(prox, emb, 2).tolist() == [0, 1, 3]   # row 3: 3, then a 0-tie -> id 0
    assert link_triples(np.zeros((0, 4), np.float32), emb).shape == (0,)


def test_batch_equals_one_by_one():
    rng = np.random.default_rng(0)
    triples = synthetic_triples(600, 150, zipf=0.8, offset=10, seed=1)
    pids = rng.integers(0, 80, size=600)
    g = TripleGraph.from_triples(triples, passage_ids=pids)
    emb = rng.standard_normal((600, 16)).astype(np.float32)
    q = rng.standard_normal((7, 16)).astype(np.float32)
    base = [rng.permutation(80)[:m] for m in (1, 3, 5, 0, 8, 2, 4)]
    for mode, extra in (("naive", {}),
                        ("sync", {"proximal": [rng.standard_normal((m, 16)).astype(np.float32)
                                               for m in (2, 0, 3, 1, 4, 2, 1)]})):
        batched = graph_expand(g, emb, q, base, mode=mode, **extra)
        for i in range(7):
            one = graph_expand(g, emb, q[i:i + 1], [base[i]], mode=mode,
                               **({"proximal": [extra["proximal"][i]]} if extra else {}))
            assert batched.passages[i].tolist() == one.passages[0].tolist()
            assert batched.expansion[i].tolist() == one.expansion[0].tolist()
            np.testing.assert_array_equal(batched.scores[i], one.scores[0])
        assert batched.expansion[3].size == 0 or mode == "sync"   # query 3: no base passage


def test_graph_expand_bad_input(tiny):
    with pytest.raises(ValueError, match="mode"):
        graph_expand(tiny, EMB, Q, [[0]], mode="fancy")
    with pytest.raises(ValueError, match="proximal"):
        graph_expand(tiny, EMB, Q, [[0]], mode="sync")
    with pytest.raises(ValueError, match="proximal"):
        graph_expand(tiny, EMB, Q, [[0]], proximal=[EMB[:1]])
    with pytest.raises(ValueError, match="proximal"):
        graph_expand(tiny, EMB, Q, [[0]], mode="sync", proximal=[EMB[:1], EMB[:1]])
    with pytest.raises(TypeError, match="proximal"):
        graph_expand(tiny, EMB, Q, [[0]], mode="sync", proximal=[["a r b"]])
    with pytest.raises(ValueError, match="base_pids"):
        graph_expand(tiny, EMB, Q, [[0], [1]])
    with pytest.raises(TypeError, match="base_pids"):
        graph_expand(tiny, EMB, Q, "0")
    with pytest.raises(TypeError, match=r"base_pids\[0\]"):
        graph_expand(tiny, EMB, Q, [[0.5]])
    with pytest.raises(ValueError, match="triple_emb"):
        graph_expand(tiny, EMB[:3], Q, [[0]])
    with pytest.raises(ValueError, match="q_emb"):
        graph_expand(tiny, EMB, Q[0], [[0]])
    with pytest.raises(ValueError, match="triple_emb"):
        graph_expand(tiny, None, Q, [[0]])
    with pytest.raises(TypeError, match="graph"):
        graph_expand((tiny.indptr, tiny.indices), EMB, Q, [[0]])
    with pytest.raises(ValueError, match="seed_passages"):
        graph_expand(tiny, EMB, Q, [[0]], seed_passages=0)


# ---------------------------------------------------------------------------- evaluation helpers

def test_recall_and_dense_rankings_by_hand():
    assert recall_at_k([np.array([3, 1, 2])], [[1, 9]], 2) == 0.5
    assert recall_at_k([np.array([3, 1, 2]), np.array([9])], [[1, 9], [9]], 1) == 0.5
    assert recall_at_k([np.array([3])], [[]], 1) == 0.0
    q = np.array([[1.0, 0.0]], np.float32)
    p = np.array([[0.5, 0], [1, 0], [0.5, 0], [-1, 0]], np.float32)
    assert dense_rankings(q, p, 3).tolist() == [[1, 0, 2]]
    with pytest.raises(ValueError, match="k"):
        recall_at_k([np.array([1])], [[1]], 0)


# ---------------------------------------------------------------------------- real data

@pytest.mark.data
def test_musique_triple_graph_counts(data_dir):
    from rasfast.data import load_dataset
    ds = load_dataset("musique", data_dir)
    assert sum(len(t) for t in ds.triples) == 17_419
    g = TripleGraph.from_dataset(ds)
    assert g.num_triples == 17_234 and g.n_skipped == 185
    assert g.passage_ids.min() >= 0 and g.passage_ids.max() < len(ds.passages)
    assert len(np.unique(g.passage_ids)) == 1_888          # two passages have no triples
    assert TripleGraph.from_dataset(ds, normalize=False).num_entities == 16_337
    assert g.num_entities < 16_337                          # normalisation merges forms
    first = ds.triples[0][0]
    assert g.texts[0] == " ".join(first) and g.neighbors(0).size > 0


@pytest.mark.data
def test_evaluate_musique_runs_with_a_cheap_encoder(data_dir, tmp_path, monkeypatch):
    from rasfast.encode import HashingEncoder
    monkeypatch.setenv("RASFAST_CACHE", str(tmp_path))
    out = evaluate_musique(data_dir, ks=(5, 15), base_sizes=(5,), encoder=HashingEncoder(64))
    dense, naive = out["rows"]
    assert out["n_questions"] == 100 and naive["base_size"] == 5
    for row in out["rows"]:
        assert 0.0 <= row["recall@5"] <= row["recall@15"] <= 1.0
    assert naive["mean_expansion_passages"] > 0
