"""Device-work budget of select_k on backend "cuda" (issue 38, DESIGN.md s.11), on the emulator.

A call is one memset, one launch per 11-bit digit of the composite key (K key bits + the
index bits), one write pass and the sort: no host synchronisation, no allocation outside
torch (one workspace tensor from its caching allocator), no torch op over x (values come
out of the kernel). Before the rebuild (commit c04cd47), a 4 x 5,000 float32 call at k = 10
counted 12 kernels, 1 memset, 4 torch ops (a NaN pass over x and a gather), 1 sync and 7
allocations. For k <= 256 a call is two launches (the filtered pass and the merge), no
memset (eighth session), when RASFAST_SELECT_FILTER_K=256 asks for it: the sixth H100 session
timed it 2-3x slower than the radix passes at k = 10, which are the default again. Rows of up
to 65,536 entries (k <= 2,048) take one launch since the sixteenth session (select_rows_small:
a per-question call was launch-bound there, 0.148 ms eager against 0.036 ms from a CUDA graph);
since the twenty-first session, from the seventh GPU run, rows past 32,768 entries with k <= 32
take the filtered pass instead, and the one launch with 2,048 < k serves sorted calls on rows
up to 32,768 entries only.
"""
import math
import os

import pytest
import torch

import rasfast
from rasfast.device_work import count_device_work
from rasfast.reference.select import select_k as ref_select

from conftest import EMULATED

pytestmark = [pytest.mark.cuda_emu,
              pytest.mark.skipif(not EMULATED, reason="needs the CUDA emulator (RASFAST_CUDA_EMU=1)")]


FILTER_K = 256  # csrc/select/select_kernels.cu kFilterK


SMALL_N, SMALL_K = 65_536, 2_048  # select_rows_small: one launch for rows up to SMALL_N entries
RADIX_SORT_K = 16_384  # sort_rows_radix: sorted answers on chip in one launch up to this k
# select_rows_small_sorted (SMALL_K < k <= RADIX_SORT_K): sorted answers on rows up to this
# (kSmallSortedMaxN); without RASFAST_SELECT_FILTER_K, rows above it with k <= 32
# (kShortRowFilterK) take the filtered pass (twenty-first session, from the seventh GPU run)
SMALL_SORTED_N, SHORT_ROW_FILTER_K = 32_768, 32


def _launch_budget(N, k, key_bits, sorted_, path="filtered"):
    if path == "filtered" and k <= FILTER_K:
        return 2  # the filtered pass and the merge: no memset, sorted either way
    if path == "small" and N <= SMALL_N and (k <= SMALL_K or (sorted_ and N <= SMALL_SORTED_N
                                                               and k <= RADIX_SORT_K)):
        return 1  # the whole select in one block per row: no memset, sorted either way
    passes = math.ceil((key_bits + max(0, math.ceil(math.log2(N)))) / 11)
    sort = 0
    if sorted_:
        # on chip (bitonic to 2,048, radix to 16,384: one launch), else cub's device radix sort
        # + decode, at most
        sort = 1 if k <= RADIX_SORT_K else 64 // 8 + 2 + 1
    return 1 + passes + 1 + sort


# each design forced: the filtered pass (RASFAST_SELECT_FILTER_K=256), the radix passes (both
# off), the one-launch short-row select (the default up to 65,536 entries a row)
PATHS = {"filtered": ("256", "0"), "radix": ("0", "0"), "small": ("0", str(SMALL_N))}


@pytest.mark.parametrize("path", sorted(PATHS))
@pytest.mark.parametrize("dtype,key_bits", [(torch.float32, 32), (torch.float16, 16), (torch.bfloat16, 16)])
@pytest.mark.parametrize("B,N,k,sorted_", [(4, 5_000, 10, True), (3, 9_001, 3_000, True),
                                           (2, 4_097, 100, False), (1, 1, 1, True),
                                           (2, 30_001, 256, True), (2, 30_001, 257, True),
                                           (2, 70_001, 10, True)])
def test_select_k_is_sync_free_and_allocation_free(monkeypatch, path, dtype, key_bits, B, N, k,
                                                   sorted_):
    """The filtered pass: 2 launches for k <= 256; the short-row select: 1 for rows up to
    65,536 entries (8 for 4 x 5,000 float32 at k = 10 on the radix passes)."""
    monkeypatch.setenv("RASFAST_SELECT_FILTER_K", PATHS[path][0])
    monkeypatch.setenv("RASFAST_SELECT_SMALL_N", PATHS[path][1])
    x = torch.randn(B, N).to(dtype)
    with count_device_work(watch=[x]) as work:
        vals, idx = rasfast.select_k(x, k, sorted=sorted_, backend="cuda")
    assert work.syncs == 0, work.summary()
    assert work.allocs == 0, work.summary()
    assert work.watched_reads == 0, work.summary()  # no validation pass, no gather over x
    assert work.torch_ops == 0, work.summary()
    assert work.launches <= _launch_budget(N, k, key_bits, sorted_, path), work.summary()
    want = ref_select(x, k, False, sorted_)
    if sorted_:
        assert torch.equal(idx, want)
    else:
        assert torch.equal(idx.sort(1).values, want.sort(1).values)
    assert torch.equal(vals, torch.gather(x, 1, idx))


def test_select_k_nan_costs_nothing_on_cuda():
    """NaN is ranked, not searched for: the same budget with NaN in the input."""
    x = torch.randn(2, 3_000)
    x[1, 7] = float("nan")
    with count_device_work(watch=[x]) as work:
        _, idx = rasfast.select_k(x, 5, largest=True, backend="cuda")
    assert work.syncs == 0 and work.watched_reads == 0, work.summary()
    assert idx[1, 0].item() == 7


@pytest.mark.parametrize("N,path", [(5_000, "small"), (32_768, "small"), (32_769, "filtered"),
                                    (65_536, "filtered"), (65_537, "radix")])
def test_select_k_default_path(monkeypatch, N, path):
    """Without the environment's overrides, at k = 10: rows up to 32,768 entries take the
    one-launch select, rows up to 65,536 the filtered pass (the seventh GPU run: 0.038 against
    0.067 ms at 8 x 50k), longer ones the radix passes (memset, passes, write, sort), which the
    sixth H100 session measured faster than the filtered pass on long rows."""
    monkeypatch.delenv("RASFAST_SELECT_FILTER_K", raising=False)
    monkeypatch.delenv("RASFAST_SELECT_SMALL_N", raising=False)
    x = torch.randn(2, N)
    with count_device_work(watch=[x]) as work:
        _, idx = rasfast.select_k(x, 10, backend="cuda")
    assert work.launches == _launch_budget(N, 10, 32, True, path), work.summary()
    assert torch.equal(idx, ref_select(x, 10, False, True))


@pytest.mark.parametrize("k,sort_launches", [(10_000, 1), (16_384, 1), (16_385, 0)])
def test_select_k_large_k_sorts_on_chip_in_one_launch(monkeypatch, k, sort_launches):
    """Sorted answers for 2,048 < k <= 16,384: one on-chip sort launch after the radix passes
    (memset, passes, write, sort), where cub's device-wide sort took a histogram, a scan, one
    launch per 8 bits of the keys and a decode (the sixth H100 session: 92 of 245 us at
    16 x 1M float32, k = 10,000). Above 16,384 cub's sort: more launches."""
    monkeypatch.delenv("RASFAST_SELECT_FILTER_K", raising=False)
    monkeypatch.delenv("RASFAST_SELECT_SMALL_N", raising=False)
    monkeypatch.delenv("RASFAST_SELECT_RADIX_SORT_K", raising=False)
    N = 70_001
    x = torch.randn(1, N)
    with count_device_work(watch=[x]) as work:
        _, idx = rasfast.select_k(x, k, backend="cuda")
    passes = math.ceil((32 + math.ceil(math.log2(N))) / 11)
    if sort_launches:
        assert work.launches == 1 + passes + 1 + sort_launches, work.summary()
    else:
        assert work.launches > 1 + passes + 1 + 1, work.summary()
    assert work.syncs == 0 and work.allocs == 0 and work.torch_ops == 0, work.summary()
    assert torch.equal(idx, ref_select(x, k, False, True))


@pytest.mark.parametrize("arch", ["80", "90"])
def test_on_chip_sort_fits_each_archs_shared_memory(arch):
    """The on-chip sort's largest variant (32 keys a thread, 145 KB of keys and counters, with
    the one-launch select's histogram 153 KB) within sm_80's opt-in shared memory (163 KB) as
    well as sm_90's, in both kernels that sort on chip: the emulator fails a launch over the
    architecture's limit. A fresh process, since the device's attributes are read once."""
    import subprocess
    import sys
    code = ("import torch, rasfast\n"
            "from rasfast.reference.select import select_k as ref\n"
            "for n in (20_000, 70_001):  # the one-launch select's sort, the radix passes' sort\n"
            "    x = torch.randn(1, n)\n"
            "    _, idx = rasfast.select_k(x, 16_384, backend='cuda')\n"
            "    assert torch.equal(idx, ref(x, 16_384, False, True))\n"
            "print('OK')\n")
    env = dict(os.environ, CUEMU_ARCH=arch, RASFAST_CUDA_EMU="1")
    env.pop("RASFAST_SELECT_RADIX_SORT_K", None)
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0 and "OK" in out.stdout, out.stderr[-2000:]


@pytest.mark.parametrize("N,k", [(20_000, 2_049), (20_000, 10_000), (32_768, 16_384), (50_000, 16_384)])
def test_short_rows_select_large_k_in_one_launch(monkeypatch, N, k):
    """Sorted answers on rows of up to 32,768 entries with 2,048 < k <= 16,384: one launch
    (the passes, the gather and the on-chip radix sort in one block a row), where they took
    the radix passes' memset, passes, write and sort (a per-question call at k = 10,000: eight
    launches). Unsorted calls and longer rows take the radix passes (the seventh GPU run: the
    one launch took 0.177 against their 0.113 ms at 8 x 50k, and sorted whatever was asked)."""
    monkeypatch.delenv("RASFAST_SELECT_FILTER_K", raising=False)
    monkeypatch.delenv("RASFAST_SELECT_SMALL_N", raising=False)
    monkeypatch.delenv("RASFAST_SELECT_RADIX_SORT_K", raising=False)
    x = torch.randn(2, N)
    want = ref_select(x, k, False, True)
    for sorted_ in (True, False):
        with count_device_work(watch=[x]) as work:
            _, idx = rasfast.select_k(x, k, sorted=sorted_, backend="cuda")
        one = sorted_ and N <= SMALL_SORTED_N
        assert work.launches == (1 if one else _launch_budget(N, k, 32, sorted_, "radix")), work.summary()
        assert work.syncs == 0 and work.allocs == 0 and work.torch_ops == 0, work.summary()
        if sorted_:
            assert torch.equal(idx, want)
        else:
            assert torch.equal(idx.sort(dim=1).values, want.sort(dim=1).values)
