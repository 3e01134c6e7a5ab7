"""The grids of every op's kernels at per-question shapes, read from the CUDA emulator.

A per-question call on a GPU is small: a kernel whose grid has fewer blocks than the device
has SMs leaves the rest idle, and one that puts a whole query on one block runs its work one
step after another. Neither shows in a CPU timing. The emulator's launch log
(``rasfast.device_work.count_device_work(...).kernel_log``) records each launch's kernel,
site, blocks and threads; this script prints it for each op at the shapes of
``benchmarks/gpu_roofline.py``'s host table and of a RAS per-question call, in the dry run
(launches checked and recorded, not run; torch's own CPU steps still run), so the full
shapes cost little. The emulated device reports 132 SMs here (``CUEMU_SMS``), so launchers
that size their grids by the SM count size them as on an H100. The share column assumes one
block per SM of a 132-SM H100: a model of how much of the device a grid can use, not a
measurement.

    python benchmarks/launch_shapes_emu.py            # prints the tables
    python benchmarks/launch_shapes_emu.py --write    # also benchmarks/results/launch_shapes_emu.md
"""
from __future__ import annotations

import argparse
import os
import sys

os.environ["RASFAST_CUDA_EMU"] = "1"

import numpy as np  # noqa: E402
import torch  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from beam_graph import make_problem  # noqa: E402
from graph_conv_workload import make_batch, make_modules  # noqa: E402
from machine import header_markdown  # noqa: E402

import rasfast  # noqa: E402
import rasfast._threads as _threads  # noqa: E402
from rasfast.device_work import count_device_work, launch_table  # noqa: E402
from rasfast.ops.graph_conv import normalise_layers  # noqa: E402

RESULTS = os.path.join(HERE, "results")


def cases(quick: bool):
    """(name, call) at the roofline host table's shapes (smaller with ``quick``)."""
    g = torch.Generator().manual_seed(0)
    s = 10 if quick else 1  # shrink factor
    x = torch.randn(8, 50_000 // s, generator=g)
    N, T, D, B, K = 200_000 // s, 298, 384, 16, 2_000 // s
    cppd = torch.rand(N, T, generator=g)
    cemb = torch.nn.functional.normalize(torch.randn(N, D, generator=g), dim=1)
    qn, Dq = 20_000 // s, 768 // (4 if quick else 1)  # RAS's per-question corpus slice
    pemb = torch.nn.functional.normalize(torch.randn(qn, Dq, generator=g), dim=1)
    prob = make_problem(n=20_000 // s, dim=64, queries=64, seeds_per_query=20)
    indptr, indices = (torch.as_tensor(a) for a in prob["graph"])
    emb, q = torch.as_tensor(prob["triple_emb"]), torch.as_tensor(prob["q_emb"])
    sptr = torch.as_tensor(np.cumsum([0] + [len(v) for v in prob["seeds"]]))
    sids = torch.as_tensor(np.concatenate(prob["seeds"]).astype(np.int64))
    first = (sptr[:2].clone(), sids[:len(prob["seeds"][0])].clone())  # one query's seeds
    Bq, per, Ds = 64, 200, 384
    qs, cand = torch.randn(Bq, Ds, generator=g), torch.randn(Bq * per, Ds, generator=g)
    cptr = torch.arange(Bq + 1) * per
    dim = 64 if quick else 256
    convs, norms, _ = make_modules(dim=dim, llm_hidden=8)
    specs = normalise_layers([(convs[0], norms[0]), (convs[1], norms[1]), convs[2]])
    xb, ei, ea, gptr = make_batch(64, dim=dim)
    ei_np, gptr_np = ei.numpy(), gptr.numpy()
    beam = rasfast.triple_beam_search
    return [
        (f"select_k 8 x {x.shape[1]:,}, k = 100", lambda: rasfast.select_k(x, 100, backend="cuda")),
        (f"select_k 1 x {qn:,}, k = {K:,}", lambda: rasfast.select_k(x[:1, :qn], K, backend="cuda")),
        (f"theme_scoped_search B = {B}, N = {N:,}, K = {K:,}, k = 10",
         lambda: rasfast.theme_scoped_search(cppd[:B], cemb[:B], cppd, cemb, K, 10, backend="cuda",
                                             validate="none")),
        (f"theme_scoped_search per question: B = 1, N = {qn:,}, K = {K:,}, D = {Dq}",
         lambda: rasfast.theme_scoped_search(cppd[:1], pemb[:1], cppd[:qn], pemb, K, 10,
                                             backend="cuda", validate="none")),
        (f"theme_scope B = {B}, N = {N:,}, K = {K:,}",
         lambda: rasfast.theme_scope(cppd[:B], cppd, K, backend="cuda", validate="none")),
        (f"triple_beam_search {indptr.numel() - 1:,} triples, 64 x 20 seeds",
         lambda: beam((indptr, indices), emb, q, (sptr, sids), max_neighbors=50, backend="cuda",
                      validate="none")),
        (f"triple_beam_search {indptr.numel() - 1:,} triples, 1 x 20 seeds (per question)",
         lambda: beam((indptr, indices), emb, q[:1], first, max_neighbors=50, backend="cuda",
                      validate="none")),
        (f"segment_topk_scores {Bq} x {per} x {Ds}, n = 10",
         lambda: rasfast.segment_topk_scores(qs, cand, cptr, 10, backend="cuda", validate="none")),
        (f"graph_transformer_pool 64 graphs x 30 nodes, dim {dim}, host index arrays",
         lambda: rasfast.graph_transformer_pool(xb, ei_np, ea, gptr_np, specs, backend="cuda")),
    ]


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="smaller shapes, run for real (tests)")
    ap.add_argument("--write", action="store_true")
    a = ap.parse_args(argv)
    if not a.quick:  # the emulated device reports an H100's 132 SMs (4 otherwise), so the
        # launchers that size their grids by the SM count size them as there (read at the
        # first launch, once per process); --quick runs its launches, so it keeps 4
        os.environ.setdefault("CUEMU_SMS", "132")
    mod = rasfast.dispatch.cuda_module()
    _threads._on_gpu = lambda first: True  # as on a GPU: no busy-machine width rule
    todo = cases(a.quick)
    for _, fn in todo:  # a real call first: tables attached, weights packed, caches filled
        fn()
    sections = []
    mod.emu_set_dry_run(not a.quick)
    try:
        for name, fn in todo:
            with count_device_work() as work:
                fn()
            sections.append(f"## {name}\n\n{work.summary()}\n\n{launch_table(work)}\n")
            print(sections[-1], flush=True)
    finally:
        mod.emu_set_dry_run(False)
    if a.write:
        os.makedirs(RESULTS, exist_ok=True)
        with open(os.path.join(RESULTS, "launch_shapes_emu.md"), "w") as f:
            f.write("# Kernel grids at per-question shapes, from the CUDA emulator's launch log\n\n"
                    f"{header_markdown()}\n{__doc__.split(chr(10) + chr(10))[1]}\n\n"
                    + "\n".join(sections))
    return sections


if __name__ == "__main__":
    main()
