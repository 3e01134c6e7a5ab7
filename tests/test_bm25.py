"""BM25 (rasfast.index.bm25, bm25s) against the plain-numpy Lucene oracle, saved with a
knowledge index, rebuilt when it grows; the BM25 and hybrid base retrievers."""
import json
import random

import numpy as np
import pytest

from rasfast.data.qa import Passage
from rasfast.encode import HashingEncoder
from rasfast.index.bm25 import BM25Index, tokenize
from rasfast.index.knowledge import KnowledgeIndex
from rasfast.reference.bm25 import bm25_scores
from rasfast.systems.registry import base_retriever

WORDS = ("river port city founder studio designer born castrell aun velora mira okonkwo grey sea fair "
         "elden spring game company museum bridge tower harbour north south").split()
REC = {"source": "test", "model": None, "prompt": None, "prompt_sha256": None}


def corpus(rng, n):
    return [" ".join(rng.choice(WORDS) for _ in range(rng.randint(0, 30))) for _ in range(n)]


@pytest.mark.parametrize("seed", range(5))
def test_scores_match_the_lucene_reference(seed):
    rng = random.Random(seed)
    texts = corpus(rng, rng.randint(1, 60))
    ix = BM25Index.build(texts, ids=[100 + i for i in range(len(texts))])
    toks = tokenize(texts)
    for _ in range(5):
        q = " ".join(rng.choice(WORDS + ["unseen"]) for _ in range(rng.randint(1, 6)))
        want = bm25_scores(toks, tokenize([q])[0])
        got = ix.scores(q)
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
        ids, s = ix.search([q], 7)[0]
        # the best 7 with a positive score, ties by lower row
        order = sorted((i for i in range(len(texts)) if want[i] > 0), key=lambda i: (-want[i], i))[:7]
        assert set(ids.tolist()) == {100 + i for i in order}
        np.testing.assert_allclose(s, [want[i] for i in order], rtol=1e-5, atol=1e-6)


def test_empty_corpus_and_queries_without_known_words():
    ix = BM25Index.build([])
    assert len(ix) == 0 and ix.search(["river"], 3)[0][0].size == 0
    ix = BM25Index.build(["the river", "a port"])
    assert ix.search(["zebra"], 3)[0][0].size == 0      # no shared word: nothing returned


def _passages(n, start=0, seed=0):
    rng = random.Random(seed)
    return [Passage(start + i, f"title {start + i}", t) for i, t in enumerate(corpus(rng, n))]


def test_saved_with_the_index_loaded_back_and_rebuilt_when_it_grows(tmp_path):
    enc = HashingEncoder()
    ps = _passages(30)
    ki = KnowledgeIndex.build(ps, [[] for _ in ps], enc, REC, num_themes=2)
    ki.save(tmp_path / "ix")
    m = json.loads((tmp_path / "ix" / "knowledge.json").read_text())
    assert m["bm25"]["num_passages"] == 30 and (tmp_path / "ix" / m["bm25"]["dir"] / "ids.npy").is_file()
    back = KnowledgeIndex.load(tmp_path / "ix")
    q = "river port founder"
    np.testing.assert_allclose(back.bm25.scores(q), ki.bm25.scores(q), rtol=1e-6)
    assert back._bm25 is not None and back.bm25.ids.tolist() == list(range(30))
    # add: idf and lengths change, so the BM25 index is built again over every passage
    more = _passages(10, start=30, seed=1)
    back.add(more, [[] for _ in more], enc, REC)
    want = BM25Index.build([f"{p.title}\n{p.text}" for p in ps + more], [p.pid for p in ps + more])
    np.testing.assert_allclose(back.bm25.scores(q), want.scores(q), rtol=1e-5)
    back.save(tmp_path / "ix")
    m2 = json.loads((tmp_path / "ix" / "knowledge.json").read_text())
    assert m2["bm25"]["num_passages"] == 40 and m2["bm25"]["dir"] != m["bm25"]["dir"]
    again = KnowledgeIndex.load(tmp_path / "ix")
    np.testing.assert_allclose(again.bm25.scores(q), want.scores(q), rtol=1e-5)
    # compact keeps only the committed BM25 folder
    KnowledgeIndex.compact(tmp_path / "ix")
    assert not (tmp_path / "ix" / m["bm25"]["dir"]).exists()
    np.testing.assert_allclose(KnowledgeIndex.load(tmp_path / "ix").bm25.scores(q), want.scores(q), rtol=1e-5)


def test_an_index_saved_before_bm25_builds_it_on_first_use(tmp_path):
    ps = _passages(12)
    ki = KnowledgeIndex.build(ps, [[] for _ in ps], HashingEncoder(), REC, num_themes=1)
    ki.save(tmp_path / "ix")
    mpath = tmp_path / "ix" / "knowledge.json"
    m = json.loads(mpath.read_text())
    m.pop("bm25")                                   # as written by rasfast before BM25
    mpath.write_text(json.dumps(m))
    back = KnowledgeIndex.load(tmp_path / "ix")
    np.testing.assert_allclose(back.bm25.scores("river port"), ki.bm25.scores("river port"), rtol=1e-6)


def test_bm25_and_hybrid_base_retrievers(tmp_path):
    ps = [Passage(0, "Velora Studios", "Velora Studios is a game company founded by Mira Okonkwo."),
          Passage(1, "Mira Okonkwo", "Mira Okonkwo is a designer born in Castrell."),
          Passage(2, "Castrell", "Castrell is a port city on the river Aun."),
          Passage(3, "Port Elden", "Port Elden hosts the Elden Fair every spring.")]
    enc = HashingEncoder()
    ki = KnowledgeIndex.build(ps, [[] for _ in ps], enc, REC, num_themes=1)
    bm = base_retriever(ki, enc, "bm25")
    got = bm.retrieve(["Where was Mira Okonkwo born?"], 3)[0]
    assert got[0].pid == 1 and all(p.score > 0 for p in got) and {p.pid for p in got} <= {0, 1}
    hy = base_retriever(ki, enc, "hybrid")
    got = hy.retrieve(["Where was Mira Okonkwo born?"], 4)[0]
    dense = base_retriever(ki, enc, "dense").retrieve(["Where was Mira Okonkwo born?"], 4)[0]
    # RRF of the two rankings: a passage first in both lists is first in the fusion
    if dense[0].pid == 1:
        assert got[0].pid == 1
    assert len({p.pid for p in got}) == len(got) and len(got) == 4
    with pytest.raises(ValueError, match="retriever"):
        base_retriever(ki, enc, "sparse")
