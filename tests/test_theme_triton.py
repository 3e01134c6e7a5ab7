"""Triton theme kernels under the interpreter (tiny sizes), against the torch reference.

Covers both pass-1 kernels (small-B, B <= 8: CUDA-core direct sums; B > 8: tl.dot with the
tf32 hi/lo query split), the cut kernel's candidate compaction and its fallback when the
first-digit bin overflows the buffer, K = 1 (a value Triton specialises), ties, and sizes that
cross the row (64), T (16/32) and query (32) tiles. GPU parity lives in test_theme_ops.py.
"""
import pytest
import torch
from backends_util import TRITON_CPU, TRITON_CPU_SKIP
from test_theme_ops import DTYPES, float_data, int_data, ref_fused, ref_scope

import rasfast
from rasfast.reference.theme import theme_distances
from rasfast.reference.theme_check import check_scoped_search, check_theme_scope

pytestmark = [pytest.mark.triton,
              pytest.mark.skipif(not TRITON_CPU, reason=TRITON_CPU_SKIP)]


def kt():
    return rasfast.dispatch.triton_kernels().theme


def key_values(keys):
    """Invert the kernels' ordered int64 keys back to the float32 value (distance or -ip)."""
    u = torch.where(keys >= 0x80000000, keys - 0x80000000, 0xFFFFFFFF - keys)
    return u.to(torch.int32).view(torch.float32) if u.numel() else u.float()


# small-B kernel (QB = 4) in every dtype; the tl.dot kernel over two query tiles (interpreted
# cuts cost ~0.1 s per query, so once)
@pytest.mark.parametrize("B,dtype,metrics", [(3, d, ("l2", "ip")) for d in DTYPES]
                         + [(33, torch.bfloat16, ("l2",)), (10, torch.float32, ("ip",))])
def test_exact_parity_across_tiles(B, dtype, metrics):
    q, qe, c, e = int_data(B, 70, 20, 6, dtype, seed=B)
    for metric in metrics:
        assert torch.equal(rasfast.theme_scope(q, c, 23, metric, backend="triton"),
                           ref_scope(q, c, 23, metric))
        wi, ws = ref_fused(q, qe, c, e, 23, 5, 0.5, metric)
        gi, gs = rasfast.theme_scoped_search(q, qe, c, e, 23, 5, 0.5, metric, backend="triton")
        assert torch.equal(gi, wi) and torch.equal(gs, ws), (B, dtype, metric)


@pytest.mark.parametrize("B", [1, 8, 9])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_pass1_keys_match_reference_distances(B, dtype):
    """Both pass-1 kernels on float data: the float32 queries' hi/lo split keeps near-fp32 keys."""
    q, _, c, _ = float_data(B, 70, 37, 4, dtype, seed=B)
    q = q.float()
    for metric in ("l2", "ip"):
        got = key_values(kt()._keys(q, c, metric))
        want = theme_distances(q, c, metric)
        want = want if metric == "l2" else -want
        torch.testing.assert_close(got, want, atol=2e-6, rtol=1e-5)


def test_cut_compaction_and_fallback_agree():
    """The candidate buffer (default) and reading the keys again (buffer too small) find the
    same K-th key and last in-scope id, for every K, with many ties."""
    q, _, c, _ = int_data(2, 300, 3, 4, seed=1)  # T = 3 of {0,1,2}: at most 27 distinct rows
    keys = kt()._keys(q, c, "l2")
    for K in (1, 50, 299):
        cut_a, last_a = kt()._cuts(keys, K)
        cut_b, last_b = kt()._cuts(keys, K, cap=1)
        assert torch.equal(cut_a, cut_b) and torch.equal(last_a, last_b), K
        srt = torch.sort(keys, dim=1, stable=True)
        assert torch.equal(cut_a, srt.values[:, K - 1])
        assert torch.equal(last_a, srt.indices[:, K - 1])  # stable: ties by lower id


def test_k1_ties_and_identical_rows():
    q, qe, c, e = int_data(2, 40, 4, 3, seed=2)
    c[:] = c[0]  # every row ties: the scope is the lowest ids
    for K in (1, 7):
        got = rasfast.theme_scope(q, c, K, backend="triton")
        assert torch.equal(got, torch.arange(K).expand(2, K))
        wi, ws = ref_fused(q, qe, c, e, K, 3, 0.0, "l2")
        gi, gs = rasfast.theme_scoped_search(q, qe, c, e, K, 3, backend="triton")
        assert torch.equal(gi, wi) and torch.equal(gs, ws)


def test_float_data_dot_path_within_tolerance():
    q, qe, c, e = float_data(9, 100, 33, 9, torch.float16, seed=4)
    for metric in ("l2", "ip"):
        check_theme_scope(rasfast.theme_scope(q, c, 40, metric, backend="triton"), q, c, 40, metric)
        gi, gs = rasfast.theme_scoped_search(q, qe, c, e, 40, 6, 0.1, metric, backend="triton")
        check_scoped_search(gi, gs, q, qe, c, e, 40, 6, 0.1, metric)


@pytest.mark.parametrize("dtype,B,N,X", [(torch.float16, 3, 130, 70), (torch.bfloat16, 17, 129, 64),
                                         (torch.float16, 1, 5, 3)])
def test_split_dot_kernel_matches_float32_products(dtype, B, N, X):
    """The GEMM path's kernel (cuda theme ops on a GPU): the split queries' products and the
    fused L2 terms are near-float32 (the 16-bit corpus exact, the parts ~24 bits), across the
    row (128), query (16..64) and X (64) tiles."""
    from rasfast.ops.theme_gemm import corpus_norms
    g = torch.Generator().manual_seed(B * N)
    q = torch.rand(B, X, generator=g)
    c = torch.rand(N, X, generator=g).to(dtype)
    parts = kt().split_parts(q, dtype)
    want = q.double() @ c.double().T
    got = kt().split_dot(parts, c)
    torch.testing.assert_close(got.double(), want, atol=1e-5, rtol=1e-6)
    cn, qn = corpus_norms(c), q.square().sum(1)
    got = kt().split_dot(parts, c, cn, qn)
    want_l2 = ((q.double()[:, None, :] - c.double()[None]) ** 2).sum(-1)
    torch.testing.assert_close(got.double(), want_l2, atol=1e-5, rtol=1e-5)
    # rows padded to a stride of 16 elements (pad_rows: the layout the GPU streams) give the same
    from rasfast.ops.theme_gemm import pad_rows
    padded = pad_rows(c)
    assert padded.stride(0) % 16 == 0
    torch.testing.assert_close(kt().split_dot(parts, padded, cn, qn), got, atol=0, rtol=0)
    # the scope mask in the epilogue: -inf where drop, the same float32 values elsewhere
    drop = torch.rand(B, N, generator=g) < 0.6
    masked = kt().split_dot(parts, c, drop=drop)
    plain = kt().split_dot(parts, c)
    assert torch.equal(masked, plain.masked_fill(drop, float("-inf")))
    # the split matters: the hi part alone is off by far more than the tolerance
    hi_only = kt().split_dot(parts[:1].contiguous(), c)
    assert (hi_only.double() - want).abs().max() > 1e-4


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_split_dot_streams_padded_rows_whole(dtype):
    """Rows padded to a stride of 16 elements are streamed whole (the width rounded up to 16,
    the queries' parts padded with zeros): the padding counts as zeros whatever it holds
    (inf here: a wrong kernel gives inf or NaN), read as is where pad_rows made it."""
    from rasfast.ops.theme_gemm import pad_rows, zero_tail
    g = torch.Generator().manual_seed(7)
    B, N, X = 5, 150, 298
    q = torch.rand(B, X, generator=g)
    c = torch.rand(N, X, generator=g).to(dtype)
    parts = kt().split_parts(q, dtype)
    plain = kt().split_dot(parts, c)  # the unpadded corpus: width X, masked tiles
    assert kt().loop_width(c, X) == X
    store = torch.full((N, 304), float("inf"), dtype=dtype)
    store[:, :X] = c
    view = store[:, :X]
    assert kt().loop_width(view, X) == 304 and not zero_tail(view)
    torch.testing.assert_close(kt().split_dot(parts, view), plain, atol=0, rtol=0)
    padded = pad_rows(c)
    assert padded.stride(0) == 304 and zero_tail(padded)
    torch.testing.assert_close(kt().split_dot(parts, padded, zero_tail=True), plain, atol=0, rtol=0)
    padded[0, 0] = 1  # written since: its padding is no longer taken on trust
    assert not zero_tail(padded)
    # a view whose storage ends at the last row's X-th column is not read past it
    flat = torch.rand(149 * 304 + X, generator=g).to(dtype)
    short = flat.as_strided((150, X), (304, 1))
    assert kt().loop_width(short, X) == X
    assert kt().loop_width(store[:, :296], 296) == 304  # 296: a multiple of 8, not 16
    assert kt().loop_width(store[:, :X].t().contiguous().t(), X) == X  # columns strided


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("B,X,width", [(1, 298, 304), (3, 130, 130), (70, 7, 16), (0, 5, 16)])
def test_split_queries_is_split_parts_padded_and_the_norms(dtype, B, X, width):
    """One launch for what the GPU's theme values took eight torch ops for: the parts of
    split_parts bit for bit (zeros up to the streamed width, across the 128-wide block) and
    |q|^2 in float32."""
    g = torch.Generator().manual_seed(B * X + width)
    q = torch.randn(B, X, generator=g) * torch.rand(B, 1, generator=g) * 100
    parts, qn = kt().split_queries(q, dtype, width)
    want = kt().split_parts(q, dtype)
    assert parts.shape == (2, B, width) and parts.dtype == want.dtype
    assert torch.equal(parts[:, :, :X], want) and not parts[:, :, X:].any()
    torch.testing.assert_close(qn, q.square().sum(1), rtol=1e-6, atol=0)
    # the parts sum back to q: float16 to ~2^-22 of each value, bfloat16's tf32 parts exactly
    back = parts[0, :, :X].float() + parts[1, :, :X].float()
    if dtype == torch.bfloat16:
        assert torch.equal(back, q)
    else:
        torch.testing.assert_close(back, q, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_fused_theme_values_from_split_queries(dtype, monkeypatch):
    """theme_values' GPU branch (_fused_split: split_queries, then split_dot with the L2
    epilogue, less the quantile shift) against the float64 distances, on a padded corpus; run
    here by letting the interpreted kernels take the CPU tensors as a GPU's."""
    from rasfast.ops import theme_gemm
    g = torch.Generator().manual_seed(5)
    B, N, X = 4, 150, 298
    q = torch.rand(B, X, generator=g)
    c = theme_gemm.pad_rows(torch.rand(N, X, generator=g).to(dtype))
    shift = torch.rand(B, generator=g)
    monkeypatch.setattr(torch.Tensor, "is_cuda", property(lambda self: True))
    got = theme_gemm._fused_split(q, c, theme_gemm.corpus_norms(c), shift=shift)
    prods = theme_gemm._fused_split(q, c)
    monkeypatch.undo()
    cd = c.double()
    want = ((q.double()[:, None, :] - cd[None]) ** 2).sum(-1) - shift.double()[:, None]
    torch.testing.assert_close(got.double(), want, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(prods.double(), q.double() @ cd.T, atol=1e-5, rtol=1e-6)


@pytest.mark.parametrize("B", [2, 12])  # the small-B kernel and the tensor-core one
def test_triton_backend_reads_padded_rows_in_place(B):
    """A corpus stored with padded rows (pad_rows, what ThemeIndex.to keeps on a GPU) goes to
    the Triton kernels as it is: they read rows by their stride (no contiguous copy of the
    corpus per call, which the backend made before), and padding holding inf is never read."""
    from rasfast.ops.theme import _rows
    q, qe, c, e = float_data(B, 90, 13, 9, torch.float16, seed=B)
    cs, es = (torch.full((t.shape[0], 32), float("inf"), dtype=t.dtype) for t in (c, e))
    cs[:, :13], es[:, :9] = c, e
    cp, ep = cs[:, :13], es[:, :9]
    assert _rows(cp, "triton") is cp and _rows(ep, "triton") is ep
    for metric in ("l2", "ip"):
        assert torch.equal(rasfast.theme_scope(q, cp, 40, metric, backend="triton"),
                           rasfast.theme_scope(q, c, 40, metric, backend="triton"))
        got = rasfast.theme_scoped_search(q, qe, cp, ep, 40, 6, 0.1, metric, backend="triton")
        want = rasfast.theme_scoped_search(q, qe, c, e, 40, 6, 0.1, metric, backend="triton")
        assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])
    scope = rasfast.theme_scope(q, c, 40, backend="triton")
    got = rasfast.scoped_dense_search(qe, ep, scope, 5, backend="triton")
    want = rasfast.scoped_dense_search(qe, e, scope, 5, backend="triton")
    assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])
