"""Machine description stored next to every benchmark result (results are meaningless without it)."""
from __future__ import annotations

import datetime
import json
import os
import platform
import subprocess
from typing import Dict


def _cpu_model() -> str:
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def _cpuinfo_fields(*keys: str) -> Dict[str, str]:
    """The first value of each ``key`` in /proc/cpuinfo (empty where absent)."""
    out: Dict[str, str] = {}
    try:
        for line in open("/proc/cpuinfo"):
            k, _, v = line.partition(":")
            k = k.strip()
            if k in keys and k not in out:
                out[k] = v.strip()
    except OSError:
        pass
    return out


def _zen(family: int, model: int) -> str:
    """AMD's core generation from family/model (family 0x19 holds Zen 3 and Zen 4)."""
    if family == 0x17:
        return "Zen/Zen+" if model < 0x30 else "Zen 2"
    if family == 0x19:
        zen4 = 0x10 <= model <= 0x1F or 0x60 <= model <= 0x7F or 0xA0 <= model <= 0xAF
        return "Zen 4" if zen4 else "Zen 3"
    if family == 0x1A:
        return "Zen 5"
    return "unknown"


def cpu_family() -> Dict[str, object]:
    """Vendor, family, model and stepping from /proc/cpuinfo, with AMD's Zen generation:
    the same model name ("AMD EPYC" in a VM) covers CPUs whose kernels run differently."""
    f = _cpuinfo_fields("vendor_id", "cpu family", "model", "stepping")
    out: Dict[str, object] = {"vendor": f.get("vendor_id", "unknown")}
    try:
        fam, model = int(f["cpu family"]), int(f["model"])
    except (KeyError, ValueError):
        return out
    out.update(family=fam, model=model, stepping=f.get("stepping"))
    if out["vendor"] == "AuthenticAMD":
        out["generation"] = _zen(fam, model)
    return out


def cpu_family_text(info: Dict[str, object]) -> str:
    """e.g. "AuthenticAMD family 25 model 17 (Zen 4)"."""
    c = info.get("cpu_family") or {}
    if "family" not in c:
        return str(c.get("vendor", "unknown"))
    gen = f" ({c['generation']})" if c.get("generation") else ""
    return f"{c['vendor']} family {c['family']} model {c['model']}{gen}"


SIMD_FLAGS = ("sse4_2", "avx", "avx2", "fma", "f16c", "avx512f", "avx512bw", "avx512vl",
              "avx512_vnni", "avx512_bf16", "avx512_fp16", "amx_tile", "asimd", "sve")


def cpu_flags() -> list:
    """The vector-ISA flags of this CPU that the kernels can dispatch on (from /proc/cpuinfo)."""
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith(("flags", "Features")):
                have = set(line.split(":", 1)[1].split())
                return [f for f in SIMD_FLAGS if f in have]
    except OSError:
        pass
    return []


def machine_info() -> Dict[str, object]:
    import numpy as np
    import torch

    info: Dict[str, object] = {
        "date_utc": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "cpu": _cpu_model(),
        "cpu_family": cpu_family(),
        "cores": os.cpu_count(),
        "cpu_flags": cpu_flags(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "numpy": np.__version__,
        "torch_threads": torch.get_num_threads(),
        "gpu": None,
    }
    try:
        import rasfast
        b = rasfast.backends()
        info["rasfast_threads"] = b["cpu"]["threads"]
        # which ops run C++ operator kernels (rasfast._torch_ops) rather than Python ones
        info["operator_kernels"] = {dev: b[dev].get("operator_kernels") for dev in ("cpu", "cuda")}
    except Exception:
        pass
    if torch.cuda.is_available():
        p = torch.cuda.get_device_properties(0)
        info["gpu"] = {"name": p.name, "memory_gib": round(p.total_memory / 2**30, 1),
                       "cuda": torch.version.cuda}
    try:
        info["git"] = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                                     text=True, check=False).stdout.strip()
    except OSError:
        pass
    # the device machine's copy of the tree carries stale git metadata (the fifth GPU session's
    # files named a commit weeks old): the caller names the tree's commit there
    info["git"] = os.environ.get("RASFAST_GIT_COMMIT") or info.get("git")
    return info


def header_markdown(info: dict | None = None) -> str:
    """The results files' machine line: this machine's, or ``info`` (a saved machine_info())."""
    i = info or machine_info()
    gpu = i["gpu"]["name"] if i["gpu"] else "none (CPU only)"
    flags = " ".join(i["cpu_flags"]) or "unknown"
    line = (f"Machine: {i['cpu']}, {i['cores']} cores (SIMD: {flags}), GPU: {gpu}; Python {i['python']}, "
            f"torch {i['torch']}, numpy {i['numpy']}; commit {i.get('git', '?')}; {i['date_utc']}\n")
    if i["gpu"]:
        ops = (i.get("operator_kernels") or {}).get("cuda")
        line += f"\nC++ CUDA operator kernels (rasfast._torch_ops): {', '.join(ops) if ops else 'none'}\n"
    return line


if __name__ == "__main__":
    print(json.dumps(machine_info(), indent=2))
