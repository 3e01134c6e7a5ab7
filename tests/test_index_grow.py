"""ThemeIndex.add + incremental save: a grown index equals a from-scratch build on the same rows."""
import json

import numpy as np
import pytest
import torch

from rasfast.encode import HashingEncoder
from rasfast.index import ThemeIndex
from rasfast.index.array_header import SIZE as HEADER
from rasfast.theme import KMeansThemeModel

from index_files import index_file

DTYPES = [torch.float32, torch.float16, torch.bfloat16]


def _same(a, b):
    assert torch.equal(torch.as_tensor(a[0]), torch.as_tensor(b[0])), (a[0], b[0])
    assert torch.equal(torch.as_tensor(a[1]), torch.as_tensor(b[1])), (a[1], b[1])


def _rows(N, D, seed):
    g = torch.Generator().manual_seed(seed)
    emb = torch.randn(N, D, generator=g)
    passages = [{"pid": 500 + i, "title": f"t{i}", "text": f"passage {i} ü"} for i in range(N)]
    return emb, passages


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("mmap", [True, False])
def test_add_save_load_equals_from_scratch_build(tmp_path, dtype, mmap):
    emb, passages = _rows(230, 12, seed=1)
    model = KMeansThemeModel(num_themes=9).fit(emb[:60])
    cuts = [0, 60, 150, 230]
    grown = ThemeIndex.build(emb[:60], passages=passages[:60], theme_model=model, dtype=dtype)
    grown.save(tmp_path / "ix")
    ix = ThemeIndex.load(tmp_path / "ix", mmap=mmap)
    for a, b in zip(cuts[1:-1], cuts[2:]):  # two appended shards, each saved incrementally
        tdir = index_file(tmp_path / "ix", "theme_model")
        before = tdir.stat().st_mtime_ns
        assert ix.add(emb[a:b], passages=passages[a:b]) is ix
        ix.save(tmp_path / "ix")
        assert index_file(tmp_path / "ix", "theme_model") == tdir  # written once, kept
        assert tdir.stat().st_mtime_ns == before
        ix = ThemeIndex.load(tmp_path / "ix", mmap=mmap)
    # the from-scratch build gets the same theme model's PPDs for every row, shard by shard
    ppd = torch.cat([torch.as_tensor(model.ppd(emb[a:b])) for a, b in zip(cuts, cuts[1:])])
    scratch = ThemeIndex.build(emb, ppd, passages=passages, theme_model=model, dtype=dtype,
                               shards=[60, 90, 80])
    assert ix.shards == scratch.shards == [(0, 60), (60, 150), (150, 230)]
    assert torch.equal(ix.emb, scratch.emb) and torch.equal(ix.ppd, scratch.ppd)
    assert ix.pids.tolist() == scratch.pids.tolist() and ix.texts == scratch.texts
    assert ix.titles == scratch.titles and ix.mmapped == mmap
    m = json.loads((tmp_path / "ix" / "manifest.json").read_text())
    assert m["version"] == 4 and m["num_rows"] == 230 and m["shards"][-1] == [150, 230]
    qe = torch.randn(5, 12, generator=torch.Generator().manual_seed(2))
    for scope in ("per_shard", "global"):
        for K, k, w in [(40, 7, 0.0), (13, 5, 0.3), (1000, 4, 0.0)]:
            _same(ix.search(None, qe, K, k, scope=scope, theme_weight=w),
                  scratch.search(None, qe, K, k, scope=scope, theme_weight=w))



def test_incremental_save_writes_only_new_rows(tmp_path):
    emb, passages = _rows(100, 8, seed=3)
    ix = ThemeIndex.build(emb[:70], passages=passages[:70], num_themes=5)
    ix.save(tmp_path / "ix")
    emb_file = index_file(tmp_path / "ix", "emb")
    old = emb_file.read_bytes()
    # scribble over the saved rows' bytes on disk (after the file's header): an incremental
    # save must not rewrite them, nor the header
    h = HEADER
    marker = bytes([7]) * 64
    with open(emb_file, "r+b") as f:
        f.seek(h)
        f.write(marker)
    ix.add(emb[70:], passages=passages[70:])
    ix.save(tmp_path / "ix")
    new = emb_file.read_bytes()
    assert new[:h] == old[:h] and new[h:h + 64] == marker and new[h + 64:len(old)] == old[h + 64:]
    assert len(new) == h + 100 * 8 * 4
    # saving elsewhere is a full write
    ix.save(tmp_path / "copy")
    assert index_file(tmp_path / "copy", "emb").read_bytes()[:h + 64] == old[:h + 64]


def test_interrupted_append_is_ignored_and_cut(tmp_path):
    emb, passages = _rows(50, 6, seed=4)
    ix = ThemeIndex.build(emb[:30], passages=passages[:30], num_themes=4)
    ix.save(tmp_path / "ix")
    # an append that died before writing its manifest: extra bytes past the manifest's rows
    for f in ("emb", "ppd", "pids", "passages"):
        with open(index_file(tmp_path / "ix", f), "ab") as fh:
            fh.write(b"\x01garbage\n" * 5)
    got = ThemeIndex.load(tmp_path / "ix")
    assert len(got) == 30 and torch.equal(got.emb, ix.emb) and got.texts == ix.texts
    got.add(emb[30:], passages=passages[30:])
    got.save(tmp_path / "ix")
    again = ThemeIndex.load(tmp_path / "ix")
    assert len(again) == 50 and again.texts[30:] == [p["text"] for p in passages[30:]]
    assert torch.equal(again.emb[30:], emb[30:])
    assert index_file(tmp_path / "ix", "emb").stat().st_size == HEADER + 50 * 6 * 4


def test_add_from_passages_with_encoder_and_default_pids(tmp_path):
    enc = HashingEncoder(32)
    texts = [f"document {i} on subject {i % 4}" for i in range(30)]
    ix = ThemeIndex.build(passages=texts[:20], encoder=enc, num_themes=4, cache=False)
    ix.add(passages=texts[20:], encoder=enc, cache=False)
    assert ix.pids.tolist() == list(range(30)) and ix.shards == [(0, 20), (20, 30)]
    scratch = ThemeIndex.build(passages=texts, encoder=enc, theme_model=ix.theme_model,
                               cache=False, shards=[20, 10])
    assert torch.equal(ix.emb, scratch.emb)
    ix.add(torch.randn(3, 32))  # arrays only: pids continue the row numbering
    assert ix.pids.tolist()[-3:] == [30, 31, 32] and ix.texts[-1] == ""
    with pytest.raises(ValueError, match="encoder"):
        ix.add(passages=["x"], encoder=HashingEncoder(16), cache=False)


def test_add_rejects_bad_rows():
    emb, _ = _rows(20, 6, seed=5)
    ix = ThemeIndex.build(emb, num_themes=3)
    with pytest.raises(ValueError, match="emb: dim 1 must equal D"):
        ix.add(torch.randn(4, 5))
    with pytest.raises(ValueError, match="ppd: dim 1 must equal T"):
        ix.add(torch.randn(4, 6), torch.rand(4, 2))
    with pytest.raises(TypeError, match="emb"):
        ix.add(np.zeros((2, 6)))  # float64
    with pytest.raises(TypeError, match="emb"):
        ix.add(torch.zeros(2, 6, dtype=torch.int32))
    with pytest.raises(ValueError, match="emb"):
        ix.add(torch.full((2, 6), float("nan")))
    with pytest.raises(ValueError, match="ppd"):
        ix.add(torch.randn(4, 6), torch.rand(3, 3))
    dense = ThemeIndex.build(emb, theme_model=False)
    with pytest.raises(ValueError, match="dense-only"):
        dense.add(torch.randn(2, 6), torch.rand(2, 3))
    dense.add(torch.randn(2, 6))
    assert len(dense) == 22 and dense.ppd is None
    no_model = ThemeIndex.build(emb, torch.rand(20, 3))
    with pytest.raises(ValueError, match="theme model"):
        no_model.add(torch.randn(2, 6))
    assert len(ix) == 20 and ix.shards == [(0, 20)]  # failed adds changed nothing


def test_version_1_indexes_still_load(tmp_path):
    emb, passages = _rows(40, 6, seed=6)
    ix = ThemeIndex.build(emb, passages=passages, num_themes=4, dtype=torch.bfloat16, shards=2)
    d = tmp_path / "v1"
    d.mkdir()
    raw = lambda t: t.view(torch.int16).numpy().view(np.uint16)
    np.save(d / "emb.npy", raw(ix.emb))
    np.save(d / "ppd.npy", raw(ix.ppd))
    np.save(d / "pids.npy", ix.pids)
    with open(d / "passages.jsonl", "w") as f:
        for p in passages:
            f.write(json.dumps(p) + "\n")
    ix.theme_model.save(d / "theme_model")
    m = {"format": "rasfast.ThemeIndex", "version": 1, "num_rows": 40, "dim": 6, "num_themes": 4,
         "arrays": {n: {"file": f"{n}.npy", "dtype": "bfloat16", "shape": list(t.shape)}
                    for n, t in (("emb", ix.emb), ("ppd", ix.ppd))},
         "pids": {"file": "pids.npy", "dtype": "int64", "shape": [40]},
         "passages": {"file": "passages.jsonl", "count": 40}, "shards": [[0, 20], [20, 40]],
         "normalize_ppd": True, "metric": "l2", "encoder": None,
         "theme_model": {"name": ix.theme_model.name, "dir": "theme_model"}}
    (d / "manifest.json").write_text(json.dumps(m))
    for mmap in (True, False):
        got = ThemeIndex.load(d, mmap=mmap)
        assert torch.equal(got.emb, ix.emb) and torch.equal(got.ppd, ix.ppd)
        assert got.texts == ix.texts and got.shards == ix.shards
    got.add(emb[:5], passages=passages[:5])
    got.save(d)  # a version-1 directory gets a full version-4 generation beside its files
    assert json.loads((d / "manifest.json").read_text())["version"] == 4
    assert (d / "emb.npy").exists()  # kept: a reader may still use them
    assert len(ThemeIndex.load(d)) == 45
    removed = ThemeIndex.compact(d)
    assert set(removed) == {"emb.npy", "ppd.npy", "pids.npy", "passages.jsonl", "theme_model"}
    assert not (d / "emb.npy").exists() and len(ThemeIndex.load(d)) == 45


def test_add_to_a_mapped_index_stays_mapped_and_commits_on_save(tmp_path):
    emb, passages = _rows(90, 6, seed=7)
    ThemeIndex.build(emb[:50], passages=passages[:50], num_themes=4).save(tmp_path / "ix")
    ix = ThemeIndex.load(tmp_path / "ix", mmap=True)
    ix.add(emb[50:70], passages=passages[50:70]).add(emb[70:], passages=passages[70:])
    assert ix.mmapped  # the appended rows were written after the mapped ones, then mapped
    assert torch.equal(ix.emb[50:], emb[50:]) and ix.shards[-2:] == [(50, 70), (70, 90)]
    assert len(ThemeIndex.load(tmp_path / "ix")) == 50  # not committed before save
    ix.save(tmp_path / "ix")
    again = ThemeIndex.load(tmp_path / "ix")
    assert len(again) == 90 and torch.equal(again.emb, ix.emb) and torch.equal(again.ppd, ix.ppd)
    assert again.texts == [p["text"] for p in passages]
    qe = torch.randn(3, 6, generator=torch.Generator().manual_seed(8))
    _same(again.search(None, qe, 30, 5, scope="global"), ix.search(None, qe, 30, 5, scope="global"))


def test_mapped_index_saved_elsewhere_then_grown_streams_the_copy(tmp_path):
    emb, passages = _rows(80, 6, seed=9)
    ThemeIndex.build(emb[:40], passages=passages[:40], num_themes=3).save(tmp_path / "a")
    ix = ThemeIndex.load(tmp_path / "a")
    ix.add(emb[40:60], passages=passages[40:60])
    ix.save(tmp_path / "b")  # full write of 60 rows into b; b is now the index's home
    ix.add(emb[60:], passages=passages[60:])
    ix.save(tmp_path / "b")
    assert len(ThemeIndex.load(tmp_path / "a")) == 40 and len(ThemeIndex.load(tmp_path / "b")) == 80
    qe = torch.randn(2, 6, generator=torch.Generator().manual_seed(1))
    _same(ix.search(None, qe, 25, 4, scope="global", max_memory="3MB"),
          ThemeIndex.load(tmp_path / "b", mmap=False).search(None, qe, 25, 4, scope="global"))
