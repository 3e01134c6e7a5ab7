"""The offline HTML reports (rasfast.report, rasfast.qa_eval.report_html): well-formed by a
strict parser, every data text escaped (a passage holding ``<script>`` is text), nothing
external, the question graph's nodes and highlight, the one-click filters, old records
shown as unknown, and the ``eval qa --html`` / ``ask --html`` command lines."""
import json
import re
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

import report_util as U
from rasfast.qa_eval.report_html import record_page, report_document, write_report
from rasfast.qa_eval.tables import paired_against, summarise
from rasfast.report.qgraph_svg import build_graph, question_graph_figure, render_svg
from rasfast.report.record_page import step_triples

pytestmark = pytest.mark.timeout(300)
REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    return U.run_eval(tmp_path_factory.mktemp("eval"))


@pytest.fixture(scope="module")
def page(run):
    return report_document(run, run["records"], dataset=U.dataset())


def test_report_is_well_formed(page):
    c = U.StrictChecker().check(page)
    assert c.errors == []
    assert page.startswith("<!DOCTYPE html>") and c.tags[:1] == ["html"]
    svgs = re.findall(r"<svg class=\"qgraph\".*?</svg>", page, re.S)
    assert svgs, "no question graph drawn"
    for s in svgs:   # every graph is well-formed XML as well
        ET.fromstring(s.replace("&nbsp;", " "))


def test_every_data_text_is_escaped(page, run):
    c = U.StrictChecker().check(page)
    assert "script" not in c.tags and "img" not in c.tags
    assert U.SCRIPT not in page and U.EVIL_ENTITY not in page and "<b>Elden</b>" not in page
    assert "&lt;script&gt;alert(&#x27;passage&#x27;)&lt;/script&gt;" in page   # the passage, as text
    text = "".join(c.text)
    assert U.SCRIPT in text and U.EVIL_ENTITY in text and "Port <b>Elden</b>" in text
    # the reader's reply with markup, the prompts holding the passage: text as well
    assert any(U.SCRIPT in (r.get("reply") or "") for r in run["records"]["dense"])


def test_nothing_external(page):
    assert "<script" not in page and "<link" not in page and "@import" not in page
    assert re.findall(r"<[a-zA-Z][^>]*\ssrc\s*=", page) == []   # no element loads anything
    assert all(h.startswith("#") for h in re.findall(r"href=\"([^\"]*)\"", page))
    assert set(re.findall(r"https?://[^\s\"'<>)]+", page)) <= {"http://www.w3.org/2000/svg"}
    assert set(re.findall(r"url\(([^)]*)\)", page)) <= {f"#qg-a{i}" for i in range(10)} | {"#qg-ar"}
    assert "Content-Security-Policy" in page and "default-src &#x27;none&#x27;" in page


def test_graph_nodes_edges_colours_and_answer():
    steps = [[["Velora Studios", "founded by", "Mira Okonkwo"]],
             [["Mira Okonkwo", "born in", "the City of Castrell"], ["velora studios", "founded by", "Mira Okonkwo."]]]
    shown = [["Mira Okonkwo", "born in", "the City of Castrell"], ["the city of Castrell", "on", "Aun"]]
    g = build_graph(steps, shown)
    assert len(g.nodes) == 4 and len(g.edges) == 3          # the case-/punctuation-variant triple is one
    assert [e[3] for e in g.edges] == [0, 1, -1]             # first step that found it; -1: reader only
    assert [e[4] for e in g.edges] == [False, True, True]    # shown to the reader
    svg = render_svg(g, answer="City of Castrell", golds=["Castrell", "Aun"])
    assert svg.count("<g class=\"n ") == 4 and svg.count("<g class=\"e ") == 3
    assert len(re.findall(r"<g class=\"n [^\"]*\banswer\b", svg)) == 1
    assert len(re.findall(r"<g class=\"n [^\"]*\bgold\b", svg)) == 1       # Aun
    assert "class=\"e s0 ns\"" in svg and "class=\"e s1\"" in svg and "class=\"e sr\"" in svg
    assert render_svg(g, answer="x") == render_svg(build_graph(steps, shown), answer="x")   # seeded layout
    big = build_graph([[[f"e{i}", "p", f"e{i + 1}"] for i in range(100)]], None, max_edges=40)
    assert len(big.edges) == 40 and big.dropped == 60 and all(e[4] is None for e in big.edges)
    assert "60 more triples not drawn" in question_graph_figure([[[f"e{i}", "p", f"e{i + 1}"] for i in range(100)]], None)
    assert "nothing to draw" in question_graph_figure([[]], [])


def test_right_wrong_filters_are_one_click_css():
    page = report_document(U.summary(U.HAND), U.HAND, dataset=U.dataset())
    assert U.StrictChecker().check(page).errors == []
    cls = "ras_43passages"          # "ras+passages" made safe for a class name
    blocks = dict(re.findall(r"<details class=\"(q[^\"]*)\" id=\"(q\d)\"", page)[i][::-1] for i in range(3))
    assert blocks == {"q1": f"q dr-{cls}", "q2": f"q dw-{cls}", "q3": "q"}
    assert f"#f-dr-{cls}:checked~#qs .q:not(.dr-{cls}){{display:none}}" in page
    assert f"<label for=\"f-dr-{cls}\">dense right, ras+passages wrong (1)</label>" in page
    assert f"<label for=\"f-dw-{cls}\" title=\"show only these questions\">1</label>" in page   # in the table
    # the radios are siblings before the filter bar and the question list (what the CSS needs)
    assert page.index(f"id=\"f-dr-{cls}\"") < page.index("class=\"filters\"") < page.index("<div id=\"qs\">")


def test_failure_stage_chart_counts(run, page):
    assert "<svg class=\"stages\"" in page
    assert re.search(r"<title>none: not retrieved: 3 of 3 \(100%\)</title>", page)
    # correct is EM; the stand-in's reply "Elden Fair <script>..." contains the gold, its own stage
    assert re.search(r"<title>dense: correct \(EM\): 2 of 3 \(67%\)</title>", page)
    assert re.search(r"<title>dense: answer contains the gold \(not EM\): 1 of 3 \(33%\)</title>", page)


def test_old_records_are_shown_as_unknown():
    old = {"qid": "q1", "answer": "Lilu", "gold": ["a spirit"], "em": 0.0, "f1": 0.0, "acc": 0.0,
           "passages": [0, 1], "llm_calls": 1, "seconds": 1.0}
    page = record_page(old, system="dense", passages={p.pid: p for p in U.PASSAGES})
    assert U.StrictChecker().check(page).errors == []
    assert page.count("unknown (not in this record)") >= 5      # graph, steps, shown, calls, timings, ...
    assert "lost at: <b class=\"stage-unknown\">unknown</b>" in page
    report = report_document(U.summary({"dense": [old]}), {"dense": [old]}, dataset=U.dataset())
    assert U.StrictChecker().check(report).errors == [] and "unknown (not in this record)" in report


def test_report_without_its_corpus_says_so(tmp_path, run):
    out = dict(run, dataset="no-such-dataset")
    p = write_report(tmp_path / "r.html", out, run["records"])
    page = p.read_text()
    assert U.StrictChecker().check(page).errors == []
    assert "could not be loaded" in page and "text not available" in page


def test_record_page_of_one_run(run):
    rec = run["records"]["ras"][0]
    page = record_page(rec, system="ras", passages={p.pid: p for p in U.PASSAGES}, gold_pids=[0, 1])
    c = U.StrictChecker().check(page)
    assert c.errors == []
    g = build_graph(step_triples(rec), rec["shown"]["triples"])
    assert page.count("<g class=\"n ") == len(g.nodes) > 0
    assert len(re.findall(r"<g class=\"n [^\"]*\banswer\b", page)) == 1      # "Castrell" is an entity
    assert page.count("<details><summary>call ") == len(rec["calls"]) == rec["llm_calls"]
    assert "Step 2" in page and "isgold" in page and "Timings" in page


def _cache_records(cache, ds, system, label, recs):
    from rasfast.qa_eval.run import cache_file, settings_for
    from rasfast.qa_eval.systems import knowledge_id
    from rasfast.systems.gear.agent import MAX_ITERS
    st = settings_for(system, k=5, max_iters=5, reader="contract", prompt_style="compact", retriever="dense",
                      gear_iters=MAX_ITERS.get(ds.name, 4), kirag_aligner=None, router=None, n_ctx=4096,
                      knowledge=knowledge_id(ds))
    cache.mkdir(parents=True, exist_ok=True)
    with open(cache / cache_file(ds.name, system, label, st), "w") as f:
        for r in recs:
            f.write(json.dumps(r) + "\n")


@pytest.mark.data
def test_cli_eval_qa_report_html_from_the_cache(tmp_path, data_dir):
    """`rasfast eval qa --report --html` reads the cache (no model) and writes the page with
    the corpus's passage texts and gold passages."""
    from rasfast.cli import main
    from rasfast.data.qa import load_dataset
    from rasfast.qa_eval.run import llm_label
    ds = load_dataset("musique", data_dir)
    qs = ds.questions[:2]
    for name in ("dense", "ras"):
        recs = [dict(U.hand(q.qid, q.answer if name == "dense" else "wrong", q.answer, 1.0 if name == "dense" else 0.0),
                     question=q.question, gold=q.answers,
                     steps=[{"query": q.question, "passages": [[p, 0.5] for p in q.gold_pids]}],
                     passages=list(q.gold_pids)) for q in qs]
        _cache_records(tmp_path / "cache", ds, name, llm_label("local"), recs)
    html = tmp_path / "report.html"
    rc = main(["eval", "qa", "--report", "--dataset", "musique", "--systems", "dense,ras", "--llm", "local",
               "--limit", "2", "--cache-dir", str(tmp_path / "cache"), "--data-root", str(data_dir),
               "--html", str(html)])
    assert rc == 0 and html.is_file()
    page = html.read_text()
    assert U.StrictChecker().check(page).errors == []
    assert qs[0].question in page and "dense right, ras wrong (2)" in page
    gold = ds.passages[qs[0].gold_pids[0]]
    assert f"id=\"q1-p{gold.pid}\"" in page and "psg isgold" in page


# -- rasfast ask --html ---------------------------------------------------------------------------
@pytest.fixture(scope="module")
def tiny_index(tmp_path_factory):
    from rasfast.encode import make_encoder
    from rasfast.index.knowledge import KnowledgeIndex
    from rasfast.index.knowledge.extract import corpus_record
    d = tmp_path_factory.mktemp("ki") / "index"
    KnowledgeIndex.build(U.PASSAGES, U.TRIPLES, make_encoder("hashing"), corpus_record("demo"), num_themes=2).save(d)
    return d


def test_ask_html_writes_the_page(tiny_index, tmp_path, monkeypatch, capsys):
    from rasfast.cli import main
    from rasfast.llm import adapters
    monkeypatch.setattr(adapters, "make_llm", lambda *a, **k: U.llm())
    out = tmp_path / "q.html"
    rc = main(["ask", "--index", str(tiny_index), "--system", "ras", "--encoder", "hashing", "--llm", "local",
               "--html", str(out), "In which city was the founder of Velora Studios born?"])
    assert rc == 0
    page = out.read_text()
    assert U.StrictChecker().check(page).errors == []
    assert "Answer: Castrell" in page and page.count("<g class=\"n ") >= 3 and "<details><summary>call 1" in page
    assert U.SCRIPT not in page
    assert f"HTML: {out}" in capsys.readouterr().out


def test_ask_html_without_a_model_draws_the_model_free_baseline(tiny_index, tmp_path, capsys):
    """The issue's command: `rasfast ask --index DIR --system ras --html q.html "..."` (no --llm)."""
    from rasfast.cli import main
    out = tmp_path / "q.html"
    assert main(["ask", "--index", str(tiny_index), "--system", "ras", "--encoder", "hashing", "--html", str(out),
                 "In which city was the founder of Velora Studios born?"]) == 0
    page = out.read_text()
    assert U.StrictChecker().check(page).errors == [] and "model-free baseline" in page
    assert page.count("<g class=\"n ") >= 2


@pytest.mark.parametrize("argv,msg", [
    (["--system", "ras", "--llm", "local"], "needs --index DIR and --system NAME"),
    (["--index", "IDX", "--llm", "local"], "needs --index DIR and --system NAME"),
    (["--index", "IDX", "--system", "gear"], "gear needs an LLM"),
    (["--index", "IDX", "--system", "ras", "--llm", "local", "--retriever", "faiss"], "--retriever expected"),
])
def test_ask_html_usage_errors_are_one_line(argv, msg, tiny_index, tmp_path):
    from rasfast.cli import main
    argv = [str(tiny_index) if a == "IDX" else a for a in argv]
    with pytest.raises(SystemExit) as e:
        main(["ask", *argv, "--encoder", "hashing", "--html", str(tmp_path / "q.html"), "a question?"])
    assert msg in str(e.value.code) and "\n" not in str(e.value.code)


def test_ask_html_errors_exit_1_with_one_line(tiny_index, tmp_path):
    """From the shell: a second question, a missing directory; exit status 1, one line."""
    for extra, html in ((["a second question?"], tmp_path / "q.html"), ([], tmp_path / "no" / "such" / "q.html")):
        p = subprocess.run([sys.executable, "-m", "rasfast.cli", "ask", "--index", str(tiny_index), "--system", "ras",
                            "--encoder", "hashing", "--llm", "local", "--html", str(html), "a question?", *extra],
                           capture_output=True, text=True, timeout=120)
        assert p.returncode == 1 and len(p.stderr.strip().splitlines()) == 1, p.stderr
        assert p.stderr.startswith("ask --html")


@pytest.mark.data
def test_a_100_question_6_system_report_stays_small(data_dir):
    """The size budget, scaled: 10 questions of realistic synthetic records for six systems
    (benchmarks/report_html_size.py) must take under 2 MB (20 MB per 100 questions)."""
    import random
    sys.path.insert(0, str(REPO))
    from benchmarks.report_html_size import SYSTEMS, make_record
    from rasfast.data.qa import load_dataset
    ds = load_dataset("musique", data_dir)
    rng = random.Random(0)
    recs = {s: [make_record(s, q, ds, rng) for q in ds.questions[:10]] for s in SYSTEMS}
    out = {"dataset": "musique", "n": 10, "k": 5, "rows": [summarise(n, r, 5) for n, r in recs.items()],
           "paired": paired_against(recs)}
    page = report_document(out, recs, dataset=ds)
    assert U.StrictChecker().check(page).errors == []
    assert len(page.encode()) < 2_000_000, len(page.encode())
