"""rasfast/ops/host_scratch.py: per-thread reused host buffers."""
import threading

import torch

from rasfast.ops import host_scratch


def test_buffers_are_reused_grown_and_per_name_dtype_and_thread():
    host_scratch.clear()
    a = host_scratch.buffer("t", (4, 5))
    assert a.shape == (4, 5) and a.is_contiguous() and a.dtype == torch.float32
    b = host_scratch.buffer("t", (3, 2))  # smaller: the same memory
    assert b.data_ptr() == a.data_ptr() and b.shape == (3, 2)
    c = host_scratch.buffer("t", (50,))   # larger: grown
    assert c.shape == (50,) and host_scratch.held_bytes() == 50 * 4
    assert host_scratch.buffer("t", (50,)).data_ptr() == c.data_ptr()
    d = host_scratch.buffer("t", (6,), torch.float64)  # another dtype: another buffer
    assert d.dtype == torch.float64 and d.data_ptr() != c.data_ptr()
    assert host_scratch.buffer("u", (6,)).data_ptr() != c.data_ptr()  # another name
    assert host_scratch.buffer("t", (0, 3)).shape == (0, 3)
    other = []
    t = threading.Thread(target=lambda: other.append(host_scratch.buffer("t", (50,)).data_ptr()))
    t.start()
    t.join()
    assert other[0] != c.data_ptr()  # each thread its own
    host_scratch.clear()
    assert host_scratch.held_bytes() == 0
