"""The tolerance comparison the parity tests use must still catch real differences."""
import pytest
import torch

from backends_util import assert_topk_close


def test_accepts_last_bit_differences_and_reordered_near_ties():
    ids = torch.tensor([[3, 1, 2, -1]])
    sc = torch.tensor([[0.9, 0.5, 0.5, float("-inf")]])
    assert_topk_close((ids, sc + torch.tensor([[1e-7, 0, 0, 0]])), (ids, sc))
    assert_topk_close((torch.tensor([[3, 2, 1, -1]]), sc), (ids, sc))  # tied run reordered


@pytest.mark.parametrize("ids, sc", [
    ([[1, 3, 2, -1]], [[0.9, 0.5, 0.5, float("-inf")]]),          # distinct scores swapped ids
    ([[3, 1, 7, -1]], [[0.9, 0.5, 0.5, float("-inf")]]),          # a tied id replaced
    ([[3, 1, 2, -1]], [[0.9, 0.5, 0.49, float("-inf")]]),         # a score off by 1e-2
    ([[3, 1, 2, 4]], [[0.9, 0.5, 0.5, 0.1]]),                     # padding became a result
])
def test_rejects_real_differences(ids, sc):
    want = (torch.tensor([[3, 1, 2, -1]]), torch.tensor([[0.9, 0.5, 0.5, float("-inf")]]))
    with pytest.raises(AssertionError):
        assert_topk_close((torch.tensor(ids), torch.tensor(sc)), want)
