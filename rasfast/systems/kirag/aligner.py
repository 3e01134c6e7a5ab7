"""Training the Reasoning Chain Aligner (a sentence-transformers bi-encoder).

``train_aligner(pairs)`` fine-tunes a bi-encoder (all-MiniLM-L6-v2 offline by default) with
KiRAG's contrastive loss: for a (query, positive, negatives) pair, with s = cos(f(query),
f(triple)), loss = -log(exp(s+/tau) / sum over positive and negatives of exp(s/tau)).
``save_aligner`` / ``load_aligner`` store it as a sentence-transformers directory plus
``kirag_aligner.json`` (settings and the loss curve); a loaded aligner is a
:class:`rasfast.encode.SentenceTransformerEncoder` usable as ``KiRAG(aligner=...)``.
"""
from __future__ import annotations

import json
import pathlib
import time
from dataclasses import dataclass, field
from typing import List, Optional, Sequence

import numpy as np

from ..._validate import check_int_arg
from .silver import AlignerPair

META = "kirag_aligner.json"


@dataclass
class TrainedAligner:
    model: object                      # the sentence_transformers.SentenceTransformer
    losses: List[float] = field(default_factory=list)   # per optimizer step
    settings: dict = field(default_factory=dict)
    seconds: float = 0.0

    def encoder(self, name: str = "kirag-aligner"):
        """The trained model as an Encoder (L2-normalised float32 rows)."""
        from ...encode import SentenceTransformerEncoder
        enc = SentenceTransformerEncoder.__new__(SentenceTransformerEncoder)
        enc.model = self.model
        get_dim = getattr(self.model, "get_embedding_dimension", None) or \
            self.model.get_sentence_embedding_dimension
        enc.dim, enc.name = int(get_dim()), name
        return enc


def _load_model(model):
    import os
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    from sentence_transformers import SentenceTransformer
    if isinstance(model, SentenceTransformer):
        return model
    if model is None:
        from ...encode import minilm_path
        model = minilm_path()
    return SentenceTransformer(str(model), device="cpu")


def _embed(model, texts: Sequence[str]):
    import torch
    prep = getattr(model, "preprocess", None) or model.tokenize  # tokenize: before ST 6
    feats = {k: (v.to(model.device) if hasattr(v, "to") else v)
             for k, v in prep(list(texts)).items()}
    emb = model(feats)["sentence_embedding"]
    return torch.nn.functional.normalize(emb, dim=-1)


#: The paper's aligner training (KiRAG, Appendix B.3): Adam, lr 2e-5, weight decay 0.01,
#: batch 64, 7 negatives per data point, temperature 0.01, 10 epochs. These are the frozen
#: defaults: nothing here was tuned on evaluation questions.
PAPER_TRAINING = dict(epochs=10, batch_size=64, lr=2e-5, weight_decay=0.01, temperature=0.01,
                      max_negatives=7)


def train_aligner(pairs: Sequence[AlignerPair], model=None,
                  epochs: int = PAPER_TRAINING["epochs"],
                  batch_size: int = PAPER_TRAINING["batch_size"],
                  lr: float = PAPER_TRAINING["lr"], temperature: float = PAPER_TRAINING["temperature"],
                  max_negatives: int = PAPER_TRAINING["max_negatives"],
                  max_steps: Optional[int] = None, seed: int = 0, progress: bool = False,
                  weight_decay: float = PAPER_TRAINING["weight_decay"]) -> TrainedAligner:
    """Fine-tunes a bi-encoder with the contrastive loss above (defaults: the paper's
    hyperparameters, :data:`PAPER_TRAINING`).

    Args:
        pairs: :class:`AlignerPair` list (see :func:`rasfast.systems.kirag.silver.training_pairs`).
        model: a SentenceTransformer, a path, or None for all-MiniLM-L6-v2 (offline package).
        epochs, batch_size, lr, weight_decay: AdamW schedule (constant lr). max_steps: stop
            early.
        temperature: tau > 0. max_negatives: negatives used per pair.
    """
    import torch

    if not isinstance(pairs, (list, tuple)) or not all(isinstance(p, AlignerPair) for p in pairs):
        raise TypeError("pairs: expected a list of AlignerPair")
    if not pairs:
        raise ValueError("pairs: need at least one training pair")
    epochs = check_int_arg(epochs, "epochs", 1)
    batch_size = check_int_arg(batch_size, "batch_size", 1)
    max_negatives = check_int_arg(max_negatives, "max_negatives", 0)
    if not (isinstance(temperature, (int, float)) and temperature > 0):
        raise ValueError(f"temperature: expected a number > 0, got {temperature!r}")
    st = _load_model(model)
    torch.manual_seed(seed)
    rng = np.random.default_rng(seed)
    opt = torch.optim.AdamW([p for p in st.parameters() if p.requires_grad], lr=lr,
                            weight_decay=weight_decay)
    st.train()
    losses: List[float] = []
    t0 = time.perf_counter()
    steps = 0
    for ep in range(epochs):
        order = rng.permutation(len(pairs))
        for s in range(0, len(order), batch_size):
            batch = [pairs[i] for i in order[s:s + batch_size]]
            cands = [[p.positive] + list(p.negatives[:max_negatives]) for p in batch]
            q = _embed(st, [p.query for p in batch])
            t = _embed(st, [x for c in cands for x in c])
            logits = torch.full((len(batch), max(len(c) for c in cands)), float("-inf"))
            off = 0
            for i, c in enumerate(cands):
                logits[i, :len(c)] = (t[off:off + len(c)] @ q[i]) / temperature
                off += len(c)
            loss = torch.nn.functional.cross_entropy(logits, torch.zeros(len(batch), dtype=torch.long))
            opt.zero_grad()
            loss.backward()
            opt.step()
            losses.append(float(loss.detach()))
            steps += 1
            if progress:
                print(f"  epoch {ep + 1} step {steps}: loss {losses[-1]:.4f}", flush=True)
            if max_steps is not None and steps >= max_steps:
                break
        if max_steps is not None and steps >= max_steps:
            break
    st.eval()
    settings = dict(epochs=epochs, batch_size=batch_size, lr=lr, weight_decay=weight_decay,
                    temperature=temperature,
                    max_negatives=max_negatives, max_steps=max_steps, seed=seed, pairs=len(pairs))
    return TrainedAligner(st, losses, settings, time.perf_counter() - t0)


def save_aligner(trained: TrainedAligner, path, trained_on: Optional[dict] = None) -> str:
    """Saves the model and its training record (:data:`META`: settings, losses, seconds and,
    given ``trained_on``, what it was trained on: ``{"dataset", "questions", "qids"}``, the
    ids of the questions whose chains gave the training pairs, so an evaluation can check
    that it holds them out)."""
    path = pathlib.Path(path)
    path.mkdir(parents=True, exist_ok=True)
    trained.model.save(str(path))
    meta = {"settings": trained.settings, "losses": trained.losses, "seconds": trained.seconds}
    if trained_on is not None:
        meta["trained_on"] = trained_on
    (path / META).write_text(json.dumps(meta, indent=1))
    return str(path)


def load_aligner(path):
    """A saved aligner as an Encoder (rasfast.encode.SentenceTransformerEncoder)."""
    from ...encode import SentenceTransformerEncoder
    path = pathlib.Path(path)
    if not (path / META).exists():
        raise FileNotFoundError(f"{path}: not a saved KiRAG aligner (no {META})")
    return SentenceTransformerEncoder(model=str(path), name=f"kirag-aligner:{path.name}")
