"""One frozen evaluation config: every setting ``eval qa`` keys its caches on, each default
decided once, and the cache keys and file names computed from it.

:class:`EvalConfig` is what :func:`.run.evaluate_qa` and :func:`.run.report_qa` (and so
``eval qa`` and ``eval qa --report``) build their record files' names from; a report finds
exactly the files a run wrote with the same settings. A system's preparation is keyed on
:meth:`EvalConfig.prep_settings` (schema, the preparation, and for a system with prompts its
retriever, the signature of its prompt modules, the LLM's context size, the triples'
extraction id when it reads triples, plus its spec's own fields); its final records on
:meth:`EvalConfig.settings` (the preparation's key, the reader, its settings and prompts, the
k it reads).

``reader_prompts`` pins the reader contract's prompt signature: None (the default) is the
current code's; a report over records read with an earlier reader prompt names that
prompt's signature (e.g. :data:`READER_PROMPTS_ROUND3`, the committed round-3 records).
"""
from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, replace
from typing import Any, Dict, Optional, Sequence

from .records import SCHEMA
from .signatures import aligner_id, code_signature, constants_signature, modules_signature
from .systems import get_spec, prompt_modules

MINILM = "all-MiniLM-L6-v2"   # the default encoder's name; its results carry no encoder suffix
PROMPT_STYLES = ("paper", "compact")
DEFAULT_N_CTX = 4096          # the local model's context size unless --llm-ctx says otherwise
# the reader contract's prompt signature before the yes/no answer-shape rule (issue 40 C):
# the committed round-3 records (benchmarks/results/qa_records) were read with it
READER_PROMPTS_ROUND3 = "d1a975aed2077a05"
# earlier reader signatures whose records a run may take unchanged prompts' replies from
# (:mod:`.reuse`)
EARLIER_READER_PROMPTS = (READER_PROMPTS_ROUND3,)


def _safe(name: str) -> str:
    return "".join(c if c.isalnum() or c in "-._" else "_" for c in name)


def prompt_signature(family: str) -> str:
    """The family's prompt modules (:func:`.systems.prompt_modules`): their code and their
    constants' values."""
    return modules_signature(prompt_modules()[family])


def default_prompt_style(llm) -> str:
    """The prompt style when none is asked for: the backend's own (the local model's is
    compact), else paper. ``llm`` is a backend, or the ``--llm`` kind or its label as a
    string ("local", "local:…" mean the local model)."""
    if isinstance(llm, str):
        return "compact" if llm.startswith("local") else "paper"
    return getattr(llm, "prompt_style", None) or "paper"


def default_gear_iters(dataset: str) -> int:
    """GEAR's agent rounds in its paper for ``dataset`` (4 on MuSiQue, 2 on HotpotQA/2Wiki)."""
    from ..systems.gear.agent import MAX_ITERS
    return MAX_ITERS.get(dataset, 4)


@dataclass(frozen=True)
class EvalConfig:
    """The settings one evaluation's records are keyed on (see the module docstring).
    ``dataset``: the dataset's name; ``llm``: the LLM's label (:func:`.run.llm_label`);
    ``encoder``: the text encoder's name; ``kirag_aligner``: a saved aligner's directory or its
    id; ``router``: the id of a trained StructRAG router saved beside the index; ``knowledge``:
    the extraction id of triples rasfast made itself (:func:`.systems.knowledge_id`);
    ``graphllm``: a trained GraphLLM's run directory or its id (:func:`.signatures.graphllm_id`)."""
    dataset: str
    llm: str
    k: int = 5
    max_iters: int = 5
    prompt_style: str = "compact"
    reader: str = "contract"
    retriever: str = "dense"
    gear_iters: int = 4
    kirag_aligner: Optional[str] = None
    router: Optional[str] = None
    n_ctx: Optional[int] = DEFAULT_N_CTX
    knowledge: Optional[str] = None
    encoder: str = MINILM
    reader_prompts: Optional[str] = None
    graphllm: Optional[str] = None

    def __post_init__(self):
        from ..llm.reader import READERS
        from ..systems.registry import RETRIEVERS
        if self.prompt_style not in PROMPT_STYLES:
            raise ValueError(f"prompt_style: expected one of {', '.join(PROMPT_STYLES)}, got {self.prompt_style!r}")
        if self.reader not in READERS:
            raise ValueError(f"reader: expected one of {', '.join(READERS)}, got {self.reader!r}")
        if self.retriever not in RETRIEVERS:
            raise ValueError(f"retriever: expected one of {', '.join(RETRIEVERS)}, got {self.retriever!r}")

    @classmethod
    def make(cls, dataset: str, llm: str, *, backend=None, prompt_style: Optional[str] = None,
             gear_iters: Optional[int] = None, n_ctx: Optional[int] = None, **kw) -> "EvalConfig":
        """The config with every default decided here: the prompt style from the backend (or,
        without one, from the LLM's label), GEAR's rounds from the dataset, the context size
        from the backend (else :data:`DEFAULT_N_CTX`)."""
        style = prompt_style or default_prompt_style(backend if backend is not None else llm)
        if n_ctx is None:
            n_ctx = getattr(backend, "n_ctx", None) if backend is not None else DEFAULT_N_CTX
        return cls(dataset, llm, prompt_style=style, gear_iters=gear_iters or default_gear_iters(dataset),
                   n_ctx=n_ctx, **kw)

    def with_(self, **kw) -> "EvalConfig":
        return replace(self, **kw)

    # -- cache keys -------------------------------------------------------------------------
    def prep_settings(self, system: str) -> Dict[str, Any]:
        """What ``system``'s preparation (everything before its reader) depends on beyond
        dataset, LLM and encoder: its cache key."""
        spec = get_spec(system)
        s: Dict[str, Any] = {"schema": SCHEMA, "prep": spec.prep}
        if spec.prompt_modules:   # the LLM's context window decides what fits its prompts
            s.update(retriever=self.retriever, prompts=modules_signature(spec.prompt_modules), n_ctx=self.n_ctx)
        if self.knowledge is not None and spec.reads_triples:
            s["knowledge"] = self.knowledge
        s.update(spec.key(self, spec))
        return s

    def settings(self, system: str) -> Dict[str, Any]:
        """What ``system``'s final records depend on: its preparation, the reader and the k
        it reads."""
        from ..llm.reader import settings as reader_settings
        s = self.prep_settings(system)
        s.update(system=system, k=self.k, reader=self.reader, reader_settings=reader_settings(),
                 reader_prompts=self.reader_prompts or prompt_signature("reader"),
                 n_ctx=self.n_ctx)   # what the reader's input is cut to
        return s

    def records_file(self, system: str) -> str:
        """The name of ``system``'s records file."""
        return cache_file(self.dataset, system, self.llm, self.settings(system), self.encoder)

    def prep_file(self, system: str) -> str:
        """The name of the preparations file ``system`` reads from."""
        return cache_file(self.dataset, get_spec(system).prep, self.llm, self.prep_settings(system), self.encoder,
                          "prep")

    def summary(self) -> Dict[str, Any]:
        """The settings a result carries."""
        return {"k": self.k, "max_iters": self.max_iters, "gear_iters": self.gear_iters,
                "prompt_style": self.prompt_style, "reader": self.reader, "retriever": self.retriever,
                "encoder": self.encoder}


def cache_file(dataset: str, system: str, llm_name: str, settings: Dict[str, Any], encoder_name: str = MINILM,
               kind: str = "") -> str:
    """The records file of one (dataset, system, LLM, settings, encoder); ``kind="prep"``:
    the preparations file."""
    h = hashlib.sha256(json.dumps(settings, sort_keys=True, default=str).encode()).hexdigest()[:12]
    enc = "" if encoder_name == MINILM else f"-{_safe(encoder_name)}"
    k = f"-k{settings['k']}" if "k" in settings else ""
    return f"{dataset}-{kind + '-' if kind else ''}{_safe(system)}-{_safe(llm_name)}{k}-{h}{enc}.jsonl"


__all__ = ["EvalConfig", "cache_file", "prompt_signature", "default_prompt_style", "default_gear_iters", "MINILM",
           "PROMPT_STYLES", "DEFAULT_N_CTX", "READER_PROMPTS_ROUND3", "EARLIER_READER_PROMPTS"]
