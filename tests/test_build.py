"""The build produced what this machine can build: _C and _torch_ops always, _cuda wherever
nvcc exists."""
import importlib
import os
import shutil
import subprocess

import pytest
import torch


def nvcc_present() -> bool:
    cands = [os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda"]
    return shutil.which("nvcc") is not None or any(
        c and os.path.exists(os.path.join(c, "bin", "nvcc")) for c in cands)


def test_cpu_module_built():
    c = importlib.import_module("rasfast._C")
    assert c.omp_max_threads() >= 1
    assert hasattr(c, "select_k")


def test_torch_operator_kernels_built_for_the_installed_torch():
    """rasfast._torch_ops (csrc/torch_ops/) is built whenever torch is importable at build
    time, which `make install` guarantees; its stamp names the torch it was built against."""
    folder = os.path.dirname(importlib.import_module("rasfast._C").__file__)
    assert os.path.exists(os.path.join(folder, "_torch_ops.so"))
    with open(os.path.join(folder, "_torch_ops.torch-version")) as f:
        assert f.read().strip() == torch.__version__


@pytest.mark.skipif(not nvcc_present(), reason="no CUDA compiler on this machine")
def test_cuda_module_built_where_nvcc_exists():
    c = importlib.import_module("rasfast._cuda")  # static cudart: imports without a driver
    assert hasattr(c, "select_k")
    assert c.runtime_version() >= 12000
    expected = torch.cuda.device_count() if torch.cuda.is_available() else 0
    assert c.device_count() == expected
    status = c.device_status()
    assert (status == "ok") == (expected > 0), status


def test_triton_importable():
    triton = importlib.import_module("triton")  # installed by `make test` (extra "gpu")
    assert triton.__version__
    kernels = importlib.import_module("rasfast.kernels.select")
    assert callable(kernels.select_k)


# --------------------------------------------------------------------------- CUDA targets
def _cuda_module_file():
    return importlib.import_module("rasfast._cuda").__file__


@pytest.mark.skipif(not nvcc_present(), reason="no CUDA compiler on this machine")
def test_cuda_module_carries_sm80_sm90_sass_and_compute90_ptx():
    """Read from the module's own fatbinary: what a GPU's driver would actually load."""
    if os.environ.get("CUDAARCHS"):
        pytest.skip("CUDAARCHS is set: the module was built for the user's own targets")
    from rasfast._fatbin import code_targets
    targets = code_targets(_cuda_module_file())
    assert targets, "rasfast._cuda has no .nv_fatbin device code"
    found = set(targets)
    missing = {("sass", 80), ("sass", 90), ("ptx", 90)} - found
    assert not missing, f"rasfast._cuda lacks {sorted(missing)}; it carries {sorted(found)}"
    # every translation unit carries all three (a file built for other targets would not)
    counts = {t: targets.count(t) for t in found}
    assert counts[("sass", 80)] == counts[("sass", 90)] == counts[("ptx", 90)], counts
    # user-chosen CUDAARCHS is honoured elsewhere; the default build carries nothing older
    assert all(sm >= 80 for _, sm in found), sorted(found)


def _fatbin_blob(entries):
    """A synthetic .nv_fatbin section: one fatbinary holding (kind code, sm) entries."""
    import struct
    body = b""
    for kind, sm in entries:
        payload = b"\0" * 16
        hdr = struct.pack("<HHIQ", kind, 1, 64, len(payload)) + b"\0" * 12
        hdr += struct.pack("<I", sm) + b"\0" * (64 - 32)
        body += hdr + payload
    return struct.pack("<IHHQ", 0xBA55ED50, 1, 16, len(body)) + body


def test_fatbin_reader_sees_what_a_blob_holds():
    from rasfast._fatbin import fatbin_entries
    blob = _fatbin_blob([(2, 75), (1, 75)])
    assert fatbin_entries(blob) == [("sass", 75), ("ptx", 75)]
    # two blobs with padding between them, as in a multi-file module
    two = blob + b"\0" * 8 + _fatbin_blob([(2, 90)])
    assert fatbin_entries(two) == [("sass", 75), ("ptx", 75), ("sass", 90)]
    assert fatbin_entries(b"") == []


def test_fatbin_reader_on_host_only_files(tmp_path):
    from rasfast._fatbin import code_targets
    assert code_targets(importlib.import_module("rasfast._C").__file__) == []  # no device code
    bad = tmp_path / "not_elf.so"
    bad.write_bytes(b"MZ" + b"\0" * 100)
    with pytest.raises(ValueError, match="not a 64-bit little-endian ELF"):
        code_targets(str(bad))


def _configure_arch_probe(tmp_path, env_archs=None, cache_archs=None):
    """Configure (no build) a tiny CUDA project that includes cmake/CudaArchitectures.cmake
    exactly as CMakeLists.txt does; returns CMAKE_CUDA_ARCHITECTURES from its CMakeCache."""
    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    src = tmp_path / "src"
    src.mkdir()
    (src / "CMakeLists.txt").write_text(
        "cmake_minimum_required(VERSION 3.18)\n"
        "project(probe LANGUAGES NONE)\n"
        f'include("{repo}/cmake/CudaArchitectures.cmake")\n'
        "enable_language(CUDA)\n")
    env = dict(os.environ)
    env.pop("CUDAARCHS", None)
    if env_archs is not None:
        env["CUDAARCHS"] = env_archs
    cands = [os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda"]
    nvcc = shutil.which("nvcc") or next(os.path.join(c, "bin", "nvcc") for c in cands
                                        if c and os.path.exists(os.path.join(c, "bin", "nvcc")))
    cmd = [shutil.which("cmake"), "-S", str(src), "-B", str(tmp_path / "b"),
           f"-DCMAKE_CUDA_COMPILER={nvcc}"]
    if cache_archs is not None:
        cmd.append(f"-DCMAKE_CUDA_ARCHITECTURES={cache_archs}")
    r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    for line in (tmp_path / "b" / "CMakeCache.txt").read_text().splitlines():
        if line.startswith("CMAKE_CUDA_ARCHITECTURES:"):
            return line.split("=", 1)[1]
    raise AssertionError("CMAKE_CUDA_ARCHITECTURES not in the cache")


@pytest.mark.skipif(not nvcc_present() or shutil.which("cmake") is None,
                    reason="needs nvcc and cmake")
@pytest.mark.parametrize("how", ["default", "env", "cache"])
def test_cuda_architectures_follow_the_user(tmp_path, how):
    if how == "default":
        assert _configure_arch_probe(tmp_path) == "80-real;90-real;90-virtual"
    elif how == "env":
        assert _configure_arch_probe(tmp_path, env_archs="86") == "86"
    else:
        assert _configure_arch_probe(tmp_path, cache_archs="87-real") == "87-real"
