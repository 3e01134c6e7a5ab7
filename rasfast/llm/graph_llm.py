"""``GraphLLM``: RAS's planner/answerer model -- a graph encoder, a projector, and a causal LM
with a peft LoRA adapter, reading the encoded question graph as ONE soft token.

Input embeddings per sample::

    [BOS + instruction] [graph token] [context segments, oldest first] [question + cue] [target]

- The graph token is ``projector(graph_encoder(subgraphs))`` (an empty graph encodes as the
  zero vector), placed right after the instruction prefix.
- Truncation keeps the question: when the input exceeds ``max_length`` (minus room for the
  target or the new tokens), the oldest context segments go first (then the oldest part of
  the next one), then the tail of the instruction; the oldest subgraphs beyond
  ``max_subgraphs`` are dropped before encoding. The question is never cut; if it alone does
  not fit, that is a ValueError.
- Generation is batched with left padding, an explicit attention mask and position ids, so a
  row decodes the same in a batch as alone.
- Training: ``train_step``/``fit`` on the paper's multitask samples (labels -100 except the
  target and EOS); LoRA (r=8, alpha=16, dropout 0.05 on q_proj/v_proj by default), projector
  and graph encoder are trained, the base LM stays frozen.
- ``save``/``load``: the adapter (peft format), projector and encoder weights.
- ``timer`` records per-stage times (graph_encode, prepare, generate; also to a Trace).
- ``graph_token=False``: no soft token in the input (the paper's "No GraphToken" ablation,
  in training or at inference); the loss then reads the text alone.
- A real base model: :func:`load_base_model` loads a packaged GGUF (SmolLM2-135M-Instruct,
  Qwen2.5-Coder-1.5B) or a transformers directory offline, dequantised by transformers, fp32
  on the CPU and bf16 on a GPU; :func:`chat_prompts` wraps the instructions in its chat
  template; :func:`check_dims` (run by the constructor) names the width that disagrees
  between the LM, the graph encoder (and its projector) and the text encoder.
- The loss runs the LM head on the target positions only (``logits_to_keep``).
"""
from __future__ import annotations

import json
import os
import random
from dataclasses import asdict, dataclass
from typing import Any, Dict, List, Optional, Sequence, Tuple

import torch
from torch import nn

from ._decode import generate_from_embeds, left_pad
from ._timing import StageTimer
from .base import check_generate_args, cut_at_stop
from .hf import eos_ids_of, resolve_device, resolve_dtype
from .prompts import GRAPH_CUES, GRAPH_INSTRUCTIONS
from .training_data import GraphLLMSample

IGNORE = -100
_DIM_ATTRS = ("out_dim", "output_dim", "out_channels", "dim", "hidden_dim", "embed_dim")


@dataclass(frozen=True)
class LoraSettings:
    """RAS's LoRA: r=8, alpha=16, dropout 0.05 on the attention query and value projections."""
    r: int = 8
    alpha: int = 16
    dropout: float = 0.05
    target_modules: Tuple[str, ...] = ("q_proj", "v_proj")


def _graph_dim_of(encoder) -> Optional[int]:
    """The output width of a graph encoder: its projector's last Linear when it has one
    (rasfast.GraphEncoder with llm_hidden), else ``hidden`` (rasfast.GraphEncoder) or a
    conventional ``out_dim``-style attribute."""
    proj = getattr(encoder, "projector", None)
    if isinstance(proj, nn.Module):
        lins = [m for m in proj.modules() if isinstance(m, nn.Linear)]
        if lins:
            return lins[-1].out_features
    for a in ("hidden",) + _DIM_ATTRS:
        v = getattr(encoder, a, None)
        if isinstance(v, int) and not isinstance(v, bool) and v > 0:
            return v
    return None


def _encoder_in_dims(encoder) -> Tuple[Optional[int], Optional[int]]:
    """(node feature width, edge feature width) a rasfast.GraphEncoder expects, else (None, None)."""
    convs = getattr(encoder, "convs", None)
    if not isinstance(convs, nn.ModuleList) or not len(convs):
        return None, None
    c0 = convs[0]
    node = c0.lin_query.in_features if isinstance(getattr(c0, "lin_query", None), nn.Linear) else None
    edge = c0.lin_edge.in_features if isinstance(getattr(c0, "lin_edge", None), nn.Linear) else None
    return node, edge


def check_dims(llm: nn.Module, graph_encoder: Optional[nn.Module], graph_dim: Optional[int] = None,
               text_dim: Optional[int] = None) -> None:
    """Checks that the pieces of a GraphLLM fit together, with an error that says which
    dimension disagrees: a graph encoder with its own projector must project to the LM's
    hidden size; ``graph_dim`` must be the encoder's output size; ``text_dim`` (the width of
    the strings' embeddings the question graphs are built with) must be the encoder's node
    and edge input width."""
    hidden = llm.get_input_embeddings().embedding_dim
    if graph_encoder is None:
        return
    proj = getattr(graph_encoder, "projector", None)
    if isinstance(proj, nn.Module):
        lins = [m for m in proj.modules() if isinstance(m, nn.Linear)]
        if lins and lins[-1].out_features != hidden:
            raise ValueError(f"graph_encoder: its projector outputs {lins[-1].out_features} values but the LM's "
                             f"hidden size is {hidden}; build it with llm_hidden={hidden}, or without a projector "
                             "(llm_hidden=None: the GraphLLM has its own)")
    enc_dim = _graph_dim_of(graph_encoder)
    if graph_dim is not None and enc_dim is not None and graph_dim != enc_dim:
        raise ValueError(f"graph_dim={graph_dim} does not match the graph encoder's output size {enc_dim}")
    if text_dim is not None:
        node, edge = _encoder_in_dims(graph_encoder)
        for what, d in (("node", node), ("edge", edge)):
            if d is not None and d != text_dim:
                raise ValueError(f"graph_encoder: expects {what} features of width {d}, but the text encoder "
                                 f"gives {text_dim}; build the encoder with in_channels=edge_dim={text_dim}")


def chat_prompts(tokenizer, instructions: Optional[Dict[str, str]] = None,
                 cues: Optional[Dict[str, str]] = None) -> Tuple[Dict[str, str], Dict[str, str]]:
    """The GraphLLM's instructions and cues wrapped in the tokenizer's chat template (system
    turn = the instruction; user turn = graph token, context and question; the assistant turn
    opens after the cue), so an instruction-tuned base model reads its own format. Found by
    rendering the template around two markers; a tokenizer without a template (or one that
    drops the system turn) gets the plain instructions and cues."""
    instructions = dict(instructions or GRAPH_INSTRUCTIONS)
    cues = dict(cues or GRAPH_CUES)
    if not getattr(tokenizer, "chat_template", None):
        return instructions, cues
    a, b = "\u2063SYS\u2063", "\u2063USER\u2063"
    try:
        text = tokenizer.apply_chat_template([{"role": "system", "content": a}, {"role": "user", "content": b}],
                                             tokenize=False, add_generation_prompt=True)
    except Exception:   # a template that rejects system turns: plain text
        return instructions, cues
    if not isinstance(text, str) or text.count(a) != 1 or text.count(b) != 1 or text.index(a) > text.index(b):
        return instructions, cues
    head, rest = text.split(a)
    mid, tail = rest.split(b)
    bos = tokenizer.bos_token or ""
    if bos and head.startswith(bos):
        head = head[len(bos):]   # the GraphLLM puts the BOS id itself
    return ({k: head + v + mid.rstrip("\n") for k, v in instructions.items()},
            {k: v + tail for k, v in cues.items()})


def load_base_model(spec: str = "smollm2", device=None, dtype="auto"):
    """``(model, tokenizer, info)``: a base causal LM for the GraphLLM, offline.

    ``spec``: a packaged GGUF model name of :mod:`rasfast.llm.local` (``smollm2``:
    SmolLM2-135M-Instruct Q4_1, 98 MB; ``qwen2.5-coder-1.5b``/``default``: Qwen2.5-Coder-1.5B
    Q4_K_M, 1.07 GiB), a ``.gguf`` path, or a transformers checkpoint directory. GGUF weights
    are dequantised by transformers on load (the ``gguf`` package); the model then runs in
    ``dtype`` (``"auto"``: float32 on the CPU, bfloat16 on a GPU that has it). ``info`` says
    what was loaded (path, sha256 of a packaged file, dtype, hidden size, load seconds)."""
    import pathlib
    import time
    from transformers import AutoModelForCausalLM, AutoTokenizer
    t0 = time.perf_counter()
    dev = resolve_device(device)
    dt = resolve_dtype(dtype, dev)
    key = os.fspath(spec)
    info: Dict[str, Any] = {"spec": key}
    if os.path.isdir(key):
        tok = AutoTokenizer.from_pretrained(key)
        model = AutoModelForCausalLM.from_pretrained(key, dtype=dt)
        info["path"] = os.path.abspath(key)
    else:
        from .local import MODELS, resolve_model
        path = pathlib.Path(resolve_model(key))
        if key in MODELS:
            info["sha256"] = MODELS[key].sha256
        try:
            import gguf  # noqa: F401  (transformers' GGUF reader)
        except ImportError:
            raise ImportError("loading a GGUF model in transformers needs the gguf package: "
                              "pip install 'rasfast[llm]' (or pip install gguf)") from None
        tok = AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name)
        model = AutoModelForCausalLM.from_pretrained(str(path.parent), gguf_file=path.name, dtype=dt)
        info["path"] = str(path)
    model = model.to(device=dev, dtype=dt).eval()
    info.update(device=str(dev), dtype=str(dt).replace("torch.", ""), model_type=model.config.model_type,
                hidden_size=model.get_input_embeddings().embedding_dim,
                layers=getattr(model.config, "num_hidden_layers", None),
                parameters=sum(p.numel() for p in model.parameters()),
                load_seconds=round(time.perf_counter() - t0, 2))
    return model, tok, info


class GraphLLM(nn.Module):
    """Graph encoder + projector + LoRA causal LM (see the module docstring).

    Args:
        llm: a transformers causal LM (``PreTrainedModel``); wrapped with LoRA in place.
        tokenizer: its tokenizer.
        graph_encoder: an ``nn.Module`` mapping one graph input (e.g. a list of
            ``QuestionGraph`` subgraphs) to one vector; None to feed precomputed vectors only.
        graph_dim: the encoder's output size (read from the encoder's ``out_dim``/``dim``/...
            when not given).
        projector_hidden: hidden width of Linear -> Sigmoid -> Linear (RAS: 2048).
        lora: LoRA settings, or None for no adapter (then only projector/encoder train).
        max_length: maximum input length in tokens, target or new tokens included.
        max_subgraphs: keep only the newest subgraphs of a list graph input (None: all).
        device, dtype: where the LM runs; ``"auto"`` = bf16/fp16 on GPU, fp32 on CPU (the
            encoder and projector stay float32; the soft token is cast to the LM dtype).
        trace: optional ``rasfast.profile.Trace`` receiving the stage spans.
    """

    def __init__(self, llm: nn.Module, tokenizer, graph_encoder: Optional[nn.Module] = None,
                 graph_dim: Optional[int] = None, projector_hidden: int = 2048,
                 lora: Optional[LoraSettings] = LoraSettings(), max_length: int = 2048,
                 max_subgraphs: Optional[int] = None, train_graph_encoder: bool = True,
                 instructions: Optional[Dict[str, str]] = None, cues: Optional[Dict[str, str]] = None,
                 device=None, dtype="auto", trace=None, seed: Optional[int] = None,
                 graph_token: bool = True):
        super().__init__()
        if not isinstance(llm, nn.Module) or not hasattr(llm, "get_input_embeddings"):
            raise TypeError(f"llm: expected a transformers causal LM module, got {type(llm).__name__}")
        if graph_encoder is not None and not isinstance(graph_encoder, nn.Module):
            raise TypeError(f"graph_encoder: expected an nn.Module or None, got {type(graph_encoder).__name__}")
        enc_dim = _graph_dim_of(graph_encoder) if graph_encoder is not None else None
        if graph_dim is not None and enc_dim is not None and graph_dim != enc_dim:
            raise ValueError(f"graph_dim={graph_dim} does not match the graph encoder's output size {enc_dim} "
                             f"({type(graph_encoder).__name__}); leave graph_dim out or pass {enc_dim}")
        graph_dim = graph_dim or enc_dim
        if not isinstance(graph_dim, int) or graph_dim < 1:
            raise ValueError("graph_dim: expected the graph encoder's output size (int >= 1); pass it when "
                             f"the encoder has no out_dim/dim attribute, got {graph_dim!r}")
        if not isinstance(max_length, int) or max_length < 8:
            raise ValueError(f"max_length: expected an int >= 8, got {max_length!r}")
        if max_subgraphs is not None and (not isinstance(max_subgraphs, int) or max_subgraphs < 1):
            raise ValueError(f"max_subgraphs: expected None or an int >= 1, got {max_subgraphs!r}")
        self.device = resolve_device(device)
        self.dtype = resolve_dtype(dtype, self.device)
        self.tokenizer = tokenizer
        self.graph_dim = graph_dim
        self.projector_hidden = projector_hidden
        self.max_length = max_length
        self.max_subgraphs = max_subgraphs
        self.train_graph_encoder = train_graph_encoder
        self.instructions = dict(instructions or GRAPH_INSTRUCTIONS)
        self.cues = dict(cues or GRAPH_CUES)
        self.lora_settings = lora
        self.timer = StageTimer(trace)
        self.truncated = 0  # samples whose input had to be cut
        self._prefix_ids: Dict[str, List[int]] = {}

        hidden = llm.get_input_embeddings().embedding_dim
        self.hidden_size = hidden
        check_dims(llm, graph_encoder, graph_dim)
        self.graph_token = bool(graph_token)
        llm = llm.to(device=self.device, dtype=self.dtype)
        for p in llm.parameters():
            p.requires_grad_(False)
        if lora is not None:
            from peft import LoraConfig, get_peft_model
            cfg = LoraConfig(task_type="CAUSAL_LM", r=lora.r, lora_alpha=lora.alpha, lora_dropout=lora.dropout,
                             target_modules=list(lora.target_modules))
            llm = get_peft_model(llm, cfg)
        self.model = llm
        gen = torch.random.fork_rng(devices=[])
        with gen:
            if seed is not None:
                torch.manual_seed(seed)
            self.projector = nn.Sequential(nn.Linear(graph_dim, projector_hidden), nn.Sigmoid(),
                                           nn.Linear(projector_hidden, hidden)).to(self.device)
        self.graph_encoder = graph_encoder.to(self.device) if graph_encoder is not None else None
        self.eos_ids = eos_ids_of(self.model, tokenizer)
        if not self.eos_ids:
            raise ValueError("tokenizer: the model/tokenizer define no EOS token")
        pad = tokenizer.pad_token_id
        self.pad_id = int(pad if pad is not None else self.eos_ids[0])
        self.bos = [int(tokenizer.bos_token_id)] if tokenizer.bos_token_id is not None else []
        self.generator = torch.Generator(device=self.device)
        self.eval()

    # -- graph side -----------------------------------------------------------------------
    def encode_graphs(self, graphs: Sequence[Any]) -> torch.Tensor:
        """``[B, graph_dim]`` float32: one vector per graph input (None/empty -> zeros;
        a tensor passes through; a list of subgraphs goes through the graph encoder).

        With a ``rasfast.GraphEncoder`` (no projector of its own), all subgraphs of the batch
        are pooled in ONE fused ``encode_graphs`` call (cached per subgraph) and averaged per
        sample; other encoders are called once per sample."""
        vecs: List[Optional[torch.Tensor]] = [None] * len(graphs)
        todo: List[Tuple[int, Any]] = []
        for i, g in enumerate(graphs):
            if g is None or (isinstance(g, (list, tuple)) and len(g) == 0):
                vecs[i] = torch.zeros(self.graph_dim, device=self.device)
            elif isinstance(g, torch.Tensor):
                vecs[i] = g.to(self.device, torch.float32).reshape(-1)
            else:
                if self.graph_encoder is None:
                    raise ValueError(f"samples[{i}].graph: a graph needs a graph_encoder (or pass a vector)")
                if isinstance(g, (list, tuple)) and self.max_subgraphs is not None:
                    g = list(g)[-self.max_subgraphs:]  # the oldest subgraphs go first
                todo.append((i, g))
        enc = self.graph_encoder
        pooled = callable(getattr(enc, "encode_graphs", None)) and getattr(enc, "projector", None) is None
        if todo and pooled and all(isinstance(g, (list, tuple)) for _, g in todo):
            flat = [sg for _, g in todo for sg in g]
            allv = enc.encode_graphs(flat).to(self.device, torch.float32)
            start = 0
            for i, g in todo:
                vecs[i] = allv[start:start + len(g)].mean(0)
                start += len(g)
        else:
            for i, g in todo:
                vecs[i] = enc(g).to(self.device, torch.float32).reshape(-1)
        for i, v in enumerate(vecs):
            if v.numel() != self.graph_dim:
                raise ValueError(f"samples[{i}].graph: encoded to {v.numel()} values, expected graph_dim={self.graph_dim}")
        return torch.stack(vecs) if vecs else torch.zeros((0, self.graph_dim), device=self.device)

    def graph_tokens(self, graphs: Sequence[Any]) -> torch.Tensor:
        """``[B, hidden]`` soft tokens in the LM dtype."""
        return self.projector(self.encode_graphs(graphs)).to(self.dtype)

    def _tokens_for(self, samples) -> torch.Tensor:
        if not self.graph_token:   # nothing to encode: the token is left out of the input
            return torch.zeros((len(samples), self.hidden_size), device=self.device, dtype=self.dtype)
        return self.graph_tokens([s.graph for s in samples])

    # -- text side ------------------------------------------------------------------------
    def _ids(self, text: str) -> List[int]:
        return list(self.tokenizer(text, add_special_tokens=False)["input_ids"])

    def layout(self, sample: GraphLLMSample, reserve: int = 0, with_target: bool = False
               ) -> Tuple[List[int], List[int], List[int]]:
        """Token ids ``(prefix, body, target)`` after truncation: prefix = BOS + instruction
        (the graph token follows it), body = kept context + question + cue. ``reserve``
        tokens are left free for generation."""
        if not isinstance(sample, GraphLLMSample):
            raise TypeError(f"samples: expected GraphLLMSample items, got {type(sample).__name__}")
        instruction = self.instructions[sample.task] + "\n"
        if instruction not in self._prefix_ids:  # tokenised once per instruction text
            self._prefix_ids[instruction] = self.bos + self._ids(instruction)
        prefix = list(self._prefix_ids[instruction])
        question = self._ids(f"\nQuestion: {sample.question}\n{self.cues[sample.task]}")
        target: List[int] = []
        if with_target:
            if not isinstance(sample.target, str):
                raise ValueError(f"samples: a training sample needs a str target, got {sample.target!r}")
            target = self._ids(" " + sample.target) + [self.eos_ids[0]]
        segs = [self._ids("\n" + c) for c in sample.context]
        budget = self.max_length - reserve - len(prefix) - 1 - len(question) - len(target)
        cut = False
        if budget < 0:  # no room for any context: cut the instruction's tail, never BOS or question
            room = len(prefix) - len(self.bos)
            if -budget > room:
                raise ValueError(f"max_length={self.max_length}: the question ({len(question)} tokens) plus "
                                 f"{'target' if with_target else 'max_new_tokens'} ({len(target) or reserve}) "
                                 "does not fit")
            prefix = prefix[:len(prefix) + budget]
            budget, cut = 0, True
        kept: List[List[int]] = []
        for seg in reversed(segs):  # newest first; the oldest are dropped
            if len(seg) <= budget:
                kept.append(seg)
                budget -= len(seg)
            else:
                if budget > 0:
                    kept.append(seg[len(seg) - budget:])  # the oldest part of this segment goes
                cut = True
                break
        if cut or len(kept) < len(segs):
            self.truncated += 1
        body = [t for seg in reversed(kept) for t in seg] + question
        return prefix, body, target

    def _assemble(self, samples, tokens: torch.Tensor, reserve: int, with_target: bool):
        emb = self.model.get_input_embeddings()
        embeds, labels = [], []
        for s, g in zip(samples, tokens):
            prefix, body, target = self.layout(s, reserve, with_target)
            ids = torch.tensor(prefix + body + target, device=self.device, dtype=torch.long)
            e = emb(ids)
            n = len(prefix)
            if self.graph_token:
                embeds.append(torch.cat([e[:n], g[None].to(e.dtype), e[n:]], dim=0))
            else:   # the paper's "No GraphToken": text only
                embeds.append(e)
            labels.append([IGNORE] * (n + int(self.graph_token) + len(body)) + target)
        return embeds, labels

    # -- inference ------------------------------------------------------------------------
    @torch.no_grad()
    def prompt_embeddings(self, samples: Sequence[GraphLLMSample], reserve: int = 0, trace=None
                          ) -> List[torch.Tensor]:
        """The ``[L_i, hidden]`` input embeddings (graph token included) per sample, with
        ``reserve`` tokens left free -- what an external engine (``VLLM``) generates from."""
        for s in samples:
            if not isinstance(s, GraphLLMSample):
                raise TypeError(f"samples: expected GraphLLMSample items, got {type(s).__name__}")
        self.eval()
        with self.timer.stage("graph_llm.graph_encode", trace):
            tokens = self._tokens_for(samples)
        with self.timer.stage("graph_llm.prepare", trace):
            embeds, _ = self._assemble(samples, tokens, reserve, with_target=False)
        return embeds

    @torch.no_grad()
    def generate(self, samples: Sequence[GraphLLMSample], max_new_tokens: int = 32,
                 stop: Optional[Sequence[str]] = None, temperature: float = 0.0, trace=None,
                 engine=None) -> List[str]:
        """Batched generation with the graph token, one string per sample in order.
        ``engine``: an LLM backend taking embedding prompts (e.g. ``VLLM`` over
        :meth:`export_merged`'s output) to decode with instead of this model."""
        stop = check_generate_args(samples, max_new_tokens, stop, temperature)
        if not samples:
            return []
        embeds = self.prompt_embeddings(samples, max_new_tokens, trace)
        with self.timer.stage("graph_llm.generate", trace):
            if engine is not None:
                return [t.strip() for t in engine.generate(embeds, max_new_tokens, stop, temperature)]
            decode = lambda ids: self.tokenizer.decode(ids, skip_special_tokens=True)  # noqa: E731
            ids = generate_from_embeds(self.model, embeds, max_new_tokens, self.eos_ids, self.pad_id,
                                       temperature, stop, decode, self.generator)
        return [cut_at_stop(decode(r), stop).strip() for r in ids]

    def subgraph_encoder(self, text_encoder) -> "SubgraphEncoder":
        """This model's graph encoder as the RAS loop's ``graph_encoder`` (``encode_subgraphs``:
        triple lists -> ``[n, graph_dim]``), so the loop encodes every subgraph once and the
        planner/answerer only project the averaged vector."""
        if self.graph_encoder is None:
            raise ValueError("graph_encoder: this GraphLLM has none to expose")
        return SubgraphEncoder(self, text_encoder)

    def export_merged(self, path: str) -> None:
        """Save the LM with the LoRA merged in (plus the tokenizer) as a plain transformers
        checkpoint, e.g. for ``VLLM(path)``; this model is left unchanged."""
        import copy
        model = copy.deepcopy(self.model)
        if self.lora_settings is not None:
            model = model.merge_and_unload()
        model.save_pretrained(path)
        self.tokenizer.save_pretrained(path)

    # -- training -------------------------------------------------------------------------
    def trainable_parameters(self) -> List[nn.Parameter]:
        params = [p for p in self.model.parameters() if p.requires_grad] + list(self.projector.parameters())
        if self.graph_encoder is not None and self.train_graph_encoder:
            params += [p for p in self.graph_encoder.parameters() if p.requires_grad]
        return params

    def loss(self, samples: Sequence[GraphLLMSample], stats: Optional[Dict[str, int]] = None) -> torch.Tensor:
        """Mean cross-entropy over the target tokens of a batch (labels -100 elsewhere).

        Rows are left-padded, so every target sits in the last ``T`` positions (``T`` = the
        longest target + EOS); the LM head runs on those positions only (``logits_to_keep``),
        not on the whole input -- the same loss for a fraction of the head's cost (SmolLM2's
        head is 28M of its 135M parameters). ``stats`` (a dict) receives the batch's
        ``input_tokens`` (graph token included, padding not) and ``target_tokens``."""
        tokens = self._tokens_for(samples)
        embeds, labels = self._assemble(samples, tokens, 0, with_target=True)
        x, mask, pos = left_pad(embeds)
        B, L = x.shape[0], x.shape[1]
        lab = torch.full((B, L), IGNORE, dtype=torch.long, device=self.device)
        n_target = 0
        for i, l in enumerate(labels):
            lab[i, L - len(l):] = torch.tensor(l, device=self.device)
            n_target = max(n_target, sum(1 for t in l if t != IGNORE))
        if stats is not None:
            stats["input_tokens"] = stats.get("input_tokens", 0) + sum(int(e.shape[0]) for e in embeds)
            stats["target_tokens"] = stats.get("target_tokens", 0) + sum(sum(1 for t in l if t != IGNORE)
                                                                         for l in labels)
        keep = min(L, n_target + 1)
        try:
            out = self.model(inputs_embeds=x, attention_mask=mask, position_ids=pos, logits_to_keep=keep)
        except TypeError:   # a model without logits_to_keep: the head over every position
            return self.model(inputs_embeds=x, attention_mask=mask, position_ids=pos, labels=lab).loss
        logits = out.logits[:, :-1, :].float()           # positions L-keep .. L-2 predict L-keep+1 .. L-1
        tgt = lab[:, L - keep + 1:]
        return nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), tgt.reshape(-1),
                                           ignore_index=IGNORE)

    def train_step(self, samples: Sequence[GraphLLMSample], optimizer: torch.optim.Optimizer,
                   max_grad_norm: Optional[float] = 1.0) -> float:
        """One optimisation step on a batch; returns the loss before the step."""
        if not samples:
            raise ValueError("samples: expected a non-empty batch")
        self.train()
        if self.graph_encoder is not None and not self.train_graph_encoder:
            self.graph_encoder.eval()
        loss = self.loss(samples)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        if max_grad_norm:
            torch.nn.utils.clip_grad_norm_(self.trainable_parameters(), max_grad_norm)
        optimizer.step()
        self.eval()
        return float(loss.detach())

    def fit(self, samples: Sequence[GraphLLMSample], epochs: int = 1, batch_size: int = 8, lr: float = 2e-4,
            weight_decay: float = 0.0, seed: int = 0, optimizer: Optional[torch.optim.Optimizer] = None,
            callback=None) -> List[float]:
        """A small training loop (AdamW, shuffled batches); returns the loss of every step.
        ``callback(step, loss)`` is called after each step."""
        if not samples:
            raise ValueError("samples: expected a non-empty training set")
        opt = optimizer or torch.optim.AdamW(self.trainable_parameters(), lr=lr, weight_decay=weight_decay)
        rng = random.Random(seed)
        order = list(range(len(samples)))
        losses = []
        for _ in range(epochs):
            rng.shuffle(order)
            for s in range(0, len(order), batch_size):
                losses.append(self.train_step([samples[i] for i in order[s:s + batch_size]], opt))
                if callback is not None:
                    callback(len(losses), losses[-1])
        return losses

    # -- persistence ----------------------------------------------------------------------
    def _config(self) -> Dict[str, Any]:
        return {"graph_dim": self.graph_dim, "projector_hidden": self.projector_hidden, "hidden_size": self.hidden_size,
                "max_length": self.max_length, "max_subgraphs": self.max_subgraphs,
                "lora": (dict(asdict(self.lora_settings), target_modules=list(self.lora_settings.target_modules))
                         if self.lora_settings else None),
                "has_graph_encoder": self.graph_encoder is not None, "graph_token": self.graph_token,
                "instructions": self.instructions, "cues": self.cues}

    def save(self, path: str) -> None:
        """Write ``graph_llm.json``, ``modules.pt`` (projector + encoder) and ``adapter/``
        (peft format; the base LM is not copied)."""
        os.makedirs(path, exist_ok=True)
        with open(os.path.join(path, "graph_llm.json"), "w") as f:
            json.dump(self._config(), f, indent=2)
        torch.save({"projector": self.projector.state_dict(),
                    "graph_encoder": self.graph_encoder.state_dict() if self.graph_encoder is not None else None},
                   os.path.join(path, "modules.pt"))
        if self.lora_settings is not None:
            self.model.save_pretrained(os.path.join(path, "adapter"))

    def load(self, path: str) -> "GraphLLM":
        """Load weights saved by :meth:`save` into this model (same base LM and shapes)."""
        cfg_path = os.path.join(path, "graph_llm.json")
        if not os.path.exists(cfg_path):
            raise FileNotFoundError(f"path: no GraphLLM checkpoint at {path!r} (graph_llm.json missing)")
        with open(cfg_path) as f:
            cfg = json.load(f)
        mine = self._config()
        for k in ("graph_dim", "projector_hidden", "hidden_size", "lora", "has_graph_encoder"):
            if cfg.get(k) != mine[k]:
                raise ValueError(f"path: checkpoint {k}={cfg.get(k)!r} does not match this model's {mine[k]!r}")
        mods = torch.load(os.path.join(path, "modules.pt"), map_location=self.device, weights_only=True)
        self.projector.load_state_dict(mods["projector"])
        if self.graph_encoder is not None:
            self.graph_encoder.load_state_dict(mods["graph_encoder"])
        if self.lora_settings is not None:
            from peft import set_peft_model_state_dict
            from safetensors.torch import load_file
            sd = load_file(os.path.join(path, "adapter", "adapter_model.safetensors"), device=str(self.device))
            res = set_peft_model_state_dict(self.model, sd)
            missing = [k for k in getattr(res, "unexpected_keys", [])]
            if missing:
                raise ValueError(f"path: adapter weights do not fit this model: {missing[:3]}")
        self.instructions, self.cues = cfg["instructions"], cfg["cues"]
        self.max_length, self.max_subgraphs = cfg["max_length"], cfg["max_subgraphs"]
        self.graph_token = bool(cfg.get("graph_token", True))
        self._prefix_ids.clear()
        self.eval()
        return self


class SubgraphEncoder:
    """Adapter: triple lists -> GraphLLM graph vectors via ``rasfast.build_question_graph``."""

    def __init__(self, graph_llm: GraphLLM, text_encoder):
        self.graph_llm, self.text_encoder = graph_llm, text_encoder
        self.dim = graph_llm.graph_dim

    @torch.no_grad()
    def encode_subgraphs(self, subgraphs: Sequence[Sequence[Tuple[str, str, str]]]):
        from ..models.question_graph import build_question_graph
        g = self.graph_llm
        g.eval()
        with g.timer.stage("graph_llm.graph_encode"):
            graphs = [[build_question_graph(list(sg), self.text_encoder)] if sg else None for sg in subgraphs]
            vecs = g.encode_graphs(graphs)
        return vecs.cpu().numpy()
