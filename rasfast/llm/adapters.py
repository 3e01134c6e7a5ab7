"""Adapters that plug LLM backends into the RAS loop (the protocols of
:mod:`rasfast.types`), all batched: one backend call per loop round.

- :class:`LLMPlanner` / :class:`LLMAnswerer`: any :class:`~rasfast.llm.base.LLM` (OpenAIChat,
  HFCausalLM, VLLM) with the paper's instructions and few-shot chat prompts for API models.
- :class:`GraphLLMPlanner` / :class:`GraphLLMAnswerer`: one :class:`~rasfast.llm.GraphLLM`
  serving both roles through its two instructions, reading the question graph as a soft token.
- :class:`LLMTripleExtractor`: passages -> ``(S> s| P> p| O> o)`` triples with the paper's
  text-to-triples prompt, memoised by passage id.
"""
from __future__ import annotations

from collections import OrderedDict
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from ..parse import parse_triples
from ..types import LoopState, RetrievedPassage, Triple
from .base import PartialBatchError
from .prompts import planner_messages, step_segments, triples_messages
from .training_data import GraphLLMSample


def _check_llm(llm) -> None:
    if not callable(getattr(llm, "generate", None)):
        raise TypeError(f"llm: expected an LLM backend with generate(prompts, ...), got {type(llm).__name__}")


def _generate_each(llm, prompts: List[Any], max_new_tokens: int, temperature: float,
                   fn: Callable[[str], Any], items: Sequence[Any]) -> List[Any]:
    """``fn`` of each reply. When only some prompts failed (:class:`PartialBatchError`), the
    error is re-described for the caller's ``items`` so the RAS loop keeps the successes
    instead of re-sending every prompt."""
    try:
        texts = llm.generate(prompts, max_new_tokens, None, temperature)
    except PartialBatchError as e:
        if e.is_for(prompts):
            raise e.remapped(fn, items) from e
        raise
    return [fn(t) for t in texts]


def _first_line(text: str) -> str:
    for line in text.strip().splitlines():
        if line.strip():
            return line.strip()
    return ""


def _style(llm, style: Optional[str]) -> str:
    style = style or getattr(llm, "prompt_style", None) or "paper"
    if style not in ("paper", "compact"):
        raise ValueError(f"style: expected 'paper' or 'compact', got {style!r}")
    return style


class LLMPlanner:
    """RAS planner over any LLM backend: returns the raw ``[SUBQ] ...`` / ``[SUFFICIENT]`` /
    ``[NO_RETRIEVAL]`` text (the loop parses it tolerantly).

    ``style``: ``"paper"`` (the paper-style instruction with few-shot chats, for API models)
    or ``"compact"`` (:mod:`rasfast.llm.compact_prompts`, for small local models: plain
    ``SEARCH: q`` / ``ENOUGH`` replies mapped to the tags; the first round retrieves the
    question itself without asking, as a small model cannot judge its own knowledge).
    Default: the backend's ``prompt_style`` attribute (LocalLLM: compact), else paper."""

    def __init__(self, llm, few_shot: bool = True, max_new_tokens: int = 64, temperature: float = 0.0,
                 style: Optional[str] = None):
        _check_llm(llm)
        self.llm, self.few_shot, self.max_new_tokens, self.temperature = llm, few_shot, max_new_tokens, temperature
        self.style = _style(llm, style)

    def plan(self, states: Sequence[LoopState]) -> List[str]:
        if self.style == "paper":
            prompts = [planner_messages(s.question, s.subqueries, s.step_triples, self.few_shot) for s in states]
            return _generate_each(self.llm, prompts, self.max_new_tokens, self.temperature, _first_line, states)
        from . import compact_prompts as cp
        out: List[Any] = ["[SUBQ] " + s.question for s in states]
        ask = [i for i, s in enumerate(states) if s.subqueries]
        if ask:
            prompts = [cp.planner_messages(states[i].question, states[i].subqueries, states[i].step_triples)
                       for i in ask]
            try:
                got = _generate_each(self.llm, prompts, self.max_new_tokens, self.temperature,
                                     lambda t: cp.parse_plan_reply(t)[0], [states[i] for i in ask])
            except PartialBatchError as e:
                if not e.is_for([states[i] for i in ask]):
                    raise
                got = e.results
                for i, r in zip(ask, got):
                    out[i] = r
                raise PartialBatchError(str(e), out, states) from e
            for i, r in zip(ask, got):
                out[i] = r
        return out


ANSWER_CONTEXTS = ("facts", "facts+passages", "passages")


class LLMAnswerer:
    """RAS answerer over any LLM backend: the reader contract (:mod:`rasfast.llm.reader`)
    over RAS's paper input, the per-sub-query layout with every triple of every step (Eq. 11),
    cut along the question graph only when the context window is full. ``context``:
    ``"facts"`` (the paper's), or rasfast's variants ``"facts+passages"`` (also the
    passages of every step) and ``"passages"`` (the passages of every step, no triples).
    ``reader``: the contract's prompt (``"contract"``; ``"one-shot"`` needs passages).
    Sets ``state.reader_input`` (what the reader was shown) and ``state.reader_reply``."""

    def __init__(self, llm, few_shot: bool = True, max_new_tokens: Optional[int] = None, temperature: float = 0.0,
                 style: Optional[str] = None, context: str = "facts", reader: str = "contract"):
        from .reader import MAX_NEW_TOKENS, READERS
        _check_llm(llm)
        if context not in ANSWER_CONTEXTS:
            raise ValueError(f"context: expected one of {', '.join(ANSWER_CONTEXTS)}, got {context!r}")
        if reader not in READERS:
            raise ValueError(f"reader: expected one of {', '.join(READERS)}, got {reader!r}")
        self.llm, self.few_shot, self.temperature = llm, few_shot, temperature
        self.max_new_tokens = MAX_NEW_TOKENS if max_new_tokens is None else max_new_tokens
        self.style = _style(llm, style)
        self.context, self.reader = context, reader

    def reader_input(self, s: LoopState):
        from .reader import ReaderInput
        blocks = [(q, list(s.step_triples[i]) if i < len(s.step_triples) else [])
                  for i, q in enumerate(s.subqueries)] if self.context != "passages" else []
        passages = []
        if self.context != "facts":
            seen = set()
            for step in s.step_passages:
                for p in step:
                    if p.pid not in seen:
                        seen.add(p.pid)
                        passages.append(p)
        return ReaderInput(s.question, passages, blocks)

    def answer(self, states: Sequence[LoopState]) -> List[str]:
        from .reader import read
        got = read(self.llm, [self.reader_input(s) for s in states], self.reader, self.max_new_tokens)
        for s, r in zip(states, got):
            s.reader_input, s.reader_reply = r.shown, r.reply
        if any(r.error for r in got):
            bad = [(r.exception or RuntimeError(r.error)) if r.error else r.answer for r in got]
            first = next(r.error for r in got if r.error)
            raise PartialBatchError(f"reader: {first}", bad, list(states))
        return [r.answer for r in got]


class GraphInputs:
    """What the GraphLLM reads as the graph of a loop state, first that applies:

    1. ``graph_of(state)`` when given;
    2. the loop's per-step graph vectors (``state.graph_embeddings``, each subgraph encoded
       once by the RAS loop's ``graph_encoder``, e.g. :meth:`GraphLLM.subgraph_encoder`),
       averaged as RAS does -- the graph token then costs only the projector;
    3. with a ``text_encoder``: the list of per-step subgraphs built with
       ``rasfast.build_question_graph(triples, text_encoder)`` (each distinct step built
       once) for the GraphLLM's own graph encoder;
    4. None (the empty graph)."""

    def __init__(self, text_encoder=None, graph_of: Optional[Callable[[LoopState], Any]] = None,
                 max_subgraphs: Optional[int] = None, cache_size: int = 4096):
        self.text_encoder, self.graph_of, self.max_subgraphs = text_encoder, graph_of, max_subgraphs
        self.cache_size = cache_size
        self._cache: "OrderedDict[Tuple[Triple, ...], Any]" = OrderedDict()  # LRU of built subgraphs

    def __call__(self, state: LoopState):
        if self.graph_of is not None:
            return self.graph_of(state)
        vecs = getattr(state, "graph_embeddings", None)
        if vecs:
            if self.max_subgraphs:
                vecs = vecs[-self.max_subgraphs:]  # like the GraphLLM: the oldest steps go first
            import numpy as np
            import torch
            return torch.from_numpy(np.mean(np.stack([np.asarray(v, np.float32) for v in vecs]), axis=0))
        if self.text_encoder is None:
            return None
        from ..models.question_graph import build_question_graph
        out = []
        for step in state.step_triples:
            key = tuple(step)
            if not key:
                continue
            if key not in self._cache:
                self._cache[key] = build_question_graph(list(step), self.text_encoder)
                while len(self._cache) > self.cache_size:
                    self._cache.popitem(last=False)
            self._cache.move_to_end(key)
            out.append(self._cache[key])
        return out


def graph_samples(task: str, states: Sequence[LoopState], graphs: GraphInputs) -> List[GraphLLMSample]:
    return [GraphLLMSample(task, s.question, step_segments(s.subqueries, s.step_triples), graphs(s)) for s in states]


class GraphLLMPlanner:
    """RAS planner backed by a GraphLLM (the graph soft token + the planner instruction)."""

    def __init__(self, graph_llm, text_encoder=None, graph_of=None, max_new_tokens: int = 32,
                 temperature: float = 0.0, engine=None, trace=None):
        self.graph_llm = graph_llm
        self.graphs = GraphInputs(text_encoder, graph_of, getattr(graph_llm, "max_subgraphs", None))
        self.max_new_tokens, self.temperature, self.engine, self.trace = max_new_tokens, temperature, engine, trace

    def plan(self, states: Sequence[LoopState]) -> List[str]:
        out = self.graph_llm.generate(graph_samples("plan", states, self.graphs), self.max_new_tokens,
                                      None, self.temperature, trace=self.trace, engine=self.engine)
        return [_first_line(t) for t in out]


class GraphLLMAnswerer:
    """RAS answerer backed by the same GraphLLM (the answerer instruction)."""

    def __init__(self, graph_llm, text_encoder=None, graph_of=None, max_new_tokens: int = 32,
                 temperature: float = 0.0, engine=None, trace=None):
        self.graph_llm = graph_llm
        self.graphs = GraphInputs(text_encoder, graph_of, getattr(graph_llm, "max_subgraphs", None))
        self.max_new_tokens, self.temperature, self.engine, self.trace = max_new_tokens, temperature, engine, trace

    def answer(self, states: Sequence[LoopState]) -> List[str]:
        out = self.graph_llm.generate(graph_samples("answer", states, self.graphs), self.max_new_tokens,
                                      None, self.temperature, trace=self.trace, engine=self.engine)
        return [_first_line(t) for t in out]


class LLMTripleExtractor:
    """Passages -> triples through an LLM with the paper's text-to-triples prompt.

    One backend call per batch for the passages not seen before (memoised by passage id, so a
    passage retrieved again in a later round or for another question costs nothing).
    ``parse`` turns the model's text into triples (default: the loop's tolerant
    :func:`rasfast.parse.parse_triples`; ``dropped`` counts the malformed fragments)."""

    def __init__(self, llm, few_shot: bool = True, max_new_tokens: int = 256,
                 parse: Optional[Callable[[str], List[Triple]]] = None, memoise: bool = True):
        _check_llm(llm)
        self.llm, self.few_shot, self.max_new_tokens = llm, few_shot, max_new_tokens
        self.parse = parse or self._parse
        self.dropped = 0
        self.memo: Optional[Dict[int, List[Triple]]] = {} if memoise else None
        self.calls = 0  # passages sent to the LLM

    def _parse(self, text: str) -> List[Triple]:
        res = parse_triples(text)
        self.dropped += res.dropped
        return res.triples

    def extract(self, passages: Sequence[RetrievedPassage]) -> List[List[Triple]]:
        todo: Dict[Any, RetrievedPassage] = {}
        for p in passages:
            key = p.pid if self.memo is not None else id(p)
            if (self.memo is None or key not in self.memo) and key not in todo:
                todo[key] = p
        if todo:
            keys = list(todo)
            self.calls += len(keys)
            try:
                fresh = dict(zip(keys, _generate_each(
                    self.llm, [triples_messages(todo[k].content, self.few_shot) for k in keys],
                    self.max_new_tokens, 0.0, self.parse, keys)))
            except PartialBatchError as e:
                if not e.is_for(keys):
                    raise
                # keep (and memoise) the passages that did extract; only the failed ones fail
                fresh = dict(zip(keys, e.results))
                failed = {k: r for k, r in fresh.items() if isinstance(r, BaseException)}
                if self.memo is not None:
                    self.memo.update((k, r) for k, r in fresh.items() if k not in failed)
                store = self.memo if self.memo is not None else fresh
                key = (lambda p: p.pid) if self.memo is not None else id
                raise PartialBatchError(str(e), [failed[key(p)] if key(p) in failed else list(store[key(p)])
                                                 for p in passages], passages) from e
        else:
            fresh = {}
        if self.memo is not None:
            self.memo.update(fresh)
            return [list(self.memo[p.pid]) for p in passages]
        return [list(fresh[id(p)]) for p in passages]


# -- CLI wiring (rasfast.cli calls from_cli for --llm) ---------------------------------------
LLM_CHOICES = ("openai", "hf", "vllm", "local", "local:PATH.gguf", "graph-tiny", "graphllm:DIR",
               "graphllm-nograph:DIR")
_GRAPHLLM = ("graphllm:", "graphllm-nograph:")
_LOCAL_MEMO: Dict[tuple, Any] = {}


def check_llm_kind(kind: str) -> str:
    """``kind`` when it names a backend (argparse ``type=`` for ``--llm``), else ValueError."""
    if kind in ("openai", "hf", "vllm", "local", "graph-tiny") or (isinstance(kind, str) and kind.startswith("local:")
                                                                     and len(kind) > 6):
        return kind
    if isinstance(kind, str) and any(kind.startswith(p) and len(kind) > len(p) for p in _GRAPHLLM):
        return kind
    raise ValueError(f"llm: expected one of {', '.join(LLM_CHOICES)}, got {kind!r}")


def local_options(args) -> Dict[str, Any]:
    """``--llm-threads`` / ``--llm-ctx`` / ``--prompt-style`` of a parsed command line, for
    :func:`make_llm`."""
    out = {}
    if getattr(args, "llm_threads", None) is not None:
        out["n_threads"] = args.llm_threads
    if getattr(args, "llm_ctx", None) is not None:
        out["n_ctx"] = args.llm_ctx
    if getattr(args, "prompt_style", None) is not None:
        out["prompt_style"] = args.prompt_style
    return out


def make_llm(kind: str, model: Optional[str] = None, base_url: Optional[str] = None,
             api_key_env: str = "OPENAI_API_KEY", timeout: float = 60.0, concurrency: int = 8,
             n_threads: Optional[int] = None, n_ctx: Optional[int] = None,
             prompt_style: Optional[str] = None):
    """An LLM backend by name: ``openai`` (any OpenAI-compatible server; ``base_url`` or
    ``$OPENAI_BASE_URL``, model or ``$OPENAI_MODEL``, key from ``api_key_env``), ``hf`` (a
    transformers model path), ``vllm`` (offline vLLM engine), ``local`` / ``local:SPEC`` (a
    GGUF model in-process via llama.cpp, :class:`rasfast.llm.local.LocalLLM`: SPEC or
    ``model`` is a model name such as ``smollm2`` or a ``.gguf`` path, default the packaged
    Qwen2.5-Coder-1.5B; ``n_threads`` / ``n_ctx`` apply to it). One process shares one
    LocalLLM per (model, n_threads, n_ctx). ``prompt_style`` ("paper" or "compact") overrides
    the backend's default prompt set (LocalLLM: compact; the others: paper)."""
    llm = _make_llm(kind, model, base_url, api_key_env, timeout, concurrency, n_threads, n_ctx)
    if prompt_style is not None:
        if prompt_style not in ("paper", "compact"):
            raise ValueError(f"prompt_style: expected 'paper' or 'compact', got {prompt_style!r}")
        llm.prompt_style = prompt_style
    return llm


def _make_llm(kind, model, base_url, api_key_env, timeout, concurrency, n_threads, n_ctx):
    import os
    if kind == "openai":
        model = model or os.environ.get("OPENAI_MODEL")
        if not model:
            raise ValueError("model: --llm openai needs --model NAME (or $OPENAI_MODEL)")
        from .openai_chat import OpenAIChat
        return OpenAIChat(model, base_url=base_url, api_key_env=api_key_env, timeout=timeout,
                          concurrency=concurrency)
    if kind in ("hf", "vllm"):
        if not model:
            raise ValueError(f"model: --llm {kind} needs --model PATH")
        if kind == "hf":
            from .hf import HFCausalLM
            return HFCausalLM(model)
        from .vllm_backend import VLLM
        return VLLM(model)
    if isinstance(kind, str) and (kind == "local" or kind.startswith("local:")):
        spec = kind[len("local:"):] if kind.startswith("local:") else model
        if kind.startswith("local:") and model and model != spec:
            raise ValueError(f"model: --llm {kind} already names the model; drop --model {model}")
        from .local import LocalLLM
        opts = {k: v for k, v in (("n_threads", n_threads), ("n_ctx", n_ctx)) if v is not None}
        key = (spec or "default", tuple(sorted(opts.items())))
        if key not in _LOCAL_MEMO:
            _LOCAL_MEMO[key] = LocalLLM(spec, **opts)
        return _LOCAL_MEMO[key]
    raise ValueError(f"llm: expected one of {', '.join(LLM_CHOICES)}, got {kind!r}")


def tiny_graph_llm(graph_dim: int = 384, seed: int = 0):
    """An untrained GraphLLM over a tiny random Llama (no download): exercises the graph-token
    planner/answerer path and its per-stage trace; its text is gibberish."""
    from .graph_llm import GraphLLM
    from .tiny import tiny_llama
    model, tok = tiny_llama(seed=seed)
    return GraphLLM(model, tok, graph_encoder=None, graph_dim=graph_dim, projector_hidden=256, seed=seed)


def trained_graph_llm(path: str, max_new_tokens: int = 32, answer_tokens: int = 16,
                      graph_token: bool = True):
    """``(planner, answerer)`` over one trained GraphLLM (a run directory of ``rasfast
    graphllm train``): the paper's setting, where RAS's answer comes from the GraphLLM's
    answerer role (graph token plus text). Each role reads the loop's per-step triples as
    question graphs encoded by the trained graph encoder (eval mode: the fused
    ``graph_transformer_pool``, each distinct subgraph once), not the loop's own
    ``--graph-encoder`` vectors. ``graph_token=False`` (``--llm graphllm-nograph:DIR``)
    leaves the soft token out of every input: the trained model with its graph token
    removed at inference (issue 41's variant d)."""
    from .graph_llm_train import GraphBuilder, load_trained
    g, text, _cfg = load_trained(path)
    if not graph_token:
        g.graph_token = False
    build = GraphBuilder(text)
    graph_of = lambda state: build([list(map(list, st)) for st in state.step_triples])  # noqa: E731
    return (GraphLLMPlanner(g, graph_of=graph_of, max_new_tokens=max_new_tokens),
            GraphLLMAnswerer(g, graph_of=graph_of, max_new_tokens=answer_tokens))


def from_cli(args) -> Tuple[Any, Any]:
    """``(planner, answerer)`` for ``rasfast ... --llm KIND [--base-url URL] [--model NAME]``."""
    kind = getattr(args, "llm", None)
    if isinstance(kind, str) and kind.startswith(_GRAPHLLM):
        prefix, path = kind.split(":", 1)
        return trained_graph_llm(path, graph_token=prefix == "graphllm")
    if kind == "graph-tiny":
        # the soft token reads the loop's per-step vectors: GNNGraphEncoder's default width is
        # 256, the mean encoder's the text encoder's (384 for MiniLM and the hashing default)
        g = tiny_graph_llm(graph_dim=256 if getattr(args, "graph_encoder", None) == "gnn" else 384)
        return GraphLLMPlanner(g, max_new_tokens=16), GraphLLMAnswerer(g, max_new_tokens=8)
    llm = make_llm(kind, getattr(args, "model", None), getattr(args, "base_url", None),
                   getattr(args, "api_key_env", None) or "OPENAI_API_KEY", **local_options(args))
    return LLMPlanner(llm), LLMAnswerer(llm)
