"""Pure-Python triple-graph builder: the oracle that the C++ build (rasfast.graph) is tested against.

Written for obviousness, not speed (dicts and sets, one triple at a time). It defines the
rules that rasfast.graph.TripleGraph documents:

- A triple is well-formed when it is a list or tuple of exactly three ``str`` parts, each
  with at least one non-white-space character. Anything else (None, NaN, 2 or 4 parts,
  non-strings, blank parts) is skipped and counted.
- Entities are the subject and the object. :func:`normalize_entity` case-folds, collapses
  white space, and strips surrounding punctuation; ``normalize=False`` keeps strings as is.
- Entity ids follow first appearance (subject, then object, of each kept triple in order).
- Two kept triples are neighbours when they share an entity; an entity mentioned by more than
  ``max_degree`` triples (its degree) links none of them. Neighbour lists are sorted, unique,
  and never contain the triple itself.
"""
from __future__ import annotations

import unicodedata
from typing import Dict, List, Optional, Sequence


def is_strip_char(c: str) -> bool:
    """White space (str.isspace) or punctuation (Unicode category P*): stripped from the ends."""
    return c.isspace() or unicodedata.category(c).startswith("P")


def normalize_entity(s: str) -> str:
    """Case-fold, trim and collapse white space to single spaces, strip surrounding punctuation.

    A string that is punctuation only keeps its punctuation (so it never becomes empty):
    "..." stays "...", but " Foo, Inc. " becomes "foo, inc".
    """
    s = " ".join(s.casefold().split())
    i, j = 0, len(s)
    while i < j and is_strip_char(s[i]):
        i += 1
    while j > i and is_strip_char(s[j - 1]):
        j -= 1
    return s[i:j] if i < j else s


def is_well_formed(t) -> bool:
    return (isinstance(t, (list, tuple)) and len(t) == 3
            and all(isinstance(x, str) and x.strip() != "" for x in t))


def build_triple_graph(triples: Sequence, normalize: bool = True,
                       max_degree: Optional[int] = None) -> Dict[str, object]:
    """Returns plain lists: kept (input positions), head, tail, entities, entity_degree,
    neighbors (one sorted list per kept triple), n_skipped."""
    kept: List[int] = []
    head: List[int] = []
    tail: List[int] = []
    ids: Dict[str, int] = {}
    entities: List[str] = []

    def entity_id(s: str) -> int:
        key = normalize_entity(s) if normalize else s
        if key not in ids:
            ids[key] = len(entities)
            entities.append(key)
        return ids[key]

    for pos, t in enumerate(triples):
        if not is_well_formed(t):
            continue
        kept.append(pos)
        head.append(entity_id(t[0]))
        tail.append(entity_id(t[2]))

    degree, neighbors = triple_adjacency(head, tail, len(entities), max_degree)
    return {"kept": kept, "head": head, "tail": tail, "entities": entities,
            "entity_degree": degree, "neighbors": neighbors,
            "n_skipped": len(triples) - len(kept)}


def triple_adjacency(head: Sequence[int], tail: Sequence[int], num_entities: int,
                     max_degree: Optional[int] = None):
    """The numeric half of the build: entity ids per triple -> ``(entity_degree, neighbors)``
    (one sorted list per triple), by the rules above."""
    members: List[List[int]] = [[] for _ in range(num_entities)]   # entity -> triples mentioning it
    for i, (h, t) in enumerate(zip(head, tail)):
        for e in {h, t}:
            members[e].append(i)
    degree = [len(m) for m in members]
    neighbors: List[List[int]] = []
    for i, (h, t) in enumerate(zip(head, tail)):
        nb = set()
        for e in {h, t}:
            if max_degree is None or degree[e] <= max_degree:
                nb.update(members[e])
        nb.discard(i)
        neighbors.append(sorted(nb))
    return degree, neighbors
