"""Every CUDA kernel executed on the CPU emulator (rasfast._cuda_emu, csrc/emu/) and compared
with the reference: the same .cu sources, host launchers, argument checks, launch
configurations, scratch allocation and cub calls as on a GPU, on CPU tensors.

Each family runs under two scheduling orders (CUEMU_ORDER: the order in which threads
resume after a barrier or warp collective, and blocks run); a correct kernel gives the same
result under both. ``RASFAST_CUDA_EMU=1 pytest -m cuda_emu`` runs this file; ``make test``
runs it too (the fixture below sets the variable).
"""
import os

import numpy as np
import pytest
import torch

import rasfast
from rasfast import dispatch
from rasfast.ops.segment import segment_max_rank, segment_topk_scores
from rasfast.reference import segment as seg_ref

from test_beam import make_problem, search, assert_same as beam_same
from test_segment import topk_problem, assert_same as seg_same
from test_select import make_input, check as select_check
from test_theme_ops import float_data, int_data, ref_fused, ref_scope
from rasfast.reference.theme_check import check_scoped_search

pytestmark = [pytest.mark.cuda_emu, pytest.mark.timeout(600)]

DTYPES = (torch.float32, torch.float16, torch.bfloat16)
# CUEMU_TEST_ORDERS=random,reverse (for instance) widens the sweep by hand
ORDERS = tuple(os.environ.get("CUEMU_TEST_ORDERS", "forward,reverse").split(","))


@pytest.fixture(autouse=True)
def emulated(monkeypatch):
    monkeypatch.setenv("RASFAST_CUDA_EMU", "1")
    info = rasfast.backends()["cuda"]
    # _cuda_emu is built on every machine: its absence is a failure, never a skip
    assert info["available"] and info["emulated"], info
    yield


@pytest.fixture(params=ORDERS)
def order(request, monkeypatch):
    monkeypatch.setenv("CUEMU_ORDER", request.param)
    return request.param


# ------------------------------------------------------------------------------ dispatch
def test_backends_report_the_emulator():
    info = rasfast.backends()["cuda"]
    assert info["emulated"] is True and info["built"] is True
    mod = dispatch.cuda_module()
    assert mod.__name__ == "rasfast._cuda_emu" and mod.emulated is True
    assert mod.device_status() == "ok" and mod.scratch_allocator() == "pool"


def test_auto_still_picks_cpu_for_cpu_tensors():
    x = torch.randn(2, 50)
    assert dispatch.resolve("auto", x.device, "select_k") == "cpu"
    assert dispatch.resolve("cuda", x.device, "select_k") == "cuda"


def test_without_the_variable_cuda_needs_a_device(monkeypatch):
    monkeypatch.setenv("RASFAST_CUDA_EMU", "0")
    if torch.cuda.is_available():
        pytest.skip("a GPU is present")
    with pytest.raises((rasfast.BackendUnavailable, ValueError), match="cuda|CUDA"):
        rasfast.select_k(torch.randn(2, 5), 1, backend="cuda")


def test_the_real_cuda_module_is_not_the_emulator():
    mod, _ = dispatch._import("rasfast._cuda")
    if mod is None:
        pytest.skip("rasfast._cuda not built here (no nvcc at install time)")
    assert mod.emulated is False


# -------------------------------------------------------------------------------- select_k
SELECT_CASES = [(1, 1, 1), (3, 1000, 1), (3, 1000, 1000), (2, 4097, 333), (5, 300, 17),
                (70, 64, 9), (2, 257, 256)]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("mode", ["randn", "ties"])
def test_select_matches_reference(dtype, mode, order):
    for B, N, k in SELECT_CASES:
        x = make_input(B, N, mode, dtype, seed=N + k)
        for largest in (False, True):
            select_check(x, k, largest, True, "cuda")
        select_check(x, k, False, False, "cuda")


def test_select_all_equal_and_signed_zeros(order):
    x = torch.zeros(3, 600)
    x[:, ::2] = -0.0
    select_check(x, 250, False, True, "cuda")
    x = torch.full((2, 777), 3.5)
    select_check(x, 777, True, True, "cuda")


def test_select_bad_input_is_the_same_error():
    bad = torch.randn(2, 5)
    for backend in ("cuda", "cpu"):
        with pytest.raises(ValueError, match="k"):
            rasfast.select_k(bad, 9, backend=backend)


# The rebuilt kernel's paths: several blocks per row (a row's last block fixes each digit),
# candidate buffers that fit and that overflow (one bin holds everything), the index digits
# (all keys equal), shared-memory sorts up to k = 2048 and the device-wide sort above it,
# rows whose length is not a multiple of the 16-byte vector (scalar heads and tails).
SELECT_KERNEL_CASES = [(1, 50_000, 10), (2, 20_011, 3_000), (3, 9_001, 2_049), (2, 16_411, 2_048),
                       (4, 33, 32), (1, 70_001, 35_000)]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("mode", ["randn", "ties", "narrow", "const"])
def test_select_kernel_paths_match_reference(dtype, mode, order):
    for B, N, k in SELECT_KERNEL_CASES:
        x = make_input(B, N, mode, dtype, seed=N + k)
        select_check(x, k, mode != "const", True, "cuda")
        select_check(x, k, False, False, "cuda")


@pytest.mark.parametrize("dtype", DTYPES)
def test_select_nan_ranks_above_inf_like_torch_sort(dtype, order):
    """The cuda backend does not look for NaN (a check costs a pass and a host sync): it ranks
    NaN of either sign above +inf, ties by index, exactly as torch.sort's stable order."""
    g = torch.Generator().manual_seed(5)
    x = torch.randn(3, 5_003, generator=g)
    x[torch.rand(3, 5_003, generator=g) < 0.01] = float("nan")
    x[0, :7] = -float("nan")
    x[1, 100:110] = float("inf")
    x = x.to(dtype)
    for k, largest in ((10, True), (4_990, False), (60, False), (3_000, True)):
        select_check(x, k, largest, True, "cuda")


# ---------------------------------------------------------------------------- theme ops
THEME_CASES = [  # B, N, T, D, K, k
    (3, 50, 7, 5, 8, 3),
    (5, 130, 17, 33, 40, 10),     # N crosses a 64-row tile, B not a multiple of 4
    (1, 1, 3, 2, 1, 1),           # N = 1
    (2, 3, 4, 3, 10, 5),          # K >= N, k > N: padding with -1 / -inf
    (4, 200, 298, 16, 20, 25),    # k > K, T = 298
    (6, 2100, 9, 8, 700, 7),      # several scoring blocks
    (33, 300, 5, 4, 40, 3),       # B beyond one query tile
]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("case", THEME_CASES)
def test_theme_exact_parity(dtype, case, order):
    B, N, T, D, K, k = case
    q, qe, c, e = int_data(B, N, T, D, dtype, seed=N)
    for metric in ("l2", "ip"):
        want = ref_scope(q, c, K, metric)
        assert torch.equal(rasfast.theme_scope(q, c, K, metric, backend="cuda"), want)
        wi, ws = ref_fused(q, qe, c, e, K, k, 0.5, metric)
        gi, gs = rasfast.theme_scoped_search(q, qe, c, e, K, k, 0.5, metric, backend="cuda")
        assert torch.equal(gi, wi) and torch.equal(gs, ws)
        wi, ws = rasfast.scoped_dense_search(qe, e, want, k, backend="torch")
        gi, gs = rasfast.scoped_dense_search(qe, e, want, k, backend="cuda")
        assert torch.equal(gi, wi) and torch.equal(gs, ws)


@pytest.mark.parametrize("dtype", DTYPES)
def test_theme_float_data_checked(dtype):
    q, qe, c, e = float_data(3, 1500, 298, 64, dtype)
    for K, k, w in [(700, 10, 0.1), (1500, 256, 0.0), (5, 1, 1.0)]:
        gi, gs = rasfast.theme_scoped_search(q, qe, c, e, K, k, w, backend="cuda")
        check_scoped_search(gi, gs, q, qe, c, e, K, k, w)


def test_theme_all_rows_identical_ties_by_id(order):
    q = torch.ones(2, 6)
    c = torch.ones(300, 6)
    e = torch.ones(300, 4)
    assert torch.equal(rasfast.theme_scope(q, c, 77, backend="cuda"), torch.arange(77).expand(2, 77))
    ids, _ = rasfast.theme_scoped_search(q, torch.ones(2, 4), c, e, 50, 20, backend="cuda")
    assert torch.equal(ids, torch.arange(20).expand(2, 20))


def test_theme_k_limit_is_a_clear_error():
    q, qe, c, e = int_data(2, 400, 5, 4)
    kmax = dispatch.cuda_attr("theme_max_k")
    assert kmax == 256
    with pytest.raises(ValueError, match="k"):
        rasfast.theme_scoped_search(q, qe, c, e, 300, kmax + 1, backend="cuda")
    # auto never routes CPU tensors to the emulator
    ids, _ = rasfast.theme_scoped_search(q, qe, c, e, 300, kmax + 1)
    assert ids.shape == (2, kmax + 1)


def test_theme_bad_input_is_the_same_error():
    q, qe, c, e = int_data(2, 40, 5, 4)
    for backend in ("cpu", "cuda"):
        with pytest.raises(ValueError, match="K"):
            rasfast.theme_scope(q, c, 0, backend=backend)
        with pytest.raises(ValueError, match="q_ppd|corpus|T|dim"):
            rasfast.theme_scope(q[:, :3], c, 2, backend=backend)


# ---------------------------------------------------------------------------- beam search
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("max_neighbors", [None, 2])
def test_beam_matches_reference(dtype, max_neighbors, order):
    rng = np.random.default_rng(7 + (max_neighbors or 0))
    for n, D, B in [(40, 8, 3), (150, 33, 5), (3, 4, 2)]:
        p = make_problem(rng, n, D, B, dtype=dtype)
        for kw in [dict(beam_width=4, max_len=3), dict(beam_width=1, max_len=1),
                   dict(beam_width=9, max_len=4, gamma=2.0)]:
            kw = dict(kw, max_neighbors=max_neighbors)
            beam_same(search(p, "cuda", **kw), search(p, "torch", **kw))


def test_beam_random_floats_and_int32_indices(order):
    rng = np.random.default_rng(3)
    p = make_problem(rng, 120, 24, 4, exact=False, idx_dtype=np.int32)
    kw = dict(beam_width=5, max_len=4)
    beam_same(search(p, "cuda", **kw), search(p, "torch", **kw))


def test_beam_kernel_error_codes():
    rng = np.random.default_rng(5)
    p = make_problem(rng, 30, 8, 2)
    bad = dict(p, emb=p["emb"].clone())
    bad["emb"][:] = float("nan")
    with pytest.raises(ValueError, match="NaN|finite|triple_emb"):
        search(bad, "cuda", beam_width=3, max_len=3)


# -------------------------------------------------------------------------- segment ops
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("layout", ["matrix", "table"])
def test_segment_topk_matches_reference(dtype, layout, order):
    rng = np.random.default_rng(hash((str(dtype), layout)) % 2**32)
    B, D, L = 11, 37, 70
    args, ids = topk_problem(rng, B, D, L, table=50 if layout == "table" else None, dtype=dtype)
    for n in (1, 4, L + 3):
        want = seg_ref.segment_topk_scores(args["q_emb"], args["cand_emb"], args["cand_ptr"], n, ids)
        seg_same(segment_topk_scores(**args, n=n, backend="cuda"), want)


def test_segment_topk_beyond_one_select_buffer(order):
    # a segment longer than the kernel's 4096-key shared buffer: several merge rounds
    rng = np.random.default_rng(1)
    args, ids = topk_problem(rng, 3, 8, 6000)
    for n in (1, 2048):
        want = seg_ref.segment_topk_scores(args["q_emb"], args["cand_emb"], args["cand_ptr"], n, ids)
        seg_same(segment_topk_scores(**args, n=n, backend="cuda"), want)


def test_segment_limits_are_clear_errors():
    rng = np.random.default_rng(2)
    args, _ = topk_problem(rng, 3, 8, 10)
    with pytest.raises(ValueError, match="n"):
        segment_topk_scores(**args, n=2049, backend="cuda")
    bad = dict(args, q_emb=args["q_emb"].clone())
    bad["cand_emb"] = args["cand_emb"].clone()
    if bad["cand_emb"].numel():
        bad["cand_emb"][0, 0] = float("inf")
        with pytest.raises(ValueError):
            segment_topk_scores(**bad, n=3, backend="cuda")


def _rank_problem(rng, B, M, G):
    lens = rng.integers(0, 2 * M // max(B, 1) + 1, size=B)
    lens[::4] = 0
    ptr = torch.from_numpy(np.concatenate([[0], np.cumsum(lens)]).astype(np.int64))
    m = int(ptr[-1])
    s = torch.from_numpy((rng.integers(-8, 9, size=m) / 4).astype(np.float32))  # ties
    g = torch.from_numpy(rng.integers(0, G, size=m).astype(np.int64))
    return s, g, ptr


@pytest.mark.parametrize("k", [1, 10, 2048])
def test_segment_max_rank_matches_reference(k, order):
    rng = np.random.default_rng(k)
    s, g, ptr = _rank_problem(rng, 9, 3000, 700)
    seg_same(segment_max_rank(s, g, ptr, k, backend="cuda"), seg_ref.segment_max_rank(s, g, ptr, k))


# ---------------------------------------------------------------------------- graph conv
tg = pytest.importorskip("torch_geometric")


def _conv(din, c, heads, concat=True, beta=False, edge_dim=None, seed=0):
    from torch_geometric.nn import TransformerConv
    torch.manual_seed(seed)
    conv = TransformerConv(din, c, heads=heads, concat=concat, beta=beta, edge_dim=edge_dim).eval()
    with torch.no_grad():
        for p in conv.parameters():
            if p.dim() == 1:
                p.normal_(0, 0.1)
    return conv


def _graph(n, e, din, edge_dim, seed=1):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, din, generator=g)
    ei = torch.randint(0, max(n, 1), (2, e), generator=g) if n else torch.zeros((2, 0), dtype=torch.long)
    ea = torch.randn(e, edge_dim, generator=g) if edge_dim else None
    return x, ei, ea


def _close(out, ref, rel):
    out, ref = torch.as_tensor(out).float(), ref.float()
    scale = max(ref.abs().max().item(), 1e-6) if ref.numel() else 1.0
    torch.testing.assert_close(out, ref, rtol=rel, atol=rel * scale)


@pytest.mark.parametrize("heads,concat,beta,edge_dim,c", [
    (1, True, False, None, 6), (4, True, False, 12, 6), (8, True, True, 12, 40), (4, False, False, 12, 70),
    (4, False, True, None, 33)])  # c > 32 and > 64: several channel registers per lane
def test_graph_conv_layer_matches_pyg(heads, concat, beta, edge_dim, c, order):
    conv = _conv(24, c, heads, concat, beta, edge_dim)
    for n, e in [(13, 9), (13, 60), (1, 0), (40, 400)]:
        x, ei, ea = _graph(n, e, 24, edge_dim)
        with torch.no_grad():
            ref = conv(x, ei, ea)
        _close(rasfast.transformer_conv(x, ei, ea, conv, backend="cuda"), ref, 1e-4)


@pytest.mark.parametrize("dtype,rel", [(torch.float16, 3e-2), (torch.bfloat16, 6e-2)])
def test_graph_conv_half_precision(dtype, rel):
    conv = _conv(16, 8, 4, edge_dim=10)
    x, ei, ea = _graph(20, 70, 16, 10)
    with torch.no_grad():
        ref = conv(x, ei, ea)
        out = rasfast.transformer_conv(x.to(dtype), ei, ea.to(dtype), conv.to(dtype), backend="cuda")
    assert out.dtype == dtype
    _close(out, ref, rel)


def test_graph_pool_matches_pyg_stack(order):
    from torch_geometric.nn import global_mean_pool
    convs = [_conv(16, 8, 4, edge_dim=10, seed=s) for s in range(3)]
    convs[1] = _conv(32, 8, 4, edge_dim=10, seed=1)
    convs[2] = _conv(32, 8, 4, edge_dim=10, seed=2)
    norms = [torch.nn.LayerNorm(32).eval() for _ in range(2)]
    sizes = [5, 0, 9, 1, 12]
    ptr = torch.tensor(np.concatenate([[0], np.cumsum(sizes)]), dtype=torch.long)
    n = int(ptr[-1])
    g = torch.Generator().manual_seed(4)
    x = torch.randn(n, 16, generator=g)
    src, dst = [], []
    for i, s in enumerate(sizes):
        lo = int(ptr[i])
        for _ in range(3 * s):
            src.append(lo + int(torch.randint(0, s, (1,), generator=g)))
            dst.append(lo + int(torch.randint(0, s, (1,), generator=g)))
    ei = torch.tensor([src, dst], dtype=torch.long)
    ea = torch.randn(ei.shape[1], 10, generator=g)
    with torch.no_grad():
        h = x
        for i, conv in enumerate(convs):
            h = conv(h, ei, ea)
            if i < 2:
                h = torch.relu(norms[i](h))
        batch = torch.repeat_interleave(torch.arange(len(sizes)), torch.tensor(sizes))
        ref = torch.zeros(len(sizes), h.shape[1])
        pooled = global_mean_pool(h, batch, size=len(sizes))
        ref[:] = pooled
        layers = [(convs[0], norms[0]), (convs[1], norms[1]), convs[2]]
        out = rasfast.graph_transformer_pool(x, ei, ea, ptr, layers, backend="cuda")
    _close(out, ref, 1e-4)


# ------------------------------------------------------------------ degenerate launches
# Empty batches and graphs reach the launchers with zero-sized grids unless the host code
# returns early: on a GPU a zero grid dimension is a launch error, and so it is here.
def test_empty_batches_every_family():
    assert rasfast.select_k(torch.randn(0, 5), 2, backend="cuda")[0].shape == (0, 2)
    q, qe, c, e = torch.rand(0, 7), torch.rand(0, 4), torch.rand(50, 7), torch.rand(50, 4)
    assert rasfast.theme_scope(q, c, 3, backend="cuda").shape == (0, 3)
    assert rasfast.theme_scoped_search(q, qe, c, e, 3, 2, backend="cuda")[0].shape == (0, 2)
    scope = torch.zeros(0, 3, dtype=torch.long)
    assert rasfast.scoped_dense_search(qe, e, scope, 2, backend="cuda")[0].shape == (0, 2)
    ids, sc = segment_topk_scores(torch.rand(3, 4), torch.rand(0, 4), torch.zeros(4, dtype=torch.long), 3,
                                  backend="cuda")
    assert (ids == -1).all() and torch.isinf(sc).all()
    ids, _ = segment_max_rank(torch.rand(0), torch.zeros(0, dtype=torch.long), torch.zeros(3, dtype=torch.long), 3,
                              backend="cuda")
    assert ids.shape == (2, 3) and (ids == -1).all()


def test_beam_empty_batch_and_seedless_queries():
    rng = np.random.default_rng(0)
    p = make_problem(rng, 30, 8, 3)
    r = rasfast.triple_beam_search(p["graph"], p["emb"], p["q"][:0], [], backend="cuda")
    assert torch.as_tensor(r.sequences).shape[0] == 0
    seedless = dict(p, seeds=[np.array([], dtype=np.int64)] * 3)
    beam_same(search(seedless, "cuda"), search(seedless, "torch"))


@pytest.mark.parametrize("b,L,D", [(64, 6, 8), (16, 3, 1024), (1, 8, 3)])
def test_beam_wide_long_and_deep(b, L, D, order):
    rng = np.random.default_rng(b + L + D)
    p = make_problem(rng, 60, D, 2)
    beam_same(search(p, "cuda", beam_width=b, max_len=L), search(p, "torch", beam_width=b, max_len=L))


def test_graph_conv_empty_and_wide():
    conv = _conv(8, 4, 2, edge_dim=3)
    empty = rasfast.transformer_conv(torch.rand(0, 8), torch.zeros(2, 0, dtype=torch.long), torch.rand(0, 3), conv,
                                     backend="cuda")
    assert empty.shape == (0, 8)
    out = rasfast.graph_transformer_pool(torch.rand(0, 8), torch.zeros(2, 0, dtype=torch.long), torch.rand(0, 3),
                                         torch.zeros(4, dtype=torch.long), [conv], backend="cuda")
    assert out.shape == (3, 8) and (out == 0).all()
    wide = _conv(8, 300, 2, edge_dim=3)   # 300 channels: ten registers per lane
    x, ei, ea = _graph(6, 14, 8, 3)
    with torch.no_grad():
        _close(rasfast.transformer_conv(x, ei, ea, wide, backend="cuda"), wide(x, ei, ea), 1e-4)
