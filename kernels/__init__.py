"""Triton kernels, installed as ``rasfast.kernels``.

Imported lazily by the dispatch layer (rasfast.backends.triton_kernels) because
importing triton is slow and optional. On a machine without a GPU the kernels run only
under ``TRITON_INTERPRET=1``, which must be set before this package is imported.
"""
import importlib as _importlib


def __getattr__(name):
    # rasfast.kernels.select, rasfast.kernels.theme, ... imported on first use
    try:
        return _importlib.import_module(f"{__name__}.{name}")
    except ModuleNotFoundError as e:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}") from e
