"""A manifest is checked against the files it describes (issue 31, item 1).

Format 4 array files carry a header (rasfast.index.array_header): a manifest that disagrees
with a file (dtype, dim, which array) is refused at load, naming the file and the field,
instead of failing at search ("contains NaN", "expected embeddings of dim 64"). Every
required key of every manifest is validated (rasfast.index.manifest_schemas); the schema
validator agrees with the ``jsonschema`` package. Formats 1-4 still load, search and grow.
"""
import copy
import json
import pathlib
import re
import shutil
import sys

import numpy as np
import pytest
import torch

from rasfast.data.qa import Passage
from rasfast.encode import HashingEncoder
from rasfast.index import ThemeIndex
from rasfast.index import array_header, manifest_schemas
from rasfast.index.knowledge import KnowledgeIndex
from rasfast.index.knowledge.extract import corpus_record
from rasfast._schema import problems
from rasfast.theme import KMeansThemeModel, config_schema

FIXTURES = pathlib.Path(__file__).resolve().parent / "fixtures"


def _edit(path: pathlib.Path, fn) -> None:
    m = json.loads(path.read_text())
    fn(m)
    path.write_text(json.dumps(m))


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """A ThemeIndex saved by this code: 40 rows, dim 64, 8 themes, float32, 2 shards."""
    rng = np.random.default_rng(0)
    emb = rng.standard_normal((40, 64)).astype(np.float32)
    d = tmp_path_factory.mktemp("hdr") / "ix"
    ThemeIndex.build(emb, num_themes=8, shards=2).save(d)
    return d


def _copy(saved, tmp_path) -> pathlib.Path:
    d = tmp_path / "ix"
    shutil.copytree(saved, d)
    return d


def _files(d):
    m = json.loads((d / "manifest.json").read_text())
    return {k: e["file"] for k, e in m["arrays"].items()}


# ------------------------------------------------------------------ header vs manifest
def test_saved_files_carry_their_header(saved):
    m = json.loads((saved / "manifest.json").read_text())
    assert m["version"] == 4
    for name, entry in m["arrays"].items():
        head = array_header.read(saved / entry["file"])
        width = 1 if name == "pids" else entry["shape"][1]
        assert head == {"name": name, "dtype": entry["dtype"], "ndim": len(entry["shape"]),
                        "width": width, "size": 64}
        assert entry["offset"] == 64
        itemsize = 8 if name == "pids" else 4
        assert (saved / entry["file"]).stat().st_size == 64 + 40 * width * itemsize


# manifest edit -> (the file the error names, a pattern of the rest of the message)
MISMATCHES = {
    "emb dtype float16": (lambda m: m["arrays"]["emb"].update(dtype="float16"),
                          "emb", r"dtype 'float32' \(its header\), .*manifest.json says 'float16'"),
    "emb dtype bfloat16": (lambda m: m["arrays"]["emb"].update(dtype="bfloat16"),
                           "emb", r"dtype 'float32' .* says 'bfloat16'"),
    "ppd dtype float16": (lambda m: m["arrays"]["ppd"].update(dtype="float16"),
                          "ppd", r"dtype 'float32' .* says 'float16'"),
    "dim 32": (lambda m: (m.update(dim=32), m["arrays"]["emb"].update(shape=[40, 32])),
               "emb", r"shape \(dim\) 64 \(its header\), .* says 32"),
    "num_themes 4": (lambda m: (m.update(num_themes=4), m["arrays"]["ppd"].update(shape=[40, 4])),
                     "ppd", r"shape \(num_themes\) 8 .* says 4"),
    "emb names the ppd file": (lambda m: m["arrays"]["emb"].update(file=m["arrays"]["ppd"]["file"]),
                               "ppd", r"array 'ppd' \(its header\), .* says 'emb'"),
    "pids names the emb file": (lambda m: m["arrays"]["pids"].update(file=m["arrays"]["emb"]["file"]),
                                "emb", r"array 'emb' .* says 'pids'"),
}


@pytest.mark.parametrize("mmap", [True, False])
@pytest.mark.parametrize("case", list(MISMATCHES))
def test_a_manifest_that_disagrees_with_a_file_is_refused_at_load(saved, tmp_path, case, mmap):
    edit, array, rest = MISMATCHES[case]
    d = _copy(saved, tmp_path)
    fname = _files(d)[array]
    _edit(d / "manifest.json", edit)
    with pytest.raises(ValueError, match=rf"{fname}: the file holds {rest}"):
        ThemeIndex.load(d, mmap=mmap)


def test_a_headerless_or_corrupt_file_is_refused(saved, tmp_path):
    d = _copy(saved, tmp_path)
    emb = d / _files(d)["emb"]
    data = bytearray(emb.read_bytes())
    data[25] ^= 0xFF                       # inside the dtype field
    emb.write_bytes(bytes(data))
    with pytest.raises(ValueError, match=rf"{emb.name}: its header is corrupt \(CRC-32"):
        ThemeIndex.load(d)
    emb.write_bytes(bytes(data[64:]))      # the rows alone, as format 3 wrote them
    with pytest.raises(ValueError, match=rf"{emb.name}: no rasfast array header"):
        ThemeIndex.load(d)
    emb.write_bytes(b"")
    with pytest.raises(ValueError, match=rf"{emb.name}: no rasfast array header"):
        ThemeIndex.load(d)


def test_a_format_4_entry_must_start_its_rows_after_the_header(saved, tmp_path):
    d = _copy(saved, tmp_path)
    _edit(d / "manifest.json", lambda m: m["arrays"]["emb"].update(offset=0))
    with pytest.raises(ValueError, match=r"manifest.json: emb\.1\.bin offset 0"):
        ThemeIndex.load(d)
    _edit(d / "manifest.json", lambda m: m["arrays"]["emb"].pop("offset"))
    with pytest.raises(ValueError, match=r"manifest.json: malformed manifest: arrays\.emb\.offset: missing"):
        ThemeIndex.load(d)


def test_bytes_past_the_committed_rows_are_still_allowed(saved, tmp_path):
    d = _copy(saved, tmp_path)
    for f in _files(d).values():
        with open(d / f, "ab") as fh:
            fh.write(b"\x01" * 100)
    got = ThemeIndex.load(d)
    assert torch.equal(got.emb, ThemeIndex.load(saved).emb)


def test_the_theme_model_must_match_the_manifest(saved, tmp_path):
    d = _copy(saved, tmp_path)
    m = json.loads((d / "manifest.json").read_text())
    tdir = d / m["theme_model"]["dir"]
    shutil.rmtree(tdir)
    rng = np.random.default_rng(1)
    KMeansThemeModel(num_themes=8).fit(torch.from_numpy(rng.standard_normal((40, 32)).astype(np.float32))).save(tdir)
    with pytest.raises(ValueError, match=rf"{tdir.name}: the theme model has dim 32, .*manifest.json says dim 64"):
        ThemeIndex.load(d)
    shutil.rmtree(tdir)
    KMeansThemeModel(num_themes=5).fit(torch.from_numpy(rng.standard_normal((40, 64)).astype(np.float32))).save(tdir)
    with pytest.raises(ValueError, match=r"the theme model has num_themes 5, .* says num_themes 8"):
        ThemeIndex.load(d)
    assert len(ThemeIndex.load(d, load_theme_model=False)) == 40


# ------------------------------------------------------------------ required keys
def _delete(path):
    def fn(m):
        *head, last = path
        for k in head:
            m = m[k]
        del m[last]
    return fn


# every key a ThemeIndex load reads without a default (format 4)
THEME_REQUIRED = [("format",), ("version",), ("generation",), ("num_rows",), ("dim",), ("arrays",),
                  ("shards",), ("passages",), ("arrays", "emb"), ("arrays", "pids"),
                  ("arrays", "emb", "file"), ("arrays", "emb", "dtype"), ("arrays", "emb", "shape"),
                  ("arrays", "emb", "offset"), ("arrays", "ppd", "dtype"), ("arrays", "pids", "file"),
                  ("passages", "file"), ("passages", "count"), ("passages", "bytes")]


@pytest.mark.parametrize("path", THEME_REQUIRED, ids=".".join)
def test_every_required_theme_manifest_key_is_named_when_missing(saved, tmp_path, path):
    d = _copy(saved, tmp_path)
    _edit(d / "manifest.json", _delete(path))
    with pytest.raises(ValueError, match=r"manifest.json: ") as e:
        ThemeIndex.load(d)
    assert path[-1] in str(e.value)


THEME_WRONG = {
    "num_rows": lambda m: m.update(num_rows="40"),
    "dim": lambda m: m.update(dim=0),
    "shards[0]": lambda m: m.update(shards=[[0, 20, 40]]),
    "arrays.emb.shape": lambda m: m["arrays"]["emb"].update(shape=40),
    "normalize_ppd": lambda m: m.update(normalize_ppd="yes"),
    "metric": lambda m: m.update(metric="cosine"),
    "theme_model.dir": lambda m: m["theme_model"].update(dir=3),
}


@pytest.mark.parametrize("key", list(THEME_WRONG))
def test_theme_manifest_values_of_the_wrong_type_are_named(saved, tmp_path, key):
    d = _copy(saved, tmp_path)
    _edit(d / "manifest.json", THEME_WRONG[key])
    with pytest.raises(ValueError, match=rf"manifest.json: malformed manifest: {re.escape(key)}: expected"):
        ThemeIndex.load(d)


@pytest.fixture(scope="module")
def knowledge_dir(tmp_path_factory):
    sys.path.insert(0, str(FIXTURES))
    from make_knowledge_v4 import corpus_rows
    rows = corpus_rows(10)
    d = tmp_path_factory.mktemp("kx") / "ix"
    ki = KnowledgeIndex.build([Passage(i, r["title"], r["text"]) for i, r in enumerate(rows)],
                              [r["triples"] for r in rows], HashingEncoder(16),
                              corpus_record("t"), num_themes=2)
    ki.bm25   # built, so the save writes it
    ki.save(d)
    return d


KNOWLEDGE_REQUIRED = [("format",), ("version",), ("num_passages",), ("num_triples",),
                      ("num_entities",), ("nnz",), ("num_input_triples",), ("dim",), ("extraction",),
                      ("graph",), ("theme_generation",), ("files",), ("parts",),
                      ("graph", "n_skipped"), ("graph", "n_hubs"), ("graph", "normalize"),
                      ("graph", "max_degree"), ("parts", 0, "csr"), ("parts", 0, "rows"),
                      ("parts", 0, "triples"), ("bm25", "dir"), ("bm25", "num_passages")]


@pytest.mark.parametrize("path", KNOWLEDGE_REQUIRED, ids=lambda p: ".".join(map(str, p)))
def test_every_required_knowledge_key_is_named_when_missing(knowledge_dir, tmp_path, path):
    d = _copy(knowledge_dir, tmp_path)
    _edit(d / "knowledge.json", _delete(path))
    with pytest.raises(ValueError, match=r"knowledge.json: ") as e:
        KnowledgeIndex.load(d)
    assert str(path[-1]) in str(e.value)


def test_knowledge_json_without_num_passages_is_a_clear_error(knowledge_dir, tmp_path):
    d = _copy(knowledge_dir, tmp_path)
    _edit(d / "knowledge.json", _delete(("num_passages",)))
    with pytest.raises(ValueError, match=r"knowledge.json: malformed manifest: num_passages: "
                                         r"missing \(a required key\)"):
        KnowledgeIndex.load(d)
    _edit(d / "knowledge.json", lambda m: m.update(num_passages=None, dim="16"))
    with pytest.raises(ValueError, match=r"num_passages: expected integer, got null None; "
                                         r"dim: expected integer, got string '16'"):
        KnowledgeIndex.load(d)


def test_knowledge_json_dim_must_be_its_theme_index_dim(knowledge_dir, tmp_path):
    d = _copy(knowledge_dir, tmp_path)
    _edit(d / "knowledge.json", lambda m: m.update(dim=32))
    with pytest.raises(ValueError, match=r"knowledge.json: dim 32, its theme index .* dim 16"):
        KnowledgeIndex.load(d)


def test_theme_model_json_keys_are_validated(saved, tmp_path):
    d = _copy(saved, tmp_path)
    m = json.loads((d / "manifest.json").read_text())
    cfg = d / m["theme_model"]["dir"] / "theme_model.json"
    _edit(cfg, lambda c: c.pop("backend"))
    with pytest.raises(ValueError, match=r"theme_model.json: malformed manifest: backend: missing"):
        ThemeIndex.load(d)


# ------------------------------------------------------------------ the validator = jsonschema
def _mutations(m, path=()):
    """The manifest with one key removed, or one value replaced by another JSON type, at
    every place in it."""
    if isinstance(m, dict):
        items = list(m.items())
    elif isinstance(m, list):
        items = list(enumerate(m))
    else:
        return
    for k, v in items:
        for replacement in (None, "x", 7, -1, 2.0, 2.5, True, [], {}, [1, 2, 3]):
            yield path + (k,), replacement
        if isinstance(m, dict):
            yield path + (k,), KeyError
        yield from _mutations(v, path + (k,))


def _apply(m, path, value):
    m = copy.deepcopy(m)
    t = m
    for k in path[:-1]:
        t = t[k]
    if value is KeyError:
        del t[path[-1]]
    else:
        t[path[-1]] = value
    return m


def test_the_schema_validator_agrees_with_jsonschema(saved, knowledge_dir):
    jsonschema = pytest.importorskip("jsonschema")
    cases = [
        (json.loads((saved / "manifest.json").read_text()), manifest_schemas.theme_index(4)),
        (json.loads((FIXTURES / "knowledge_v4" / "manifest.json").read_text()), manifest_schemas.theme_index(3)),
        (json.loads((knowledge_dir / "knowledge.json").read_text()), manifest_schemas.knowledge(4)),
        (json.loads((FIXTURES / "knowledge_v3" / "knowledge.json").read_text()), manifest_schemas.knowledge(3)),
        (json.loads((FIXTURES / "knowledge_v3" / "theme_model.1" / "theme_model.json").read_text()),
         config_schema("kmeans")),
    ]
    checked = 0
    for manifest, schema in cases:
        jsonschema.Draft202012Validator.check_schema(schema)
        validator = jsonschema.Draft202012Validator(schema)
        assert validator.is_valid(manifest) and not problems(manifest, schema)
        for path, value in _mutations(manifest):
            m = _apply(manifest, path, value)
            assert validator.is_valid(m) == (not problems(m, schema)), (path, value, problems(m, schema))
            checked += 1
    assert checked > 1000


# ------------------------------------------------------------------ formats 1-4 still load
def _knowledge_rows(n):
    sys.path.insert(0, str(FIXTURES))
    from make_knowledge_v4 import corpus_rows
    return corpus_rows(n)


def test_format_3_theme_index_of_a_format_4_knowledge_index_loads_searches_and_grows(tmp_path):
    """tests/fixtures/knowledge_v4: written before issue 31 (headerless ThemeIndex files,
    format 3, appended to by a second save; knowledge parts of layout 4; a BM25 folder)."""
    enc, rows = HashingEncoder(16), _knowledge_rows(18)
    d = tmp_path / "ix"
    shutil.copytree(FIXTURES / "knowledge_v4", d)
    assert json.loads((d / "manifest.json").read_text())["version"] == 3
    contents = [f"{r['title']}\n{r['text']}" for r in rows]
    want = np.asarray(enc.encode(contents), dtype=np.float32)
    for mmap in (True, False):
        ki = KnowledgeIndex.load(d, mmap=mmap)
        assert ki.pids == list(range(15)) and list(ki.theme.texts) == [r["text"] for r in rows[:15]]
        assert list(ki.triples) == [r["triples"] for r in rows[:15]]
        np.testing.assert_allclose(ki.theme.emb.numpy(), want[:15], rtol=1e-6, atol=1e-6)
        ids, _ = ki.theme.dense_search(want[:4], 1)
        assert ids[:, 0].tolist() == [0, 1, 2, 3]
        assert ki._bm25_saved == {"dir": "bm25.2", "num_passages": 15}
        assert ki.bm25.search(["P7 lives"], 1)[0][0].tolist() == [7]
    # grows in place: the new rows go after the headerless files' rows, the manifest stays 3
    ki = KnowledgeIndex.load(d, mmap=True)
    ki.add([Passage(i, r["title"], r["text"]) for i, r in enumerate(rows[15:], 15)],
           [r["triples"] for r in rows[15:]], enc, corpus_record("fixture"))
    ki.save(d)
    m = json.loads((d / "manifest.json").read_text())
    assert m["version"] == 3 and "offset" not in m["arrays"]["emb"]
    got = KnowledgeIndex.load(d, mmap=True)
    assert got.pids == list(range(18))
    np.testing.assert_allclose(got.theme.emb.numpy(), want, rtol=1e-6, atol=1e-6)
    # saved elsewhere: a full write in format 4, equal
    got.theme.save(tmp_path / "copy")
    assert json.loads((tmp_path / "copy" / "manifest.json").read_text())["version"] == 4
    assert torch.equal(ThemeIndex.load(tmp_path / "copy").emb, got.theme.emb)
    KnowledgeIndex.compact(d)
    assert KnowledgeIndex.load(d).pids == list(range(18))


def test_format_2_theme_index_loads_and_grows(tmp_path):
    """A version 2 directory (emb.bin ..., no generation, no ends file), as rasfast wrote it
    at commit 2ef241b, made from the format-3 fixture's files."""
    src = FIXTURES / "knowledge_v3_one"
    m3 = json.loads((src / "manifest.json").read_text())
    want = ThemeIndex.load(src)
    d = tmp_path / "v2"
    d.mkdir()
    for name, entry in m3["arrays"].items():
        shutil.copy(src / entry["file"], d / f"{name}.bin")
    shutil.copy(src / m3["passages"]["file"], d / "passages.jsonl")
    shutil.copytree(src / m3["theme_model"]["dir"], d / "theme_model")
    m2 = {"format": "rasfast.ThemeIndex", "version": 2, "num_rows": m3["num_rows"], "dim": m3["dim"],
          "num_themes": m3["num_themes"],
          "arrays": {n: dict(e, file=f"{n}.bin") for n, e in m3["arrays"].items()},
          "passages": {"file": "passages.jsonl", "count": m3["num_rows"],
                       "bytes": m3["passages"]["bytes"]},
          "shards": m3["shards"], "normalize_ppd": True, "metric": "l2", "encoder": m3["encoder"],
          "theme_model": {"name": m3["theme_model"]["name"], "dir": "theme_model"}}
    (d / "manifest.json").write_text(json.dumps(m2))
    got = ThemeIndex.load(d)
    assert torch.equal(got.emb, want.emb) and list(got.texts) == list(want.texts)
    enc = HashingEncoder(16)
    got.add(passages=[Passage(100, "new", "a new passage")], encoder=enc)
    got.save(d)
    m = json.loads((d / "manifest.json").read_text())
    assert m["version"] == 3 and m["arrays"]["emb"]["file"] == "emb.bin"
    again = ThemeIndex.load(d)
    assert len(again) == len(want) + 1 and torch.equal(again.emb[:len(want)], want.emb)
    assert again.texts[-1] == "a new passage"


def test_format_2_knowledge_index_loads(tmp_path):
    """knowledge.json version 2: one part named in ``files``, a theme generation, no parts."""
    d = tmp_path / "ix"
    shutil.copytree(FIXTURES / "knowledge_v3_one", d)
    want = KnowledgeIndex.load(d)
    _edit(d / "knowledge.json", lambda m: (m.pop("parts"), m.update(version=2)))
    got = KnowledgeIndex.load(d)
    assert got.pids == want.pids and list(got.triples) == list(want.triples)
    assert np.array_equal(np.asarray(got.graph.indices), np.asarray(want.graph.indices))
