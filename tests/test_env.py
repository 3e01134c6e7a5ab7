"""rasfast._env: the per-call environment reads see every change made through os.environ."""
import os

from rasfast import _env


def test_reads_follow_os_environ(monkeypatch):
    name = "RASFAST_TEST_ENV_READ"
    monkeypatch.delenv(name, raising=False)
    assert _env.get(name) is None and _env.get(name, "d") == "d" and not _env.flag(name)
    monkeypatch.setenv(name, "1")
    assert _env.get(name) == "1" and _env.flag(name)
    os.environ[name] = "0"
    assert _env.get(name) == "0" and not _env.flag(name)
    os.environ[name] = ""
    assert not _env.flag(name)
    os.environ[name] = "käse"  # decoded as os.environ decodes it
    assert _env.get(name) == os.environ[name]
    del os.environ[name]
    assert _env.get(name, "gone") == "gone"


def test_fallback_without_the_mapping_internals(monkeypatch):
    name = "RASFAST_TEST_ENV_FALLBACK"
    monkeypatch.setattr(_env, "_FAST", False)
    monkeypatch.setenv(name, "x")
    assert _env.get(name) == "x" and _env.flag(name)
    monkeypatch.delenv(name)
    assert _env.get(name, "y") == "y"
