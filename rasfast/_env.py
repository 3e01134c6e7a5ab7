"""Environment settings read on every op call, cheaply.

The ops read their switches (``RASFAST_CUDA_EMU``, ``TRITON_INTERPRET``, the theme path
knobs) at every call, so that a test or a benchmark can flip one between calls. Through
``os.environ.get`` an unset name costs ~0.5 us on Zen 5 (the key is encoded and a KeyError
raised and caught inside the mapping), and a graph_transformer_pool call read 18 of them:
about 10 us of its 170 us host path on the emulator's dry run, more on a slower GPU host.
CPython's ``os.environ`` keeps its contents in ``_data`` (encoded keys), which assignments
and ``del`` through ``os.environ`` (and so ``monkeypatch.setenv``) update: a lookup there
sees every change and costs ~35 ns. Where that attribute is missing (another Python), this
falls back to ``os.environ.get``.
"""
from __future__ import annotations

import os
from typing import Dict, Optional

_DATA = getattr(os.environ, "_data", None)
_KEYS: Dict[str, object] = {}
_encode = getattr(os.environ, "encodekey", None)
_decode = getattr(os.environ, "decodevalue", None)
_FAST = isinstance(_DATA, dict) and _encode is not None and _decode is not None


def get(name: str, default: Optional[str] = None) -> Optional[str]:
    """``os.environ.get(name, default)``, without its per-call cost."""
    if not _FAST:
        return os.environ.get(name, default)
    key = _KEYS.get(name)
    if key is None:
        key = _KEYS[name] = _encode(name)
    value = _DATA.get(key)
    return default if value is None else _decode(value)


def flag(name: str) -> bool:
    """Set and neither empty nor "0" (the convention of RASFAST_CUDA_EMU, TRITON_INTERPRET)."""
    v = get(name)
    return v is not None and v not in ("", "0")
