"""A loaded (memory-mapped) index searches with the in-memory kernels: same results bit for
bit, for every dtype and scope; blocked and streamed (max_memory) search equal it too, across
block boundaries and with ties at the K-th distance; streaming stays within its budget."""
import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import torch

from rasfast.index import ThemeIndex, parse_bytes

from index_files import index_file

DTYPES = [torch.float32, torch.float16, torch.bfloat16]


def _same(a, b):
    assert torch.equal(torch.as_tensor(a[0]), torch.as_tensor(b[0])), (a[0], b[0])
    assert torch.equal(torch.as_tensor(a[1]), torch.as_tensor(b[1])), (a[1], b[1])


def _tied(N, T, D, B, seed):
    """Few distinct values: many rows share the K-th distance and the top scores."""
    g = torch.Generator().manual_seed(seed)
    ppd = torch.randint(0, 3, (N, T), generator=g).float() / 2
    emb = torch.randint(-2, 3, (N, D), generator=g).float()
    return (ppd, emb, torch.randint(0, 3, (B, T), generator=g).float() / 2,
            torch.randint(-2, 3, (B, D), generator=g).float())


CASES = [(60, 10, 0.0), (7, 12, 0.5), (10_000, 6, 0.1), (1, 3, 0.0)]


@pytest.mark.parametrize("emb_dtype,ppd_dtype,metric", [
    (torch.float32, torch.float32, "l2"), (torch.float16, torch.float16, "ip"),
    (torch.bfloat16, torch.bfloat16, "l2"), (torch.bfloat16, torch.float16, "ip"),
    (torch.float16, torch.float32, "l2"), (torch.float32, torch.bfloat16, "l2")])
def test_loaded_equals_in_memory_every_dtype_and_scope(tmp_path, emb_dtype, ppd_dtype, metric):
    ppd, emb, qp, qe = _tied(1500, 6, 5, 5, seed=DTYPES.index(emb_dtype) + 3 * DTYPES.index(ppd_dtype))
    mem = ThemeIndex.build(emb, ppd, shards=[500, 700, 300], dtype=emb_dtype, ppd_dtype=ppd_dtype,
                           normalize_ppd=False, metric=metric)
    mem.save(tmp_path / "ix")
    mapped = ThemeIndex.load(tmp_path / "ix", mmap=True)
    read = ThemeIndex.load(tmp_path / "ix", mmap=False)
    for scope in ("global", "per_shard"):
        for K, k, w in CASES:
            want = mem.search(qp, qe, K, k, scope=scope, theme_weight=w)
            _same(mapped.search(qp, qe, K, k, scope=scope, theme_weight=w), want)
            _same(read.search(qp, qe, K, k, scope=scope, theme_weight=w), want)
            # blocks crossing shard boundaries and tie runs
            _same(mapped.search(qp, qe, K, k, scope=scope, theme_weight=w, chunk_rows=333), want)
            _same(mapped.search(qp, qe, K, k, scope=scope, theme_weight=w, max_memory=6_000_000), want)
    _same(mapped.dense_search(qe, 9), mem.dense_search(qe, 9))
    _same(mapped.dense_search(qe, 9, max_memory="2MB"), mem.dense_search(qe, 9))


def test_large_corpus_sampled_path_blocks_and_streams(tmp_path):
    # N above the fused kernel's sampled-cut threshold (131072 rows), ties everywhere
    ppd, emb, qp, qe = _tied(150_000, 4, 3, 6, seed=3)
    mem = ThemeIndex.build(emb, ppd, shards=[70_000, 80_000], normalize_ppd=False,
                           dtype=torch.bfloat16)
    mem.save(tmp_path / "ix")
    mapped = ThemeIndex.load(tmp_path / "ix")
    for scope in ("global", "per_shard"):
        for K, k, w in [(20_000, 10, 0.0), (50_001, 7, 0.2)]:
            want = mem.search(qp, qe, K, k, scope=scope, theme_weight=w)
            _same(mapped.search(qp, qe, K, k, scope=scope, theme_weight=w), want)
            _same(mapped.search(qp, qe, K, k, scope=scope, theme_weight=w, max_memory="12MB"), want)


def test_streamed_reads_only_needed_dense_rows_and_matches(tmp_path):
    # a narrow scope: the streamed path reads runs of in-scope dense rows, not whole blocks
    g = torch.Generator().manual_seed(4)
    ppd, emb = torch.rand(20_000, 8, generator=g), torch.randn(20_000, 16, generator=g)
    qp, qe = torch.rand(2, 8, generator=g), torch.randn(2, 16, generator=g)
    mem = ThemeIndex.build(emb, ppd)
    mem.save(tmp_path / "ix")
    mapped = ThemeIndex.load(tmp_path / "ix")
    for K in (50, 900):
        _same(mapped.search(qp, qe, K, 10, scope="global", max_memory="3MB"),
              mem.search(qp, qe, K, 10, scope="global"))


def test_version_1_files_stream_too(tmp_path):
    ppd, emb, qp, qe = _tied(800, 5, 4, 3, seed=5)
    mem = ThemeIndex.build(emb, ppd, normalize_ppd=False, dtype=torch.float16)
    d = tmp_path / "v1"
    d.mkdir()
    np.save(d / "emb.npy", mem.emb.numpy())
    np.save(d / "ppd.npy", mem.ppd.numpy())
    np.save(d / "pids.npy", mem.pids)
    (d / "passages.jsonl").write_text("".join('{"pid": %d, "title": "", "text": ""}\n' % i
                                              for i in range(800)))
    (d / "manifest.json").write_text(json.dumps({
        "format": "rasfast.ThemeIndex", "version": 1, "num_rows": 800, "dim": 4, "num_themes": 5,
        "arrays": {"emb": {"file": "emb.npy", "dtype": "float16", "shape": [800, 4]},
                   "ppd": {"file": "ppd.npy", "dtype": "float16", "shape": [800, 5]}},
        "pids": {"file": "pids.npy", "dtype": "int64", "shape": [800]},
        "passages": {"file": "passages.jsonl", "count": 800}, "shards": [[0, 800]],
        "normalize_ppd": False, "metric": "l2", "encoder": None, "theme_model": {}}))
    mapped = ThemeIndex.load(d)
    for K in (90, 5000):
        _same(mapped.search(qp, qe, K, 6, max_memory=3_500_000), mem.search(qp, qe, K, 6))


def test_max_memory_arguments():
    assert parse_bytes("1GB", "m") == 10**9 and parse_bytes("512MiB", "m") == 512 * 2**20
    assert parse_bytes(1234, "m") == 1234
    ppd, emb, qp, qe = _tied(100, 3, 3, 2, seed=6)
    idx = ThemeIndex.build(emb, ppd)
    for bad, exc in [("lots", ValueError), (0, ValueError), (1.5, TypeError), ("1 parsec", ValueError)]:
        with pytest.raises(exc, match="max_memory"):
            idx.search(qp, qe, 5, 3, max_memory=bad)
    with pytest.raises(ValueError, match="max_memory: .* too small"):
        idx.search(qp, qe, 5, 3, max_memory=1000)
    with pytest.raises(ValueError, match="cpu kernels"):
        idx.search(qp, qe, 5, 3, max_memory="1MB", backend="torch")


_RSS_CHILD = textwrap.dedent("""
    import json, sys, numpy as np, torch
    from rasfast.index import ThemeIndex
    def rss_kib(field):
        for line in open("/proc/self/status"):
            if line.startswith(field):
                return int(line.split()[1])
    ix = ThemeIndex.load(sys.argv[1], mmap=True, load_theme_model=False)
    g = torch.Generator().manual_seed(0)
    qp, qe = torch.rand(4, ix.num_themes, generator=g), torch.randn(4, ix.dim, generator=g)
    # warm-up on a tiny in-memory index: imports and kernels loaded, no big buffer kept
    small = ThemeIndex.build(torch.randn(300, ix.dim), torch.rand(300, ix.num_themes))
    small.search(qp, qe, 100, 5, scope="global", chunk_rows=64)
    base = rss_kib("VmRSS:")
    open("/proc/self/clear_refs", "w").write("5")               # reset the peak (VmHWM)
    ids, sc = ix.search(qp, qe, 30_000, 10, scope="global", max_memory=int(sys.argv[2]))
    print(json.dumps({"base_kib": base, "peak_kib": rss_kib("VmHWM:"), "ids": ids.tolist()}))
""")


def test_streaming_peak_rss_stays_within_budget(tmp_path):
    N, T, D = 150_000, 64, 96  # 38 MB of theme rows + 58 MB of dense rows (float32)
    g = torch.Generator().manual_seed(7)
    ppd, emb = torch.rand(N, T, generator=g), torch.randn(N, D, generator=g)
    idx = ThemeIndex.build(emb, ppd, theme_model=False)
    idx.save(tmp_path / "ix")
    del ppd, emb
    budget = 8 << 20
    env = dict(os.environ, OMP_NUM_THREADS="2")
    out = subprocess.run([sys.executable, "-c", _RSS_CHILD, str(tmp_path / "ix"), str(budget)],
                         capture_output=True, text=True, timeout=240, env=env)
    assert out.returncode == 0, out.stderr
    r = json.loads(out.stdout)
    growth = (r["peak_kib"] - r["base_kib"]) * 1024
    files = sum(os.path.getsize(index_file(tmp_path / "ix", f)) for f in ("ppd", "emb"))
    assert files > 10 * budget
    # budget + a constant far below the file size (mapping the files would add ~96 MB)
    print(f"peak RSS growth {growth / 2**20:.1f} MiB, budget {budget / 2**20:.0f} MiB, files {files / 2**20:.0f} MiB")
    assert growth < budget + (24 << 20), (growth, budget, files)
    g = torch.Generator().manual_seed(0)
    qp, qe = torch.rand(4, T, generator=g), torch.randn(4, D, generator=g)
    want = idx.search(qp, qe, 30_000, 10, scope="global")
    assert r["ids"] == want[0].tolist()


def test_queries_are_validated_once_per_search(monkeypatch):
    import rasfast.index.theme_index as index_mod
    ppd, emb, qp, qe = _tied(300, 4, 3, 2, seed=8)
    idx = ThemeIndex.build(emb, ppd, shards=3)
    calls = []
    real = index_mod.check_finite_together
    monkeypatch.setattr(index_mod, "check_finite_together",
                        lambda ts, *a, **k: (calls.append(sorted(n for n, t in ts.items()
                                                                 if t is not None)),
                                             real(ts, *a, **k))[1])
    import rasfast.ops.theme as ops_theme
    monkeypatch.setattr(ops_theme, "check_finite_together", lambda *a, **k: calls.append("op"))
    for scope in ("per_shard", "global"):
        calls.clear()
        idx.search(qp, qe, 50, 5, scope=scope)
        # both queries in one check (one host read), none below the entry point
        assert calls == [["q_emb", "q_ppd"]], calls
