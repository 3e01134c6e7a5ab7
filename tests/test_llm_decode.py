"""rasfast/llm/_decode.py: the decoding loop of HFCausalLM and GraphLLM, against a per-row
reference, and its device reads: one a step (every row's token in one transfer), not B + 2."""
import types

import pytest
import torch

from rasfast.device_work import count_device_work
from rasfast.llm._decode import generate_from_embeds

V = 13


def successor(t: int) -> int:
    return (3 * t + 1) % V


class StubLM(torch.nn.Module):
    """Greedy next token = successor(the last input's token id); the id rides in feature 0 of
    the input embedding. Prompts end in a chosen id, so each row's sequence is known."""

    def __init__(self):
        super().__init__()
        self.emb = torch.nn.Embedding(V, 3)
        with torch.no_grad():
            self.emb.weight.zero_()
            self.emb.weight[:, 0] = torch.arange(V, dtype=torch.float32)
        self.calls = 0

    def get_input_embeddings(self):
        return self.emb

    def forward(self, inputs_embeds, attention_mask, position_ids, past_key_values=None,
                use_cache=True, logits_to_keep=None):
        self.calls += 1
        last = inputs_embeds[:, -1, 0].round().long()
        nxt = (3 * last + 1) % V  # no one_hot: it reads its input's range on the host
        logits = torch.zeros(last.shape[0], V).scatter_(1, nxt[:, None], 5.0)[:, None, :]
        return types.SimpleNamespace(logits=logits, past_key_values=(past_key_values or 0) + 1)


def reference(starts, max_new, eos, stop, decode):
    out = []
    for t in starts:
        row = []
        for _ in range(max_new):
            t = successor(t)
            if t in eos:
                break
            row.append(t)
            if stop and any(s in decode(row) for s in stop):
                break
        out.append(row)
    return out


def prompts(model, starts, lengths):
    return [model.emb(torch.tensor([1] * (n - 1) + [s])) for s, n in zip(starts, lengths)]


decode = lambda ids: ",".join(map(str, ids))  # noqa: E731


@pytest.mark.parametrize("max_new,eos,stop", [(8, [], None), (8, [5], None), (12, [5, 0], ["12"]),
                                             (1, [5], None), (20, [], ["9,2"])])
def test_matches_a_per_row_reference_with_one_device_read_a_step(max_new, eos, stop):
    model = StubLM()
    starts, lengths = [0, 1, 4, 7, 2, 11], [3, 1, 5, 2, 4, 3]
    want = reference(starts, max_new, set(eos), stop, decode)
    with count_device_work() as work:
        got = generate_from_embeds(model, prompts(model, starts, lengths), max_new, eos, pad_id=0,
                                   stop=stop, decode=decode)
    assert got == want
    steps = max(len(r) for r in want) + 1  # the last step reads the tokens that end the rows
    assert work.syncs <= min(steps, max_new), (work.syncs, steps, work.sync_sites)
    assert model.calls <= min(steps, max_new)  # no forward after every row has finished


def test_finished_rows_are_fed_pad_and_empty_input():
    model = StubLM()
    assert generate_from_embeds(model, [], 5, [5], pad_id=0) == []
    fed = []
    forward = model.forward

    def spy(inputs_embeds, **kw):
        fed.append(inputs_embeds[:, -1, 0].round().long().tolist())
        return forward(inputs_embeds, **kw)
    model.forward = spy
    # row 0: 0 -> 1 -> 4 -> 0 -> ...; EOS 4 ends it after 1 token; row 1 runs on
    got = generate_from_embeds(model, prompts(model, [0, 2], [2, 2]), 4, [4], pad_id=9)
    assert got == reference([0, 2], 4, {4}, None, decode)
    # fed: the prompt, then each step's tokens; row 0's EOS (step 1) is fed as it is, as
    # before, and pad_id from step 2 on
    assert fed[1][0] == 1 and fed[2][0] == 4 and len(fed) == 4
    assert all(step[0] == 9 for step in fed[3:])
