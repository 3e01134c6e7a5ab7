"""DistributedThemeIndex over 2 and 3 gloo ranks on 127.0.0.1 == ThemeIndex.load in one
process, bit for bit; a failing rank makes every rank raise, never hang."""
import json
import os
import pathlib
import socket
import subprocess
import sys

import numpy as np
import pytest
import torch

from rasfast.index import ThemeIndex

WORKER = pathlib.Path(__file__).with_name("distributed_worker.py")
# uneven shards, one smaller than some K below
SHARDS = [700, 150, 1200, 40, 910]
CASES = [("global", 500, 10, 0.0), ("global", 2999, 7, 0.3), ("global", 1, 5, 0.0),
         ("global", 10_000, 6, 0.0), ("per_shard", 100, 10, 0.0), ("per_shard", 300, 8, 0.5)]


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _launch(world, cases, tmp_path, timeout=180):
    cases_path = tmp_path / f"cases{world}.json"
    cases_path.write_text(json.dumps(cases))
    port = _free_port()
    env = dict(os.environ, OMP_NUM_THREADS="1")
    procs, outs = [], []
    for r in range(world):
        out = tmp_path / f"out{world}_{r}.json"
        outs.append(out)
        procs.append(subprocess.Popen([sys.executable, str(WORKER), str(r), str(world), str(port),
                                       str(cases_path), str(out)], env=env,
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    try:
        for p in procs:
            _, err = p.communicate(timeout=timeout)
            assert p.returncode == 0, err
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    return [json.loads(o.read_text()) for o in outs]


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("dist")
    g = torch.Generator().manual_seed(0)
    N = sum(SHARDS)
    # few distinct values: many rows tie at the K-th distance and at the top scores
    ppd = torch.randint(0, 3, (N, 6), generator=g).float() / 2
    emb = torch.randint(-2, 3, (N, 5), generator=g).float()
    ix = ThemeIndex.build(emb, ppd, shards=SHARDS, normalize_ppd=False, dtype=torch.bfloat16)
    ix.save(tmp / "ix")
    q = tmp / "q.npz"
    np.savez(q, qp=(torch.randint(0, 3, (5, 6), generator=g).float() / 2).numpy(),
             qe=torch.randint(-2, 3, (5, 5), generator=g).float().numpy())
    # a copy whose shard 3 (rank 0 of 3, rank 1 of 2) holds an infinite value
    bad = ThemeIndex.build(emb, ppd, shards=SHARDS, normalize_ppd=False, dtype=torch.bfloat16)
    bad.emb[sum(SHARDS[:3]) + 5, 2] = float("inf")
    bad.save(tmp / "bad")
    return tmp, q


@pytest.mark.parametrize("world", [2, 3])
def test_distributed_equals_single_process(saved, tmp_path, world):
    tmp, q = saved
    cases = [dict(dir=str(tmp / "ix"), queries=str(q), scope=s, K=K, k=k, w=w)
             for s, K, k, w in CASES]
    cases.append(dict(dir=str(tmp / "bad"), queries=str(q), scope="global", K=10_000, k=3, w=0.0))
    results = _launch(world, cases, tmp_path)
    single = ThemeIndex.load(tmp / "ix")
    qs = np.load(q)
    for i, (scope, K, k, w) in enumerate(CASES):
        ids, sc = single.search(qs["qp"], qs["qe"], K, k, scope=scope, theme_weight=w)
        for r in range(world):
            got = results[r][i]
            assert "error" not in got, got
            assert got["ids"] == ids.tolist(), (world, r, scope, K)
            assert got["scores"] == sc.view(np.int32).tolist(), (world, r, scope, K)  # bits
    owner = 3 % world
    for r in range(world):
        err = results[r][-1].get("error", "")
        assert "RankFailure" in err, err
        if r == owner:
            assert f"failed on rank {owner}" in err and "corpus_emb" in err, err
        else:
            assert f"rank(s) [{owner}] failed" in err, err


def test_ranks_holding_different_copies_fail_on_every_rank(tmp_path):
    g = torch.Generator().manual_seed(3)
    emb, ppd = torch.randn(900, 5, generator=g), torch.rand(900, 6, generator=g)
    ThemeIndex.build(emb[:700], ppd[:700], shards=3).save(tmp_path / "ix")
    import shutil
    shutil.copytree(tmp_path / "ix", tmp_path / "stale")  # rank 1's copy misses the new shard
    grown = ThemeIndex.load(tmp_path / "ix")
    grown.add(emb[700:], ppd[700:])
    grown.save(tmp_path / "ix")
    q = tmp_path / "q.npz"
    np.savez(q, qp=torch.rand(2, 6, generator=g).numpy(), qe=torch.randn(2, 5, generator=g).numpy())
    dirs = [str(tmp_path / "ix"), str(tmp_path / "stale")]
    cases = [dict(dir=dirs, queries=str(q), scope=s, K=50, k=5, w=0.0) for s in ("per_shard", "global")]
    results = _launch(2, cases, tmp_path)
    for r in range(2):
        for got in results[r]:
            err = got.get("error", "")
            assert "ValueError" in err and "ranks loaded different indexes" in err, (r, got)
            assert "rank(s) [1] differ" in err and "4 shards" in err and "3 shards" in err, err


def test_load_needs_a_process_group(saved):
    from rasfast.distributed import DistributedThemeIndex
    with pytest.raises(RuntimeError, match="init_process_group"):
        DistributedThemeIndex.load(saved[0] / "ix")
