"""The decoding loop shared by HFCausalLM and GraphLLM: batched generation from input
embeddings with left padding, an explicit attention mask and position ids (so a padded row
decodes exactly like the same row alone), a KV cache, greedy or temperature sampling, EOS
and stop strings per row."""
from __future__ import annotations

from typing import Callable, List, Optional, Sequence

import torch

from ..ops._deferred import to_device


def left_pad(embeds: Sequence[torch.Tensor]):
    """Stack ``[L_i, H]`` tensors as ``[B, max L, H]`` padded on the left, with the
    attention mask and the position ids (0 at each row's first real token)."""
    B, L = len(embeds), max(int(e.shape[0]) for e in embeds)
    H = embeds[0].shape[-1]
    out = embeds[0].new_zeros((B, L, H))
    mask = torch.zeros((B, L), dtype=torch.long, device=embeds[0].device)
    for i, e in enumerate(embeds):
        n = int(e.shape[0])
        out[i, L - n:] = e
        mask[i, L - n:] = 1
    pos = (mask.cumsum(-1) - 1).clamp(min=0)
    return out, mask, pos


@torch.no_grad()
def generate_from_embeds(model, embeds: Sequence[torch.Tensor], max_new_tokens: int,
                         eos_ids: Sequence[int], pad_id: int, temperature: float = 0.0,
                         stop: Optional[Sequence[str]] = None,
                         decode: Optional[Callable[[List[int]], str]] = None,
                         generator: Optional[torch.Generator] = None) -> List[List[int]]:
    """New token ids per row (EOS excluded). ``decode`` is needed when ``stop`` is given:
    a row stops once its decoded text contains a stop string (the caller cuts it)."""
    if not embeds:
        return []
    x, mask, pos = left_pad(embeds)
    emb = model.get_input_embeddings()
    B = x.shape[0]
    try:  # only the last position's logits are needed; older/custom models lack the argument
        out = model(inputs_embeds=x, attention_mask=mask, position_ids=pos, use_cache=True, logits_to_keep=1)
    except TypeError:
        out = model(inputs_embeds=x, attention_mask=mask, position_ids=pos, use_cache=True)
    cache = out.past_key_values
    new: List[List[int]] = [[] for _ in range(B)]
    eos_set = set(int(t) for t in eos_ids)
    # A step reads the device once: every row's token, in one transfer. EOS, stop strings and
    # the finished rows are host bookkeeping; the device keeps only the mask that feeds a
    # finished row pad_id, copied over (pinned, non-blocking) when a row finishes. Before:
    # B + 2 reads a step (a nonzero, one per row's token, and done.all()).
    finished = [False] * B
    done = torch.zeros(B, dtype=torch.bool, device=x.device)
    for step in range(max_new_tokens):
        logits = out.logits[:, -1, :].float()
        if temperature > 0:
            probs = torch.softmax(logits / temperature, dim=-1)
            tok = torch.multinomial(probs, 1, generator=generator).squeeze(1)
        else:
            tok = logits.argmax(-1)
        tok = torch.where(done, torch.full_like(tok, pad_id), tok)
        changed = False
        for i, t in enumerate(tok.tolist()):
            if finished[i]:
                continue
            if t in eos_set:
                finished[i] = changed = True
                continue
            new[i].append(t)
            if stop and decode is not None and any(s in decode(new[i]) for s in stop):
                finished[i] = changed = True
        if all(finished) or step == max_new_tokens - 1:
            break
        if changed:
            done = to_device(torch.tensor(finished), x.device)
        mask = torch.cat([mask, mask.new_ones((B, 1))], dim=1)
        pos = pos[:, -1:] + 1
        out = model(inputs_embeds=emb(tok[:, None]).to(x.dtype), attention_mask=mask, position_ids=pos,
                    past_key_values=cache, use_cache=True)
        cache = out.past_key_values
    return new
