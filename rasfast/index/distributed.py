"""A saved ThemeIndex spread over the ranks of a torch.distributed process group.

``DistributedThemeIndex.load(dir, group=None)`` is called on every rank of the group (the
default group when ``group`` is None). Shard assignment rule: shard ``s`` of the saved
index (its manifest's row ranges, in order) belongs to rank ``s % world_size``
(round-robin), and each rank maps only the rows of its own shards. Then, called on every
rank with the same arguments, ``search(q_ppd, q_emb, K, k, scope=...)`` returns on every
rank exactly what ``ThemeIndex.load(dir).search(...)`` returns in one process, bit for bit:

- ``scope="per_shard"``: each rank runs the fused kernel on each of its shards, merges its
  shards' top-k, and one ``all_gather`` of the [B, k] lists gives every rank the merged
  top-k (score desc, then lower global row id).
- ``scope="global"``: the exact global K-th theme distance is found by a distributed radix
  select -- each rank computes its rows' keys once, and two rounds of [B, 65536] digit
  histograms are all-reduced (high then low 16 bits of the key) -- the rows tied at that
  distance are counted per shard (one all-reduce of [B, shards]) and handed out in global
  row order, so ties go to lower global row ids exactly as in one process; each rank then
  scores only its in-scope rows with the kernel's own scoring pass, and one ``all_gather``
  merges the top-k (see rasfast.index.stream).

The same code runs over gloo (CPU tensors) and NCCL (CUDA tensors: the group's backend
decides where the collective buffers live; the search itself runs the cpu kernels on the
mapped shards). A rank that fails (an unreadable shard, non-finite rows) makes every rank
raise :class:`RankFailure` instead of leaving the others waiting: before each collective
the ranks all-reduce a small status vector. Set a ``timeout`` on the process group as the
last line of defence (a rank that dies outright is only noticed by the timeout).

Launch one process per rank, e.g. on two hosts with two ranks each::

    torchrun --nnodes 2 --nproc-per-node 2 --rdzv-backend c10d --rdzv-endpoint HOST:29500 \\
        my_search.py            # calls init_process_group("gloo") then the lines below

    index = rasfast.DistributedThemeIndex.load("ix/")
    ids, scores = index.search(q_ppd, q_emb, K=250_000, k=10, scope="global")
"""
from __future__ import annotations

import hashlib
import json
import pathlib
import threading
from typing import Any, List, Optional, Tuple

import numpy as np
import torch

from . import store as _store
from . import stream as _stream
from .._arrays import kind_of, to_kind
from .theme_index import SCOPES, ThemeIndex, _shard_ranges
from .._threads import follows_width_rule


class RankFailure(RuntimeError):
    """Raised on every rank when the search or load failed on some rank."""


class _Comm:
    """Collectives of one search over ``group``, each preceded by a status all-reduce so a
    local failure becomes an error on every rank instead of a hang."""

    def __init__(self, group=None):
        import torch.distributed as dist
        if not dist.is_available() or not dist.is_initialized():
            raise RuntimeError("DistributedThemeIndex: torch.distributed is not initialised; "
                               "call torch.distributed.init_process_group first (e.g. under "
                               "torchrun)")
        self.dist, self.group = dist, group
        self.rank = dist.get_rank(group)
        self.world = dist.get_world_size(group)
        backend = dist.get_backend(group)
        self.device = (torch.device("cuda", torch.cuda.current_device()) if backend == "nccl"
                       else torch.device("cpu"))

    def check(self, error: Optional[BaseException] = None) -> None:
        status = torch.zeros(self.world, dtype=torch.int32, device=self.device)
        if error is not None:
            status[self.rank] = 1
        self.dist.all_reduce(status, group=self.group)
        failed = status.nonzero().flatten().tolist()
        if not failed:
            return
        if error is not None:
            raise RankFailure(f"DistributedThemeIndex: failed on rank {self.rank}: "
                              f"{type(error).__name__}: {error}") from error
        raise RankFailure(f"DistributedThemeIndex: rank(s) {failed} failed (see their error); "
                          f"rank {self.rank} stops too")

    def sum(self, arr: np.ndarray) -> np.ndarray:
        self.check()
        t = torch.from_numpy(np.ascontiguousarray(arr)).to(self.device)
        self.dist.all_reduce(t, group=self.group)
        return t.cpu().numpy()

    def gather(self, t: torch.Tensor) -> List[torch.Tensor]:
        self.check()
        t = t.contiguous().to(self.device)
        out = [torch.empty_like(t) for _ in range(self.world)]
        self.dist.all_gather(out, t, group=self.group)
        return [o.cpu() for o in out]

    def run(self, fn):
        """fn() on this rank; a local exception is announced to the other ranks."""
        try:
            return fn()
        except RankFailure:
            raise
        except Exception as e:  # noqa: BLE001 - every local failure must reach the others
            self.check(e)
            raise  # unreachable: check raises


def shard_owner(shard: int, world_size: int) -> int:
    """The rank that holds shard ``shard`` (round-robin)."""
    return shard % world_size


class DistributedThemeIndex:
    """The shards of a saved :class:`~rasfast.index.ThemeIndex` held by the ranks of a
    process group; see the module docstring for the assignment rule and the algorithms."""

    # the single-process index's query validation, reused as is (validate once)
    _queries = ThemeIndex._queries
    _search_args = ThemeIndex._search_args
    query_ppd = ThemeIndex.query_ppd

    def __init__(self, comm: _Comm, manifest: dict, shards: List[Tuple[int, int]],
                 local: List[Tuple[int, torch.Tensor, torch.Tensor]], pids: np.ndarray,
                 titles: List[str], texts: List[str], theme_model: Any):
        self._comm = comm
        self.rank, self.world_size = comm.rank, comm.world
        self.shards = shards
        self.local = local  # (shard index, ppd rows, emb rows) of this rank's shards
        self.num_rows = int(manifest["num_rows"])
        self.dim = int(manifest["dim"])
        self.num_themes = manifest.get("num_themes") if manifest["arrays"].get("ppd") else None
        self.normalize_ppd = bool(manifest.get("normalize_ppd", True))
        self.metric = manifest.get("metric", "l2")
        self.encoder_name = manifest.get("encoder")
        self.pids, self.titles, self.texts = pids, titles, texts
        self.theme_model = theme_model
        self._manifest = manifest
        # a process group runs one collective at a time: concurrent searches from several
        # threads of a rank take turns (the ranks must still call search in the same order)
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return self.num_rows

    def __repr__(self) -> str:
        mine = [s for s, _, _ in self.local]
        return (f"DistributedThemeIndex(rows={self.num_rows}, shards={len(self.shards)}, "
                f"rank={self.rank}/{self.world_size}, local shards={mine})")

    @classmethod
    def load(cls, directory, group=None, mmap: bool = True,
             load_theme_model: bool = True) -> "DistributedThemeIndex":
        """Loads (memory-maps) this rank's shards of a saved index; call on every rank."""
        comm = _Comm(group)
        d = pathlib.Path(directory)

        def read():
            m = _store.read_manifest(d)
            n = int(m["num_rows"])
            shards = _shard_ranges([tuple(r) for r in m["shards"]], n)
            if m["arrays"].get("ppd") is None:
                raise ValueError(f"{d}: a dense-only index (no theme vectors) cannot be searched "
                                 "with theme scoping")
            e_entry, p_entry = _store.array_entry(d, m, "emb"), _store.array_entry(d, m, "ppd")
            local = []
            for s, (a, b) in enumerate(shards):
                if shard_owner(s, comm.world) != comm.rank:
                    continue
                ppd = _store.as_torch(_store.read_rows(d, m, p_entry, a, b, mmap), p_entry["dtype"])
                emb = _store.as_torch(_store.read_rows(d, m, e_entry, a, b, mmap), e_entry["dtype"])
                local.append((s, ppd, emb))
            pids = np.array(_store.read_rows(d, m, _store.array_entry(d, m, "pids"), 0, n, mmap))
            titles, texts = _store.passage_columns(d, m)
            tm = m.get("theme_model") or {}
            model = None
            if load_theme_model and tm.get("dir"):
                from ..theme import load_theme_model as _load_tm
                model = _load_tm(d / tm["dir"])
            return cls(comm, m, shards, local, pids, titles, texts, model)

        index = comm.run(read)
        comm.check()  # every rank loaded
        index._check_same_manifest(d)
        return index

    def _check_same_manifest(self, d: pathlib.Path) -> None:
        """Every rank must hold the same committed index: a rank with a stale copy (say,
        without the newest shard) would otherwise return stale results (per_shard) or feed
        mismatched histograms to the collectives (global). One all_gather of a manifest
        fingerprint before the first search; a mismatch raises on every rank."""
        comm = self._comm
        fp = hashlib.sha256(json.dumps(self._manifest, sort_keys=True).encode("utf-8")).digest()
        mine = torch.tensor(list(fp), dtype=torch.uint8)
        meta = torch.tensor([_store.generation_of(self._manifest), self.num_rows,
                             len(self.shards)], dtype=torch.int64)
        prints, metas = comm.gather(mine), comm.gather(meta)
        differ = [r for r in range(comm.world) if not torch.equal(prints[r], prints[0])]
        if differ:
            desc = ", ".join(f"rank {r}: generation {int(m[0])}, {int(m[1])} rows, {int(m[2])} "
                             f"shards" for r, m in enumerate(metas))
            raise ValueError(f"DistributedThemeIndex.load({str(d)!r}): the ranks loaded different "
                             f"indexes (rank(s) {differ} differ from rank 0; {desc}). Every rank "
                             f"must see the same committed index: copy the newest one to each "
                             f"host, or use a shared directory")

    @follows_width_rule
    def search(self, q_ppd, q_emb, K: int, k: int, scope: str = "per_shard",
               theme_weight: float = 0.0):
        """Same arguments and result as :meth:`rasfast.index.ThemeIndex.search` (on every
        rank; call it on every rank with the same arguments). Returns (ids[B, k] global row
        ids, scores[B, k]) like ``q_emb`` (numpy or torch, on q_emb's device)."""
        kind = kind_of(q_emb)
        qe, qp, K, k, scope, w = self._search_args(q_ppd, q_emb, K, k, scope, theme_weight)
        dev = qe.device
        qe, qp = qe.cpu(), qp.cpu()
        B = qe.shape[0]
        if B == 0:
            return (to_kind(torch.empty((0, k), dtype=torch.int64, device=dev), kind),
                    to_kind(torch.empty((0, k), device=dev), kind))
        comm = self._comm
        ip = self.metric == "ip"
        with self._lock:
            if scope == "per_shard":
                sc, ids = comm.run(lambda: self._per_shard(qp, qe, K, k, w))
            else:
                ids, sc = comm.run(lambda: _stream.search_blocks(
                    qp, qe, self._blocks(), self.num_rows, len(self.shards), K, k, w, ip,
                    comm=comm))
            all_sc, all_ids = comm.gather(sc), comm.gather(ids)
        ids, sc = _stream.merge_results(list(zip(all_sc, all_ids)), k)
        return to_kind(ids.to(dev), kind), to_kind(sc.to(dev), kind)

    def _blocks(self) -> List[_stream.Block]:
        out = []
        for s, ppd, emb in self.local:
            a, b = self.shards[s]
            blk = _stream.tensor_blocks(ppd, emb, 0, b - a, b - a, first_index=s)[0]
            blk.start = a  # global row id of the shard's first row
            out.append(blk)
        return out

    def _per_shard(self, qp, qe, K, k, w):
        from ..ops.theme import fused_search_validated
        parts = []
        for s, ppd, emb in self.local:
            a = self.shards[s][0]
            ids, sc = fused_search_validated(qp, qe, ppd, emb, K, k, w, self.metric, "cpu")
            parts.append((sc, torch.where(ids >= 0, ids + a, ids)))
        if not parts:
            B = qe.shape[0]
            return (torch.full((B, k), float("-inf")), torch.full((B, k), -1, dtype=torch.int64))
        ids, sc = _stream.merge_results(parts, k)
        return sc, ids

    def passages(self, ids, scores=None):
        """Search results -> RetrievedPassage lists (every rank holds all passage texts)."""
        return ThemeIndex.passages(self, ids, scores)


__all__ = ["DistributedThemeIndex", "RankFailure", "shard_owner", "SCOPES"]


def main(argv=None) -> int:
    """``torchrun --standalone --nproc-per-node 2 -m rasfast.distributed ix/ --K 250000``:
    searches a saved index with seeded random queries (the same on every rank) and prints
    each rank's load and search times (rank 0 also the top ids of the first query)."""
    import argparse
    import datetime
    import os
    import time

    import torch.distributed as dist
    ap = argparse.ArgumentParser(prog="python -m rasfast.distributed",
                                 description="Search a saved ThemeIndex across torchrun ranks.")
    ap.add_argument("index", help="a directory written by ThemeIndex.save")
    ap.add_argument("--K", type=int, default=250_000)
    ap.add_argument("--k", type=int, default=10)
    ap.add_argument("--B", type=int, default=16, help="random queries per batch")
    ap.add_argument("--scope", choices=SCOPES, default="global")
    ap.add_argument("--theme-weight", type=float, default=0.0)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--backend", default=None, help="gloo | nccl (default: nccl with CUDA, else gloo)")
    ap.add_argument("--timeout", type=float, default=600.0, help="process-group timeout, seconds")
    a = ap.parse_args(argv)
    backend = a.backend or ("nccl" if torch.cuda.is_available() else "gloo")
    if backend == "nccl":
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", 0)))
    dist.init_process_group(backend, timeout=datetime.timedelta(seconds=a.timeout))
    try:
        t = time.perf_counter()
        ix = DistributedThemeIndex.load(a.index, load_theme_model=False)
        load_s = time.perf_counter() - t
        g = torch.Generator().manual_seed(0)
        qp = torch.rand(a.B, ix.num_themes, generator=g)
        qe = torch.rand(a.B, ix.dim, generator=g) - 0.5
        times = []
        for _ in range(a.reps):
            t = time.perf_counter()
            ids, _ = ix.search(qp, qe, a.K, a.k, scope=a.scope, theme_weight=a.theme_weight)
            times.append(time.perf_counter() - t)
        print(f"rank {ix.rank}/{ix.world_size}: shards {[s for s, _, _ in ix.local]}, load "
              f"{load_s:.2f} s, search {', '.join(f'{x:.3f}' for x in times)} s", flush=True)
        if ix.rank == 0:
            print(f"query 0 top ids: {ids[0].tolist()}", flush=True)
    finally:
        dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
