"""Training the GraphLLM on a real base model (``rasfast graphllm train``), and loading a
trained one back (``--llm graphllm:DIR``).

What trains (RAS, section 4 / Appendix C): the graph encoder (``rasfast.GraphEncoder``:
TransformerConv layers over question graphs whose node and edge features are text-encoder
embeddings), the projector (graph vector -> one soft token in the LM's embedding space) and
a LoRA adapter on the frozen base LM, together, on planner and answerer samples mixed
(multi-task). ``graph_token=False`` trains the paper's "No GraphToken" variant (LoRA only,
no soft token in the input).

A run directory holds:

- ``train_config.json``: the :class:`TrainConfig` (base model, text encoder, encoder sizes,
  LoRA, optimisation) and what the data was;
- the trained weights (``graph_llm.json``, ``modules.pt``, ``adapter/``: GraphLLM.save);
- ``checkpoint/``: the newest resumable state (weights, optimizer, step, losses), written
  every ``checkpoint_every`` steps through a temporary directory and a rename, so an
  interrupted run resumes from its last checkpoint with the same batch order;
- ``loss_curve.json`` (per-step loss, tokens, seconds; tokens per second) and
  ``loss_curve.png`` (when matplotlib is installed).
"""
from __future__ import annotations

import json
import math
import os
import random
import shutil
import sys
import time
from dataclasses import asdict, dataclass, field, fields
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import torch

from .training_data import GraphLLMSample


@dataclass
class TrainConfig:
    """Everything that defines a GraphLLM run (saved as ``train_config.json``)."""
    base: str = "smollm2"                 # load_base_model spec: smollm2 | qwen2.5-coder-1.5b | PATH.gguf | DIR
    text_encoder: str = "minilm"          # node/edge features: minilm (384-d) | hashing
    graph_hidden: int = 256               # GraphEncoder width (RAS: 1024)
    graph_heads: int = 4                  # (RAS: 8)
    graph_layers: int = 2                 # (RAS: 3)
    projector_hidden: int = 2048          # RAS: 2048
    lora_r: int = 8                       # RAS: r=8, alpha=16, dropout 0.05 on q/v
    lora_alpha: int = 16
    lora_dropout: float = 0.05
    graph_token: bool = True              # False: the paper's "No GraphToken" (LoRA only)
    chat_format: bool = True              # wrap instructions in the base model's chat template
    max_length: int = 512
    max_subgraphs: Optional[int] = None
    batch_size: int = 4
    lr: float = 2e-4
    warmup_steps: int = 10
    epochs: int = 1
    max_steps: Optional[int] = None
    seed: int = 0
    checkpoint_every: int = 25
    max_grad_norm: float = 1.0

    @classmethod
    def from_dict(cls, d: Dict[str, Any]) -> "TrainConfig":
        names = {f.name for f in fields(cls)}
        unknown = sorted(set(d) - names)
        if unknown:
            raise ValueError(f"train config: unknown field(s) {', '.join(unknown)}")
        return cls(**d)


def make_text_encoder(name: str):
    """The text encoder a question graph's features come from; ``minilm`` falls back to the
    hashing encoder when all-MiniLM-L6-v2 is not installed (the config then names what ran)."""
    from ..encode import make_encoder
    return make_encoder(name)


def _encoder_name(enc) -> str:
    n = getattr(enc, "name", type(enc).__name__)
    return "hashing" if str(n).startswith("hashing") else "minilm" if "MiniLM" in str(n) or "minilm" in str(n).lower() else str(n)


def build_graph_llm(cfg: TrainConfig, base: Optional[Tuple[Any, Any]] = None, device=None, dtype="auto",
                    text_encoder=None):
    """``(GraphLLM, text_encoder, base_info)`` for ``cfg``, untrained (random encoder and
    projector, fresh LoRA). ``base``: an already loaded ``(model, tokenizer)`` (it is wrapped
    with LoRA in place), else ``cfg.base`` is loaded."""
    from ..models.graph_encoder import GraphEncoder
    from .graph_llm import GraphLLM, LoraSettings, chat_prompts, check_dims, load_base_model
    info: Dict[str, Any] = {}
    if base is None:
        model, tok, info = load_base_model(cfg.base, device=device, dtype=dtype)
    else:
        model, tok = base
    text = text_encoder or make_text_encoder(cfg.text_encoder)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(cfg.seed)
        enc = GraphEncoder(in_channels=text.dim, hidden=cfg.graph_hidden, heads=cfg.graph_heads,
                           num_layers=cfg.graph_layers, edge_dim=text.dim, llm_hidden=None)
    check_dims(model, enc, text_dim=text.dim)
    ins, cues = chat_prompts(tok) if cfg.chat_format else (None, None)
    lora = LoraSettings(cfg.lora_r, cfg.lora_alpha, cfg.lora_dropout) if cfg.lora_r > 0 else None
    g = GraphLLM(model, tok, enc, projector_hidden=cfg.projector_hidden, lora=lora, max_length=cfg.max_length,
                 max_subgraphs=cfg.max_subgraphs, instructions=ins, cues=cues, device=device, dtype=dtype,
                 seed=cfg.seed, graph_token=cfg.graph_token)
    return g, text, info


def load_trained(path: str, device=None, dtype="auto", base: Optional[Tuple[Any, Any]] = None):
    """``(GraphLLM, text_encoder, TrainConfig)`` from a run directory of :func:`train`."""
    cfg_path = os.path.join(path, "train_config.json")
    if not os.path.isfile(cfg_path):
        raise FileNotFoundError(f"{path}: not a GraphLLM run directory (train_config.json missing; "
                                "make one with `rasfast graphllm train`)")
    with open(cfg_path) as f:
        rec = json.load(f)
    cfg = TrainConfig.from_dict(rec["config"])
    g, text, _ = build_graph_llm(cfg, base=base, device=device, dtype=dtype)
    g.load(path)
    return g, text, cfg


# -- graphs of the samples ----------------------------------------------------------------------
class GraphBuilder:
    """Sample graphs as the JSONL holds them (a list of per-step triple lists) -> the list of
    ``QuestionGraph`` the GraphEncoder reads (an empty step is skipped; no triples at all ->
    None, the empty graph). Each distinct step is built once."""

    def __init__(self, text_encoder, cache_size: int = 50_000):
        from ..encode import CachedEncoder
        self.text = text_encoder if isinstance(text_encoder, CachedEncoder) else CachedEncoder(text_encoder)
        self.cache: Dict[Tuple, Any] = {}
        self.cache_size = cache_size

    def __call__(self, graph):
        from ..models.question_graph import build_question_graph
        if graph is None or isinstance(graph, torch.Tensor):
            return graph
        out = []
        for step in graph:
            key = tuple(tuple(t) for t in step)
            if not key:
                continue
            if key not in self.cache:
                if len(self.cache) >= self.cache_size:
                    self.cache.clear()
                self.cache[key] = build_question_graph(list(key), self.text)
            out.append(self.cache[key])
        return out or None

    def samples(self, samples: Sequence[GraphLLMSample]) -> List[GraphLLMSample]:
        return [GraphLLMSample(s.task, s.question, list(s.context), self(s.graph), s.target) for s in samples]


# -- the loop -----------------------------------------------------------------------------------
def _order(n: int, seed: int, epoch: int) -> List[int]:
    idx = list(range(n))
    random.Random(seed * 1_000_003 + epoch).shuffle(idx)
    return idx


def _lr_at(step: int, cfg: TrainConfig, total: int) -> float:
    """Linear warm-up, then linear decay to 10% at the last step (a function of the step,
    so a resumed run continues the same schedule)."""
    if cfg.warmup_steps and step < cfg.warmup_steps:
        return cfg.lr * (step + 1) / cfg.warmup_steps
    rest = max(1, total - cfg.warmup_steps)
    return cfg.lr * (1.0 - 0.9 * min(1.0, (step - cfg.warmup_steps) / rest))


def _save_checkpoint(g, opt, state: Dict[str, Any], out: str) -> None:
    tmp = os.path.join(out, "checkpoint.tmp")
    final = os.path.join(out, "checkpoint")
    shutil.rmtree(tmp, ignore_errors=True)
    g.save(tmp)
    torch.save({"optimizer": opt.state_dict(), "torch_rng": torch.get_rng_state()}, os.path.join(tmp, "optimizer.pt"))
    with open(os.path.join(tmp, "state.json"), "w") as f:
        json.dump(state, f)
    old = os.path.join(out, "checkpoint.old")
    shutil.rmtree(old, ignore_errors=True)
    if os.path.isdir(final):
        os.replace(final, old)
    os.replace(tmp, final)
    shutil.rmtree(old, ignore_errors=True)


@torch.no_grad()
def mean_loss(g, samples: Sequence[GraphLLMSample], batch_size: int = 8) -> float:
    """Mean per-batch loss over ``samples`` (eval mode, no dropout)."""
    g.eval()
    vals = [float(g.loss(samples[s:s + batch_size])) for s in range(0, len(samples), batch_size)]
    return sum(vals) / max(len(vals), 1)


def train(samples: Sequence[GraphLLMSample], cfg: TrainConfig, out: str, resume: bool = True,
          progress: bool = True, base: Optional[Tuple[Any, Any]] = None, device=None, dtype="auto",
          data_info: Optional[Dict[str, Any]] = None, eval_samples: Optional[Sequence[GraphLLMSample]] = None,
          log: Callable[[str], None] = lambda m: print(m, file=sys.stderr), graph_llm=None,
          text_encoder=None) -> Dict[str, Any]:
    """Trains a GraphLLM on ``samples`` (graphs as per-step triple lists) into ``out``;
    returns the run record (also written as ``loss_curve.json``). With ``resume`` and a
    ``checkpoint/`` in ``out`` written with the same config, training continues from it.
    ``eval_samples``: a held-out set whose mean loss is measured before and after."""
    if not samples:
        raise ValueError("samples: expected a non-empty training set")
    os.makedirs(out, exist_ok=True)
    info: Dict[str, Any] = {}
    if graph_llm is None:
        g, text, info = build_graph_llm(cfg, base=base, device=device, dtype=dtype)
    else:
        g, text = graph_llm, text_encoder
    builder = GraphBuilder(text)
    spe = math.ceil(len(samples) / cfg.batch_size)
    total = cfg.max_steps if cfg.max_steps is not None else cfg.epochs * spe
    if total < 1:
        raise ValueError(f"max_steps: expected >= 1, got {total}")
    opt = torch.optim.AdamW(g.trainable_parameters(), lr=cfg.lr, weight_decay=0.0)
    rec_cfg = {"config": asdict(cfg), "data": data_info or {}, "base": info,
               "text_encoder": _encoder_name(text), "text_dim": text.dim}
    state: Dict[str, Any] = {"step": 0, "losses": [], "input_tokens": [], "target_tokens": [], "seconds": [],
                             "lr": [], "n_samples": len(samples), "samples_seen": 0}
    ck = os.path.join(out, "checkpoint")
    if resume and os.path.isdir(ck):
        with open(os.path.join(ck, "state.json")) as f:
            st = json.load(f)
        if st.get("config") != asdict(cfg) or st.get("n_samples") != len(samples):
            raise ValueError(f"{ck}: written by a run with another config or data ({st.get('n_samples')} samples); "
                             "use another --out or --no-resume")
        g.load(ck)
        extra = torch.load(os.path.join(ck, "optimizer.pt"), weights_only=False)
        opt.load_state_dict(extra["optimizer"])
        torch.set_rng_state(extra["torch_rng"])
        state = {k: v for k, v in st.items() if k != "config"}
        log(f"resumed from {ck} at step {state['step']} of {total}")
    with open(os.path.join(out, "train_config.json"), "w") as f:
        json.dump(rec_cfg, f, indent=1)
    eval_before = None
    if eval_samples and state["step"] == 0:
        eval_before = mean_loss(g, builder.samples(eval_samples), cfg.batch_size)
        state["eval_loss_before"] = eval_before
        log(f"held-out loss before training: {eval_before:.4f} ({len(eval_samples)} samples)")
    bar = None
    if progress:
        from tqdm import tqdm
        bar = tqdm(total=total, initial=state["step"], desc="graphllm train", unit="step", file=sys.stderr)
    step = state["step"]
    while step < total:
        epoch, k = divmod(step, spe)
        order = _order(len(samples), cfg.seed, epoch)
        batch = builder.samples([samples[i] for i in order[k * cfg.batch_size:(k + 1) * cfg.batch_size]])
        lr = _lr_at(step, cfg, total)
        for grp in opt.param_groups:
            grp["lr"] = lr
        t0 = time.perf_counter()
        st: Dict[str, int] = {}
        g.train()
        if g.graph_encoder is not None and not g.train_graph_encoder:
            g.graph_encoder.eval()
        loss = g.loss(batch, st)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        if cfg.max_grad_norm:
            torch.nn.utils.clip_grad_norm_(g.trainable_parameters(), cfg.max_grad_norm)
        opt.step()
        g.eval()
        dt = time.perf_counter() - t0
        step += 1
        state["step"] = step
        state["losses"].append(float(loss.detach()))
        state["input_tokens"].append(st.get("input_tokens", 0))
        state["target_tokens"].append(st.get("target_tokens", 0))
        state["seconds"].append(round(dt, 4))
        state["lr"].append(lr)
        state["samples_seen"] = state.get("samples_seen", 0) + len(batch)
        if bar is not None:
            recent = state["losses"][-10:]
            tps = sum(state["input_tokens"][-10:]) / max(sum(state["seconds"][-10:]), 1e-9)
            bar.set_postfix(loss=f"{sum(recent) / len(recent):.3f}", tok_s=f"{tps:.0f}")
            bar.update(1)
        if step % cfg.checkpoint_every == 0 or step == total:
            _save_checkpoint(g, opt, dict(state, config=asdict(cfg)), out)
    if bar is not None:
        bar.close()
    g.save(out)
    if eval_samples:
        state["eval_loss_after"] = mean_loss(g, builder.samples(eval_samples), cfg.batch_size)
        state["eval_samples"] = len(eval_samples)
        log(f"held-out loss after training: {state['eval_loss_after']:.4f}")
    secs = sum(state["seconds"])
    run = dict(state, total_steps=total, train_seconds=round(secs, 2),
               tokens_per_second=round(sum(state["input_tokens"]) / secs, 2) if secs else None,
               target_tokens_per_second=round(sum(state["target_tokens"]) / secs, 2) if secs else None,
               samples_per_second=round(state["samples_seen"] / secs, 4) if secs else None,
               torch_threads=torch.get_num_threads(), config=asdict(cfg))
    with open(os.path.join(out, "loss_curve.json"), "w") as f:
        json.dump(run, f, indent=1)
    png = plot_loss(run, os.path.join(out, "loss_curve.png"))
    run["png"] = png
    return run


def plot_loss(run: Dict[str, Any], path: str) -> Optional[str]:
    """The loss per step and its running mean as a PNG; None when matplotlib is missing."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    losses = run["losses"]
    w = max(1, min(20, len(losses) // 5))
    smooth = [sum(losses[max(0, i - w + 1):i + 1]) / len(losses[max(0, i - w + 1):i + 1]) for i in range(len(losses))]
    fig, ax = plt.subplots(figsize=(7, 4))
    ax.plot(range(1, len(losses) + 1), losses, lw=0.8, alpha=0.45, label="batch loss")
    ax.plot(range(1, len(losses) + 1), smooth, lw=2, label=f"running mean ({w})")
    for key, style in (("eval_loss_before", ":"), ("eval_loss_after", "--")):
        if run.get(key) is not None:
            ax.axhline(run[key], ls=style, color="k", lw=1, label=key.replace("_", " "))
    cfg = run.get("config", {})
    ax.set_xlabel("step")
    ax.set_ylabel("cross-entropy (target tokens)")
    ax.set_title(f"GraphLLM on {cfg.get('base', '?')} (graph token {'on' if cfg.get('graph_token', True) else 'off'}), "
                 f"{run.get('tokens_per_second') or 0:.0f} input tok/s", fontsize=9)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


__all__ = ["TrainConfig", "build_graph_llm", "load_trained", "GraphBuilder", "train", "mean_loss", "plot_loss",
           "make_text_encoder"]
