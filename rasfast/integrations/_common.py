"""What both framework adapters share: resolve the system, run one query, and describe each
retrieved passage as (text, score, metadata)."""
from __future__ import annotations

from typing import Any, Dict, List, Tuple


def make_system(kindex, system, encoder, llm, opts: Dict[str, Any]):
    """``system`` is a registered name (built over ``kindex``) or a ready system object."""
    if isinstance(system, str):
        from ..systems import build_system
        if encoder is None:
            from ..pipeline.system import make_encoder
            name = kindex.encoder_name or ""
            encoder = make_encoder("hashing" if name.startswith("hashing") else "minilm")
        return build_system(system, kindex, encoder=encoder, llm=llm, **opts)
    if not callable(getattr(system, "run_batch", None)):
        raise TypeError(f"system: expected a system name or an object with run_batch(questions), "
                        f"got {type(system).__name__}")
    return system


def retrieve(system, kindex, query: str, k: int, name: str) -> List[Tuple[str, float, Dict[str, Any]]]:
    if not isinstance(query, str):
        raise TypeError(f"query: expected a str, got {type(query).__name__}")
    r = system.run_batch([query])[0]
    triples = kindex.triples_by_pid
    out = []
    for rank, p in enumerate(r.passages[:k]):
        meta = {"pid": int(p.pid), "title": p.title, "score": float(p.score), "rank": rank,
                "triples": [list(t) for t in triples.get(int(p.pid), [])], "system": name,
                "answer": r.answer}
        out.append((f"{p.title}\n{p.text}" if p.title else p.text, float(p.score), meta))
    return out
