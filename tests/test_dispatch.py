"""Backend discovery and dispatch: what exists is reported, what is missing is named."""
import importlib.util

import pytest
import torch

import rasfast
from rasfast import dispatch


def test_backends_contents():
    info = rasfast.backends()
    assert set(info) == {"torch", "cpu", "cuda", "triton"}
    assert info["torch"]["available"] and info["torch"]["version"] == torch.__version__
    assert info["cpu"]["available"], info["cpu"]["reason"]  # the CPU module is always built
    assert info["cpu"]["threads"] >= 1
    for key in ("available", "built", "device_count", "reason", "runtime_version"):
        assert key in info["cuda"]
    assert info["cuda"]["device_count"] == (torch.cuda.device_count() if torch.cuda.is_available() else 0)
    if not torch.cuda.is_available():
        assert not info["cuda"]["available"] and info["cuda"]["reason"]
    for key in ("available", "importable", "interpret", "version", "reason"):
        assert key in info["triton"]
    assert info["triton"]["importable"] == (importlib.util.find_spec("triton") is not None)
    if info["triton"]["importable"] and not torch.cuda.is_available():
        # tests/conftest.py sets TRITON_INTERPRET=1 on machines without a GPU
        assert info["triton"]["interpret"]
        assert info["triton"]["available"] == (rasfast.dispatch.triton_interpreter_problem() is None)


def test_auto_resolves_to_cpu_for_cpu_tensors():
    assert dispatch.resolve("auto", torch.device("cpu"), "op") == "cpu"
    assert dispatch.resolve("torch", torch.device("cpu"), "op") == "torch"
    assert dispatch.resolve("cpu", torch.device("cpu"), "op") == "cpu"
    assert dispatch.available("cpu") and dispatch.available("torch")
    assert not dispatch.available("no-such-backend")


def test_unknown_backend():
    with pytest.raises(ValueError, match=r"backend: expected one of 'auto', 'cpu'"):
        dispatch.resolve("opencl", torch.device("cpu"), "op")


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-GPU message")
def test_cuda_without_device_names_what_is_missing():
    with pytest.raises(dispatch.BackendUnavailable, match="cuda"):
        dispatch.resolve("cuda", torch.device("cpu"), "select_k")
    if rasfast.backends()["cuda"]["built"]:
        with pytest.raises(dispatch.BackendUnavailable, match="needs a CUDA device; none is visible"):
            dispatch.resolve("cuda", torch.device("cpu"), "select_k")


def test_missing_modules_are_named(monkeypatch):
    real = dispatch._import

    def fake(name):
        if name in ("rasfast._C", "rasfast._cuda", "triton"):
            return None, "ImportError: simulated"
        return real(name)

    monkeypatch.setattr(dispatch, "_import", fake)
    with pytest.raises(dispatch.BackendUnavailable, match=r"rasfast\._C.*simulated"):
        dispatch.resolve("cpu", torch.device("cpu"), "select_k")
    with pytest.raises(dispatch.BackendUnavailable, match=r"rasfast\._cuda.*nvcc"):
        dispatch.resolve("cuda", torch.device("cpu"), "select_k")
    with pytest.raises(dispatch.BackendUnavailable, match=r"triton package"):
        dispatch.resolve("triton", torch.device("cpu"), "select_k")
    # auto falls back to the torch reference when nothing compiled is importable
    assert dispatch.resolve("auto", torch.device("cpu"), "select_k") == "torch"
    info = dispatch.backends()
    assert not info["cpu"]["available"] and "simulated" in info["cpu"]["reason"]
    assert not info["cuda"]["built"] and not info["triton"]["importable"]


def test_gpu_only_backend_on_cpu_message(monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    if importlib.util.find_spec("triton") is None or torch.cuda.is_available():
        pytest.skip("needs triton and no GPU")
    with pytest.raises(dispatch.BackendUnavailable, match="TRITON_INTERPRET=1"):
        dispatch.resolve("triton", torch.device("cpu"), "select_k")


# --------------------------------------------------------------------------- auto fallbacks
class _FakeCuda:
    """Stands in for rasfast._cuda: imports fine, and says what its runtime sees."""

    theme_max_k = 256
    beam_max_smem = 160 * 1024

    def __init__(self, status="ok"):
        self.status = status

    def device_status(self):
        return self.status

    def device_count(self):
        return 1 if self.status == "ok" else 0

    def runtime_version(self):
        return 13000


def _fake_import(monkeypatch, cuda=None, triton_ok=True):
    real = dispatch._import

    def fake(name):
        if name == "rasfast._cuda":
            return (cuda, None) if cuda is not None else (None, "ImportError: simulated")
        if name == "triton" and not triton_ok:
            return None, "ImportError: simulated"
        return real(name)

    monkeypatch.setattr(dispatch, "_import", fake)


GPU = torch.device("cuda", 0)  # a device object only; nothing is allocated on it


def test_auto_skips_a_cuda_module_that_cannot_use_the_device(monkeypatch):
    # e.g. a static CUDA 13 runtime on an older driver: the module imports, launches would fail
    old_driver = _FakeCuda("CUDA driver version is insufficient for CUDA runtime version")
    _fake_import(monkeypatch, cuda=old_driver)
    assert dispatch.cuda_unusable_reason().endswith("insufficient for CUDA runtime version")
    assert dispatch.resolve("auto", GPU, "select_k") == "triton"
    _fake_import(monkeypatch, cuda=old_driver, triton_ok=False)
    assert dispatch.resolve("auto", GPU, "select_k") == "torch"
    monkeypatch.setattr(dispatch, "_cuda_device_count", lambda: 1)
    info = dispatch.backends()["cuda"]
    assert info["built"] and not info["available"] and "insufficient" in info["reason"]


def test_auto_picks_a_usable_cuda_module(monkeypatch):
    _fake_import(monkeypatch, cuda=_FakeCuda("ok"))
    assert dispatch.cuda_unusable_reason() is None
    assert dispatch.resolve("auto", GPU, "select_k") == "cuda"
    assert dispatch.resolve("auto", GPU, "op", has_cuda_op=False) == "triton"
    monkeypatch.setattr(dispatch, "_cuda_device_count", lambda: 1)
    info = dispatch.backends()["cuda"]
    assert info["available"] and info["reason"] is None


def test_auto_falls_back_past_a_cuda_limit(monkeypatch):
    from rasfast.ops.theme import _cuda_top_k_limit
    _fake_import(monkeypatch, cuda=_FakeCuda("ok"))
    assert _cuda_top_k_limit(256) is None
    limit = _cuda_top_k_limit(257)
    assert limit == "k: backend 'cuda' supports k <= 256, got 257"
    assert dispatch.resolve("auto", GPU, "theme_scoped_search", cuda_limit=limit) == "triton"
    _fake_import(monkeypatch, cuda=_FakeCuda("ok"), triton_ok=False)
    assert dispatch.resolve("auto", GPU, "theme_scoped_search", cuda_limit=limit) == "torch"
    # asking for cuda explicitly names the limit instead of falling back
    with pytest.raises(ValueError, match=r"theme_scoped_search: k: backend 'cuda' supports k <= 256"):
        dispatch.resolve("cuda", GPU, "theme_scoped_search", cuda_limit=limit)
    assert dispatch.resolve("cuda", GPU, "theme_scoped_search") == "cuda"


def test_no_cuda_module_means_no_limit(monkeypatch):
    from rasfast.ops.theme import _cuda_top_k_limit
    _fake_import(monkeypatch, cuda=None)
    assert _cuda_top_k_limit(10 ** 6) is None
    assert dispatch.resolve("auto", GPU, "theme_scoped_search") in ("triton", "torch")


def test_backends_reports_cuda_limits():
    info = rasfast.backends()["cuda"]
    assert set(info["limits"]) == {"scoped_dense_search", "theme_scoped_search",
                                   "triple_beam_search"}
    if info["built"]:
        assert info["limit_values"]["theme_max_k"] == 256
        assert info["limit_values"]["beam_max_smem"] == 160 * 1024


@pytest.mark.skipif(not rasfast.backends()["cuda"]["built"], reason="rasfast._cuda not built")
def test_beam_cuda_shared_memory_limit_is_detected_on_the_host():
    # beam_search_smem is host arithmetic: the limit is known before any launch
    from rasfast.ops.beam import _cuda_smem_limit
    small = dict(n=100, b=4, L=3, max_neighbors=None, decay=[1.0] * 9, max_deg=8)
    assert _cuda_smem_limit(64, small) is None
    huge = dict(small, b=512, L=64, max_deg=5000)
    msg = _cuda_smem_limit(64, huge)
    assert msg and "shared memory per block" in msg and "163840" in msg


# --------------------------------------------------------------------------- CUDA scratch
@pytest.mark.skipif(not rasfast.backends()["cuda"]["built"], reason="rasfast._cuda not built")
def test_cuda_scratch_comes_from_torchs_caching_allocator():
    mod = dispatch.cuda_module()  # what every cuda op calls first
    assert mod.scratch_allocator() == "callback"
    try:
        mod.set_scratch_allocator(None, None)
        assert mod.scratch_allocator() == "pool"
        with pytest.raises(ValueError, match="both"):
            mod.set_scratch_allocator(None, torch.cuda.caching_allocator_delete)
    finally:
        dispatch.use_torch_scratch(mod)
    assert mod.scratch_allocator() == "callback"


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_scratch_is_counted_by_torch(monkeypatch):
    """The launchers' scratch arena (csrc/common/scratch_cuda.cpp) grows from torch's caching
    allocator when the callback is registered, so torch counts it; released before each
    measured call so that the call grows it again (a grown arena allocates nothing)."""
    monkeypatch.setenv("RASFAST_THEME_PATH", "kernel")  # the fused kernel uses the scratch
    q, c = torch.rand(4, 16, device="cuda"), torch.rand(5000, 16, device="cuda")
    qe, e = torch.rand(4, 8, device="cuda"), torch.rand(5000, 8, device="cuda")
    x = torch.rand(3, 10000, device="cuda")

    def allocations():
        torch.cuda.synchronize()
        mod.release_scratch()
        before = torch.cuda.memory_stats()["allocation.all.allocated"]
        rasfast.theme_scoped_search(q, qe, c, e, 700, 10, backend="cuda")
        rasfast.select_k(x, 500, backend="cuda")
        torch.cuda.synchronize()
        return torch.cuda.memory_stats()["allocation.all.allocated"] - before

    mod = dispatch.cuda_module()
    _use_torch_scratch = dispatch.use_torch_scratch
    allocations()  # warm up
    with_torch = allocations()
    monkeypatch.setattr(dispatch, "use_torch_scratch", lambda mod: None)
    mod.set_scratch_allocator(None, None)
    try:
        with_pool = allocations()
    finally:
        monkeypatch.setattr(dispatch, "use_torch_scratch", _use_torch_scratch)
        dispatch.use_torch_scratch(mod)
    # the same calls allocate more from torch when the kernels' scratch comes from torch
    assert with_torch > with_pool, (with_torch, with_pool)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_auto_on_gpu_falls_back_past_the_cuda_top_k_cap():
    g = torch.Generator().manual_seed(0)
    q, c = torch.randint(0, 3, (3, 8), generator=g).float(), torch.randint(0, 3, (900, 8), generator=g).float()
    qe, e = torch.randint(-2, 3, (3, 5), generator=g).float(), torch.randint(-2, 3, (900, 5), generator=g).float()
    want = rasfast.theme_scoped_search(q, qe, c, e, 600, 300, backend="torch")
    got = rasfast.theme_scoped_search(q.cuda(), qe.cuda(), c.cuda(), e.cuda(), 600, 300)
    assert torch.equal(got[0].cpu(), want[0]) and torch.equal(got[1].cpu(), want[1])
    if rasfast.backends()["cuda"]["built"]:
        with pytest.raises(ValueError, match="k <= 256"):
            rasfast.theme_scoped_search(q.cuda(), qe.cuda(), c.cuda(), e.cuda(), 600, 300,
                                        backend="cuda")


def test_an_old_triton_interpreter_is_refused_by_name():
    """Triton 3.6's interpreter cannot take runtime loop bounds (found on a GPU machine): the
    CPU-interpreted backend names the version and the one it needs instead of failing deep in
    a kernel; newer versions and development tags pass."""
    problem = rasfast.dispatch.triton_interpreter_problem("3.6.0")
    assert "3.6.0" in problem and ">=3.9" in problem
    for v in ("3.9.0", "3.10.1", "4.0.0+git1234", "3.9"):
        assert rasfast.dispatch.triton_interpreter_problem(v) is None, v


def test_triton_on_cpu_tensors_with_an_old_interpreter_raises(monkeypatch):
    pytest.importorskip("triton")
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    monkeypatch.setattr(rasfast.dispatch, "triton_interpreter_problem",
                        lambda version=None: "Triton 3.6.0's interpreter cannot run rasfast's kernels")
    from rasfast import select_k
    with pytest.raises(rasfast.dispatch.BackendUnavailable, match="3.6.0"):
        select_k(torch.randn(2, 50), 3, backend="triton")
    assert not rasfast.backends()["triton"]["available"] or torch.cuda.is_available()
