"""Small charts of the reports, as inline SVG or plain HTML: where each system lost its
questions (stacked bars), and per-stage timings (bars)."""
from __future__ import annotations

from typing import Dict, Mapping, Sequence, Tuple

from .html import esc, fmt

# failure stage -> colour (pipeline order: lost early is darker red, correct is green)
STAGE_COLOURS = {"not_retrieved": "#cf222e", "retrieved_not_shown": "#fb8f44", "shown_misread": "#d4a72c",
                 "contains_gold": "#8fc96b",
                 "correct": "#2da44e", "unknown": "#afb8c1"}


def stage_bars(rows: Sequence[Tuple[str, Mapping[str, int]]], stages: Sequence[str],
               labels: Mapping[str, str]) -> str:
    """One horizontal bar per system, split by failure stage in pipeline order, each part
    labelled with its count (and a tooltip), and a legend."""
    bar_w, left, row_h = 640, 150, 26
    height = row_h * len(rows) + 34
    out = [f"<svg class=\"stages\" xmlns=\"http://www.w3.org/2000/svg\" viewBox=\"0 0 {left + bar_w + 20} {height}\" "
           f"width=\"{left + bar_w + 20}\" height=\"{height}\" role=\"img\" aria-label=\"where questions were lost\">"]
    for i, (system, counts) in enumerate(rows):
        y = 6 + i * row_h
        total = sum(counts.get(s, 0) for s in stages) or 1
        out.append(f"<text x=\"{left - 8}\" y=\"{y + 14}\" text-anchor=\"end\" font-size=\"12\">{esc(system)}</text>")
        x = float(left)
        for s in stages:
            c = counts.get(s, 0)
            if not c:
                continue
            w = bar_w * c / total
            tip = f"{system}: {labels.get(s, s)}: {c} of {total} ({100 * c / total:.0f}%)"
            out.append(f"<g class=\"seg {esc(s)}\"><title>{esc(tip)}</title><rect x=\"{x:.1f}\" y=\"{y}\" "
                       f"width=\"{w:.1f}\" height=\"{row_h - 6}\" fill=\"{STAGE_COLOURS.get(s, '#999')}\"/>"
                       + (f"<text x=\"{x + w / 2:.1f}\" y=\"{y + 14}\" text-anchor=\"middle\" font-size=\"11\" "
                          f"fill=\"#fff\">{c}</text>" if w >= 18 else "") + "</g>")
            x += w
    ly = 6 + len(rows) * row_h + 10
    x = float(left)
    for s in stages:
        out.append(f"<rect x=\"{x:.0f}\" y=\"{ly}\" width=\"11\" height=\"11\" fill=\"{STAGE_COLOURS.get(s, '#999')}\"/>"
                   f"<text x=\"{x + 15:.0f}\" y=\"{ly + 10}\" font-size=\"11\">{esc(labels.get(s, s))}</text>")
        x += 22 + 6.2 * len(labels.get(s, s))
    out.append("</svg>")
    return "".join(out)


def timing_bars(timings: Mapping[str, float]) -> str:
    """Per-stage milliseconds as a table with proportional bars (largest first)."""
    items = sorted(((str(k), float(v)) for k, v in timings.items() if v is not None), key=lambda kv: -kv[1])
    if not items:
        return "<p class=\"muted\">No timings recorded.</p>"
    top = max(v for _, v in items) or 1.0
    rows = "".join(f"<tr><td>{esc(k)}</td><td class=\"num\">{fmt(v, ',.1f')}</td>"
                   f"<td><span class=\"bar\" style=\"width:{max(1, int(260 * v / top))}px\"></span></td></tr>"
                   for k, v in items)
    return f"<table class=\"timings\"><thead><tr><th>stage</th><th class=\"num\">ms</th><th></th></tr></thead>" \
           f"<tbody>{rows}</tbody></table>"


def counts_line(counts: Dict[str, int], stages: Sequence[str], labels: Mapping[str, str]) -> str:
    return ", ".join(f"{labels.get(s, s)} {counts.get(s, 0)}" for s in stages if counts.get(s, 0))


__all__ = ["stage_bars", "timing_bars", "counts_line", "STAGE_COLOURS"]
