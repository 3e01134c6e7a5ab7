"""The package imports cleanly and exposes its public names lazily."""
import importlib

import pytest

import rasfast


def test_version_and_backends():
    assert rasfast.__version__
    info = rasfast.backends()
    assert set(info) >= {"torch", "cpu", "cuda", "triton"}
    assert info["torch"]["available"] and info["cpu"]["available"], info


def test_public_names_resolve_to_their_modules():
    for name, module in rasfast._LAZY.items():
        assert name in dir(rasfast)
        mod = importlib.import_module(module)
        assert getattr(rasfast, name) is getattr(mod, name), name


def test_unknown_attribute_is_an_attribute_error():
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        rasfast.nope  # noqa: B018


@pytest.mark.parametrize("allow_inf", [False, True])
def test_check_finite_scans_every_chunk(allow_inf):
    import torch

    from rasfast._validate import check_finite

    x = torch.zeros(10_000)
    check_finite(x, "x", allow_inf=allow_inf, chunk_elems=64)
    x[9_999] = float("nan")  # in the last, partial chunk
    with pytest.raises(ValueError, match="x: contains NaN"):
        check_finite(x, "x", allow_inf=allow_inf, chunk_elems=64)
    x[9_999] = float("inf")
    if allow_inf:
        check_finite(x, "x", allow_inf=True, chunk_elems=64)
    else:
        with pytest.raises(ValueError, match="infinite"):
            check_finite(x, "x", chunk_elems=64)
