"""Adding a system to ``rasfast eval qa`` is one module (issue 40 A): a toy system, written
here as one module and imported, registers its spec (:mod:`rasfast.qa_eval.spec`) and
nothing else is touched; it then runs in ``eval qa``, its records are found by the report,
it appears in the HTML report, in the role table (its own LLM role counted and checked), in
the command line's choices, and its cache key hashes its own prompt module."""
import importlib
import sys
import textwrap

import pytest

from qa_util import dataset, llm

TOY_MODULE = textwrap.dedent('''
    """A toy system: dense top-k passages, after one LLM call of its own (a rewrite)."""
    from rasfast.qa_eval.spec import SystemSpec, register_spec
    from rasfast.qa_eval.systems import Prepared, top_passages_input

    REWRITE_TASK = "TOY-REWRITE: restate the question in other words."


    def _prepare(ctx):
        from rasfast.systems.registry import base_retriever
        retriever = base_retriever(ctx.ki, ctx.encoder, "dense")

        def prep(question):
            reply = ctx.llm.generate([[{"role": "user", "content": f"{REWRITE_TASK}\\nQuestion: {question}"}]], 16)[0]
            ps = retriever.retrieve([question], 10)[0]
            return Prepared([[int(p.pid), float(p.score)] for p in ps],
                            [{"query": question, "passages": [[int(p.pid), float(p.score)] for p in ps],
                              "note": f"rewrite: {reply}"}],
                            [int(p.pid) for p in ps], {"rewrite": reply})
        return prep


    def _roles():
        return [(REWRITE_TASK, "toy.rewrite", lambda t: bool(str(t).strip()))]


    SPEC = register_spec(SystemSpec("toy", "Toy RAG (test system)", _prepare, top_passages_input,
                                    prompt_modules=(__name__,), roles=_roles,
                                    key=lambda config, spec: {"k": config.k}))
''')


@pytest.fixture
def toy(tmp_path, monkeypatch):
    from rasfast.qa_eval.spec import unregister_spec
    (tmp_path / "toy_system_mod.py").write_text(TOY_MODULE)
    monkeypatch.syspath_prepend(str(tmp_path))
    mod = importlib.import_module("toy_system_mod")
    yield mod
    unregister_spec("toy")
    sys.modules.pop("toy_system_mod", None)


def test_a_toy_system_in_one_module_appears_everywhere(tmp_path, toy):
    from rasfast.cli.main import build_parser
    from rasfast.qa_eval import LABELS, SYSTEMS, EvalConfig, evaluate_qa, report_qa
    from rasfast.qa_eval.report_html import report_document
    from rasfast.qa_eval.roles import RoleRecorder, _role_table
    assert "toy" in SYSTEMS and LABELS["toy"] == "Toy RAG (test system)"
    # eval qa runs it: its preparation, then the one reader over its top k passages
    out = evaluate_qa(dataset(), ["dense", "toy"], llm(), "stand-in", encoder="hashing", cache_dir=tmp_path / "cache",
                      progress=False, log=lambda m: None)
    rows = {r["system"]: r for r in out["rows"]}
    assert not out["skipped"] and rows["toy"]["n"] == 3 and rows["toy"]["em"] == pytest.approx(1.0)
    assert rows["toy"]["parse_failures"]["toy.rewrite"] == {"replies": 3, "unparsed": 0, "rate": 0.0, "failed": 0}
    assert rows["toy"]["llm_calls_per_q"] == 2 and "toy" in out["paired"]
    rec = out["records"]["toy"][0]
    assert rec["rewrite"] == "none" and rec["retriever"] == "dense" and rec["steps"][0]["note"] == "rewrite: none"
    # --report finds its records (no model), under the same settings
    rep = report_qa(dataset(), ["dense", "toy"], "stand-in", cache_dir=tmp_path / "cache", encoder="hashing",
                    prompt_style="compact")
    assert rep["missing"] == {"dense": 0, "toy": 0} and rep["rows"] == out["rows"]
    # the HTML report shows it under its label
    page = report_document(rep, rep["records"])
    assert "Toy RAG (test system)" in page
    # the role table knows its prompt
    assert ("toy.rewrite" in {r for _, r, _ in _role_table()})
    assert RoleRecorder(llm()).role([{"role": "user", "content": toy.REWRITE_TASK + "\nQuestion: q?"}]) == "toy.rewrite"
    # the command line offers it
    import contextlib
    import io
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf), pytest.raises(SystemExit):
        build_parser().parse_args(["eval", "qa", "--help"])
    help_text = buf.getvalue()
    assert "toy" in help_text
    # its preparation's cache key hashes its own prompt module
    cfg = EvalConfig("tiny", "stand-in")
    assert cfg.prep_settings("toy")["prep"] == "toy" and "prompts" in cfg.prep_settings("toy")
    assert cfg.records_file("toy").startswith("tiny-toy-stand-in-k5-")


def test_a_removed_toy_system_is_gone(tmp_path):
    from rasfast.qa_eval import SYSTEMS, evaluate_qa
    assert "toy" not in SYSTEMS
    with pytest.raises(ValueError, match="systems"):
        evaluate_qa(dataset(), ["toy"], llm(), "stand-in", encoder="hashing", cache_dir=tmp_path, progress=False)
