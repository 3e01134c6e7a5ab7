"""DPO training of an LLM router: the written-out loss, LoRA on a tiny random Llama built in
code, the loss decreasing and the trained model preferring the chosen type."""
import pytest
import torch

from llm_util import torch_threads
from rasfast.systems.structrag import STRUCTURE_TYPES
from rasfast.systems.structrag.dpo import DPORouterTrainer, LogProbRouter, dpo_loss, sequence_logprobs

pytestmark = pytest.mark.timeout(120)


def test_dpo_loss_matches_formula():
    pc, pr = torch.tensor([-1.0, -2.0]), torch.tensor([-3.0, -1.0])
    rc, rr = torch.tensor([-2.0, -2.0]), torch.tensor([-2.0, -2.0])
    loss, cr, rj = dpo_loss(pc, pr, rc, rr, beta=0.5)
    z = 0.5 * ((pc - rc) - (pr - rr))
    assert torch.allclose(loss, -torch.log(torch.sigmoid(z)).mean())
    assert torch.allclose(cr, 0.5 * (pc - rc)) and torch.allclose(rj, 0.5 * (pr - rr))
    # equal policy and reference: log 2
    assert abs(float(dpo_loss(rc, rr, rc, rr)[0]) - float(torch.log(torch.tensor(2.0)))) < 1e-6


# a routing task no prompt-independent ranking of the types can solve: the same two types,
# preferred one way for counting questions and the other way for chain questions
PAIRS = [("How many staff do Acme and Zeta have in total?", '"Acme report" "Zeta report"', "table", "graph"),
         ("What is the average revenue of the three firms?", '"Firm reports"', "table", "graph"),
         ("Who founded the company where Mira works?", '"Mira Okonkwo" "Velora Studios"', "graph", "table"),
         ("In which city was the mentor of Harlan born?", '"Harlan Vey" "Oskarby"', "graph", "table")]


def test_dpo_trains_lora_router_on_tiny_llama():
    from rasfast.llm.tiny import tiny_llama
    from rasfast.types import RetrievedPassage
    from rasfast.systems.structrag.dpo import _prompt
    from rasfast.systems.structrag.prompts import ROUTER_INSTRUCTION
    with torch_threads(1):
        # the tokenizer learns the prompt's words, so sequences stay short (fast on a CPU)
        model, tok = tiny_llama(texts=[ROUTER_INSTRUCTION, *STRUCTURE_TYPES] + [p[0] for p in PAIRS], seed=0)
        tr = DPORouterTrainer(model, tok, beta=0.5, lr=1e-2, seed=0)   # LoRA r=8, alpha=16 on q/v
        ref_c, ref_r = tr.reference_logps(PAIRS)
        before = LogProbRouter(tr.model, tok).route([(q, []) for q, *_ in PAIRS])
        losses = tr.fit(PAIRS, epochs=20, batch_size=4)
        assert losses[0] == pytest.approx(float(torch.log(torch.tensor(2.0))), abs=1e-3)  # policy == ref at start
        assert losses[-1] < 0.6 * losses[0]
        assert all(b <= a + 0.05 for a, b in zip(losses, losses[3:]))   # decreasing (small Adam wiggles)
        pp = [_prompt(q, c) for q, c, _, _ in PAIRS]
        with torch.no_grad():
            pc = sequence_logprobs(tr.model, tok, pp, [" " + p[2] for p in PAIRS])
            pr = sequence_logprobs(tr.model, tok, pp, [" " + p[3] for p in PAIRS])
        assert torch.all(pc > pr)                          # the policy prefers every chosen type
        assert torch.all((pc - pr) > (ref_c - ref_r))      # more than the reference did
        # scoring all five type words, the trained router picks the chosen one
        items = [(q, [RetrievedPassage(0, t.strip('"'), "x") for t in c.split('" "')]) for q, c, _, _ in PAIRS]
        got = tr.router().route(items)
        assert got == [p[2] for p in PAIRS] and before != got
        # the base weights never trained: with the adapter off the model is the reference
        now_c, now_r = tr.reference_logps(PAIRS)
        assert torch.allclose(now_c, ref_c, atol=1e-4) and torch.allclose(now_r, ref_r, atol=1e-4)


def test_dpo_rejects_bad_pairs():
    from rasfast.llm.tiny import tiny_llama
    model, tok = tiny_llama(seed=1)
    tr = DPORouterTrainer(model, tok)
    with pytest.raises(ValueError, match="pairs"):
        tr.fit([("q", "c", "table", "table")])
    with pytest.raises(ValueError, match="pairs"):
        tr.fit([("q", "c", "tree", "table")])
    with pytest.raises(ValueError, match="beta"):
        DPORouterTrainer(model, tok, beta=0)


def test_structrag_over_a_local_hf_model_survives_gibberish():
    """Every stage through HFCausalLM on a tiny random Llama: its text is gibberish, which
    exercises the fallbacks (unknown route -> chunk, malformed structures kept as text)."""
    from rasfast.llm.hf import HFCausalLM
    from rasfast.llm.tiny import tiny_llama
    from rasfast.systems.structrag import HybridStructurizer, LLMRouter, StructRAG, Utilizer
    from rasfast.systems.structrag import prompts as P
    with torch_threads(1):
        # a tokenizer that knows the prompts' words keeps the sequences short on a CPU
        from rasfast.llm.reader import ANSWER_SHAPE, READER_SYSTEM
        texts = [P.ROUTER_INSTRUCTION, P.DECOMPOSE_INSTRUCTION, ANSWER_SHAPE, READER_SYSTEM,
                 *P.STRUCTURIZER_INSTRUCTIONS.values(), *P.EXTRACT_INSTRUCTIONS.values()]
        model, tok = tiny_llama(texts=texts, seed=3)
        llm = HFCausalLM(model, tok)
        sr = StructRAG(llm, router=LLMRouter(llm, few_shot=False),
                       structurizer=HybridStructurizer(llm, llm_chunks=True, max_new_tokens=8),
                       utilizer=Utilizer(llm, max_new_tokens=8, answer_tokens=4))
        res = sr.run_batch(["Who founded Velora?", "How many staff?"],
                           [["Velora Studios was founded by Mira."], [("Acme", "Acme has 120 staff.")]])
    assert all(r.ok for r in res), [r.error for r in res]
    assert all(r.structure_type in STRUCTURE_TYPES for r in res)
    assert sr.stats["route_fallback"] == sum(r.route_fallback for r in res)
    assert all(len(r.structures) == 1 and isinstance(r.answer, str) for r in res)
