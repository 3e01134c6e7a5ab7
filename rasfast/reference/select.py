"""select_k reference: a stable full sort, so ties keep the lower index first."""
import torch


def select_k(x: torch.Tensor, k: int, largest: bool, sorted: bool) -> torch.Tensor:
    """Indices [B, k] of the k smallest (largest) entries per row, ties by lower index.

    Comparison is in float32 (exact for float16/bfloat16), where -0.0 == +0.0 tie.
    """
    _, idx = torch.sort(x.float(), dim=1, descending=largest, stable=True)
    return idx[:, :k].contiguous()
