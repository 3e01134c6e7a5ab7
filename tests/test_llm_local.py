"""HFCausalLM (tiny random Llama built in code) and the import-guarded VLLM backend."""
import pytest
import torch

from llm_util import torch_threads
from rasfast.llm.base import LLM, cut_at_stop
from rasfast.llm.hf import HFCausalLM, resolve_dtype
from rasfast.llm.tiny import tiny_llama
from rasfast.llm.vllm_backend import VLLM, vllm_available

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module")
def lm():
    with torch_threads(1):
        model, tok = tiny_llama(hidden_size=32, num_layers=2, num_heads=2, seed=1, initializer_range=0.1)
        yield HFCausalLM(model, tok, batch_size=3)


PROMPTS = ["Question: who founded Velora?", "short", "a much longer prompt about rivers, cities and founders of things",
           "x", "Sub-query: which river flows through the capital?"]


def test_is_an_llm(lm):
    assert isinstance(lm, LLM)


def test_batch_equals_one_by_one_and_hf_generate(lm):
    with torch_threads(1):
        batch = lm.generate(PROMPTS, max_new_tokens=10)  # 5 prompts, batch_size 3: two chunks
        single = [lm.generate([p], max_new_tokens=10)[0] for p in PROMPTS]
        assert batch == single
        ids = lm.tokenizer(PROMPTS[2], return_tensors="pt")
        ref = lm.model.generate(**ids, max_new_tokens=10, do_sample=False, pad_token_id=lm.pad_id)
        assert batch[2] == lm.tokenizer.decode(ref[0, ids["input_ids"].shape[1]:], skip_special_tokens=True)


def test_embedding_prompts_match_text_prompts(lm):
    with torch_threads(1):
        embeds = [lm.embed_prompt(p) for p in PROMPTS[:3]]
        assert lm.generate(embeds, max_new_tokens=6) == lm.generate(PROMPTS[:3], max_new_tokens=6)
        with pytest.raises(ValueError, match="length, hidden"):
            lm.generate([torch.zeros(3, 7)])


def test_stop_strings_and_messages(lm):
    with torch_threads(1):
        full = lm.generate([PROMPTS[0]], max_new_tokens=12)[0]
        stop = full[3:5]
        got = lm.generate([PROMPTS[0]], max_new_tokens=12, stop=[stop])[0]
        assert got == cut_at_stop(full, [stop]) and stop not in got
        msgs = [{"role": "system", "content": "sys"}, {"role": "user", "content": "hello"}]
        assert lm.generate([msgs], max_new_tokens=4) == lm.generate(["sys\n\nhello"], max_new_tokens=4)


def test_sampling_is_seeded(lm):
    with torch_threads(1):
        lm.generator.manual_seed(5)
        a = lm.generate(PROMPTS[:2], max_new_tokens=6, temperature=1.0)
        lm.generator.manual_seed(5)
        b = lm.generate(PROMPTS[:2], max_new_tokens=6, temperature=1.0)
        assert a == b


def test_bad_arguments(lm):
    with pytest.raises(TypeError, match="tokenizer"):
        HFCausalLM(lm.model)
    with pytest.raises(TypeError, match="model"):
        HFCausalLM(42)
    with pytest.raises(ValueError, match="dtype"):
        resolve_dtype("float8", torch.device("cpu"))
    with pytest.raises(ValueError, match="batch_size"):
        HFCausalLM(lm.model, lm.tokenizer, batch_size=0)
    with pytest.raises(TypeError, match="prompts"):
        lm.generate("not a list")
    assert lm.generate([]) == []
    assert resolve_dtype("auto", torch.device("cpu")) == torch.float32


def test_cut_at_stop():
    assert cut_at_stop("abc STOP def END", ["END", "STOP"]) == "abc "
    assert cut_at_stop("abc", None) == "abc"


@pytest.mark.skipif(vllm_available(), reason="vLLM is installed: the absent-package path cannot be tested")
def test_vllm_absent_gives_clear_import_error():
    with pytest.raises(ImportError, match="pip install 'rasfast\\[vllm\\]'"):
        VLLM("some/model")


@pytest.mark.skipif(not vllm_available() or not torch.cuda.is_available(), reason="needs vLLM and a GPU")
def test_vllm_generates_from_text_and_embeddings(tmp_path, lm):
    lm.model.save_pretrained(tmp_path)
    lm.tokenizer.save_pretrained(tmp_path)
    v = VLLM(str(tmp_path), dtype="float32", gpu_memory_utilization=0.2, enforce_eager=True)
    text = v.generate(PROMPTS[:2], max_new_tokens=5)
    emb = v.generate([lm.embed_prompt(p) for p in PROMPTS[:2]], max_new_tokens=5)
    assert text == emb == lm.generate(PROMPTS[:2], max_new_tokens=5)
