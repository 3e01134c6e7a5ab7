"""Hybrid structure routers: (question, documents' core content) -> one of five types.

Every router takes one ``(question, documents)`` item per question and returns its reply
text per question; :class:`~rasfast.systems.structrag.StructRAG` parses replies with
:func:`~rasfast.systems.structrag.parse.parse_route`, so a reply naming no known type falls back to
:data:`~rasfast.systems.structrag.types.DEFAULT_TYPE` and is counted, whichever router gave it.

- :class:`LLMRouter`: the paper's few-shot prompt through any rasfast.llm backend, all
  questions of a batch in one concurrent call.
- :class:`HeuristicRouter`: model-free cue words (counting/ranking -> table, steps ->
  algorithm, summarise -> catalogue, chained relative clauses -> graph), else ``default``.
- :class:`EmbeddingRouter`: a small trainable classifier over embeddings of the question and
  the core content, trained from labelled examples or preference pairs.
- :class:`LogProbRouter` (in :mod:`rasfast.systems.structrag.dpo`): a causal LM scoring the five
  type words, e.g. after DPO training.
"""
from __future__ import annotations

import json
import pathlib

import re
from typing import Any, List, Sequence, Tuple

import numpy as np

from ...types import RetrievedPassage
from ._llm import check_llm, generate_isolated
from .prompts import router_messages
from .types import STRUCTURE_TYPES

RouteItem = Tuple[str, Sequence[RetrievedPassage]]


def core_content(documents: Sequence[RetrievedPassage], max_docs: int = 10, max_chars: int = 120) -> str:
    """What the router reads of the documents: quoted titles, or first sentences for
    documents without a title (the paper's "doc info")."""
    parts = []
    for d in list(documents)[:max_docs]:
        if d.title:
            parts.append(f"\"{d.title}\"")
        else:
            first = re.split(r"(?<=[.!?])\s", d.text.strip(), maxsplit=1)[0]
            parts.append(f"\"{first[:max_chars]}\"")
    more = len(documents) - max_docs
    return " ".join(parts) + (f" (+{more} more)" if more > 0 else "") if parts else "(no documents)"


class LLMRouter:
    """The paper's prompt router over any :mod:`rasfast.llm` backend."""

    def __init__(self, llm, few_shot: bool = True, max_new_tokens: int = 8, temperature: float = 0.0):
        check_llm(llm)
        self.llm, self.few_shot, self.max_new_tokens, self.temperature = llm, few_shot, max_new_tokens, temperature

    def route(self, items: Sequence[RouteItem]) -> List[Any]:
        prompts = [router_messages(q, core_content(docs), self.few_shot) for q, docs in items]
        replies, errs = generate_isolated(self.llm, prompts, self.max_new_tokens, self.temperature)
        return [errs[i] if i in errs else r for i, r in enumerate(replies)]


_CUES = (
    ("table", re.compile(r"\b(how many|how much|number of|count|total|sum of|average|mean|median|"
                         r"highest|lowest|largest|smallest|most|least|rank|ranking|compare|"
                         r"percentage|statistic\w*)\b", re.IGNORECASE)),
    ("algorithm", re.compile(r"\b(how (?:do|does|can|should|to)|steps?|procedure|process of|"
                             r"instructions?|in what order|algorithm|plan for)\b", re.IGNORECASE)),
    ("catalogue", re.compile(r"\b(summari[sz]e|summary|overview|main (?:points|ideas|topics|"
                             r"findings)|outline)\b", re.IGNORECASE)),
    ("graph", re.compile(r"\b(?:the \w+(?: \w+)? (?:that|where|who|which|whose)|of the \w+ (?:of|"
                         r"that|where|who))\b", re.IGNORECASE)),
)


class HeuristicRouter:
    """Model-free cue-word router; questions with no cue get ``default`` (``"chunk"``;
    StructRAG's offline defaults use ``"graph"`` when the documents come with triples)."""

    def __init__(self, default: str = "chunk"):
        if default not in STRUCTURE_TYPES:
            raise ValueError(f"default: expected one of {STRUCTURE_TYPES}, got {default!r}")
        self.default = default

    def route_one(self, question: str) -> str:
        for kind, cue in _CUES:
            if cue.search(question):
                return kind
        return self.default

    def route(self, items: Sequence[RouteItem]) -> List[str]:
        return [self.route_one(q) for q, _ in items]


class FixedRouter:
    """Routes every question to one structure type: the paper's single-type ablations (its
    Table 4: "chunk" alone is the strongest single type)."""

    def __init__(self, kind: str):
        if kind not in STRUCTURE_TYPES:
            raise ValueError(f"kind: expected one of {STRUCTURE_TYPES}, got {kind!r}")
        self.kind = kind

    def route(self, items: Sequence[RouteItem]) -> List[str]:
        return [self.kind for _ in items]


class EmbeddingRouter:
    """A small MLP over ``[enc(question), enc(core content)]`` -> five type logits.

    Train with :meth:`fit` from labelled ``(question, core_content, type)`` triples
    (cross-entropy) and/or preference pairs ``(question, core_content, chosen, rejected)``
    (pairwise logistic loss on the chosen-minus-rejected logit, as DPO's preference signal
    reduces to for a classifier). ``route`` returns the arg-max type."""

    def __init__(self, encoder=None, hidden: int = 64, seed: int = 0):
        import torch
        from ...encode import CachedEncoder, HashingEncoder
        enc = encoder if encoder is not None else HashingEncoder()
        self.encoder = enc if isinstance(enc, CachedEncoder) else CachedEncoder(enc)
        g = torch.Generator().manual_seed(seed)
        d = 2 * self.encoder.dim
        self.net = torch.nn.Sequential(torch.nn.Linear(d, hidden), torch.nn.ReLU(),
                                       torch.nn.Linear(hidden, len(STRUCTURE_TYPES)))
        with torch.no_grad():
            for p in self.net.parameters():
                p.copy_(torch.randn(p.shape, generator=g) * (1.0 / np.sqrt(p.shape[-1])))

    def _features(self, questions: Sequence[str], cores: Sequence[str]):
        import torch
        q = self.encoder.encode(list(questions))
        c = self.encoder.encode(list(cores))
        return torch.from_numpy(np.concatenate([q, c], axis=1))

    def logits(self, questions: Sequence[str], cores: Sequence[str]):
        import torch
        with torch.no_grad():
            return self.net(self._features(questions, cores)).numpy()

    def fit(self, examples: Sequence[Tuple[str, str, str]] = (),
            pairs: Sequence[Tuple[str, str, str, str]] = (), epochs: int = 200, lr: float = 0.01,
            weight_decay: float = 1e-4) -> List[float]:
        """Trains on labelled examples and/or preference pairs; returns the loss per epoch."""
        import torch
        ix = {t: i for i, t in enumerate(STRUCTURE_TYPES)}
        for n, e in enumerate(examples):
            if len(e) != 3 or e[2] not in ix:
                raise ValueError(f"examples[{n}]: expected (question, core_content, type) with a type "
                                 f"in {STRUCTURE_TYPES}, got {e!r}")
        for n, p in enumerate(pairs):
            if len(p) != 4 or p[2] not in ix or p[3] not in ix or p[2] == p[3]:
                raise ValueError(f"pairs[{n}]: expected (question, core_content, chosen, rejected) with "
                                 f"two different types in {STRUCTURE_TYPES}, got {p!r}")
        if not examples and not pairs:
            raise ValueError("examples/pairs: nothing to train on")
        xe = self._features([e[0] for e in examples], [e[1] for e in examples]) if examples else None
        ye = torch.tensor([ix[e[2]] for e in examples], dtype=torch.long)
        xp = self._features([p[0] for p in pairs], [p[1] for p in pairs]) if pairs else None
        ch = torch.tensor([ix[p[2]] for p in pairs], dtype=torch.long)
        rj = torch.tensor([ix[p[3]] for p in pairs], dtype=torch.long)
        opt = torch.optim.Adam(self.net.parameters(), lr=lr, weight_decay=weight_decay)
        losses = []
        self.net.train()
        for _ in range(epochs):
            opt.zero_grad()
            loss = torch.zeros(())
            if xe is not None:
                loss = loss + torch.nn.functional.cross_entropy(self.net(xe), ye)
            if xp is not None:
                lg = self.net(xp)
                margin = lg.gather(1, ch[:, None]) - lg.gather(1, rj[:, None])
                loss = loss - torch.nn.functional.logsigmoid(margin).mean()
            loss.backward()
            opt.step()
            losses.append(float(loss.detach()))
        self.net.eval()
        return losses

    def route(self, items: Sequence[RouteItem]) -> List[str]:
        if not items:
            return []
        lg = self.logits([q for q, _ in items], [core_content(d) for _, d in items])
        return [STRUCTURE_TYPES[int(i)] for i in lg.argmax(1)]

    def save(self, directory) -> pathlib.Path:
        """Writes ``router.json`` (what it needs: encoder name and dim, hidden size, types)
        and ``router.pt`` (the MLP's weights) into ``directory``; returns the directory."""
        import torch
        d = pathlib.Path(directory)
        d.mkdir(parents=True, exist_ok=True)
        torch.save(self.net.state_dict(), d / "router.pt")
        meta = {"kind": "embedding", "format": 1, "encoder": getattr(self.encoder, "name", None),
                "dim": int(self.encoder.dim), "hidden": int(self.net[0].out_features),
                "types": list(STRUCTURE_TYPES)}
        (d / "router.json").write_text(json.dumps(meta, indent=1))
        return d


# A knowledge index may hold a trained router here; build_system("structrag") then uses it.
ROUTER_DIR = "structrag_router"


def load_router(directory, encoder) -> EmbeddingRouter:
    """The :class:`EmbeddingRouter` saved in ``directory``, embedding with ``encoder`` (the
    one it was trained with: same name and dimension, else ``ValueError``)."""
    import torch
    d = pathlib.Path(directory)
    if not (d / "router.json").is_file() or not (d / "router.pt").is_file():
        raise ValueError(f"directory: no saved router (router.json + router.pt) in {d}")
    try:
        meta = json.loads((d / "router.json").read_text())
    except ValueError as e:
        raise ValueError(f"directory: {d / 'router.json'} is not valid JSON ({e})") from None
    if meta.get("kind") != "embedding" or meta.get("types") != list(STRUCTURE_TYPES):
        raise ValueError(f"directory: {d} holds a router of kind {meta.get('kind')!r} over types "
                         f"{meta.get('types')!r}; expected an embedding router over {list(STRUCTURE_TYPES)}")
    dim, name = getattr(encoder, "dim", None), getattr(encoder, "name", None)
    if dim != meta.get("dim") or (meta.get("encoder") and name != meta.get("encoder")):
        raise ValueError(f"encoder: the router in {d} was trained with {meta.get('encoder')!r} "
                         f"(dim {meta.get('dim')}); got {name!r} (dim {dim})")
    router = EmbeddingRouter(encoder, hidden=int(meta["hidden"]))
    router.net.load_state_dict(torch.load(d / "router.pt", map_location="cpu", weights_only=True))
    router.net.eval()
    return router


__all__ = ["core_content", "LLMRouter", "HeuristicRouter", "FixedRouter", "EmbeddingRouter", "load_router",
           "ROUTER_DIR"]
