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
import threading
from dataclasses import dataclass
from typing import Callable, List, Optional, Sequence, Tuple

import numpy as np
import torch

from .. import dispatch as _bk
from .._arrays import DTYPE_CODES

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
    """Rows [start, start + rows) of a corpus. ``ppd(slot)`` returns the theme rows and
    ``emb(need, slot)`` the dense rows (a buffer whose rows flagged in ``need`` -- or all
    rows when ``need`` is None -- are valid), both [rows, width] numpy arrays in the storage
    dtype (bfloat16 as uint16 bits) with dtype codes ``ppd_code`` / ``emb_code``; ``slot``
    (0 or 1) picks the read buffer, so the next block can be read while this one is used.
    ``index`` is the block's place in the global row order (its column in the summed tie
    counts). ``from_file``: reads cost I/O, worth overlapping with compute."""
    start: int
    rows: int
    ppd: Optional[Callable[[], np.ndarray]]
    emb: Callable[[Optional[np.ndarray]], np.ndarray]
    ppd_code: int
    emb_code: int
    index: int = 0
    from_file: bool = False


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
            a, b - a, None if ppd is None else (lambda slot, a=a, b=b: tensor_rows(ppd, a, b)),
            lambda need, slot, a=a, b=b: tensor_rows(emb, a, b),
            -1 if ppd is None else DTYPE_CODES[ppd.dtype], DTYPE_CODES[emb.dtype],
            first_index + j))
    return out


# ----------------------------------------------------------------------------- files
def huge_page_array(n: int, dtype) -> np.ndarray:
    """An uninitialised 1-d array in anonymous memory advised to use transparent huge pages:
    a read buffer of hundreds of MB is otherwise first touched with ~4 KiB page faults that
    cost as much as the read itself."""
    import mmap
    dtype = np.dtype(dtype)
    nbytes = max(1, n * dtype.itemsize)
    m = mmap.mmap(-1, nbytes)
    if hasattr(mmap, "MADV_HUGEPAGE"):
        try:
            m.madvise(mmap.MADV_HUGEPAGE)
        except OSError:  # THP unavailable: plain pages
            pass
    return np.frombuffer(m, dtype=dtype, count=n)


class FileRows:
    """Rows of a row-major matrix in a file, read with large sequential ``preadv`` calls
    into reused buffers (bounded memory: the page cache is not part of the process), with
    ``posix_fadvise`` read-ahead of the next block.

    One FileRows (one open file) serves any number of concurrent searches: ``preadv`` at an
    offset is thread-safe, and each search reads into its own pair of buffers, checked out
    of a pool by :meth:`session` for the length of the search and returned after, so
    buffers are reused across searches but never shared by two at once.
    """

    def __init__(self, path: str, offset: int, width: int, file_dtype: np.dtype, code: int):
        self.path, self.offset, self.width = path, int(offset), int(width)
        self.dtype, self.code = np.dtype(file_dtype), code
        self.row_bytes = self.width * self.dtype.itemsize
        self.fd = os.open(path, os.O_RDONLY)
        self._pool: List[List[np.ndarray]] = []
        self._pool_lock = threading.Lock()
        if hasattr(os, "posix_fadvise"):
            os.posix_fadvise(self.fd, 0, 0, os.POSIX_FADV_SEQUENTIAL)

    def session(self) -> "ReadSession":
        with self._pool_lock:
            bufs = self._pool.pop() if self._pool else [np.empty(0, self.dtype), np.empty(0, self.dtype)]
        return ReadSession(self, bufs)

    def _give_back(self, bufs: List[np.ndarray]) -> None:
        with self._pool_lock:
            if len(self._pool) < 4:  # a few idle pairs: concurrency beyond that allocates
                self._pool.append(bufs)

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

    def _pread(self, out: np.ndarray, start: int) -> None:
        view = memoryview(out.reshape(-1).view(np.uint8))
        pos, off = 0, self.offset + start * self.row_bytes
        while pos < len(view):
            got = os.preadv(self.fd, [view[pos:pos + (1 << 30)]], off + pos)
            if got <= 0:
                raise ValueError(f"{self.path}: truncated (short read at byte {off + pos})")
            pos += got



class ReadSession:
    """One search's reads of a :class:`FileRows`: two buffers of its own (``slot`` 0 and
    1: one is filled while the other is searched). ``close()`` returns them to the pool."""

    def __init__(self, rows: FileRows, bufs: List[np.ndarray]):
        self.rows, self._bufs = rows, bufs
        self.code = rows.code

    def close(self) -> None:
        if self._bufs is not None:
            self.rows._give_back(self._bufs)
            self._bufs = None

    def will_need(self, start: int, stop: int) -> None:
        self.rows.will_need(start, stop)

    def _buffer(self, rows: int, slot: int) -> np.ndarray:
        width = self.rows.width
        if self._bufs[slot].size < rows * width:
            self._bufs[slot] = huge_page_array(rows * width, self.rows.dtype)
        return self._bufs[slot][:rows * width].reshape(rows, width)

    def read(self, start: int, stop: int, need: Optional[np.ndarray] = None,
             slot: int = 0) -> np.ndarray:
        """Rows [start, stop) into this session's buffer ``slot``; with ``need``, only runs
        of needed rows (the others are left stale: callers never read them)."""
        out = self._buffer(stop - start, slot)
        if need is None or need.mean() > _WHOLE_BLOCK:
            self.rows._pread(out, start)
            return out
        rows = np.flatnonzero(need)
        if rows.size == 0:
            return out
        gaps = np.flatnonzero(np.diff(rows) > _GAP_ROWS)
        firsts = np.concatenate([[rows[0]], rows[gaps + 1]])
        lasts = np.concatenate([rows[gaps], [rows[-1]]])
        for a, b in zip(firsts.tolist(), lasts.tolist()):
            self.rows._pread(out[a:b + 1], start + a)
        return out


def file_blocks(ppd: Optional[ReadSession], emb: ReadSession, start: int, stop: int, rows: int,
                first_index: int = 0) -> List[Block]:
    """Blocks read from files (two buffers each, see Block); each read also advises the
    kernel to fetch the block after it."""
    out = []
    for j, a in enumerate(range(start, stop, rows)):
        b = min(stop, a + rows)
        nxt = (b, min(stop, b + rows))

        def read_ppd(slot, a=a, b=b, nxt=nxt):
            ppd.will_need(*nxt)
            return ppd.read(a, b, None, slot)

        def read_emb(need, slot, a=a, b=b, nxt=nxt):
            emb.will_need(*nxt)
            return emb.read(a, b, need, slot)

        out.append(Block(a, b - a, None if ppd is None else read_ppd, read_emb,
                         -1 if ppd is None else ppd.code, emb.code, first_index + j,
                         from_file=True))
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


def _ahead(n: int, load: Callable[[int, int], np.ndarray], threaded: bool):
    """Yields (j, load(j, slot)) for j < n; when ``threaded``, block j + 1 is loaded into the
    other slot by a helper thread while the caller works on block j (reads and the compiled
    kernels release the GIL, so disk and cores work at the same time)."""
    if not threaded or n < 2:
        for j in range(n):
            yield j, load(j, 0)
        return
    from concurrent.futures import ThreadPoolExecutor
    with ThreadPoolExecutor(1) as ex:
        fut = ex.submit(load, 0, 0)
        for j in range(n):
            data = fut.result()
            if j + 1 < n:
                fut = ex.submit(load, j + 1, (j + 1) % 2)
            yield j, data


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
    B, nb = q_emb.shape[0], len(blocks)
    qe = q_emb.float().contiguous().numpy()
    qp = None if q_ppd is None else q_ppd.float().contiguous().numpy()
    all_in = K >= total_rows
    need_keys = not all_in or w != 0.0
    threaded = any(b.from_file for b in blocks)
    cache = {}

    def scan(j: int, ppd: Optional[np.ndarray]) -> np.ndarray:
        if not need_keys:  # calloc'd, never touched: the scoring pass reads keys only if w > 0
            return np.zeros((B, blocks[j].rows), dtype=np.uint32)
        kj = np.empty((B, blocks[j].rows), dtype=np.uint32)
        C.theme_scan_keys(qp, ppd, blocks[j].ppd_code, ip, kj)
        return kj

    def each_keys():
        """(j, keys of block j): cached, or scanned from the (read-ahead) theme rows."""
        if len(cache) == nb:
            yield from cache.items()
            return
        if not need_keys:
            for j in range(nb):
                yield j, scan(j, None)
            return
        for j, ppd in _ahead(nb, lambda j, slot: blocks[j].ppd(slot), threaded):
            kj = scan(j, ppd)
            if keep_keys:
                cache[j] = kj
            yield j, kj

    thr = np.zeros(B, dtype=np.uint32)
    allowed = np.zeros((B, max(total_blocks, 1)), dtype=np.int64)
    if not all_in:
        # the theme matrix is read here (once when the keys are kept)
        rank = np.full(B, K, dtype=np.int64)
        hist = np.zeros((B, DIGITS), dtype=np.int64)
        for _, kj in each_keys():
            C.theme_key_histogram(kj, thr, 0, hist)
        hi, below_hi = _digit_of_rank(comm.sum(hist), rank)
        hist = np.zeros((B, DIGITS), dtype=np.int64)
        for _, kj in each_keys():
            C.theme_key_histogram(kj, hi, 1, hist)
        lo, below_lo = _digit_of_rank(comm.sum(hist), rank - below_hi)
        del hist
        thr = (hi << np.uint32(16)) | lo
        need_eq = rank - below_hi - below_lo  # >= 1 rows tied at thr are in scope
        counts = np.zeros((B, max(total_blocks, 1)), dtype=np.int64)
        zero, cnt, last = np.zeros(B, np.int64), np.empty(B, np.int64), np.empty(B, np.int64)
        for j, kj in each_keys():
            C.theme_tie_cut(kj, thr, zero, cnt, last)
            counts[:, blocks[j].index] = cnt
        counts = comm.sum(counts)
        before = np.cumsum(counts, axis=1) - counts  # ties in earlier blocks (row order)
        allowed = np.clip(need_eq[:, None] - before, 0, counts)

    cut_all = np.full(B, 1 if all_in else 0, dtype=np.uint8)

    def cut(j: int, kj: np.ndarray):
        """This block's cut (last tied row in scope per query) and, for file blocks, the
        dense rows some query needs."""
        last = np.full(B, -1, dtype=np.int64)
        if all_in:
            return last, None
        cnt = np.empty(B, np.int64)
        C.theme_tie_cut(kj, thr, np.ascontiguousarray(allowed[:, blocks[j].index]), cnt, last)
        if not blocks[j].from_file:
            return last, None
        ar = np.arange(blocks[j].rows)
        inside = (kj < thr[:, None]) | ((kj == thr[:, None]) & (ar[None, :] <= last[:, None]))
        return last, inside.any(axis=0)

    def score(j: int, kj: np.ndarray, last: np.ndarray, emb: np.ndarray):
        ids = np.empty((B, k), dtype=np.int64)
        sc = np.empty((B, k), dtype=np.float32)
        C.theme_score_cut(qe, emb, blocks[j].emb_code, kj, thr, last, cut_all, k, w, ip, ids, sc)
        ids = np.where(ids >= 0, ids + blocks[j].start, ids)
        return torch.from_numpy(sc), torch.from_numpy(ids)

    parts = []
    if len(cache) == nb or not need_keys:
        # keys at hand: every block's cut first, then the dense rows read ahead of scoring
        keys = dict(each_keys())
        cuts = {j: cut(j, kj) for j, kj in keys.items()}
        load = lambda j, slot: blocks[j].emb(cuts[j][1], slot)  # noqa: E731
        for j, emb in _ahead(nb, load, threaded):
            parts.append(score(j, keys[j], cuts[j][0], emb))
    else:  # keys recomputed block by block (over the budget to keep them)
        for j, kj in each_keys():
            last, need = cut(j, kj)
            parts.append(score(j, kj, last, blocks[j].emb(need, 0)))
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
        s = torch.cat([s, torch.full((B, k - s.shape[1]), float("-inf"), device=s.device)], dim=1)
        i = torch.cat([i, torch.full((B, k - i.shape[1]), -1, dtype=torch.int64, device=i.device)],
                      dim=1)
    i = torch.where(torch.isneginf(s), torch.full_like(i, -1), i)
    return i, s
