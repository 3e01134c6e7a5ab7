"""Crash safety: a child process is SIGKILLed at every step of a save (before and after each
durable write, fsync, rename, and in the middle of a write, leaving it torn); the directory
must then load as exactly the old or exactly the new index, bit for bit, and the next writer
must be able to grow it."""
import pathlib
import shutil
import signal

import pytest
import torch

from rasfast.index import ThemeIndex

from crash_util import drive

RUN = """
import torch
from rasfast.index import ThemeIndex
scenario, src = sys.argv[1], sys.argv[2]

def rows(n, seed):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(n, 8, generator=g), torch.rand(n, 5, generator=g)

def run(d):
    torch.set_num_threads(1)
    if scenario == "full":            # another index saved over the one in d
        ThemeIndex.load(src, mmap=True).save(d)
        return
    ix = ThemeIndex.load(d, mmap=scenario == "append")  # grows in place / in memory
    e, p = rows(25, 77)
    ix.add(e, p, passages=[(5000 + i, "new", f"new \\u2028 {i}") for i in range(25)])
    ix.save(d)
"""


def _drive(scenario, src, jobs):
    return drive(RUN, [scenario, src], jobs)


def _rows(n, seed):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(n, 8, generator=g), torch.rand(n, 5, generator=g)


def _same(a, b) -> bool:
    return (len(a) == len(b) and a.shards == b.shards and torch.equal(a.emb, b.emb)
            and torch.equal(a.ppd, b.ppd) and a.pids.tolist() == b.pids.tolist()
            and a.texts == b.texts and a.titles == b.titles)


def _states(tmp_path, scenario):
    """(directory template, old index, new index) of a scenario."""
    tpl = tmp_path / "template"
    e, p = _rows(60, 1)
    old = ThemeIndex.build(e, p, passages=[(i, f"t{i}", f"old {i}") for i in range(60)], shards=2)
    old.save(tpl)
    src = tmp_path / "src"
    if scenario == "full":
        e2, p2 = _rows(45, 2)
        new = ThemeIndex.build(e2, p2, passages=[(100 + i, "s", f"src {i}") for i in range(45)],
                               shards=3)
        new.save(src)
    else:
        new = ThemeIndex.load(tpl, mmap=False)
        e3, p3 = _rows(25, 77)
        new.add(e3, p3, passages=[(5000 + i, "new", f"new \u2028 {i}") for i in range(25)])
    return tpl, src, old, new


@pytest.mark.slow
@pytest.mark.parametrize("scenario", ["full", "append", "append_memory"])
def test_sigkill_at_every_step_of_a_save_leaves_old_or_new(tmp_path, scenario):
    tpl, src, old, new = _states(tmp_path, scenario)
    probe = tmp_path / "probe"
    shutil.copytree(tpl, probe)
    assert _drive(scenario, src, [(0, probe)]) == {0: 0}
    points = int((tmp_path / "points").read_text())
    assert points >= 10
    assert _same(ThemeIndex.load(probe), new)
    dirs = {k: tmp_path / f"k{k}" for k in range(1, points + 1)}
    for d in dirs.values():
        shutil.copytree(tpl, d)
    status = _drive(scenario, src, list(dirs.items()))
    outcomes = {"old": 0, "new": 0}
    for k, d in dirs.items():
        assert status[k] == -signal.SIGKILL, (k, status[k])
        got = ThemeIndex.load(d)
        got_mapped = ThemeIndex.load(d, mmap=True)
        if _same(got, old):
            outcomes["old"] += 1
        else:
            assert _same(got, new), f"kill point {k}: neither the old nor the new index"
            outcomes["new"] += 1
        assert _same(got_mapped, got)
        # the next writer grows the directory whatever the crash left behind
        e, p = _rows(5, 3)
        after = ThemeIndex.load(d, mmap=True).add(e, p, passages=[(9000 + i, "x", "y")
                                                                  for i in range(5)])
        after.save(d)
        again = ThemeIndex.load(d)
        assert len(again) == len(got) + 5 and torch.equal(again.emb[-5:], after.emb[-5:])
        assert again.texts[:len(got)] == got.texts
        shutil.rmtree(d)
    assert outcomes["old"] > 0 and outcomes["new"] > 0, outcomes
