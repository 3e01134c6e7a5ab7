"""GraphLLM on a tiny random Llama (built in code) + LoRA + a stand-in graph encoder."""
import copy

import pytest
import torch

from llm_util import StandInGraphEncoder, torch_threads
from rasfast.llm.graph_llm import IGNORE, GraphLLM, LoraSettings
from rasfast.llm.tiny import tiny_llama, tiny_tokenizer
from rasfast.llm.training_data import (GraphLLMSample, load_samples_jsonl, multitask_samples,
                                       save_samples_jsonl)

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    with torch_threads(1):
        yield


@pytest.fixture(scope="module")
def tok():
    return tiny_tokenizer()


def make(tok, seed=0, enc_seed=0, **kw):
    # initializer_range 0.1: logits of a 0.02-init random model are too flat for a frozen head to learn fast
    model, _ = tiny_llama(hidden_size=32, num_layers=2, num_heads=2, seed=seed, tokenizer=tok, initializer_range=0.1)
    return GraphLLM(model, tok, StandInGraphEncoder(seed=enc_seed), projector_hidden=32, seed=seed, **kw)


def g(*rows):
    return [torch.tensor(r, dtype=torch.float32) for r in rows]


def toy_planning_set():
    chains = [
        ("Where was the founder of Velora born?", ["Where was the founder of Velora born?", "Where was Mira born?"],
         [[("Velora", "founded by", "Mira")], [("Mira", "born in", "Castrell")]], "Castrell"),
        ("Who directed the film Blue Tide?", ["Who directed the film Blue Tide?"],
         [[("Blue Tide", "directed by", "Ana Ruiz")]], "Ana Ruiz"),
        ("What is 2 plus 2?", [], [], "4"),
    ]
    out = []
    for k, (q, subs, steps, a) in enumerate(chains):
        graphs = [g(*[[[k, i, j, 1.0]] for j in range(i + 1)]) for i in range(len(subs))]
        out += multitask_samples(q, subs, steps, a, graphs)
    return out


def samples():
    return [GraphLLMSample("plan", "Who founded Velora?", ["[1] Sub-query: Who founded Velora?\nTriples: (S> Velora| P> founded by| O> Mira)"],
                           g([[1, 2, 3, 4.0]]), None),
            GraphLLMSample("plan", "What is 2 plus 2?"),
            GraphLLMSample("answer", "Where was the founder of Velora, a long question, born?",
                           ["old segment " * 5, "newer segment"], g([[1, 0, 0, 0.0]], [[0, 1, 0, 0.0], [0, 0, 1, 1.0]])),
            GraphLLMSample("answer", "Short?", [], torch.randn(16))]


def test_multitask_format():
    s = toy_planning_set()
    plans = [x.target for x in s if x.task == "plan"]
    assert plans == ["[SUBQ] Where was Mira born?", "[SUFFICIENT]", "[SUFFICIENT]", "[NO_RETRIEVAL]"]
    assert [x.target for x in s if x.task == "answer"] == ["Castrell", "Ana Ruiz", "4"]
    first = s[0]
    assert len(first.context) == 1 and "(S> Velora| P> founded by| O> Mira)" in first.context[0]
    with pytest.raises(ValueError, match="step_triples"):
        multitask_samples("q", ["q"], [], "a")
    with pytest.raises(ValueError, match="task"):
        GraphLLMSample("summarise", "q")
    with pytest.raises(ValueError, match="question"):
        GraphLLMSample("plan", " ")
    with pytest.raises(TypeError, match="context"):
        GraphLLMSample("plan", "q", "not a list")


def test_jsonl_round_trip(tmp_path):
    s = [GraphLLMSample("plan", "q?", ["a"], [[["x", "p", "y"]]], "[SUFFICIENT]")]
    save_samples_jsonl(s, tmp_path / "s.jsonl")
    assert load_samples_jsonl(tmp_path / "s.jsonl") == s
    (tmp_path / "bad.jsonl").write_text('{"task": "plan"}\n')
    with pytest.raises(ValueError, match="bad.jsonl:1"):
        load_samples_jsonl(tmp_path / "bad.jsonl")


def test_forward_backward_labels_and_frozen_base(tok):
    m = make(tok)
    s = toy_planning_set()[:4]
    tokens = m.graph_tokens([x.graph for x in s])
    embeds, labels = m._assemble(s, tokens, 0, with_target=True)
    for x, e, lab in zip(s, embeds, labels):
        assert len(lab) == e.shape[0]
        target = [t for t in lab if t != IGNORE]
        assert target[-1] == m.eos_ids[0]
        assert tok.decode(target[:-1]).strip() == x.target  # only the target is learned
        assert lab[-len(target):] == target and all(t == IGNORE for t in lab[:-len(target)])
    loss = m.loss(s)
    assert torch.isfinite(loss)
    loss.backward()
    lora = [p for n, p in m.model.named_parameters() if "lora_" in n]
    assert lora and all(p.requires_grad for p in lora)
    assert any(p.grad is not None and p.grad.abs().sum() > 0 for p in lora)
    assert all(p.grad is not None and p.grad.abs().sum() > 0 for p in m.projector.parameters())
    assert m.graph_encoder.lin.weight.grad.abs().sum() > 0
    base = [p for n, p in m.model.named_parameters() if "lora_" not in n]
    assert all(not p.requires_grad and p.grad is None for p in base)
    cfg = m.model.peft_config["default"]
    assert (cfg.r, cfg.lora_alpha, cfg.lora_dropout, set(cfg.target_modules)) == (8, 16, 0.05, {"q_proj", "v_proj"})


def test_graph_token_sits_after_prefix_and_matters(tok):
    m = make(tok)
    s = samples()[0]
    prefix, body, _ = m.layout(s)
    tokens = m.graph_tokens([s.graph])
    (e,), _ = m._assemble([s], tokens, 0, False)
    assert e.shape[0] == len(prefix) + 1 + len(body)
    assert torch.equal(e[len(prefix)], tokens[0])
    assert prefix[0] == tok.bos_token_id
    other = copy.copy(s)
    other.graph = g([[9, -9, 9, -9.0]])
    with torch.no_grad():
        a = m.model(inputs_embeds=m.prompt_embeddings([s])[0][None]).logits[0, -1]
        b = m.model(inputs_embeds=m.prompt_embeddings([other])[0][None]).logits[0, -1]
    assert not torch.allclose(a, b)


def test_loss_decreases_on_toy_planning_set(tok):
    m = make(tok)
    data = toy_planning_set()
    with torch.no_grad():
        before = float(m.loss(data))
    losses = m.fit(data, epochs=8, batch_size=len(data), lr=3e-2)
    with torch.no_grad():
        after = float(m.loss(data))
    assert len(losses) == 8 and losses[0] == pytest.approx(before, rel=0.05)
    assert after < before - 0.5 and losses[-1] < losses[0], (before, after, losses)


def test_batch_generation_equals_one_by_one(tok):
    m = make(tok, seed=3)
    s = samples()
    batch = m.generate(s, max_new_tokens=8)
    single = [m.generate([x], max_new_tokens=8)[0] for x in s]
    assert batch == single
    assert m.generate([], max_new_tokens=4) == []
    t = m.timer.summary()
    assert {"graph_llm.graph_encode", "graph_llm.prepare", "graph_llm.generate"} <= set(t)
    assert t["graph_llm.graph_encode"]["count"] == 5


def test_truncation_keeps_the_question(tok):
    m = make(tok)
    q = "Where was the founder of the Velora company born?"
    ctx = [f"[{i}] Sub-query: old fact number {i} about something long and wordy" for i in range(10)]
    s = GraphLLMSample("plan", q, ctx, None)
    full_prefix = m.bos + m._ids(m.instructions["plan"] + "\n")
    question = m._ids(f"\nQuestion: {q}\nNext step:")
    seg = len(m._ids("\n" + ctx[-1]))
    m.max_length = len(full_prefix) + 1 + len(question) + 8 + 2 * seg + 3  # room for ~2 segments
    prefix, body, _ = m.layout(s, reserve=8)
    assert len(prefix) + 1 + len(body) + 8 <= m.max_length
    text = tok.decode(body)
    assert text.endswith(f"Question: {q}\nNext step:")
    assert "number 9" in text and "number 8" in text and "number 0" not in text  # oldest cut first
    assert prefix == full_prefix  # the instruction survives while context can be cut
    # no room for context at all: the instruction tail goes, BOS and question stay
    prefix, body, _ = m.layout(s, reserve=8 + 2 * seg + 10)
    assert prefix[0] == tok.bos_token_id and len(prefix) < len(full_prefix)
    assert tok.decode(body) == f"\nQuestion: {q}\nNext step:"
    with pytest.raises(ValueError, match="does not fit"):
        m.layout(GraphLLMSample("plan", q * 100, ctx), reserve=8)
    before = m.truncated
    out = m.generate([s], max_new_tokens=8)
    assert isinstance(out[0], str) and m.truncated == before + 1


def test_oldest_subgraphs_dropped(tok):
    m = make(tok, max_subgraphs=2)
    m.encode_graphs([g([[1, 0, 0, 0.0]], [[0, 1, 0, 0.0]], [[0, 0, 1, 0.0]])])
    assert m.graph_encoder.calls[-1] == 2
    a = m.encode_graphs([g([[5, 5, 5, 5.0]], [[0, 1, 0, 0.0]], [[0, 0, 1, 0.0]])])
    b = m.encode_graphs([g([[0, 1, 0, 0.0]], [[0, 0, 1, 0.0]])])
    assert torch.equal(a, b)


def test_save_load_round_trip(tok, tmp_path):
    m = make(tok)
    m.fit(toy_planning_set(), epochs=2, batch_size=4, lr=1e-2)
    s = samples()
    want = m.generate(s, max_new_tokens=8)
    with torch.no_grad():
        want_logits = m.model(inputs_embeds=m.prompt_embeddings(s[:1])[0][None]).logits
    m.save(str(tmp_path / "ckpt"))
    fresh = make(tok, enc_seed=7)  # same base LM weights; different encoder, projector untrained
    fresh.load(str(tmp_path / "ckpt"))
    assert fresh.generate(s, max_new_tokens=8) == want
    with torch.no_grad():
        got = fresh.model(inputs_embeds=fresh.prompt_embeddings(s[:1])[0][None]).logits
    assert torch.equal(got, want_logits)
    with pytest.raises(FileNotFoundError, match="graph_llm.json"):
        fresh.load(str(tmp_path / "nothing"))
    model, _ = tiny_llama(hidden_size=32, num_layers=2, num_heads=2, tokenizer=tok, initializer_range=0.1)
    other = GraphLLM(model, tok, StandInGraphEncoder(), projector_hidden=32, lora=LoraSettings(r=4))
    with pytest.raises(ValueError, match="lora"):
        other.load(str(tmp_path / "ckpt"))


def test_bad_inputs(tok):
    model, _ = tiny_llama(hidden_size=32, num_layers=2, num_heads=2, tokenizer=tok)
    with pytest.raises(ValueError, match="graph_dim"):
        GraphLLM(model, tok, torch.nn.Identity())
    with pytest.raises(TypeError, match="llm"):
        GraphLLM(object(), tok, graph_dim=4)
    with pytest.raises(TypeError, match="graph_encoder"):
        GraphLLM(model, tok, graph_encoder=lambda x: x, graph_dim=4)
    m = make(tok)
    with pytest.raises(ValueError, match="graph_dim=16"):
        m.generate([GraphLLMSample("plan", "q", [], torch.zeros(3))])
    with pytest.raises(TypeError, match="GraphLLMSample"):
        m.generate(["plain text"])
    with pytest.raises(ValueError, match="max_new_tokens"):
        m.generate(samples(), max_new_tokens=0)
    with pytest.raises(ValueError, match="target"):
        m.loss([GraphLLMSample("plan", "q")])
    model2, _ = tiny_llama(hidden_size=32, num_layers=2, num_heads=2, tokenizer=tok)
    no_enc = GraphLLM(model2, tok, graph_dim=16, projector_hidden=32)
    with pytest.raises(ValueError, match="graph_encoder"):
        no_enc.generate([GraphLLMSample("plan", "q", [], [[1.0]])])
    assert len(no_enc.generate([GraphLLMSample("plan", "q", [], torch.zeros(16))], max_new_tokens=2)) == 1


def test_export_merged_decodes_the_same_through_an_engine(tok, tmp_path):
    """The LoRA-merged export + embedding prompts (the VLLM path) reproduce GraphLLM's output;
    HFCausalLM loading the export from its path stands in for the vLLM engine here."""
    from rasfast.llm.hf import HFCausalLM
    m = make(tok)
    m.fit(toy_planning_set(), epochs=2, batch_size=8, lr=1e-2)
    m.export_merged(str(tmp_path / "merged"))
    engine = HFCausalLM(str(tmp_path / "merged"))
    s = samples()
    want = m.generate(s, max_new_tokens=6)
    assert m.generate(s, max_new_tokens=6, engine=engine) == want
    assert any("lora_" in n for n, _ in m.model.named_parameters())  # export left the adapter in place


def test_trains_with_the_rasfast_graph_encoder(tok):
    """rasfast.GraphEncoder (autograd path in training): gradients reach its layers, and the
    fused eval path serves generation afterwards."""
    from rasfast import GraphEncoder, build_question_graph
    from rasfast.encode import HashingEncoder
    enc = HashingEncoder(32)
    genc = GraphEncoder(in_channels=32, hidden=16, heads=2, num_layers=2, edge_dim=32)
    model, _ = tiny_llama(hidden_size=32, num_layers=2, num_heads=2, tokenizer=tok, initializer_range=0.1)
    m = GraphLLM(model, tok, genc, projector_hidden=32)
    assert m.graph_dim == 16
    qg = [build_question_graph([("Velora", "founded by", "Mira")], enc),
          build_question_graph([("Mira", "born in", "Castrell")], enc)]
    data = [GraphLLMSample("plan", "Where was Velora's founder born?", [], qg[:1], "[SUBQ] Where was Mira born?"),
            GraphLLMSample("plan", "Where was Velora's founder born?", [], qg, "[SUFFICIENT]")]
    before = genc.convs[0].lin_value.weight.detach().clone()  # (one in-edge per node: queries get no gradient)
    losses = m.fit(data, epochs=3, batch_size=2, lr=1e-2)
    assert all(map(lambda x: x == x, losses))
    assert not torch.equal(before, genc.convs[0].lin_value.weight)
    assert len(m.generate(data, max_new_tokens=3)) == 2
