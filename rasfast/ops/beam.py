"""triple_beam_search: GEAR's diverse beam search over a graph of triples (DESIGN.md s.4).

Batched: many queries, each with its own seeds, in one call. Every backend implements
the same total order (rasfast/reference/beam.py states it), so all return identical
sequences: within a beam, candidates rank by (value desc, triple id asc); globally, by
(decayed value desc, triple id asc, beam index asc).
"""
from __future__ import annotations

import functools
import math
import os as _os
import numbers
from dataclasses import dataclass
from typing import List, Optional

import numpy as np
import torch

from .. import dispatch as _bk
from .._arrays import (device_guard, DTYPE_CODES, as_tensor, cpu_buffer, cpu_out, cuda_stream, device_ptr,
                       kind_of, to_kind)
from .._validate import (check_choice, check_float, check_int, check_int_arg,
                         check_rank, check_same_device)
from ..reference import beam as _ref
from .._threads import follows_width_rule
from ._deferred import (VALIDATE, Deferred, Unchecked, check_ids, check_ptr, is_host,
                        stream_capturing, to_device)
from ._library import define, traced


@dataclass
class BeamResult:
    """Final beams of every query, best first.

    Attributes:
        sequences: int64 [B, b, l] triple ids, -1 padded (beyond ``num_beams[i]`` beams or
            ``lengths[i]`` positions).
        scores: float32 [B, b] beam scores (the decayed cumulative values), -inf padded.
        lengths: int64 [B] length of query i's beams (0 when it had no seeds; < max_len
            when no beam could extend further).
        num_beams: int64 [B] number of beams of query i (<= beam_width).
    All four are the caller's kind (numpy or torch, as ``q_emb``).
    """

    sequences: object
    scores: object
    lengths: object
    num_beams: object

    def _np(self):
        def host(x):
            return x.detach().cpu().numpy() if isinstance(x, torch.Tensor) else np.asarray(x)
        return host(self.sequences), host(self.lengths), host(self.num_beams)

    def _like(self, arr: np.ndarray):
        if isinstance(self.sequences, torch.Tensor):
            return torch.from_numpy(arr).to(self.sequences.device)
        return arr

    def __len__(self) -> int:
        return int(self.sequences.shape[0])

    def flatten_triples(self, i: int):
        """Query i's triples breadth first (all first triples, then all second triples, ...),
        unique, first occurrence kept. int64, the caller's kind."""
        return self._like(self._flatten(i, *self._np()))

    def flatten_passages(self, i: int, passage_ids):
        """Query i's passages: :meth:`flatten_triples` mapped through ``passage_ids[n]``
        (an int array, or an object with ``.passage_ids`` such as a TripleGraph), unique,
        first occurrence kept."""
        pids = _passage_table(passage_ids)
        return self._like(self._map_unique(self._flatten(i, *self._np()), pids))

    def flatten_triples_batch(self) -> List[object]:
        """:meth:`flatten_triples` for every query (a list of B arrays)."""
        seqs, lengths, counts = self._np()
        return [self._like(self._flatten(i, seqs, lengths, counts)) for i in range(len(self))]

    def flatten_passages_batch(self, passage_ids) -> List[object]:
        """:meth:`flatten_passages` for every query (a list of B arrays)."""
        pids = _passage_table(passage_ids)
        seqs, lengths, counts = self._np()
        return [self._like(self._map_unique(self._flatten(i, seqs, lengths, counts), pids))
                for i in range(len(self))]

    def _flatten(self, i, seqs, lengths, counts) -> np.ndarray:
        i = check_int_arg(i, "i", 0, len(self) - 1, "the number of queries - 1")
        k, length = int(counts[i]), int(lengths[i])
        order = seqs[i, :k, :length].T.reshape(-1)  # position-major = breadth first
        _, first = np.unique(order, return_index=True)
        return order[np.sort(first)].astype(np.int64)

    @staticmethod
    def _map_unique(triples: np.ndarray, pids: np.ndarray) -> np.ndarray:
        if len(triples) and int(triples.max()) >= len(pids):
            raise ValueError(f"passage_ids: has {len(pids)} entries but the beams hold triple "
                             f"id {int(triples.max())}")
        mapped = pids[triples]
        _, first = np.unique(mapped, return_index=True)
        return mapped[np.sort(first)].astype(np.int64)


def _passage_table(passage_ids) -> np.ndarray:
    if not isinstance(passage_ids, (np.ndarray, torch.Tensor)) and hasattr(passage_ids, "passage_ids"):
        passage_ids = passage_ids.passage_ids
    t = as_tensor(passage_ids, "passage_ids")
    check_int(t, "passage_ids")
    check_rank(t, "passage_ids", 1, "[n]")
    return t.detach().cpu().numpy()


@follows_width_rule
def triple_beam_search(graph, triple_emb, q_emb, seeds, beam_width: int = 10, max_len: int = 2,
                       gamma: Optional[float] = None, max_neighbors: Optional[int] = None,
                       scoring: str = "sum", encoder=None, texts=None,
                       backend: str = "auto", validate: str = "auto") -> BeamResult:
    """GEAR's diverse triple beam search (Algorithm 1), batched over queries.

    Args:
        graph: the triple adjacency as CSR: a pair ``(indptr[n+1], indices[nnz])`` of int32/
            int64 arrays, or an object with ``.indptr`` and ``.indices`` (a TripleGraph).
            Neighbour lists must be sorted ascending without duplicates (checked on the rows
            the search reads); ``indptr`` is checked in full: on the host for numpy arrays
            (once per graph object such as a TripleGraph), and once per device tensor (one
            host read on its first search; not repeated unless the tensor changes).
        triple_emb: float32/float16/bfloat16 [n, D] triple embeddings (rows read by the
            search must be finite). May be None with ``scoring="text"``.
        q_emb: [B, D] query embeddings (any float dtype; used in float32).
        seeds: initial triples per query: a list of B int arrays (or lists), a 2-D int array
            [B, S], or the tuple ``(ptr[B+1], ids)``. Duplicates count once. Device tensors
            are checked and de-duplicated on the device (backend "cuda": no host sync).
        beam_width: b >= 1 beams kept per step.
        max_len: l >= 1, the maximum sequence length.
        gamma: diversity gamma > 0; the n-th candidate of a beam is multiplied by
            exp(-min(n, gamma)/gamma). Default 2 * beam_width (as GEAR).
        max_neighbors: keep only the best this many candidates per beam expansion (ranked by
            value, ties by lower id); None keeps all.
        scoring: "sum" (cosine with the sum of the sequence's triple embeddings, all
            backends) or "text" (cosine with ``encoder.encode(" ".join(texts))``, exact
            GEAR, a slow Python path; backend "auto" or "torch" only).
        encoder, texts: for ``scoring="text"``: an Encoder (``.encode(list[str])``) and the
            n triple texts (default ``graph.texts``).
        backend: "auto" | "cpu" | "cuda" | "triton" | "torch". cpu: C++/OpenMP over
            queries. cuda: one block per query, on-chip selection; it keeps at most
            min(max_neighbors, ceil(gamma) + b) candidates per beam in shared memory and
            raises ValueError when that (or b * max_len) exceeds its limit. triton: Triton
            candidate scoring with the reference's selection logic.
        validate: "auto" (= "full"): every value the search reads is checked (on cuda by
            the kernel, read with its error flag: the call's one host synchronisation).
            "none": backend cuda does not read the flag, so a search has no host
            synchronisation (after a device CSR's first search, which reads its offsets once)
            and can be captured in a CUDA graph; bad neighbour or seed ids and non-finite rows
            then give an unspecified result, never an out-of-bounds access (the kernel skips
            them; seed offsets reach it clamped). Other backends check as under "auto".
            Captured with a device CSR no search checked before (torch.compile(
            mode="reduce-overhead") captures on copies of the inputs), the offsets are not
            read either: they reach the kernel clamped too. A captured search needs backend
            "cuda" and validate "none" (ValueError otherwise).

    Returns:
        :class:`BeamResult` (sequences, scores, lengths, num_beams), q_emb's kind.

    Under ``torch.compile``/``torch.export`` (scoring "sum", torch tensors) the call is one
    operator, ``torch.ops.rasfast.triple_beam_search``: the graph as a pair of tensors (or
    an object holding two), the seeds as a tuple ``(ptr, ids)`` of tensors or a 2-D tensor.
    """
    if scoring == "sum" and isinstance(q_emb, torch.Tensor) and traced(q_emb, triple_emb):
        return _traced_search(graph, triple_emb, q_emb, seeds, beam_width, max_len, gamma,
                              max_neighbors, backend, validate)
    return _triple_beam_search(graph, triple_emb, q_emb, seeds, beam_width, max_len, gamma,
                               max_neighbors, scoring, encoder, texts, backend, validate)


def _triple_beam_search(graph, triple_emb, q_emb, seeds, beam_width, max_len, gamma,
                        max_neighbors, scoring, encoder, texts, backend, validate="auto") -> BeamResult:
    """The eager op (and the kernel of ``torch.ops.rasfast.triple_beam_search``)."""
    kind = kind_of(q_emb)
    scoring = check_choice(scoring, "scoring", ("sum", "text"))
    validate = check_choice(validate, "validate", VALIDATE)
    q = as_tensor(q_emb, "q_emb")
    check_float(q, "q_emb")
    check_rank(q, "q_emb", 2, "[B, D]")
    dev = q.device
    # checks of device values are read once, after the kernel, with its error flag
    # (rasfast/ops/_deferred.py); the non-CUDA backends read them before they run
    deferred = Deferred()
    if scoring == "sum" or triple_emb is not None:
        emb = as_tensor(triple_emb, "triple_emb")
        check_float(emb, "triple_emb")
        check_rank(emb, "triple_emb", 2, "[n, D]")
        if emb.shape[1] != q.shape[1]:
            raise ValueError(f"q_emb: dim 1 must equal triple_emb's D ({emb.shape[1]}), "
                             f"got shape {tuple(q.shape)}")
        check_same_device(triple_emb=emb, q_emb=q)
        n = emb.shape[0]
    else:
        emb, n = None, None
    indptr, indices, max_deg = _graph(graph, n, dev, validate)
    n = len(indptr) - 1
    b = check_int_arg(beam_width, "beam_width", 1)
    L = check_int_arg(max_len, "max_len", 1)
    if gamma is None:
        gamma = 2.0 * b
    if isinstance(gamma, bool) or not isinstance(gamma, numbers.Real):
        raise TypeError(f"gamma: expected a number, got {type(gamma).__name__}")
    gamma = float(gamma)
    if not (math.isfinite(gamma) and gamma > 0):
        raise ValueError(f"gamma: must be a finite number > 0, got {gamma}")
    if max_neighbors is not None:
        max_neighbors = check_int_arg(max_neighbors, "max_neighbors", 1)
    decay = _decay_table(gamma, min(math.ceil(gamma), max_deg))
    args = dict(n=n, b=b, L=L, max_neighbors=max_neighbors, decay=decay, max_deg=max_deg,
                decay_key=(gamma, len(decay)))   # what the table is a function of
    be = "torch" if scoring == "text" else _bk.resolve(
        backend, dev, "triple_beam_search", cuda_limit=_cuda_smem_limit(emb.shape[1], args))
    # the cuda kernel takes device seeds as they are: it flags bad ids and drops repeats
    seed_ptr, seed_ids = _seeds(seeds, q.shape[0], n, dev, deferred, raw_device=be == "cuda")
    qf = q.float().contiguous()
    if be == "cuda":   # the kernel computes |q| and flags a non-finite one (no pass here)
        qnorm = None
    else:
        qnorm = _ref.sqrt_rn((qf * qf).sum(dim=1))
        if qnorm.numel():  # NaN/inf in q, or an overflow: one flag (the message costs a read then)
            deferred.add([~torch.isfinite(qnorm).all()], lambda v: _q_error(qf) if v[0] else None)

    if scoring == "text":
        if backend not in ("auto", "torch"):
            raise ValueError(f"backend: scoring='text' runs only on the torch path "
                             f"('auto' or 'torch'), got {backend!r}")
        deferred.raise_now()
        scorer = _text_scorer(encoder, texts, graph, n, qf, qnorm)
        out = _search_torch(indptr, indices, seed_ptr, seed_ids, scorer, args)
    else:
        emb = emb.contiguous()
        if be == "cuda":
            out = _cuda(indptr, indices, emb, qf, qnorm, seed_ptr, seed_ids, args, deferred,
                        read_flag=validate != "none")
        else:
            if stream_capturing(dev):
                # their checks and selection read the device (deferred.raise_now, the
                # reference's data-dependent ops): only the cuda kernel can be captured
                raise ValueError(f"backend: a search captured in a CUDA graph needs backend "
                                 f"'cuda' (with validate='none'), got {be!r} (from {backend!r})")
            deferred.raise_now()
            out = _IMPLS[be](indptr, indices, emb, qf, qnorm, seed_ptr, seed_ids, args)
    return BeamResult(*(to_kind(t, kind) for t in out))


def _q_error(qf: torch.Tensor) -> ValueError:
    if not bool(torch.isfinite(qf).all()):  # only once the flag said something is wrong
        return ValueError("q_emb: contains NaN or infinite values")
    return ValueError("q_emb: a query's squared norm overflows float32")


def _cuda_smem_limit(D: int, a) -> Optional[str]:
    """The CUDA search keeps its candidate lists on chip: the limit these settings exceed
    (auto then falls back to triton), or None."""
    if _bk.cuda_attr("beam_search_smem") is None:
        return None
    # the kernel's plan reads RASFAST_BEAM_COMBINED (a benchmark knob), so it is in the key
    return _smem_limit(a["n"], D, a["b"], a["L"], a["max_neighbors"] or 0, len(a["decay"]),
                       a["max_deg"], _os.environ.get("RASFAST_BEAM_COMBINED"))


@functools.lru_cache(maxsize=256)
def _smem_limit(n, D, b, L, max_nb, decay_len, max_deg, _combined) -> Optional[str]:
    """_cuda_smem_limit's answer, once per setting (the plan's pybind11 call and the module
    lookups were ~3 us of each GPU call's host path)."""
    need_fn, cap = _bk.cuda_attr("beam_search_smem"), _bk.cuda_attr("beam_max_smem")
    if need_fn is None or cap is None:
        return None
    need = need_fn(n, D, b, L, max_nb, decay_len, max_deg)
    if need <= cap:
        return None
    return (f"beam_width/max_len/max_neighbors: backend 'cuda' would need {need} bytes of "
            f"shared memory per block for these settings, more than its {cap}")


# ---------------------------------------------------------------------------- validation

def _graph_arrays(graph, n: Optional[int], dev: torch.device):
    """(indptr int64 [n+1], indices int32/int64 [nnz]) on ``dev``; indptr checked in full."""
    return _graph(graph, n, dev)[:2]


# A device CSR is checked (one host sync) on its first search only: the result is kept on the
# indptr tensor, under its version (an in-place change bumps it), data pointer and nnz.
# A graph object (a TripleGraph) with host arrays keeps (indptr, indices, max_deg) the same way,
# with its arrays' copy on each device it was searched on (kept while the arrays are the same
# objects; like the max degree, an in-place change of a host array is not seen).
_CSR_ATTR = "_rasfast_csr_check"


def _graph(graph, n: Optional[int], dev: torch.device, validate: str = "auto"):
    """(indptr int64 [n+1], indices int32/int64 [nnz], max degree) on ``dev``.

    indptr is checked in full without asking the device per search: host arrays (numpy, or
    CPU tensors for a GPU search) with numpy -- once per graph object (a TripleGraph), cached
    on it --, a device tensor once per tensor (cached by its version), with one host sync.
    A device tensor not checked before while ``dev``'s stream is captured into a CUDA graph
    cannot be read: :func:`_captured_csr` (``validate="none"`` only).
    """
    # a device CSR searched before, as it was then: its checked max degree, without the
    # general path's checks and conversions (~5 us of a GPU call's host time)
    if type(graph) is tuple and len(graph) == 2:
        ip, ix = graph
        if (type(ip) is torch.Tensor and type(ix) is torch.Tensor and ip.dtype == torch.int64
                and ix.dtype in (torch.int32, torch.int64) and ip.device == dev and ix.device == dev
                and ip.dim() == 1 and ix.dim() == 1 and (n is None or len(ip) == n + 1)
                and ip.is_contiguous() and ix.is_contiguous()):
            hit = getattr(ip, _CSR_ATTR, None)
            if hit is not None and hit[0] == (ip._version, ip.data_ptr(), ip.device, len(ix)):
                return ip, ix, hit[1]
    owner = None
    if isinstance(graph, (tuple, list)):
        if len(graph) != 2:
            raise ValueError(f"graph: expected a pair (indptr, indices), got {len(graph)} items")
        indptr, indices = graph
    elif hasattr(graph, "indptr") and hasattr(graph, "indices"):
        indptr, indices, owner = graph.indptr, graph.indices, graph
    else:
        raise TypeError("graph: expected a pair (indptr, indices) or an object with .indptr "
                        f"and .indices (a TripleGraph), got {type(graph).__name__}")
    raw_ptr, raw_idx = indptr, indices
    indptr = as_tensor(indptr, "graph.indptr")
    indices = as_tensor(indices, "graph.indices")
    for t, name in ((indptr, "graph.indptr"), (indices, "graph.indices")):
        check_int(t, name)
        check_rank(t, name, 1)
    if n is not None and len(indptr) != n + 1:
        raise ValueError(f"graph.indptr: expected n + 1 = {n + 1} entries (n = triple_emb rows), "
                         f"got {len(indptr)}")
    if len(indptr) == 0:
        raise ValueError("graph.indptr: expected n + 1 >= 1 entries, got 0")
    nnz = len(indices)
    if is_host(raw_ptr, dev):
        hit = getattr(owner, _CSR_ATTR, None) if owner is not None else None
        if hit is not None and hit[0] is raw_ptr and hit[1] is raw_idx:
            max_deg, copies = hit[2], hit[3]
            if dev in copies:  # this graph object's arrays, copied to dev by an earlier search
                return copies[dev] + (max_deg,)
        else:
            a = raw_ptr if isinstance(raw_ptr, np.ndarray) else indptr.numpy()  # host memory
            max_deg = _check_indptr(int(a[0]), int(a[-1]), nnz,
                                    len(a) > 1 and bool((a[1:] < a[:-1]).any()),
                                    int(np.diff(a).max()) if len(a) > 1 else 0)
            copies = {}
            if owner is not None:
                try:
                    setattr(owner, _CSR_ATTR, (raw_ptr, raw_idx, max_deg, copies))
                except (AttributeError, TypeError):
                    pass
        indptr = to_device(indptr.long(), dev).contiguous()
        if dev.type != "cpu":
            # a graph object keeps its device copy (DESIGN.md s.11: nothing per search that a
            # graph needs once): a 200k-triple graph's ~13 MB of indices would otherwise go
            # through a pinned staging copy and the bus on every search
            copies[dev] = (indptr, to_device(indices, dev).contiguous())
            return copies[dev] + (max_deg,)
    else:
        raw = indptr  # the caller's tensor: the cache's key
        indptr = to_device(indptr, dev).long().contiguous()
        key = (raw._version, raw.data_ptr(), raw.device, nnz)
        hit = getattr(raw, _CSR_ATTR, None)
        if hit is not None and hit[0] == key:
            max_deg = hit[1]
        elif stream_capturing(dev):
            indptr, max_deg = _captured_csr(indptr, nnz, dev, validate)
        else:
            if len(indptr) > 1:
                d = indptr[1:] - indptr[:-1]
                v = torch.stack([indptr[0], indptr[-1], (d < 0).any().long(), d.max()])
                first, last, dec, top = v.tolist()  # once per device graph
            else:
                first = last = int(indptr[0])
                dec, top = 0, 0
            max_deg = _check_indptr(first, last, nnz, bool(dec), top)
            setattr(raw, _CSR_ATTR, (key, max_deg))
    return indptr.contiguous(), to_device(indices, dev).contiguous(), max_deg


def _captured_csr(indptr: torch.Tensor, nnz: int, dev: torch.device, validate: str):
    """(indptr, max degree) of a device CSR first met while ``dev``'s stream is captured into
    a CUDA graph, without reading the device. torch.compile(mode="reduce-overhead") records
    the operator on copies of its inputs, new tensor objects that _graph's per-tensor check
    never saw (the seventh GPU run, H200: its ``tolist()`` failed inside the capture).

    ``validate="none"`` only (otherwise ValueError, before anything is queued: neither this
    check nor the kernel's error flag could be read). Nothing is recorded on the tensor.
    The offsets go on as check_ptr's safe copy (clamped into [0, nnz], made non-decreasing:
    two captured ops; a valid indptr is unchanged), since the kernel trusts its offsets.
    The max degree is bounded by nnz, which gives the result of the true maximum (any bound
    >= it does):
    - the decay table (reference/beam.py decay_factors): f[r] = exp(-min(r, gamma)/gamma)
      for r = 0..T, T = min(ceil(gamma), max_deg), ranks past T read f[T]. f[r] does not
      depend on T, ranks are < the true max degree, and for r >= ceil(gamma) f[r] = exp(-1)
      = f[T]: a longer table gives every rank the same factor;
    - the CUDA plan (csrc/beam/beam_cuda.cpp plan, plan_grouped) takes max_deg only for
      sizes: the candidates kept per beam M = min(max_neighbors, T + b, max_deg) (more of a
      beam's (value desc, id asc) order: those past its true degree do not exist, those past
      T + b lose to b of the beam's own at the same factor; the pool keeps the top b of one
      total order), the chunk per round (the running top M is the same for any chunk) and
      the buffers. Larger buffers can need more shared memory: backend "auto" then resolves
      to triton, which raises under capture (tests/test_device_work_beam.py compares both
      bounds on the emulator)."""
    if validate != "none":
        raise ValueError("graph: a device CSR must be checked once outside CUDA graph capture, "
                         "or pass validate='none' (a search captured in a CUDA graph cannot read "
                         "the device: neither the offsets' check nor the kernel's error flag; "
                         "torch.compile(mode='reduce-overhead') records on copies of the inputs, "
                         "which no earlier search checked)")
    safe = check_ptr(indptr, "graph.indptr", nnz, "len(indices)", dev, Unchecked())
    return safe, max(nnz, 0)


def _check_indptr(first: int, last: int, nnz: int, decreasing: bool, max_deg: int) -> int:
    if first != 0 or last != nnz:
        raise ValueError(f"graph.indptr: must start at 0 and end at len(indices) = {nnz}, "
                         f"got {first} .. {last}")
    if decreasing:
        raise ValueError("graph.indptr: must be non-decreasing")
    return max(0, int(max_deg))


def _as_int_1d(x, name: str) -> np.ndarray:
    """A 1-d int32/int64 array (numpy, torch, or a list of ints) as an int64 numpy array.

    numpy input is checked without a torch round trip: B small arrays per call add up.
    """
    if isinstance(x, np.ndarray):
        if x.dtype not in (np.int32, np.int64):
            raise TypeError(f"{name}: expected an int32 or int64 array, got {x.dtype}")
        if x.ndim != 1:
            raise ValueError(f"{name}: expected a 1-d array, got shape {x.shape}")
        return x.astype(np.int64, copy=False)
    if isinstance(x, torch.Tensor):
        check_int(x, name)
        check_rank(x, name, 1)
        return x.detach().cpu().long().numpy()
    if isinstance(x, (list, tuple, range)):
        if not all(isinstance(v, numbers.Integral) and not isinstance(v, bool) for v in x):
            raise TypeError(f"{name}: expected integers")
        return np.asarray(list(x), dtype=np.int64).reshape(-1)
    raise TypeError(f"{name}: expected an int array or a list of ints, got {type(x).__name__}")


def _seed_range_error(n: int):
    """The message of a seed id out of range, naming one such id (the cuda kernel's error
    flag holds one; the other paths name the lowest when it is negative, else the highest)."""
    return lambda lo, hi: f"seeds: triple ids must be in [0, n = {n}), got {lo if lo < 0 else hi}"


def _seed_ptr_error(total: int) -> str:
    return f"seeds.ptr: must be non-decreasing from 0 to len(ids) = {total}"


def _normalise_seeds(seeds, B: int, n: int):
    """(ptr[B+1], ids) int64 on the CPU; ids unique and ascending within each query."""
    deferred = Deferred()
    out = _seeds(seeds, B, n, torch.device("cpu"), deferred)
    deferred.raise_now()
    return out


def _seeds(seeds, B: int, n: int, dev: torch.device, deferred: Deferred, raw_device: bool = False):
    """(ptr[B+1], ids) int64 on ``dev``; ids unique and ascending within each query.

    Seeds given on the host (lists, numpy, or CPU tensors for a GPU search) are checked and
    de-duplicated with numpy; device tensors on the device, without a host sync (their
    checks go to ``deferred``, the kernel gets ids clamped into [0, n)). ``raw_device``
    (the cuda kernel, which checks seed ids with its error flag and drops repeats itself):
    device ids go on as they are, only their offsets checked.
    """
    if isinstance(seeds, tuple):
        if len(seeds) != 2:
            raise ValueError("seeds: a tuple must be (ptr, ids); pass per-query seeds as a list")
        ptr, ids = seeds
        # the cuda kernel's usual input, as the general path below would pass it on (int64,
        # 1-d, contiguous, on dev: raw_device means backend cuda, so dev is the GPU or the
        # emulator's): the offsets' length is all there is to check here
        if (raw_device and B > 0 and type(ptr) is torch.Tensor and type(ids) is torch.Tensor
                and ptr.dtype == torch.int64 and ids.dtype == torch.int64 and ptr.device == dev
                and ids.device == dev and ptr.dim() == 1 and ids.dim() == 1
                and ptr.is_contiguous() and ids.is_contiguous()):
            if len(ptr) != B + 1:
                raise ValueError(f"seeds.ptr: expected B + 1 = {B + 1} entries, got {len(ptr)}")
            return ptr, ids
        if not (is_host(ptr, dev) or isinstance(ptr, (list, range))) or \
                not (is_host(ids, dev) or isinstance(ids, (list, range))):
            ptr, ids = _dev_int_1d(ptr, "seeds.ptr", dev), _dev_int_1d(ids, "seeds.ids", dev)
            if len(ptr) != B + 1:
                raise ValueError(f"seeds.ptr: expected B + 1 = {B + 1} entries, got {len(ptr)}")
            if raw_device and B > 0:  # the kernel checks the offsets itself (error code 6)
                return ptr.contiguous(), ids.contiguous()
            ptr = check_ptr(ptr, "seeds.ptr", len(ids), "len(ids)", dev, deferred,
                            start_end_msg=_seed_ptr_error(len(ids)),
                            monotone_msg=_seed_ptr_error(len(ids)))
            return (ptr.contiguous(), ids.contiguous()) if raw_device else \
                _dedupe_on_device(ptr, ids, B, n, dev, deferred)
        ptr = _as_int_1d(ptr, "seeds.ptr")
        ids = _as_int_1d(ids, "seeds.ids")
        if len(ptr) != B + 1:
            raise ValueError(f"seeds.ptr: expected B + 1 = {B + 1} entries, got {len(ptr)}")
        if int(ptr[0]) != 0 or int(ptr[-1]) != len(ids) or bool((ptr[1:] < ptr[:-1]).any()):
            raise ValueError(_seed_ptr_error(len(ids)))
    else:
        if isinstance(seeds, (np.ndarray, torch.Tensor)) and seeds.ndim == 2:
            if isinstance(seeds, torch.Tensor) and not is_host(seeds, dev):
                if len(seeds) != B:
                    raise ValueError(f"seeds: expected one seed array per query (B = {B}), "
                                     f"got {len(seeds)}")
                check_int(seeds, "seeds")
                ptr = torch.from_numpy(np.arange(B + 1, dtype=np.int64) * seeds.shape[1])
                ids = to_device(seeds, dev).reshape(-1).long()
                if raw_device:
                    return to_device(ptr, dev), ids.contiguous()
                return _dedupe_on_device(to_device(ptr, dev), ids, B, n, dev, deferred)
            seeds = list(seeds)
        if not isinstance(seeds, (list, np.ndarray, torch.Tensor)):
            raise TypeError("seeds: expected a list of B int arrays, a 2-D int array or a tuple "
                            f"(ptr, ids), got {type(seeds).__name__}")
        if len(seeds) != B:
            raise ValueError(f"seeds: expected one seed array per query (B = {B}), got {len(seeds)}")
        if any(isinstance(s, torch.Tensor) and not is_host(s, dev) for s in seeds):
            parts = [_dev_int_1d(s, f"seeds[{i}]", dev) for i, s in enumerate(seeds)]
            ptr = np.zeros(B + 1, np.int64)
            ptr[1:] = np.cumsum([len(p) for p in parts])
            ids = torch.cat(parts) if parts else torch.zeros(0, dtype=torch.int64, device=dev)
            if raw_device:
                return to_device(torch.from_numpy(ptr), dev), ids
            return _dedupe_on_device(to_device(torch.from_numpy(ptr), dev), ids, B, n, dev,
                                     deferred)
        if all(type(s) is np.ndarray and s.ndim == 1 and s.dtype == np.int64 for s in seeds):
            parts = seeds  # the common host form, checked in one pass (B calls of the general
            # conversion cost ~0.7 us each on a Zen 5 host, ~45 us at B = 64)
        else:
            parts = [_as_int_1d(s, f"seeds[{i}]") for i, s in enumerate(seeds)]
        ids = np.concatenate(parts) if parts else np.zeros(0, np.int64)
        ptr = np.zeros(B + 1, np.int64)
        ptr[1:] = np.cumsum([len(p) for p in parts])
    if len(ids) and (int(ids.min()) < 0 or int(ids.max()) >= n):
        raise ValueError(_seed_range_error(n)(int(ids.min()), int(ids.max())))
    if raw_device and B > 0:
        # the cuda kernel sorts each query's seeds and drops repeats itself (as for device
        # seeds): no np.unique here (55 of the 161 us of host path for 64 x 20 host seeds on
        # the emulator's dry run, Zen 5; the H100 host took 724 us against 147 for device
        # seeds, sixth GPU session). The range was checked above, so the messages stay.
        return to_device(torch.from_numpy(ptr), dev), to_device(torch.from_numpy(ids), dev)
    nn = max(n, 1)
    query = np.repeat(np.arange(B, dtype=np.int64), np.diff(ptr))
    key = np.unique(query * nn + ids)  # sorted: by query, then id; duplicates once
    ids = key % nn
    out_ptr = np.zeros(B + 1, np.int64)
    out_ptr[1:] = np.cumsum(np.bincount(key // nn, minlength=B))
    return (to_device(torch.from_numpy(out_ptr), dev),
            to_device(torch.from_numpy(np.ascontiguousarray(ids)), dev))


def _dev_int_1d(x, name: str, dev: torch.device) -> torch.Tensor:
    """A 1-d int array as an int64 tensor on ``dev`` (no value read)."""
    t = torch.as_tensor(np.asarray(list(x), dtype=np.int64)) if isinstance(x, (list, range)) \
        else as_tensor(x, name)
    check_int(t, name)
    check_rank(t, name, 1)
    return to_device(t, dev).long()


def _dedupe_on_device(ptr, ids, B: int, n: int, dev: torch.device, deferred: Deferred):
    """(ptr, ids) with each query's ids sorted and unique, computed on the device in fixed-size
    arrays (no host sync): sort by (query, id), keep first occurrences, compact with a
    scatter; ids past the new ptr[B] are unused. ``ptr`` must be safe (monotone, in range)."""
    ids = check_ids(ids, "seeds", 0, n, dev, deferred, _seed_range_error(n))
    S = ids.numel()
    if S == 0:
        return ptr.contiguous(), ids.contiguous()
    nn = max(n, 1)
    query = torch.searchsorted(ptr[1:].contiguous(), torch.arange(S, device=dev), right=True)
    key, _ = torch.sort(query.clamp_(max=max(B - 1, 0)) * nn + ids)
    keep = torch.ones(S, dtype=torch.bool, device=dev)
    keep[1:] = key[1:] != key[:-1]
    csum = torch.zeros(S + 1, dtype=torch.int64, device=dev)
    torch.cumsum(keep, 0, out=csum[1:])
    out = torch.empty(S, dtype=torch.int64, device=dev).scatter_(0, csum[1:] - 1, key % nn)
    return torch.index_select(csum, 0, ptr).contiguous(), out


def _text_scorer(encoder, texts, graph, n, qf, qnorm):
    if encoder is None or not callable(getattr(encoder, "encode", None)):
        raise TypeError("encoder: scoring='text' needs an encoder with .encode(list[str])")
    if texts is None:
        texts = getattr(graph, "texts", None)
        if texts is None:
            raise ValueError("texts: scoring='text' needs the n triple texts (texts=... or "
                             "a graph with .texts)")
    if len(texts) != n:
        raise ValueError(f"texts: expected n = {n} triple texts, got {len(texts)}")
    return _ref.TextScorer(encoder, texts, qf, qnorm)


# ---------------------------------------------------------------------------- backends

def _search_torch(indptr, indices, seed_ptr, seed_ids, scorer, a):
    return _ref.beam_search_torch(indptr, indices, a["n"], seed_ptr, seed_ids, scorer, a["b"],
                                  a["L"], to_device(a["decay"], seed_ids.device), a["max_neighbors"])


def _torch(indptr, indices, emb, q, qnorm, seed_ptr, seed_ids, a):
    dev = emb.device
    return _search_torch(indptr, indices, to_device(seed_ptr, dev), to_device(seed_ids, dev),
                         _ref.SumScorer(emb, q, qnorm), a)


def _cpu(indptr, indices, emb, q, qnorm, seed_ptr, seed_ids, a):
    mod = _bk.cpu_module()
    if not hasattr(mod, "beam_search"):
        raise _bk.BackendUnavailable("triple_beam_search: rasfast._C lacks beam_search; rebuild")
    B, b, L = q.shape[0], a["b"], a["L"]
    seqs = torch.empty((B, b, L), dtype=torch.int64)
    scores = torch.empty((B, b), dtype=torch.float32)
    lengths = torch.empty(B, dtype=torch.int64)
    counts = torch.empty(B, dtype=torch.int64)
    buf, code = cpu_buffer(emb)
    # seeds de-duplicated as tensors (a (ptr, ids) tuple of CPU tensors) keep unused ids past
    # ptr[B] (rasfast/ops/beam.py _dedupe_on_device); the C++ search wants exactly ptr[B]
    seed_ids = seed_ids[:int(seed_ptr[-1])]
    mod.beam_search(indptr.numpy(), indices.numpy(), buf, code, q.numpy(), qnorm.numpy(),
                    seed_ptr.numpy(), seed_ids.numpy(), b, L,
                    a["max_neighbors"] or 0, a["decay"].numpy(),
                    cpu_out(seqs), cpu_out(scores), cpu_out(lengths), cpu_out(counts))
    return seqs, scores, lengths, counts


_DECAY_ON_DEVICE: dict = {}
# (device, gamma, length) -> a pinned host copy of the table, kept for good: the source of
# the table's copies made while a CUDA graph is captured (_device_decay)
_DECAY_PINNED: dict = {}


@functools.lru_cache(maxsize=64)
def _decay_table(gamma: float, t: int) -> torch.Tensor:
    """The rank-decay factors (reference/beam.py, decay_factors) as a float64 tensor, made
    once per (gamma, length): a search's host path otherwise spent about 15 us of its ~60
    building it (emulator, dry run). Shared between calls: read only."""
    return torch.tensor(_ref.decay_factors(gamma, t), dtype=torch.float64)


def _device_decay(decay: torch.Tensor, key, dev: torch.device) -> torch.Tensor:
    """The rank-decay table on ``dev``, copied once per (gamma, table length) and device (a
    few dozen float64 values that a search would otherwise stage and copy every call).
    ``key`` None: no caching.

    While ``dev``'s stream is captured into a CUDA graph (a table not copied before: e.g. the
    bound of _captured_csr makes a longer one), the copy is captured, not cached (it lives
    in the graph's memory pool), and made from a pinned host copy that is never freed: the
    graph replays the transfer, and a staging block freed after the capture could hold
    other data by then."""
    if key is None:
        return to_device(decay, dev)
    key = (str(dev),) + tuple(key)
    out = _DECAY_ON_DEVICE.get(key)
    if out is None and stream_capturing(dev):
        src = _DECAY_PINNED.get(key)
        if src is None:  # never dropped: a captured graph may replay a copy from any of them
            src = _DECAY_PINNED[key] = decay.pin_memory() if dev.type == "cuda" else decay
        return src if src.device == dev else src.to(dev, non_blocking=True)
    if out is None:
        if len(_DECAY_ON_DEVICE) >= 64:
            _DECAY_ON_DEVICE.clear()
        out = _DECAY_ON_DEVICE[key] = to_device(decay, dev)
    return out


def _cuda(indptr, indices, emb, q, qnorm, seed_ptr, seed_ids, a, deferred=None, read_flag=True):
    mod = _bk.cuda_module()
    if not hasattr(mod, "beam_search"):
        raise _bk.BackendUnavailable("triple_beam_search: rasfast._cuda lacks beam_search; rebuild")
    dev = emb.device
    if read_flag and stream_capturing(dev):
        raise ValueError("validate: a search captured in a CUDA graph cannot read the kernel's "
                         "error flag; pass validate='none' (and check the inputs with a search "
                         "outside the capture)")
    B, b, L, D = q.shape[0], a["b"], a["L"], emb.shape[1]
    if indices.dtype not in (torch.int32, torch.int64):
        indices = indices.long()
    seed_ptr, seed_ids = to_device(seed_ptr, dev), to_device(seed_ids, dev)
    decay = _device_decay(a["decay"], a.get("decay_key"), dev)
    seqs = torch.empty((B, b, L), dtype=torch.int64, device=dev)
    scores = torch.empty((B, b), dtype=torch.float32, device=dev)
    lengths = torch.empty(B, dtype=torch.int64, device=dev)
    counts = torch.empty(B, dtype=torch.int64, device=dev)
    scratch = torch.empty((max(B, 1), 2, b, D), dtype=torch.float32, device=dev)
    err = torch.zeros(2, dtype=torch.int32, device=dev)
    with device_guard(dev):
        mod.beam_search(device_ptr(indptr), device_ptr(indices), indices.dtype == torch.int64,
                        device_ptr(emb), DTYPE_CODES[emb.dtype], emb.shape[0], D,
                        device_ptr(q), 0 if qnorm is None else device_ptr(qnorm), B, device_ptr(seed_ptr),
                        device_ptr(seed_ids), seed_ids.numel(), b, L, a["max_neighbors"] or 0, device_ptr(decay),
                        len(decay), a["max_deg"], device_ptr(seqs), device_ptr(scores),
                        device_ptr(lengths), device_ptr(counts), device_ptr(scratch),
                        device_ptr(err), cuda_stream(dev))
    if not read_flag:  # validate="none": no host sync (the kernel skipped what it flagged)
        return seqs, scores, lengths, counts
    # the one host sync of a search: the kernel's error flag, with the deferred input checks
    code, where = (deferred or Deferred()).read(err)
    if code == 5:      # a query's |q| is not finite: read q to say which way (an error path)
        raise _q_error(q)
    if code == 6:
        raise ValueError(_seed_ptr_error(seed_ids.numel()))
    if code:
        raise ValueError(_ERRORS[code].format(n=a["n"], where=where))
    return seqs, scores, lengths, counts


# Messages for the error codes the compiled kernels report (csrc/beam/*: same texts).
_ERRORS = {
    1: "graph.indices: a neighbour id is out of range [0, {n}) (got {where})",
    2: "graph.indices: a neighbour list is not strictly increasing (rows must be sorted, "
       "without duplicates; row {where})",
    3: "triple_emb: a row read by the search contains NaN/inf values (or its squared norm "
       "overflows float32; row {where})",
    4: "seeds: triple ids must be in [0, n = {n}), got {where}",   # _seed_range_error's text
}


def _triton(indptr, indices, emb, q, qnorm, seed_ptr, seed_ids, a):
    scorer = _bk.triton_kernels().beam.TritonSumScorer(emb, q, qnorm)
    dev = emb.device
    return _search_torch(indptr, indices, to_device(seed_ptr, dev), to_device(seed_ids, dev),
                         scorer, a)


_IMPLS = {"torch": _torch, "cpu": _cpu, "cuda": _cuda, "triton": _triton}


# ---------------------------------------------------------------------------- operator
# torch.ops.rasfast.triple_beam_search (rasfast/ops/_library.py): the tensor core of the
# search. The public function normalises the graph and the seeds to tensors and checks
# shapes; the registered kernel runs the eager search (all its checks included).

def _beam_op(indptr, indices, triple_emb, q_emb, seed_ptr, seed_ids, beam_width, max_len,
             gamma, max_neighbors, backend, validate="auto"):
    r = _triple_beam_search((indptr, indices), triple_emb, q_emb, (seed_ptr, seed_ids),
                            beam_width, max_len, gamma, max_neighbors, "sum", None, None, backend,
                            validate)
    return r.sequences, r.scores, r.lengths, r.num_beams


def _beam_fake(indptr, indices, triple_emb, q_emb, seed_ptr, seed_ids, beam_width, max_len,
               gamma, max_neighbors, backend, validate="auto"):
    B = q_emb.shape[0]
    i64 = dict(dtype=torch.int64)
    return (q_emb.new_empty((B, beam_width, max_len), **i64),
            q_emb.new_empty((B, beam_width), dtype=torch.float32),
            q_emb.new_empty((B,), **i64), q_emb.new_empty((B,), **i64))


_OP = define("triple_beam_search(Tensor indptr, Tensor indices, Tensor triple_emb, Tensor q_emb, "
             "Tensor seed_ptr, Tensor seed_ids, int beam_width, int max_len, float gamma, "
             "int? max_neighbors, str backend, str validate=\"auto\") -> (Tensor, Tensor, Tensor, Tensor)",
             _beam_op, _beam_fake)


def _traced_search(graph, triple_emb, q_emb, seeds, beam_width, max_len, gamma, max_neighbors,
                   backend, validate="auto") -> BeamResult:
    """The traced call: tensors and shapes checked here, values by the operator's kernel."""
    q = as_tensor(q_emb, "q_emb")
    check_float(q, "q_emb")
    check_rank(q, "q_emb", 2, "[B, D]")
    emb = as_tensor(triple_emb, "triple_emb")
    check_float(emb, "triple_emb")
    check_rank(emb, "triple_emb", 2, "[n, D]")
    if emb.shape[1] != q.shape[1]:
        raise ValueError(f"q_emb: dim 1 must equal triple_emb's D ({emb.shape[1]}), "
                         f"got shape {tuple(q.shape)}")
    if isinstance(graph, (tuple, list)) and len(graph) == 2:
        indptr, indices = graph
    elif hasattr(graph, "indptr") and hasattr(graph, "indices"):
        indptr, indices = graph.indptr, graph.indices
    else:
        raise TypeError("graph: under torch.compile, expected a pair of tensors (indptr, indices) "
                        "or an object holding them")
    B = q.shape[0]
    if isinstance(seeds, tuple) and len(seeds) == 2:
        seed_ptr, seed_ids = seeds
    elif isinstance(seeds, torch.Tensor) and seeds.dim() == 2:
        seed_ptr = torch.arange(B + 1, device=seeds.device) * seeds.shape[1]
        seed_ids = seeds.reshape(-1)
    else:
        raise TypeError("seeds: under torch.compile, expected a tuple (ptr, ids) of tensors or a "
                        "2-D tensor [B, S]")
    for t, name in ((indptr, "graph.indptr"), (indices, "graph.indices"),
                    (seed_ptr, "seeds.ptr"), (seed_ids, "seeds.ids")):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{name}: under torch.compile, expected a torch.Tensor, got "
                            f"{type(t).__name__}")
        check_int(t, name)
        check_rank(t, name, 1)
    b = check_int_arg(beam_width, "beam_width", 1)
    L = check_int_arg(max_len, "max_len", 1)
    if gamma is None:
        gamma = 2.0 * b
    if isinstance(gamma, bool) or not isinstance(gamma, numbers.Real):
        raise TypeError(f"gamma: expected a number, got {type(gamma).__name__}")
    gamma = float(gamma)
    if not (math.isfinite(gamma) and gamma > 0):
        raise ValueError(f"gamma: must be a finite number > 0, got {gamma}")
    if max_neighbors is not None:
        max_neighbors = check_int_arg(max_neighbors, "max_neighbors", 1)
    return BeamResult(*_OP(indptr, indices, emb, q, seed_ptr, seed_ids, b, L, gamma,
                           max_neighbors, backend, check_choice(validate, "validate", VALIDATE)))
