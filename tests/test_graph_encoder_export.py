"""torch.export of GraphEncoder with dynamic sizes (issue 39 item 2): one exported program
serves every batch of question graphs (one graph, empty graphs, no edges, no nodes), equal
to the eager encoder; saved, it loads and runs in a fresh process that imports rasfast."""
import subprocess
import sys

import numpy as np
import pytest
import torch

from rasfast.models.graph_encoder import GraphEncoder
from rasfast.models.graph_encoder_export import export_graph_encoder


def _encoder(edge_dim=3, llm_hidden=None, seed=0):
    torch.manual_seed(seed)
    return GraphEncoder(in_channels=6, hidden=8, heads=2, num_layers=2, edge_dim=edge_dim,
                        llm_hidden=llm_hidden, projector_hidden=12).eval()


def _batch(sizes, edge_dim=3, seed=0, per_node=2):
    g = torch.Generator().manual_seed(seed)
    gp = torch.tensor([0] + np.cumsum(sizes).tolist(), dtype=torch.int64)
    src, dst = [torch.zeros(0, dtype=torch.int64)], [torch.zeros(0, dtype=torch.int64)]
    for s, e in zip(gp[:-1].tolist(), gp[1:].tolist()):
        m = per_node * (e - s)
        src.append(torch.randint(s, max(e, s + 1), (m,), generator=g))
        dst.append(torch.randint(s, max(e, s + 1), (m,), generator=g))
    ei = torch.stack([torch.cat(src), torch.cat(dst)])
    ea = torch.randn(ei.shape[1], edge_dim, generator=g) if edge_dim else None
    return torch.randn(int(gp[-1]), 6, generator=g), ei, ea, gp


# sizes the example ([5, 3]) does not have: one graph, a graph of one node, empty graphs,
# no graph at all, and a batch with no edges
OTHER = [[7], [1], [4, 0, 9, 1], [30, 2, 2, 11, 5], [0], [], [3, 3]]


@pytest.mark.parametrize("edge_dim", [3, None])
def test_one_program_serves_every_batch_size(edge_dim):
    enc = _encoder(edge_dim=edge_dim)
    ep = enc.export(*_batch([5, 3], edge_dim=edge_dim, seed=1))
    run = ep.module()
    for i, sizes in enumerate(OTHER):
        args = _batch(sizes, edge_dim=edge_dim, seed=10 + i, per_node=0 if sizes == [3, 3] else 2)
        with torch.no_grad():
            want = enc.encode_batch(*args)
        got = run(*args)
        assert got.shape == (len(sizes), 8)
        assert torch.equal(got, want), sizes


def test_the_program_is_one_operator_call():
    ep = _encoder().export(*_batch([5, 3]))
    code = ep.graph_module.print_readable(print_output=False)
    assert code.count("rasfast.graph_transformer_pool") == 1


def test_static_export_is_specialised_and_rejects_other_sizes():
    """dynamic=False keeps torch's default (the example's sizes): what the dynamic export
    is for, checked so that the test above cannot pass by accident."""
    ep = _encoder().export(*_batch([5, 3]), dynamic=False)
    with pytest.raises(Exception):
        ep.module()(*_batch([7], seed=2))


def test_projected_soft_token():
    enc = _encoder(llm_hidden=5)
    ep = export_graph_encoder(enc, *_batch([5, 3]), project=True)
    for i, sizes in enumerate([[7], [2, 6, 1]]):
        args = _batch(sizes, seed=20 + i)
        with torch.no_grad():
            want = enc.projector(enc.encode_batch(*args).mean(0))
        got = ep.module()(*args)
        assert got.shape == (5,)
        torch.testing.assert_close(got, want, rtol=0, atol=0)


def test_saved_program_runs_in_a_fresh_process(tmp_path):
    enc = _encoder()
    path = tmp_path / "encoder.pt2"
    torch.export.save(enc.export(*_batch([5, 3])), str(path))
    args = _batch([2, 9, 1], seed=7)
    torch.save(args, tmp_path / "args.pt")
    with torch.no_grad():
        torch.save(enc.encode_batch(*args), tmp_path / "want.pt")
    code = ("import sys, torch, rasfast.ops\n"
            f"ep = torch.export.load({str(path)!r})\n"
            f"args = torch.load({str(tmp_path / 'args.pt')!r})\n"
            f"want = torch.load({str(tmp_path / 'want.pt')!r})\n"
            "got = ep.module()(*args)\n"
            "sys.exit(0 if torch.equal(got, want) else 3)\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]


def test_export_errors():
    enc = _encoder()
    args = _batch([5, 3])
    with pytest.raises(ValueError, match="encoder: export needs eval mode"):
        export_graph_encoder(enc.train(), *args)
    enc.eval()
    with pytest.raises(ValueError, match="project: the encoder has no projector"):
        enc.export(*args, project=True)
    with pytest.raises(TypeError, match="graph_ptr: expected a torch.Tensor"):
        enc.export(args[0], args[1], args[2], [0, 5, 8])
    with pytest.raises(TypeError, match="encoder: expected a GraphEncoder"):
        export_graph_encoder(torch.nn.Linear(2, 2), *args)
