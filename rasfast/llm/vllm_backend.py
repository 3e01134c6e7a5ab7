"""``VLLM``: the offline vLLM engine as a batched :class:`~rasfast.llm.base.LLM` (optional:
``pip install rasfast[vllm]``; nothing here imports vLLM until a ``VLLM`` is built).

Prompts may be text, chat messages (rendered by vLLM's chat template) or input-embedding
tensors ``[length, hidden]`` -- the path the GraphLLM's soft graph token takes (vLLM is
started with ``enable_prompt_embeds=True``; export the GraphLLM's LoRA-merged LM with
:meth:`rasfast.llm.GraphLLM.export_merged` and pass ``engine=VLLM(path)`` to
``GraphLLM.generate``).
"""
from __future__ import annotations

from typing import Any, List, Optional, Sequence

from .base import Prompt, as_messages, check_generate_args, cut_at_stop


def vllm_available() -> bool:
    try:
        import vllm  # noqa: F401
    except Exception:
        return False
    return True


class VLLM:
    """Offline vLLM engine. ``engine_kwargs`` go to ``vllm.LLM`` (e.g. ``dtype``,
    ``gpu_memory_utilization``, ``max_model_len``, ``tensor_parallel_size``)."""

    def __init__(self, model: str, enable_prompt_embeds: bool = True, seed: int = 0, **engine_kwargs: Any):
        try:
            import vllm
        except Exception as e:  # ImportError, or a broken CUDA setup inside vllm's import
            raise ImportError("VLLM needs the vllm package (pip install 'rasfast[vllm]'; it needs a GPU). "
                              f"Importing it failed: {type(e).__name__}: {e}") from e
        if not isinstance(model, str) or not model:
            raise ValueError(f"model: expected a model path or name, got {model!r}")
        self._vllm = vllm
        self.engine = vllm.LLM(model=model, enable_prompt_embeds=enable_prompt_embeds, seed=seed, **engine_kwargs)

    def generate(self, prompts: Sequence[Prompt], max_new_tokens: int = 128,
                 stop: Optional[Sequence[str]] = None, temperature: float = 0.0) -> List[str]:
        """One completion per prompt in input order; text, chat and embedding prompts may mix."""
        import torch

        stop = check_generate_args(prompts, max_new_tokens, stop, temperature)
        params = self._vllm.SamplingParams(max_tokens=max_new_tokens, temperature=float(temperature), stop=stop)
        texts: List[Optional[str]] = [None] * len(prompts)
        plain, chats = [], []
        for i, p in enumerate(prompts):
            if isinstance(p, torch.Tensor):
                if p.dim() != 2 or p.shape[0] == 0:
                    raise ValueError(f"prompts[{i}]: an embedding prompt must be [length, hidden], got {tuple(p.shape)}")
                plain.append((i, {"prompt_embeds": p.detach().cpu()}))
            elif isinstance(p, str):
                plain.append((i, p))
            else:
                chats.append((i, as_messages(p)))
        if plain:
            outs = self.engine.generate([p for _, p in plain], params, use_tqdm=False)
            for (i, _), o in zip(plain, outs):
                texts[i] = o.outputs[0].text
        if chats:
            outs = self.engine.chat([m for _, m in chats], params, use_tqdm=False)
            for (i, _), o in zip(chats, outs):
                texts[i] = o.outputs[0].text
        return [cut_at_stop(t or "", stop) for t in texts]
