"""Device-work budget of select_k on backend "cuda" (issue 38, DESIGN.md s.11), on the emulator.

A call is one memset, one launch per 11-bit digit of the composite key (K key bits + the
index bits), one write pass and the sort: no host synchronisation, no allocation outside
torch (one workspace tensor from its caching allocator), no torch op over x (values come
out of the kernel). Before the rebuild (commit c04cd47), a 4 x 5,000 float32 call at k = 10
counted 12 kernels, 1 memset, 4 torch ops (a NaN pass over x and a gather), 1 sync and 7
allocations. For k <= 256 a call is two launches (the filtered pass and the merge), no
memset (eighth session), when RASFAST_SELECT_FILTER_K=256 asks for it: the sixth H100 session
timed it 2-3x slower than the radix passes at k = 10, which are the default again.
"""
import math

import pytest
import torch

import rasfast
from rasfast.device_work import count_device_work
from rasfast.reference.select import select_k as ref_select

from conftest import EMULATED

pytestmark = [pytest.mark.cuda_emu,
              pytest.mark.skipif(not EMULATED, reason="needs the CUDA emulator (RASFAST_CUDA_EMU=1)")]


FILTER_K = 256  # csrc/select/select_kernels.cu kFilterK


def _launch_budget(N, k, key_bits, sorted_, filtered=True):
    if filtered and k <= FILTER_K:
        return 2  # the filtered pass and the merge: no memset, sorted either way
    passes = math.ceil((key_bits + max(0, math.ceil(math.log2(N)))) / 11)
    sort = 0
    if sorted_:
        sort = 1 if k <= 2048 else 64 // 8 + 2 + 1  # device radix sort + decode, at most
    return 1 + passes + 1 + sort


@pytest.mark.parametrize("filtered", [True, False])
@pytest.mark.parametrize("dtype,key_bits", [(torch.float32, 32), (torch.float16, 16), (torch.bfloat16, 16)])
@pytest.mark.parametrize("B,N,k,sorted_", [(4, 5_000, 10, True), (3, 9_001, 3_000, True),
                                           (2, 4_097, 100, False), (1, 1, 1, True),
                                           (2, 30_001, 256, True), (2, 30_001, 257, True)])
def test_select_k_is_sync_free_and_allocation_free(monkeypatch, filtered, dtype, key_bits, B, N, k,
                                                   sorted_):
    """With RASFAST_SELECT_FILTER_K=256, k <= 256 takes the filtered pass (2 launches; 8 for
    4 x 5,000 float32 at k = 10 on the radix passes, the default)."""
    monkeypatch.setenv("RASFAST_SELECT_FILTER_K", "256" if filtered else "0")
    x = torch.randn(B, N).to(dtype)
    with count_device_work(watch=[x]) as work:
        vals, idx = rasfast.select_k(x, k, sorted=sorted_, backend="cuda")
    assert work.syncs == 0, work.summary()
    assert work.allocs == 0, work.summary()
    assert work.watched_reads == 0, work.summary()  # no validation pass, no gather over x
    assert work.torch_ops == 0, work.summary()
    assert work.launches <= _launch_budget(N, k, key_bits, sorted_, filtered), work.summary()
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


def test_select_k_default_is_the_radix_path(monkeypatch):
    """Without RASFAST_SELECT_FILTER_K, k = 10 runs the radix passes (memset, passes, write,
    sort: more than the filtered pass's 2 launches), measured faster on an H100."""
    monkeypatch.delenv("RASFAST_SELECT_FILTER_K", raising=False)
    x = torch.randn(4, 5_000)
    with count_device_work(watch=[x]) as work:
        _, idx = rasfast.select_k(x, 10, backend="cuda")
    assert work.launches == _launch_budget(5_000, 10, 32, True, filtered=False), work.summary()
    assert torch.equal(idx, ref_select(x, 10, False, True))
