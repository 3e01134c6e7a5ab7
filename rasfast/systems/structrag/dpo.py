"""DPO training of an LLM router with a LoRA adapter, and a router that scores types.

The paper trains its router (Qwen2-7B) with DPO on synthesized preference pairs
(question, core content, chosen type, rejected type). This module writes the DPO loss out
(Rafailov et al. 2023) rather than depending on ``trl``:

    loss = -log sigmoid( beta * [ (log pi(chosen|x) - log ref(chosen|x))
                                - (log pi(rejected|x) - log ref(rejected|x)) ] )

where ``pi`` is the causal LM with a trainable peft LoRA adapter and ``ref`` the same model
with the adapter disabled (frozen: the base weights never train), and ``log pi(y|x)`` is the
sum of the completion tokens' log-probabilities after the router prompt.

:class:`LogProbRouter` routes with any causal LM (trained or not) by scoring the five type
words after the prompt and taking the best, so even a small model always names a valid type.
"""
from __future__ import annotations

from typing import List, Sequence, Tuple

from ...types import RetrievedPassage
from .prompts import router_text
from .router import core_content
from .types import STRUCTURE_TYPES

Pair = Tuple[str, str, str, str]   # (question, core content, chosen type, rejected type)


def dpo_loss(policy_chosen, policy_rejected, ref_chosen, ref_rejected, beta: float = 0.1):
    """(mean loss, chosen rewards, rejected rewards) from per-example sequence log-probs."""
    import torch.nn.functional as F
    chosen = beta * (policy_chosen - ref_chosen)
    rejected = beta * (policy_rejected - ref_rejected)
    return -F.logsigmoid(chosen - rejected).mean(), chosen.detach(), rejected.detach()


def _prompt(question: str, core: str) -> str:
    return router_text(question, core) + "\n"


def sequence_logprobs(model, tokenizer, prompts: Sequence[str], completions: Sequence[str]):
    """Sum of log p(completion token | prefix) per (prompt, completion), as a [B] tensor
    (with grad when the model has trainable parameters in train mode)."""
    import torch
    dev = next(model.parameters()).device
    rows, starts = [], []
    for p, c in zip(prompts, completions):
        pi = tokenizer(p)["input_ids"]
        ci = tokenizer(c, add_special_tokens=False)["input_ids"]
        if not ci:
            raise ValueError(f"completions: {c!r} tokenizes to nothing")
        rows.append(pi + ci)
        starts.append(len(pi))
    L = max(len(r) for r in rows)
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    ids = torch.full((len(rows), L), pad, dtype=torch.long)
    mask = torch.zeros((len(rows), L), dtype=torch.long)
    tgt = torch.zeros((len(rows), L), dtype=torch.bool)
    for b, (r, s) in enumerate(zip(rows, starts)):
        ids[b, :len(r)] = torch.tensor(r)
        mask[b, :len(r)] = 1
        tgt[b, s:len(r)] = True
    ids, mask, tgt = ids.to(dev), mask.to(dev), tgt.to(dev)
    logits = model(input_ids=ids, attention_mask=mask).logits[:, :-1].float()
    logp = torch.log_softmax(logits, -1).gather(-1, ids[:, 1:, None])[..., 0]
    return (logp * tgt[:, 1:]).sum(-1)


class DPORouterTrainer:
    """Trains a LoRA adapter on a causal LM so it prefers the chosen structure type.

    Args:
        model, tokenizer: a transformers causal LM (e.g. ``rasfast.llm.tiny_llama()``).
        beta: DPO temperature.
        lora: :class:`rasfast.llm.LoraSettings` (default r=8, alpha=16 on q/v projections).
    """

    def __init__(self, model, tokenizer, beta: float = 0.1, lr: float = 5e-3, lora=None, seed: int = 0):
        import torch
        from peft import LoraConfig, get_peft_model
        from ...llm.graph_llm import LoraSettings
        if not (isinstance(beta, (int, float)) and beta > 0):
            raise ValueError(f"beta: expected a number > 0, got {beta!r}")
        lora = lora or LoraSettings()
        torch.manual_seed(seed)
        cfg = LoraConfig(r=lora.r, lora_alpha=lora.alpha, lora_dropout=0.0,
                         target_modules=list(lora.target_modules), task_type="CAUSAL_LM")
        self.model = get_peft_model(model, cfg)
        self.tokenizer = tokenizer
        self.beta = beta
        self.opt = torch.optim.AdamW([p for p in self.model.parameters() if p.requires_grad], lr=lr)

    def _logps(self, pairs: Sequence[Pair]):
        prompts = [_prompt(q, c) for q, c, _, _ in pairs]
        ch = sequence_logprobs(self.model, self.tokenizer, prompts, [" " + p[2] for p in pairs])
        rj = sequence_logprobs(self.model, self.tokenizer, prompts, [" " + p[3] for p in pairs])
        return ch, rj

    def reference_logps(self, pairs: Sequence[Pair]):
        """The frozen reference: the base model, adapter disabled, no grad."""
        import torch
        with torch.no_grad(), self.model.disable_adapter():
            return self._logps(pairs)

    def fit(self, pairs: Sequence[Pair], epochs: int = 10, batch_size: int = 8) -> List[float]:
        """DPO epochs over ``pairs``; returns the mean loss of each epoch."""
        for n, p in enumerate(pairs):
            if len(p) != 4 or p[2] not in STRUCTURE_TYPES or p[3] not in STRUCTURE_TYPES or p[2] == p[3]:
                raise ValueError(f"pairs[{n}]: expected (question, core_content, chosen, rejected) with two "
                                 f"different types in {STRUCTURE_TYPES}, got {p!r}")
        if not pairs:
            raise ValueError("pairs: nothing to train on")
        pairs = list(pairs)
        refs = [self.reference_logps(pairs[s:s + batch_size]) for s in range(0, len(pairs), batch_size)]
        losses = []
        self.model.train()
        for _ in range(epochs):
            tot = 0.0
            for b, s in enumerate(range(0, len(pairs), batch_size)):
                batch = pairs[s:s + batch_size]
                pc, pr = self._logps(batch)
                loss, _, _ = dpo_loss(pc, pr, refs[b][0], refs[b][1], self.beta)
                self.opt.zero_grad()
                loss.backward()
                self.opt.step()
                tot += float(loss.detach()) * len(batch)
            losses.append(tot / len(pairs))
        self.model.eval()
        return losses

    def router(self) -> "LogProbRouter":
        return LogProbRouter(self.model, self.tokenizer)


class LogProbRouter:
    """Routes by the causal LM's log-probability of each type word after the router prompt."""

    def __init__(self, model, tokenizer, types: Sequence[str] = STRUCTURE_TYPES):
        self.model, self.tokenizer, self.types = model, tokenizer, tuple(types)

    def scores(self, questions: Sequence[str], cores: Sequence[str]):
        """[B, len(types)] completion log-probs."""
        import torch
        prompts = [_prompt(q, c) for q, c in zip(questions, cores)]
        with torch.no_grad():
            cols = [sequence_logprobs(self.model, self.tokenizer, prompts, [" " + t] * len(prompts))
                    for t in self.types]
        return torch.stack(cols, 1)

    def route(self, items: Sequence[Tuple[str, Sequence[RetrievedPassage]]]) -> List[str]:
        if not items:
            return []
        sc = self.scores([q for q, _ in items], [core_content(d) for _, d in items])
        return [self.types[int(i)] for i in sc.argmax(1)]


__all__ = ["dpo_loss", "sequence_logprobs", "DPORouterTrainer", "LogProbRouter"]
