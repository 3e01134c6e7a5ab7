"""Which backends the parity tests compare with the reference on this machine."""
import importlib.util

import torch

import rasfast

TRITON = importlib.util.find_spec("triton") is not None
# Triton runs on CPU tensors only under its interpreter, which conftest turns on only where no
# GPU is visible (interpreting there would also interpret the GPU tests' Triton). On a GPU
# machine the cuda_kernels tests run the same Triton kernels on the device instead.
_PROBLEM = rasfast.dispatch.triton_interpreter_problem() if TRITON else None
TRITON_CPU = TRITON and rasfast.dispatch.triton_interpret() and _PROBLEM is None
TRITON_CPU_SKIP = ("triton is not installed" if not TRITON else
                   _PROBLEM if _PROBLEM and rasfast.dispatch.triton_interpret() else
                   "Triton on CPU tensors runs only interpreted (TRITON_INTERPRET=1, set by "
                   "conftest where no GPU is visible); here the GPU tests run Triton on the device")


def cpu_backends(triton: bool = True):
    """Backends that run on CPU tensors: the compiled cpu module, and Triton interpreted."""
    out = ["cpu"]
    if triton and TRITON_CPU:
        out.append("triton")
    return out


def gpu_backends():
    """Backends the GPU tests compare: cuda (+ triton) on a GPU; under RASFAST_CUDA_EMU=1
    the emulated cuda only (interpreted Triton has its own tiny-size tests)."""
    from conftest import EMULATED
    if EMULATED:
        return ["cuda"]
    if not torch.cuda.is_available():
        return []
    info = rasfast.backends()
    out = []
    if info["cuda"]["built"]:
        out.append("cuda")
    if info["triton"]["importable"]:
        out.append("triton")
    return out


def assert_topk_close(got, want, atol: float = 1e-5, rtol: float = 1e-5):
    """Two top-k results ``(ids [B, k], scores [B, k])`` from *different* floating-point
    implementations agree: scores within ``atol + rtol*|score|``, ids equal at every rank
    whose score is not within that tolerance of a neighbour's (a near-tie may come out in
    either order, so there only the set of ids in the tied run must match).

    Never compare two implementations bitwise: torch's AVX-512 and AVX2 kernels, the
    compiled kernels and the references round the last bit differently.
    """
    gi, gs = (torch.as_tensor(x) for x in got)
    wi, ws = (torch.as_tensor(x) for x in want)
    assert gi.shape == wi.shape and gs.shape == ws.shape, (gi.shape, wi.shape)
    gs64, ws64 = gs.double(), ws.double()
    finite = torch.isfinite(ws64)
    assert torch.equal(finite, torch.isfinite(gs64)), (gs, ws)
    tol = atol + rtol * ws64.abs().where(finite, torch.zeros_like(ws64))
    diff = (gs64 - ws64).abs().where(finite, torch.zeros_like(ws64))
    assert bool((diff <= tol).all()), f"scores differ beyond tolerance:\n{gs}\n{ws}"
    for r in range(wi.shape[0]):
        row, s, t = wi[r].tolist(), ws64[r].tolist(), tol[r].tolist()
        start = 0
        while start < len(row):  # runs of ranks whose scores are within tolerance
            end = start + 1
            while end < len(row) and (abs(s[end] - s[end - 1]) <= 2 * max(t[end], t[end - 1])
                                      or not (finite[r, end] or finite[r, end - 1])):
                end += 1
            if end - start == 1:
                assert gi[r, start].item() == row[start], (r, start, gi[r], wi[r])
            else:
                assert sorted(gi[r, start:end].tolist()) == sorted(row[start:end]), \
                    (r, start, end, gi[r], wi[r])
            start = end
