"""select_k: every backend against the torch reference, and every error path.

The reference (rasfast/reference/select.py) is a stable full sort, so sorted results must
match it exactly (indices and values, bit for bit); unsorted results must be the same set.
"""
import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import rasfast
from rasfast import dispatch
from rasfast.ops.select import select_k
from rasfast.reference.select import select_k as ref_select

from backends_util import TRITON_CPU, TRITON_CPU_SKIP, cpu_backends, gpu_backends
from conftest import EMULATED, GPU_DEVICE, cuda_kernels, gpu

DTYPES = [torch.float32, torch.float16, torch.bfloat16]


def make_input(B, N, mode, dtype, seed, device="cpu"):
    """Rows with a given flavour: random, heavy ties (with +-inf, -0.0/+0.0), or ordered."""
    g = torch.Generator().manual_seed(seed)
    if mode == "randn":
        x = torch.randn(B, N, generator=g)
    elif mode == "ties":
        x = torch.randint(-2, 3, (B, N), generator=g).float()
        signs = torch.randint(0, 2, (B, N), generator=g).bool()
        x[(x == 0) & signs] = -0.0                      # -0.0 and +0.0 must tie
        x[x == 2] = float("inf")
        x[x == -2] = float("-inf")
    elif mode == "narrow":  # one top-digit bucket holds everything: multi-level refinement
        x = 1 + 1e-2 * torch.rand(B, N, generator=g)
    elif mode == "const":
        x = torch.zeros(B, N)
    elif mode == "ascending":
        x = torch.arange(N, dtype=torch.float32).repeat(B, 1)
    else:  # descending: the worst order for a streaming smallest-k filter
        x = torch.arange(N, 0, -1, dtype=torch.float32).repeat(B, 1)
    return x.to(dtype).to(device)


def same_bits(a, b):
    return torch.equal(a.view(torch.int16), b.view(torch.int16)) if a.dtype != torch.float32 \
        else torch.equal(a.view(torch.int32), b.view(torch.int32))


def check(x, k, largest, sorted_, backend):
    vals, idx = select_k(x, k, largest=largest, sorted=sorted_, backend=backend)
    want = ref_select(x, k, largest, sorted_)
    assert idx.dtype == torch.int64 and idx.shape == (x.shape[0], k)
    assert vals.dtype == x.dtype and vals.shape == (x.shape[0], k)
    if sorted_:
        assert torch.equal(idx.cpu(), want.cpu()), (backend, x.shape, k, largest)
        assert same_bits(vals.cpu(), torch.gather(x, 1, want).cpu())
    else:
        assert torch.equal(idx.sort(1).values.cpu(), want.sort(1).values.cpu()), (backend, x.shape, k)
        assert same_bits(vals.cpu(), torch.gather(x, 1, idx).cpu())


# ---- parity on CPU tensors ---------------------------------------------------------------

@given(B=st.integers(0, 4), N=st.integers(1, 400), kf=st.floats(0, 1),
       mode=st.sampled_from(["randn", "ties", "const", "ascending", "descending", "narrow"]),
       dtype=st.sampled_from(DTYPES), largest=st.booleans(), sorted_=st.booleans(),
       seed=st.integers(0, 2**31 - 1))
def test_cpu_matches_reference(B, N, kf, mode, dtype, largest, sorted_, seed):
    k = max(1, min(N, int(round(kf * N))))
    check(make_input(B, N, mode, dtype, seed), k, largest, sorted_, "cpu")


LONG_N = (1 << 20) + 3  # B * N >= 2^20: large enough for the multi-threaded paths


def check_many_k(x, ks, largest):
    """check() for several k against one stable sort of x (the reference, sliced)."""
    order = torch.sort(x.float(), dim=1, descending=largest, stable=True).indices
    for k in ks:
        vals, idx = select_k(x, k, largest=largest, sorted=True, backend="cpu")
        assert torch.equal(idx, order[:, :k]), (x.shape, k, largest)
        assert same_bits(vals, torch.gather(x, 1, order[:, :k]))
        _, idx = select_k(x, k, largest=largest, sorted=False, backend="cpu")
        assert torch.equal(idx.sort(1).values, order[:, :k].sort(1).values), (x.shape, k, largest)


@given(B=st.integers(0, 4), N=st.integers(1, 400), kf=st.floats(0, 1),
       mode=st.sampled_from(["randn", "ties", "const", "ascending", "descending", "narrow"]),
       dtype=st.sampled_from(DTYPES), largest=st.booleans(), sorted_=st.booleans(),
       seed=st.integers(0, 2**31 - 1))
def test_torch_backend_matches_reference(B, N, kf, mode, dtype, largest, sorted_, seed):
    # backend "torch" is torch.topk plus its own tie pass, not the reference's stable sort
    k = max(1, min(N, int(round(kf * N))))
    check(make_input(B, N, mode, dtype, seed), k, largest, sorted_, "torch")


def test_torch_backend_ties_at_the_kth_value():
    # the k-th value repeats before and after the cut: the lowest-indexed copies are kept
    x = torch.tensor([[5., 1., 3., 3., 0., 3., 3., 9.],
                      [-0., 0., 0., -0., 1., 0., -1., 0.]])
    _, idx = select_k(x, 4, backend="torch")
    assert idx.tolist() == [[4, 1, 2, 3], [6, 0, 1, 2]]
    _, idx = select_k(x, 3, largest=True, backend="torch")
    assert idx.tolist() == [[7, 0, 2], [4, 0, 1]]
    _, idx = select_k(x, 4, sorted=False, backend="torch")
    assert sorted(idx[0].tolist()) == [1, 2, 3, 4] and sorted(idx[1].tolist()) == [0, 1, 2, 6]


@pytest.mark.parametrize("mode", ["randn", "ties", "descending", "narrow"])
def test_cpu_long_row_parallel_path(mode):
    # B=1 < threads and a long row: the row is split across threads (filter path for small
    # k, radix path otherwise; the descending row makes the filter give up).
    x = make_input(1, LONG_N, mode, torch.float32, seed=3)
    ks = [1, 2, 1000, 4000, 40_000, LONG_N // 3, LONG_N - 1, LONG_N]
    check_many_k(x, ks, largest=False)
    check_many_k(x, ks[:4], largest=True)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_cpu_long_row_half(dtype):
    x = make_input(1, LONG_N, "randn", dtype, seed=7)  # 16-bit keys, row split across threads
    check_many_k(x, [3, 5000, 150_000], largest=False)
    check_many_k(x, [3, 150_000], largest=True)
    x = make_input(2, 150_001, "ties", dtype, seed=8)  # two rows in parallel
    check_many_k(x, [3, 5000, 150_000], largest=True)


@pytest.mark.parametrize("mode", ["randn", "ties", "descending", "const", "narrow"])
@pytest.mark.parametrize("N", [1024, 1025, 4096, 4097, 9_001])
def test_cpu_short_row_boundary(mode, N):
    """Rows up to 4,096 entries take the filter path for k <= N / 8 (any k up to 1,024
    entries; csrc/select/row_select.h kShortRow), the others with k * 256 > N the radix
    path: both sides of each boundary, every k regime, both directions."""
    x = make_input(3, N, mode, torch.float32, seed=N)
    for k in (1, 17, 255, N // 8, N // 8 + 1, N // 2, N - 1, N):
        check(x, k, False, True, "cpu")
        check(x, k, True, True, "cpu")
        check(x, k, False, False, "cpu")


def test_cpu_many_rows_batch():
    for mode in ("randn", "narrow"):
        x = make_input(9, 120_001, mode, torch.float32, seed=1)  # B * N >= 2^20: rows in parallel
        for k in (7, 3_000, 60_000):
            check(x, k, False, True, "cpu")
            check(x, k, True, False, "cpu")


@pytest.mark.parametrize("backend", ["cpu", "torch"])
def test_numpy_in_numpy_out(backend):
    x = np.random.default_rng(0).standard_normal((3, 50)).astype(np.float32)
    vals, idx = select_k(x, 5, backend=backend)
    assert isinstance(vals, np.ndarray) and isinstance(idx, np.ndarray)
    assert idx.dtype == np.int64 and vals.dtype == np.float32
    np.testing.assert_array_equal(idx, np.argsort(x, axis=1, kind="stable")[:, :5])
    np.testing.assert_array_equal(vals, np.take_along_axis(x, idx, 1))
    v16, _ = select_k(x.astype(np.float16), 5, largest=True, backend=backend)
    assert isinstance(v16, np.ndarray) and v16.dtype == np.float16


def test_torch_in_torch_out_and_auto_is_cpu():
    x = torch.randn(2, 30)
    vals, idx = select_k(x, 4)  # auto
    assert isinstance(vals, torch.Tensor) and isinstance(idx, torch.Tensor)
    assert torch.equal(idx, ref_select(x, 4, False, True))


def test_empty_batch():
    for be in cpu_backends() + ["torch"]:
        vals, idx = select_k(torch.empty(0, 10), 3, backend=be)
        assert vals.shape == (0, 3) and idx.shape == (0, 3) and idx.dtype == torch.int64
    vals, idx = select_k(np.empty((0, 10), np.float32), 10)
    assert isinstance(idx, np.ndarray) and idx.shape == (0, 10)


def test_non_contiguous_input():
    x = torch.randn(40, 6).t()  # [6, 40], not contiguous
    check(x, 9, False, True, "cpu")


# ---- Triton, interpreted on the CPU (tiny sizes: the interpreter is slow) -----------------



@pytest.mark.triton
@pytest.mark.skipif(not TRITON_CPU, reason=TRITON_CPU_SKIP)
@settings(max_examples=6)
@given(B=st.integers(1, 2), N=st.integers(1, 70), kf=st.floats(0, 1),
       mode=st.sampled_from(["randn", "ties"]), dtype=st.sampled_from(DTYPES),
       largest=st.booleans(), sorted_=st.booleans(), seed=st.integers(0, 2**31 - 1))
def test_triton_matches_reference(B, N, kf, mode, dtype, largest, sorted_, seed):
    k = max(1, min(N, int(round(kf * N))))
    check(make_input(B, N, mode, dtype, seed), k, largest, sorted_, "triton")


@pytest.mark.triton
@pytest.mark.skipif(not TRITON_CPU, reason=TRITON_CPU_SKIP)
@pytest.mark.parametrize("case", [(1, 1, 1, "randn"), (2, 37, 37, "ties"), (1, 1500, 1, "ties"),
                                  (1, 1500, 700, "randn")])
def test_triton_edge_cases(case):
    B, N, k, mode = case  # k=1, k=N, and N crossing the 1024-wide block
    x = make_input(B, N, mode, torch.float32, seed=N)
    check(x, k, False, True, "triton")
    check(x, k, True, True, "triton")


# ---- GPU (skipped without a CUDA device) ------------------------------------------------

GPU_CASES = [(1, 1, 1), (3, 1000, 1), (3, 1000, 1000), (2, 4097, 333), (16, 100_003, 10_000),
             (1, 1_000_000, 250_000), (16, 1_000_000, 10)]
if EMULATED:  # the same shapes, scaled to the emulator's speed (several blocks per row still)
    GPU_CASES = GPU_CASES[:4] + [(4, 20_003, 2_000), (1, 60_000, 15_000), (4, 60_000, 10)]


@cuda_kernels
@pytest.mark.parametrize("backend", gpu_backends() or ["cuda"])
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("mode", ["randn", "ties"])
def test_gpu_matches_reference(backend, dtype, mode):
    for B, N, k in GPU_CASES:
        x = make_input(B, N, mode, dtype, seed=N + k, device=GPU_DEVICE)
        for largest in (False, True):
            check(x, k, largest, True, backend)
        check(x, k, False, False, backend)


# k <= 256: the cuda backend's filtered pass (one read of the row, two launches; taken with
# RASFAST_SELECT_FILTER_K=256), the radix passes (the default for rows over 65,536 entries) and
# the one-launch short-row select (the default up to that), at sizes where a row has one
# block or many, its blocks hold fewer entries than k, rows start off 16-byte alignment (odd
# N), k sits at the filter's limit; every input order, including the filter's worst
# (descending rows: every entry beats the threshold), and NaN ranked above +inf.
SMALL_K_CASES = [(1, 1, 1), (3, 999, 1), (2, 4097, 256), (5, 9_001, 37), (2, 30_001, 255),
                 (1, 40_000, 3)]


def _nan_input(B, N, dtype, seed, device):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(B, N, generator=g)
    x[torch.rand(B, N, generator=g) < 0.01] = float("nan")
    return x.to(dtype).to(device)


def _check_nan_ranked_last(x, k, largest, backend):
    """NaN ranks above +inf (ties by index): first for largest, after everything else."""
    vals, idx = select_k(x, k, largest=largest, backend=backend)
    xc = x.cpu().float()
    for r in range(x.shape[0]):
        nan = torch.nonzero(torch.isnan(xc[r])).flatten()
        rest = xc[r].clone()
        rest[torch.isnan(rest)] = -float("inf") if largest else float("inf")
        if largest:
            m = min(k, nan.numel())
            want = torch.cat([nan[:m], ref_select(rest[None], k - m, True, True)[0]]) if k > m else nan[:m]
        else:
            want = ref_select(rest[None], k, False, True)[0]
        assert torch.equal(idx[r].cpu(), want), (r, x.shape, k, largest)
    assert same_bits(vals.cpu(), torch.gather(x, 1, idx).cpu())


def _sweep_cuda(cases, mode, dtype, unsorted: bool):
    """Backend cuda against the reference on each (B, N, k) of ``cases`` with ``mode``'s rows:
    sorted smallest and largest (and unsorted largest); NaN rows ranked above +inf."""
    for B, N, k in cases:
        if mode == "nan":
            x = _nan_input(B, N, dtype, seed=N + k, device=GPU_DEVICE)
            for largest in (False, True):
                _check_nan_ranked_last(x, k, largest, "cuda")
            continue
        x = make_input(B, N, mode, dtype, seed=N + k, device=GPU_DEVICE)
        for largest in (False, True):
            check(x, k, largest, True, "cuda")
        if unsorted:
            check(x, k, True, False, "cuda")


@cuda_kernels
@pytest.mark.parametrize("path", ["filtered", "radix", "small"])
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("mode", ["randn", "ties", "descending", "ascending", "const", "narrow", "nan"])
def test_gpu_small_k_filtered_and_radix_match_reference(monkeypatch, path, dtype, mode):
    if "cuda" not in (gpu_backends() or ["cuda"]):
        pytest.skip("cuda module not built")
    # every path named (RASFAST_SELECT_FILTER_K, RASFAST_SELECT_SMALL_N): the defaults may move
    monkeypatch.setenv("RASFAST_SELECT_FILTER_K", "256" if path == "filtered" else "0")
    monkeypatch.setenv("RASFAST_SELECT_SMALL_N", "65536" if path == "small" else "0")
    _sweep_cuda(SMALL_K_CASES, mode, dtype, unsorted=True)


@cuda_kernels
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("mode", ["randn", "ties", "descending", "narrow", "nan"])
def test_gpu_radix_passes_as_the_sixth_run_timed_them(monkeypatch, dtype, mode):
    """RASFAST_SELECT_GROUPED=0 keeps the second and third radix passes as the sixth H100
    session timed them (the first filter per 16-byte vector, the third pass on an eighth of
    the grid), so that one GPU run times both designs: its answers are the reference's too."""
    if "cuda" not in (gpu_backends() or ["cuda"]):
        pytest.skip("cuda module not built")
    monkeypatch.setenv("RASFAST_SELECT_GROUPED", "0")
    monkeypatch.setenv("RASFAST_SELECT_FILTER_K", "0")
    monkeypatch.setenv("RASFAST_SELECT_SMALL_N", "0")
    _sweep_cuda([(2, 30_001, 255), (1, 40_000, 3), (3, 9_001, 3_000)], mode, dtype, unsorted=True)


@cuda_kernels
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("B,N,k", [(2, 65_536, 2_048), (1, 2_048, 2_048), (3, 3_001, 2_047),
                                   (2, 65_537, 10), (2, 4_000, 2_049)])
def test_gpu_short_row_select_at_its_limits(monkeypatch, dtype, B, N, k):
    """The one-launch select takes rows up to 65,536 entries and k up to 2,048 (its on-chip
    sort); one past either goes to the radix passes. Both sides of each limit, k = N, ties."""
    if "cuda" not in (gpu_backends() or ["cuda"]):
        pytest.skip("cuda module not built")
    monkeypatch.delenv("RASFAST_SELECT_FILTER_K", raising=False)
    monkeypatch.delenv("RASFAST_SELECT_SMALL_N", raising=False)
    x = make_input(B, N, "ties", dtype, seed=N + k, device=GPU_DEVICE)
    check(x, k, False, True, "cuda")
    check(x, k, True, False, "cuda")


@cuda_kernels
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("B,N,k,sorted_,launches", [
    (2, 32_768, 4_000, True, 1),     # at the limit: the one-launch select, sorted on chip
    (1, 32_769, 4_000, True, None),  # one past it: the radix passes and their sort
    (2, 20_000, 3_000, False, None),  # unsorted: the radix passes, no sort of the answers
])
def test_gpu_short_row_sorted_select_at_its_limit(monkeypatch, dtype, B, N, k, sorted_, launches):
    """The one-launch select with 2,048 < k <= 16,384 takes sorted answers on rows up to
    32,768 entries (the seventh GPU session: 0.177 ms against the radix passes' 0.113 at
    8 x 50k, and 0.49x torch.topk unsorted there); other rows and unsorted calls take the
    radix passes. The answers either way, and one launch only where the limit says so."""
    if "cuda" not in (gpu_backends() or ["cuda"]):
        pytest.skip("cuda module not built")
    monkeypatch.delenv("RASFAST_SELECT_FILTER_K", raising=False)
    monkeypatch.delenv("RASFAST_SELECT_SMALL_N", raising=False)
    monkeypatch.delenv("RASFAST_SELECT_RADIX_SORT_K", raising=False)
    x = make_input(B, N, "ties", dtype, seed=N + k, device=GPU_DEVICE)
    check(x, k, True, sorted_, "cuda")
    if x.device.type != "cpu":  # launches are counted on the emulator
        return
    from rasfast.device_work import count_device_work
    rasfast.select_k(x, k, largest=True, sorted=sorted_, backend="cuda")
    with count_device_work() as work:
        rasfast.select_k(x, k, largest=True, sorted=sorted_, backend="cuda")
    if launches is None:
        assert work.kernels > 1, work.summary()
    else:
        assert work.kernels == launches, work.summary()


@cuda_kernels
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("B,N,k,launches", [
    (2, 50_000, 10, 2),     # past 32,768 entries, k <= 32: the filtered pass and its sort
    (3, 65_536, 32, 2),
    (2, 32_768, 10, 1),     # at 32,768: the one-launch select
    (2, 50_000, 33, 1),     # k past 32: the one-launch select
    (1, 65_537, 10, None),  # past 65,536: the radix passes
])
def test_gpu_short_rows_at_small_k_take_the_filtered_pass(monkeypatch, dtype, B, N, k, launches):
    """Rows of 32,768 < N <= 65,536 entries with k <= 32 take the filtered pass (the seventh
    GPU session: 0.038 against the one-launch select's 0.067 ms at 8 x 50k, k = 10); the
    answers either way, and the launches of the path the limits name."""
    if "cuda" not in (gpu_backends() or ["cuda"]):
        pytest.skip("cuda module not built")
    for name in ("RASFAST_SELECT_FILTER_K", "RASFAST_SELECT_SMALL_N", "RASFAST_SELECT_RADIX_SORT_K"):
        monkeypatch.delenv(name, raising=False)
    x = make_input(B, N, "ties", dtype, seed=N + k, device=GPU_DEVICE)
    check(x, k, True, True, "cuda")
    check(x, k, False, False, "cuda")
    if x.device.type != "cpu":  # launches are counted on the emulator
        return
    from rasfast.device_work import count_device_work
    rasfast.select_k(x, k, backend="cuda")
    with count_device_work() as work:
        rasfast.select_k(x, k, backend="cuda")
    if launches is None:
        assert work.kernels > 2, work.summary()
    else:
        assert work.kernels == launches, work.summary()


# Sorted answers for 2,048 < k <= 16,384: one block a row radix-sorts them in shared memory
# (8 / 16 / 24 / 32 keys a thread), after the radix passes on long rows (sort_rows_radix) and
# within the one-launch select on rows of up to 65,536 entries (select_rows_small_sorted);
# above, cub's device-wide sort. Both sides of every variant's limit on both kinds of row, k
# near N so that the answers span both signs (the composite's top bits differ: a pass
# skipped fails here), ties, NaN.
RADIX_SORT_CASES = [(2, 70_001, 2_049), (1, 70_001, 4_096), (2, 100_003, 4_097), (3, 66_000, 9_000),
                    (1, 90_000, 12_289),                                          # long rows
                    (2, 5_000, 2_500), (1, 9_000, 8_192), (3, 12_000, 3_000), (1, 30_000, 12_000),
                    (1, 20_000, 16_384), (1, 16_385, 16_385),                     # short rows
                    (1, 40_000, 10_000)]  # 16 index bits: the composite fills its top digit


@cuda_kernels
@pytest.mark.parametrize("sort", ["on chip", "cub"])
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("mode", ["randn", "ties", "descending", "const", "nan"])
def test_gpu_large_k_sorted_on_chip_and_by_cub(monkeypatch, sort, dtype, mode):
    if "cuda" not in (gpu_backends() or ["cuda"]):
        pytest.skip("cuda module not built")
    monkeypatch.delenv("RASFAST_SELECT_FILTER_K", raising=False)
    monkeypatch.delenv("RASFAST_SELECT_SMALL_N", raising=False)
    monkeypatch.setenv("RASFAST_SELECT_RADIX_SORT_K", "16384" if sort == "on chip" else "0")
    _sweep_cuda(RADIX_SORT_CASES, mode, dtype, unsorted=False)


@cuda_kernels
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("k", [1, 2, 17, 64])
def test_gpu_filtered_pass_keeps_the_sampled_kth(monkeypatch, dtype, k):
    """The filtered pass's first threshold is the k-th of an evenly spaced sample of a block's
    chunk, plus one. Here the sampled entries are the row's smallest, so the sample's k-th is
    an answer and a threshold without the + 1 drops it. With 64 rows of 4,096 the emulator's
    4 SMs give each row one block, whose sample sits at every 8th index; on a GPU with more
    SMs the chunks are smaller than the sampling's minimum and the case is an ordinary one."""
    if "cuda" not in (gpu_backends() or ["cuda"]):
        pytest.skip("cuda module not built")
    monkeypatch.setenv("RASFAST_SELECT_FILTER_K", "256")
    B, N = 64, 4096
    g = torch.Generator().manual_seed(k)
    x = torch.rand(B, N, generator=g)
    x[:, ::8] = -1000.0 + torch.arange(N // 8, dtype=torch.float32)  # bf16 rounds some to ties: by index
    x = x.to(dtype).to(GPU_DEVICE)
    check(x, k, False, True, "cuda")
    check(-x, k, True, True, "cuda")


@gpu
@pytest.mark.parametrize("dtype", DTYPES)
def test_gpu_torch_backend_matches_reference(dtype):
    for B, N, k in GPU_CASES:
        x = make_input(B, N, "ties", dtype, seed=N + k, device="cuda")
        check(x, k, True, True, "torch")
        check(x, k, False, False, "torch")


@gpu
def test_gpu_auto_and_devices():
    x = torch.randn(4, 100, device="cuda")
    vals, idx = select_k(x, 7)
    assert idx.is_cuda and vals.is_cuda
    with pytest.raises(ValueError, match="CPU arrays"):
        select_k(x, 3, backend="cpu")
    # auto is cuda here: NaN is not looked for (no host sync) and ranks above +inf
    x = torch.tensor([[1.0, float("nan"), float("inf"), -2.0]], device="cuda")
    assert select_k(x, 4)[1].tolist() == [[3, 0, 2, 1]]
    assert select_k(x, 1, largest=True)[1].tolist() == [[1]]


# ---- errors -----------------------------------------------------------------------------

@pytest.mark.parametrize("backend", ["cpu", "torch"])
def test_errors_k(backend):
    x = torch.randn(2, 5)
    with pytest.raises(ValueError, match=r"k: must be <= N"):
        select_k(x, 6, backend=backend)
    for bad in (0, -3):
        with pytest.raises(ValueError, match=r"k: must be >= 1"):
            select_k(x, bad, backend=backend)
    for bad in (2.0, "2", None, True, np.float32(2)):
        with pytest.raises(TypeError, match=r"k: expected an int"):
            select_k(x, bad, backend=backend)
    vals, idx = select_k(x, np.int64(2), backend=backend)  # numpy integers are ints
    assert idx.shape == (2, 2)


@pytest.mark.parametrize("backend", ["cpu", "torch"])
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape,k", [((2, 5), 2), ((1, 100_000), 10), ((3, 100_000), 60_000)])
def test_errors_nan(backend, dtype, shape, k):
    x = torch.randn(*shape).to(dtype)
    x[-1, shape[1] - 1] = float("nan")  # the very last element: every pass must see it
    with pytest.raises(ValueError, match="x: contains NaN"):
        select_k(x, k, backend=backend)


def test_errors_shape_dtype_input():
    with pytest.raises(ValueError, match=r"x: expected a 2-d array \[B, N\]"):
        select_k(torch.randn(5), 1)
    with pytest.raises(ValueError, match=r"x: expected a 2-d array"):
        select_k(torch.randn(2, 3, 4), 1)
    with pytest.raises(ValueError, match=r"N \(x.shape\[1\]\) must be >= 1"):
        select_k(torch.randn(3, 0), 1)
    with pytest.raises(TypeError, match="x: float64 is not supported"):
        select_k(np.zeros((2, 3)), 1)
    with pytest.raises(TypeError, match="x: unsupported dtype float64"):
        select_k(torch.zeros(2, 3, dtype=torch.float64), 1)
    for dt in (torch.int32, torch.int64, torch.bool):
        with pytest.raises(TypeError, match="x: unsupported dtype"):
            select_k(torch.zeros(2, 3, dtype=dt), 1)
    with pytest.raises(TypeError, match="x: expected a numpy.ndarray or torch.Tensor, got list"):
        select_k([[1.0, 2.0]], 1)
    with pytest.raises(TypeError, match="largest: expected a bool"):
        select_k(torch.randn(2, 3), 1, largest=1)
    with pytest.raises(TypeError, match="sorted: expected a bool"):
        select_k(torch.randn(2, 3), 1, sorted="yes")
    with pytest.raises(TypeError, match="bfloat16 results cannot be returned as numpy"):
        # numpy has no bfloat16; the only way in is torch, so this is about to_kind.
        from rasfast._arrays import to_kind
        to_kind(torch.zeros(1, dtype=torch.bfloat16), "numpy")


def test_errors_backend():
    x = torch.randn(2, 3)
    with pytest.raises(ValueError, match="backend: expected one of"):
        select_k(x, 1, backend="gpu")
    if not torch.cuda.is_available():
        with pytest.raises(dispatch.BackendUnavailable, match="cuda"):
            select_k(x, 1, backend="cuda")


def test_errors_triton_without_interpreter(monkeypatch):
    if not TRITON_CPU or torch.cuda.is_available():
        pytest.skip("needs triton and no GPU")
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    with pytest.raises(dispatch.BackendUnavailable, match="TRITON_INTERPRET=1"):
        select_k(torch.randn(2, 3), 1, backend="triton")


def test_compiled_cpu_entry_validates():
    # The C++ entry point re-checks what Python validated: a wrong call raises, never crashes.
    mod = dispatch.cpu_module()
    x = np.zeros((2, 5), np.float32)
    out = np.zeros((2, 3), np.int64)
    with pytest.raises(ValueError, match="k must be in"):
        mod.select_k(x, 0, 6, False, True, np.zeros((2, 6), np.int64))
    with pytest.raises(ValueError, match="out: dim 1 must be 2"):
        mod.select_k(x, 0, 2, False, True, out)
    with pytest.raises(ValueError, match="dtype code"):
        mod.select_k(x, 7, 3, False, True, out)
    with pytest.raises(ValueError, match="item size"):
        mod.select_k(x, 1, 3, False, True, out)
    with pytest.raises(ValueError, match="values: dim 1 must be 3"):
        mod.select_k(x, 0, 3, False, True, out, np.zeros((2, 4), np.float32))
    with pytest.raises(ValueError, match="C-contiguous"):
        mod.select_k(np.zeros((5, 2), np.float32).T, 0, 3, False, True, out)


def test_compiled_cuda_entry_validates():
    info = rasfast.backends()["cuda"]
    if not info["built"]:
        pytest.skip("rasfast._cuda not built (no nvcc at install time)")
    mod = dispatch.cuda_module()
    with pytest.raises(ValueError, match="k must be in"):
        mod.select_k(0, 0, 1, 5, 6, False, True, 0, 0, 0, 0, 0)
    with pytest.raises(ValueError, match="dtype code"):
        mod.select_k(0, 3, 1, 5, 2, False, True, 0, 0, 0, 0, 0)
    with pytest.raises(ValueError, match="device pointers"):
        mod.select_k(0, 0, 1, 5, 2, False, True, 0, 0, 0, 0, 0)
    mod.select_k(0, 0, 0, 5, 2, False, True, 0, 0, 0, 0, 0)  # zero rows: nothing to do, no launch
    with pytest.raises(ValueError, match="k must be in"):
        mod.select_k_workspace_bytes(0, 1, 5, 6, True)
    assert mod.select_k_workspace_bytes(0, 0, 5, 2, True) == 0
