"""The documentation stays true: every page's Python examples run, and its links resolve.

A ```python block runs unless the line before it is an HTML comment starting with
``<!-- not run`` (a fragment that names objects it does not build, or needs a server); every
page with Python blocks has at least one that runs. A page's runnable blocks run in order in
one fresh interpreter, in an empty temporary directory.
"""
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PAGES = [REPO / "README.md"] + sorted((REPO / "docs").glob("*.md"))

pytestmark = pytest.mark.timeout(900)


def python_blocks(text: str):
    """(code, runs) for every ```python block."""
    out, lines, i = [], text.splitlines(), 0
    while i < len(lines):
        if lines[i].strip() == "```python":
            prev = next((l.strip() for l in reversed(lines[:i]) if l.strip()), "")
            j = i + 1
            while j < len(lines) and lines[j].strip() != "```":
                j += 1
            out.append(("\n".join(lines[i + 1:j]), not prev.startswith("<!-- not run")))
            i = j
        i += 1
    return out


def test_readme_is_a_front_page():
    assert len((REPO / "README.md").read_text().splitlines()) <= 300
    assert len(PAGES) - 1 >= 3


def test_block_parser_honours_the_marker():
    text = "a\n```python\nx = 1\n```\n<!-- not run: needs a server -->\n```python\ny = 2\n```\n"
    assert python_blocks(text) == [("x = 1", True), ("y = 2", False)]


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_examples_run(page, tmp_path):
    blocks = python_blocks(page.read_text())
    if not blocks:
        pytest.skip(f"{page.name} has no Python examples")
    runnable = [code for code, runs in blocks if runs]
    assert runnable, f"{page.name}: no runnable example (every block is marked '<!-- not run')"
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    env.pop("RASFAST_CUDA_EMU", None)
    p = subprocess.run([sys.executable, "-c", "\n\n".join(runnable)], cwd=tmp_path, env=env,
                       capture_output=True, text=True, timeout=800)
    assert p.returncode == 0, f"{page.name}: an example failed\n{p.stdout[-3000:]}\n{p.stderr[-5000:]}"


_LINK = re.compile(r"\]\(([^)\s]+)\)")


def _anchors(path: Path):
    out = set()
    for line in path.read_text().splitlines():
        if re.match(r"^#{1,6} ", line):
            h = re.sub(r"[^\w\- ]", "", line.lstrip("#").strip().lower())
            out.add(h.replace(" ", "-"))
    return out


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_links_resolve(page):
    for target in _LINK.findall(page.read_text()):
        if re.match(r"^[a-z]+://", target) or target.startswith("mailto:"):
            continue
        path, _, anchor = target.partition("#")
        dest = (page.parent / path).resolve() if path else page
        assert dest.exists(), f"{page.name}: link to a missing file {target}"
        if anchor and dest.suffix == ".md":
            assert anchor in _anchors(dest), f"{page.name}: link to a missing anchor {target}"
