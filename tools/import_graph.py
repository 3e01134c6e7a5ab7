#!/usr/bin/env python3
"""The package's internal import graph: which rasfast module imports which, the layer of each
top-level part, imports that run back up a layer, and circles.

    python tools/import_graph.py            # a summary
    python tools/import_graph.py --json     # the graph as JSON

It also reports circles between the modules of one part (a part-level graph cannot show
them).

Only ``rasfast.*`` imports written in the source count (module level and inside functions),
resolved to the top-level part they name: ``rasfast/systems/kirag/loop.py`` importing
``...types`` is an edge systems.kirag -> types. Layers are listed in LAYERS (top first); a
module's part is its first path component under rasfast/, and in the two folders that hold
several parts (``systems/``, ``index/``) the second too: ``systems.kirag``, ``index.store``.
"""
from __future__ import annotations

import ast
import json
import sys
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1] / "rasfast"

# The architecture, top first: a part may import its own layer and the layers below it.
LAYERS = [
    ("package", ["rasfast"]),
    ("cli", ["cli"]),
    ("integrations and evaluation", ["integrations", "qa_eval", "report"]),
    ("systems", ["systems", "systems.registry", "systems.ras", "systems.gear", "systems.kirag",
                 "systems.structrag"]),
    ("index", ["index", "index.theme_index", "index.store", "index.stream", "index.passages", "index.bm25",
               "index.durable", "index.distributed", "index.knowledge", "index.array_header", "index.theme_replay",
               "index.manifest_schemas", "distributed"]),
    ("llm", ["llm"]),
    ("models and data", ["models", "graph", "theme", "encode", "profile", "data", "bench", "metrics"]),
    ("ops", ["ops", "parse", "types"]),
    ("foundation", ["reference", "dispatch", "_env", "_validate", "_arrays", "_fatbin", "kernels", "_threads", "_schema",
                    "device_work", "_native"]),
]
LAYER_OF = {part: i for i, (_, parts) in enumerate(LAYERS) for part in parts}


def part_of(mod: str) -> str:
    """'rasfast.systems.kirag.loop' -> 'systems.kirag'; 'rasfast.ops.select' -> 'ops'."""
    bits = mod.split(".")[1:]
    if not bits:
        return "rasfast"
    if bits[0] in ("systems", "index") and len(bits) > 1:   # the folders of several parts
        return ".".join(bits[:2])
    return bits[0]


def modules():
    for p in sorted(ROOT.rglob("*.py")):
        rel = p.relative_to(ROOT.parent).with_suffix("")
        parts = list(rel.parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        yield ".".join(parts), p


def _walk(tree):
    """ast.walk, without the bodies of ``if TYPE_CHECKING:`` (annotations, not imports)."""
    todo = [tree]
    while todo:
        node = todo.pop()
        yield node
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and getattr(child.test, "id", None) == "TYPE_CHECKING":
                todo.extend(child.orelse)
                continue
            todo.append(child)


def imports(mod: str, path: Path):
    tree = ast.parse(path.read_text())
    pkg = mod if path.name == "__init__.py" else mod.rsplit(".", 1)[0]
    for node in _walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.name.startswith("rasfast"):
                    yield a.name
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = pkg.split(".")
                base = base[:len(base) - node.level + 1]
                name = ".".join(base + ([node.module] if node.module else []))
            else:
                name = node.module or ""
            if name.startswith("rasfast"):
                if node.module is None or name == "rasfast":
                    for a in node.names:
                        yield f"{name}.{a.name}"
                else:
                    yield name


def graph():
    edges = defaultdict(set)
    for mod, path in modules():
        src = part_of(mod)
        for target in imports(mod, path):
            dst = part_of(target)
            if dst != src and dst != "rasfast":
                edges[src].add(dst)
    return edges


def module_graph():
    """Module -> the modules of its own part it imports (a package's ``__init__`` importing
    its own modules, and a module importing the package above it, do not count): the
    circles a part-level graph cannot show, e.g. two modules of qa_eval importing each other."""
    mods = dict(modules())
    edges = defaultdict(set)
    for mod, path in mods.items():
        for target in imports(mod, path):
            while target and target not in mods:     # 'rasfast.x.y.name' -> the module 'rasfast.x.y'
                target = target.rsplit(".", 1)[0] if "." in target else ""
            if not target or target == mod or part_of(target) != part_of(mod):
                continue
            if mod.startswith(target + ".") or target.startswith(mod + "."):
                continue
            edges[mod].add(target)
    return edges


def cycles(edges):
    out, seen = [], set()

    def dfs(node, stack):
        for nxt in sorted(edges.get(node, ())):
            if nxt in stack:
                cyc = stack[stack.index(nxt):] + [nxt]
                key = frozenset(cyc)
                if key not in seen:
                    seen.add(key)
                    out.append(cyc)
            elif len(stack) < 12:
                dfs(nxt, stack + [nxt])
    for n in sorted(edges):
        dfs(n, [n])
    return out


def upward(edges):
    """Edges from a lower layer to a higher one, and parts that no layer names."""
    up, unplaced = [], set()
    for src, dsts in edges.items():
        for dst in dsts:
            if src not in LAYER_OF or dst not in LAYER_OF:
                unplaced |= {x for x in (src, dst) if x not in LAYER_OF}
            elif LAYER_OF[dst] < LAYER_OF[src]:
                up.append((src, dst))
    return sorted(up), sorted(unplaced)


def main(argv):
    edges = graph()
    if "--json" in argv:
        print(json.dumps({k: sorted(v) for k, v in sorted(edges.items())}, indent=1))
        return 0
    parts = sorted(set(edges) | {d for v in edges.values() for d in v})
    print(f"{len(parts)} parts, {sum(len(v) for v in edges.values())} edges")
    for k in sorted(edges):
        print(f"  {k:22s} -> {', '.join(sorted(edges[k]))}")
    cyc = cycles(edges)
    print(f"circles: {len(cyc)}")
    for c in cyc:
        print("  " + " -> ".join(c))
    mcyc = cycles(module_graph())
    print(f"circles between modules of one part: {len(mcyc)}")
    for c in mcyc:
        print("  " + " -> ".join(c))
    up, unplaced = upward(edges)
    print(f"imports running back up a layer: {len(up)}")
    for a, b in up:
        print(f"  {a} ({LAYERS[LAYER_OF[a]][0]}) -> {b} ({LAYERS[LAYER_OF[b]][0]})")
    if unplaced:
        print(f"parts in no layer: {', '.join(unplaced)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
