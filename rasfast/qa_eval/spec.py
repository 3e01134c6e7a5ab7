"""One spec per system ``rasfast eval qa`` runs, registered in one place.

A :class:`SystemSpec` says everything the evaluation needs to know about a system: its name
and label, the modules that hold its prompts (hashed into its cache keys), the LLM roles it
sends (the role table), whether it reads triples, and its two phases:

- ``prepare(ctx) -> (question -> Prepared)``: everything the system does before its final
  answer (retrieval, its LLM roles, its structure), built from a :class:`PrepareContext`;
- ``reader_input(question, prepared, k, passage_of) -> ReaderInput``: what the system hands
  the reader contract (:mod:`rasfast.llm.reader`) for a prepared question.

Every table ``eval qa`` used to keep by hand (its systems, families, shared preparations,
labels, prompt modules, the families that read triples, the role table, the CLI's choices)
is derived from the registered specs, so adding a system is one module that calls
:func:`register_spec` (and :func:`rasfast.systems.register_system` for its system) plus its
tests. The built-in specs are registered by :mod:`rasfast.qa_eval.systems`, which also holds
the lookups over every registered spec (``get_spec``, ``specs``, the live tables).

This module imports nothing, so every other module can import it.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional, Tuple

# what every system's final answer is read with: the reader contract's own prompt module
READER_PROMPT_MODULES = ("rasfast.llm.reader",)


@dataclass
class PrepareContext:
    """What a spec's ``prepare`` may build its preparation from: the LLM (wrapped in the role
    recorder; None for a model-free run), the knowledge index, the text encoder and the
    evaluation's settings (``kirag_aligner``: the loaded aligner, or None; ``graphllm``: the
    ``(planner, answerer)`` of a trained GraphLLM, or None)."""
    llm: Any
    ki: Any
    encoder: Any
    k: int = 5
    max_iters: int = 5
    retriever: str = "dense"
    gear_iters: int = 4
    kirag_aligner: Any = None
    graphllm: Any = None


def _no_key(config, spec) -> Dict[str, Any]:
    return {}


def _no_roles() -> List[tuple]:
    return []


@dataclass(frozen=True)
class SystemSpec:
    """One system of ``eval qa`` (see the module docstring).

    ``family``: the prompt family (defaults to the name; "reader" for the retrieval
    baselines, whose preparations use no prompt); ``prep``: the preparation it reads from
    (systems sharing one share its cache; defaults to the name); ``prompt_modules``: hashed
    into its preparation's cache key (none: the key holds no prompts, retriever or context
    size); ``roles()``: ``(marker text, role, parse check)`` rows of the role table;
    ``key(config, spec)``: the extra fields of its preparation's cache key (beyond schema,
    preparation, retriever, prompts, context size and the triples' extraction id);
    ``reads_triples``: its preparation reads the corpus's triples (keyed on the model-free
    extractor that made them); ``own_retriever``: a retrieval baseline's retriever (its
    records name it instead of ``--retriever``); ``retrieves``: False for the closed book;
    ``prompt_style``: its prompts come in the paper/compact styles (kept in its records);
    ``model_free``: it answers without an LLM (rasfast's heuristic baseline, through
    :func:`rasfast.systems.build_system`); ``own_answer``: its preparation ends with its own
    answer (``Prepared.answer``), which its record keeps instead of the reader's (RAS with its
    trained GraphLLM: the paper's setting, not the one-reader contract)."""
    name: str
    label: str
    prepare: Callable[[PrepareContext], Callable[[str], Any]]
    reader_input: Callable[..., Any]
    family: str = ""
    prep: str = ""
    prompt_modules: Tuple[str, ...] = ()
    roles: Callable[[], List[tuple]] = _no_roles
    key: Callable[[Any, "SystemSpec"], Dict[str, Any]] = _no_key
    reads_triples: bool = False
    own_retriever: Optional[str] = None
    retrieves: bool = True
    prompt_style: bool = False
    model_free: bool = False
    own_answer: bool = False
    doc: str = field(default="", compare=False)

    def __post_init__(self):
        if not isinstance(self.name, str) or not self.name:
            raise TypeError(f"SystemSpec.name: expected a non-empty str, got {self.name!r}")
        if not self.family:
            object.__setattr__(self, "family", self.name)
        if not self.prep:
            object.__setattr__(self, "prep", self.name)
        object.__setattr__(self, "prompt_modules", tuple(self.prompt_modules))


_SPECS: Dict[str, SystemSpec] = {}


def register_spec(spec: SystemSpec) -> SystemSpec:
    """Registers ``spec`` under its name (a later spec of the same name replaces it)."""
    if not isinstance(spec, SystemSpec):
        raise TypeError(f"spec: expected a SystemSpec, got {type(spec).__name__}")
    if spec.family == "reader" and spec.prompt_modules:
        raise ValueError(f"spec {spec.name}: the 'reader' family is the retrieval baselines', without prompts")
    _SPECS[spec.name] = spec
    return spec


def unregister_spec(name: str) -> None:
    """Removes a registered spec (tests)."""
    _SPECS.pop(name, None)


__all__ = ["SystemSpec", "PrepareContext", "register_spec", "unregister_spec", "READER_PROMPT_MODULES"]
