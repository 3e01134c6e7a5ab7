"""Device-work budgets of the graph-transformer and segment ops on the CUDA emulator
(issue 38, DESIGN.md s.11).

- ``transformer_conv`` / ``graph_transformer_pool`` (backend "cuda"): the CSR is built without
  a host sync (a stable sort by destination and a binary search for the offsets, no bincount,
  no argsort + bincount + cumsum round trip). Index arrays given on the host (numpy) are
  checked there: no sync at all. Device index arrays (edge_index, graph_ptr) are checked on
  the device, the kernels getting clamped copies, and the checks are read once after the
  kernels: one sync (docs/gpu.md, "Host synchronisations that remain").
- ``segment_topk_scores`` (cuda): two kernels (scoring over the whole grid, a radix select
  per query) that check q, cand_ids and cand_ptr themselves and lower one error flag: the
  flag's read is the one sync, and the host launches no check of its own. ``segment_max_rank``
  (cuda): one kernel, which checks item_scores (NaN), the group ids and ptr, and fills its own
  hash table: no pass over item_scores outside it, one sync for the flag.

Counted with rasfast.device_work (``RASFAST_CUDA_EMU=1``: every tensor is a CPU tensor, so any
host read of a tensor counts). Run: ``RASFAST_CUDA_EMU=1 pytest -m cuda_emu
tests/test_device_work_graph.py``.

Counts measured when these budgets were set (the layers' weights already packed: the first
call with a weights object concatenates its projections once, 2 more launches per layer):

| call | syncs | launches (kernels + torch ops) | allocs | watched reads |
|---|---:|---:|---:|---:|
| transformer_conv (N=60, E=300), before | 2 | 13 (2 + 11) | 0 | - |
| transformer_conv, device edge_index | 1 | 11 (2 + 9) | 0 | - |
| transformer_conv, numpy edge_index | 0 | 8 (2 + 6) | 0 | - |
| graph_transformer_pool (2 layers, G=5), before | 7 | 24 (5 + 19) | 0 | - |
| graph_transformer_pool, device edges and graph_ptr | 1 | 21 (5 + 16) | 0 | - |
| graph_transformer_pool, numpy edges and graph_ptr | 0 | 13 (5 + 8) | 0 | - |
| segment_topk_scores (B=8), before | 8 | 18 (1 + 17) | 0 | 0 (cand_emb) |
| segment_topk_scores, checks on the device | 1 | 20 (1 + 19) | 0 | 0 (cand_emb) |
| segment_topk_scores with cand_ids, before | 10 | 22 (1 + 21) | 0 | 0 (table) |
| segment_topk_scores with cand_ids, checks on the device | 1 | 22 (1 + 21) | 0 | 0 (table) |
| segment_max_rank, before | 8 | 18 (1 + 17) | 0 | 1 (item_scores) |
| segment_max_rank, checks on the device | 1 | 14 (1 + 13) | 0 | 1 (item_scores) |
| segment_topk_scores, checks in the kernels | 1 | 4 (2 + 2) | 0 | 0 (cand_emb) |
| segment_topk_scores with cand_ids, checks in the kernels | 1 | 4 (2 + 2) | 0 | 0 (table) |
| segment_topk_scores, C++ CUDA operator kernel (thirteenth session) | 1 | 3 (3 + 0) | 0 | 0 (cand_emb) |
| segment_max_rank, C++ CUDA operator kernel (thirteenth session) | 1 | 2 (2 + 0) | 0 | 0 (item_scores) |
| graph_transformer_pool, device edges and graph_ptr, the layers' edge projections in one GEMM (eighteenth session) | 1 | 20 (5 + 15) | 0 | - |
| graph_transformer_pool, numpy edges and graph_ptr, the same | 0 | 12 (5 + 7) | 0 | - |
| graph_transformer_pool, numpy edges and graph_ptr, the CSR built on the host (eighteenth session) | 0 | 8 (5 + 3) | 0 | - |
| graph_transformer_pool, attend and epilogue in one kernel a layer (eighteenth session): device arrays / numpy / validate="none" | 1 / 0 / 0 | 18 (3 + 15) / 6 (3 + 3) / 13 (3 + 10) | 0 | - |
| graph_transformer_pool, device arrays, validate="none", the same | 0 | 15 (5 + 10) | 0 | - |
| segment_max_rank, checks in the kernel | 1 | 3 (1 + 2) | 0 | 0 (item_scores) |

(The "checks on the device" rows: the checks as torch ops on the device, read with the flag.
Torch ops now: the flag's fill and its read.)
"""
import numpy as np
import pytest
import torch

import rasfast
from rasfast.device_work import count_device_work
from rasfast.reference import segment as seg_ref

from device_work_util import EMULATED_ONLY, emulated, fresh_seed  # noqa: F401 (autouse fixture)

pytestmark = EMULATED_ONLY




def conv(din, c, heads, edge_dim=None, seed=0, beta=False):
    TransformerConv = pytest.importorskip("torch_geometric.nn").TransformerConv
    torch.manual_seed(seed)
    m = TransformerConv(din, c, heads=heads, edge_dim=edge_dim, beta=beta).eval()
    with torch.no_grad():
        for p in m.parameters():
            if p.dim() == 1:
                p.normal_(0, 0.1)
    return m


def layer_problem(seed, n=60, e=300, din=32, edge_dim=16):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, din, generator=g)
    ei = torch.randint(0, n, (2, e), generator=g)
    ei[1, : e // 3] = 0  # a hub
    return x, ei, torch.randn(e, edge_dim, generator=g)


def batch_problem(seed, sizes=(5, 0, 9, 1, 13), per_node=4, din=24, edge_dim=12):
    g = torch.Generator().manual_seed(seed)
    ptr = torch.tensor([0] + list(np.cumsum(sizes)), dtype=torch.long)
    src, dst = [], []
    for k, s in enumerate(sizes):
        if s:
            src.append(torch.randint(0, s, (per_node * s,), generator=g) + ptr[k])
            dst.append(torch.randint(0, s, (per_node * s,), generator=g) + ptr[k])
    ei = torch.stack([torch.cat(src), torch.cat(dst)])
    x = torch.randn(int(ptr[-1]), din, generator=g)
    return x, ei, torch.randn(ei.shape[1], edge_dim, generator=g), ptr


def layers():
    return [(conv(24, 4, 8, 12, 0), torch.nn.LayerNorm(32)), conv(32, 4, 8, 12, 1, beta=True)]


# budgets: (syncs, launches) measured with device / host index arrays (module docstring)
CONV = {"device": (1, 11), "numpy": (0, 8)}
POOL = {"device": (1, 18), "numpy": (0, 6)}


@pytest.mark.parametrize("form", ["device", "numpy"])
def test_transformer_conv_budget_and_reference(form):
    seed = fresh_seed()
    x, ei, ea = layer_problem(seed)
    m = conv(32, 16, 4, 16, seed % 7)
    want = rasfast.transformer_conv(x, ei, ea, m, backend="torch")
    edges = ei if form == "device" else ei.numpy()
    rasfast.transformer_conv(x, edges, ea, m, backend="cuda")  # packs the weights (cached)
    with count_device_work() as w:
        got = rasfast.transformer_conv(x, edges, ea, m, backend="cuda")
    syncs, launches = CONV[form]
    assert w.syncs <= syncs and w.allocs == 0 and w.launches <= launches, (seed, w.summary())
    assert "bincount" not in w.op_names and "nonzero" not in w.op_names, w.summary()
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("form", ["device", "numpy"])
def test_graph_transformer_pool_budget_and_reference(form):
    seed = fresh_seed()
    x, ei, ea, ptr = batch_problem(seed)
    ls = layers()
    want = rasfast.graph_transformer_pool(x, ei, ea, ptr, ls, backend="torch")
    edges, gp = (ei, ptr) if form == "device" else (ei.numpy(), ptr.numpy())
    rasfast.graph_transformer_pool(x, edges, ea, gp, ls, backend="cuda")  # packs the weights
    for _ in range(2):
        with count_device_work() as w:
            got = rasfast.graph_transformer_pool(x, edges, ea, gp, ls, backend="cuda")
        syncs, launches = POOL[form]
        assert w.syncs <= syncs and w.allocs == 0 and w.launches <= launches, (seed, w.summary())
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)


def test_graph_transformer_pool_validate_none_reads_nothing():
    """validate="none": device index arrays are clamped, not checked, and nothing is read
    back (0 syncs, so the call can be captured in a CUDA graph; 21 -> 16 launches, 15 with
    the layers' edge projections in one GEMM, 13 with a layer kernel a layer); a good
    input gives the same result, a bad id no error and no read out of bounds."""
    seed = fresh_seed()
    x, ei, ea, ptr = batch_problem(seed)
    ls = layers()
    want = rasfast.graph_transformer_pool(x, ei, ea, ptr, ls, backend="cuda")
    with count_device_work() as w:
        got = rasfast.graph_transformer_pool(x, ei, ea, ptr, ls, backend="cuda", validate="none")
    assert w.syncs == 0 and w.allocs == 0 and w.launches <= 13, (seed, w.summary())
    assert torch.equal(got, want)
    bad, bad_ptr = ei.clone(), ptr.clone()
    bad[0, 3], bad[1, 5] = x.shape[0] + 7, -4
    bad_ptr[2] = bad_ptr[3] + 1
    with count_device_work() as w:
        out = rasfast.graph_transformer_pool(x, bad, ea, bad_ptr, ls, backend="cuda", validate="none")
    assert w.syncs == 0 and out.shape == want.shape and bool(torch.isfinite(out).all())
    with pytest.raises(ValueError, match="edges: node ids must lie in"):
        rasfast.graph_transformer_pool(x, bad, ea, ptr, ls, backend="cuda")
    with pytest.raises(ValueError, match="validate"):
        rasfast.graph_transformer_pool(x, ei, ea, ptr, ls, backend="cuda", validate="some")
    with count_device_work() as w:   # transformer_conv too
        rasfast.transformer_conv(x, ei, ea, ls[0][0], backend="cuda", validate="none")
    assert w.syncs == 0, w.summary()


def test_csr_tuple_input_budget():
    x, ei, ea = layer_problem(fresh_seed())
    m = conv(32, 16, 4, 16)
    order = torch.argsort(ei[1], stable=True)
    indptr = torch.searchsorted(ei[1][order].contiguous(), torch.arange(x.shape[0] + 1))
    want = rasfast.transformer_conv(x, ei, ea, m, backend="torch")
    with count_device_work() as w:
        got = rasfast.transformer_conv(x, (indptr, ei[0][order]), ea[order], m, backend="cuda")
    assert w.syncs <= 1 and w.allocs == 0, w.summary()
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)


def _graph_bad_cases():
    x, ei, ea = layer_problem(3, n=10, e=30)
    xb, eib, eab, ptr = batch_problem(3)
    n = x.shape[0]
    hi, lo = ei.clone(), ei.clone()
    hi[0, 4] = n
    lo[1, 7] = -2
    order = torch.argsort(ei[1], stable=True)
    indptr = torch.searchsorted(ei[1][order].contiguous(), torch.arange(n + 1))
    dec = indptr.clone()
    dec[3] = dec[4] + 1
    short = indptr.clone()
    short[-1] -= 1
    src_bad = ei[0][order].clone()
    src_bad[0] = n + 3
    bad_gp = ptr.clone()
    bad_gp[2] = bad_gp[3] + 1
    end_gp = ptr.clone()
    end_gp[-1] += 1
    layer = dict(x=x, ea=ea)
    return [
        ("conv", dict(layer, edges=hi), r"edges: node ids must lie in \[0, N\) with N = 10; got range \[0, 10\]"),
        ("conv", dict(layer, edges=lo), r"got range \[-2, "),
        ("conv", dict(layer, edges=hi.numpy()), "edges: node ids must lie in"),
        ("conv", dict(layer, edges=(dec, ei[0][order]), ea=ea[order]), "edges.indptr: must be non-decreasing"),
        ("conv", dict(layer, edges=(short, ei[0][order]), ea=ea[order]), "end at E"),
        ("conv", dict(layer, edges=(indptr, src_bad), ea=ea[order]), "edges.src: node ids must lie in"),
        ("pool", dict(x=xb, edges=eib, ea=eab, ptr=bad_gp), r"graph_ptr: must be non-decreasing \(monotone\)"),
        ("pool", dict(x=xb, edges=eib, ea=eab, ptr=end_gp), "graph_ptr: must start at 0 and end at N"),
        ("pool", dict(x=xb, edges=eib, ea=eab, ptr=end_gp.numpy()), "graph_ptr: must start at 0 and end at N"),
    ]


@pytest.mark.parametrize("case", range(len(_graph_bad_cases())))
def test_graph_bad_input_raises_the_same_error(case):
    op, a, msg = _graph_bad_cases()[case]
    for backend in ("cuda", "torch"):
        with pytest.raises(ValueError, match=msg):
            if op == "conv":
                rasfast.transformer_conv(a["x"], a["edges"], a["ea"], conv(32, 16, 4, 16),
                                         backend=backend)
            else:
                rasfast.graph_transformer_pool(a["x"], a["edges"], a["ea"], a["ptr"], layers(),
                                               backend=backend)


# ---------------------------------------------------------------------------------- segment

def seg_problem(seed, B=8, D=16, max_len=10, table=None):
    """Values k/64, |k| <= 100: every score is exact in float32 whatever the summation order,
    so the kernels and the reference agree bit for bit, also on repeated table rows (with
    random floats the reference's own rounding can split two copies of one row)."""
    rng = np.random.default_rng(seed)
    lens = rng.integers(0, max_len + 1, size=B)
    lens[::3] = 0
    ptr = torch.from_numpy(np.concatenate([[0], np.cumsum(lens)]).astype(np.int64))
    M = int(ptr[-1])
    exact = lambda *shape: torch.from_numpy((rng.integers(-100, 101, size=shape) / 64).astype(np.float32))  # noqa: E731
    q = exact(B, D)
    if table is None:
        return q, exact(M, D), ptr, None
    c = exact(table, D)
    return q, c, ptr, torch.from_numpy(rng.integers(0, table, size=M))


# measured (module docstring): the flag's fill and read, two kernels (the Python kernel); the
# C++ CUDA operator kernel, which serves the public op: the flag's reset kernel, two kernels
TOPK_LAUNCHES = 4


@pytest.mark.parametrize("table", [None, 50])
def test_segment_topk_budget_and_reference(table):
    seed = fresh_seed()
    q, c, ptr, ids = seg_problem(seed, table=table)
    with count_device_work(watch=[c]) as w:
        got_i, got_s = rasfast.segment_topk_scores(q, c, ptr, 4, cand_ids=ids, backend="cuda")
    assert w.syncs <= 1 and w.allocs == 0 and w.watched_reads == 0, (seed, w.summary())
    assert w.launches <= TOPK_LAUNCHES and w.kernels <= 3, (seed, w.summary())
    want_i, want_s = seg_ref.segment_topk_from_scores(seg_ref.candidate_scores(q, c, ptr, ids), ptr, 4)
    assert torch.equal(got_i, want_i), seed
    torch.testing.assert_close(got_s, want_s, rtol=1e-5, atol=1e-5)


def test_segment_max_rank_budget_and_reference():
    seed = fresh_seed()
    rng = np.random.default_rng(seed)
    _, _, ptr, _ = seg_problem(seed)
    M = int(ptr[-1])
    s = torch.from_numpy((rng.integers(-3, 4, size=M) / 4).astype(np.float32))
    s[torch.from_numpy(rng.random(M) < 0.1)] = float("-inf")
    g = torch.from_numpy(rng.integers(0, 20, size=M))
    with count_device_work(watch=[s]) as w:
        got = rasfast.segment_max_rank(s, g, ptr, 3, backend="cuda")
    # the NaN check is the kernel's: no pass over item_scores outside it
    assert w.syncs <= 1 and w.allocs == 0 and w.watched_reads == 0, (seed, w.summary())
    # the flag's fill, the kernel, the read (Python kernel); the flag's reset kernel and the
    # kernel (the C++ CUDA operator kernel, which serves the public op)
    assert w.launches <= 3 and w.kernels <= 2, (seed, w.summary())
    want = seg_ref.segment_max_rank(s, g, ptr, 3)
    assert torch.equal(got[0], want[0]), seed
    torch.testing.assert_close(got[1], want[1])


def test_segment_ops_validate_none_no_sync_and_safe():
    """validate="none": the flag is not read (no sync: the call can be captured in a CUDA graph);
    good input gives the reference's answer, bad input an unspecified one but no error and no
    out-of-bounds access (the ASan build runs this file: `make test-asan`)."""
    seed = fresh_seed()
    q, c, ptr, ids = seg_problem(seed, table=40)
    with count_device_work(watch=[c]) as w:
        got = rasfast.segment_topk_scores(q, c, ptr, 4, cand_ids=ids, backend="cuda", validate="none")
    assert w.syncs == 0 and w.launches <= 3 and w.watched_reads == 0, (seed, w.summary())
    want = seg_ref.segment_topk_from_scores(seg_ref.candidate_scores(q, c, ptr, ids), ptr, 4)
    assert torch.equal(got[0], want[0]), seed
    rng = np.random.default_rng(seed)
    M = int(ptr[-1])
    s = torch.from_numpy((rng.integers(-3, 4, size=M) / 4).astype(np.float32))
    g = torch.from_numpy(rng.integers(0, 9, size=M))
    with count_device_work() as w:
        got = rasfast.segment_max_rank(s, g, ptr, 3, backend="cuda", validate="none")
    assert w.syncs == 0 and w.launches <= 2, (seed, w.summary())
    assert torch.equal(got[0], seg_ref.segment_max_rank(s, g, ptr, 3)[0]), seed
    far, wild = ids.clone(), ptr.clone()
    far[::2] = 10 ** 6
    far[1] = -5
    wild[1:-1] = torch.from_numpy(rng.integers(-50, 3 * M, size=len(ptr) - 2))
    for bad_ptr in (ptr, wild):
        out = rasfast.segment_topk_scores(q, c, bad_ptr, 4, cand_ids=far, backend="cuda", validate="none")
        assert out[0].shape == (len(ptr) - 1, 4)
        bad_g = g.clone()
        bad_g[::3] = -1
        out = rasfast.segment_max_rank(s, bad_g, bad_ptr, 3, backend="cuda", validate="none")
        assert out[0].shape == (len(ptr) - 1, 3)
    with pytest.raises(ValueError, match="cand_ids"):  # the default still checks
        rasfast.segment_topk_scores(q, c, ptr, 4, cand_ids=far, backend="cuda")
    with pytest.raises(ValueError, match="validate"):
        rasfast.segment_max_rank(s, g, ptr, 3, backend="cuda", validate="sometimes")


def _segment_bad_cases():
    q, c, ptr, _ = seg_problem(4)
    qt, tab, ptr_t, ids = seg_problem(4, table=30)
    nan_q = q.clone()
    nan_q[2, 1] = float("nan")
    nan_c = c.clone()
    nan_c[3, 0] = float("inf")
    dec = ptr.clone()
    dec[2] = dec[3] + 1
    end = ptr.clone()
    end[-1] += 1
    far = ids.clone()
    far[1] = 30
    M = int(ptr[-1])
    s = torch.zeros(M)
    s_nan = s.clone()
    s_nan[4] = float("nan")
    groups = torch.arange(M)
    big = groups.clone()
    big[0] = 2 ** 31
    topk = lambda **kw: ("topk", dict(dict(q=q, c=c, ptr=ptr, ids=None), **kw))  # noqa: E731
    rank = lambda **kw: ("rank", dict(dict(s=s, g=groups, ptr=ptr), **kw))  # noqa: E731
    return [
        (*topk(q=nan_q), "q_emb: contains NaN or infinite values"),
        (*topk(c=nan_c), "cand_emb: a candidate's score is not finite"),
        (*topk(ptr=dec), "cand_ptr: must be non-decreasing"),
        (*topk(ptr=end), r"cand_ptr: must start at 0 and end at M, the number of candidates \(\d+\), got 0 \.\. "),
        (*topk(ptr=end.numpy()), "cand_ptr: must start at 0 and end at M"),
        (*topk(q=qt, c=tab, ptr=ptr_t, ids=far), r"cand_ids: must be in \[0, T = 30\) \(rows of cand_emb\), got 0 \.\. 30"),
        (*rank(s=s_nan), "item_scores: contains NaN"),
        (*rank(g=big), r"item_to_group: group ids must be in \[0, 2\^31\)"),
        (*rank(ptr=dec), "ptr: must be non-decreasing"),
        (*rank(ptr=end), "ptr: must start at 0 and end at M"),
    ]


@pytest.mark.parametrize("case", range(len(_segment_bad_cases())))
def test_segment_bad_input_raises_the_same_error(case):
    op, a, msg = _segment_bad_cases()[case]
    for backend in ("cuda", "torch"):
        with pytest.raises(ValueError, match=msg):
            if op == "topk":
                rasfast.segment_topk_scores(a["q"], a["c"], a["ptr"], 3, cand_ids=a["ids"],
                                            backend=backend)
            else:
                rasfast.segment_max_rank(a["s"], a["g"], a["ptr"], 3, backend=backend)
