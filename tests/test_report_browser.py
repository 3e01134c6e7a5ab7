"""The HTML reports in a real browser: headless Chromium (Debian's package; installed here
with apt-get where it is missing and we are root) opens each page from disk, and the test
checks that it renders without console errors or exceptions, fetches nothing, runs no
script, shows the ``<script>`` passage as text, draws the expected number of graph nodes,
filters with one click, and saves a screenshot.

Skips, saying why, where Chromium cannot be installed; with RASFAST_REQUIRE_BROWSER=1 (set
by .ci/run) that is a failure instead."""
import os
import sys
from pathlib import Path

import pytest

import report_util as U
from rasfast.qa_eval.report_html import report_document, write_record_page
from rasfast.report.qgraph_svg import build_graph
from rasfast.report.record_page import step_triples

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tools"))
import headless_chromium  # noqa: E402

pytestmark = [pytest.mark.timeout(900), pytest.mark.browser]
VISIBLE_QUESTIONS = "[...document.querySelectorAll('#qs .q')].filter(e => e.getClientRects().length).length"
PNG = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def chromium():
    path, why = headless_chromium.ensure_chromium()
    if path is None:
        if os.environ.get("RASFAST_REQUIRE_BROWSER", "0") not in ("", "0"):
            pytest.fail(f"RASFAST_REQUIRE_BROWSER is set but Chromium is unavailable: {why}")
        pytest.skip(why)
    return path


def _nodes(rec) -> int:
    return len(build_graph(step_triples(rec), (rec.get("shown") or {}).get("triples")).nodes)


def _check_loaded(r, page: Path):
    assert r.errors == [], r.errors
    assert r.exceptions == []
    assert [u for u in r.requests if u != page.resolve().as_uri()] == [], "the page fetched something"
    assert r.screenshot and r.screenshot.startswith(PNG)


def test_eval_report_renders_in_chromium(chromium, tmp_path):
    run = U.run_eval(tmp_path)
    page = tmp_path / "report.html"
    page.write_text(report_document(run, run["records"], dataset=U.dataset()))
    expected_nodes = sum(_nodes(r) for recs in run["records"].values() for r in recs)
    exprs = ("document.querySelectorAll('svg.qgraph g.n').length",
             "document.querySelectorAll('svg.qgraph').length",
             "document.querySelectorAll('script').length",
             f"document.body.textContent.includes({U.SCRIPT!r})",
             "document.querySelectorAll('svg.stages g.seg').length",
             "document.querySelector('label[for=f-dr-none]').click(), " + VISIBLE_QUESTIONS,
             "document.querySelector('label[for=f-dw-none]').click(), " + VISIBLE_QUESTIONS,
             "document.querySelector('label[for=f-all]').click(), " + VISIBLE_QUESTIONS)
    r = headless_chromium.open_page(page, expressions=exprs, chromium=chromium, width=1200, height=1000)
    (tmp_path / "report.png").write_bytes(r.screenshot or b"")
    _check_loaded(r, page)
    v = [r.values[e] for e in exprs]
    assert v[0] == expected_nodes > 0
    assert v[1] == sum(1 for recs in run["records"].values() for rec in recs if _nodes(rec))
    assert v[2] == 0 and v[3] is True
    # one chart segment per (system, failure stage) that has questions: correct is EM, a reply
    # that only contains the gold is its own stage (issue 40)
    from rasfast.qa_eval.records import failure_stage
    segments = {(system, failure_stage(rec)) for system, recs in run["records"].items() for rec in recs}
    assert v[4] == len(segments) >= 4
    # the right/wrong filters count EM (issue 40): dense right and closed book wrong, the
    # reverse, then all questions
    from rasfast.qa_eval.records import is_correct
    dense = {r["qid"]: is_correct(r) for r in run["records"]["dense"]}
    none = {r["qid"]: is_correct(r) for r in run["records"]["none"]}
    dr = sum(1 for q in dense if dense[q] and not none.get(q, False))
    dw = sum(1 for q in dense if none.get(q, False) and not dense[q])
    assert v[5:] == [dr, dw, 3] and dr >= 1
    print(f"screenshot: {tmp_path / 'report.png'}")


def test_filters_hide_and_show_with_one_click(chromium, tmp_path):
    page = tmp_path / "hand.html"
    page.write_text(report_document(U.summary(U.HAND), U.HAND, dataset=U.dataset()))
    cls = "ras_43passages"
    clicks = [f"document.querySelector('label[for=f-{kind}-{cls}]').click(), "
              "[...document.querySelectorAll('#qs .q')].filter(e => e.getClientRects().length).map(e => e.id)"
              for kind in ("dr", "dw")]
    clicks.append("document.querySelector('label[for=f-all]').click(), " + VISIBLE_QUESTIONS)
    r = headless_chromium.open_page(page, expressions=tuple(clicks), chromium=chromium)
    _check_loaded(r, page)
    assert [r.values[e] for e in clicks] == [["q1"], ["q2"], 3]


def test_question_page_renders_in_chromium(chromium, tmp_path):
    run = U.run_eval(tmp_path)
    rec = run["records"]["ras"][0]
    page = write_record_page(tmp_path / "q.html", rec, system="ras", passages={p.pid: p for p in U.PASSAGES},
                             gold_pids=[0, 1])
    exprs = ("document.querySelectorAll('svg.qgraph g.n').length",
             "document.querySelectorAll('svg.qgraph g.n.answer').length",
             "document.querySelectorAll('svg.qgraph g.e').length",
             "getComputedStyle(document.querySelector('svg.qgraph g.e path')).markerEnd",
             f"document.body.textContent.includes({U.EVIL_ENTITY!r})",
             "document.querySelectorAll('img').length")
    r = headless_chromium.open_page(page, expressions=exprs, chromium=chromium, width=1100, height=1300)
    (tmp_path / "q.png").write_bytes(r.screenshot or b"")
    _check_loaded(r, page)
    g = build_graph(step_triples(rec), rec["shown"]["triples"])
    v = [r.values[e] for e in exprs]
    assert v[0] == len(g.nodes) > 0 and v[1] == 1 and v[2] == len(g.edges)
    assert v[3].startswith("url(") and "#qg-a" in v[3]      # the arrowheads resolve to the shared defs
    assert v[4] is True and v[5] == 0
    print(f"screenshot: {tmp_path / 'q.png'}")


def test_a_page_with_a_console_error_is_caught(chromium, tmp_path):
    """The checker itself: an error on a page is reported (so an empty list means something)."""
    bad = tmp_path / "bad.html"
    bad.write_text("<!DOCTYPE html><html><body><p>x</p><script>console.error('boom'); undefinedName;</script>"
                   "</body></html>")
    r = headless_chromium.open_page(bad, chromium=chromium, screenshot=False)
    assert "boom" in r.errors[0] and any("undefinedName" in e for e in r.errors)


def test_no_install_without_root_says_why(monkeypatch):
    monkeypatch.setattr(headless_chromium, "find_chromium", lambda: None)
    monkeypatch.setattr(headless_chromium.os, "geteuid", lambda: 1000)
    monkeypatch.setattr(headless_chromium.shutil, "which", lambda n: "/usr/bin/apt-get" if n == "apt-get" else None)
    path, why = headless_chromium.ensure_chromium()
    assert path is None and "needs root" in why
