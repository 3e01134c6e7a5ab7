"""Theme models: map text embeddings to a theme "PPD" vector used to scope retrieval.

RAS scopes dense retrieval by theme (DESIGN.md section 3). Two kinds of model live here:

- The paper's supervised pair: :class:`ThemeClassifier` (embedding -> 512 -> ReLU -> Dropout
  -> 298, sigmoid: per-theme probabilities of a document) and :class:`ThemeShifter` (298 ->
  512 -> 256 -> 298, softmax: the theme distribution expected of the documents that answer a
  query), with :func:`fit_classifier` (BCE) and :func:`fit_shifter` (KL). Wrapped for use by
  an index as :class:`ClassifierThemeModel`.
- :class:`KMeansThemeModel`, the unsupervised default: T centroids from spherical k-means over
  document embeddings (faiss when installed, else Lloyd iterations in torch), and
  PPD = softmax(scale * cosine(embedding, centroids)). It needs no labels, so any corpus can
  be scoped.

Every theme model offers the same interface: ``.name``, ``.num_themes``,
``.ppd(doc_embeddings) -> [n, T]`` and ``.query_ppd(query_embeddings) -> [n, T]`` (float32,
numpy in -> numpy out, torch in -> torch out), ``.save(dir)`` and ``load_theme_model(dir)``.
"""
from __future__ import annotations

import json
import math
import pathlib
from typing import Any, Dict, List, Optional, Sequence

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from ._arrays import as_tensor, kind_of, to_kind
from ._validate import check_finite, check_float, check_int_arg, check_rank

#: Number of themes of the paper's classifier (its label set).
PAPER_THEMES = 298

_CONFIG = "theme_model.json"
_KIND_NAMES = ("kmeans", "classifier")   # the kinds of the models below (their .kind)


def _as_embeddings(x, name: str, dim: Optional[int] = None) -> torch.Tensor:
    """float32 [n, dim] tensor from a numpy array or tensor, validated."""
    t = as_tensor(x, name)
    check_float(t, name)
    check_rank(t, name, 2, "[n, dim]")
    if dim is not None and t.shape[1] != dim:
        raise ValueError(f"{name}: expected embeddings of dim {dim}, got shape {tuple(t.shape)}")
    check_finite(t, name)
    return t.float()


def _check_positive_float(value, name: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) \
            or value <= 0:
        raise ValueError(f"{name}: expected a finite number > 0, got {value!r}")
    return float(value)


def _check_dropout(value) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0.0 <= value < 1.0:
        raise ValueError(f"dropout: expected a number in [0, 1), got {value!r}")
    return float(value)


def _write_config(directory: pathlib.Path, config: Dict[str, Any]) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / _CONFIG).write_text(json.dumps(config, indent=2, sort_keys=True))


def config_schema(kind: str) -> Dict[str, Any]:
    """The JSON Schema of the ``theme_model.json`` of a model of ``kind`` (issue 31: a load
    names a missing or mistyped key instead of raising a bare KeyError)."""
    if kind == "kmeans":
        return {"type": "object",
                "required": ["kind", "num_themes", "scale", "iters", "seed", "backend", "dim"],
                "properties": {"kind": {"const": "kmeans"}, "name": {"type": "string"},
                               "num_themes": {"type": "integer", "minimum": 1},
                               "scale": {"type": "number"}, "iters": {"type": "integer", "minimum": 0},
                               "seed": {"type": "integer"}, "backend": {"type": "string"},
                               "dim": {"type": "integer", "minimum": 1}}}
    return {"type": "object", "required": ["kind", "classifier"],
            "properties": {"kind": {"const": kind}, "name": {"type": "string"},
                           "classifier": {"type": "object"},
                           "shifter": {"type": ["object", "null"]}}}


def _read_config(directory: pathlib.Path, kind: Optional[str] = None) -> Dict[str, Any]:
    path = directory / _CONFIG
    if not path.is_file():
        raise ValueError(f"{path}: missing; not a saved theme model directory")
    try:
        config = json.loads(path.read_text())
    except json.JSONDecodeError as e:
        raise ValueError(f"{path}: not valid JSON ({e})") from e
    if not isinstance(config, dict):
        raise ValueError(f"{path}: expected a JSON object, got {type(config).__name__}")
    if kind is not None and config.get("kind") != kind:
        raise ValueError(f"{path}: holds a {config.get('kind')!r} model, expected {kind!r}")
    if config.get("kind") in _KIND_NAMES:   # an unknown kind is refused by load_theme_model
        from ._schema import validate
        validate(config, config_schema(config["kind"]), path)
    return config


# --------------------------------------------------------------------------------------------
# The paper's supervised models
# --------------------------------------------------------------------------------------------

class ThemeClassifier(nn.Module):
    """Text embedding -> Linear(512) -> ReLU -> Dropout -> Linear(T) -> sigmoid.

    ``forward`` returns per-theme probabilities in (0, 1) (multi-label: rows need not sum
    to 1); ``logits`` the pre-sigmoid scores used for training with BCE.
    """

    def __init__(self, in_dim: int, num_themes: int = PAPER_THEMES, hidden: int = 512,
                 dropout: float = 0.1):
        super().__init__()
        self.in_dim = check_int_arg(in_dim, "in_dim", 1)
        self.num_themes = check_int_arg(num_themes, "num_themes", 1)
        self.hidden = check_int_arg(hidden, "hidden", 1)
        self.dropout = _check_dropout(dropout)
        self.net = nn.Sequential(nn.Linear(self.in_dim, self.hidden), nn.ReLU(),
                                 nn.Dropout(self.dropout), nn.Linear(self.hidden, self.num_themes))

    def config(self) -> Dict[str, Any]:
        return {"in_dim": self.in_dim, "num_themes": self.num_themes, "hidden": self.hidden,
                "dropout": self.dropout}

    def logits(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.sigmoid(self.net(x))


class ThemeShifter(nn.Module):
    """Query theme vector (T) -> 512 -> 256 -> T, ReLU + Dropout between, softmax output.

    Maps a query's theme vector to the theme distribution expected of the documents that
    answer it. ``log_probs`` (log-softmax) is what the KL training loss consumes.
    """

    def __init__(self, num_themes: int = PAPER_THEMES, hidden: Sequence[int] = (512, 256),
                 dropout: float = 0.1):
        super().__init__()
        self.num_themes = check_int_arg(num_themes, "num_themes", 1)
        self.hidden = [check_int_arg(h, "hidden", 1) for h in hidden]
        if not self.hidden:
            raise ValueError("hidden: expected at least one hidden layer size")
        self.dropout = _check_dropout(dropout)
        layers: List[nn.Module] = []
        width = self.num_themes
        for h in self.hidden:
            layers += [nn.Linear(width, h), nn.ReLU(), nn.Dropout(self.dropout)]
            width = h
        layers.append(nn.Linear(width, self.num_themes))
        self.net = nn.Sequential(*layers)

    def config(self) -> Dict[str, Any]:
        return {"num_themes": self.num_themes, "hidden": list(self.hidden), "dropout": self.dropout}

    def log_probs(self, p: torch.Tensor) -> torch.Tensor:
        return F.log_softmax(self.net(p), dim=-1)

    def forward(self, p: torch.Tensor) -> torch.Tensor:
        return torch.softmax(self.net(p), dim=-1)


def _fit(model: nn.Module, inputs: torch.Tensor, targets: torch.Tensor, loss_fn, epochs: int,
         lr: float, batch_size: int, weight_decay: float, seed: int) -> List[float]:
    """Adam over shuffled mini-batches; returns the mean training loss of each epoch."""
    epochs = check_int_arg(epochs, "epochs", 1)
    batch_size = check_int_arg(batch_size, "batch_size", 1)
    lr = _check_positive_float(lr, "lr")
    if inputs.shape[0] == 0:
        raise ValueError("inputs: need at least one training example")
    gen = torch.Generator().manual_seed(int(seed))
    opt = torch.optim.Adam(model.parameters(), lr=lr, weight_decay=weight_decay)
    history: List[float] = []
    model.train()
    n = inputs.shape[0]
    for _ in range(epochs):
        order = torch.randperm(n, generator=gen)
        total = 0.0
        for start in range(0, n, batch_size):
            idx = order[start:start + batch_size]
            opt.zero_grad()
            loss = loss_fn(inputs[idx], targets[idx])
            loss.backward()
            opt.step()
            total += float(loss.detach()) * len(idx)
        history.append(total / n)
    model.eval()
    return history


def fit_classifier(model: ThemeClassifier, embeddings, labels, epochs: int = 20,
                   lr: float = 1e-3, batch_size: int = 64, weight_decay: float = 0.0,
                   seed: int = 0) -> List[float]:
    """Trains ``model`` with binary cross-entropy on multi-hot theme ``labels`` [n, T].

    ``labels`` may be soft targets in [0, 1]. Returns the per-epoch mean loss.
    """
    x = _as_embeddings(embeddings, "embeddings", model.in_dim)
    y = _as_embeddings(labels, "labels", model.num_themes)
    if y.shape[0] != x.shape[0]:
        raise ValueError(f"labels: expected {x.shape[0]} rows (one per embedding), got {y.shape[0]}")
    if y.numel() and (y.min() < 0 or y.max() > 1):
        raise ValueError("labels: expected values in [0, 1]")
    torch.manual_seed(seed)  # dropout masks
    return _fit(model, x, y, lambda a, b: F.binary_cross_entropy_with_logits(model.logits(a), b),
                epochs, lr, batch_size, weight_decay, seed)


def fit_shifter(model: ThemeShifter, query_themes, doc_themes, epochs: int = 20,
                lr: float = 1e-3, batch_size: int = 64, weight_decay: float = 0.0,
                seed: int = 0) -> List[float]:
    """Trains ``model`` with KL(target || predicted) towards the theme distribution of the
    documents that answer each query.

    ``doc_themes`` [n, T] are non-negative; each row is normalised to sum to 1 (e.g. the
    averaged classifier output of a query's gold documents). Returns per-epoch mean loss.
    """
    q = _as_embeddings(query_themes, "query_themes", model.num_themes)
    d = _as_embeddings(doc_themes, "doc_themes", model.num_themes)
    if d.shape[0] != q.shape[0]:
        raise ValueError(f"doc_themes: expected {q.shape[0]} rows (one per query), got {d.shape[0]}")
    if d.numel() and d.min() < 0:
        raise ValueError("doc_themes: expected non-negative values")
    sums = d.sum(dim=1, keepdim=True)
    if d.numel() and (sums <= 0).any():
        raise ValueError("doc_themes: every row needs a positive sum")
    target = d / sums
    torch.manual_seed(seed)
    return _fit(model, q, target,
                lambda a, b: F.kl_div(model.log_probs(a), b, reduction="batchmean"),
                epochs, lr, batch_size, weight_decay, seed)


def _apply(module: nn.Module, x, name: str, dim: int):
    kind = kind_of(x)
    t = _as_embeddings(x, name, dim)
    module.eval()
    with torch.no_grad():
        out = module(t.to(next(module.parameters()).device)).float()
    return to_kind(out.to(t.device), kind)


class ClassifierThemeModel:
    """The paper's theme model for an index: classifier for documents, classifier then
    shifter (when given) for queries."""

    kind = "classifier"

    def __init__(self, classifier: ThemeClassifier, shifter: Optional[ThemeShifter] = None,
                 name: str = "theme-classifier"):
        if not isinstance(classifier, ThemeClassifier):
            raise TypeError(f"classifier: expected a ThemeClassifier, got {type(classifier).__name__}")
        if shifter is not None:
            if not isinstance(shifter, ThemeShifter):
                raise TypeError(f"shifter: expected a ThemeShifter, got {type(shifter).__name__}")
            if shifter.num_themes != classifier.num_themes:
                raise ValueError(f"shifter: num_themes {shifter.num_themes} != classifier's "
                                 f"{classifier.num_themes}")
        self.classifier = classifier.eval()
        self.shifter = shifter.eval() if shifter is not None else None
        self.name = name

    @property
    def num_themes(self) -> int:
        return self.classifier.num_themes

    @property
    def dim(self) -> int:
        return self.classifier.in_dim

    def ppd(self, embeddings):
        """Per-theme probabilities [n, T] of documents."""
        return _apply(self.classifier, embeddings, "embeddings", self.dim)

    def query_ppd(self, query_embeddings):
        """Expected theme vector [n, T] of the documents answering each query."""
        p = self.ppd(query_embeddings)
        if self.shifter is None:
            return p
        return _apply(self.shifter, p, "query_ppd", self.num_themes)

    def save(self, directory) -> None:
        d = pathlib.Path(directory)
        _write_config(d, {"kind": self.kind, "name": self.name,
                          "classifier": self.classifier.config(),
                          "shifter": None if self.shifter is None else self.shifter.config()})
        torch.save(self.classifier.state_dict(), d / "classifier.pt")
        if self.shifter is not None:
            torch.save(self.shifter.state_dict(), d / "shifter.pt")

    @classmethod
    def load(cls, directory) -> "ClassifierThemeModel":
        d = pathlib.Path(directory)
        cfg = _read_config(d, cls.kind)
        clf = ThemeClassifier(**cfg["classifier"])
        clf.load_state_dict(torch.load(d / "classifier.pt", weights_only=True))
        shifter = None
        if cfg.get("shifter") is not None:
            shifter = ThemeShifter(**cfg["shifter"])
            shifter.load_state_dict(torch.load(d / "shifter.pt", weights_only=True))
        return cls(clf, shifter, name=cfg.get("name", "theme-classifier"))


# --------------------------------------------------------------------------------------------
# The unsupervised default: soft assignment to k-means centroids
# --------------------------------------------------------------------------------------------

def _normalise(x: torch.Tensor) -> torch.Tensor:
    return x / x.norm(dim=1, keepdim=True).clamp_min(1e-12)


def _kmeans_pp(x: torch.Tensor, k: int, gen: torch.Generator) -> torch.Tensor:
    first = int(torch.randint(x.shape[0], (1,), generator=gen))
    chosen = [first]
    d2 = (2 - 2 * (x @ x[first])).clamp_min(0)
    for _ in range(1, k):
        if float(d2.sum()) <= 0:  # fewer distinct points than k: any point will do
            nxt = int(torch.randint(x.shape[0], (1,), generator=gen))
        else:
            nxt = int(torch.multinomial(d2, 1, generator=gen))
        chosen.append(nxt)
        d2 = torch.minimum(d2, (2 - 2 * (x @ x[nxt])).clamp_min(0))
    return x[chosen].clone()


def _lloyd_torch(x: torch.Tensor, k: int, iters: int, seed: int) -> torch.Tensor:
    """Spherical k-means (cosine) by Lloyd iterations; deterministic for a given seed.

    Initialised by k-means++ seeding (D^2 sampling, D^2 = 2 - 2 cos on the sphere); an empty
    cluster is re-seeded with the point least similar to its own centroid, so every
    centroid stays in use.
    """
    gen = torch.Generator().manual_seed(int(seed))
    cent = _kmeans_pp(x, k, gen)
    for _ in range(iters):
        sim = x @ cent.T
        best_sim, assign = sim.max(dim=1)
        sums = torch.zeros_like(cent).index_add_(0, assign, x)
        counts = torch.bincount(assign, minlength=k)
        for c in torch.nonzero(counts == 0).flatten().tolist():
            far = int(torch.argmin(best_sim))
            sums[c] = x[far]
            best_sim[far] = float("inf")  # don't hand the same point to two empty clusters
        new = _normalise(sums)
        if torch.equal(new, cent):
            break
        cent = new
    return cent


def _kmeans_faiss(x: np.ndarray, k: int, iters: int, seed: int) -> np.ndarray:
    import faiss
    km = faiss.Kmeans(x.shape[1], k, niter=iters, seed=int(seed), spherical=True,
                      verbose=False, min_points_per_centroid=1, max_points_per_centroid=1 << 30)
    km.train(np.ascontiguousarray(x, dtype=np.float32))
    return np.asarray(km.centroids, dtype=np.float32)


def _faiss_available() -> bool:
    try:
        import faiss  # noqa: F401
    except ImportError:
        return False
    return True


class KMeansThemeModel:
    """Unsupervised themes: PPD = softmax(scale * cosine(embedding, centroid_t)) over T
    centroids of spherical k-means on the (L2-normalised) document embeddings.

    Args:
        num_themes: T, the number of centroids (at most the number of documents fitted).
        scale: softmax temperature inverse; larger = sharper theme assignment.
        iters: k-means iterations.
        seed: k-means initialisation seed (fits are deterministic for a given seed).
        backend: "auto" (faiss when installed, else torch), "faiss" or "torch".
    """

    kind = "kmeans"

    def __init__(self, num_themes: int = 64, scale: float = 20.0, iters: int = 25, seed: int = 0,
                 backend: str = "auto"):
        self.num_themes = check_int_arg(num_themes, "num_themes", 1)
        self.scale = _check_positive_float(scale, "scale")
        self.iters = check_int_arg(iters, "iters", 1)
        self.seed = check_int_arg(seed, "seed", 0)
        if backend not in ("auto", "faiss", "torch"):
            raise ValueError(f"backend: expected one of 'auto', 'faiss', 'torch', got {backend!r}")
        if backend == "faiss" and not _faiss_available():
            raise ValueError("backend: 'faiss' requested but faiss is not installed")
        self.backend = backend
        self.centroids: Optional[torch.Tensor] = None  # [T, D] float32, unit rows

    @property
    def name(self) -> str:
        return f"kmeans-T{self.num_themes}-s{self.scale:g}"

    @property
    def dim(self) -> int:
        self._check_fitted()
        return int(self.centroids.shape[1])

    def fit(self, embeddings) -> "KMeansThemeModel":
        """Runs k-means over document ``embeddings`` [n, D] (n >= num_themes)."""
        x = _normalise(_as_embeddings(embeddings, "embeddings"))
        if x.shape[0] < self.num_themes:
            raise ValueError(f"embeddings: k-means with num_themes={self.num_themes} needs at "
                             f"least that many rows, got {x.shape[0]}")
        use_faiss = self.backend == "faiss" or (self.backend == "auto" and _faiss_available())
        if use_faiss:
            cent = torch.from_numpy(_kmeans_faiss(x.numpy(), self.num_themes, self.iters, self.seed))
        else:
            cent = _lloyd_torch(x, self.num_themes, self.iters, self.seed)
        self.centroids = _normalise(cent.float()).contiguous()
        return self

    def _check_fitted(self) -> None:
        if self.centroids is None:
            raise ValueError("KMeansThemeModel: not fitted; call .fit(doc_embeddings) or load()")

    def ppd(self, embeddings):
        """Soft theme assignment [n, T] (rows sum to 1) of document embeddings."""
        self._check_fitted()
        kind = kind_of(embeddings)
        x = _normalise(_as_embeddings(embeddings, "embeddings", self.dim))
        out = torch.softmax(self.scale * (x @ self.centroids.to(x.device).T), dim=1)
        return to_kind(out, kind)

    def query_ppd(self, query_embeddings):
        """Queries use the same soft assignment as documents (no shifter)."""
        return self.ppd(query_embeddings)

    def save(self, directory) -> None:
        self._check_fitted()
        d = pathlib.Path(directory)
        _write_config(d, {"kind": self.kind, "name": self.name, "num_themes": self.num_themes,
                          "scale": self.scale, "iters": self.iters, "seed": self.seed,
                          "backend": self.backend, "dim": self.dim})
        np.save(d / "centroids.npy", self.centroids.numpy())

    @classmethod
    def load(cls, directory) -> "KMeansThemeModel":
        d = pathlib.Path(directory)
        cfg = _read_config(d, cls.kind)
        backend = cfg["backend"] if cfg["backend"] != "faiss" or _faiss_available() else "auto"
        model = cls(cfg["num_themes"], cfg["scale"], cfg["iters"], cfg["seed"], backend)
        path = d / "centroids.npy"
        if not path.is_file():
            raise ValueError(f"{path}: missing")
        try:
            cent = np.load(path)
        except Exception as e:  # truncated / not an .npy
            raise ValueError(f"{path}: unreadable ({e})") from e
        if cent.shape != (cfg["num_themes"], cfg["dim"]) or cent.dtype != np.float32:
            raise ValueError(f"{path}: expected float32 {(cfg['num_themes'], cfg['dim'])}, "
                             f"got {cent.dtype} {cent.shape}")
        model.centroids = torch.from_numpy(np.array(cent))
        return model


_KINDS = {KMeansThemeModel.kind: KMeansThemeModel, ClassifierThemeModel.kind: ClassifierThemeModel}


def load_theme_model(directory):
    """Loads any theme model saved with ``.save(directory)``."""
    cfg = _read_config(pathlib.Path(directory))
    kind = cfg.get("kind")
    if kind not in _KINDS:
        raise ValueError(f"{pathlib.Path(directory) / _CONFIG}: unknown theme model kind {kind!r}")
    return _KINDS[kind].load(directory)


__all__ = ["PAPER_THEMES", "ThemeClassifier", "ThemeShifter", "fit_classifier", "fit_shifter",
           "ClassifierThemeModel", "KMeansThemeModel", "load_theme_model"]
