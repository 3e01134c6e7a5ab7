"""What both framework adapters share: resolve the system, run one query, and describe each
retrieved passage as (text, score, metadata)."""
from __future__ import annotations

from typing import Any, Dict, List, Tuple


def make_system(kindex, system, encoder, llm, opts: Dict[str, Any]):
    """``system`` is a registered name (built over ``kindex``) or a ready system object."""
    if isinstance(system, str):
        from ..systems.registry import build_system
        if encoder is None:
            from ..encode import make_encoder
            name = kindex.encoder_name or ""
            encoder = make_encoder("hashing" if name.startswith("hashing") else "minilm")
        return build_system(system, kindex, encoder=encoder, llm=llm, **opts)
    if not callable(getattr(system, "run_batch", None)):
        raise TypeError(f"system: expected a system name or an object with run_batch(questions), "
                        f"got {type(system).__name__}")
    return system


def retrieve(system, kindex, query: str, k: int, name: str) -> List[Tuple[str, float, Dict[str, Any]]]:
    return retrieve_batch(system, kindex, [query], k, name)[0]


def retrieve_batch(system, kindex, queries, k: int, name: str):
    """Per query, (text, score, metadata) of its top ``k`` passages, from ONE
    ``system.run_batch`` call (the system advances the questions together)."""
    for q in queries:
        if not isinstance(q, str):
            raise TypeError(f"query: expected a str, got {type(q).__name__}")
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        raise ValueError(f"k: expected an int >= 1, got {k!r}")
    results = system.run_batch(list(queries)) if queries else []
    triples = kindex.triples_by_pid
    out = []
    for r in results:
        docs = []
        for rank, p in enumerate(r.passages[:k]):
            meta = {"pid": int(p.pid), "title": p.title, "score": float(p.score), "rank": rank,
                    "triples": [list(t) for t in triples.get(int(p.pid), [])], "system": name,
                    "answer": r.answer}
            docs.append((f"{p.title}\n{p.text}" if p.title else p.text, float(p.score), meta))
        out.append(docs)
    return out
