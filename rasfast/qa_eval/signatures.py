"""Signatures the cache keys hash: a module's code (without comments and docstrings), the
values of its upper-case constants, and a saved KiRAG aligner's content. Imports nothing of
``eval qa``'s own modules."""
from __future__ import annotations

import hashlib
import importlib
import inspect
import json
import pathlib
from typing import Optional, Sequence


def code_signature(module: str) -> str:
    """sha256 of a module's code without comments and docstrings (ast.unparse): a changed
    prompt or parser changes it, a reworded comment does not."""
    import ast
    tree = ast.parse(inspect.getsource(importlib.import_module(module)))
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if isinstance(body, list) and body and isinstance(body[0], ast.Expr) \
                and isinstance(getattr(body[0], "value", None), ast.Constant) and isinstance(body[0].value.value, str):
            node.body = body[1:] or [ast.Pass()]
    return hashlib.sha256(ast.unparse(tree).encode()).hexdigest()


def constants_signature(module: str) -> str:
    """sha256 of the current values of a module's upper-case constants (prompt texts, worked
    examples, settings): also what a patched prompt changes at run time."""
    mod = importlib.import_module(module)
    vals = {k: getattr(mod, k) for k in sorted(vars(mod)) if k.isupper() and not k.startswith("_")}
    return hashlib.sha256(json.dumps(vals, sort_keys=True, default=repr).encode()).hexdigest()


def modules_signature(modules: Sequence[str]) -> str:
    """The code and the constants' values of ``modules``, in order."""
    h = hashlib.sha256()
    for mod in modules:
        h.update(code_signature(mod).encode())
        h.update(constants_signature(mod).encode())
    return h.hexdigest()[:16]


def aligner_id(aligner) -> Optional[str]:
    """A KiRAG aligner's cache-key id: the content hash of a saved aligner's directory, or
    the value itself (an id given directly)."""
    if aligner is None:
        return None
    p = pathlib.Path(str(aligner))
    if p.is_dir():
        h = hashlib.sha256()
        for f in sorted(p.rglob("*")):
            if f.is_file():
                h.update(f.name.encode())
                h.update(hashlib.sha256(f.read_bytes()).digest())
        return h.hexdigest()[:16]
    return str(aligner)


def graphllm_id(run) -> Optional[str]:
    """A trained GraphLLM's cache-key id: the content hash of what a run directory of
    ``rasfast graphllm train`` loads at inference (its configuration, the graph encoder and
    projector weights, the LoRA adapter), not its checkpoint or loss curve; or the value
    itself (an id given directly)."""
    if run is None:
        return None
    p = pathlib.Path(str(run))
    if not p.is_dir():
        return str(run)
    h = hashlib.sha256()
    files = [p / "train_config.json", p / "graph_llm.json", p / "modules.pt"]
    files += sorted(f for f in (p / "adapter").rglob("*") if f.is_file() and f.name != "README.md")
    for f in files:
        if f.is_file():
            h.update(str(f.relative_to(p)).encode())
            data = f.read_bytes()
            if f.name == "train_config.json":   # the model's settings, not where its data lay
                import json
                data = json.dumps(json.loads(data).get("config"), sort_keys=True).encode()
            h.update(hashlib.sha256(data).digest())
    return h.hexdigest()[:16]


__all__ = ["code_signature", "constants_signature", "modules_signature", "aligner_id", "graphllm_id"]
