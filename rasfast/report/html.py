"""Escaping and the page shell of the offline reports.

Every piece of text that comes from data (passages, questions, answers, prompts, replies,
entity and predicate names, system names) goes through :func:`esc` before it is placed in
the page, in element content and in attribute values alike. The page carries a
Content-Security-Policy that allows inline styles and ``data:`` images only: no script
runs and nothing is fetched, whatever a passage holds.
"""
from __future__ import annotations

import html
import re
from typing import Any, Iterable, Optional

# no scripts, no fetches: inline <style> and data: images are all a report uses
CSP = "default-src 'none'; style-src 'unsafe-inline'; img-src data:"

CSS = """
:root{--fg:#1d232a;--muted:#5d6873;--line:#d9dee3;--bg:#fff;--soft:#f4f6f8;--ok:#1a7f37;--bad:#cf222e;
--gold:#9a6700;--acc:#0969da}
*{box-sizing:border-box}
body{margin:0;font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,Helvetica,Arial,sans-serif;color:var(--fg);
background:var(--bg)}
main{max-width:1180px;margin:0 auto;padding:18px 22px 60px}
h1{font-size:21px;margin:4px 0 6px}h2{font-size:17px;margin:22px 0 8px;border-bottom:1px solid var(--line);
padding-bottom:3px}h3{font-size:15px;margin:14px 0 6px}
.muted{color:var(--muted)}.small{font-size:12px}
table{border-collapse:collapse;margin:6px 0}th,td{padding:3px 8px;border-bottom:1px solid var(--line);
text-align:left;vertical-align:top}th{background:var(--soft);font-weight:600}td.num,th.num{text-align:right;
font-variant-numeric:tabular-nums}
pre{white-space:pre-wrap;word-break:break-word;background:var(--soft);padding:8px;border-radius:4px;margin:4px 0;
font:12px/1.4 ui-monospace,SFMono-Regular,Menlo,Consolas,monospace;max-height:420px;overflow:auto}
details{margin:4px 0}summary{cursor:pointer}
.ok{color:var(--ok)}.bad{color:var(--bad)}.unknown{color:var(--muted)}
.tag{display:inline-block;padding:0 6px;border-radius:9px;font-size:12px;border:1px solid var(--line);
background:var(--soft);margin-right:4px;white-space:nowrap}
.tag.gold{border-color:#d4a72c;background:#fff8c5;color:var(--gold)}
.tag.shown{border-color:#54aeff;background:#ddf4ff;color:#0550ae}
.tag.ok{border-color:#4ac26b;background:#dafbe1}.tag.bad{border-color:#ff8182;background:#ffebe9}
.stage-correct{color:var(--ok)}.stage-not_retrieved,.stage-retrieved_not_shown,.stage-shown_misread{color:var(--bad)}
.answer{font-size:16px;font-weight:600}
.step{border-left:4px solid var(--line);padding:2px 0 2px 10px;margin:10px 0}
.triples{margin:4px 0;padding-left:18px}.triples li{margin:1px 0}
.triples i{color:var(--muted)}
.psg{border:1px solid var(--line);border-radius:4px;padding:6px 8px;margin:6px 0}
.psg.isgold{border-color:#d4a72c;background:#fffdf0}
.psg .text{margin-top:3px;white-space:pre-wrap}
figure{margin:8px 0}figcaption{font-size:12px;color:var(--muted)}
svg text{font-family:system-ui,-apple-system,"Segoe UI",Roboto,Helvetica,Arial,sans-serif}
svg.qgraph{border:1px solid var(--line);border-radius:4px;background:#fcfcfd;max-width:100%;height:auto}
.legend span{margin-right:12px;white-space:nowrap}.swatch{display:inline-block;width:11px;height:11px;
border-radius:2px;vertical-align:-1px;margin-right:4px}
.bar{display:inline-block;height:10px;background:var(--acc);border-radius:2px;vertical-align:middle}
.rec{margin:6px 0 16px}
table.ranked td:first-child,table.ranked td:last-child,table.ranked th:first-child,table.ranked th:last-child{
text-align:right;font-variant-numeric:tabular-nums}
.q{border:1px solid var(--line);border-radius:5px;margin:6px 0;padding:2px 8px}
.q>summary{padding:4px 0}.q .sys{margin-left:14px}
.flt{position:absolute;opacity:0;pointer-events:none}
.filters label{display:inline-block;margin:2px 4px 2px 0;padding:2px 8px;border:1px solid var(--line);
border-radius:12px;cursor:pointer;background:var(--soft);font-size:12.5px}
td label{cursor:pointer;color:var(--acc);text-decoration:underline}
table.results td:nth-child(5){white-space:nowrap}
.note{background:#fff8c5;border:1px solid #d4a72c;border-radius:4px;padding:6px 10px;margin:8px 0}
"""


def esc(x: Any) -> str:
    """``x`` as text safe inside an element and inside a quoted attribute (None: empty)."""
    return "" if x is None else html.escape(str(x), quote=True)


_ID_UNSAFE = re.compile(r"[^A-Za-z0-9_-]")


def slug(x: Any) -> str:
    """A fragment of an id or class name from any text: letters, digits, _ and - only
    (each other character becomes _ followed by its code point, so different names stay
    different: ``ras+passages`` -> ``ras_43passages``)."""
    return _ID_UNSAFE.sub(lambda m: f"_{ord(m.group())}", str(x))


def document(title: str, body: str, *, extra_css: str = "") -> str:
    """A complete, self-contained HTML page."""
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            f"<meta http-equiv=\"Content-Security-Policy\" content=\"{esc(CSP)}\">"
            "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">"
            f"<title>{esc(title)}</title><style>{CSS}{extra_css}</style></head>\n"
            f"<body><main>\n{body}\n</main></body></html>\n")


def fmt(x: Optional[float], spec: str = ".3f", none: str = "–") -> str:
    return none if x is None else format(x, spec)


def table(head: Iterable[str], rows: Iterable[Iterable[str]], num_from: int = 1, cls: str = "") -> str:
    """A table whose cells are already HTML (escape data before); columns from ``num_from``
    on are right-aligned numbers."""
    h = "".join(f"<th class=\"num\">{c}</th>" if i >= num_from else f"<th>{c}</th>" for i, c in enumerate(head))
    body = "".join("<tr>" + "".join(f"<td class=\"num\">{c}</td>" if i >= num_from else f"<td>{c}</td>"
                                    for i, c in enumerate(r)) + "</tr>" for r in rows)
    return f"<table class=\"{esc(cls)}\"><thead><tr>{h}</tr></thead><tbody>{body}</tbody></table>"


def truncate(s: str, n: int) -> str:
    s = " ".join(str(s).split())
    return s if len(s) <= n else s[: max(1, n - 1)] + "…"


__all__ = ["esc", "slug", "document", "fmt", "table", "truncate", "CSS", "CSP"]
