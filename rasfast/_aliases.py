"""Module paths from before the layout of ``systems/`` and ``index/`` stay importable.

``import rasfast.pipeline.loop`` or ``from rasfast.knowledge import KnowledgeIndex`` give the
very module objects that now live at ``rasfast.systems.ras.loop`` and
``rasfast.index.knowledge`` (not copies: classes, registries and monkeypatches are shared).
A meta-path finder maps each old name to its new one; nothing is imported until asked for.
"""
from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import sys

# old prefix -> new prefix
MOVED = {
    "rasfast.pipeline": "rasfast.systems.ras",
    "rasfast.gear": "rasfast.systems.gear",
    "rasfast.kirag": "rasfast.systems.kirag",
    "rasfast.structrag": "rasfast.systems.structrag",
    "rasfast.knowledge": "rasfast.index.knowledge",
    "rasfast._index_store": "rasfast.index.store",
    "rasfast._index_stream": "rasfast.index.stream",
    "rasfast._passages": "rasfast.index.passages",
    "rasfast._durable": "rasfast.index.durable",
}


def new_name(fullname: str):
    for old, new in MOVED.items():
        if fullname == old or fullname.startswith(old + "."):
            return new + fullname[len(old):]
    return None


class _AliasLoader(importlib.abc.Loader):
    def __init__(self, target: str):
        self.target = target

    def create_module(self, spec):
        return importlib.import_module(self.target)   # the module itself, under its new name

    def exec_module(self, module) -> None:
        pass                                           # already executed under its new name


class _AliasFinder(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname, path=None, target=None):
        new = new_name(fullname)
        if new is None:
            return None
        real = importlib.util.find_spec(new)
        if real is None:
            return None
        return importlib.util.spec_from_loader(fullname, _AliasLoader(new),
                                               is_package=real.submodule_search_locations is not None)


def install() -> None:
    if not any(isinstance(f, _AliasFinder) for f in sys.meta_path):
        sys.meta_path.insert(0, _AliasFinder())
