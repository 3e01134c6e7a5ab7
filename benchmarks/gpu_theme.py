"""GPU benchmark of the theme ops (run in a GPU session; needs rasfast._cuda and a device).

Issue 3's GPU target: N=5,000,000, T=298 float16, D=768 float16, B=64, K=250,000, k=10.
Measures, in one run:
- device copy bandwidth (torch copy_ of a 2 GiB tensor, read + write bytes / s);
- the cuda PPD scan (pass 1 alone): corpus-PPD bytes read / s, and as a fraction of copy;
- theme_scoped_search cuda (and triton) end to end;
- the torch peer: f16 matmul distances + topk(K) + gather + bmm + topk (query-chunked so the
  gathered [B, K, D] block fits), and theme_scope cuda vs torch.topk + sort;
- a per-question call (B = 1, N = 20,000, K = 2,000): call time and host time, with the
  quantile shift skipped (the default there) and forced, on the planner's and the kernel path.
Writes benchmarks/results/theme_gpu.md/.json.

    .venv/bin/python benchmarks/gpu_theme.py            # issue sizes (~14 GB of GPU memory)
    .venv/bin/python benchmarks/gpu_theme.py --n 500000 # quick
"""
from __future__ import annotations

import argparse
import json
import os
import pathlib
import sys

import torch

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import rasfast  # noqa: E402
from rasfast.ops import theme_gemm  # noqa: E402
from machine import header_markdown, machine_info  # noqa: E402


def cuda_time(fn, repeats):
    """(result, best seconds, all seconds) with CUDA events around each call."""
    out, times = None, []
    for _ in range(repeats):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        out = fn()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end) / 1e3)
    return out, min(times), times


def make_data(n, t, d, b, dtype, seed=0):
    g = torch.Generator(device="cuda").manual_seed(seed)

    def unit(x):
        return (x / x.norm(dim=1, keepdim=True)).to(dtype)

    c = torch.empty((n, t), dtype=dtype, device="cuda")
    e = torch.empty((n, d), dtype=dtype, device="cuda")
    step = 1 << 20
    for s in range(0, n, step):  # chunked so float32 temporaries stay small
        m = min(step, n - s)
        c[s:s + m] = unit(torch.rand((m, t), device="cuda", generator=g))
        e[s:s + m] = unit(torch.randn((m, d), device="cuda", generator=g))
    q = unit(torch.rand((b, t), device="cuda", generator=g))
    qe = unit(torch.randn((b, d), device="cuda", generator=g))
    return q, qe, c, e


def torch_peer(q, qe, c, e, K, k, cn, chunk=8):
    d = (q.float() * q.float()).sum(1, keepdim=True) + cn[None] - 2.0 * (q.to(c.dtype) @ c.T).float()
    scope = torch.topk(d, K, dim=1, largest=False, sorted=False).indices
    ids, vals = [], []
    for s in range(0, q.shape[0], chunk):
        rows = e[scope[s:s + chunk]]  # [chunk, K, D]
        sc = torch.bmm(rows, qe[s:s + chunk, :, None].to(e.dtype))[:, :, 0].float()
        top = torch.topk(sc, k, dim=1)
        ids.append(torch.gather(scope[s:s + chunk], 1, top.indices))
        vals.append(top.values)
    return torch.cat(ids), torch.cat(vals)


def paths(q, qe, c, e, K, k, run, tm):
    """Both cuda paths (RASFAST_THEME_PATH forces one) at the issue's shape and with fewer
    queries, the GEMM path's steps, and what plan() picks: the measured check of its rule."""
    from rasfast.ops.theme_gemm import PATHS, plan
    out = {"rows": []}
    qf, qef = q.float().contiguous(), qe.float().contiguous()
    step = {}
    for name, fn in (("theme values (split GEMM + L2 terms)", lambda: theme_gemm.theme_values(qf, c, "l2")),
                     ("dense products (split GEMM)", lambda: theme_gemm.split_products(qef, e)),
                     ("torch fp16 mm [B, N] (fp16 out, the floor of one GEMM)", lambda: q.to(c.dtype) @ c.T)):
        run("gemm step: " + name, fn)
        step[name] = tm["gemm step: " + name]
    kt = rasfast.dispatch.triton_kernels().theme
    warps = kt._SPLIT_WARPS
    try:  # 8 warps: no ptxas spills on sm_90 (docs/gpu.md, "Spills")
        kt._SPLIT_WARPS = 8
        for name, fn in (("theme values (split GEMM + L2 terms), 8 warps", lambda: theme_gemm.theme_values(qf, c, "l2")),
                         ("dense products (split GEMM), 8 warps", lambda: theme_gemm.split_products(qef, e))):
            run("gemm step: " + name, fn)
            step[name] = tm["gemm step: " + name]
    finally:
        kt._SPLIT_WARPS = warps
    os.environ["RASFAST_THEME_GEMM"] = "torch"  # the torch composition, for comparison
    try:
        for name, fn in (("theme values, torch composition", lambda: theme_gemm.theme_values(qf, c, "l2")),
                         ("dense products, torch composition", lambda: theme_gemm.split_products(qef, e))):
            run("gemm step: " + name, fn)
            step[name] = tm["gemm step: " + name]
    finally:
        os.environ.pop("RASFAST_THEME_GEMM", None)
    tv = theme_gemm.theme_values(qf, c, "l2")
    run("gemm step: select K (unsorted)", lambda: theme_gemm._select(tv, K, False, False))
    run("gemm step: torch.topk K (unsorted; no tie order)", lambda: torch.topk(tv, K, dim=1, largest=False, sorted=False))
    del tv
    run("gemm step: quantile shift (8,192-row sample)", lambda: theme_gemm.quantile_shift(qf, c, K, "l2"))
    m = theme_gemm.quantile_shift(qf, c, K, "l2")
    tv = theme_gemm.theme_values(qf, c, "l2", shift=m)
    run("gemm step: select K (unsorted) on shifted values", lambda: theme_gemm._select(tv, K, False, False))
    del tv
    cp = theme_gemm.pad_rows(c)
    run("gemm step: theme values, rows padded in storage (pad_rows)", lambda: theme_gemm.theme_values(qf, cp, "l2"))
    # the padded width streamed whole (the default since the eighteenth session) against the
    # masked width of before, whose tiles the PTX loads 2 bytes at a time (docs/gpu.md); and
    # padding not made by pad_rows, zeroed in registers (the TAIL variant)
    os.environ["RASFAST_THEME_WHOLE_ROWS"] = "0"
    try:
        run("gemm step: theme values, masked width (before)", lambda: theme_gemm.theme_values(qf, cp, "l2"))
    finally:
        os.environ.pop("RASFAST_THEME_WHOLE_ROWS", None)
    base = torch.empty((cp.shape[0], cp.stride(0)), dtype=cp.dtype, device=cp.device)
    base.copy_(cp._base)
    cu = base[:, :cp.shape[1]]  # the same rows, padding of unknown content
    run("gemm step: theme values, padding zeroed in registers", lambda: theme_gemm.theme_values(qf, cu, "l2"))
    del cp, base, cu
    for name in ("select K (unsorted)", "torch.topk K (unsorted; no tie order)", "quantile shift (8,192-row sample)",
                 "select K (unsorted) on shifted values", "theme values, rows padded in storage (pad_rows)",
                 "theme values, masked width (before)", "theme values, padding zeroed in registers"):
        step[name] = tm["gemm step: " + name]
    os.environ["RASFAST_THEME_SHIFT"] = "0"
    try:
        run("cuda theme_scoped_search [gemm, no shift]",
            lambda: rasfast.theme_scoped_search(q, qe, c, e, K, k, backend="cuda"))
    finally:
        os.environ.pop("RASFAST_THEME_SHIFT", None)
    # the top k inside the scope: masked [B, N] scores (default) against the sorted scope ids
    # and gathers of the fifth session (docs/gpu.md, "Theme ops")
    drop = torch.ones((qf.shape[0], c.shape[0]), dtype=torch.bool, device=c.device)
    run("gemm step: dense products under the scope mask", lambda: theme_gemm.split_products(qef, e, drop))
    step["dense products under the scope mask"] = tm["gemm step: dense products under the scope mask"]
    del drop
    os.environ["RASFAST_THEME_PATH"] = "gemm"
    try:
        for select in ("mask", "sort"):
            os.environ["RASFAST_THEME_DENSE_SELECT"] = select
            name = f"cuda theme_scoped_search [gemm, dense select by {select}]"
            run(name, lambda: rasfast.theme_scoped_search(q, qe, c, e, K, k, backend="cuda"))
            step[f"whole call, dense select by {select}"] = tm[name]
    finally:
        os.environ.pop("RASFAST_THEME_DENSE_SELECT", None)
        os.environ.pop("RASFAST_THEME_PATH", None)
    out["steps_s"] = step
    ids = {}
    for B in (q.shape[0], 16, 4, 1):
        if B > q.shape[0]:
            continue
        row = {"B": B, "rule_picks": plan(B, c.shape[0], K)}
        for path in PATHS:
            os.environ["RASFAST_THEME_PATH"] = path
            try:
                name = f"cuda theme_scoped_search B={B} [{path}]"
                r = run(name, lambda: rasfast.theme_scoped_search(q[:B], qe[:B], c, e, K, k, backend="cuda"))
                row[path + "_s"] = tm[name]
                ids[path] = r[0]
                name = f"cuda theme_scope B={B} [{path}]"
                run(name, lambda: rasfast.theme_scope(q[:B], c, K, backend="cuda"))
                row[path + "_scope_s"] = tm[name]
            except Exception as ex:  # e.g. out of memory: the row says so
                row[path + "_error"] = f"{type(ex).__name__}: {str(ex)[:160]}"
            finally:
                os.environ.pop("RASFAST_THEME_PATH", None)
        if "kernel" in ids and "gemm" in ids:
            row["ids_agree"] = float((ids["kernel"] == ids["gemm"]).float().mean())
        if "kernel" in ids and "gemm+gather" in ids:
            row["ids_agree_hybrid"] = float((ids["kernel"] == ids["gemm+gather"]).float().mean())
        ids.clear()
        out["rows"].append(row)
        print(row, flush=True)
    return out


def per_question(q, qe, c, e, run, tm, n=20_000, K=2_000, k=10, calls=50):
    """One query over the first n rows (a RAS per-question call; host-bound on a GPU): the
    public call with the quantile shift skipped (the default below
    theme_gemm._SHIFT_MIN_VALUES [B, N] values) and forced, on the planner's path and on the
    fused kernel path. Per case: the best CUDA-event span of one call (host gaps between its
    launches included) and the host microseconds a call (``calls`` calls issued back to back,
    then one sync). A failing case records its error and the run goes on."""
    import time

    def sync():  # (the emulator's tests run this on CPU tensors)
        if torch.cuda.is_available():
            torch.cuda.synchronize()
    q1, qe1, cs, es = q[:1], qe[:1], c[:n], e[:n]
    rows, saved = [], theme_gemm._SHIFT_MIN_VALUES
    for shift_label, floor in (("shift skipped (default)", saved), ("shift forced", 0)):
        for path in ("planner", "kernel"):
            row = {"shift": shift_label, "path": path}
            theme_gemm._SHIFT_MIN_VALUES = floor
            if path != "planner":
                os.environ["RASFAST_THEME_PATH"] = path
            try:
                call = lambda: rasfast.theme_scoped_search(q1, qe1, cs, es, K, k, backend="cuda",  # noqa: E731
                                                           validate="none")
                name = f"per question N={n:,}: theme_scoped_search [{path}, {shift_label}]"
                run(name, call)
                row["call_ms"] = tm[name] * 1e3
                sync()
                t0 = time.perf_counter()
                for _ in range(calls):
                    call()
                row["host_us"] = (time.perf_counter() - t0) / calls * 1e6
                sync()
            except Exception as ex:
                row["error"] = f"{type(ex).__name__}: {str(ex)[:160]}"
            finally:
                theme_gemm._SHIFT_MIN_VALUES = saved
                os.environ.pop("RASFAST_THEME_PATH", None)
            rows.append(row)
            print(row, flush=True)
    return {"N": n, "K": K, "k": k, "rows": rows}


def per_question_markdown(pq) -> list:
    lines = ["", f"## Per question: B = 1, N = {pq['N']:,}, K = {pq['K']:,}, k = {pq['k']}, validate none", "",
             "The quantile shift pays from about 4M [B, N] values by the model in docs/gpu.md "
             "(theme_gemm._SHIFT_MIN_VALUES); this checks the small side of that crossing.", "",
             "| quantile shift | path | one call, ms (CUDA events) | host us a call |", "|---|---|---:|---:|"]
    for r in pq["rows"]:
        if "error" in r:
            lines.append(f"| {r['shift']} | {r['path']} | error: {r['error']} | |")
        else:
            lines.append(f"| {r['shift']} | {r['path']} | {r['call_ms']:.3f} | {r['host_us']:.0f} |")
    return lines


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=5_000_000)
    ap.add_argument("--t", type=int, default=298)
    ap.add_argument("--d", type=int, default=768)
    ap.add_argument("--b", type=int, default=64)
    ap.add_argument("--K", type=int, default=250_000)
    ap.add_argument("--k", type=int, default=10)
    ap.add_argument("--dtype", default="float16", choices=["float16", "bfloat16", "float32"])
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--no-triton", action="store_true")
    ap.add_argument("--out", default=str(HERE / "results" / "theme_gpu"))
    a = ap.parse_args(argv)
    if not torch.cuda.is_available():
        sys.exit("gpu_theme.py needs a CUDA device")
    dtype = getattr(torch, a.dtype)
    N, T, D, B, K, k, R = a.n, a.t, a.d, a.b, a.K, a.k, a.repeats
    q, qe, c, e = make_data(N, T, D, B, dtype)
    cuda = rasfast.dispatch.cuda_module()
    res = {"sizes": dict(N=N, T=T, D=D, B=B, K=K, k=k, dtype=a.dtype), "machine": machine_info(),
           "times_s": {}}
    tm = res["times_s"]

    def run(name, fn, repeats=R):
        out, best, _ = cuda_time(fn, repeats)
        tm[name] = best
        print(f"{name:40s} {best * 1e3:9.2f} ms", flush=True)
        return out

    # copy bandwidth
    x = torch.empty(1 << 29, dtype=torch.float32, device="cuda")  # 2 GiB
    y = torch.empty_like(x)
    run("device copy (2 GiB)", lambda: y.copy_(x))
    copy_bps = 2 * x.numel() * 4 / tm["device copy (2 GiB)"]
    del x, y
    # PPD scan alone
    keys = torch.empty((B, N), dtype=torch.int32, device="cuda")
    qf = q.float().contiguous()
    code = {torch.float32: 0, torch.float16: 1, torch.bfloat16: 2}[dtype]
    stream = torch.cuda.current_stream().cuda_stream
    run("cuda PPD scan (pass 1)",
        lambda: cuda.theme_scan_keys(qf.data_ptr(), c.data_ptr(), code, B, N, T, False,
                                     keys.data_ptr(), stream))
    del keys
    scan_bps = c.numel() * c.element_size() / tm["cuda PPD scan (pass 1)"]
    res["bandwidth"] = {"device_copy_bytes_per_s": copy_bps, "ppd_scan_read_bytes_per_s": scan_bps,
                        "fraction_of_copy": scan_bps / copy_bps}

    ours = run("rasfast cuda theme_scoped_search",
               lambda: rasfast.theme_scoped_search(q, qe, c, e, K, k, backend="cuda"))
    run("rasfast cuda theme_scope (sorted K)", lambda: rasfast.theme_scope(q, c, K, backend="cuda"))
    res["paths"] = paths(q, qe, c, e, K, k, run, tm)
    res["per_question"] = per_question(q, qe, c, e, run, tm)
    res["gemm_mm_mode"] = theme_gemm.MM_MODE
    if not a.no_triton:
        kt = rasfast.dispatch.triton_kernels().theme  # pass 1: tl.dot (B > 8) or small-B kernel
        run("triton PPD scan (pass 1)", lambda: kt._keys(qf, c, "l2"))
        res["bandwidth"]["triton_ppd_scan_read_bytes_per_s"] = (
            c.numel() * c.element_size() / tm["triton PPD scan (pass 1)"])
        run("rasfast triton theme_scoped_search",
            lambda: rasfast.theme_scoped_search(q, qe, c, e, K, k, backend="triton"))
    cn = torch.cat([(c[s:s + (1 << 20)].float() ** 2).sum(1) for s in range(0, N, 1 << 20)])
    peer = run("torch matmul+topk+gather+bmm+topk", lambda: torch_peer(q, qe, c, e, K, k, cn))
    res["speedup_vs_torch"] = tm["torch matmul+topk+gather+bmm+topk"] / tm["rasfast cuda theme_scoped_search"]
    res["ids_identical_to_torch_peer"] = float((ours[0] == peer[0]).float().mean())
    out = pathlib.Path(a.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".json").write_text(json.dumps(res, indent=2))
    bw = res["bandwidth"]
    lines = ["# theme ops on GPU", "", header_markdown(),
             f"Sizes: N={N:,}, T={T}, D={D}, B={B}, K={K:,}, k={k}, {a.dtype}; best of {R}.", "",
             "| method | best ms |", "|---|---:|"]
    lines += [f"| {n} | {t * 1e3:.2f} |" for n, t in tm.items()]
    lines += ["", f"- PPD scan reads {bw['ppd_scan_read_bytes_per_s'] / 1e9:.0f} GB/s = "
              f"{bw['fraction_of_copy'] * 100:.0f}% of device copy {bw['device_copy_bytes_per_s'] / 1e9:.0f} GB/s",
              f"- theme_scoped_search cuda vs torch peer: {res['speedup_vs_torch']:.2f}x",
              f"- ids identical to the torch peer: {res['ids_identical_to_torch_peer'] * 100:.2f}% "
              "(differences only expected at the K-th-distance boundary / f16 matmul rounding)", ""]
    lines += ["", "## The cuda paths (RASFAST_THEME_PATH) and plan()'s choice", "",
              f"16-bit products reach float32 by: {res['gemm_mm_mode']}.", "",
              "| B | kernel ms | gemm ms | gemm+gather ms | plan picks | fastest | scope: kernel ms | "
              "scope: gemm ms | ids agree (gemm, gemm+gather vs kernel) |",
              "|---|---:|---:|---:|---|---|---:|---:|---|"]
    for r in res["paths"]["rows"]:
        times = {p: r.get(p + "_s") for p in ("kernel", "gemm", "gemm+gather")}
        have = {p: t for p, t in times.items() if t is not None}
        fast = min(have, key=have.get) if have else "-"
        f = lambda v: "-" if v is None else f"{v * 1e3:.2f}"
        lines.append(f"| {r['B']} | {f(times['kernel'])} | {f(times['gemm'])} | {f(times['gemm+gather'])} | "
                     f"{r['rule_picks']} | {fast} | {f(r.get('kernel_scope_s'))} | {f(r.get('gemm_scope_s'))} | "
                     f"{r.get('ids_agree', float('nan')) * 100:.2f}%, {r.get('ids_agree_hybrid', float('nan')) * 100:.2f}% |")
    lines += per_question_markdown(res["per_question"])
    out.with_suffix(".md").write_text("\n".join(lines))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
