"""The prepared roofline run (issue 38, DESIGN.md s.11): every op's host round trips, and
select_k's correctness, CUDA-graph capture, time, bandwidth and share of the roof against
torch.topk, in one call.

On a GPU (``tools/gpu_session.sh roofline`` runs it with the other benchmarks):
1. ceilings measured here: a 1 GiB device copy (bytes read + written / s) and an
   8192^3 bf16 matrix product;
2. host synchronisations of one call of every public op on device-resident inputs, counted
   by ``torch.cuda.set_sync_debug_mode("warn")`` (torch-level syncs; the C++ launchers'
   own are counted on the emulator by tests/test_device_work_*.py), and each call's host
   time against its whole time (the target: host time under 10% of every op's call);
3. select_k on backend cuda: exact parity with the reference over odd sizes, ties, one-bin
   ("narrow") and all-equal rows, NaN, both directions, sorted and unsorted, k on both sides
   of the shared-memory sort; a CUDA graph captured once and replayed on new data;
4. select_k timed against torch.topk at the issue's shapes (16 x 1M, 4 x 10M, 256 x 100k;
   k = 10, 10k, 250k; three dtypes), inputs rotated over copies larger than the L2 cache;
   host time per call (no sync) beside the device time; the traffic model's bytes
   (the input read once: the least any exact select moves) give GB/s and the share of
   the measured copy bandwidth;
5. with Nsight Compute present, DRAM bytes of one select_k call, against the model.
Writes benchmarks/results/gpu_roofline.md and .json (or --out).

Without a GPU, ``--emulate`` (RASFAST_CUDA_EMU=1) runs the same sections at tiny sizes on the
CUDA emulator, counting host reads with rasfast.device_work instead; times are CPU times and
mean nothing. ``make test`` runs it so (tests/test_gpu_roofline.py).

    python benchmarks/gpu_roofline.py [--quick] [--emulate] [--out PATH]
"""
from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import shutil
import statistics
import subprocess
import sys
import time
import warnings

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from machine import header_markdown, machine_info  # noqa: E402

import rasfast  # noqa: E402
from rasfast.reference.select import select_k as ref_select  # noqa: E402

RESULTS = os.path.join(HERE, "results")
ELT = {torch.float32: 4, torch.float16: 2, torch.bfloat16: 2}


# ------------------------------------------------------------------------------- timing

def device_ms(fn, rounds: int, emulate: bool) -> float:
    """Median milliseconds of fn(): CUDA events on a GPU, wall clock on the emulator."""
    for _ in range(2):
        fn()
    if emulate:
        times = []
        for _ in range(rounds):
            t = time.perf_counter()
            fn()
            times.append((time.perf_counter() - t) * 1e3)
        return statistics.median(times)
    torch.cuda.synchronize()
    times = []
    for _ in range(rounds):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b))
    return statistics.median(times)


def host_us(fn, rounds: int, emulate: bool) -> float:
    """Median host microseconds of one call, no synchronisation (the launch cost the CPU
    pays; on the emulator the kernels themselves run on the host, so it is everything)."""
    times = []
    for _ in range(rounds):
        t = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t) * 1e6)
        if not emulate:
            torch.cuda.synchronize()
    return statistics.median(times)


# ------------------------------------------------------------------------------- ceilings

def ceilings(emulate: bool):
    if emulate:
        return {"copy_GBps": None, "bf16_TFLOPS": None}
    n = 1 << 28  # 1 GiB of float32
    a = torch.randn(n, device="cuda")
    b = torch.empty_like(a)
    ms = device_ms(lambda: b.copy_(a), 10, False)
    copy = 2 * a.numel() * 4 / (ms * 1e-3) / 1e9
    del a, b
    m = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    ms = device_ms(lambda: m @ m, 10, False)
    tflops = 2 * 8192 ** 3 / (ms * 1e-3) / 1e12
    del m
    torch.cuda.empty_cache()
    return {"copy_GBps": copy, "bf16_TFLOPS": tflops}


# ------------------------------------------------------------------------------- host syncs

class SyncCounter:
    """Host synchronisations of a block: torch's sync debug mode on a GPU, rasfast.device_work
    on the emulator."""

    def __init__(self, emulate: bool, watch=()):
        self.emulate, self.watch, self.count, self.sites = emulate, watch, 0, []

    def __enter__(self):
        if self.emulate:
            from rasfast.device_work import count_device_work
            self._cm = count_device_work(watch=self.watch)
            self._work = self._cm.__enter__()
        else:
            torch.cuda.synchronize()
            self._warn = warnings.catch_warnings(record=True)
            self._log = self._warn.__enter__()
            warnings.simplefilter("always")
            torch.cuda.set_sync_debug_mode("warn")
        return self

    def __exit__(self, *exc):
        if self.emulate:
            self._cm.__exit__(*exc)
            self.count, self.sites = self._work.syncs, list(self._work.sync_sites)
        else:
            torch.cuda.set_sync_debug_mode("default")
            self._warn.__exit__(*exc)
            # one warning per synchronising call; the mode's own "prototype feature" notice is not one
            msgs = [str(w.message) for w in self._log if "called a synchronizing" in str(w.message)]
            self.count, self.sites = len(msgs), [m.splitlines()[0][:80] for m in msgs[:5]]
        return False


def op_calls(dev, emulate: bool):
    """One device-resident call of every public op, at small per-question shapes."""
    g = torch.Generator().manual_seed(0)
    be = "cuda"  # what auto picks on a GPU; on the emulator auto would pick cpu
    calls = {}
    x = torch.randn(8, 50_000 if not emulate else 3_000, generator=g).to(dev)
    calls["select_k (8 x 50k, k=100)"] = (lambda: rasfast.select_k(x, 100, backend=be), [x])

    N, T, D, B = (200_000, 298, 384, 16) if not emulate else (600, 298, 32, 3)
    cppd = torch.rand(N, T, generator=g).to(dev)
    cemb = torch.nn.functional.normalize(torch.randn(N, D, generator=g), dim=1).to(dev)
    qppd, qemb = cppd[:B].clone(), cemb[:B].clone()
    K = 2_000 if not emulate else 50
    calls["theme_scoped_search"] = (lambda: rasfast.theme_scoped_search(qppd, qemb, cppd, cemb, K, 10, backend=be), [cppd, cemb])
    calls["theme_scoped_search validate='none'"] = (
        lambda: rasfast.theme_scoped_search(qppd, qemb, cppd, cemb, K, 10, validate="none", backend=be), [cppd, cemb])
    calls["theme_scope"] = (lambda: rasfast.theme_scope(qppd, cppd, K, backend=be), [cppd])

    def gemm_path(fn):  # the GEMM path of rasfast/ops/theme_gemm.py, forced
        def call():
            os.environ["RASFAST_THEME_PATH"] = "gemm"
            try:
                return fn()
            finally:
                os.environ.pop("RASFAST_THEME_PATH", None)
        return call
    calls["theme_scoped_search (gemm path)"] = (
        gemm_path(lambda: rasfast.theme_scoped_search(qppd, qemb, cppd, cemb, K, 10, backend=be)), [cppd, cemb])
    calls["theme_scoped_search (gemm path) validate='none'"] = (
        gemm_path(lambda: rasfast.theme_scoped_search(qppd, qemb, cppd, cemb, K, 10, validate="none", backend=be)),
        [cppd, cemb])
    # one RAS sub-query through ThemeIndex.search with numpy queries (the RAS retriever's) on
    # the index moved to the device: eager, and replayed from the CUDA graph of its shape
    # (rasfast.index.theme_replay; the emulator runs the same path through EagerGraphs). The
    # results come back to the host, so both rows include that copy's wait
    import copy as _copy
    from rasfast import ThemeIndex
    from rasfast.ops.replay import EagerGraphs
    tix = ThemeIndex.build(cemb.cpu(), cppd.cpu()).to(dev)
    tix_graph = _copy.copy(tix).enable_cuda_graphs(graphs=EagerGraphs() if emulate else None)
    tq = (qppd[:1].cpu().numpy(), qemb[:1].cpu().numpy())
    calls["ThemeIndex.search, one question (numpy queries)"] = (
        lambda: tix.search(*tq, K, 10, backend=be), [])
    calls["ThemeIndex.search, one question, CUDA graph replay"] = (
        lambda: tix_graph.search(*tq, K, 10, backend=be), [])

    from beam_graph import make_problem
    prob = make_problem(n=20_000 if not emulate else 500, dim=64 if not emulate else 16,
                        queries=64 if not emulate else 4, seeds_per_query=20 if not emulate else 5)
    indptr, indices = (torch.as_tensor(a).to(dev) for a in prob["graph"])
    emb, q = torch.as_tensor(prob["triple_emb"]).to(dev), torch.as_tensor(prob["q_emb"]).to(dev)
    seeds = prob["seeds"]
    calls["triple_beam_search"] = (lambda: rasfast.triple_beam_search((indptr, indices), emb, q, seeds,
                                                                      max_neighbors=50, backend=be), [emb])
    calls["triple_beam_search validate='none'"] = (
        lambda: rasfast.triple_beam_search((indptr, indices), emb, q, seeds, max_neighbors=50, backend=be,
                                           validate="none"), [emb])
    # the seeds as device (ptr, ids): the host path a GPU pipeline takes (no staging copy of
    # host arrays, the offsets checked by the kernel)
    sptr = torch.as_tensor(np.cumsum([0] + [len(x) for x in seeds])).to(dev)
    sids = torch.as_tensor(np.concatenate(seeds).astype(np.int64)).to(dev)
    calls["triple_beam_search, device seeds, validate='none'"] = (
        lambda: rasfast.triple_beam_search((indptr, indices), emb, q, (sptr, sids), max_neighbors=50, backend=be,
                                           validate="none"), [emb])

    Bq, M, Ds = (64, 64 * 200, 384) if not emulate else (4, 40, 16)
    qs = torch.randn(Bq, Ds, generator=g).to(dev)
    cand = torch.randn(M, Ds, generator=g).to(dev)
    ptr = (torch.arange(Bq + 1) * (M // Bq)).to(dev)
    calls["segment_topk_scores"] = (lambda: rasfast.segment_topk_scores(qs, cand, ptr, 10, backend=be), [cand])
    calls["segment_topk_scores validate='none'"] = (
        lambda: rasfast.segment_topk_scores(qs, cand, ptr, 10, backend=be, validate="none"), [cand])

    from graph_conv_workload import make_batch, make_modules
    from rasfast.ops.graph_conv import normalise_layers
    dim = 256 if not emulate else 32
    convs, norms, _ = make_modules(device=dev, dim=dim, llm_hidden=64)
    specs = normalise_layers([(convs[0], norms[0]), (convs[1], norms[1]), convs[2]])
    xb, ei, ea, gptr = make_batch(64 if not emulate else 2, device=dev, dim=dim)
    calls["graph_transformer_pool"] = (lambda: rasfast.graph_transformer_pool(xb, ei, ea, gptr, specs, backend=be), [xb])
    calls["graph_transformer_pool validate='none'"] = (
        lambda: rasfast.graph_transformer_pool(xb, ei, ea, gptr, specs, backend=be, validate="none"), [xb])
    # the index arrays of a host batch as numpy (GraphEncoder's form since the eighteenth
    # session): checked and made a CSR on the host, one staging copy
    ei_host, gptr_host = ei.cpu().numpy(), gptr.cpu().numpy()
    calls["graph_transformer_pool, host index arrays"] = (
        lambda: rasfast.graph_transformer_pool(xb, ei_host, ea, gptr_host, specs, backend=be), [xb])
    # one RAS question's subgraph (30 nodes, 120 edges) through GraphEncoder from a host batch:
    # eager, and replayed from the CUDA graph of its padded size bucket (rasfast.models.
    # graph_replay; on the emulator the same padded path through rasfast.ops.replay.EagerGraphs)
    from rasfast.models.graph_encoder import GraphEncoder
    from rasfast.ops.replay import EagerGraphs
    qx, qei, qea, qptr = make_batch(1, dim=dim)
    enc_eager = GraphEncoder.from_pyg(convs, norms).eval()
    enc_graph = GraphEncoder.from_pyg(convs, norms).eval().enable_cuda_graphs(
        graphs=EagerGraphs() if emulate else None)
    calls["GraphEncoder, one question's subgraph"] = (
        lambda: enc_eager.encode_batch(qx, qei, qea, qptr, backend=be), [])
    calls["GraphEncoder, one question's subgraph, CUDA graph replay"] = (
        lambda: enc_graph.encode_batch(qx, qei, qea, qptr, backend=be), [])
    return calls


def host_syncs(dev, emulate: bool):
    """Per op: its host synchronisations, and its host time against its whole call (issue
    38's target: host time under 10% of every op's call). host_us: the call returning, the
    device idle before it (median, no sync inside the timing); call_us: the call and a
    synchronisation after it. An op that synchronises inside waits for the device within
    its host time, so its share says nothing about launch overhead (the table marks it)."""
    rows = []
    try:
        calls = op_calls(dev, emulate)
    except Exception as e:  # an op's builder needs a package this machine lacks
        return [{"op": "(setup)", "error": f"{type(e).__name__}: {e}"}]
    rounds = 2 if emulate else 20
    for name, (fn, watch) in calls.items():
        try:
            with torch.no_grad():
                fn()  # warm-up: module load, first-use validation of an index
                with SyncCounter(emulate, watch) as sc:
                    fn()
                host = host_us(fn, rounds, emulate)
                call = call_us(fn, rounds, emulate)
            rows.append({"op": name, "syncs": sc.count, "sites": sc.sites, "host_us": host, "call_us": call})
        except Exception as e:
            rows.append({"op": name, "error": f"{type(e).__name__}: {str(e)[:200]}"})
    return rows


def call_us(fn, rounds: int, emulate: bool) -> float:
    """Median microseconds of one call and a device synchronisation after it (the device idle
    before it): the whole call as its caller waits for it."""
    times = []
    for _ in range(rounds):
        if not emulate:
            torch.cuda.synchronize()
        t = time.perf_counter()
        fn()
        if not emulate:
            torch.cuda.synchronize()
        times.append((time.perf_counter() - t) * 1e6)
    return statistics.median(times)


# ------------------------------------------------------------------------------- select_k

def make_rows(B, N, mode, dtype, dev, seed):
    g = torch.Generator().manual_seed(seed)
    if mode == "randn":
        x = torch.randn(B, N, generator=g)
    elif mode == "ties":
        x = torch.randint(-3, 4, (B, N), generator=g).float()
        x[x == 3] = float("inf")
        x[(x == 0) & (torch.rand(B, N, generator=g) < 0.5)] = -0.0
    elif mode == "narrow":
        x = 1 + 1e-3 * torch.rand(B, N, generator=g)
    elif mode == "const":
        x = torch.full((B, N), 2.5)
    elif mode == "descending":  # every entry beats the filtered pass's threshold (its worst)
        x = torch.arange(N, 0, -1, dtype=torch.float32).repeat(B, 1)
    else:  # nan
        x = torch.randn(B, N, generator=g)
        x[torch.rand(B, N, generator=g) < 0.02] = float("nan")
    return x.to(dtype).to(dev)


def parity_sweep(dev, emulate: bool):
    cases = ([(1, 1, 1), (3, 4_099, 1), (2, 100_003, 2_048), (2, 100_003, 2_049), (5, 33_333, 10_000),
              (1, 3_000_001, 777), (300, 1_001, 50), (2, 1 << 20, 1 << 19), (4, 1_000_003, 256)]
             if not emulate else [(1, 1, 1), (3, 4_099, 7), (2, 9_001, 2_049), (5, 333, 100)])
    n_ok, fails = 0, []
    for dtype in (torch.float32, torch.float16, torch.bfloat16):
        for mode in ("randn", "ties", "narrow", "const", "descending", "nan"):
            for B, N, k in cases:
                x = make_rows(B, N, mode, dtype, dev, seed=B * N + k)
                for largest, sorted_ in ((False, True), (True, True), (False, False)):
                    vals, idx = rasfast.select_k(x, k, largest=largest, sorted=sorted_, backend="cuda")
                    # NaN: the reference sorts on the CPU. torch.sort on CUDA ranks a NaN with its
                    # sign bit set below -inf (seen in the first roofline run: bfloat16 NaN from
                    # the CPU's conversion), where the contract and the CPU sort rank every NaN last.
                    want = (ref_select(x.cpu(), k, largest, sorted_).to(dev) if mode == "nan"
                            else ref_select(x, k, largest, sorted_))
                    ok = torch.equal(idx, want) if sorted_ else torch.equal(idx.sort(1).values,
                                                                             want.sort(1).values)
                    ok = ok and torch.equal(vals.view(torch.int16 if dtype != torch.float32 else torch.int32),
                                            torch.gather(x, 1, idx).view(torch.int16 if dtype != torch.float32
                                                                          else torch.int32))
                    if ok:
                        n_ok += 1
                    else:
                        what = f"{str(dtype)[6:]} {mode} {B}x{N} k={k} largest={largest} sorted={sorted_}"
                        if len(fails) < 4 and sorted_:
                            what += " | " + _diagnose(x, k, largest, idx, want)
                        fails.append(what)
    return n_ok, fails


def _diagnose(x, k, largest, idx, want) -> str:
    """Where a sorted result first differs from the reference, with the raw bits, and whether
    it matches the reference computed on the CPU instead (a device sort's own NaN order)."""
    bits = torch.int16 if x.dtype != torch.float32 else torch.int32
    diff = (idx != want).nonzero()
    r, j = (int(v) for v in diff[0]) if len(diff) else (0, 0)
    xb = x[r].view(bits)
    cpu_want = ref_select(x.cpu(), k, largest, True)
    return (f"row {r} pos {j}: got {int(idx[r, j])} (bits {int(xb[idx[r, j]]):#x}), ref {int(want[r, j])} "
            f"(bits {int(xb[want[r, j]]):#x}); matches the CPU reference: {torch.equal(idx.cpu(), cpu_want)}; "
            f"device ref equals CPU ref: {torch.equal(want.cpu(), cpu_want)}")


def graph_capture(dev, emulate: bool):
    """select_k captured once in a CUDA graph, replayed on new data: the replay must equal
    a fresh call (no host sync and no allocation inside the op makes capture possible)."""
    if emulate:
        return "not on the emulator"
    B, N, k = 16, 1 << 20, 100
    static_x = torch.randn(B, N, device=dev)
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(2):
            rasfast.select_k(static_x, k)
    torch.cuda.current_stream().wait_stream(s)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        vals, idx = rasfast.select_k(static_x, k)
    ok = True
    for seed in range(3):
        static_x.copy_(torch.randn(B, N, device=dev, generator=torch.Generator(device=dev).manual_seed(seed)))
        graph.replay()
        ok &= torch.equal(idx, ref_select(static_x, k, False, True))
    replay_ms = device_ms(graph.replay, 20, False)
    eager_ms = device_ms(lambda: rasfast.select_k(static_x, k), 20, False)
    return {"replays_match": bool(ok), "replay_ms": replay_ms, "eager_ms": eager_ms}


def select_timings(dev, emulate: bool, quick: bool, copy_gbps):
    # the shapes, then per-question ones (one query's scores; a batch of 8)
    sizes = ([(16, 1_000_000), (4, 10_000_000), (256, 100_000), (1, 20_000), (8, 50_000)]
             if not emulate else [(4, 20_000)])
    ks = [10, 10_000, 250_000] if not emulate else [10, 3_000]
    dtypes = [torch.float32, torch.float16, torch.bfloat16] if not quick else [torch.float32]
    rounds = 20 if not emulate else 2
    rows = []
    for B, N in sizes:
        for dtype in dtypes:
            nbytes = B * N * ELT[dtype]
            copies = 1 if emulate else min(64, max(2, math.ceil(200e6 / nbytes)))  # rotate past the 50 MB L2
            xs = [torch.randn(B, N, device=dev).to(dtype) for _ in range(copies)]
            it = [0]

            def nxt():
                it[0] = (it[0] + 1) % copies
                return xs[it[0]]
            for k in ks:
                if k > N:
                    continue
                r = {"B": B, "N": N, "k": k, "dtype": str(dtype)[6:], "bytes": nbytes}
                r["topk_ms"] = device_ms(lambda: torch.topk(nxt(), k, dim=1, largest=False, sorted=True), rounds, emulate)
                r["cuda_ms"] = device_ms(lambda: rasfast.select_k(nxt(), k, backend="cuda"), rounds, emulate)
                r["topk_unsorted_ms"] = device_ms(lambda: torch.topk(nxt(), k, dim=1, largest=False, sorted=False),
                                                  rounds, emulate)
                r["cuda_unsorted_ms"] = device_ms(lambda: rasfast.select_k(nxt(), k, sorted=False, backend="cuda"),
                                                  rounds, emulate)
                r["host_us"] = host_us(lambda: rasfast.select_k(nxt(), k, backend="cuda"), 10 if not emulate else 2,
                                       emulate)
                r["topk_host_us"] = host_us(lambda: torch.topk(nxt(), k, dim=1, largest=False, sorted=True),
                                            10 if not emulate else 2, emulate)
                with _python_select_kernel():  # the same call through the Python kernel function
                    r["python_host_us"] = host_us(lambda: rasfast.select_k(nxt(), k, backend="cuda"),
                                                  10 if not emulate else 2, emulate)
                r["graph_ms"] = graph_ms(xs[0], k) if not emulate else None
                if k <= FILTER_K:  # the filtered pass (off by default) at the same k, in the same run
                    with _env("RASFAST_SELECT_FILTER_K", str(FILTER_K)):
                        r["filtered_ms"] = device_ms(lambda: rasfast.select_k(nxt(), k, backend="cuda"),
                                                  rounds, emulate)
                        r["filtered_graph_ms"] = graph_ms(xs[0], k) if not emulate else None
                if N <= SMALL_N and k <= RADIX_SORT_K:  # the radix passes, where a one-launch select serves
                    with _env("RASFAST_SELECT_SMALL_N", "0"):
                        r["multiblock_ms"] = device_ms(lambda: rasfast.select_k(nxt(), k, backend="cuda"),
                                                       rounds, emulate)
                        r["multiblock_graph_ms"] = graph_ms(xs[0], k) if not emulate else None
                if SMALL_K < k <= RADIX_SORT_K:  # cub's device-wide sort, where an on-chip sort serves
                    with _env("RASFAST_SELECT_RADIX_SORT_K", "0"):
                        r["cub_sort_ms"] = device_ms(lambda: rasfast.select_k(nxt(), k, backend="cuda"),
                                                     rounds, emulate)
                        r["cub_sort_graph_ms"] = graph_ms(xs[0], k) if not emulate else None
                if N > SMALL_N or emulate:  # the second and third radix passes as the sixth run timed them
                    with _env("RASFAST_SELECT_GROUPED", "0"), _env("RASFAST_SELECT_SMALL_N", "0"):
                        r["per_vector_ms"] = device_ms(lambda: rasfast.select_k(nxt(), k, backend="cuda"),
                                                       rounds, emulate)
                        r["per_vector_graph_ms"] = graph_ms(xs[0], k) if not emulate else None
                r["speedup"] = r["topk_ms"] / r["cuda_ms"]
                r["speedup_unsorted"] = r["topk_unsorted_ms"] / r["cuda_unsorted_ms"]
                r["GBps"] = nbytes / (r["cuda_ms"] * 1e-3) / 1e9
                r["roof_share"] = r["GBps"] / copy_gbps if copy_gbps else None
                rows.append(r)
                print(json.dumps(r), flush=True)
            del xs
            if not emulate:
                torch.cuda.empty_cache()
    return rows


FILTER_K = 256  # csrc/select/select_kernels.cu kFilterK: the filtered pass's largest k, when asked for
SMALL_N, SMALL_K = 65_536, 2_048  # select_rows_small (one launch) serves rows up to SMALL_N, k up to SMALL_K
RADIX_SORT_K = 16_384  # answers sorted on chip (sort_rows_radix, select_rows_small_sorted) for SMALL_K < k <= this


@contextlib.contextmanager
def _env(name: str, value: str):
    old = os.environ.get(name)
    os.environ[name] = value
    try:
        yield
    finally:
        if old is None:
            del os.environ[name]
        else:
            os.environ[name] = old


def graph_ms(x, k) -> float:
    """Device time of one select_k call without host gaps: a CUDA graph of it, replayed."""
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        rasfast.select_k(x, k, backend="cuda")
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        rasfast.select_k(x, k, backend="cuda")
    ms = device_ms(g.replay, 20, False)
    del g
    return ms


def op_capture(dev, emulate: bool):
    """The ops with ``validate="none"`` captured in a CUDA graph and replayed on new queries:
    each replay must equal a fresh eager call, and the replay's device time is set beside
    the eager call's (what the host's launch work costs the op)."""
    if emulate:
        return {"note": "not on the emulator (but the per-question replay paths, with "
                        "EagerGraphs standing in for CUDA graphs)",
                "GraphEncoder per question, CUDA graph replay": encoder_replay(dev, True),
                "ThemeIndex.search per question, CUDA graph replay": search_replay(dev, True)}
    from beam_graph import make_problem
    g = torch.Generator().manual_seed(7)
    out = {}
    B, per, D = 64, 300, 384
    q = torch.randn(B, D, generator=g).to(dev)
    cand = torch.randn(B * per, D, generator=g).to(dev)
    ptr = (torch.arange(B + 1) * per).to(dev)
    groups = torch.randint(0, 500, (B * per,), generator=g).to(dev)
    P = make_problem(20_000, 128, 256, 20, seed=3)
    graph = tuple(torch.from_numpy(a).to(dev) for a in P["graph"])
    emb = torch.from_numpy(P["triple_emb"]).to(dev)
    bq = torch.from_numpy(P["q_emb"]).to(dev)
    sptr = torch.arange(257, device=dev) * 20
    sids = torch.from_numpy(np.concatenate(P["seeds"]).astype(np.int64)).to(dev)
    rasfast.triple_beam_search(graph, emb, bq, (sptr, sids), backend="cuda")  # the CSR's one check
    try:  # RAS's encoder at 64 graphs, device edge_index and graph_ptr (PyG builds the layers)
        from graph_conv_workload import make_batch, make_modules
        convs, norms, _ = make_modules(device=dev)
        gx, gei, gea, gptr = make_batch(64, device=dev)
        glayers = [(c, n) for c, n in zip(convs, norms)] + list(convs[len(norms):])
    except Exception as e:  # noqa: BLE001 (recorded, the run goes on)
        gx = None
        out["graph_transformer_pool"] = {"error": f"{type(e).__name__}: {str(e)[:200]}"}
    cases = {
        "segment_topk_scores": (q, lambda: rasfast.segment_topk_scores(q, cand, ptr, 10, backend="cuda",
                                                                      validate="none")),
        "segment_max_rank": (None, lambda: rasfast.segment_max_rank((cand[:, 0] * q[0, 0]).contiguous(),
                                                                    groups, ptr, 10, backend="cuda",
                                                                    validate="none")),
        "triple_beam_search": (bq, lambda: (lambda r: (r.sequences, r.scores))(rasfast.triple_beam_search(
            graph, emb, bq, (sptr, sids), backend="cuda", validate="none"))),
    }
    if gx is not None:
        cases["graph_transformer_pool"] = (gx, lambda: (rasfast.graph_transformer_pool(
            gx, gei, gea, gptr, glayers, backend="cuda", validate="none"),))
    for name, (static, fn) in cases.items():
        try:
            s = torch.cuda.Stream()
            s.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(s):
                for _ in range(2):
                    fn()
            torch.cuda.current_stream().wait_stream(s)
            cg = torch.cuda.CUDAGraph()
            with torch.cuda.graph(cg):
                got = fn()
            ok = True
            for seed in range(3):
                src = static if static is not None else q
                src.copy_(torch.randn(src.shape, generator=torch.Generator().manual_seed(seed)).to(dev))
                cg.replay()
                want = fn()
                ok &= all(torch.equal(a, b) for a, b in zip(got, want))
            out[name] = {"replays_match": bool(ok), "replay_ms": device_ms(cg.replay, 20, False),
                         "eager_ms": device_ms(fn, 20, False)}
        except Exception as e:  # noqa: BLE001 (recorded, the run goes on)
            out[name] = {"error": f"{type(e).__name__}: {str(e)[:200]}"}
    out["GraphEncoder per question, CUDA graph replay"] = encoder_replay(dev, False)
    out["ThemeIndex.search per question, CUDA graph replay"] = search_replay(dev, False)
    return out


def search_replay(dev, emulate: bool) -> dict:
    """ThemeIndex.search of single sub-queries (numpy, as the RAS retriever's) on an index on
    the device (N = 200k, T = 298, D = 384, 4 shards; K = 2,000, k = 10), replayed from CUDA
    graphs (rasfast.index.theme_replay) against the eager search on the same queries: whether
    every answer matches, and each path's time a call, results on the host included."""
    try:
        from rasfast import ThemeIndex
        from rasfast.ops.replay import EagerGraphs
        import copy as _copy
        N, T, D, K = (200_000, 298, 384, 2_000) if not emulate else (600, 298, 32, 50)
        g = torch.Generator().manual_seed(11)
        ppd, emb = torch.rand(N, T, generator=g), torch.randn(N, D, generator=g)
        eager = ThemeIndex.build(emb, ppd, shards=4).to(dev)
        graphed = _copy.copy(eager).enable_cuda_graphs(graphs=EagerGraphs() if emulate else None)
        qs = [(torch.rand(1, T, generator=g).numpy(), torch.randn(1, D, generator=g).numpy()) for _ in range(5)]
        same = all(np.array_equal(graphed.search(*q, K, 10, backend="cuda")[0], eager.search(*q, K, 10, backend="cuda")[0])
                   for q in qs)
        rounds = 2 if emulate else 20
        return {"matches": bool(same), "graphs": graphed._replay.captures,
                "replay_ms": device_ms(lambda: graphed.search(*qs[0], K, 10, backend="cuda"), rounds, emulate),
                "eager_ms": device_ms(lambda: eager.search(*qs[0], K, 10, backend="cuda"), rounds, emulate)}
    except Exception as e:  # noqa: BLE001 (recorded, the run goes on)
        return {"error": f"{type(e).__name__}: {str(e)[:200]}"}


def encoder_replay(dev, emulate: bool) -> dict:
    """RAS's encoder (1024-d, 8 heads, 3 layers) on single questions' subgraphs (host batches
    of 8-40 nodes, as GraphEncoder gets them) replayed from CUDA graphs of padded size buckets
    (rasfast.models.graph_replay), against the eager path on the same batches: the largest
    relative difference (the GEMMs' row counts differ, so their rounding may), the buckets
    captured, and each path's time a call with its host work (CUDA events around the call:
    a host-bound call shows its host time). On the emulator: small dims, EagerGraphs."""
    try:
        from graph_conv_workload import make_batch, make_modules
        from rasfast.models.graph_encoder import GraphEncoder
        from rasfast.ops.replay import EagerGraphs
        dim = 32 if emulate else 1024
        convs, norms, _ = make_modules(device=dev, dim=dim, llm_hidden=64)
        eager = GraphEncoder.from_pyg(convs, norms).eval()
        graphed = GraphEncoder.from_pyg(convs, norms).eval().enable_cuda_graphs(
            graphs=EagerGraphs() if emulate else None)
        batches = []
        for seed, nodes in enumerate((30, 22, 8, 40, 30)):
            x, ei, ea, _ = make_batch(2, seed=seed, dim=dim)  # 60 nodes; the first `nodes` kept
            keep = ei.max(0).values < nodes
            batches.append((x[:nodes].contiguous(), ei[:, keep].contiguous(), ea[keep].contiguous(),
                            torch.tensor([0, nodes])))
        with torch.no_grad():
            err = 0.0
            for b in batches:
                want = eager.encode_batch(*b, backend="cuda")
                got = graphed.encode_batch(*b, backend="cuda")
                err = max(err, float((got - want).abs().max() / want.abs().max().clamp(min=1e-30)))
            b = batches[0]
            rounds = 2 if emulate else 20
            return {"max_rel_diff": err, "matches": err < 1e-3, "buckets": graphed._replay.captures,
                    "replay_ms": device_ms(lambda: graphed.encode_batch(*b, backend="cuda"), rounds, emulate),
                    "eager_ms": device_ms(lambda: eager.encode_batch(*b, backend="cuda"), rounds, emulate)}
    except Exception as e:  # noqa: BLE001 (recorded, the run goes on)
        return {"error": f"{type(e).__name__}: {str(e)[:200]}"}


def ras_loop(dev, emulate: bool) -> dict:
    """The RAS loop end to end (the demo world: plan, retrieve, triples, graph, answer; the
    model-free planner and answerer, the hashing encoder) with its retrieval, a theme-scoped
    ThemeIndex search per sub-query, run three ways over the same questions, one question a
    call as a serving loop: the index on the host (cpu kernels), on the device (cuda
    kernels), and on the device replayed from CUDA graphs (ThemeIndex.enable_cuda_graphs).
    Each: wall ms, ms a question, whether its answers equal the host run's, and the stage
    table (rasfast.profile's exclusive ms per stage). On the emulator: a tiny world,
    EagerGraphs for the replay."""
    try:
        import copy as _copy
        from rasfast import ThemeIndex
        from rasfast.data.demo import generate_world
        from rasfast.ops.replay import EagerGraphs
        from rasfast.profile import Trace
        from rasfast.systems.ras import build_ras
        from rasfast.systems.ras.retrievers import ThemeIndexRetriever
        from rasfast.systems.ras.system import make_encoder
        n_pass, n_q, K = (2_000, 30, 200) if not emulate else (200, 3, 40)
        world = generate_world(0, n_passages=n_pass, n_questions=n_q + 2)
        enc = make_encoder("hashing")
        host = ThemeIndex.build(passages=world.passages, encoder=enc, cache=False)
        on_dev = host.to(dev)
        replayed = _copy.copy(on_dev).enable_cuda_graphs(graphs=EagerGraphs() if emulate else None)
        configs = (("index on the host (cpu kernels)", host, "cpu"), ("index on the device", on_dev, "cuda"),
                   ("index on the device, CUDA graph replay", replayed, "cuda"))
        qs = [q.question for q in world.questions[:n_q]]
        out, first = {}, None
        for name, index, be in configs:
            ras = build_ras(world, encoder=enc, retriever=ThemeIndexRetriever(index, enc, K=K, backend=be))
            for q in world.questions[n_q:n_q + 2]:  # warm-up: kernels loaded, graphs captured
                ras.run(q.question)
            trace = Trace(name)
            t = time.perf_counter()
            answers = [ras.run(q, trace=trace).answer for q in qs]
            if not emulate:
                torch.cuda.synchronize()
            wall = (time.perf_counter() - t) * 1e3
            first = answers if first is None else first
            stages = sorted(trace.self_times().items(), key=lambda kv: -kv[1])
            out[name] = {"wall_ms": wall, "per_question_ms": wall / len(qs), "same_answers": answers == first,
                         "graphs": index._replay.captures if index._replay is not None else "-",
                         "stages": {k: round(v, 2) for k, v in stages[:8]}}
        return {"questions": len(qs), "passages": n_pass, "K": K, "runs": out}
    except Exception as e:  # noqa: BLE001 (recorded, the run goes on)
        return {"error": f"{type(e).__name__}: {str(e)[:300]}"}


def ras_loop_markdown(r: dict) -> list:
    L = ["", "## The RAS loop end to end, retrieval on the device", ""]
    if "error" in r:
        return L + [f"error: {r['error']}", ""]
    L += [f"The demo world ({r['passages']:,} passages), {r['questions']} questions one at a time, "
          f"theme-scoped search (K = {r['K']}) per sub-query, the model-free planner and answerer "
          "and the hashing encoder (`ras_loop` in benchmarks/gpu_roofline.py). Stages: exclusive "
          "ms per stage over all questions (rasfast.profile), the largest eight.", "",
          "| run | wall ms | ms a question | answers equal the host run's | graphs captured | stages (ms) |",
          "|---|---|---|---|---|---|"]
    for name, v in r["runs"].items():
        st = ", ".join(f"{k} {ms:.1f}" for k, ms in v["stages"].items())
        L.append(f"| {name} | {v['wall_ms']:.1f} | {v['per_question_ms']:.2f} | {v['same_answers']} | "
                 f"{v['graphs']} | {st} |")
    return L + [""]


def segment_bytes(B: int, M: int, D: int, elem: int, ids: bool) -> int:
    """The least an exact segment_topk_scores moves (docs/gpu.md, "Segment ops on the GPU"):
    every candidate row once, the queries, the ids if any (the offsets and the B x n output
    are negligible)."""
    return M * D * elem + B * D * 4 + (8 * M if ids else 0)


def _ms_cell(ms) -> str:
    return "-" if ms is None else f"{ms:.3f}"


def segment_timings(dev, emulate: bool):
    """segment_topk_scores at KiRAG-like shapes against the torch peer (equal-length segments
    as one padded bmm + topk: the peer's best case), and ragged segments through cand_ids
    into a table (the peer: gather the rows, then the same bmm + topk on the padding)."""
    rows = []
    shapes = ([(64, 300, 384, 10, torch.float32, False), (1024, 200, 384, 10, torch.float32, False),
               (1024, 200, 384, 10, torch.bfloat16, False), (16, 20_000, 768, 100, torch.float32, False),
               (1024, 200, 384, 10, torch.float32, True)]
              if not emulate else [(4, 30, 16, 5, torch.float32, False), (4, 30, 16, 5, torch.float32, True)])
    for B, per, D, n, dt, with_ids in shapes:
        g = torch.Generator().manual_seed(B)
        q = torch.randn(B, D, generator=g).to(dev)
        M = B * per
        if with_ids:  # rows of a 1M-row table (KiRAG: a question's candidate triples)
            T = 1_000_000 if not emulate else 500
            table = torch.randn(T, D, generator=g).to(dt).to(dev)
            ids = torch.randint(0, T, (M,), generator=g).to(dev)
            cand = table
        else:
            cand = torch.randn(M, D, generator=g).to(dt).to(dev)
            ids = None
        ptr = (torch.arange(B + 1) * per).to(dev)
        got = rasfast.segment_topk_scores(q, cand, ptr, n, cand_ids=ids, backend="cuda")

        def peer():
            rows_ = cand.index_select(0, ids) if with_ids else cand
            s = torch.bmm(rows_.view(B, per, D).float() if dt != torch.float32 else rows_.view(B, per, D),
                          q[:, :, None])[..., 0]
            return torch.topk(s, n, dim=1)
        ok = torch.equal(got[0] % per, peer().indices) if not emulate else True
        ms = device_ms(lambda: rasfast.segment_topk_scores(q, cand, ptr, n, cand_ids=ids, backend="cuda"),
                       20 if not emulate else 2, emulate)
        nbytes = segment_bytes(B, M, D, cand.element_size(), with_ids)
        rows.append({"B": B, "per_query": per, "D": D, "n": n, "dtype": str(dt).replace("torch.", ""),
                     "cand_ids": with_ids, "same_ids": bool(ok), "cuda_ms": ms, "bytes": nbytes,
                     "GBps": nbytes / (ms * 1e-3) / 1e9 if ms else None,
                     "torch_ms": device_ms(peer, 20 if not emulate else 2, emulate)})
        # the scoring as the seventh GPU session timed it (a warp a row), same run
        os.environ["RASFAST_SEGMENT_CHUNKS"] = "0"
        try:
            rows[-1]["row_a_warp_ms"] = device_ms(
                lambda: rasfast.segment_topk_scores(q, cand, ptr, n, cand_ids=ids, backend="cuda"),
                20 if not emulate else 2, emulate)
        finally:
            os.environ.pop("RASFAST_SEGMENT_CHUNKS", None)
        if (B, per, dt, with_ids) in SEGMENT_BREAKDOWNS and not emulate:
            # the seventh GPU session: 0.50x the peer at 1024 x 200 float32 with no breakdown
            # to say whether the kernels or the host path lose
            from kernel_breakdown import kernel_breakdown
            for who, fn in (("rasfast", lambda: rasfast.segment_topk_scores(q, cand, ptr, n, cand_ids=ids,
                                                                             backend="cuda")),
                            ("torch", peer)):
                try:
                    kr, total = kernel_breakdown(fn)
                    rows[-1].setdefault("kernels", {})[who] = {"total_us": total, "rows": kr}
                except Exception as e:
                    rows[-1].setdefault("kernels", {})[who] = {"error": f"{type(e).__name__}: {e}"}
    return rows


SEGMENT_BREAKDOWNS = {(1024, 200, torch.float32, False), (64, 300, torch.float32, False)}


def host_profile(dev, emulate: bool):
    """Where the host's time per select_k call goes (cProfile, 300 calls, 16 x 1M float32, k = 10)."""
    import cProfile
    import io
    import pstats
    x = torch.randn(16, 1_000_000 if not emulate else 2_000, device=dev)
    for _ in range(5):
        rasfast.select_k(x, 10, backend="cuda")
    pr = cProfile.Profile()
    pr.enable()
    for _ in range(300 if not emulate else 5):
        rasfast.select_k(x, 10, backend="cuda")
    pr.disable()
    if not emulate:
        torch.cuda.synchronize()
    out = io.StringIO()
    pstats.Stats(pr, stream=out).sort_stats("tottime").print_stats(14)
    return out.getvalue()


COMPILED_OPS = ("select_k (8 x 50k, k=100)", "segment_topk_scores validate='none'",
                "triple_beam_search, device seeds, validate='none'", "graph_transformer_pool validate='none'")


def compiled_calls(dev, emulate: bool) -> list:
    """Per-question calls are host-bound on a GPU (the sixth session: 33-95% of each call).
    torch.compile(mode="reduce-overhead") captures the registered ops into CUDA graphs and
    replays them: each op's eager host / call microseconds against the compiled ones', with
    the compiled outputs checked equal to eager. On the emulator (CPU tensors) nothing is
    captured; the row only shows the path compiles and agrees."""
    calls = op_calls(dev, emulate)
    rounds = 2 if emulate else 20
    rows = []
    for name in COMPILED_OPS:
        fn = calls[name][0]
        row = {"op": name}
        try:
            with torch.no_grad():
                want = fn()
                row["eager_host_us"] = host_us(fn, rounds, emulate)
                row["eager_call_us"] = call_us(fn, rounds, emulate)
                cfn = torch.compile(fn, mode="reduce-overhead", fullgraph=True)
                for _ in range(3):  # compile, record, then replays
                    got = cfn()
                got = tuple(t.clone() for t in _tensors(got))
                row["equal"] = all(torch.equal(a, b) if not a.is_floating_point() else
                                   torch.allclose(a, b, rtol=1e-5, atol=1e-6, equal_nan=True)
                                   for a, b in zip(_tensors(want), got))
                row["compiled_host_us"] = host_us(cfn, rounds, emulate)
                row["compiled_call_us"] = call_us(cfn, rounds, emulate)
        except Exception as e:
            row["error"] = f"{type(e).__name__}: {str(e)[:200]}"
        rows.append(row)
        print("compiled", row, flush=True)
    return rows


def _tensors(out) -> list:
    if isinstance(out, torch.Tensor):
        return [out]
    if isinstance(out, (tuple, list)):
        return [t for o in out for t in _tensors(o)]
    if hasattr(out, "__dict__"):  # a result object (beam search's)
        return [t for v in vars(out).values() for t in _tensors(v)]
    return []


def compiled_markdown(rows) -> list:
    L = ["", "## Per-question calls through torch.compile(mode='reduce-overhead')", "",
         "The registered ops captured in CUDA graphs by torch.compile and replayed: host and whole-call "
         "microseconds (as in the host table above), eager against compiled, and whether the compiled "
         "outputs equal the eager ones.", "",
         "| op | eager host us | eager call us | compiled host us | compiled call us | equal |",
         "|---|---|---|---|---|---|"]
    for r in rows:
        if "error" in r:
            L.append(f"| {r['op']} | error: {r['error']} | | | | |")
        else:
            L.append(f"| {r['op']} | {r['eager_host_us']:.0f} | {r['eager_call_us']:.0f} | "
                     f"{r['compiled_host_us']:.0f} | {r['compiled_call_us']:.0f} | {r['equal']} |")
    return L


# the sync-free calls of op_calls() whose host share the sixth GPU session measured far above
# 10% (33-95%): where their host time goes, for the next change to aim at
HOST_PROFILED = ("theme_scoped_search (gemm path) validate='none'", "triple_beam_search validate='none'",
                 "triple_beam_search, device seeds, validate='none'", "segment_topk_scores validate='none'",
                 "graph_transformer_pool validate='none'", "graph_transformer_pool, host index arrays",
                 "GraphEncoder, one question's subgraph", "GraphEncoder, one question's subgraph, CUDA graph replay",
                 "ThemeIndex.search, one question (numpy queries)",
                 "ThemeIndex.search, one question, CUDA graph replay")


def host_profiles(dev, emulate: bool) -> dict:
    """cProfile of 50 calls of each HOST_PROFILED op (by own time, the first 12 entries)."""
    import cProfile
    import io
    import pstats
    calls = op_calls(dev, emulate)
    out = {}
    for name in HOST_PROFILED:
        fn = calls[name][0]
        try:
            with torch.no_grad():
                for _ in range(3):
                    fn()
                pr = cProfile.Profile()
                pr.enable()
                for _ in range(50 if not emulate else 2):
                    fn()
                pr.disable()
            if not emulate:
                torch.cuda.synchronize()
            buf = io.StringIO()
            pstats.Stats(pr, stream=buf).sort_stats("tottime").print_stats(12)
            out[name] = buf.getvalue()
        except Exception as e:
            out[name] = f"error: {type(e).__name__}: {str(e)[:200]}"
    return out


NCU_ENTRIES = 16 * 1_000_000  # the select probes' input: 16 x 1M float32
NCU_CALLS = (10, 10_000)       # the filtered pass, then the radix passes (k > 256)
NCU_MORE_CALLS = (250_000,)    # the second probe: the large-k sort (cub), then the beam kernel
NCU_METRICS = ("dram__bytes_read.sum,dram__bytes_write.sum,gpu__time_duration.sum,"
               "smsp__thread_inst_executed.sum,launch__registers_per_thread,"
               "sm__warps_active.avg.pct_of_peak_sustained_active")
NCU_KERNELS = "regex:filter_topk|radix_pass|write_selected|sort_rows_small|decode_sorted|RadixSort|beam_search"
# the beam probe's problem: benchmarks/gpu_beam.py's (200k triples, 1,024 x 50 seeds, D = 384)
NCU_BEAM = dict(n=200_000, dim=384, queries=1024, seeds_per_query=50)
NCU_BEAM_MODEL_BYTES = 992e6   # benchmarks/beam_kernel_model.py: rows scored, without L2 reuse


def ncu_select(emulate: bool, probe: str = "select", calls=NCU_CALLS, timeout: float = 150):
    """Nsight Compute on the probe's calls (``select``: two 16 x 1M float32 select_k calls,
    k = 10 and 10,000; ``more``: k = 250,000, whose cub sort dominates, and one beam search
    at gpu_beam.py's shape), per kernel: DRAM bytes, time, executed thread instructions
    (per entry of the row for the row passes: benchmarks/select_sass_model.py's static
    count, measured), registers, achieved occupancy."""
    exe = shutil.which("ncu")
    if emulate or exe is None:
        return {"skipped": "no GPU" if emulate else "ncu not on the PATH"}
    if timeout < 20:
        return {"skipped": f"{timeout:.0f} s left of the roofline's time limit"}
    cmd = [exe, "--csv", "--clock-control", "none", "--kernel-name", NCU_KERNELS,
           "--metrics", NCU_METRICS, sys.executable, os.path.abspath(__file__), "--ncu-probe", probe]
    try:
        res = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except Exception as e:
        return {"error": f"{type(e).__name__}: {e}"}
    return parse_ncu_csv(res.stdout, calls) | {"rc": res.returncode, "stderr_tail": res.stderr[-500:]}


def parse_ncu_csv(text: str, calls=NCU_CALLS) -> dict:
    """Per-kernel metrics from ``ncu --csv`` output, each kernel tagged with the probe call it
    belongs to: select_k calls in ``calls`` order (a call starts at its first row pass --
    ``filter_topk`` or ``radix_pass`` -- after the previous call's last kernel, its sort or
    decode), and "beam" for the beam kernel."""
    kernels = {}
    for line in text.splitlines():
        cells = [c.strip('"') for c in line.split('","')]
        if len(cells) < 10 or not cells[-1].replace(",", "").replace(".", "").isdigit():
            continue
        name, metric, unit, value = cells[4][:60], cells[-3], cells[-2], float(cells[-1].replace(",", ""))
        scale = {"byte": 1, "Kbyte": 1e3, "Mbyte": 1e6, "Gbyte": 1e9, "nsecond": 1, "usecond": 1e3,
                 "msecond": 1e6}.get(unit, 1)
        kernels.setdefault((cells[0], name), {})[metric] = value * scale
    out, ci, ended = [], -1, True
    for (kid, name), v in sorted(kernels.items(), key=lambda kv: int(kv[0][0]) if kv[0][0].isdigit() else 0):
        if "beam_search" in name:
            call = "beam"
        else:
            if ended and ("filter_topk" in name or "radix_pass" in name):
                ci += 1
            call = calls[min(max(ci, 0), len(calls) - 1)]
            ended = "sort_rows_small" in name or "decode_sorted" in name
        out.append({"id": kid, "name": name, "k": call, **v})
    keys = list(calls) + (["beam"] if any(r["k"] == "beam" for r in out) else [])
    per_call = {k: {"read": sum(r.get("dram__bytes_read.sum", 0) for r in out if r["k"] == k),
                    "write": sum(r.get("dram__bytes_write.sum", 0) for r in out if r["k"] == k),
                    "ns": sum(r.get("gpu__time_duration.sum", 0) for r in out if r["k"] == k)}
                for k in keys}
    return {"kernels": out, "per_call": per_call,
            "dram_read_bytes": sum(c["read"] for c in per_call.values()),
            "dram_write_bytes": sum(c["write"] for c in per_call.values()),
            "model_min_bytes": NCU_ENTRIES * 4}


def ncu_probe(which: str = "select", dev=None, small: bool = False):
    """The profiled process: one select_k call per k of the probe (its kernels only, by
    name), and for ``more`` one beam search on device arrays. ``dev``/``small``: the
    emulator's test runs the same code on tiny inputs."""
    dev = dev or torch.device("cuda")
    x = torch.randn(2 if small else 16, 5_000 if small else 1_000_000).to(dev)
    for k in (NCU_CALLS if which == "select" else NCU_MORE_CALLS):
        rasfast.select_k(x, min(k, x.shape[1] // 2) if small else k, backend="cuda")
    if which == "more":
        del x
        from beam_graph import make_problem
        P = make_problem(**(dict(n=500, dim=16, queries=3, seeds_per_query=5) if small else NCU_BEAM), seed=0)
        graph = tuple(torch.from_numpy(a).to(dev) for a in P["graph"])
        emb, q = torch.from_numpy(P["triple_emb"]).to(dev), torch.from_numpy(P["q_emb"]).to(dev)
        ptr = torch.from_numpy(np.cumsum([0] + [len(s) for s in P["seeds"]])).to(dev)
        ids = torch.from_numpy(np.concatenate(P["seeds"])).to(dev)
        # one call, so one beam kernel (the device CSR's one check on its first search runs
        # torch ops, which the kernel-name filter leaves out)
        out = rasfast.triple_beam_search(graph, emb, q, (ptr, ids), beam_width=10, max_len=2,
                                         max_neighbors=100, backend="cuda")
        if small:
            return out
    if dev.type == "cuda":
        torch.cuda.synchronize()


def _call_label(k) -> str:
    return "beam" if k == "beam" else f"{int(k):,}"


def ncu_markdown(n, title: str = "one select_k call at k = 10 and one at k = 10,000 (16 x 1M float32)") -> list:
    L = ["", f"## Nsight Compute: {title}", ""]
    if not n.get("kernels"):
        return L + [f"Not measured: {n}"]
    for k, c in n.get("per_call", {}).items():
        if k == "beam":
            us = c["ns"] / 1e3
            gbs = c["read"] / c["ns"] if c["ns"] else 0.0
            L.append(f"- beam search (gpu_beam.py's shape, one call): DRAM read {c['read'] / 1e6:,.1f} MB, "
                     f"written {c['write'] / 1e6:,.1f} MB in {us:,.0f} us ({gbs:,.0f} GB/s read); the model's rows "
                     f"scored: {NCU_BEAM_MODEL_BYTES / 1e6:,.0f} MB without L2 reuse of hub rows "
                     "(benchmarks/beam_kernel_model.py: latency-bound, so well under the copy rate).")
            continue
        L.append(f"- k = {int(k):,}: DRAM read {c['read'] / 1e6:,.1f} MB, written {c['write'] / 1e6:,.1f} MB, "
                 f"{c['ns'] / 1e3:,.0f} us over its kernels; the model's least: {n['model_min_bytes'] / 1e6:,.1f} MB read.")
    L += ["", "Every k takes the radix passes (the filtered pass, one read of each row, only with "
          "RASFAST_SELECT_FILTER_K: it took k = 10 here before the sixth GPU session), which read it twice (the write pass a third time when the first filter's "
          "buffer overflows), and for k > 2,048 cub's radix sort of the answers' composite keys. "
          "Instructions per entry: executed thread instructions / "
          f"{NCU_ENTRIES:,} entries (the row passes; benchmarks/results/select_sass_model.md "
          "has the static model).", "",
          "| k | kernel | read MB | written MB | us | registers | achieved occupancy % | instructions per entry |",
          "|---|---|---|---|---|---|---|---|"]
    for r in n["kernels"]:
        inst = r.get("smsp__thread_inst_executed.sum")
        per = f"{inst / NCU_ENTRIES:.1f}" if inst and r["k"] != "beam" else "-"
        L.append(f"| {_call_label(r['k'])} | {r['name']} | {r.get('dram__bytes_read.sum', 0) / 1e6:.2f} | "
                 f"{r.get('dram__bytes_write.sum', 0) / 1e6:.2f} | {r.get('gpu__time_duration.sum', 0) / 1e3:.1f} | "
                 f"{r.get('launch__registers_per_thread', 0):.0f} | "
                 f"{r.get('sm__warps_active.avg.pct_of_peak_sustained_active', 0):.0f} | {per} |")
    return L


# ------------------------------------------------------------------------------- report

@contextlib.contextmanager
def _python_select_kernel():
    """select_k through its Python kernel function instead of the C++ CUDA operator kernel
    (csrc/torch_ops/cuda_ops.cpp): what the host time was before that kernel."""
    from rasfast.ops import select as select_mod
    saved = select_mod.native_call
    select_mod.native_call = lambda *a: False
    try:
        yield
    finally:
        select_mod.native_call = saved


def _multiblock_cell(r) -> str:
    if "multiblock_ms" not in r:
        return "-"
    g = r.get("multiblock_graph_ms")
    return f"{r['multiblock_ms']:.3f} ({g:.3f})" if g else f"{r['multiblock_ms']:.3f}"


def _per_vector_cell(r) -> str:
    if "per_vector_ms" not in r:
        return "-"
    g = r.get("per_vector_graph_ms")
    return f"{r['per_vector_ms']:.3f} ({g:.3f})" if g else f"{r['per_vector_ms']:.3f}"


def _cub_sort_cell(r) -> str:
    if "cub_sort_ms" not in r:
        return "-"
    g = r.get("cub_sort_graph_ms")
    return f"{r['cub_sort_ms']:.3f} ({g:.3f})" if g else f"{r['cub_sort_ms']:.3f}"


def _filtered_cell(r) -> str:
    if "filtered_ms" not in r:
        return "-"
    g = r.get("filtered_graph_ms")
    return f"{r['filtered_ms']:.3f} ({g:.3f})" if g else f"{r['filtered_ms']:.3f}"


def markdown(res) -> str:
    L = ["# The roofline run: host syncs of every op; select_k against torch.topk and the roof", "",
         header_markdown(res.get("machine")), ""]
    c = res["ceilings"]
    if c["copy_GBps"]:
        L += [f"Ceilings measured in this run: device copy **{c['copy_GBps']:,.0f} GB/s** (read + write), "
              f"bf16 matmul 8192^3 **{c['bf16_TFLOPS']:,.0f} TFLOPS**.", ""]
    else:
        L += ["Emulated run (RASFAST_CUDA_EMU=1, no GPU): counts and parity only; times are CPU times "
              "of the emulator and mean nothing.", ""]
    L += ["## Host synchronisations and host time per call", "",
          "One call of each public op on device-resident inputs after a warm-up call, default "
          "arguments, backend cuda. Syncs: " + ("torch.cuda.set_sync_debug_mode('warn') warnings."
                                                 if c["copy_GBps"] else "rasfast.device_work host reads.") +
          " host us: median time for the call to return, the device idle before it; call us: "
          "the call and a device synchronisation after it; host share = host / call (the target: "
          "under 10%). With a sync inside, the host time includes waiting for the device: its "
          "share is marked (sync). On a GPU the sync debug mode sees torch's reads only: the "
          "segment ops' C++ operator kernels read their error flag (validate auto) with a CUDA "
          "copy it does not see, counted on the emulator instead (tests/test_native_cuda_ops.py).", "",
          "| op | syncs | where | host us | call us | host share |", "|---|---|---|---|---|---|"]
    for r in res["host_syncs"]:
        if "error" in r:
            L.append(f"| {r['op']} | error | {r['error']} | | | |")
        else:
            share = r["host_us"] / r["call_us"] if r.get("call_us") else float("nan")
            mark = " (sync)" if r["syncs"] else ""
            L.append(f"| {r['op']} | {r['syncs']} | {'; '.join(r['sites'])} | {r['host_us']:.0f} | "
                     f"{r['call_us']:.0f} | {100 * share:.0f}%{mark} |")
    n_ok, fails = res["parity"]
    L += ["", "## select_k (cuda): parity and CUDA graph", "",
          f"Exact parity with the reference (indices; values bit for bit): **{n_ok} of {n_ok + len(fails)}** "
          "cases (float32/float16/bfloat16 x random, ties with +-inf and signed zeros, one-bin, "
          "all-equal, 2% NaN x sizes x smallest/largest sorted and unsorted).", ""]
    if fails:
        L += ["Failures:", ""] + [f"- {f}" for f in fails[:30]] + [""]
    L += [f"CUDA graph: {res['graph']}", "",
          "Other ops with validate='none', captured and replayed on new queries (replays_match: "
          f"equal to a fresh eager call): {res.get('capture')}", ""]
    L += select_markdown(res)
    return "\n".join(L + segment_and_rest_markdown(res)) + "\n"


def select_markdown(res) -> list:
    """The select_k timings section (the full run's and --select-only's)."""
    L = ["## select_k timings", "",
          "Median of 20 calls (CUDA events), inputs rotated over copies past the L2 cache. "
          "cuda graph = the same call captured and replayed (device time without host gaps). "
          "GB/s = the input's bytes (read once: the least an exact select moves) / graph time; share = "
          "of the measured copy bandwidth. host us = the CPU's microseconds per call, no sync "
          "(torch.topk's in brackets); Python kernel = the same select_k call through its Python "
          "kernel function instead of the C++ CUDA operator kernel. Every k takes the radix passes; "
          "filtered = the filtered pass at the same k (RASFAST_SELECT_FILTER_K=256: one read of each "
          "row, off by default since the sixth GPU session), eager and graph ms. Rows of up to "
          "65,536 entries (k <= 2,048) take the one-launch short-row select by default since the "
          "sixteenth session (and, since the seventeenth, with 2,048 < k <= 16,384 too); radix = "
          "the radix passes at the same shape (RASFAST_SELECT_SMALL_N=0). "
          "Sorted answers for 2,048 < k <= 16,384 are sorted on chip (one block a row) since the "
          "seventeenth session; cub sort = cub's device-wide radix sort instead, at the same shape "
          "(RASFAST_SELECT_RADIX_SORT_K=0). Per vector = the second radix pass (the first filter) "
          "testing and committing per 16-byte vector and the third pass on an eighth of the grid, "
          "as the sixth GPU session timed them (RASFAST_SELECT_GROUPED=0; since the twentieth "
          "session the first filter takes groups of 4 vectors a thread with one warp vote a group, "
          "the third pass the second's grid), where rows take the radix passes.", "",
          "| B | N | dtype | k | torch.topk ms | cuda ms | speed-up | topk unsorted | cuda unsorted | "
          "speed-up | cuda graph ms | GB/s (graph) | share | host us (topk) | host us, Python kernel | "
          "filtered ms (graph) | radix ms (graph) | cub sort ms (graph) | per vector ms (graph) |",
          "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in res["select"]:
        g = r.get("graph_ms")
        gbps = r["bytes"] / (g * 1e-3) / 1e9 if g else r["GBps"]
        share = f"{100 * gbps / res['ceilings']['copy_GBps']:.0f}%" if res["ceilings"]["copy_GBps"] else "-"
        gs = f"{g:.3f}" if g else "-"
        L.append(f"| {r['B']} | {r['N']:,} | {r['dtype']} | {r['k']:,} | {r['topk_ms']:.3f} | "
                 f"{r['cuda_ms']:.3f} | **{r['speedup']:.2f}x** | {r['topk_unsorted_ms']:.3f} | "
                 f"{r['cuda_unsorted_ms']:.3f} | {r['speedup_unsorted']:.2f}x | {gs} | "
                 f"{gbps:,.0f} | {share} | {r['host_us']:.0f} ({r['topk_host_us']:.0f}) | "
                 f"{r.get('python_host_us', float('nan')):.0f} | {_filtered_cell(r)} | {_multiblock_cell(r)} | "
                 f"{_cub_sort_cell(r)} | {_per_vector_cell(r)} |")
    return L + [""]


def select_only_markdown(res) -> str:
    """--select-only's report: machine (as saved), ceilings, parity and the select table."""
    c = res["ceilings"]
    n_ok, fails = res["parity"]
    L = ["# select_k against torch.topk (gpu_roofline.py --select-only)", "",
         header_markdown(res.get("machine")), "",
         f"Ceilings measured in this run: device copy **{c['copy_GBps']:,.0f} GB/s** (read + write), "
         f"bf16 matmul 8192^3 **{c['bf16_TFLOPS']:,.0f} TFLOPS**." if c.get("copy_GBps") else
         "Emulated run: times are the emulator's CPU times and mean nothing.", "",
         f"Exact parity with the reference: **{n_ok} of {n_ok + len(fails)}** cases.", ""]
    if fails:
        L += ["Failures:", ""] + [f"- {f}" for f in fails[:30]] + [""]
    return "\n".join(L + select_markdown(res)) + "\n"


def segment_and_rest_markdown(res) -> list:
    L = ["## segment_topk_scores (cuda) against torch", "",
          "Equal-length segments, so the torch peer is one padded bmm + topk (its best case; "
          "ragged segments need padding or a loop); with cand_ids, the peer gathers the rows "
          "first. Median ms of 20 calls (whole calls, host included). GB/s = the least bytes "
          "(`segment_bytes`: the candidate rows once, the queries, the ids) / time; share = of "
          "the measured copy bandwidth. same ids: random floats, so a near-tie may differ. "
          "row a warp = the scoring as the seventh GPU session timed it (RASFAST_SEGMENT_CHUNKS=0: "
          "a warp scores one row and exits; since the twenty-first session a warp walks a chunk "
          "of positions, the next row loaded before this one is scored).", "",
          "| B | candidates per query | D | dtype | cand_ids | n | cuda ms | torch ms | speed-up | "
          "GB/s | share | same ids | row a warp ms |",
          "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    copy_gbps = res.get("ceilings", {}).get("copy_GBps")
    for r in res.get("segment", []):
        if "error" in r:
            L.append(f"| error: {r['error']} |")
        else:
            gb = r.get("GBps")
            share = f"{100 * gb / copy_gbps:.0f}%" if gb and copy_gbps else "-"
            L.append(f"| {r['B']} | {r['per_query']:,} | {r['D']} | {r.get('dtype', 'float32')} | "
                     f"{r.get('cand_ids', False)} | {r['n']} | {r['cuda_ms']:.3f} | "
                     f"{r['torch_ms']:.3f} | {r['torch_ms'] / r['cuda_ms']:.2f}x | "
                     f"{gb if gb is None else f'{gb:,.0f}'} | {share} | {r['same_ids']} | "
                     f"{_ms_cell(r.get('row_a_warp_ms'))} |")
    for r in res.get("segment", []):
        for who, kb in (r.get("kernels") or {}).items():
            L += ["", f"Kernels of one call, {who}, {r['B']} x {r['per_query']} x {r['D']} {r.get('dtype')} "
                  "(torch.profiler, per call):", ""]
            if "error" in kb:
                L.append(f"error: {kb['error']}")
                continue
            L += [f"{kb['total_us']:.1f} us of kernels a call", "", "| kernel | us a call | launches |",
                  "|---|---:|---:|"]
            L += [f"| `{name[:80]}` | {us:.1f} | {cnt:g} |" for name, us, cnt in kb["rows"]]
    L += ["", "## Host time of a call, by function", "", "cProfile of 300 select_k calls (16 x 1M float32, k = 10), "
          "by own time:", "", "```", res["host_profile"].strip(), "```"]
    for name, text in (res.get("host_profiles") or {}).items():
        L += ["", f"cProfile of 50 calls of {name}, by own time:", "", "```", text.strip(), "```"]
    if "ras_loop" in res:
        L += ras_loop_markdown(res["ras_loop"])
    if "compiled" in res:
        L += compiled_markdown(res["compiled"])
    L += ncu_markdown(res["ncu"])
    if "ncu_more" in res:
        L += ncu_markdown(res["ncu_more"], "a select_k call at k = 250,000 (16 x 1M float32) and one beam "
                                           "search (200k triples, 1,024 x 50 seeds, D = 384)")
    return L


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--emulate", action="store_true", help="no GPU: the CUDA emulator, tiny sizes")
    p.add_argument("--quick", action="store_true", help="float32 only in the timing table")
    p.add_argument("--ncu-probe", nargs="?", const="select", default=None, help=argparse.SUPPRESS)
    p.add_argument("--select-only", action="store_true",
                   help="select_k parity and timings only (a short follow-up run after a kernel change)")
    p.add_argument("--out", default=os.path.join(RESULTS, "gpu_roofline"))
    p.add_argument("--render", metavar="JSON",
                   help="write OUT.md again from a run's saved JSON (no measuring; for the results "
                        "fetched from a GPU machine)")
    a = p.parse_args(argv)
    if a.render:
        with open(a.render) as f:
            res = json.load(f)
        md = markdown(res) if "host_syncs" in res else select_only_markdown(res)
        with open(a.out + ".md", "w") as f:
            f.write(md)
        print(f"wrote {a.out}.md from {a.render}")
        return 0
    if a.ncu_probe:
        ncu_probe(a.ncu_probe)
        return 0
    if a.emulate:
        os.environ["RASFAST_CUDA_EMU"] = "1"
        dev = torch.device("cpu")
    elif not torch.cuda.is_available():
        print("gpu_roofline.py: no CUDA device visible (use --emulate for the emulator)")
        return 0
    else:
        dev = torch.device("cuda")
    t0 = time.time()
    res = {"machine": machine_info(), "emulated": a.emulate}
    res["ceilings"] = ceilings(a.emulate)
    print("ceilings", res["ceilings"], flush=True)
    if a.select_only:
        res["parity"] = parity_sweep(dev, a.emulate)
        print("parity", res["parity"][0], "ok,", len(res["parity"][1]), "failed", res["parity"][1][:10], flush=True)
        res["select"] = select_timings(dev, a.emulate, a.quick, res["ceilings"]["copy_GBps"])
        with open(a.out + ".json", "w") as f:
            json.dump(res, f, indent=1, default=str)
        with open(a.out + ".md", "w") as f:
            f.write(select_only_markdown(res))
        for r in res["select"]:
            print(f"| {r['B']} | {r['N']:,} | {r['dtype']} | {r['k']:,} | topk {r['topk_ms']:.3f} | cuda {r['cuda_ms']:.3f} "
                  f"| {r['speedup']:.2f}x | graph {r['graph_ms'] or 0:.3f} | filtered {_filtered_cell(r)} "
                  f"| radix {_multiblock_cell(r)} | host {r['host_us']:.0f} us |")
        return 0 if not res["parity"][1] else 1
    res["host_syncs"] = host_syncs(dev, a.emulate)
    print("host syncs", res["host_syncs"], flush=True)
    res["parity"] = parity_sweep(dev, a.emulate)
    print("parity", res["parity"][0], "ok,", len(res["parity"][1]), "failed", res["parity"][1][:10], flush=True)
    res["graph"] = graph_capture(dev, a.emulate)
    print("graph", res["graph"], flush=True)
    res["capture"] = op_capture(dev, a.emulate)
    print("capture", res["capture"], flush=True)
    res["select"] = select_timings(dev, a.emulate, a.quick, res["ceilings"]["copy_GBps"])
    try:
        res["segment"] = segment_timings(dev, a.emulate)
    except Exception as e:
        res["segment"] = [{"error": f"{type(e).__name__}: {str(e)[:200]}"}]
    print("segment", res["segment"], flush=True)
    res["host_profile"] = host_profile(dev, a.emulate)
    print(res["host_profile"], flush=True)
    res["host_profiles"] = host_profiles(dev, a.emulate)
    res["ras_loop"] = ras_loop(dev, a.emulate)
    print("ras_loop", {k: v for k, v in res["ras_loop"].items() if k != "runs"}, flush=True)
    # the report is written before each Nsight Compute step and after it: a step cut short by
    # the roofline's time limit (tools/gpu_session.sh: ROOF_S) leaves what came before it
    deadline = t0 + float(os.environ.get("ROOF_S", "210")) - 15
    res["ncu"] = {"skipped": "not reached (the run's time limit)"}
    write_report(res, a.out, t0)
    res["ncu"] = ncu_select(a.emulate, timeout=min(150, deadline - time.time()))
    write_report(res, a.out, t0)
    res["ncu_more"] = ncu_select(a.emulate, "more", NCU_MORE_CALLS, timeout=min(120, deadline - time.time()))
    write_report(res, a.out, t0)
    # last: torch.compile's first calls take seconds each, and the report above is written
    # before them, so a run cut by its time limit keeps everything else
    if a.emulate or deadline - time.time() > 45:
        res["compiled"] = compiled_calls(dev, a.emulate)
    else:
        res["compiled"] = [{"op": name, "error": "not reached (the run's time limit)"} for name in COMPILED_OPS]
    md = write_report(res, a.out, t0)
    print(md)
    print(f"wrote {a.out}.md and .json in {res['seconds']:.0f} s")
    return 0 if not res["parity"][1] else 1


def write_report(res, out: str, t0: float) -> str:
    res["seconds"] = time.time() - t0
    md = markdown(res)
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    with open(out + ".md", "w") as f:
        f.write(md)
    with open(out + ".json", "w") as f:
        json.dump(res, f, indent=1, default=str)
    return md


if __name__ == "__main__":
    sys.exit(main())
