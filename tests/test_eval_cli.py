"""``rasfast eval`` (issue 40 A): each subcommand (loop, gear, kirag, qa) has its own parser
with only the options that apply to it, the flag names are the ones the shared parser had,
``rasfast eval --dataset ...`` is still the loop's, and a user error stays one line, exit 1."""
import contextlib
import io
import re

import pytest

from rasfast.cli.main import build_parser, main

KIRAG_TRAINING = ("--kirag-folds", "--kirag-no-train", "--kirag-epochs", "--kirag-max-steps", "--kirag-train-batch",
                  "--kirag-lr", "--kirag-temperature", "--kirag-max-negatives", "--kirag-seed", "--kirag-negatives")
QA_OWN = ("--systems", "--limit", "--questions", "--cache-dir", "--report", "--reader", "--gear-iters",
          "--kirag-aligner", "--model-free-triples", "--reader-prompts", "--html")
LOOP_OWN = ("--index", "--system", "--scope-k", "--batch", "--passages", "--seed", "--graph-encoder", "--llm-extract")


def has(flag, text):
    """``flag`` as a whole option name in ``text`` (``--system`` is not in ``--systems``)."""
    return re.search(r"(?<![\w-])" + re.escape(flag) + r"(?![\w-])", text) is not None


def help_of(*argv):
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf), pytest.raises(SystemExit) as e:
        build_parser().parse_args([*argv, "--help"])
    assert e.value.code in (0, None)
    return buf.getvalue()


def test_eval_qa_help_lists_no_kirag_training_flag_and_its_own_options():
    text = help_of("eval", "qa")
    assert text.startswith("usage: rasfast eval qa")
    for flag in KIRAG_TRAINING + LOOP_OWN:
        assert not has(flag, text), flag
    for flag in QA_OWN + ("--dataset", "--llm", "--retriever", "--k", "--json", "--encoder"):
        assert has(flag, text), flag


def test_each_subcommand_help_shows_its_own_options():
    kirag = help_of("eval", "kirag")
    assert all(has(f, kirag) for f in KIRAG_TRAINING)
    assert not any(has(f, kirag) for f in QA_OWN + LOOP_OWN + ("--llm",))
    gear = help_of("eval", "gear")
    assert all(has(f, gear) for f in ("--encoder", "--data-root", "--json", "--base-sizes", "--fusion-depths",
                                      "--max-degree", "--backend"))
    assert not any(has(f, gear) for f in KIRAG_TRAINING + QA_OWN + LOOP_OWN + ("--llm", "--k", "--n"))
    for loop in (help_of("eval", "loop"), help_of("eval", "--dataset", "demo")):   # no subcommand: the loop's
        assert loop.startswith("usage: rasfast eval loop")
        assert all(has(f, loop) for f in LOOP_OWN + ("--n", "--llm", "--retriever"))
        assert not any(has(f, loop) for f in KIRAG_TRAINING + QA_OWN)
    top = help_of("eval")
    assert all(name in top for name in ("loop", "gear", "kirag", "qa")) and not has("--kirag-epochs", top)


def test_the_old_command_lines_still_parse():
    p = build_parser()
    a = p.parse_args(["eval", "--dataset", "demo", "--n", "3", "--encoder", "hashing"])
    assert (a.what, a.dataset, a.n) == ("loop", "demo", 3)
    a = p.parse_args(["eval"])
    assert a.what == "loop" and a.dataset == "demo"
    a = p.parse_args(["eval", "--index", "ix", "--system", "gear-naive", "--scope-k", "10"])
    assert (a.what, a.index, a.system, a.scope_k) == ("loop", "ix", "gear-naive", 10)
    a = p.parse_args(["eval", "gear", "--encoder", "hashing", "--json", "g.json"])
    assert (a.what, a.encoder, a.json) == ("gear", "hashing", "g.json")
    a = p.parse_args(["eval", "kirag", "--dataset", "musique", "--kirag-no-train", "--kirag-epochs", "2"])
    assert (a.what, a.kirag_train, a.kirag_epochs) == ("kirag", False, 2)
    a = p.parse_args(["eval", "qa", "--dataset", "musique", "--systems", "dense,ras", "--llm", "local",
                      "--questions", "51-100", "--retriever", "hybrid", "--llm-ctx", "8192", "--n", "7"])
    assert (a.what, a.systems, a.retriever, a.llm_ctx, a.limit) == ("qa", "dense,ras", "hybrid", 8192, 7)


@pytest.mark.parametrize("argv,pattern", [
    (["eval", "qa", "--dataset", "musique", "--kirag-epochs", "2"], "rasfast: error: unrecognized arguments: --kirag-epochs 2"),
    (["eval", "qa", "--dataset", "musique", "--retriever", "gear"], "rasfast eval qa: error: argument --retriever: invalid choice"),
    (["eval", "qa", "--dataset", "nq"], "rasfast eval qa: error: argument --dataset: expected one of"),
    (["eval", "qa", "--llm", "local"], "rasfast eval qa: error: the following arguments are required: --dataset"),
    (["eval", "gear", "--n", "5"], "rasfast: error: unrecognized arguments: --n 5"),
    (["eval", "kirag", "--llm", "local"], "rasfast: error: unrecognized arguments: --llm local"),
    (["eval", "--dataset", "demo", "--kirag-folds", "3"], "rasfast: error: unrecognized arguments: --kirag-folds 3"),
])
def test_an_option_of_another_subcommand_is_a_one_line_error(argv, pattern, capsys):
    with pytest.raises(SystemExit) as e:
        main(argv)
    assert e.value.code == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(pattern), err
