"""ThemeIndex: search == the ops, save/load, corrupted indexes, streaming == in-memory."""
import json

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import rasfast
from rasfast.encode import HashingEncoder
from rasfast.index import ThemeIndex
from rasfast.theme import KMeansThemeModel
from backends_util import assert_topk_close
from conftest import GPU_DEVICE, cuda_kernels, gpu
from index_files import index_file

DTYPES = [torch.float32, torch.float16, torch.bfloat16]


def _rand(N, T, D, B, seed=0, dup=0):
    """Random corpus; the last ``dup`` rows copy earlier ones (exact distance/score ties)."""
    g = torch.Generator().manual_seed(seed)
    ppd, emb = torch.rand(N, T, generator=g), torch.randn(N, D, generator=g)
    if dup:
        src = torch.randint(0, N - dup, (dup,), generator=g)
        ppd[N - dup:], emb[N - dup:] = ppd[src], emb[src]
    return ppd, emb, torch.rand(B, T, generator=g), torch.randn(B, D, generator=g)


def _dyadic(N, T, D, B, seed=0):
    """Values whose distances/scores every formula computes exactly (many exact ties), so
    the compiled backends must agree with the streamed torch formulas bit for bit."""
    g = torch.Generator().manual_seed(seed)
    ppd = torch.randint(0, 3, (N, T), generator=g).float() / 2
    emb = torch.randint(-2, 3, (N, D), generator=g).float()
    return (ppd, emb, torch.randint(0, 3, (B, T), generator=g).float() / 2,
            torch.randint(-2, 3, (B, D), generator=g).float())


def _merge_ref(parts, k):
    """Plain-python merge of per-shard (ids, scores): (score desc, id asc), -1/-inf padding."""
    B = parts[0][0].shape[0]
    ids = torch.full((B, k), -1, dtype=torch.int64)
    sc = torch.full((B, k), float("-inf"))
    for b in range(B):
        cand = sorted((-float(s[b, j]), int(i[b, j])) for i, s in parts
                      for j in range(i.shape[1]) if int(i[b, j]) >= 0)[:k]
        for j, (ns, r) in enumerate(cand):
            ids[b, j], sc[b, j] = r, -ns
    return ids, sc


def _expected(ppd, emb, qp, qe, ranges, K, k, w, metric, backend="torch"):
    parts = []
    for a, b in ranges:
        i, s = rasfast.theme_scoped_search(qp, qe, ppd[a:b], emb[a:b], K, k, w, metric, backend)
        parts.append((torch.where(i >= 0, i + a, i), s))
    return _merge_ref(parts, k) if len(parts) > 1 else parts[0]


def _same(a, b):
    assert torch.equal(a[0], b[0]), (a[0], b[0])
    assert torch.equal(a[1], b[1]), (a[1], b[1])


# ------------------------------------------------------------------ search == the ops
@pytest.mark.parametrize("backend", ["torch", "cpu"])
@pytest.mark.parametrize("scope", ["global", "per_shard"])
def test_search_equals_direct_op_calls(backend, scope):
    ppd, emb, qp, qe = _rand(300, 11, 17, 4, seed=1, dup=30)
    idx = ThemeIndex.build(emb, ppd, shards=[100, 120, 80], normalize_ppd=False)
    ranges = idx.shards if scope == "per_shard" else [(0, 300)]
    for K, k, w, metric in [(40, 5, 0.0, "l2"), (40, 7, 0.1, "ip"), (3, 10, 0.0, "l2"),
                            (500, 8, 0.5, "l2")]:
        got = idx.search(qp, qe, K, k, scope=scope, theme_weight=w, backend=backend) \
            if metric == "l2" else None
        if got is None:  # the metric is a property of the index
            idx.metric = "ip"
            got = idx.search(qp, qe, K, k, scope=scope, theme_weight=w, backend=backend)
            idx.metric = "l2"
        _same(got, _expected(ppd, emb, qp, qe, ranges, K, k, w, metric, backend))


def test_search_normalises_ppd_like_ras():
    ppd, emb, qp, qe = _rand(200, 9, 8, 3, seed=2)
    idx = ThemeIndex.build(emb, ppd)
    assert torch.allclose(idx.ppd.norm(dim=1), torch.ones(200), atol=1e-6)
    nq = qp / qp.norm(dim=1, keepdim=True)
    want = rasfast.theme_scoped_search(nq, qe, idx.ppd, emb, 50, 5, backend="torch")
    _same(idx.search(qp, qe, 50, 5, backend="torch"), want)


@pytest.mark.parametrize("backend", ["torch", "cpu"])
def test_dense_search_is_flat_top_k_with_id_ties(backend):
    ppd, emb, _, qe = _rand(257, 5, 12, 6, seed=3, dup=40)
    idx = ThemeIndex.build(emb, ppd)
    scores = (emb[None] * qe[:, None]).sum(-1)  # the reference's elementwise formula
    want = torch.sort(scores, dim=1, descending=True, stable=True)[1][:, :9]
    first = idx.dense_search(qe, 9, backend=backend)
    assert torch.equal(first[0], want)
    assert torch.allclose(first[1], torch.gather(scores, 1, want), atol=1e-5)
    if backend == "cpu":
        for chunk in (16, 100, 1000):  # chunking never changes the result
            _same(idx.dense_search(qe, 9, backend=backend, chunk_rows=chunk), first)
    ids, sc = idx.dense_search(qe.numpy(), 300, backend=backend)  # k > N: padded
    assert isinstance(ids, np.ndarray) and (ids[:, 257:] == -1).all() and np.isneginf(sc[:, 257:]).all()
    # the loop's "dense flat" retriever == theme search with no scoping
    if backend == "torch":
        _same(first, idx.search(torch.rand(6, 5), qe, 257, 9, "global", backend="torch"))


# ------------------------------------------------------------------ streaming == in-memory
@settings(max_examples=20)
@given(N=st.integers(1, 90), T=st.integers(1, 9), D=st.integers(1, 9), B=st.integers(1, 4),
       K=st.integers(1, 100), k=st.integers(1, 12), chunk=st.integers(1, 40),
       nshards=st.integers(1, 3), w=st.sampled_from([0.0, 0.1, 1.0]),
       metric=st.sampled_from(["l2", "ip"]), dtype=st.sampled_from(DTYPES),
       scope=st.sampled_from(["global", "per_shard"]), dup=st.integers(0, 20),
       seed=st.integers(0, 1000))
def test_streaming_equals_in_memory(N, T, D, B, K, k, chunk, nshards, w, metric, dtype, scope,
                                    dup, seed):
    ppd, emb, qp, qe = _rand(N, T, D, B, seed=seed, dup=min(dup, N - 1))
    idx = ThemeIndex.build(emb, ppd, shards=min(nshards, N), dtype=dtype, metric=metric)
    mem = idx.search(qp, qe, K, k, scope=scope, theme_weight=w)
    streamed = idx.search(qp, qe, K, k, scope=scope, theme_weight=w, chunk_rows=chunk)
    _same(streamed, mem)


@pytest.mark.parametrize("scope", ["global", "per_shard"])
@pytest.mark.parametrize("metric", ["l2", "ip"])
def test_streaming_equals_compiled_backend_on_exact_data(scope, metric):
    # dyadic data: every formula is exact, so ties (many) must be resolved identically
    ppd, emb, qp, qe = _dyadic(400, 6, 5, 5, seed=4)
    idx = ThemeIndex.build(emb, ppd, shards=3, normalize_ppd=False, metric=metric)
    for K, k, w in [(50, 10, 0.0), (7, 10, 0.5), (150, 3, 0.0), (1000, 5, 0.0)]:
        _same(idx.search(qp, qe, K, k, scope=scope, theme_weight=w, chunk_rows=33),
              idx.search(qp, qe, K, k, scope=scope, theme_weight=w, backend="cpu"))


@pytest.mark.parametrize("dtype", DTYPES)
def test_mmap_load_matches_in_memory(tmp_path, dtype):
    ppd, emb, qp, qe = _rand(500, 13, 20, 3, seed=5, dup=50)
    idx = ThemeIndex.build(emb, ppd, shards=[200, 300], dtype=dtype)
    idx.save(tmp_path / "ix")
    mm = ThemeIndex.load(tmp_path / "ix", mmap=True)
    assert mm.mmapped and isinstance(mm.emb, torch.Tensor)
    for scope in ("global", "per_shard"):
        for K, k in [(60, 10), (5, 8), (10_000, 4)]:
            _same(mm.search(qp, qe, K, k, scope=scope), idx.search(qp, qe, K, k, scope=scope))
    _same(mm.dense_search(qe, 7), idx.dense_search(qe, 7))


# ------------------------------------------------------------------ save / load
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("mmap", [True, False])
def test_save_load_round_trip(tmp_path, dtype, mmap):
    ppd, emb, qp, qe = _rand(64, 7, 10, 2, seed=6)
    passages = [{"pid": 1000 + i, "title": f"T{i}", "text": f"text {i} é"} for i in range(64)]
    idx = ThemeIndex.build(emb, ppd, passages=passages, shards=[30, 34], dtype=dtype,
                           ppd_dtype=torch.float16)
    idx.save(tmp_path / "ix")
    m = json.loads((tmp_path / "ix" / "manifest.json").read_text())
    assert m["version"] == 4 and m["num_rows"] == 64 and m["dim"] == 10 and m["num_themes"] == 7
    assert m["arrays"]["emb"]["dtype"] == str(dtype).replace("torch.", "")
    assert m["arrays"]["ppd"]["dtype"] == "float16" and m["shards"] == [[0, 30], [30, 64]]
    if dtype == torch.bfloat16:
        assert index_file(tmp_path / "ix", "emb").stat().st_size == 64 + 64 * 10 * 2   # header + rows
    got = ThemeIndex.load(tmp_path / "ix", mmap=mmap)
    assert got.emb.dtype == dtype and torch.equal(got.emb, idx.emb)
    assert got.ppd.dtype == torch.float16 and torch.equal(got.ppd, idx.ppd)
    assert got.shards == idx.shards and got.texts == idx.texts and got.titles == idx.titles
    assert got.pids.tolist() == list(range(1000, 1064))
    _same(got.search(qp, qe, 20, 5, backend="torch"), idx.search(qp, qe, 20, 5, backend="torch"))
    res = got.passages(*got.search(qp, qe, 20, 5, backend="torch"))
    assert len(res) == 2 and len(res[0]) == 5 and res[0][0].pid >= 1000
    assert res[0][0].text == idx.texts[res[0][0].pid - 1000]


def test_build_from_passages_with_encoder_and_kmeans(tmp_path):
    passages = [(i, f"title {i % 5}", f"passage number {i} about topic {i % 7}") for i in range(40)]
    enc = HashingEncoder(64)
    idx = ThemeIndex.build(passages=passages, encoder=enc, num_themes=6, cache=False)
    assert isinstance(idx.theme_model, KMeansThemeModel) and idx.num_themes == 6
    assert idx.encoder_name == "hashing-64"
    q = enc.encode(["topic 3", "title 2"])
    ids, sc = idx.search(None, q, 10, 3)  # q_ppd from the index's theme model
    assert ids.shape == (2, 3) and (ids >= 0).all()
    idx.save(tmp_path / "ix")
    m = json.loads((tmp_path / "ix" / "manifest.json").read_text())
    assert m["encoder"] == "hashing-64" and m["theme_model"]["name"] == idx.theme_model.name
    got = ThemeIndex.load(tmp_path / "ix")
    assert isinstance(got.theme_model, KMeansThemeModel)
    assert np.array_equal(got.query_ppd(q), idx.query_ppd(q))
    # compiled cpu vs the torch backend: two implementations, so a tolerance (not bitwise)
    assert_topk_close(got.search(None, q, 10, 3), idx.search(None, q, 10, 3, backend="torch"))


def test_build_from_shard_lists_and_dense_only():
    ppd, emb, qp, qe = _rand(50, 4, 6, 2, seed=7)
    idx = ThemeIndex.build([emb[:20], emb[20:]], [ppd[:20], ppd[20:]])
    assert idx.shards == [(0, 20), (20, 50)]
    dense = ThemeIndex.build(emb, theme_model=False)
    assert dense.ppd is None
    assert dense.dense_search(qe, 3)[0].shape == (2, 3)
    with pytest.raises(ValueError, match="dense-only"):
        dense.search(qp, qe, 5, 3)


# ------------------------------------------------------------------ corrupted indexes
@pytest.fixture
def saved(tmp_path):
    ppd, emb, _, _ = _rand(40, 5, 8, 1, seed=8)
    ThemeIndex.build(emb, ppd, dtype=torch.bfloat16).save(tmp_path / "ix")
    return tmp_path / "ix"


def _edit_manifest(d, fn):
    p = d / "manifest.json"
    m = json.loads(p.read_text())
    fn(m)
    p.write_text(json.dumps(m))


@pytest.mark.parametrize("mmap", [True, False])
def test_truncated_array_is_refused(saved, mmap):
    p = index_file(saved, "emb")
    p.write_bytes(p.read_bytes()[:-100])
    with pytest.raises(ValueError, match=r"emb\.1\.bin: truncated"):
        ThemeIndex.load(saved, mmap=mmap)


def test_missing_files_are_refused(saved):
    index_file(saved, "ppd").unlink()
    with pytest.raises(ValueError, match=r"ppd\.1\.bin: missing"):
        ThemeIndex.load(saved)
    (saved / "manifest.json").unlink()
    with pytest.raises(ValueError, match="manifest.json: missing"):
        ThemeIndex.load(saved)


def test_manifest_mismatches_are_refused(saved, tmp_path):
    import shutil
    cases = {
        "num_rows": lambda m: m.update(num_rows=41),
        "dim": lambda m: m.update(dim=9),
        "version": lambda m: m.update(version=99),
        "format": lambda m: m.update(format="other"),
        # the file's header names its dtype (format 4): any other dtype is refused
        "dtype": lambda m: m["arrays"]["emb"].update(dtype="float32"),
        "shards": lambda m: m.update(shards=[[0, 10], [12, 40]]),
    }
    for what, fn in cases.items():
        d = tmp_path / what
        shutil.copytree(saved, d)
        _edit_manifest(d, fn)
        with pytest.raises(ValueError) as e:
            ThemeIndex.load(d)
        assert "manifest.json" in str(e.value) or ".bin" in str(e.value), (what, e.value)
    # passages file out of step with the arrays
    d = tmp_path / "passages"
    shutil.copytree(saved, d)
    pfile = index_file(d, "passages")
    lines = pfile.read_text().splitlines()
    pfile.write_text("\n".join(lines[:-1]) + "\n")
    with pytest.raises(ValueError, match=r"passages\.1\.jsonl: truncated"):
        ThemeIndex.load(d)
    (d / "manifest.json").write_text("{not json")
    with pytest.raises(ValueError, match="not valid JSON"):
        ThemeIndex.load(d)


# ------------------------------------------------------------------ bad input
def test_bad_search_input():
    ppd, emb, qp, qe = _rand(30, 4, 6, 2, seed=9)
    idx = ThemeIndex.build(emb, ppd, shards=2)
    bad = [
        (dict(K=0), ValueError, "K"), (dict(k=0), ValueError, "k"),
        (dict(scope="shard"), ValueError, "scope"), (dict(theme_weight=1.5), ValueError, "theme_weight"),
        (dict(chunk_rows=0), ValueError, "chunk_rows"), (dict(K=2.5), TypeError, "K"),
        (dict(q_emb=qe[:, :5]), ValueError, "q_emb"), (dict(q_ppd=qp[:, :3]), ValueError, "q_ppd"),
        (dict(q_ppd=qp[:1]), ValueError, "q_ppd"), (dict(q_emb=qe.double()), TypeError, "q_emb"),
        (dict(q_emb=torch.full_like(qe, float("nan"))), ValueError, "q_emb"),
        (dict(q_ppd=torch.full_like(qp, float("inf"))), ValueError, "q_ppd"),
        (dict(q_emb=[[0.0] * 6] * 2), TypeError, "q_emb"),
    ]
    for kw, exc, name in bad:
        args = dict(q_ppd=qp, q_emb=qe, K=5, k=3)
        args.update(kw)
        with pytest.raises(exc, match=name):
            idx.search(**args)
    with pytest.raises(ValueError, match="theme model"):
        idx.search(None, qe, 5, 3)
    with pytest.raises(ValueError, match="ids"):
        idx.passages(np.array([[0, 30]]))


def test_bad_build_input():
    ppd, emb, _, _ = _rand(20, 4, 6, 1, seed=10)
    with pytest.raises(ValueError, match="ppd"):
        ThemeIndex.build(emb, ppd[:10])
    with pytest.raises(ValueError, match="dtype"):
        ThemeIndex.build(emb, ppd, dtype="float64")
    with pytest.raises(ValueError, match="shards"):
        ThemeIndex.build(emb, ppd, shards=[(0, 10), (11, 20)])
    with pytest.raises(ValueError, match="shards"):
        ThemeIndex.build(emb, ppd, shards=[10, 5])
    with pytest.raises(ValueError, match="shards"):
        ThemeIndex.build(emb, ppd, shards=21)
    with pytest.raises(ValueError, match="emb"):
        ThemeIndex.build(emb.masked_fill(emb > 1, float("nan")), ppd)
    with pytest.raises(ValueError, match="metric"):
        ThemeIndex.build(emb, ppd, metric="cos")
    with pytest.raises(ValueError, match="passages"):
        ThemeIndex.build(emb, ppd, passages=["a", "b"])
    with pytest.raises(ValueError, match="encoder"):
        ThemeIndex.build(passages=["a", "b"])
    with pytest.raises(ValueError, match="titles"):
        ThemeIndex.build(emb, ppd, titles=["x"])
    with pytest.raises(ValueError, match="emb"):
        ThemeIndex.build(torch.zeros(0, 6))
    with pytest.raises(ValueError, match="pids"):
        ThemeIndex.build(emb, ppd, pids=[1, 2])
    assert ThemeIndex.build(emb, ppd, pids=list(range(5, 25))).pids[0] == 5


def test_streaming_rejects_non_finite_rows():
    ppd, emb, qp, qe = _rand(30, 4, 6, 2, seed=11)
    idx = ThemeIndex.build(emb, ppd)
    idx.emb[17, 2] = float("inf")  # corrupt after build, as a bad file on disk would be
    with pytest.raises(ValueError, match="corpus_emb: contains NaN or infinite"):
        idx.search(qp, qe, 40, 3, chunk_rows=8)


@cuda_kernels
@pytest.mark.parametrize("scope", ["global", "per_shard"])
def test_gpu_index_matches_cpu_on_exact_data(scope):
    ppd, emb, qp, qe = _dyadic(3000, 8, 16, 4, seed=12)
    idx = ThemeIndex.build(emb, ppd, shards=3, normalize_ppd=False)
    on_gpu = idx.to(GPU_DEVICE)
    for K, k, w in [(300, 10, 0.0), (5, 10, 0.5), (10_000, 7, 0.0)]:
        ids, sc = on_gpu.search(qp.to(GPU_DEVICE), qe.to(GPU_DEVICE), K, k, scope=scope, theme_weight=w,
                                backend="cuda")
        assert ids.device.type == GPU_DEVICE.type
        _same((ids.cpu(), sc.cpu()), idx.search(qp, qe, K, k, scope=scope, theme_weight=w,
                                                backend="cpu"))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("bad", ["q_ppd", "q_emb"])
@pytest.mark.parametrize("value", [float("nan"), float("inf"), float("-inf")])
def test_host_queries_with_non_finite_values_raise_by_name(dtype, bad, value):
    """Host queries are checked with numpy's isfinite where numpy has the dtype (float16, float32),
    with torch's reductions otherwise (bfloat16): the same error either way."""
    ppd, emb, qp, qe = _rand(40, 5, 8, 3, seed=21)
    idx = ThemeIndex.build(emb, ppd)
    qp, qe = qp.to(dtype), qe.to(dtype)
    (qp if bad == "q_ppd" else qe)[2, 1] = value
    with pytest.raises(ValueError, match=f"{bad}: contains NaN or infinite values"):
        idx.search(qp, qe, 10, 3)
    (qp if bad == "q_ppd" else qe)[2, 1] = 0.5
    idx.search(qp, qe, 10, 3)
