"""Host time of a GPU op call, measured without a GPU: the CUDA emulator's dry run.

Issue 38's target "host time under 10% of every op's call" is about the work the CPU does per
call of a cuda op: Python checks, torch allocations, launches. On the emulator
(RASFAST_CUDA_EMU=1) every launch, cub sort and memset is checked and counted but, in a dry
run (``rasfast._cuda_emu.emu_set_dry_run``), not run; the call's wall time is then its host
path alone. (Timing an ordinary emulated call and subtracting the kernels' time overstates
the host path several-fold: the emulated kernels' milliseconds of fibre switching leave the
caches cold for the host code that follows. Earlier notes that put beam search's host time
near 0.8-1.0 ms read it that way, busy-machine width rule included.)

As on a GPU, the busy-machine width rule is skipped (``_threads._on_gpu`` is made to say so:
the emulator's tensors are CPU tensors). A GPU host adds what the emulator cannot: torch's
CUDA allocator and cudaLaunchKernel (a few microseconds per launch); the launch counts are
listed so that cost can be added. Ops whose torch steps consume a kernel's output
(theme_scoped_search's GEMM path scatters the scope ids a kernel wrote) cannot run dry: on CPU
tensors torch checks the garbage ids. They are left out; the theme rows take the path the
planner picks for float32 CPU tensors (the distances' GEMM in torch, then select_k and the
gather kernel), and like graph_transformer_pool they include torch's CPU GEMMs, which the
dry run does not skip (small shapes keep them a minor part). These are CPU numbers on this machine, to compare paths
with each other in the same run, not GPU timings.

    python benchmarks/host_time_emu.py            # prints the table
    python benchmarks/host_time_emu.py --write    # also writes benchmarks/results/host_time_emu.{md,json}
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

os.environ["RASFAST_CUDA_EMU"] = "1"

import numpy as np  # noqa: E402
import torch  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from beam_graph import power_law_graph  # noqa: E402
from machine import header_markdown, machine_info  # noqa: E402

import rasfast  # noqa: E402
import rasfast._threads as _threads  # noqa: E402
from rasfast.device_work import count_device_work  # noqa: E402
from rasfast.ops import segment as segment_mod  # noqa: E402
from rasfast.ops import select as select_mod  # noqa: E402
from rasfast.ops.replay import EagerGraphs  # noqa: E402

RESULTS = os.path.join(HERE, "results")


def python_kernel(fn):
    """fn with the C++ operator kernels out of the way (the Python kernel functions of
    select_k and the segment ops serve, as before those kernels)."""
    def run():
        saved = select_mod.native_call, segment_mod.native_call
        select_mod.native_call = segment_mod.native_call = lambda *a: False
        try:
            return fn()
        finally:
            select_mod.native_call, segment_mod.native_call = saved
    return run


def with_env(fn, **env):
    """fn with environment settings (a kernel path forced), restored after."""
    def run():
        saved = {k: os.environ.get(k) for k in env}
        os.environ.update(env)
        try:
            return fn()
        finally:
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v
    return run


def cases(quick: bool):
    g = torch.Generator().manual_seed(0)
    x = torch.randn(16, 4096, generator=g)
    n = 20_000 if quick else 200_000
    indptr, indices = power_law_graph(n)
    graph = (torch.from_numpy(indptr), torch.from_numpy(indices.astype(np.int64)))
    B = 8 if quick else 64
    emb, q = torch.randn(n, 16, generator=g), torch.randn(B, 16, generator=g)
    ptr, ids = torch.arange(0, B * 50 + 1, 50), torch.randint(0, n, (B * 50,), generator=g)
    cand, cptr = torch.randn(B * 40, 16, generator=g), torch.arange(0, B * 40 + 1, 40)
    items, groups = torch.randn(B * 40, generator=g), torch.randint(0, 20, (B * 40,), generator=g)

    # the same seeds as B host arrays (gpu_roofline.py's per-question form: 724 us of host time
    # on the sixth session's H100 host, 147 us with device seeds)
    host_seeds = [ids[i * 50:(i + 1) * 50].numpy() for i in range(B)]

    # RAS's graph encoder at a per-question batch (gpu_roofline.py's host table: 64 graphs,
    # dim 256 there, 1,165 us of host time of a 1,230 us call on the sixth session's H100
    # host), small here: the dry run still runs torch's projections on the CPU
    from graph_conv_workload import make_batch, make_modules
    from rasfast.ops.graph_conv import normalise_layers
    gdim = 16
    convs, norms, _ = make_modules(dim=gdim, llm_hidden=8)
    specs = normalise_layers([(convs[0], norms[0]), (convs[1], norms[1]), convs[2]])
    xb, ei, ea, gptr = make_batch(2 if quick else 8, dim=gdim)
    # the same batch's index arrays as numpy (GraphEncoder's form for a host batch on a GPU)
    ei_np, gptr_np = ei.numpy(), gptr.numpy()
    # theme ops at a per-question shape, small (the dry run runs the torch distance GEMM)
    tN, tB, tK = (400, 2, 50)
    cppd = torch.rand(tN, 298, generator=g)
    cemb = torch.nn.functional.normalize(torch.randn(tN, 32, generator=g), dim=1)
    qppd, qemb = cppd[:tB].clone(), cemb[:tB].clone()

    # one question through the two per-question paths that replay from CUDA graphs on a GPU
    # (GraphEncoder.enable_cuda_graphs, ThemeIndex.enable_cuda_graphs), against their eager
    # calls: the replayed call's host side only (HostSideGraphs: the replay itself, one graph
    # launch on a GPU, does nothing here)
    from rasfast import ThemeIndex
    from rasfast.models.graph_encoder import GraphEncoder
    qx, qei, qea, qptr = make_batch(1, dim=gdim)
    enc_eager = GraphEncoder.from_pyg(convs, norms).eval()
    enc_replay = GraphEncoder.from_pyg(convs, norms).eval().enable_cuda_graphs(graphs=HostSideGraphs())
    tix = ThemeIndex.build(cemb, cppd)
    tix_replay = ThemeIndex.build(cemb, cppd).enable_cuda_graphs(graphs=HostSideGraphs())
    tq = (qppd[:1].numpy(), qemb[:1].numpy())

    def beam(v, seeds=(ptr, ids)):
        return lambda: rasfast.triple_beam_search(graph, emb, q, seeds, beam_width=10, max_len=2,
                                                  max_neighbors=100, backend="cuda", validate=v)
    out = [
        ("select_k 16 x 4096, k = 10 (C++ CUDA kernel)", lambda: rasfast.select_k(x, 10, backend="cuda")),
        ("select_k 16 x 4096, k = 10 (Python kernel)", python_kernel(lambda: rasfast.select_k(x, 10, backend="cuda"))),
        ("select_k 16 x 4096, k = 1000 (C++ CUDA kernel)", lambda: rasfast.select_k(x, 1000, backend="cuda")),
        ("select_k 16 x 4096, k = 1000 (Python kernel)", python_kernel(lambda: rasfast.select_k(x, 1000, backend="cuda"))),
        ("select_k 16 x 4096, k = 3000 (C++ CUDA kernel)", lambda: rasfast.select_k(x, 3000, backend="cuda")),
        ("select_k 16 x 4096, k = 3000, short-row select off (C++ CUDA kernel)",
         with_env(lambda: rasfast.select_k(x, 3000, backend="cuda"), RASFAST_SELECT_SMALL_N="0")),
        ("torch.topk 16 x 4096, k = 10 (CPU: not a GPU peer; for scale)", lambda: torch.topk(x, 10, 1, False)),
        (f"triple_beam_search {n // 1000}k triples, B = {B} x 50 seeds, validate auto", beam("auto")),
        (f"triple_beam_search {n // 1000}k triples, B = {B} x 50 seeds, validate none", beam("none")),
        (f"triple_beam_search {n // 1000}k triples, B = {B} x 50 seeds as {B} host arrays, validate none",
         beam("none", host_seeds)),
        (f"segment_topk_scores B = {B} x 40, n = 10, validate none (C++ CUDA kernel)",
         lambda: rasfast.segment_topk_scores(q, cand, cptr, 10, backend="cuda", validate="none")),
        (f"segment_topk_scores B = {B} x 40, n = 10, validate none (Python kernel)",
         python_kernel(lambda: rasfast.segment_topk_scores(q, cand, cptr, 10, backend="cuda",
                                                           validate="none"))),
        (f"segment_max_rank B = {B} x 40 items, 20 groups, k = 5, validate none (C++ CUDA kernel)",
         lambda: rasfast.segment_max_rank(items, groups, cptr, 5, backend="cuda", validate="none")),
        (f"segment_max_rank B = {B} x 40 items, 20 groups, k = 5, validate none (Python kernel)",
         python_kernel(lambda: rasfast.segment_max_rank(items, groups, cptr, 5, backend="cuda",
                                                        validate="none"))),
        (f"graph_transformer_pool {xb.shape[0] // 30} graphs x 30 nodes, 3 layers, dim {gdim}, validate auto",
         lambda: rasfast.graph_transformer_pool(xb, ei, ea, gptr, specs, backend="cuda")),
        (f"graph_transformer_pool {xb.shape[0] // 30} graphs x 30 nodes, 3 layers, dim {gdim}, validate none",
         lambda: rasfast.graph_transformer_pool(xb, ei, ea, gptr, specs, backend="cuda", validate="none")),
        (f"graph_transformer_pool {xb.shape[0] // 30} graphs x 30 nodes, 3 layers, dim {gdim}, host index arrays",
         lambda: rasfast.graph_transformer_pool(xb, ei_np, ea, gptr_np, specs, backend="cuda")),
        (f"theme_scope B = {tB}, N = {tN}, K = {tK}, validate none",
         lambda: rasfast.theme_scope(qppd, cppd, tK, backend="cuda", validate="none")),
        (f"theme_scoped_search B = {tB}, N = {tN}, K = {tK}, k = 10, validate none",
         lambda: rasfast.theme_scoped_search(qppd, qemb, cppd, cemb, tK, 10, backend="cuda",
                                             validate="none")),
        (f"GraphEncoder, one question (30 nodes, dim {gdim}), eager", no_grad(
            lambda: enc_eager.encode_batch(qx, qei, qea, qptr, backend="cuda"))),
        (f"GraphEncoder, one question (30 nodes, dim {gdim}), CUDA graph replay: host side", no_grad(
            lambda: enc_replay.encode_batch(qx, qei, qea, qptr, backend="cuda"))),
        (f"ThemeIndex.search, one question (numpy), N = {tN}, K = {tK}, k = 10, eager",
         lambda: tix.search(*tq, tK, 10, backend="cuda")),
        (f"ThemeIndex.search, one question (numpy), N = {tN}, K = {tK}, k = 10, CUDA graph replay: host side",
         lambda: tix_replay.search(*tq, tK, 10, backend="cuda")),
    ]
    return out


def no_grad(fn):
    def run():
        with torch.no_grad():
            return fn()
    return run


class HostSideGraphs(EagerGraphs):
    """rasfast.ops.replay's capture contract with a replay that does nothing: what a
    replayed call costs the host besides its one graph launch (checks, padding, copies into
    the static buffers, the output's copy). Capture runs the call once, for real."""

    def capture(self, fn):
        graph, outs = super().capture(fn)
        graph.replay = lambda: None
        return graph, outs


def measure(fn, rounds: int):
    """(median us, min us) of fn() (in a dry run)."""
    times = []
    for _ in range(rounds):
        t = time.perf_counter_ns()
        fn()
        times.append((time.perf_counter_ns() - t) / 1e3)
    return statistics.median(times), min(times)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=400)
    ap.add_argument("--quick", action="store_true", help="a small graph, 30 rounds (tests)")
    ap.add_argument("--write", action="store_true")
    a = ap.parse_args(argv)
    rounds = 30 if a.quick else a.rounds
    mod = rasfast.dispatch.cuda_module()
    _threads._on_gpu = lambda first: True  # as on a GPU: no busy-machine width rule
    todo = cases(a.quick)
    counts = []
    for _, fn in todo:  # real runs first: attach tables, fill caches, count the device work
        fn()
        with count_device_work() as work:
            fn()
        counts.append((work.launches, work.syncs))
    rows = []
    mod.emu_set_dry_run(True)
    try:
        for (name, fn), (launches, syncs) in zip(todo, counts):
            med, low = measure(fn, rounds)
            rows.append({"case": name, "host_us": med, "min_us": low, "launches": launches, "syncs": syncs})
            print(f"{name:75s} {med:8.1f} us (min {low:.1f})  launches {launches}  syncs {syncs}", flush=True)
    finally:
        mod.emu_set_dry_run(False)
    res = {"machine": machine_info(), "rounds": rounds, "rows": rows}
    if a.write:
        os.makedirs(RESULTS, exist_ok=True)
        with open(os.path.join(RESULTS, "host_time_emu.json"), "w") as f:
            json.dump(res, f, indent=1)
        with open(os.path.join(RESULTS, "host_time_emu.md"), "w") as f:
            f.write(markdown(res))
    return res


def markdown(res) -> str:
    L = ["# Host time of a cuda op call, on the CUDA emulator's dry run", "", header_markdown(), "",
         "Each call's wall time with every launch, sort and memset checked and counted but not run "
         "(benchmarks/host_time_emu.py's docstring says why this, not the emulated call less its "
         "kernels). The busy-machine width rule is skipped, as on a GPU. Median and least of "
         f"{res['rounds']} calls, the cases one after another in one process. launches = kernels + memsets + "
         "torch ops a GPU would run (each costs a GPU host a few more us); syncs = host reads. "
         "CPU numbers, to compare paths in the same run: not GPU timings.", "",
         "| call | host us (median) | min | launches | syncs |", "|---|---|---|---|---|"]
    for r in res["rows"]:
        L.append(f"| {r['case']} | {r['host_us']:.1f} | {r['min_us']:.1f} | {r['launches']} | {r['syncs']} |")
    return "\n".join(L) + "\n"


if __name__ == "__main__":
    main()
