"""Theme-scoped search over a corpus held as row blocks: streamed files, shards of ranks.

The fused cpu kernel (``ops.theme``) searches one buffer -- an in-memory matrix or a
memory-mapped file alike. When the corpus is not one buffer (a file larger than memory
read in bounded blocks, the shards of a :class:`rasfast.distributed.DistributedThemeIndex`
spread over ranks), the same kernel is run at its seams, block by block:

1. keys: ``theme_scan_keys`` on each block's theme rows (pass 1 of the kernel, same code);
2. cut: the exact K-th smallest key over all blocks by two rounds of 16-bit digit
   histograms (``theme_key_histogram``) summed over blocks -- and over ranks, through
   ``comm.sum`` (an all-reduce); then the rows tied at that key are counted per block
   (``theme_tie_cut``), summed the same way, and handed out in global row order, so the
   tie rule (lower row id first, exactly K rows in scope) is the kernel's;
3. score: ``theme_score_cut`` runs the kernel's pass 2 on each block with its cut (same
   scoring code), and the per-block top-k lists are merged by (score desc, id asc).

Same keys, same cut, same scores: the result is bit-identical to the fused kernel on the
whole matrix, whatever the blocks. Memory: the per-block buffers plus the [B, rows] uint32
keys, kept for the whole range when they fit the budget (the theme matrix is then read
once per batch of queries) and recomputed per round otherwise (read three times).
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Callable, List, Optional, Sequence, Tuple

import numpy as np
import torch

from . import dispatch as _bk
from ._arrays import DTYPE_CODES

DIGITS = 1 << 16
#: Row runs closer than this are read together when only some dense rows are needed.
_GAP_ROWS = 16
#: Above this fraction of needed rows a block's dense rows are read whole.
_WHOLE_BLOCK = 0.25


class LocalComm:
    """Block statistics in one process: nothing to combine."""

    def sum(self, arr: np.ndarray) -> np.ndarray:
        return arr


LOCAL = LocalComm()


@dataclass
class Block:
    """Rows [start, start + rows) of a corpus. ``ppd()`` returns the theme rows and
    ``emb(need)`` the dense rows (a buffer whose rows flagged in ``need`` -- or all rows when
    ``need`` is None -- are valid), both [rows, width] numpy arrays in the storage dtype
    (bfloat16 as uint16 bits) with dtype codes ``ppd_code`` / ``emb_code``. ``index`` is the
    block's place in the global row order (its column in the summed tie counts)."""
    start: int
    rows: int
    ppd: Optional[Callable[[], np.ndarray]]
    emb: Callable[[Optional[np.ndarray]], np.ndarray]
    ppd_code: int
    emb_code: int
    index: int = 0
    partial_emb: bool = False  # emb(need) reads only the needed rows


def tensor_rows(t: torch.Tensor, start: int, stop: int) -> np.ndarray:
    """Zero-copy numpy view of rows [start, stop) of a CPU matrix (bfloat16 as uint16)."""
    part = t[start:stop]
    if t.dtype == torch.bfloat16:
        return part.view(torch.int16).numpy().view(np.uint16)
    return part.numpy()


def tensor_blocks(ppd: Optional[torch.Tensor], emb: torch.Tensor, start: int, stop: int,
                  rows: int, first_index: int = 0) -> List[Block]:
    """Blocks of ``rows`` rows over [start, stop) of in-memory or memory-mapped matrices."""
    out = []
    for j, a in enumerate(range(start, stop, rows)):
        b = min(stop, a + rows)
        out.append(Block(
            a, b - a, None if ppd is None else (lambda a=a, b=b: tensor_rows(ppd, a, b)),
            lambda need, a=a, b=b: tensor_rows(emb, a, b),
            -1 if ppd is None else DTYPE_CODES[ppd.dtype], DTYPE_CODES[emb.dtype],
            first_index + j))
    return out


# ----------------------------------------------------------------------------- files
class FileRows:
    """Rows of a row-major matrix in a file, read with large sequential ``preadv`` calls
    into a reused buffer (bounded memory: the page cache is not part of the process), with
    ``posix_fadvise`` read-ahead of the next block."""

    def __init__(self, path: str, offset: int, width: int, file_dtype: np.dtype, code: int):
        self.path, self.offset, self.width = path, int(offset), int(width)
        self.dtype, self.code = np.dtype(file_dtype), code
        self.row_bytes = self.width * self.dtype.itemsize
        self.fd = os.open(path, os.O_RDONLY)
        self._buf = np.empty(0, dtype=self.dtype)
        if hasattr(os, "posix_fadvise"):
            os.posix_fadvise(self.fd, 0, 0, os.POSIX_FADV_SEQUENTIAL)

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def __del__(self):
        self.close()

    def will_need(self, start: int, stop: int) -> None:
        if hasattr(os, "posix_fadvise") and stop > start:
            os.posix_fadvise(self.fd, self.offset + start * self.row_bytes,
                             (stop - start) * self.row_bytes, os.POSIX_FADV_WILLNEED)

    def _buffer(self, rows: int) -> np.ndarray:
        if self._buf.size < rows * self.width:
            self._buf = np.empty(rows * self.width, dtype=self.dtype)
        return self._buf[:rows * self.width].reshape(rows, self.width)

    def _pread(self, out: np.ndarray, start: int) -> None:
        view = memoryview(out.reshape(-1).view(np.uint8))
        pos, off = 0, self.offset + start * self.row_bytes
        while pos < len(view):
            got = os.preadv(self.fd, [view[pos:pos + (1 << 30)]], off + pos)
            if got <= 0:
                raise ValueError(f"{self.path}: truncated (short read at byte {off + pos})")
            pos += got

    def read(self, start: int, stop: int, need: Optional[np.ndarray] = None) -> np.ndarray:
        """Rows [start, stop) into the reused buffer; with ``need``, only runs of needed rows
        (the others are left stale: callers never read them)."""
        out = self._buffer(stop - start)
        if need is None or need.mean() > _WHOLE_BLOCK:
            self._pread(out, start)
            return out
        rows = np.flatnonzero(need)
        if rows.size == 0:
            return out
        gaps = np.flatnonzero(np.diff(rows) > _GAP_ROWS)
        firsts = np.concatenate([[rows[0]], rows[gaps + 1]])
        lasts = np.concatenate([rows[gaps], [rows[-1]]])
        for a, b in zip(firsts.tolist(), lasts.tolist()):
            self._pread(out[a:b + 1], start + a)
        return out


def file_blocks(ppd: Optional[FileRows], emb: FileRows, start: int, stop: int, rows: int,
                first_index: int = 0) -> List[Block]:
    """Blocks read from files; each read also advises the kernel to fetch the next block."""
    out = []
    for j, a in enumerate(range(start, stop, rows)):
        b = min(stop, a + rows)
        nxt = (b, min(stop, b + rows))

        def read_ppd(a=a, b=b, nxt=nxt):
            ppd.will_need(*nxt)
            return ppd.read(a, b)

        def read_emb(need, a=a, b=b, nxt=nxt):
            emb.will_need(*nxt)
            return emb.read(a, b, need)

        out.append(Block(a, b - a, None if ppd is None else read_ppd, read_emb,
                         -1 if ppd is None else ppd.code, emb.code, first_index + j,
                         partial_emb=True))
    return out


# ----------------------------------------------------------------------------- search
def _digit_of_rank(hist: np.ndarray, rank: np.ndarray) -> Tuple[np.ndarray, np.ndarray]:
    """Per query: the digit holding the rank-th (1-based) key and the count below it."""
    c = np.cumsum(hist, axis=1)
    d = np.argmax(c >= rank[:, None], axis=1)
    below = np.take_along_axis(c, d[:, None], 1)[:, 0] - np.take_along_axis(hist, d[:, None], 1)[:, 0]
    return d.astype(np.uint32), below


def keys_bytes(B: int, rows: int) -> int:
    return 4 * B * rows


def search_blocks(q_ppd: Optional[torch.Tensor], q_emb: torch.Tensor, blocks: Sequence[Block],
                  total_rows: int, total_blocks: int, K: int, k: int, w: float, ip: bool,
                  comm=LOCAL, keep_keys: bool = True) -> Tuple[torch.Tensor, torch.Tensor]:
    """Exact theme-scoped top-k over the union of ``blocks`` of all processes of ``comm``
    (this process's blocks here; ``total_rows``/``total_blocks`` count every process's).

    ``q_ppd``/``q_emb`` are validated float32 CPU queries. Returns this process's merged
    (ids[B, k], scores[B, k]) with global row ids; merging the processes' lists gives the
    result. Every process must call this with the same queries and arguments.
    """
    C = _bk.cpu_module()
    B = q_emb.shape[0]
    qe = q_emb.float().contiguous().numpy()
    qp = None if q_ppd is None else q_ppd.float().contiguous().numpy()
    all_in = K >= total_rows
    need_keys = not all_in or w != 0.0
    cache = {}

    def keys_of(j: int) -> np.ndarray:
        if j in cache:
            return cache[j]
        blk = blocks[j]
        if not need_keys:
            kj = np.zeros((B, blk.rows), dtype=np.uint32)  # calloc'd: never touched (w == 0)
        else:
            kj = np.empty((B, blk.rows), dtype=np.uint32)
            C.theme_scan_keys(qp, blk.ppd(), blk.ppd_code, ip, kj)
        if keep_keys:
            cache[j] = kj
        return kj

    thr = np.zeros(B, dtype=np.uint32)
    allowed = np.zeros((B, max(total_blocks, 1)), dtype=np.int64)
    if not all_in:
        rank = np.full(B, K, dtype=np.int64)
        hist = np.zeros((B, DIGITS), dtype=np.int64)
        for j in range(len(blocks)):
            C.theme_key_histogram(keys_of(j), thr, 0, hist)
        hi, below_hi = _digit_of_rank(comm.sum(hist), rank)
        hist = np.zeros((B, DIGITS), dtype=np.int64)
        for j in range(len(blocks)):
            C.theme_key_histogram(keys_of(j), hi, 1, hist)
        lo, below_lo = _digit_of_rank(comm.sum(hist), rank - below_hi)
        thr = (hi << np.uint32(16)) | lo
        need_eq = rank - below_hi - below_lo  # >= 1 rows tied at thr are in scope
        counts = np.zeros((B, max(total_blocks, 1)), dtype=np.int64)
        zero, cnt, last = np.zeros(B, np.int64), np.empty(B, np.int64), np.empty(B, np.int64)
        for j, blk in enumerate(blocks):
            C.theme_tie_cut(keys_of(j), thr, zero, cnt, last)
            counts[:, blk.index] = cnt
        counts = comm.sum(counts)
        before = np.cumsum(counts, axis=1) - counts  # ties in earlier blocks (row order)
        allowed = np.clip(need_eq[:, None] - before, 0, counts)

    cut_all = np.full(B, 1 if all_in else 0, dtype=np.uint8)
    parts = []
    for j, blk in enumerate(blocks):
        kj = keys_of(j)
        last = np.full(B, -1, dtype=np.int64)
        if not all_in:
            cnt = np.empty(B, np.int64)
            C.theme_tie_cut(kj, thr, np.ascontiguousarray(allowed[:, blk.index]), cnt, last)
        need = None
        if blk.partial_emb and not all_in:
            ar = np.arange(blk.rows)
            inside = (kj < thr[:, None]) | ((kj == thr[:, None]) & (ar[None, :] <= last[:, None]))
            need = inside.any(axis=0)
        emb = blk.emb(need)
        ids = np.empty((B, k), dtype=np.int64)
        sc = np.empty((B, k), dtype=np.float32)
        C.theme_score_cut(qe, emb, blk.emb_code, kj, thr, last, cut_all, k, w, ip, ids, sc)
        ids = np.where(ids >= 0, ids + blk.start, ids)
        parts.append((torch.from_numpy(sc), torch.from_numpy(ids)))
        cache.pop(j, None) if not keep_keys else None
    if not parts:
        return (torch.full((B, k), -1, dtype=torch.int64), torch.full((B, k), float("-inf")))
    return merge_results(parts, k)


def merge_results(parts, k: int) -> Tuple[torch.Tensor, torch.Tensor]:
    """Merges per-block/shard/rank (scores[B, k_s], ids[B, k_s]) lists into one top-k per
    query by (score desc, id asc); padding (-inf / -1) sorts last. Returns (ids, scores)."""
    s = torch.cat([p[0].float() for p in parts], dim=1)
    i = torch.cat([p[1].long() for p in parts], dim=1)
    big = torch.iinfo(torch.int64).max
    key_ids = torch.where(i < 0, torch.full_like(i, big), i)
    by_id = torch.argsort(key_ids, dim=1, stable=True)
    s, i = torch.gather(s, 1, by_id), torch.gather(i, 1, by_id)
    order = torch.sort(s, dim=1, descending=True, stable=True)[1][:, :k]
    s, i = torch.gather(s, 1, order), torch.gather(i, 1, order)
    if s.shape[1] < k:
        B = s.shape[0]
        s = torch.cat([s, torch.full((B, k - s.shape[1]), float("-inf"))], dim=1)
        i = torch.cat([i, torch.full((B, k - i.shape[1]), -1, dtype=torch.int64)], dim=1)
    i = torch.where(torch.isneginf(s), torch.full_like(i, -1), i)
    return i, s
