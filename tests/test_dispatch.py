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
        assert info["triton"]["interpret"] and info["triton"]["available"]


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
