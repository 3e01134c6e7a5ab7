"""A saved index is never lost, corrupted or silently wrong (issue 18; docs/index.md "Durability"):
stale handles, two handles appending in place, saving over another index, threads adding,
text that str.splitlines() would break, and a reader process searching while a writer
commits. The crash tests (SIGKILL at every step of a save) are in test_index_crash.py."""
import json
import os
import pathlib
import subprocess
import sys
import textwrap
import threading

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rasfast.index import IndexConflictError, ThemeIndex

from index_files import index_file

REPO = pathlib.Path(__file__).resolve().parents[1]


def _rows(n, d=8, t=5, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(n, d, generator=g), torch.rand(n, t, generator=g)


def _base(tmp_path, n=60, seed=0, name="ix"):
    emb, ppd = _rows(n, seed=seed)
    ix = ThemeIndex.build(emb, ppd, passages=[(i, f"t{i}", f"passage {i}") for i in range(n)],
                          shards=2)
    ix.save(tmp_path / name)
    return tmp_path / name, ix


def _equal(a: ThemeIndex, b: ThemeIndex) -> None:
    """Bit-for-bit the same index (one implementation, so bitwise is right here)."""
    assert len(a) == len(b) and a.shards == b.shards
    assert torch.equal(a.emb, b.emb) and torch.equal(a.ppd, b.ppd)
    assert a.pids.tolist() == b.pids.tolist()
    assert a.titles == b.titles and a.texts == b.texts


def _added(ix, n=10, seed=9, tag="new"):
    emb, ppd = _rows(n, seed=seed)
    start = 10_000 * seed
    return ix.add(emb, ppd, passages=[(start + i, tag, f"{tag} {i}") for i in range(n)])


# ------------------------------------------------------------------ handles and directories
@pytest.mark.parametrize("mmap", [True, False])
def test_save_elsewhere_then_back_home(tmp_path, mmap):
    x, orig = _base(tmp_path)
    ix = ThemeIndex.load(x, mmap=mmap)
    ix.save(tmp_path / "y")
    ix.save(x)  # used to raise "Bad address" and leave x without a manifest
    _equal(ThemeIndex.load(x), orig)
    _equal(ThemeIndex.load(tmp_path / "y"), orig)


@pytest.mark.parametrize("mmap", [True, False])
def test_stale_handle_cannot_overwrite_newer_commit(tmp_path, mmap):
    x, _ = _base(tmp_path)
    a = ThemeIndex.load(x, mmap=mmap)
    b = ThemeIndex.load(x, mmap=mmap)
    _added(b)
    b.save(x)
    want = ThemeIndex.load(x, mmap=False)
    assert len(want) == 70
    with pytest.raises(IndexConflictError, match="changed by another writer"):
        a.save(x)  # a changed nothing, but saving it would throw b's shard away
    _added(a, seed=3, tag="a")
    with pytest.raises(IndexConflictError, match="generation"):
        a.save(x)
    _equal(ThemeIndex.load(x), want)
    # the refused handle can still be saved elsewhere
    a.save(tmp_path / "a_copy")
    assert len(ThemeIndex.load(tmp_path / "a_copy")) == 70


def test_two_mapped_handles_appending_in_place_keep_their_own_rows(tmp_path):
    x, _ = _base(tmp_path)
    a = ThemeIndex.load(x, mmap=True)
    b = ThemeIndex.load(x, mmap=True)
    a_emb, a_ppd = _rows(10, seed=3)
    b_emb, b_ppd = _rows(10, seed=4)
    a.add(a_emb, a_ppd, passages=[(900 + i, "a", f"a {i}") for i in range(10)])
    b.add(b_emb, b_ppd, passages=[(800 + i, "b", f"b {i}") for i in range(10)])
    # each handle still sees its own new rows (they used to be written at the same offset)
    assert torch.equal(a.emb[60:], a_emb) and torch.equal(b.emb[60:], b_emb)
    b.save(x)
    assert torch.equal(a.emb[60:], a_emb)  # b's commit did not touch a's uncommitted rows
    with pytest.raises(IndexConflictError):
        a.save(x)
    got = ThemeIndex.load(x)
    assert torch.equal(got.emb[60:], b_emb) and got.texts[60:] == [f"b {i}" for i in range(10)]
    assert got.pids[60:].tolist() == list(range(800, 810))


def test_save_over_another_index_keeps_it_until_the_commit(tmp_path):
    x, old = _base(tmp_path, seed=1)
    other = ThemeIndex.build(*_rows(33, seed=2), shards=3)
    names_before = {p.name: p.read_bytes() for p in x.iterdir() if p.is_file()}
    other.save(x)
    _equal(ThemeIndex.load(x), other)
    # the old generation's files are untouched (a reader may have them mapped) ...
    for name, data in names_before.items():
        if name not in ("manifest.json", ".lock"):
            assert (x / name).read_bytes() == data, name
    # ... and still load as the old index through their numbered manifest
    _equal(ThemeIndex.load(x, generation=1), old)
    removed = ThemeIndex.compact(x)
    assert "emb.1.bin" in removed and "manifest.1.json" in removed
    _equal(ThemeIndex.load(x), other)


def test_threads_adding_to_one_index_get_distinct_rows(tmp_path):
    emb, ppd = _rows(20, d=64, seed=0)
    ix = ThemeIndex.build(emb, ppd)
    m = 4000  # large enough that the copies release the GIL while another add runs
    parts = {t: _rows(m, d=64, seed=100 + t) for t in range(8)}
    barrier = threading.Barrier(8)

    def add(t):
        barrier.wait()
        ix.add(parts[t][0], parts[t][1], titles=[f"thread {t}"] * m, texts=["x"] * m)

    threads = [threading.Thread(target=add, args=(t,)) for t in range(8)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert len(ix) == 20 + 8 * m and len(ix.shards) == 9
    starts = sorted(a for a, _ in ix.shards)
    assert starts == [0] + [20 + m * i for i in range(8)]
    assert sorted(ix.pids.tolist()) == list(range(20 + 8 * m))  # default pids: row numbers, no repeats
    for a, b in ix.shards[1:]:  # every shard holds exactly one thread's rows
        t = int(ix.titles[a].split()[1])
        assert torch.equal(ix.emb[a:b], parts[t][0])
    ix.save(tmp_path / "ix")
    _equal(ThemeIndex.load(tmp_path / "ix"), ix)


# ------------------------------------------------------------------ text
AWKWARD = ["line\u2028sep", "para\u2029sep", "next\u0085line", "nul\x00byte", "cr\rlf\n",
           "\ufeffbom", "tab\tand \\ backslash \"quote\"", "emoji \U0001F600", ""]


@pytest.mark.parametrize("mmap", [True, False])
def test_awkward_text_round_trips(tmp_path, mmap):
    n = len(AWKWARD)
    ix = ThemeIndex.build(*_rows(n), titles=AWKWARD[::-1], texts=AWKWARD)
    ix.save(tmp_path / "ix")
    got = ThemeIndex.load(tmp_path / "ix", mmap=mmap)
    assert got.texts == AWKWARD and got.titles == AWKWARD[::-1]


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(texts=st.lists(st.text(st.characters(blacklist_categories=("Cs",))), min_size=1, max_size=6))
def test_any_text_round_trips_byte_for_byte(tmp_path_factory, texts):
    d = tmp_path_factory.mktemp("ix")
    ix = ThemeIndex.build(*_rows(len(texts)), titles=texts[::-1], texts=texts)
    ix.save(d)
    got = ThemeIndex.load(d)
    assert [t.encode("utf-8") for t in got.texts] == [t.encode("utf-8") for t in texts]
    assert got.titles == texts[::-1]


def test_lone_surrogates_are_refused_when_the_passage_enters(tmp_path):
    with pytest.raises(ValueError, match=r"texts\[1\].*lone surrogate"):
        ThemeIndex.build(*_rows(2), texts=["fine", "bad \udc80 text"])
    ix = ThemeIndex.build(*_rows(2))
    with pytest.raises(ValueError, match=r"titles\[0\].*lone surrogate"):
        ix.add(*_rows(1), titles=["\ud800"], texts=["x"])
    assert len(ix) == 2  # a refused add changes nothing
    with pytest.raises(TypeError, match=r"texts\[0\]: expected a str"):
        ThemeIndex.build(*_rows(1), texts=[b"bytes"])


def test_corrupt_passage_lines_name_the_file_and_line(tmp_path):
    x, _ = _base(tmp_path)
    p = index_file(x, "passages")
    data = bytearray(p.read_bytes())
    lines = bytes(data).split(b"\n")
    start = sum(len(ln) + 1 for ln in lines[:4])
    data[start + 30:start + 32] = b"\xff\xfe"  # same length: the record index still fits
    p.write_bytes(bytes(data))
    ix = ThemeIndex.load(x)   # titles and texts are decoded on access (lazy), so ...
    assert ix.texts[3] == "passage 3"
    with pytest.raises(ValueError, match=r"passages\.1\.jsonl: line 5 is not a passage record "
                                         r"\(UnicodeDecodeError"):
        ix.texts[4]    # ... the bad record is named when it is read
    # an ends file that does not match the passages file is refused at load
    m = json.loads((x / "manifest.json").read_text())
    (x / m["passages"]["ends"]).write_bytes(b"\0" * 8 * 59)
    with pytest.raises(ValueError, match=r"passages\.1\.ends: truncated"):
        ThemeIndex.load(x)


def test_passages_are_decoded_lazily_and_survive_add_and_save(tmp_path):
    from rasfast.index.passages import TextColumn
    x, orig = _base(tmp_path, n=200)
    ix = ThemeIndex.load(x)
    assert isinstance(ix.texts, TextColumn) and ix.texts == orig.texts and ix.titles == orig.titles
    assert ix.texts[-1] == "passage 199" and ix.texts[10:13] == ["passage 10", "passage 11", "passage 12"]
    _added(ix, n=5, tag="more")
    assert isinstance(ix.texts, TextColumn) and ix.texts[-1] == "more 4" and len(ix.texts) == 205
    ix.save(x)
    got = ThemeIndex.load(x)
    assert list(got.texts) == list(orig.texts) + [f"more {i}" for i in range(5)]
    res = got.passages(np.array([[199, 204, -1]]))
    assert [(p.pid, p.text) for p in res[0]] == [(199, "passage 199"), (90004, "more 4")]
    # a version-2 directory (no ends file) still loads eagerly and gains one on its next save
    m = json.loads((x / "manifest.json").read_text())
    del m["passages"]["ends"]
    (x / "manifest.json").write_text(json.dumps(m))
    old = ThemeIndex.load(x)
    assert isinstance(old.texts, list) and old.texts == got.texts
    _added(old, n=2, seed=5, tag="v2")
    old.save(x)
    again = ThemeIndex.load(x)
    assert isinstance(again.texts, TextColumn) and list(again.texts) == list(old.texts)


# ------------------------------------------------------------------ readers vs writers
READER = textwrap.dedent("""
    import sys, time, numpy as np, torch
    from rasfast.index import ThemeIndex
    d, qfile, want_file, seconds = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4])
    q, qp = np.load(qfile), np.load(qfile.replace(".npy", "_ppd.npy"))
    want = np.load(want_file)
    ix = ThemeIndex.load(d, mmap=True)
    print("ready", flush=True)
    t0, n = time.time(), 0
    while time.time() - t0 < seconds:
        for kw in ({}, {"max_memory": "4MB"}, {"scope": "global"}):
            ids, _ = ix.search(qp, q, 40, 5, **kw)
            if kw.get("scope") != "global" and not np.array_equal(ids, want):
                print("WRONG", kw, ids, want, flush=True)
                sys.exit(3)
        n += 1
    print("searches", n, flush=True)
""")


@pytest.mark.slow
def test_reader_process_keeps_searching_while_a_writer_commits(tmp_path):
    x, ix = _base(tmp_path, n=3000)
    q, qp = (t.numpy() for t in _rows(3, seed=5))
    want = ix.search(qp, q, 40, 5)[0]
    np.save(tmp_path / "q.npy", q)
    np.save(tmp_path / "q_ppd.npy", qp)
    np.save(tmp_path / "want.npy", want)
    env = dict(os.environ, PYTHONPATH=str(REPO / "tests"))
    reader = subprocess.Popen([sys.executable, "-c", READER, str(x), str(tmp_path / "q.npy"),
                               str(tmp_path / "want.npy"), "6"],
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    assert reader.stdout.readline().strip() == "ready"
    w = ThemeIndex.load(x, mmap=True)
    for i in range(3):  # incremental commits, then full rewrites of the same directory
        _added(w, n=50, seed=20 + i)
        w.save(x)
    for i in range(3):
        other = ThemeIndex.build(*_rows(2000, seed=40 + i))
        other.save(x)
        w = ThemeIndex.load(x, mmap=True)
        w.save(tmp_path / "elsewhere")
        ThemeIndex.load(tmp_path / "elsewhere").save(x)
    out, _ = reader.communicate(timeout=120)
    assert reader.returncode == 0, out  # -7 was SIGBUS: a mapped file truncated under it
    assert "searches" in out


# ------------------------------------------------------------------ threads
def _modes():
    return [dict(), dict(scope="global"), dict(chunk_rows=37), dict(chunk_rows=37, scope="global"),
            dict(max_memory=4_600_000), dict(max_memory=4_600_000, scope="global"),
            dict(theme_weight=0.3, max_memory=4_700_000)]


@pytest.mark.parametrize("mmap", [None, True, False])
def test_every_search_mode_is_thread_safe(tmp_path, mmap):
    emb, ppd = _rows(3000, d=16, t=7, seed=11)
    ix = ThemeIndex.build(emb, ppd, shards=3)
    if mmap is not None:
        ix.save(tmp_path / "ix")
        ix = ThemeIndex.load(tmp_path / "ix", mmap=mmap)
    modes = _modes() if mmap is not None else [m for m in _modes() if "max_memory" not in m]
    queries = [_rows(4, d=16, t=7, seed=200 + i) for i in range(6)]
    jobs = [(qi, mi) for qi in range(len(queries)) for mi in range(len(modes))]
    want = {}
    for qi, mi in jobs:
        want[qi, mi] = ix.search(queries[qi][1], queries[qi][0], 150, 9, **modes[mi])
    want_dense = {qi: ix.dense_search(queries[qi][0], 6, max_memory="2MB" if mmap else None)
                  for qi in range(len(queries))}
    errors = []
    barrier = threading.Barrier(6)

    def work(t):
        barrier.wait()
        for j, (qi, mi) in enumerate(jobs[t:] + jobs[:t]):
            got = ix.search(queries[qi][1], queries[qi][0], 150, 9, **modes[mi])
            if not (torch.equal(got[0], want[qi, mi][0]) and torch.equal(got[1], want[qi, mi][1])):
                errors.append((t, qi, modes[mi]))
            if j % 5 == 0:
                d = ix.dense_search(queries[qi][0], 6, max_memory="2MB" if mmap else None)
                if not torch.equal(d[0], want_dense[qi][0]):
                    errors.append((t, qi, "dense"))

    threads = [threading.Thread(target=work, args=(t,)) for t in range(6)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert not errors, errors[:5]


def test_search_concurrent_with_add_sees_before_or_after():
    emb, ppd = _rows(400, d=12, t=6, seed=1)
    ix = ThemeIndex.build(emb, ppd)
    shards = [_rows(50, d=12, t=6, seed=300 + s) for s in range(6)]
    q = _rows(3, d=12, t=6, seed=7)
    # the results each state gives (states: 0..6 shards added)
    want, probe = [], ThemeIndex.build(emb, ppd)
    for s in range(7):
        want.append(probe.search(q[1], q[0], 60, 8, scope="global"))
        if s < 6:
            probe.add(*shards[s])
    stop, errors, seen = threading.Event(), [], set()

    def searcher():
        while not stop.is_set():
            got = ix.search(q[1], q[0], 60, 8, scope="global")
            match = [s for s, w in enumerate(want) if torch.equal(got[0], w[0])
                     and torch.equal(got[1], w[1])]
            if not match:
                errors.append(got)
            seen.update(match)

    threads = [threading.Thread(target=searcher) for _ in range(3)]
    for th in threads:
        th.start()
    for s in range(6):
        ix.add(*shards[s])
    stop.set()
    for th in threads:
        th.join()
    assert not errors
    assert torch.equal(ix.search(q[1], q[0], 60, 8, scope="global")[0], want[6][0])
