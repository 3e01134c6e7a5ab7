"""The PyTorch operators on the CUDA backend (issue 39 item 2: compile and export "on CUDA where
a GPU is at hand"): torch.compile(fullgraph=True) of the RAS retrieval step, of a GraphEncoder
forward and of a training step, and torch.export of the encoder with dynamic sizes, each equal
to the eager calls of the same backend.

On a GPU the inputs are CUDA tensors; under the emulator (RASFAST_CUDA_EMU=1, `make test`) they
are CPU tensors with backend "cuda", which runs the CUDA kernels on the CPU, so the traced
operators' CUDA paths (their kernels, the fake kernels' shapes, the registered backward) are
checked without a GPU too. tools/gpu_session.sh runs this file in its test stage.
"""
import torch

import rasfast
from rasfast.device_work import _emulator
from rasfast.models.graph_encoder import GraphEncoder

from conftest import GPU_DEVICE, cuda_kernels
from test_torch_ops import _ras_args

BACKEND = "cuda"


def _ras_step(q_ppd, q_emb, corpus_ppd, corpus_emb, cand_emb, cand_ptr, indptr, indices,
              seed_ptr, seed_ids):
    """test_torch_ops._ras_step on the CUDA backend."""
    ids, scores = rasfast.theme_scoped_search(q_ppd, q_emb, corpus_ppd, corpus_emb, K=16, k=6,
                                              theme_weight=0.25, backend=BACKEND)
    top_v, top_i = rasfast.select_k(scores, 3, largest=True, backend=BACKEND)
    picked = torch.gather(ids, 1, top_i)
    seg_ids, seg_scores = rasfast.segment_topk_scores(q_emb, cand_emb, cand_ptr, 4, backend=BACKEND)
    beams = rasfast.triple_beam_search((indptr, indices), cand_emb, q_emb, (seed_ptr, seed_ids),
                                       beam_width=3, max_len=2, backend=BACKEND)
    return picked, top_v, seg_ids, seg_scores, beams.sequences, beams.scores


def _on_device(args):
    return tuple(a.to(GPU_DEVICE) for a in args)


def _launches(fn):
    """(fn's result, CUDA kernel launches it made): counted by the emulator; on a GPU the
    outputs' device shows the CUDA path, and the count is None."""
    emu = _emulator()
    before = emu.emu_counters()["launches"] if emu is not None else None
    out = fn()
    return out, (None if emu is None else emu.emu_counters()["launches"] - before)


@cuda_kernels
def test_compile_ras_retrieval_step_cuda():
    g = torch.Generator().manual_seed(21)
    torch._dynamo.reset()
    compiled = torch.compile(_ras_step, fullgraph=True, backend="aot_eager", dynamic=True)
    for B, N, M in ((5, 50, 17), (6, 71, 23)):
        args = _on_device(_ras_args(B, N, M, g))
        got, launches = _launches(lambda: compiled(*args))
        assert launches is None or launches > 0  # the CUDA kernels ran, not a CPU fallback
        want = _ras_step(*args)
        for a, b in zip(got, want):
            assert a.device.type == GPU_DEVICE.type and torch.equal(a, b)  # cuda:0, not "cuda"


def _encoder(seed, train=False):
    torch.manual_seed(seed)
    enc = GraphEncoder(in_channels=6, hidden=8, heads=2, num_layers=2, edge_dim=5,
                       llm_hidden=None).to(GPU_DEVICE)
    return enc.train(train)


def _batch(sizes, seed):
    g = torch.Generator().manual_seed(seed)
    ptr = torch.tensor([0] + torch.tensor(sizes).cumsum(0).tolist())
    src, dst = [], []
    for a, b in zip(ptr[:-1].tolist(), ptr[1:].tolist()):
        if b > a:
            src.append(torch.randint(a, b, (3 * (b - a),), generator=g))
            dst.append(torch.randint(a, b, (3 * (b - a),), generator=g))
    ei = torch.stack([torch.cat(src), torch.cat(dst)])
    return _on_device((torch.randn(int(ptr[-1]), 6, generator=g), ei,
                       torch.randn(ei.shape[1], 5, generator=g), ptr))


@cuda_kernels
def test_compile_graph_encoder_forward_cuda():
    enc = _encoder(seed=3)

    def vectors(x, ei, ea, gp):
        return enc.encode_batch(x, ei, ea, gp, backend=BACKEND)

    torch._dynamo.reset()
    compiled = torch.compile(vectors, fullgraph=True, backend="aot_eager")
    for sizes, seed in (([6, 4, 9], 1), ([6, 4, 9], 2)):
        args = _batch(sizes, seed)
        with torch.no_grad():
            want = vectors(*args)
            got, launches = _launches(lambda: compiled(*args))
        assert got.device.type == GPU_DEVICE.type and (launches is None or launches > 0)
        torch.testing.assert_close(got, want, rtol=0, atol=0)


@cuda_kernels
def test_compiled_training_step_cuda():
    """The registered backward (rasfast::graph_conv_backward) on the CUDA backend gives the
    eager CUDA training step's gradients."""
    enc = _encoder(seed=4, train=True)

    def loss_fn(x, ei, ea, gp):
        return enc.encode_batch(x, ei, ea, gp, backend=BACKEND).square().sum()

    args = _batch([7, 5, 3], seed=5)
    torch._dynamo.reset()
    compiled = torch.compile(loss_fn, fullgraph=True, backend="aot_eager")
    _, launches = _launches(lambda: compiled(*args).backward())
    assert launches is None or launches > 0
    got = [p.grad.clone() for p in enc.parameters()]
    enc.zero_grad()
    loss_fn(*args).backward()
    for (name, p), a in zip(enc.named_parameters(), got):
        torch.testing.assert_close(a, p.grad, rtol=1e-4, atol=1e-6, msg=name)


@cuda_kernels
def test_export_graph_encoder_dynamic_sizes_cuda():
    enc = _encoder(seed=6)
    program = enc.export(*_batch([5, 3], seed=7), backend=BACKEND)
    for i, sizes in enumerate(([9], [2, 8, 1, 4])):
        args = _batch(sizes, seed=8 + i)
        with torch.no_grad():
            want = enc.encode_batch(*args, backend=BACKEND)
        got, launches = _launches(lambda: program.module()(*args))
        assert launches is None or launches > 0
        assert got.shape == (len(sizes), 8) and torch.equal(got, want)
