#!/usr/bin/env python3
"""Rewrites a CUDA source into plain C++ for the CPU emulator (csrc/emu/runtime/cuemu.h).

Two constructs are not C++ and cannot be macros:

- ``kernel<args><<<grid, block, smem, stream>>>(params)`` becomes
  ``::cuemu::launch(kernel<args>, "kernel<args>", __FILE__, __LINE__, grid, block, smem, stream)(params)``;
- ``__shared__ T a[N], b;`` becomes one reference per declarator into the running block's
  shared memory (``auto& a = ::cuemu::block_shared<T[N]>(...)``), and
  ``extern __shared__ T s[];`` a pointer to the block's dynamic shared memory.

Everything else is left as written, and every rewrite keeps the line count, so compiler
messages, ``__LINE__`` and the emulator's reports name the original file and line (a
``#line`` directive at the top names the original path).

Usage: rewrite.py SOURCE.cu OUTPUT.cpp
"""
from __future__ import annotations

import re
import sys
from pathlib import Path

_IDENT = re.compile(r"[A-Za-z_]\w*")
_SHARED = re.compile(r"(?P<extern>\bextern\s+)?\b__shared__\b(?P<body>[^;]*);")
_ALIGN = re.compile(r"__align__\s*\(\s*\d+\s*\)")
_DECLARATOR = re.compile(r"^(?P<name>[A-Za-z_]\w*)\s*(?P<dims>(?:\[[^\]]*\]\s*)*)$")


class RewriteError(ValueError):
    pass


def _mask_comments_and_strings(src: str) -> str:
    """Same length as ``src`` with comments and string/char literals blanked (newlines kept),
    so that searches never match inside them."""
    out = list(src)
    i, n = 0, len(src)
    while i < n:
        c = src[i]
        if src.startswith("//", i):
            j = src.find("\n", i)
            j = n if j < 0 else j
            for k in range(i, j):
                out[k] = " "
            i = j
        elif src.startswith("/*", i):
            j = src.find("*/", i + 2)
            j = n if j < 0 else j + 2
            for k in range(i, j):
                if out[k] != "\n":
                    out[k] = " "
            i = j
        elif c in "\"'":
            j = i + 1
            while j < n and src[j] != c:
                j += 2 if src[j] == "\\" else 1
            for k in range(i + 1, min(j, n)):
                if out[k] != "\n":
                    out[k] = " "
            i = j + 1
        else:
            i += 1
    return "".join(out)


def _callee_start(masked: str, end: int) -> int:
    """Start of the kernel expression that ends just before ``end`` (the ``<<<``):
    identifiers, ``::`` and balanced template argument lists."""
    i = end
    while i > 0 and masked[i - 1].isspace():
        i -= 1
    while i > 0:
        c = masked[i - 1]
        if c == ">":
            depth, j = 0, i - 1
            while j >= 0:
                if masked[j] == ">":
                    depth += 1
                elif masked[j] == "<":
                    depth -= 1
                    if depth == 0:
                        break
                j -= 1
            if j < 0:
                raise RewriteError("unbalanced template arguments before <<<")
            i = j
        elif c.isalnum() or c == "_":
            while i > 0 and (masked[i - 1].isalnum() or masked[i - 1] == "_"):
                i -= 1
        elif masked[i - 2:i] == "::":
            i -= 2
        else:
            break
    return i


def rewrite_launches(src: str) -> str:
    masked = _mask_comments_and_strings(src)
    pieces, pos = [], 0
    for m in re.finditer(r"<<<", masked):
        start = _callee_start(masked, m.start())
        close = masked.find(">>>", m.end())
        if close < 0:
            raise RewriteError(f"line {src.count(chr(10), 0, m.start()) + 1}: <<< without >>>")
        callee = src[start:m.start()].strip()
        if not callee:
            raise RewriteError(f"line {src.count(chr(10), 0, m.start()) + 1}: no kernel before <<<")
        config = src[m.end():close]
        paren = close + 3
        while paren < len(src) and src[paren].isspace():
            paren += 1
        if paren >= len(src) or src[paren] != "(":
            raise RewriteError(f"line {src.count(chr(10), 0, m.start()) + 1}: expected ( after >>>")
        name = re.sub(r"\s+", " ", callee).replace("\\", "\\\\").replace('"', '\\"')
        pieces.append(src[pos:start])
        pieces.append(f'::cuemu::launch({callee}, "{name}", __FILE__, __LINE__, {config})')
        pieces.append(src[close + 3:paren])
        pos = paren
    pieces.append(src[pos:])
    return "".join(pieces)


def _split_top_level(body: str):
    parts, depth, cur = [], 0, []
    for c in body:
        if c in "([<{":
            depth += 1
        elif c in ")]>}":
            depth -= 1
        if c == "," and depth == 0:
            parts.append("".join(cur))
            cur = []
        else:
            cur.append(c)
    parts.append("".join(cur))
    return [p.strip() for p in parts]


def _shared_decl(extern: bool, body: str, line: int) -> str:
    body = _ALIGN.sub(" ", body)
    flat = " ".join(body.split())
    parts = _split_top_level(flat)
    first = re.match(r"^(?P<type>.*\S)\s+(?P<decl>[A-Za-z_]\w*\s*(?:\[[^\]]*\]\s*)*)$", parts[0])
    if not first:
        raise RewriteError(f"line {line}: cannot read the __shared__ declaration '{flat}'")
    ctype = first.group("type")
    decls = [first.group("decl")] + parts[1:]
    out = []
    for d in decls:
        dm = _DECLARATOR.match(d.strip())
        if not dm:
            raise RewriteError(f"line {line}: cannot read the __shared__ declarator '{d}'")
        name, dims = dm.group("name"), re.sub(r"\s+", "", dm.group("dims"))
        if extern:
            if dims != "[]":
                raise RewriteError(f"line {line}: extern __shared__ '{name}' must be an unsized array")
            out.append(f"{ctype}* {name} = ::cuemu::dynamic_shared<{ctype}>(__FILE__, __LINE__);")
        else:
            if "[]" in dims:
                raise RewriteError(f"line {line}: __shared__ '{name}' needs a size (or extern)")
            tag = f"cuemu_site_{name}_{line}"
            out.append(f"static const char {tag} = 0; "
                       f"auto& {name} = ::cuemu::block_shared<{ctype}{dims}>(&{tag}, \"{name}\", "
                       f"__FILE__, __LINE__);")
    return " ".join(out)


def rewrite_shared(src: str) -> str:
    masked = _mask_comments_and_strings(src)
    pieces, pos = [], 0
    for m in _SHARED.finditer(masked):
        line = src.count("\n", 0, m.start()) + 1
        text = src[m.start():m.end()]
        body = src[m.start("body"):m.end("body")]
        new = _shared_decl(m.group("extern") is not None, body, line)
        pieces.append(src[pos:m.start()])
        pieces.append(new + "\n" * text.count("\n"))  # keep the line count
        pos = m.end()
    pieces.append(src[pos:])
    return "".join(pieces)


def rewrite(src: str) -> str:
    return rewrite_shared(rewrite_launches(src))


def main(argv) -> int:
    if len(argv) != 3:
        print(__doc__, file=sys.stderr)
        return 2
    source, output = Path(argv[1]).resolve(), Path(argv[2])
    try:
        text = rewrite(source.read_text())
    except RewriteError as e:
        print(f"{source}: {e}", file=sys.stderr)
        return 1
    output.parent.mkdir(parents=True, exist_ok=True)
    new = f'#line 1 "{source}"\n' + text
    if not output.exists() or output.read_text() != new:  # keep the timestamp when unchanged
        output.write_text(new)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
