"""The C++ CUDA kernels of the registered operators (rasfast._torch_ops, csrc/torch_ops/cuda_ops.cpp).

``torch.ops.rasfast.select_k`` on CUDA tensors (and, under the emulator, backend "cuda" on CPU
tensors) runs a C++ kernel that launches rasfast._cuda's kernels through the module's table of
entry points (common/cuda_entry_points.h), with no Python frame, and hands every other call to
the op's Python kernel (``torch.ops.rasfast.select_k_python``). Tested here, on a GPU or on the
emulator: the table is attached (no silent fallback), the C++ kernel gives the Python kernel's
results bit for bit (the same compiled kernels) on fresh random inputs (dtypes, odd and empty
sizes, ties and infinities, both of select's designs, non-contiguous views), ordinary calls
never reach the Python kernel, bad calls raise the same errors both ways, and the call keeps
select_k's device budget (no sync, no allocation outside the caching allocator). The segment
ops' C++ CUDA kernels (segment_topk_scores, segment_max_rank) are held to the same, below, with
their error flag read once (validate "auto") or never ("none").
"""
import pytest
import torch

import rasfast
import rasfast.ops  # noqa: F401  (defines torch.ops.rasfast.*)
from rasfast import _native
from rasfast import dispatch as _bk
from rasfast.device_work import count_device_work
from rasfast.ops import _library
from rasfast.ops import select as select_mod

from conftest import EMULATED, GPU_DEVICE, cuda_kernels
from native_ops_util import same, select_input

DTYPES = (torch.float32, torch.float16, torch.bfloat16)
# "auto" picks the cuda backend for CUDA tensors only; the emulator takes "cuda" alone
BACKENDS = ("cuda",) if EMULATED else ("cuda", "auto")


def _kernels(op):
    """The op's registered call (its C++ kernel) and its Python kernel."""
    ops = torch.ops.rasfast
    return getattr(ops, op).default, getattr(ops, op + "_python").default


def by_index(vals, idx):
    """An unsorted select_k answer in a canonical order (each row by index): its kernel writes
    the answers at atomic positions, so two calls on a GPU may order a row differently (the
    sixth H100 session's failures; the emulator's fixed schedule hid it)."""
    order = idx.argsort(dim=1)
    return vals.gather(1, order), idx.gather(1, order)


def both(*args, op="select_k"):
    return tuple(kernel(*args) for kernel in _kernels(op))


def assert_same_errors(args, op="select_k"):
    """Both kernels raise on ``args``, the same exception type with the same message."""
    errors = []
    for kernel in _kernels(op):
        with pytest.raises(Exception) as info:
            kernel(*args)
        errors.append(info.value)
    assert type(errors[0]) is type(errors[1]) and str(errors[0]) == str(errors[1]), (op, errors)


def _calls_python_kernel(fn, op="select_k") -> bool:
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        fn()
    return any(e.name.endswith(op + "_python") for e in prof.events())


@cuda_kernels
def test_the_cuda_kernel_is_registered_and_attached():
    """A build that lost cuda_ops.cpp, or a table that no longer attaches, fails here rather
    than silently running the Python kernel."""
    assert "select_k" in _native.native_cuda_ops()
    x = torch.randn(2, 30, device=GPU_DEVICE)
    assert _library.native_call("select_k", "cuda", x)
    assert _native.attached_cuda() is _bk.cuda_module()
    assert hasattr(torch.ops.rasfast, "select_k_python")


@cuda_kernels
def test_served_module_is_remembered_only_while_it_is_the_loaded_one(monkeypatch):
    """native_call remembers the module whose table served a plain call (the per-call checks
    cost half of select_k's Python time on the H100 host); another module loaded in its place
    (a different emulator build, a reinstall) goes through the checks again, and one without a
    kernel table is not served."""
    x = torch.randn(2, 30, device=GPU_DEVICE)
    assert _library.native_call("select_k", "cuda", x)
    dev = x.device.type
    assert _library._SERVED.get(dev) is _bk.cuda_module_loaded() is _native.attached_cuda()

    class Other:  # an imported module without cuda_entry_points
        def device_status(self):
            return "ok"

        def scratch_allocator(self):
            return "callback"

    other = Other()
    real = _bk._cuda_import
    monkeypatch.setattr(_bk, "_cuda_import", lambda: (other, None))
    monkeypatch.setattr(_bk, "use_torch_scratch", lambda mod: None)
    assert not _library.native_call("select_k", "cuda", x)
    monkeypatch.setattr(_bk, "_cuda_import", real)
    assert _library.native_call("select_k", "cuda", x)


@cuda_kernels
def test_ordinary_calls_stay_in_cpp_and_the_others_reach_python(monkeypatch):
    x = torch.randn(4, 300, device=GPU_DEVICE)
    ops = torch.ops.rasfast
    for backend in BACKENDS:
        assert not _calls_python_kernel(lambda: ops.select_k(x, 5, False, True, backend))
        assert not _calls_python_kernel(lambda: rasfast.select_k(x, 5, backend=backend))
    assert _calls_python_kernel(lambda: ops.select_k(x, 5, False, True, "torch"))
    # the Python kernel's cuda implementation is not what serves a public call
    monkeypatch.setitem(select_mod._IMPLS, "cuda", None)
    vals, idx = rasfast.select_k(x, 7, largest=True, backend="cuda")
    ref = rasfast.select_k(x, 7, largest=True, backend="torch")
    same((vals, idx), ref)


@cuda_kernels
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("B,N,k", [(0, 5, 2), (1, 1, 1), (3, 257, 10), (2, 64, 64),
                                   (5, 1000, 37), (3, 700, 300), (2, 4099, 256)])
def test_select_k_equals_the_python_kernel(dtype, B, N, k):
    x = select_input(B, N, dtype).to(GPU_DEVICE)
    for largest in (False, True):
        for sorted_ in (True, False):
            for backend in BACKENDS:
                got = both(x, k, largest, sorted_, backend)
                if not sorted_:  # unordered answers come out in atomic order on a GPU
                    got = tuple(by_index(*pair) for pair in got)
                same(*got)
    if B and N > 2:  # a non-contiguous view
        same(*both(x[:, ::2], min(k, (N + 1) // 2), True, True, "cuda"))
    if B:  # and the reference's answer (sorted: indices by the contract's tie order)
        vals, idx = torch.ops.rasfast.select_k(x, k, False, True, "cuda")
        ref_vals, ref_idx = rasfast.select_k(x.cpu(), k, backend="torch")
        assert torch.equal(idx.cpu(), ref_idx)
        torch.testing.assert_close(vals.cpu(), ref_vals, rtol=0, atol=0)


@cuda_kernels
def test_bad_calls_raise_the_python_kernels_errors():
    x = torch.randn(3, 20, device=GPU_DEVICE)
    cases = [(x, 0, False, True, "cuda"), (x, 21, False, True, "cuda"),
             (x[None], 2, False, True, "cuda"), (x.long(), 2, False, True, "cuda"),
             (x[:, :0], 1, False, True, "cuda"), (x, 2, False, True, "gpu")]
    for args in cases:
        assert_same_errors(args)
    # the public op's messages name the argument, whichever way it went
    with pytest.raises(ValueError, match="k: must be <= N"):
        rasfast.select_k(x, 21, backend="cuda")
    with pytest.raises(ValueError, match=r"x: N \(x.shape\[1\]\) must be >= 1"):
        rasfast.select_k(x[:, :0], 1, backend="cuda")
    with pytest.raises(TypeError, match="k"):
        rasfast.select_k(x, 2.0, backend="cuda")


@cuda_kernels
@pytest.mark.skipif(not EMULATED, reason="the emulator counts the launches")
def test_the_cpp_kernel_keeps_select_ks_device_budget():
    x = torch.randn(8, 5000)
    rasfast.select_k(x, 10, backend="cuda")
    # memset, ceil((32 + 13) / 11) = 5 radix passes, the write and the on-chip sort (the
    # filtered pass's 2 launches at k = 10 lost to them on an H100: off by default)
    for k, launches in ((10, 8), (1000, 8)):
        with count_device_work(watch=[x]) as work:
            rasfast.select_k(x, k, backend="cuda")
        assert work.syncs == 0 and work.allocs == 0 and work.watched_reads == 0, work.summary()
        assert work.torch_ops == 0 and work.kernels + work.memsets <= launches, work.summary()


# ------------------------------------------------------------------- segment_topk_scores
# The C++ CUDA kernel launches the same two kernels (and a flag reset) through the table and
# reads the kernels' error flag itself (validate "auto"/"full": one blocking copy; "none":
# none). A flagged call goes to the Python kernel, which repeats it and names the argument.

def seg_input(B, lens, D, dtype, with_ids, seed, ptr_dtype=torch.int64):
    """Fresh random queries and ragged candidates (repeated rows: ties) on the device."""
    g = torch.Generator().manual_seed(seed)
    M = sum(lens)
    ptr = torch.tensor([0] + [sum(lens[:i + 1]) for i in range(len(lens))], dtype=ptr_dtype)
    q = torch.randn(B, D, generator=g).to(dtype)
    ids = None
    if with_ids:
        c = torch.randn(M + 5, D, generator=g).to(dtype)
        ids = torch.randint(0, M + 5, (M,), generator=g, dtype=ptr_dtype).to(GPU_DEVICE)
    else:
        c = torch.randn(M, D, generator=g).to(dtype)
        if M > 4:
            c[::4] = c[:1]
    return q.to(GPU_DEVICE), c.to(GPU_DEVICE), ptr.to(GPU_DEVICE), ids


@cuda_kernels
def test_segment_topk_cuda_kernel_is_attached_and_serves_ordinary_calls():
    assert "segment_topk_scores" in _native.native_cuda_ops()
    q, c, ptr, _ = seg_input(3, [7, 0, 20], 16, torch.float32, False, seed=1)
    assert _library.native_call("segment_topk_scores", "cuda", q, c, ptr, None)
    assert _native.attached_cuda() is _bk.cuda_module()
    ops, op = torch.ops.rasfast, "segment_topk_scores"
    for backend in BACKENDS:
        for validate in ("auto", "none"):
            assert not _calls_python_kernel(
                lambda: ops.segment_topk_scores(q, c, ptr, 4, None, backend, validate), op)
            assert not _calls_python_kernel(
                lambda: rasfast.segment_topk_scores(q, c, ptr, 4, backend=backend, validate=validate), op)
    assert _calls_python_kernel(lambda: ops.segment_topk_scores(q, c, ptr, 4, None, "torch", "auto"), op)
    # a host index array of a device call is checked on the host: the Python kernel's path
    if q.is_cuda:
        assert not _library.native_call("segment_topk_scores", "cuda", q, c, ptr.cpu(), None)


@cuda_kernels
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("with_ids", [False, True])
@pytest.mark.parametrize("B,lens,n", [(0, [], 3), (1, [1], 1), (3, [10, 0, 30], 5),
                                      (4, [5, 300, 1, 77], 64), (2, [2_100, 3], 2_048)])
def test_segment_topk_equals_the_python_kernel(dtype, with_ids, B, lens, n):
    for D, ptr_dtype in ((16, torch.int64), (13, torch.int32)):  # 16-byte rows and not
        q, c, ptr, ids = seg_input(B, lens, D, dtype, with_ids, seed=B * 31 + D + n, ptr_dtype=ptr_dtype)
        for backend in BACKENDS:
            for validate in ("auto", "none"):
                same(*both(q, c, ptr, n, ids, backend, validate, op="segment_topk_scores"))
        if B:  # a half-precision query, a non-contiguous table, and the reference's answer
            same(*both(q.half(), c, ptr, n, ids, "cuda", "auto", op="segment_topk_scores"))
            wide = torch.cat([c, c], 1)[:, :D]
            same(*both(q, wide, ptr, n, ids, "cuda", "auto", op="segment_topk_scores"))
            got = rasfast.segment_topk_scores(q, c, ptr, n, cand_ids=ids, backend="cuda")
            want = rasfast.segment_topk_scores(q.cpu(), c.cpu(), ptr.cpu(), n,
                                               cand_ids=None if ids is None else ids.cpu(), backend="torch")
            # (the ids may differ within near-ties: the torch backend's GEMM rounds otherwise)
            torch.testing.assert_close(got[1].cpu(), want[1], rtol=1e-5, atol=1e-5)
            assert torch.equal(got[0] < 0, want[0].to(got[0].device) < 0)


@cuda_kernels
def test_segment_topk_bad_calls_raise_the_python_kernels_errors():
    q, c, ptr, _ = seg_input(3, [4, 6, 5], 8, torch.float32, False, seed=3)
    nan_c = c.clone()
    nan_c[5, 2] = float("nan")
    ids = torch.tensor([0, 1, 2, 99] + [3] * 11, device=GPU_DEVICE)
    cases = [(q, nan_c, ptr, 2, None, "cuda", "auto"),                              # NaN in a scored row
             (q, c, ptr.flip(0), 2, None, "cuda", "auto"),                          # cand_ptr decreasing
             (q, c, ptr, 2, ids, "cuda", "auto"),                                   # an id out of range
             (q, c, ptr, 0, None, "cuda", "auto"), (q, c, ptr, 2_049, None, "cuda", "auto"),
             (q, c[:, :5], ptr, 2, None, "cuda", "auto"), (q, c, ptr[:3], 2, None, "cuda", "auto"),
             (q, c, ptr, 2, None, "cuda", "sometimes"), (q, c, ptr.float(), 2, None, "cuda", "auto")]
    for args in cases:
        assert_same_errors(args, "segment_topk_scores")
    with pytest.raises(ValueError, match="cand_emb: a candidate's score is not finite"):
        rasfast.segment_topk_scores(q, nan_c, ptr, 2, backend="cuda")


# ---------------------------------------------------------------------- segment_max_rank

def rank_input(lens, groups, dtype, seed, idx_dtype=torch.int64):
    """Fresh random item scores (-inf items, repeated scores: ties) grouped at random."""
    g = torch.Generator().manual_seed(seed)
    M = sum(lens)
    s = torch.randn(M, generator=g)
    if M > 3:
        s[::3] = s[:1]
        s[1] = -float("inf")
    grp = torch.randint(0, groups, (M,), generator=g, dtype=idx_dtype)
    ptr = torch.tensor([0] + [sum(lens[:i + 1]) for i in range(len(lens))], dtype=idx_dtype)
    return s.to(dtype).to(GPU_DEVICE), grp.to(GPU_DEVICE), ptr.to(GPU_DEVICE)


@cuda_kernels
def test_segment_max_rank_cuda_kernel_serves_ordinary_calls():
    assert "segment_max_rank" in _native.native_cuda_ops()
    s, grp, ptr = rank_input([9, 0, 30], 12, torch.float32, seed=2)
    assert _library.native_call("segment_max_rank", "cuda", s, grp, ptr)
    ops, op = torch.ops.rasfast, "segment_max_rank"
    for backend in BACKENDS:
        for validate in ("auto", "none"):
            assert not _calls_python_kernel(lambda: ops.segment_max_rank(s, grp, ptr, 4, backend, validate), op)
            assert not _calls_python_kernel(
                lambda: rasfast.segment_max_rank(s, grp, ptr, 4, backend=backend, validate=validate), op)
    assert _calls_python_kernel(lambda: ops.segment_max_rank(s, grp, ptr, 4, "torch", "auto"), op)


@cuda_kernels
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("lens,groups,k", [([], 3, 2), ([1], 1, 1), ([10, 0, 30], 7, 5),
                                           ([50, 3, 400], 200, 64), ([2_500], 3_000, 2_048)])
def test_segment_max_rank_equals_the_python_kernel(dtype, lens, groups, k):
    for idx_dtype in (torch.int64, torch.int32):
        s, grp, ptr = rank_input(lens, groups, dtype, seed=len(lens) * 97 + groups + k, idx_dtype=idx_dtype)
        for backend in BACKENDS:
            for validate in ("auto", "none"):
                same(*both(s, grp, ptr, k, backend, validate, op="segment_max_rank"))
        if lens:
            got = rasfast.segment_max_rank(s, grp, ptr, k, backend="cuda")
            want = rasfast.segment_max_rank(s.cpu(), grp.cpu(), ptr.cpu(), k, backend="torch")
            assert torch.equal(got[0].cpu(), want[0])
            torch.testing.assert_close(got[1].cpu(), want[1], rtol=0, atol=0)


@cuda_kernels
def test_segment_max_rank_bad_calls_raise_the_python_kernels_errors():
    s, grp, ptr = rank_input([4, 6, 5], 9, torch.float32, seed=5)
    nan_s = s.clone()
    nan_s[7] = float("nan")
    far = grp.clone()
    far[3] = 2 ** 31
    cases = [(nan_s, grp, ptr, 2, "cuda", "auto"), (s, far, ptr, 2, "cuda", "auto"),
             (s, -grp - 1, ptr, 2, "cuda", "auto"), (s, grp, ptr.flip(0), 2, "cuda", "auto"),
             (s, grp, ptr, 0, "cuda", "auto"), (s, grp, ptr, 2_049, "cuda", "auto"),
             (s, grp[:-1], ptr, 2, "cuda", "auto"), (s, grp, ptr, 2, "cuda", "maybe"),
             (s[None], grp, ptr, 2, "cuda", "auto")]
    for args in cases:
        assert_same_errors(args, "segment_max_rank")


@cuda_kernels
@pytest.mark.skipif(not EMULATED, reason="the emulator counts the launches")
@pytest.mark.parametrize("op", ["segment_topk_scores", "segment_max_rank"])
def test_segment_cpp_kernels_keep_their_device_budget(op):
    """validate="none": no host read at all (capturable); "auto": the flag's one read. The
    launches: the flag's reset, then scoring and selection (segment_topk_scores) or the one
    ranking kernel (segment_max_rank); no torch op, no allocation."""
    if op == "segment_topk_scores":
        q, c, ptr, _ = seg_input(8, [40] * 8, 16, torch.float32, False, seed=4)
        watch, kernels = c, 3
        call = lambda v: rasfast.segment_topk_scores(q, c, ptr, 10, backend="cuda", validate=v)  # noqa: E731
    else:
        s, grp, ptr = rank_input([40] * 8, 30, torch.float32, seed=6)
        watch, kernels = s, 2
        call = lambda v: rasfast.segment_max_rank(s, grp, ptr, 10, backend="cuda", validate=v)  # noqa: E731
    for validate, syncs in (("none", 0), ("auto", 1)):
        call(validate)
        with count_device_work(watch=[watch]) as work:
            call(validate)
        assert work.syncs == syncs and work.allocs == 0 and work.watched_reads == 0, work.summary()
        assert work.torch_ops == 0 and work.kernels == kernels and work.memsets == 0, work.summary()
