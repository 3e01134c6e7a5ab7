"""Test helpers for the LLM tests: a tiny stand-in graph encoder and single-thread torch.

The stand-in encoder has the GraphEncoder interface the GraphLLM relies on (an nn.Module
mapping one list of subgraphs to one vector, with ``out_dim``); a subgraph here is a small
node-feature matrix. The real rasfast.GraphEncoder is exercised after the gconv merge."""
import contextlib

import torch
from torch import nn


class StandInGraphEncoder(nn.Module):
    def __init__(self, in_dim=4, out_dim=16, seed=0):
        super().__init__()
        self.out_dim = out_dim
        self.calls = []  # subgraph counts seen, to check truncation of old subgraphs
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            self.lin = nn.Linear(in_dim, out_dim)

    def forward(self, subgraphs):
        self.calls.append(len(subgraphs))
        per = [self.lin(torch.as_tensor(g, dtype=torch.float32)).mean(0) for g in subgraphs]
        return torch.stack(per).mean(0)


@contextlib.contextmanager
def torch_threads(n):
    # the shared 2-core machine is oversubscribed; OpenMP spinning makes 2 threads ~100x slower
    old = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(old)
