"""A knowledge index survives crashes, stale handles and its version-1 layout (issue 18):
``rasfast index add`` killed at any step of its save leaves exactly the old or the new
index, and running it again finishes the add."""
import json
import os
import pathlib
import shutil
import signal

import numpy as np
import pytest

from rasfast.encode import HashingEncoder
from rasfast.index import IndexConflictError
from rasfast.index.knowledge import KnowledgeIndex, build_knowledge_index
from rasfast.index.knowledge.build import add_to_knowledge_index

from crash_util import drive

ENC = HashingEncoder(64)


def _corpus(path, n, start=0):
    rows = [{"title": f"P{i}", "text": f"P{i} lives in Town{i % 4} \u2028 near Lake{i % 3}.",
             "triples": [[f"P{i}", "lives in", f"Town{i % 4}"], [f"Town{i % 4}", "near", f"Lake{i % 3}"]]}
            for i in range(start, start + n)]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def _same(a: KnowledgeIndex, b: KnowledgeIndex) -> bool:
    ta, tb = a.theme, b.theme
    if not (len(ta) == len(tb) and ta.shards == tb.shards and ta.texts == tb.texts
            and np.array_equal(ta.emb.numpy(), tb.emb.numpy())
            and np.array_equal(ta.ppd.numpy(), tb.ppd.numpy())):
        return False
    if a.triples != b.triples or a.pids != b.pids:
        return False
    for f in ("indptr", "indices", "head", "tail"):
        if not np.array_equal(np.asarray(getattr(a.graph, f)), np.asarray(getattr(b.graph, f))):
            return False
    return np.array_equal(np.asarray(a.triple_emb), np.asarray(b.triple_emb))


def test_stale_knowledge_handle_is_refused(tmp_path):
    build_knowledge_index(_corpus(tmp_path / "c.jsonl", 10), tmp_path / "ix", ENC, num_themes=2,
                          progress=False)
    a = KnowledgeIndex.load(tmp_path / "ix")
    add_to_knowledge_index(tmp_path / "ix", _corpus(tmp_path / "more.jsonl", 4), ENC,
                           progress=False)
    want = KnowledgeIndex.load(tmp_path / "ix")
    with pytest.raises(IndexConflictError, match="changed by another writer"):
        a.save(tmp_path / "ix")
    assert _same(KnowledgeIndex.load(tmp_path / "ix"), want) and len(want) == 14


FIXTURES = pathlib.Path(__file__).resolve().parent / "fixtures"


def test_version_1_layout_loads_and_upgrades_on_save(tmp_path):
    # a format-3 index written by the format-3 code (tests/fixtures/make_knowledge_v3.py),
    # turned into the version 1 layout below; encoder HashingEncoder(16)
    d = tmp_path / "ix"
    shutil.copytree(FIXTURES / "knowledge_v3_one", d)
    want = KnowledgeIndex.load(d)
    # rewrite it as rasfast 0.1 left it: fixed names, no generation in knowledge.json
    m = json.loads((d / "knowledge.json").read_text())
    for key, legacy in (("triples", "triples.jsonl"), ("graph", "graph"), ("triple_emb", "triple_emb.npy")):
        os.rename(d / m["files"][key], d / legacy)
    del m["files"], m["theme_generation"]
    m["version"] = 1
    (d / "knowledge.json").write_text(json.dumps(m))
    (d / "manifest.1.json").unlink()
    assert _same(KnowledgeIndex.load(d), want)
    add_to_knowledge_index(d, _corpus(tmp_path / "more.jsonl", 3, start=50), HashingEncoder(16),
                           progress=False)
    got = KnowledgeIndex.load(d)
    assert len(got) == 15 and json.loads((d / "knowledge.json").read_text())["version"] == 4
    assert got.triples[:12] == want.triples
    removed = KnowledgeIndex.compact(d)
    assert {"triples.jsonl", "graph", "triple_emb.npy"} <= set(removed)
    assert _same(KnowledgeIndex.load(d), got)


RUN = """
import rasfast.index.knowledge.index as kindex
from rasfast.encode import HashingEncoder
from rasfast.index.knowledge.build import add_to_knowledge_index
corpus = sys.argv[1]
wrap(kindex, "_write_npy")

def run(d):
    add_to_knowledge_index(d, corpus, HashingEncoder(64), progress=False)
"""


def _drive(corpus, jobs):
    return drive(RUN, [corpus], jobs)


@pytest.mark.slow
@pytest.mark.parametrize("mmap_layout", ["fresh", "grown"])
def test_index_add_killed_at_every_step_resumes(tmp_path, mmap_layout):
    tpl = tmp_path / "template"
    build_knowledge_index(_corpus(tmp_path / "c.jsonl", 12), tpl, ENC, num_themes=2, progress=False)
    if mmap_layout == "grown":  # a directory that already went through an add
        add_to_knowledge_index(tpl, _corpus(tmp_path / "c2.jsonl", 3, start=50), ENC, progress=False)
    more = _corpus(tmp_path / "more.jsonl", 5, start=100)
    old = KnowledgeIndex.load(tpl)
    probe, warm = tmp_path / "probe", tmp_path / "warm"
    shutil.copytree(tpl, probe)
    shutil.copytree(tpl, warm)
    # the first run also fills the embedding cache (more writes): count the second one
    assert _drive(more, [(0, warm)]) == {0: 0}
    assert _drive(more, [(0, probe)]) == {0: 0}
    new = KnowledgeIndex.load(probe)
    assert len(new) == len(old) + 5
    points = int((tmp_path / "points").read_text())
    assert points >= 8
    dirs = {k: tmp_path / f"k{k}" for k in range(1, points + 1)}
    for d in dirs.values():
        shutil.copytree(tpl, d)
    status = _drive(more, list(dirs.items()))
    outcomes = {"old": 0, "new": 0}
    for k, d in dirs.items():
        assert status[k] == -signal.SIGKILL, (k, status[k])
        got = KnowledgeIndex.load(d)
        if _same(got, old):
            outcomes["old"] += 1
            add_to_knowledge_index(d, more, ENC, progress=False)  # the same command again
            got = KnowledgeIndex.load(d)
        else:
            outcomes["new"] += 1
        assert _same(got, new), f"kill point {k}: neither old nor new, or the resume differs"
        shutil.rmtree(d)
    assert outcomes["old"] > 0, outcomes
