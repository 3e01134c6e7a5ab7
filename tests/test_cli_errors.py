"""Every CLI command answers a user error with ONE line on stderr and exit status 1, never a
traceback (issue 31, item 4): bad paths, wrong kinds of directories, empty and oversized
inputs, bad numbers, for every command. A case fails if ``main`` raises anything but
SystemExit (that would be a traceback), exits with another status, or says more or less
than one line. The accepted edge cases (a 10 MB passage, a long question) are tested too."""
import json
import os
import re
import subprocess
import sys

import pytest

from rasfast.cli import main
from rasfast.index.knowledge import KnowledgeIndex

ROWS = [{"title": f"T{i}", "text": f"Entity{i} is in Place{i % 3}.",
         "triples": [[f"Entity{i}", "located in", f"Place{i % 3}"]]} for i in range(8)]


@pytest.fixture(autouse=True)
def _cache(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("RASFAST_CACHE", str(tmp_path_factory.getbasetemp() / "cache"))
    monkeypatch.delenv("RASFAST_TRACEBACK", raising=False)


@pytest.fixture(scope="module")
def w(tmp_path_factory):
    """A working directory: a knowledge index (ix), a plain ThemeIndex (themes), corpora
    good and bad, an empty directory, a plain file."""
    d = tmp_path_factory.mktemp("cli")
    os.environ.setdefault("RASFAST_CACHE", str(d / "cache"))
    good = d / "good.jsonl"
    good.write_text("".join(json.dumps(r) + "\n" for r in ROWS))
    assert main(["index", "build", "--corpus", str(good), "--out", str(d / "ix"), "--encoder",
                 "hashing", "--num-themes", "2", "--no-progress"]) == 0
    from rasfast.systems.ras.corpus import build_index, read_corpus
    from rasfast.encode import HashingEncoder
    build_index(read_corpus(good), HashingEncoder(384), d / "themes", num_themes=2)
    (d / "empty").mkdir()
    (d / "file").write_text("not an index")
    (d / "zero.jsonl").write_text("")
    (d / "zero.json").write_text("[]")
    (d / "blank.jsonl").write_text("\n\n  \n")
    (d / "badjson.jsonl").write_text('{"title": "a", "text": "x"}\n{"title": "b", "text": \n')
    (d / "notext.jsonl").write_text('{"title": "a"}\n')
    (d / "emptytext.jsonl").write_text('{"title": "a", "text": ""}\n')
    (d / "dupid.jsonl").write_text('{"id": "a", "text": "one"}\n{"id": "a", "text": "two"}\n')
    (d / "duppid.json").write_text('[{"pid": 3, "text": "one"}, {"pid": 3, "text": "two"}]')
    (d / "notriples.jsonl").write_text('{"title": "n", "text": "no triples here"}\n')
    # an index whose manifest disagrees with its files (issue 31, item 1)
    import shutil
    shutil.copytree(d / "ix", d / "lying")
    for mf in (d / "lying").glob("manifest*.json"):   # manifest.<g>.json: what knowledge.json names
        m = json.loads(mf.read_text())
        m["arrays"]["emb"]["dtype"] = "float16"
        mf.write_text(json.dumps(m))
    shutil.copytree(d / "ix", d / "nonum")
    k = json.loads((d / "nonum" / "knowledge.json").read_text())
    del k["num_passages"]
    (d / "nonum" / "knowledge.json").write_text(json.dumps(k))
    return d


def run(argv):
    """(exit status, stderr lines) of ``rasfast argv`` run in this process, as the console
    script would end: SystemExit("message") prints the message and exits 1."""
    import contextlib
    import io
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        try:
            code = main(argv)
        except SystemExit as e:
            if isinstance(e.code, str):
                print(e.code, file=sys.stderr)
                code = 1
            else:
                code = e.code
    return code, [line for line in err.getvalue().splitlines() if line.strip()]


H = ["--encoder", "hashing"]
Q = "Where is Entity4 located?"
SMALL = ["--passages", "300", "--no-progress"]

# (case, argv with {w} for the working directory, the one line's pattern)
CASES = [
    # ---- ask: the question
    ("ask: empty question", ["ask", "--index", "{w}/ix", *H, ""], r"^rasfast ask: error: the question is empty"),
    ("ask: blank question", ["ask", "--index", "{w}/ix", *H, "  \t "], r"the question is empty"),
    ("ask: second of two empty", ["ask", "--index", "{w}/ix", *H, Q, ""], r"question 2 of 2 is empty"),
    ("ask --system: empty question", ["ask", "--index", "{w}/ix", "--system", "gear-naive", *H, ""],
     r"the question is empty"),
    ("ask: no question", ["ask", "--index", "{w}/ix", *H], r"^rasfast ask: error: the following arguments are required: question"),
    # ---- ask: --index of the wrong kind
    ("ask --index: empty directory", ["ask", "--index", "{w}/empty", *H, Q],
     r"^rasfast ask: error: --index: .*empty/manifest.json: missing; .* is not a saved ThemeIndex$"),
    ("ask --index: missing path", ["ask", "--index", "{w}/nope", *H, Q], r"--index: .*nope/manifest.json: missing"),
    ("ask --index: a file", ["ask", "--index", "{w}/file", *H, Q], r"--index: .*file/manifest.json: missing"),
    ("ask --index: a corpus file", ["ask", "--index", "{w}/good.jsonl", *H, Q], r"--index: .*manifest.json: missing"),
    ("ask --index --system: ThemeIndex only", ["ask", "--index", "{w}/themes", "--system", "gear-naive", *H, Q],
     r"--index: .*themes/knowledge.json: missing; .* is not a finished knowledge index"),
    ("ask --index --system: empty directory", ["ask", "--index", "{w}/empty", "--system", "ras", *H, Q],
     r"knowledge.json: missing"),
    ("ask --index: manifest lies about dtype", ["ask", "--index", "{w}/lying", *H, Q],
     r"emb\.1\.bin: the file holds dtype 'float32' \(its header\), .* says 'float16'"),
    ("ask --index: knowledge.json without num_passages", ["ask", "--index", "{w}/nonum", *H, Q],
     r"knowledge.json: malformed manifest: num_passages: missing"),
    ("ask --index: other encoder", ["ask", "--index", "{w}/ix", "--encoder", "minilm", Q],
     r"--index was built with encoder 'hashing-384': pass --encoder hashing"),
    # ---- ask: numbers and options
    ("ask --k 0", ["ask", "--index", "{w}/ix", *H, "--k", "0", Q], r"argument --k: expected an integer >= 1, got 0"),
    ("ask --k -3", ["ask", "--index", "{w}/ix", *H, "--k", "-3", Q], r"argument --k: expected an integer >= 1, got -3"),
    ("ask --k abc", ["ask", "--index", "{w}/ix", *H, "--k", "abc", Q], r"argument --k: expected an integer >= 1, got 'abc'"),
    ("ask --k 1e3", ["ask", "--index", "{w}/ix", *H, "--k", "1e3", Q], r"argument --k: .* got '1e3'"),
    ("ask --max-iters 0", ["ask", "--index", "{w}/ix", *H, "--max-iters", "0", Q], r"argument --max-iters"),
    ("ask --scope-k 0", ["ask", "--index", "{w}/ix", *H, "--scope-k", "0", Q], r"argument --scope-k"),
    ("ask --scope-k -1 --system", ["ask", "--index", "{w}/ix", "--system", "gear-naive", *H, "--scope-k", "-1", Q],
     r"argument --scope-k"),
    ("ask --max-triples -1", ["ask", "--index", "{w}/ix", *H, "--max-triples", "-1", Q], r"argument --max-triples: expected an integer >= 0"),
    ("ask --passages 10", ["ask", *H, "--passages", "10", Q], r"argument --passages: expected an integer >= 100, got 10"),
    ("ask --llm-threads 0", ["ask", *H, "--llm-threads", "0", Q], r"argument --llm-threads"),
    ("ask --llm-ctx -5", ["ask", *H, "--llm-ctx", "-5", Q], r"argument --llm-ctx"),
    ("ask --system unknown", ["ask", "--index", "{w}/ix", "--system", "nope", *H, Q], r"argument --system: invalid choice"),
    ("ask --encoder unknown", ["ask", "--encoder", "bert", Q], r"argument --encoder: invalid choice"),
    ("ask --trace is a directory", ["ask", "--index", "{w}/ix", *H, "--trace", "{w}/empty", Q],
     r"^rasfast ask: error: .*empty: Is a directory$"),
    ("ask --dataset musique, no data", ["ask", "--dataset", "musique", "--data-root", "{w}/nope", *H, Q],
     r"^rasfast ask: error: .*nope/musique/musique_train_corpus.json: No such file or directory$"),
    ("ask --system gear without --llm", ["ask", "--index", "{w}/ix", "--system", "gear", *H, Q],
     r"--system gear: .*needs an LLM"),
    ("ask --llm-extract without --llm", ["ask", "--index", "{w}/ix", *H, "--llm-extract", Q], r"--llm-extract needs --llm"),
    ("ask --llm unknown", ["ask", "--index", "{w}/ix", *H, "--llm", "gpt9", Q], r"argument --llm"),
    ("ask: unknown option", ["ask", "--index", "{w}/ix", *H, "--nope", Q], r"unrecognized arguments: --nope"),
    # ---- index build: the corpus
    ("build: missing corpus", ["index", "build", "--corpus", "{w}/nope.jsonl", "--out", "{w}/o", *H],
     r"^index build failed: corpus: no such file .*nope.jsonl$"),
    ("build: corpus is a directory", ["index", "build", "--corpus", "{w}/empty", "--out", "{w}/o", *H],
     r"corpus: .*empty is a directory; expected a JSONL or JSON corpus file"),
    ("build: corpus is an index", ["index", "build", "--corpus", "{w}/ix", "--out", "{w}/o", *H], r"is a directory"),
    ("build: 0 passages (empty .jsonl)", ["index", "build", "--corpus", "{w}/zero.jsonl", "--out", "{w}/o", *H],
     r"zero.jsonl: no passages$"),
    ("build: 0 passages (blank lines)", ["index", "build", "--corpus", "{w}/blank.jsonl", "--out", "{w}/o", *H],
     r"blank.jsonl: no passages$"),
    ("build: 0 passages (JSON [])", ["index", "build", "--corpus", "{w}/zero.json", "--out", "{w}/o", *H],
     r"zero.json: no passages$"),
    ("build: malformed JSON", ["index", "build", "--corpus", "{w}/badjson.jsonl", "--out", "{w}/o", *H],
     r"badjson.jsonl: line 2 is not JSON"),
    ("build: missing text", ["index", "build", "--corpus", "{w}/notext.jsonl", "--out", "{w}/o", *H],
     r"line 1: passage has no text"),
    ("build: empty text", ["index", "build", "--corpus", "{w}/emptytext.jsonl", "--out", "{w}/o", *H],
     r"line 1: passage has no text \(field 'text' is empty\)"),
    ("build: the same id twice", ["index", "build", "--corpus", "{w}/dupid.jsonl", "--out", "{w}/o", *H],
     r"dupid.jsonl: line 2: id 'a' repeats line 1's; every passage's id must be unique"),
    ("build: the same pid twice (JSON)", ["index", "build", "--corpus", "{w}/duppid.json", "--out", "{w}/o", *H],
     r"duppid.json: record 1: pid 3 repeats record 0's"),
    # ---- index build: --out and numbers
    ("build --out is a file", ["index", "build", "--corpus", "{w}/good.jsonl", "--out", "{w}/file", *H],
     r"^rasfast index build: error: .*file: File exists$"),
    ("build --out under a file", ["index", "build", "--corpus", "{w}/good.jsonl", "--out", "{w}/file/ix", *H],
     r"^rasfast index build: error: .*file/ix: Not a directory$"),
    ("build --num-themes 0", ["index", "build", "--corpus", "{w}/good.jsonl", "--out", "{w}/o", *H, "--num-themes", "0"],
     r"argument --num-themes: expected an integer >= 1, got 0"),
    ("build --num-themes x", ["index", "build", "--corpus", "{w}/good.jsonl", "--out", "{w}/o", *H, "--num-themes", "x"],
     r"argument --num-themes"),
    ("build --max-degree 0", ["index", "build", "--corpus", "{w}/good.jsonl", "--out", "{w}/o", *H, "--max-degree", "0"],
     r"argument --max-degree"),
    ("build --concurrency 0", ["index", "build", "--corpus", "{w}/good.jsonl", "--out", "{w}/o", *H, "--concurrency", "0"],
     r"argument --concurrency"),
    ("build --max-new-tokens 0", ["index", "build", "--corpus", "{w}/good.jsonl", "--out", "{w}/o", *H, "--max-new-tokens", "0"],
     r"argument --max-new-tokens"),
    ("build --timeout -1", ["index", "build", "--corpus", "{w}/good.jsonl", "--out", "{w}/o", *H, "--timeout", "-1"],
     r"argument --timeout: expected a finite number > 0, got -1"),
    ("build --timeout nan", ["index", "build", "--corpus", "{w}/good.jsonl", "--out", "{w}/o", *H, "--timeout", "nan"],
     r"argument --timeout"),
    ("build --extract-triples without --llm", ["index", "build", "--corpus", "{w}/good.jsonl", "--out", "{w}/o", *H,
                                               "--extract-triples"], r"--extract-triples needs --llm"),
    ("build: no --out", ["index", "build", "--corpus", "{w}/good.jsonl", *H], r"the following arguments are required: --out"),
    # ---- index add
    ("add --index: empty directory", ["index", "add", "--index", "{w}/empty", "--corpus", "{w}/good.jsonl", *H],
     r"^index add failed: .*empty/knowledge.json: missing; .* is not a finished knowledge index$"),
    ("add --index: missing path", ["index", "add", "--index", "{w}/nope", "--corpus", "{w}/good.jsonl", *H],
     r"knowledge.json: missing"),
    ("add --index: ThemeIndex only", ["index", "add", "--index", "{w}/themes", "--corpus", "{w}/good.jsonl", *H],
     r"themes/knowledge.json: missing"),
    ("add: 0 passages", ["index", "add", "--index", "{w}/ix", "--corpus", "{w}/zero.jsonl", *H], r"zero.jsonl: no passages"),
    ("add: the same id twice", ["index", "add", "--index", "{w}/ix", "--corpus", "{w}/dupid.jsonl", *H], r"id 'a' repeats line 1's"),
    ("add: no triples into a corpus-triples index", ["index", "add", "--index", "{w}/ix", "--corpus", "{w}/notriples.jsonl", *H],
     r"the index was built from corpus triples; the added corpus has none"),
    ("add: other encoder", ["index", "add", "--index", "{w}/ix", "--corpus", "{w}/good.jsonl", "--encoder", "minilm"],
     r"^--index was built with encoder 'hashing-384': pass --encoder hashing$"),
    ("add --concurrency -1", ["index", "add", "--index", "{w}/ix", "--corpus", "{w}/good.jsonl", *H, "--concurrency", "-1"],
     r"argument --concurrency"),
    ("index: no subcommand", ["index"], r"^rasfast index: error: the following arguments are required"),
    # ---- eval
    ("eval --index: empty directory", ["eval", "--index", "{w}/empty", *H, "--no-progress"], r"^rasfast eval: error: --index: .*knowledge.json: missing"),
    ("eval --index: other corpus", ["eval", "--index", "{w}/ix", *H, "--no-progress", "--passages", "300"],
     r"the index holds 8 passages that are not the demo corpus"),
    ("eval --n 0", ["eval", *H, "--n", "0", *SMALL], r"argument --n: expected an integer >= 1, got 0"),
    ("eval --n -1", ["eval", *H, "--n", "-1", *SMALL], r"argument --n"),
    ("eval --batch 0", ["eval", *H, "--batch", "0", *SMALL], r"argument --batch"),
    ("eval --scope-k 0", ["eval", "--index", "{w}/ix", *H, "--scope-k", "0"], r"argument --scope-k"),
    ("eval --json is a directory", ["eval", *H, "--n", "2", "--json", "{w}/empty", *SMALL], r"^rasfast eval: error: .*empty: Is a directory$"),
    ("eval --dataset musique, no data", ["eval", "--dataset", "musique", "--data-root", "{w}/nope", *H, "--no-progress"],
     r"eval musique: .*nope/musique/musique_train_corpus.json"),
    ("eval --kirag-folds 1", ["eval", "kirag", *H, "--kirag-folds", "1"], r"argument --kirag-folds: expected an integer >= 2"),
    ("eval --dataset unknown", ["eval", "--dataset", "nq", *H], r"argument --dataset: invalid choice"),
    # ---- eval qa (options in rasfast/qa_eval; --report runs nothing)
    ("eval qa without --llm", ["eval", "qa", "--dataset", "musique", *H], r"^eval qa needs --llm"),
    ("eval qa --gear-iters 0", ["eval", "qa", "--dataset", "musique", "--report", "--llm", "local", *H, "--gear-iters", "0"],
     r"argument --gear-iters: expected an integer >= 1"),
    ("eval qa --cache-dir is a file", ["eval", "qa", "--dataset", "musique", "--report", "--llm", "local", *H,
                                       "--cache-dir", "{w}/file"], r"--cache-dir .*file: not a directory"),
    ("eval qa --kirag-aligner missing", ["eval", "qa", "--dataset", "musique", "--report", "--llm", "local", *H,
                                         "--kirag-aligner", "{w}/nope"], r"--kirag-aligner .*nope: not a directory"),
    ("eval qa --model-free-triples on musique", ["eval", "qa", "--dataset", "musique", "--report", "--llm", "local",
                                                 *H, "--model-free-triples", "sentence-patterns-2"],
     r"--model-free-triples sentence-patterns-2: musique ships its own triples"),
    ("eval qa --limit 0", ["eval", "qa", "--dataset", "musique", "--report", "--llm", "local", *H, "--limit", "0"],
     r"argument --limit: expected an integer >= 1"),
    ("eval qa --questions zz", ["eval", "qa", "--dataset", "musique", "--report", "--llm", "local", *H, "--questions", "zz"],
     r"questions: expected a range A-B"),
    ("eval qa --questions 5-2", ["eval", "qa", "--dataset", "musique", "--report", "--llm", "local", *H, "--questions", "5-2"],
     r"questions: expected 1 <= A <= B"),
    ("eval qa --systems unknown", ["eval", "qa", "--dataset", "musique", "--report", "--llm", "local", *H, "--systems", "x"],
     r"systems: expected names from"),
    ("eval qa --json is a directory", ["eval", "qa", "--dataset", "musique", "--report", "--llm", "local", *H,
                                       "--limit", "1", "--json", "{w}/empty", "--cache-dir", "{w}/qacache"],
     r"^eval qa: cannot write .*empty: Is a directory$"),
    ("eval qa --html in a missing directory", ["eval", "qa", "--dataset", "musique", "--report", "--llm", "local", *H,
                                               "--limit", "1", "--html", "{w}/nowhere/r.html"],
     r"^eval qa: cannot write .*nowhere/r.html: No such directory .*nowhere$"),
    # ---- demo, profile, bench, kirag, structrag
    ("demo --questions 0", ["demo", "--questions", "0"], r"^rasfast demo: error: argument --questions"),
    ("demo --passages 0", ["demo", "--passages", "0"], r"argument --passages: expected an integer >= 100"),
    ("demo --scope-k -1", ["demo", "--scope-k", "-1"], r"argument --scope-k"),
    ("demo --index-dir is a file", ["demo", "--questions", "2", "--passages", "300", "--index-dir", "{w}/file"],
     r"^rasfast demo: error: .*file: File exists$"),
    ("profile --n 0", ["profile", *H, "--n", "0"], r"^rasfast profile: error: argument --n"),
    ("profile --batch 0", ["profile", *H, "--batch", "0"], r"argument --batch"),
    ("profile --out is a file", ["profile", *H, "--n", "2", "--out", "{w}/file", "--no-warmup", *SMALL],
     r"^rasfast profile: error: .*file: File exists$"),
    ("profile --index: empty directory", ["profile", "--index", "{w}/empty", *H, "--n", "2"], r"--index: .*manifest.json: missing"),
    ("bench select --n 0", ["bench", "select", "--n", "0"], r"^rasfast bench: error: argument --n"),
    ("bench select --batch -1", ["bench", "select", "--batch", "-1"], r"argument --batch"),
    ("bench unknown", ["bench", "sort"], r"argument what: invalid choice"),
    ("kirag train --epochs 0", ["kirag", "train", "--out", "{w}/o", "--epochs", "0"], r"argument --epochs"),
    ("kirag train --lr -1", ["kirag", "train", "--out", "{w}/o", "--lr", "-1"], r"argument --lr: expected a finite number > 0"),
    ("kirag train, no data", ["kirag", "train", "--out", "{w}/o", "--data-root", "{w}/nope"],
     r"^rasfast kirag train: error: .*nope/musique/musique_train_corpus.json: No such file or directory$"),
    ("structrag router-data --n 0", ["structrag", "router-data", "--llm", "openai", "--out", "{w}/o.jsonl", "--n", "0"],
     r"argument --n"),
    ("unknown command", ["nope"], r"^rasfast: error: argument command: invalid choice"),
]


# cases whose error is found only once the dataset has loaded (without the shared data the
# command stops earlier, at "shared data not found", which is another one-line error)
NEEDS_DATA = {"eval qa --model-free-triples on musique": "musique"}


@pytest.mark.parametrize("case, argv, pattern", CASES, ids=[c[0] for c in CASES])
def test_a_user_error_is_one_line_and_exit_status_1(w, case, argv, pattern):
    if case in NEEDS_DATA:
        from rasfast.data.qa import load_dataset
        try:
            load_dataset(NEEDS_DATA[case])
        except (OSError, ValueError) as e:
            pytest.skip(f"{NEEDS_DATA[case]} data not available here: {e}")
    code, lines = run([a.replace("{w}", str(w)) for a in argv])
    assert code == 1, (case, lines)
    assert len(lines) == 1, (case, lines)
    assert re.search(pattern, lines[0]), (case, lines[0])
    assert "Traceback" not in lines[0]


def test_a_failed_build_writes_nothing(w):
    for corpus in ("dupid.jsonl", "zero.jsonl", "badjson.jsonl", "emptytext.jsonl"):
        out = w / f"out-{corpus}"
        assert run(["index", "build", "--corpus", str(w / corpus), "--out", str(out), *H])[0] == 1
        assert not out.exists(), corpus


def test_the_issue_cases_as_processes(w, tmp_path):
    """The console script itself: no traceback on stderr, one line, exit 1."""
    env = dict(os.environ, RASFAST_CACHE=str(tmp_path / "cache"))
    for argv in (["ask", "--index", str(w / "empty"), *H, Q],
                 ["ask", "--index", str(w / "ix"), *H, ""],
                 ["ask", "--index", str(w / "ix"), *H, "--k", "zero", Q]):
        p = subprocess.run([sys.executable, "-m", "rasfast.cli", *argv], capture_output=True, text=True,
                           env=env, timeout=300)
        lines = [line for line in p.stderr.splitlines() if line.strip()]
        assert p.returncode == 1 and len(lines) == 1 and "Traceback" not in p.stderr, (argv, p.stderr)
        assert p.stdout == ""


def test_rasfast_traceback_shows_the_traceback_of_a_user_error(w, monkeypatch):
    monkeypatch.setenv("RASFAST_TRACEBACK", "1")
    with pytest.raises(ValueError, match="manifest.json: missing"):
        main(["ask", "--index", str(w / "empty"), *H, Q])


# ---------------------------------------------------------------- accepted edge cases
def test_a_10_mb_passage_is_indexed_and_read_back(w, tmp_path):
    big = "word " * 2_000_000 + "Needle"          # 10 MB of text in one passage
    corpus = tmp_path / "big.jsonl"
    corpus.write_text(json.dumps({"title": "big", "text": big}) + "\n" + (w / "good.jsonl").read_text())
    code, lines = run(["index", "build", "--corpus", str(corpus), "--out", str(tmp_path / "ix"), *H,
                       "--no-progress"])
    assert code == 0 and lines == []
    ki = KnowledgeIndex.load(tmp_path / "ix")
    assert len(ki) == 9 and ki.theme.texts[0] == big
    code, lines = run(["ask", "--index", str(tmp_path / "ix"), *H, "--k", "2", Q])
    assert code == 0


def test_a_long_question_is_answered(w):
    code, lines = run(["ask", "--index", str(w / "ix"), *H, "--k", "2", Q + " really" * 20_000])
    assert code == 0 and lines == []
