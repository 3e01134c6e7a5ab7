"""A tiny random Llama and a byte-level BPE tokenizer built in code: no download, no hub.

For tests, benchmarks and the offline GraphLLM demo. The model is untrained (random
weights), so its text is gibberish; what it exercises is the machinery (shapes, padding,
caching, LoRA, the graph soft token, timing), which is identical for a real checkpoint.
"""
from __future__ import annotations

from typing import Iterable, Optional, Sequence, Tuple

SPECIAL_TOKENS = ["<pad>", "<s>", "</s>", "<unk>"]
TAG_TOKENS = ["[SUBQ]", "[SUFFICIENT]", "[NO_RETRIEVAL]", "(S>", "| P>", "| O>"]

_DEFAULT_TEXTS = [
    "Question: Who directed the film that won the award in 1999? Answer: The director was born in Lyon.",
    "[SUBQ] Where was the founder of the company born? [SUFFICIENT] [NO_RETRIEVAL]",
    "(S> Alice Smith| P> born in| O> Springfield), (S> Springfield| P> located in| O> Oregon)",
    "Sub-query: which river flows through the capital city of the country? Triples: none.",
    "The quick brown fox jumps over the lazy dog 0123456789, and then: yes; no.",
]


def tiny_tokenizer(texts: Optional[Iterable[str]] = None, vocab_size: int = 512):
    """Byte-level BPE trained on ``texts`` (plus a built-in sample), wrapped as a
    transformers fast tokenizer that prepends ``<s>`` like Llama's. Any text encodes
    (bytes fall back), and decoding round-trips it."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    if not isinstance(vocab_size, int) or vocab_size < 300:
        raise ValueError(f"vocab_size: expected an int >= 300 (256 bytes + specials), got {vocab_size!r}")
    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=SPECIAL_TOKENS + TAG_TOKENS,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(list(texts or []) + _DEFAULT_TEXTS, trainer=trainer)
    bos = tok.token_to_id("<s>")
    tok.post_processor = processors.TemplateProcessing(single="<s> $A", pair="<s> $A $B",
                                                       special_tokens=[("<s>", bos)])
    return PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>",
                                   pad_token="<pad>", unk_token="<unk>")


def tiny_llama(texts: Optional[Sequence[str]] = None, hidden_size: int = 64, num_layers: int = 2,
               num_heads: int = 4, intermediate_size: Optional[int] = None, vocab_size: int = 512,
               max_position_embeddings: int = 2048, seed: int = 0, initializer_range: float = 0.02,
               tokenizer=None) -> Tuple[object, object]:
    """``(LlamaForCausalLM, tokenizer)`` with random weights drawn from ``seed``.

    The same arguments always give the same weights (tests rebuild the base model to check
    save/load). ``q_proj``/``v_proj`` exist, so the default LoRA targets apply."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    tokenizer = tokenizer or tiny_tokenizer(texts, vocab_size=vocab_size)
    config = LlamaConfig(vocab_size=len(tokenizer), hidden_size=hidden_size,
                         intermediate_size=intermediate_size or 4 * hidden_size,
                         num_hidden_layers=num_layers, num_attention_heads=num_heads,
                         num_key_value_heads=num_heads, max_position_embeddings=max_position_embeddings,
                         initializer_range=initializer_range, pad_token_id=tokenizer.pad_token_id,
                         bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id,
                         tie_word_embeddings=False)
    gen = torch.random.fork_rng(devices=[])
    with gen:
        torch.manual_seed(seed)
        model = LlamaForCausalLM(config)
    model.eval()
    return model, tokenizer
