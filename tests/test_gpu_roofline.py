"""The prepared roofline command (tools/gpu_session.sh roofline) works before a GPU is at hand:
without a device it runs benchmarks/gpu_roofline.py on the CUDA emulator, which must find
select_k exact on every case and write its report with every section."""
import os
import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
pytestmark = [pytest.mark.cuda_emu]


def test_roofline_command_runs_on_the_emulator(tmp_path):
    env = dict(os.environ, OUT=str(tmp_path), PY=sys.executable, RASFAST_CUDA_EMU="1")
    res = subprocess.run(["bash", str(ROOT / "tools" / "gpu_session.sh"), "roofline"], cwd=ROOT, env=env,
                         capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-2000:]
    md = (tmp_path / "gpu_roofline.md").read_text()
    for section in ("## Host synchronisations and host time per call", "## select_k (cuda): parity and CUDA graph",
                    "## select_k timings", "## Nsight Compute"):
        assert section in md
    assert "Failures:" not in md
    # every op was called, none failed to run
    for op in ("select_k", "theme_scoped_search", "theme_scope", "triple_beam_search",
               "segment_topk_scores", "graph_transformer_pool"):
        assert f"| {op}" in md, op
    assert "| error |" not in md
    # select_k reads nothing back on the device path
    assert "| select_k (8 x 50k, k=100) | 0 |" in md
    assert "| segment_topk_scores validate='none' | 0 |" in md
    # segment_topk_scores' scoring as the seventh run timed it (a warp a row), beside the
    # default (a warp a chunk), in the same run: the row's last cell holds its time
    assert "| same ids | row a warp ms |" in md
    seg = next(ln for ln in md.splitlines() if ln.startswith("| 4 | 30 | 16 | float32 | False |"))
    assert seg.rstrip(" |").split("|")[-1].strip() not in ("", "-"), seg
    # one question's subgraph through GraphEncoder, replayed from its padded bucket's graph
    # (EagerGraphs here), equal to the eager encodings. Its host batch's index arrays are read
    # on the host, which the emulator, whose every tensor is a CPU tensor, counts as syncs:
    # tests/test_graph_replay.py counts the captured call alone
    assert "| GraphEncoder, one question's subgraph, CUDA graph replay |" in md
    replay = md.split("'GraphEncoder per question, CUDA graph replay': ")[1].split("}")[0]
    assert "'matches': True" in replay and "error" not in replay, replay
    assert "| ThemeIndex.search, one question, CUDA graph replay |" in md
    # the RAS loop end to end with its retrieval on the device: three runs, the same answers,
    # the replayed one through captured graphs
    loop = md.split("## The RAS loop end to end, retrieval on the device")[1].split("\n## ")[0]
    rows = [ln for ln in loop.splitlines() if ln.startswith("| index on the")]
    assert len(rows) == 3 and all("| True |" in ln for ln in rows), loop
    assert int(rows[2].split("|")[5]) >= 1, rows[2]
    replay = md.split("'ThemeIndex.search per question, CUDA graph replay': ")[1].split("}")[0]
    assert "'matches': True" in replay and "error" not in replay, replay
    # where the host time of each sync-free op goes (the next GPU run's measured reasons)
    from benchmarks.gpu_roofline import HOST_PROFILED
    for name in HOST_PROFILED:
        assert f"cProfile of 50 calls of {name}, by own time:" in md, name
    assert "error: " not in md.split("## Host time of a call, by function")[1].split("## Nsight")[0]
    # the per-question calls compile (reduce-overhead, fullgraph) and agree with eager
    compiled = md.split("## Per-question calls through torch.compile(mode='reduce-overhead')")[1].split("## Nsight")[0]
    assert compiled.count("| True |") == 4, compiled


def test_the_theme_benchmark_paths_run_on_the_emulator(monkeypatch):
    """benchmarks/gpu_theme.py (the roofline's bench stage) needs a GPU as a whole; its
    paths() -- every cuda path at several B, the GEMM path's steps, the masked and sorted
    dense select, 4 and 8 warps -- runs here on small emulated inputs, so a broken step is
    found before a GPU session spends its minutes on it."""
    import time

    import torch
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import gpu_theme
    monkeypatch.setenv("RASFAST_CUDA_EMU", "1")
    g = torch.Generator().manual_seed(0)
    unit = lambda x: (x / x.norm(dim=1, keepdim=True)).to(torch.float16)  # noqa: E731
    c, e = unit(torch.rand(600, 30, generator=g)), unit(torch.randn(600, 16, generator=g))
    q, qe = unit(torch.rand(8, 30, generator=g)), unit(torch.randn(8, 16, generator=g))
    tm = {}

    def run(name, fn, repeats=1):
        t0 = time.perf_counter()
        out = fn()
        tm[name] = time.perf_counter() - t0
        return out
    res = gpu_theme.paths(q, qe, c, e, 60, 5, run, tm)
    pq = gpu_theme.per_question(q, qe, c, e, run, tm, n=500, K=50, k=5, calls=1)
    for name in ("dense products under the scope mask", "whole call, dense select by mask",
                 "whole call, dense select by sort", "dense products (split GEMM), 8 warps",
                 "theme values, masked width (before)", "theme values, padding zeroed in registers"):
        assert name in res["steps_s"], name
    rows = res["rows"]
    assert [r["B"] for r in rows] == [8, 4, 1]
    assert all(r.get("ids_agree") == 1.0 and "gemm_s" in r for r in rows), rows
    # the per-question case: shift skipped and forced, planner and kernel path, none failing
    assert [(r["shift"][:10], r["path"]) for r in pq["rows"]] == [
        ("shift skip", "planner"), ("shift skip", "kernel"), ("shift forc", "planner"), ("shift forc", "kernel")]
    assert all("error" not in r and r["host_us"] > 0 for r in pq["rows"]), pq
    assert "| shift forced | kernel |" in "\n".join(gpu_theme.per_question_markdown(pq))


def test_ncu_csv_is_read_per_kernel_and_per_call():
    """The Nsight Compute table (a GPU run's only check of the select SASS model) parses
    ncu's CSV: units scaled, kernels tagged with the probe call they belong to."""
    from benchmarks.gpu_roofline import NCU_CALLS, NCU_ENTRIES, NCU_MORE_CALLS, ncu_markdown, parse_ncu_csv
    head = '"ID","Process ID","Process Name","Host Name","Kernel Name","Context","Stream","Block Size",' \
           '"Grid Size","Device","CC","Section Name","Metric Name","Metric Unit","Metric Value"'

    def row(i, kernel, metric, unit, value):
        return (f'"{i}","1","python","h","{kernel}","1","7","(256, 1, 1)","(66, 16, 1)","0","9.0","",'
                f'"{metric}","{unit}","{value}"')
    text = "\n".join([
        "==PROF== Connected to process", head,
        row(0, "void filter_topk<0>(const float*)", "dram__bytes_read.sum", "Mbyte", "64.10"),
        row(0, "void filter_topk<0>(const float*)", "gpu__time_duration.sum", "usecond", "25.5"),
        row(1, "void sort_rows_small<0>(const unsigned long long*)", "dram__bytes_read.sum", "Kbyte", "10"),
        row(2, "void radix_pass<0, 0>(const float*)", "dram__bytes_read.sum", "Mbyte", "64.00"),
        row(2, "void radix_pass<0, 0>(const float*)", "smsp__thread_inst_executed.sum", "inst", "256,000,000"),
        row(2, "void radix_pass<0, 0>(const float*)", "launch__registers_per_thread", "register/thread", "32"),
        row(3, "void radix_pass<0, 1>(const float*)", "dram__bytes_read.sum", "Mbyte", "64.20"),
        row(3, "void radix_pass<0, 1>(const float*)", "dram__bytes_write.sum", "Kbyte", "80"),
    ])
    n = parse_ncu_csv(text)
    ks = {(r["id"], r["k"]) for r in n["kernels"]}
    assert ks == {("0", 10), ("1", 10), ("2", 10_000), ("3", 10_000)}
    assert n["per_call"][10]["read"] == pytest.approx(64.11e6)
    assert n["per_call"][10_000] == pytest.approx({"read": 128.2e6, "write": 80e3, "ns": 0})
    first = next(r for r in n["kernels"] if r["id"] == "2")
    assert first["smsp__thread_inst_executed.sum"] / NCU_ENTRIES == 16.0
    md = "\n".join(ncu_markdown(n))
    assert "| 10,000 | void radix_pass<0, 0>(const float*) | 64.00 | 0.00 | 0.0 | 32 | 0 | 16.0 |" in md
    assert NCU_CALLS == (10, 10_000)
    assert "Not measured" in "\n".join(ncu_markdown({"skipped": "no GPU"}))
    # the second probe: k = 250,000 (radix passes, cub's sort, the decode), then the beam kernel
    more = parse_ncu_csv("\n".join([
        head,
        row(0, "void radix_pass<0, 0>(const float*)", "dram__bytes_read.sum", "Mbyte", "64.00"),
        row(1, "void radix_pass<0, 1>(const float*)", "dram__bytes_read.sum", "Mbyte", "64.00"),
        row(2, "void cub::DeviceRadixSortOnesweepKernel<Policy>(...)", "gpu__time_duration.sum", "usecond", "30"),
        row(3, "void decode_sorted<0>(const unsigned long long*)", "dram__bytes_write.sum", "Mbyte", "48"),
        row(4, "void beam_search_kernel<0, int>(BeamCudaArgs)", "dram__bytes_read.sum", "Mbyte", "500"),
        row(4, "void beam_search_kernel<0, int>(BeamCudaArgs)", "gpu__time_duration.sum", "msecond", "1.25"),
        row(4, "void beam_search_kernel<0, int>(BeamCudaArgs)", "smsp__thread_inst_executed.sum", "inst", "9"),
    ]), NCU_MORE_CALLS)
    assert [r["k"] for r in more["kernels"]] == [250_000] * 4 + ["beam"]
    assert more["per_call"]["beam"] == pytest.approx({"read": 500e6, "write": 0, "ns": 1.25e6})
    assert more["per_call"][250_000]["ns"] == pytest.approx(30e3)
    md = "\n".join(ncu_markdown(more, "k = 250,000 and the beam kernel"))
    assert "DRAM read 500.0 MB, written 0.0 MB in 1,250 us (400 GB/s read)" in md
    assert "| beam | void beam_search_kernel<0, int>(BeamCudaArgs) | 500.00 | 0.00 | 1250.0 | 0 | 0 | - |" in md
    # a select call starts again after its predecessor's sort: two calls' kernels are told apart
    two = parse_ncu_csv("\n".join([head, row(0, "void radix_pass<0, 0>(x)", "dram__bytes_read.sum", "byte", "1"),
                                    row(1, "void sort_rows_small<0>(x)", "dram__bytes_read.sum", "byte", "1"),
                                    row(2, "void radix_pass<0, 0>(x)", "dram__bytes_read.sum", "byte", "1")]),
                        (1_000, 2_000))
    assert [r["k"] for r in two["kernels"]] == [1_000, 1_000, 2_000]


def test_the_beam_benchmark_knobs_run_on_the_emulator(monkeypatch):
    """benchmarks/gpu_beam.py's knob rows (RASFAST_BEAM_COMBINED, RASFAST_BEAM_LANES and
    RASFAST_BEAM_THREADS, the kernel-only timing, a one-query call) run here on a small emulated problem, each variant equal to the cpu
    backend, and leave no knob set behind."""
    import numpy as np
    import torch
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import gpu_beam
    from beam_graph import make_problem

    import rasfast
    monkeypatch.setenv("RASFAST_CUDA_EMU", "1")
    P = make_problem(400, 32, 3, 12, seed=0)
    kw = dict(beam_width=4, max_len=2, max_neighbors=20)
    graph = tuple(torch.from_numpy(a) for a in P["graph"])
    emb, q = torch.from_numpy(P["triple_emb"]), torch.from_numpy(P["q_emb"])
    ptr = np.cumsum([0] + [len(s) for s in P["seeds"]])
    seeds_ptr = (torch.from_numpy(ptr), torch.from_numpy(np.concatenate(P["seeds"])))
    ref = rasfast.triple_beam_search(P["graph"], P["triple_emb"], P["q_emb"], P["seeds"], backend="cpu", **kw)
    calls = []

    def time_ms(fn):
        calls.append(fn())
        return 1.0
    rows, parity = gpu_beam.knobs(graph, emb, q, seeds_ptr, kw, ref, time_ms,
                                  gpu_beam.kernel_call(graph, emb, q, seeds_ptr, kw, 400, 3))
    assert [r[0] for r in rows] == [f"cuda, float32, RASFAST_BEAM_COMBINED={c}" for c in ("0", "1024", "2048")] + [
        f"cuda, float32, RASFAST_BEAM_LANES={n}" for n in ("32", "16", "8", "4")] + [
        f"cuda, float32, RASFAST_BEAM_THREADS={t}" for t in ("256", "1024")] + [
        f"cuda, float32, one query (B = 1), RASFAST_BEAM_THREADS={t}" for t in ("256", "1024")]
    assert len(parity) == 9 and all(parity.values()), parity
    assert len(calls) == 11 and not any(k in os.environ for k in (
        "RASFAST_BEAM_LANES", "RASFAST_BEAM_COMBINED", "RASFAST_BEAM_THREADS"))


def test_the_ncu_probes_run_on_the_emulator(monkeypatch):
    """The processes Nsight Compute profiles (gpu_roofline.py --ncu-probe select|more) run
    here on tiny inputs: a broken probe would lose a GPU run's only kernel counters."""
    import torch
    from benchmarks.gpu_roofline import ncu_probe
    monkeypatch.setenv("RASFAST_CUDA_EMU", "1")
    sys.path.insert(0, str(ROOT / "benchmarks"))
    ncu_probe("select", torch.device("cpu"), small=True)
    out = ncu_probe("more", torch.device("cpu"), small=True)
    assert out.sequences.shape == (3, 10, 2) and int(out.num_beams.min()) > 0


def test_select_only_writes_its_report_and_render_rewrites_it(tmp_path):
    """--select-only (the short follow-up run) writes a markdown report beside its JSON, and
    --render writes the same report again from the JSON alone: results fetched from a GPU
    machine become results files here without re-measuring (the sixth session's third call
    returned only its JSON)."""
    env = dict(os.environ, RASFAST_CUDA_EMU="1")
    script = str(ROOT / "benchmarks" / "gpu_roofline.py")
    out = tmp_path / "sel"
    res = subprocess.run([sys.executable, script, "--emulate", "--select-only", "--quick", "--out", str(out)],
                         cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-2000:]
    md = (tmp_path / "sel.md").read_text()
    assert "## select_k timings" in md and "filtered ms (graph)" in md and "Failures:" not in md
    assert "| 4 | 20,000 | float32 | 10 |" in md
    # the second and third radix passes as the sixth run timed them, beside the default (the
    # row's last cell: emulated, no graph time)
    assert "per vector ms (graph) |" in md
    row = next(ln for ln in md.splitlines() if ln.startswith("| 4 | 20,000 | float32 | 10 |"))
    assert row.rstrip(" |").split("|")[-1].strip() not in ("", "-"), row
    again = tmp_path / "again"
    res = subprocess.run([sys.executable, script, "--render", str(tmp_path / "sel.json"), "--out", str(again)],
                         cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr[-2000:]
    assert (tmp_path / "again.md").read_text() == md
