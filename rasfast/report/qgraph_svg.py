"""The question graph of one run as inline SVG: entities as nodes, predicates as labelled
edges, each coloured by the step that first found it; the answer's node ringed, gold
answers' nodes marked.

Layout: networkx's spring layout (Fruchterman-Reingold, seeded, so a page is the same on
every build), then the connected components packed in rows. networkx is pure Python and
comes with torch, so the report needs no system binary (Graphviz's ``dot`` would) and works
wherever rasfast does. The SVG is written here rather than by matplotlib: a 40-triple,
48-entity graph of a real MuSiQue run is 10 KB here, 76 KB from matplotlib with text as text
and 206 KB with its default glyph outlines (a 100-question, 6-system report holds about 300
graphs); it is also styled by the page's CSS, and every label goes through the page's
escaping.
"""
from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Sequence, Tuple

from .html import esc, truncate

# step colours (Tableau 10); the reader-only triples are grey
PALETTE = ("#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#76b7b2", "#edc948", "#b07aa1", "#ff9da7",
           "#9c755f", "#bab0ac")
READER_COLOUR = "#8c959f"
MAX_EDGES = 40          # a graph beyond this shows its first MAX_EDGES triples (and says so): more is unreadable
LABEL_CHARS = 24        # node label length before "…" (the full name is the node's tooltip)
WIDTH = 980             # px: the page's content width
PRED_CHARS = 22


def step_colour(step: int) -> str:
    return READER_COLOUR if step < 0 else PALETTE[step % len(PALETTE)]


@functools.lru_cache(maxsize=1 << 16)   # a report keys the same entities across its systems
def _key(s: str) -> str:
    from ..systems.ras.qgraph import normalize_entity
    return normalize_entity(s)


@dataclass
class QGraph:
    """Nodes (entity key -> label, first step) and edges (subject key, predicate, object key,
    first step, shown to the reader or None if unknown), before layout."""
    nodes: Dict[str, Tuple[str, int]] = field(default_factory=dict)
    edges: List[Tuple[str, str, str, int, Optional[bool]]] = field(default_factory=list)
    dropped: int = 0      # triples beyond MAX_EDGES


def _triple(t) -> Optional[Tuple[str, str, str]]:
    if not isinstance(t, (list, tuple)) or len(t) < 3:
        return None
    s, p, o = (str(x) for x in t[:3])
    return (s, p, o) if _key(s) and _key(o) else None


def build_graph(step_triples: Sequence[Sequence], shown_triples: Optional[Sequence] = None,
                max_edges: int = MAX_EDGES) -> QGraph:
    """The graph of a run: ``step_triples[i]`` are step i's triples (its extracted triples
    and its expansion chains' triples), ``shown_triples`` those the reader was shown (None:
    unknown). A triple is drawn once, in the colour of the first step that has it; a shown
    triple no step has is drawn in grey."""
    g = QGraph()
    shown = None if shown_triples is None else {tuple(_key(x) for x in t) for t in map(_triple, shown_triples) if t}
    seen = set()
    todo = [(i, t) for i, ts in enumerate(step_triples) for t in ts] + [(-1, t) for t in (shown_triples or [])]
    for step, raw in todo:
        t = _triple(raw)
        if t is None:
            continue
        ks, kp, ko = (_key(x) for x in t)
        if (ks, kp, ko) in seen:
            continue
        if len(g.edges) >= max_edges:
            g.dropped += 1
            seen.add((ks, kp, ko))
            continue
        seen.add((ks, kp, ko))
        for k, label in ((ks, t[0]), (ko, t[2])):
            if k not in g.nodes:
                g.nodes[k] = (label, step)
        g.edges.append((ks, t[1], ko, step, None if shown is None else (ks, kp, ko) in shown))
    return g


UNIT = 80          # px per sqrt(node) of a component's box
LABEL_ROOM = 150   # px right of a box for the labels of its rightmost nodes


def layout(g: QGraph, width: float, pad: float = 24) -> Tuple[Dict[str, Tuple[float, float]], float]:
    """(node positions, height needed) for a canvas ``width`` wide. networkx's spring layout
    (seeded) places the whole graph once; then each connected component is scaled into a box
    that grows with the square root of its size, and the boxes are packed in rows, largest
    first: a question graph is usually a few chains and many pairs, which one layout alone
    squeezes together. (One layout call per graph: a call per component costs ten times more
    for the same picture.)"""
    import networkx as nx
    G = nx.Graph()
    G.add_nodes_from(g.nodes)
    G.add_edges_from((s, o) for s, _, o, _, _ in g.edges if s != o)
    comps = sorted((sorted(c) for c in nx.connected_components(G)), key=lambda c: (-len(c), c[0]))
    big = [k for c in comps if len(c) > 2 for k in c]
    raw = nx.spring_layout(G.subgraph(big), seed=7, iterations=60) if big else {}
    pos: Dict[str, Tuple[float, float]] = {}
    x, y, row_h = pad, pad, 0.0
    for comp in comps:
        n = len(comp)
        side = min(UNIT * math.sqrt(n), width - LABEL_ROOM - 2 * pad) if n > 2 else (UNIT * 0.7 if n == 2 else 0.0)
        box_w, box_h = side + LABEL_ROOM, side + 22
        if x + box_w > width and x > pad:        # a new row
            x, y, row_h = pad, y + row_h, 0.0
        if n == 1:
            local = {comp[0]: (0.5, 0.5)}
        elif n == 2:
            local = {comp[0]: (0.0, 0.0), comp[1]: (1.0, 1.0)}
        else:
            xs, ys = [raw[k][0] for k in comp], [raw[k][1] for k in comp]
            dx, dy = (max(xs) - min(xs)) or 1.0, (max(ys) - min(ys)) or 1.0
            local = {k: ((raw[k][0] - min(xs)) / dx, (raw[k][1] - min(ys)) / dy) for k in comp}
        for k, (u, v) in local.items():
            pos[k] = (x + u * side, y + 8 + v * side)
        x += box_w
        row_h = max(row_h, box_h)
    return pos, y + row_h + pad


def _marker_id(step: int) -> str:
    return "qg-ar" if step < 0 else f"qg-a{step % len(PALETTE)}"


def shared_defs() -> str:
    """The arrowheads every graph of a page uses, defined once (ids are page-wide)."""
    colours = [(_marker_id(i), c) for i, c in enumerate(PALETTE)] + [(_marker_id(-1), READER_COLOUR)]
    marks = "".join(f"<marker id=\"{m}\" viewBox=\"0 0 10 10\" refX=\"17\" refY=\"5\" markerWidth=\"7\" "
                    f"markerHeight=\"7\" orient=\"auto\"><path d=\"M0,0L10,5L0,10z\" fill=\"{c}\"/></marker>"
                    for m, c in colours)
    return (f"<svg class=\"qg-defs\" width=\"0\" height=\"0\" aria-hidden=\"true\" "
            f"style=\"position:absolute\"><defs>{marks}</defs></svg>")


def css() -> str:
    """The graphs' styles: one rule per step colour instead of attributes on every element."""
    rules = ["svg.qgraph .e path{fill:none;stroke-width:1.6}svg.qgraph .e.ns path{stroke-dasharray:4 3}"
             "svg.qgraph .e text{font-size:9.5px;fill:#57606a;text-anchor:middle;font-style:italic}"
             "svg.qgraph .n text{font-size:11px}svg.qgraph .n circle{stroke:#fff;stroke-width:1.5}"
             "svg.qgraph .n.answer text,svg.qgraph .n.gold text{font-weight:700}"
             "svg.qgraph .ring-a{fill:#fff3b0;stroke:#bf8700;stroke-width:3}"
             "svg.qgraph .ring-g{fill:none;stroke:#1a7f37;stroke-width:2;stroke-dasharray:3 2}"]
    for i, c in enumerate(list(PALETTE) + [READER_COLOUR]):
        k = "r" if i == len(PALETTE) else str(i)
        m = _marker_id(-1 if k == "r" else i)
        rules.append(f"svg.qgraph .s{k} circle{{fill:{c}}}svg.qgraph .e.s{k} path{{stroke:{c};marker-end:url(#{m})}}")
    return "".join(rules)


def _cls(step: int) -> str:
    return "sr" if step < 0 else f"s{step % len(PALETTE)}"


def render_svg(g: QGraph, *, answer: Optional[str] = None, golds: Sequence[str] = (),
               title: str = "question graph") -> str:
    """The graph as an ``<svg class="qgraph">`` element (one ``<g class="n">`` per entity,
    one ``<g class="e">`` per triple). Styles come from :func:`css` and the arrowheads from
    :func:`shared_defs`, which the page holds once; labels cut to length carry the full
    text as a tooltip."""
    from ..metrics import normalize_answer
    if not g.nodes:
        return "<p class=\"muted\">No triples: nothing to draw.</p>"
    width = WIDTH
    pos, h = layout(g, width)
    height = int(max(120, h))
    ans = normalize_answer(answer or "")
    gold = {normalize_answer(x) for x in golds if normalize_answer(x)}
    parts = [f"<svg class=\"qgraph\" xmlns=\"http://www.w3.org/2000/svg\" viewBox=\"0 0 {width} {height}\" "
             f"width=\"{width}\" height=\"{height}\" role=\"img\" aria-label=\"{esc(title)}\">"]
    # parallel edges between one pair bend apart
    pair_count: Dict[Tuple[str, str], int] = {}
    for s, _, o, _, _ in g.edges:
        key = (min(s, o), max(s, o))
        pair_count[key] = pair_count.get(key, 0) + 1
    pair_seen: Dict[Tuple[str, str], int] = {}
    for s, p, o, step, shown in g.edges:
        (x1, y1), (x2, y2) = pos[s], pos[o]
        key = (min(s, o), max(s, o))
        i = pair_seen.get(key, 0)
        pair_seen[key] = i + 1
        if s == o:
            d = f"M{x1:.0f} {y1:.0f}C{x1 + 34:.0f} {y1 - 46:.0f} {x1 - 34:.0f} {y1 - 46:.0f} {x1:.0f} {y1:.0f}"
            lx, ly = x1, y1 - 38
        else:
            off = (i - (pair_count[key] - 1) / 2) * 26
            dx, dy = x2 - x1, y2 - y1
            ln = math.hypot(dx, dy) or 1.0
            mx, my = (x1 + x2) / 2 - dy / ln * off, (y1 + y2) / 2 + dx / ln * off
            d = f"M{x1:.0f} {y1:.0f}Q{mx:.0f} {my:.0f} {x2:.0f} {y2:.0f}"
            lx, ly = 0.25 * x1 + 0.5 * mx + 0.25 * x2, 0.25 * y1 + 0.5 * my + 0.25 * y2
        short = truncate(p, PRED_CHARS)
        tip = f"<title>{esc(p)}</title>" if short != " ".join(str(p).split()) else ""
        cls = f"e {_cls(step)}" + (" ns" if shown is False else "")
        parts.append(f"<g class=\"{cls}\">{tip}<path d=\"{d}\"/>"
                     f"<text x=\"{lx:.0f}\" y=\"{ly - 2:.0f}\">{esc(short)}</text></g>")
    for k, (label, step) in g.nodes.items():
        x, y = pos[k]
        norm = normalize_answer(label)
        is_ans = bool(ans) and norm == ans
        is_gold = bool(norm) and norm in gold
        cls = f"n {_cls(step)}" + (" answer" if is_ans else "") + (" gold" if is_gold else "")
        ring = (f"<circle class=\"ring-g\" cx=\"{x:.0f}\" cy=\"{y:.0f}\" r=\"14\"/>" if is_gold else "") + \
               (f"<circle class=\"ring-a\" cx=\"{x:.0f}\" cy=\"{y:.0f}\" r=\"11\"/>" if is_ans else "")
        short = truncate(label, LABEL_CHARS)
        tip = f"<title>{esc(label)}</title>" if short != " ".join(str(label).split()) else ""
        parts.append(f"<g class=\"{cls}\">{tip}{ring}<circle cx=\"{x:.0f}\" cy=\"{y:.0f}\" r=\"6\"/>"
                     f"<text x=\"{x + 9:.0f}\" y=\"{y + 4:.0f}\">{esc(short)}</text></g>")
    parts.append("</svg>")
    return "".join(parts)


def legend(g: QGraph, answer_found: bool) -> str:
    steps = sorted({e[3] for e in g.edges})
    items = [f"<span><i class=\"swatch\" style=\"background:{step_colour(s)}\"></i>"
             + ("shown to the reader only" if s < 0 else f"step {s + 1}") + "</span>" for s in steps]
    items.append("<span>◉ ringed: the answer" + ("" if answer_found else " (not in the graph)") + "</span>")
    items.append("<span>dashed ring: a gold answer; dashed edge: not shown to the reader</span>")
    more = f" — {g.dropped} more triples not drawn" if g.dropped else ""
    return (f"<figcaption class=\"legend\">{len(g.nodes)} entities, {len(g.edges)} triples{more}. "
            + "".join(items) + "</figcaption>")


def question_graph_figure(step_triples: Sequence[Sequence], shown_triples: Optional[Sequence], *,
                          answer: Optional[str] = None, golds: Sequence[str] = ()) -> str:
    """The graph as a ``<figure>``: the SVG and its legend."""
    from ..metrics import normalize_answer
    g = build_graph(step_triples, shown_triples)
    svg = render_svg(g, answer=answer, golds=golds)
    if not g.nodes:
        return f"<figure>{svg}</figure>"
    ans = normalize_answer(answer or "")
    found = bool(ans) and any(normalize_answer(lbl) == ans for lbl, _ in g.nodes.values())
    return f"<figure>{svg}{legend(g, found)}</figure>"


__all__ = ["build_graph", "layout", "render_svg", "question_graph_figure", "QGraph", "PALETTE", "MAX_EDGES",
           "step_colour", "shared_defs", "css"]
