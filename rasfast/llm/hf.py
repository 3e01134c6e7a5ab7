"""``HFCausalLM``: any transformers causal LM (a path or a model + tokenizer) as a batched
:class:`~rasfast.llm.base.LLM`, with left-padded batch generation, bf16/fp16 on devices
that support it, stop strings, and prompts given as text, chat messages or embeddings."""
from __future__ import annotations

from typing import List, Optional, Sequence, Union

import torch

from ._decode import generate_from_embeds
from ._timing import StageTimer
from .base import Prompt, as_messages, check_generate_args, cut_at_stop, messages_to_text


def resolve_device(device) -> torch.device:
    if device is None:
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(device)


def resolve_dtype(dtype, device: torch.device) -> torch.dtype:
    """``"auto"``: bfloat16 on GPUs that support it, else float16 on GPU, float32 on CPU."""
    if isinstance(dtype, torch.dtype):
        return dtype
    names = {"float32": torch.float32, "fp32": torch.float32, "float16": torch.float16,
             "fp16": torch.float16, "bfloat16": torch.bfloat16, "bf16": torch.bfloat16}
    if dtype in names:
        return names[dtype]
    if dtype == "auto":
        if device.type == "cuda":
            return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
        return torch.float32
    raise ValueError(f"dtype: expected 'auto', a torch dtype or one of {sorted(names)}, got {dtype!r}")


def eos_ids_of(model, tokenizer) -> List[int]:
    ids = set()
    for src in (getattr(model, "generation_config", None), getattr(model, "config", None)):
        e = getattr(src, "eos_token_id", None) if src is not None else None
        if isinstance(e, int):
            ids.add(e)
        elif isinstance(e, (list, tuple)):
            ids.update(int(x) for x in e)
    if tokenizer.eos_token_id is not None:
        ids.add(int(tokenizer.eos_token_id))
    return sorted(ids)


class HFCausalLM:
    """A transformers causal LM behind the batched ``generate`` interface.

    Args:
        model: a local path / model id already in the HF cache, or a ``PreTrainedModel``.
        tokenizer: required with a model object; loaded from the path otherwise.
        device: default CUDA when available.
        dtype: ``"auto"`` (bf16/fp16 on GPU, fp32 on CPU), a name or a ``torch.dtype``.
        chat_template: render message prompts with the tokenizer's chat template when it has
            one (``"auto"``), always (``True``) or never (``False``: contents joined).
        batch_size: prompts per forward pass; longer batches are split (sorted by length to
            limit padding; results come back in input order).
    """

    def __init__(self, model: Union[str, torch.nn.Module], tokenizer=None, device=None, dtype="auto",
                 chat_template="auto", batch_size: int = 16, seed: Optional[int] = None):
        self.device = resolve_device(device)
        if isinstance(model, str):
            from transformers import AutoModelForCausalLM, AutoTokenizer
            self.dtype = resolve_dtype(dtype, self.device)
            tokenizer = tokenizer or AutoTokenizer.from_pretrained(model)
            model = AutoModelForCausalLM.from_pretrained(model, dtype=self.dtype)
        elif isinstance(model, torch.nn.Module):
            if tokenizer is None:
                raise TypeError("tokenizer: required when model is a model object")
            self.dtype = resolve_dtype(dtype, self.device) if (dtype != "auto" or self.device.type == "cuda") \
                else next(model.parameters()).dtype
        else:
            raise TypeError(f"model: expected a path or a torch.nn.Module, got {type(model).__name__}")
        if not isinstance(batch_size, int) or batch_size < 1:
            raise ValueError(f"batch_size: expected an int >= 1, got {batch_size!r}")
        self.model = model.to(device=self.device, dtype=self.dtype).eval()
        self.tokenizer = tokenizer
        self.batch_size = batch_size
        self.chat_template = chat_template
        self.eos_ids = eos_ids_of(self.model, tokenizer)
        pad = tokenizer.pad_token_id
        self.pad_id = int(pad if pad is not None else (self.eos_ids[0] if self.eos_ids else 0))
        self.timer = StageTimer()  # "llm.generate" spans (category "model")
        self.generator = torch.Generator(device=self.device)
        if seed is not None:
            self.generator.manual_seed(seed)

    def _text(self, prompt) -> str:
        if isinstance(prompt, str):
            return prompt
        msgs = as_messages(prompt)
        has_tpl = bool(getattr(self.tokenizer, "chat_template", None))
        if self.chat_template is True or (self.chat_template == "auto" and has_tpl):
            return self.tokenizer.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True)
        return messages_to_text(msgs)

    def embed_prompt(self, prompt: Prompt) -> torch.Tensor:
        """The ``[L, hidden]`` input embeddings of one prompt (embeddings pass through)."""
        if isinstance(prompt, torch.Tensor):
            if prompt.dim() != 2 or prompt.shape[1] != self.model.get_input_embeddings().embedding_dim \
                    or prompt.shape[0] == 0:
                raise ValueError("prompts: an embedding prompt must be a non-empty [length, hidden] tensor, "
                                 f"got shape {tuple(prompt.shape)}")
            return prompt.to(device=self.device, dtype=self.dtype)
        ids = self.tokenizer(self._text(prompt), return_tensors="pt")["input_ids"][0].to(self.device)
        if ids.numel() == 0:
            raise ValueError("prompts: a prompt tokenised to nothing")
        with torch.no_grad():
            return self.model.get_input_embeddings()(ids)

    def generate(self, prompts: Sequence[Prompt], max_new_tokens: int = 128,
                 stop: Optional[Sequence[str]] = None, temperature: float = 0.0) -> List[str]:
        """One completion per prompt, in input order (see :class:`~rasfast.llm.base.LLM`)."""
        stop = check_generate_args(prompts, max_new_tokens, stop, temperature)
        embeds = [self.embed_prompt(p) for p in prompts]
        order = sorted(range(len(embeds)), key=lambda i: embeds[i].shape[0])
        texts: List[str] = [""] * len(embeds)
        decode = lambda ids: self.tokenizer.decode(ids, skip_special_tokens=True)  # noqa: E731
        for s in range(0, len(order), self.batch_size):
            chunk = order[s:s + self.batch_size]
            with self.timer.stage("llm.generate"):
                ids = generate_from_embeds(self.model, [embeds[i] for i in chunk], max_new_tokens, self.eos_ids,
                                           self.pad_id, temperature, stop, decode, self.generator)
            for i, row in zip(chunk, ids):
                texts[i] = cut_at_stop(decode(row), stop)
        return texts
