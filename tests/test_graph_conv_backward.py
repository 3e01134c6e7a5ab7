"""Autograd of the fused graph-transformer layers (issue 39 item 4).

- gradcheck in float64 (the compiled backends run float64 in torch, through the same
  autograd node and composed backward as float32) of graph_transformer_pool and
  transformer_conv, over x, edge_attr and every layer tensor, on small odd graphs: nodes
  without in-edges, empty graphs, heads > 1, concat on/off, beta gate on/off, with/without
  edge features and LayerNorm + ReLU; and the same gradients equal the reference's autograd;
- float32: the fused forward (cpu kernels, intermediates kept) + composed backward against
  the reference's autograd gradients on fresh random inputs, including repeated edge rows
  (the grouped edge projection) and CSR input;
- torch.library.opcheck of both registered operators with inputs that require grad
  (test_autograd_registration and the AOT backward included), gradients through them, and a
  torch.compile(fullgraph=True) training step through the registered autograd;
- the CUDA plan's forward (kept intermediates) + the same backward, on a GPU or the emulator;
- GraphEncoder training goes through the fused layers (the reference layers are made to
  raise), with and without dropout, and its loss falls.
"""
import contextlib

import numpy as np
import pytest
import torch
from torch.library import opcheck

from conftest import GPU_DEVICE, cuda_kernels
from test_graph_conv import _gemm_backends

import rasfast
import rasfast.ops  # noqa: F401
from rasfast.models.graph_encoder import GraphEncoder
from rasfast.ops import cpu_gemm
from rasfast.ops import graph_conv as gc
from rasfast.ops.graph_conv import flat_layers
from rasfast.ops.graph_conv_params import ConvWeights, NormWeights
from rasfast.reference import graph_conv as ref

FIELDS = gc._LAYER_FIELDS


def _layer(g, din, heads, c, concat=True, beta=False, edge_dim=None, root=True, bias=True,
           norm=False, dtype=torch.float64):
    r = lambda *s: (torch.randn(*s, generator=g) * 0.5).to(dtype)  # noqa: E731
    hc = heads * c
    out = hc if concat else c
    w = ConvWeights(heads, c, concat, r(hc, din), r(hc) if bias else None, r(hc, din),
                    r(hc) if bias else None, r(hc, din), r(hc) if bias else None,
                    r(hc, edge_dim) if edge_dim else None, r(out, din) if root else None,
                    r(out) if root and bias else None, r(1, 3 * out) if beta else None)
    nw = NormWeights(1 + r(out), r(out)) if norm else None
    return w, nw


def _graph(g, sizes, deg, din, edge_dim, dtype=torch.float64, repeat_rows=0):
    """A batch of graphs with ~deg in-edges per node; some nodes get none."""
    gp = torch.tensor([0] + np.cumsum(sizes).tolist())
    src, dst = [], []
    for a, b in zip(gp[:-1].tolist(), gp[1:].tolist()):
        if b - a > 1:
            m = deg * (b - a)
            d = torch.randint(a, b - 1, (m,), generator=g)  # node b-1: no in-edges
            src.append(torch.randint(a, b, (m,), generator=g))
            dst.append(d)
    ei = (torch.stack([torch.cat(src), torch.cat(dst)]) if src
          else torch.zeros((2, 0), dtype=torch.int64))
    x = torch.randn(int(gp[-1]), din, generator=g).to(dtype)
    e = ei.shape[1]
    if repeat_rows and edge_dim:   # few distinct edge rows (RAS: predicate embeddings)
        table = torch.randn(repeat_rows, edge_dim, generator=g).to(dtype)
        ea = table[torch.randint(0, repeat_rows, (e,), generator=g)]
    else:
        ea = torch.randn(e, edge_dim, generator=g).to(dtype) if edge_dim else None
    return x, ei, ea if edge_dim else None, gp


def _specs(layers, ts):
    """Specs whose tensors are ``ts`` (12 per layer, None where absent)."""
    specs = []
    for i, (w, nw, relu) in enumerate(layers):
        t = ts[12 * i:12 * i + 12]
        specs.append((ConvWeights(w.heads, w.channels, w.concat, *t[:10]),
                      NormWeights(t[10], t[11], nw.eps) if nw is not None else None, relu))
    return specs


def _flat(layers):
    return [t for w, nw, _ in layers for t in gc._layer_tensors(w, nw)]


CONFIGS = [
    # heads, C, concat, beta, edge_dim, norm/relu between layers, layers
    dict(heads=2, c=3, concat=True, beta=False, edge_dim=3, norm=True, layers=2),
    dict(heads=3, c=2, concat=False, beta=True, edge_dim=None, norm=True, layers=2),
    dict(heads=1, c=4, concat=True, beta=True, edge_dim=2, norm=False, layers=1),
    dict(heads=2, c=2, concat=False, beta=False, edge_dim=5, norm=True, layers=3),
]


def _build(cfg, seed, din=5, dtype=torch.float64):
    g = torch.Generator().manual_seed(seed)
    layers, d = [], din
    for i in range(cfg["layers"]):
        inner = i < cfg["layers"] - 1
        w, nw = _layer(g, d, cfg["heads"], cfg["c"], cfg["concat"], cfg["beta"], cfg["edge_dim"],
                       norm=cfg["norm"] and inner, dtype=dtype)
        layers.append((w, nw, inner and cfg["norm"]))
        d = w.out_channels
    return g, layers


@pytest.mark.parametrize("cfg", CONFIGS)
@pytest.mark.parametrize("deg", [1, 3])   # E <= 2N and E > 2N (the cpu plan's two edge forms)
def test_gradcheck_pool_float64(cfg, deg):
    g, layers = _build(cfg, seed=deg + 10 * cfg["heads"])
    x, ei, ea, gp = _graph(g, [4, 0, 3, 1], deg, 5, cfg["edge_dim"])
    ts = _flat(layers)
    inputs = [t.clone().requires_grad_() if t is not None else None for t in [x, ea] + ts]
    idx = [i for i, t in enumerate(inputs) if t is not None]

    def fn(*vals):
        full = list(inputs)
        for i, v in zip(idx, vals):
            full[i] = v
        return rasfast.graph_transformer_pool(full[0], ei, full[1], gp,
                                              _specs(layers, full[2:]), backend="cpu")

    vals = [inputs[i] for i in idx]
    assert torch.autograd.gradcheck(fn, vals, eps=1e-6, atol=1e-6, rtol=1e-4)
    # and the gradients equal the reference's autograd (plain torch layers)
    out = fn(*vals)
    assert out.grad_fn is not None and "ConvFn" not in type(out.grad_fn).__name__  # graph mean
    want = ref.graph_transformer_pool(vals[0], ei, inputs[1], gp, _specs(layers, inputs[2:]))
    torch.testing.assert_close(out, want, rtol=1e-10, atol=1e-12)
    gy = torch.randn(out.shape, generator=g, dtype=out.dtype)
    got = torch.autograd.grad(out, vals, gy, allow_unused=True)
    exp = torch.autograd.grad(want, vals, gy, allow_unused=True)
    for a, b in zip(got, exp):
        a = torch.zeros_like(b) if a is None and b is not None else a
        if b is None:
            assert a is None or not a.abs().max() > 0
            continue
        torch.testing.assert_close(a, b, rtol=1e-8, atol=1e-10)


@pytest.mark.parametrize("cfg", CONFIGS[:3])
def test_gradcheck_conv_float64(cfg):
    g, layers = _build(dict(cfg, layers=1), seed=7)
    w, _, _ = layers[0]
    nw = _layer(g, 5, 1, w.out_channels, norm=True)[1] if cfg["norm"] else None
    x, ei, ea, _ = _graph(g, [7], 2, 5, cfg["edge_dim"])
    ts = gc._layer_tensors(w, nw)
    inputs = [t.clone().requires_grad_() if t is not None else None for t in [x, ea] + ts]
    idx = [i for i, t in enumerate(inputs) if t is not None]

    def fn(*vals):
        full = list(inputs)
        for i, v in zip(idx, vals):
            full[i] = v
        (sw, snw, _), = _specs([(w, nw, False)], full[2:])
        return rasfast.transformer_conv(full[0], ei, full[1], sw, norm=snw, relu=nw is not None,
                                        backend="cpu")

    vals = [inputs[i] for i in idx]
    assert "ConvFn" in type(fn(*vals).grad_fn).__name__   # our backward, not the reference's
    assert torch.autograd.gradcheck(fn, vals, eps=1e-6, atol=1e-6, rtol=1e-4)


def _grads(layers, x, ei, ea, gp, backend, seed, mode=None):
    """(output, gradients of x, edge_attr and every layer tensor) for a random output
    gradient; ``mode``: a dispatch mode the backward runs under."""
    ts = [t.detach().clone().requires_grad_() if t is not None else None for t in _flat(layers)]
    xg = x.clone().requires_grad_()
    eag = None if ea is None else ea.clone().requires_grad_()
    specs = _specs(layers, ts)
    if backend == "ref":
        out = ref.graph_transformer_pool(xg, ei, eag, gp, specs)
    else:
        out = rasfast.graph_transformer_pool(xg, ei, eag, gp, specs, backend=backend)
    gy = torch.randn(out.shape, generator=torch.Generator().manual_seed(seed)).to(out.dtype)
    leaves = [t for t in [xg, eag] + ts if t is not None]
    with mode if mode is not None else contextlib.nullcontext():
        return out, torch.autograd.grad(out, leaves, gy, allow_unused=True)


@pytest.fixture(params=_gemm_backends())
def gemm(request):
    """The CPU GEMM of the forward's projections and the backward's products (both tested:
    oneDNN is the default on AVX-512 CPUs, BLAS elsewhere)."""
    cpu_gemm.set_backend(request.param)
    yield request.param
    cpu_gemm.set_backend(None)


@pytest.mark.parametrize("seed", range(4))
def test_float32_grads_match_reference(seed, gemm):
    cfg = CONFIGS[seed % len(CONFIGS)]
    g, layers = _build(cfg, seed=100 + seed, din=12, dtype=torch.float32)
    sizes = [int(v) for v in torch.randint(0, 30, (5,), generator=g)]
    x, ei, ea, gp = _graph(g, sizes, 1 + seed % 4, 12, cfg["edge_dim"], torch.float32,
                           repeat_rows=6 if seed % 2 else 0)
    out, got = _grads(layers, x, ei, ea, gp, "cpu", seed)
    want, exp = _grads(layers, x, ei, ea, gp, "ref", seed)
    torch.testing.assert_close(out, want, rtol=1e-4, atol=1e-5)
    scale = max(float(b.abs().max()) for b in exp if b is not None)
    for a, b in zip(got, exp):
        if b is None:
            continue
        a = torch.zeros_like(b) if a is None else a
        # key biases have a zero true gradient (softmax shift invariance): rounding only
        torch.testing.assert_close(a, b, rtol=2e-3, atol=2e-4 * max(scale, 1.0))


def test_grouped_edge_rows_are_used_and_exact():
    """Repeated edge rows (RAS's predicates): the edge projection and its gradient run on the
    distinct rows, and the gradients still match the reference."""
    g, layers = _build(CONFIGS[0], seed=3, din=8, dtype=torch.float32)
    x, ei, ea, gp = _graph(g, [40, 33], 3, 8, 3, torch.float32, repeat_rows=5)
    graph = gc._EdgeGraph(gc.as_csr(ei, x.shape[0], x.device), ea, x.shape[0])
    assert graph.groups is not None and graph.groups.distinct.shape[0] == 5
    _, got = _grads(layers, x, ei, ea, gp, "cpu", 0)
    _, exp = _grads(layers, x, ei, ea, gp, "ref", 0)
    for a, b in zip(got, exp):
        if b is not None and a is not None:
            torch.testing.assert_close(a, b, rtol=2e-3, atol=1e-4)


def test_csr_input_and_weights_only_grad():
    g, layers = _build(CONFIGS[1], seed=5, din=6, dtype=torch.float32)
    x, ei, _, gp = _graph(g, [9, 5], 2, 6, None, torch.float32)
    order = torch.sort(ei[1], stable=True).indices
    indptr = torch.searchsorted(ei[1][order], torch.arange(x.shape[0] + 1))
    ts = [t.clone().requires_grad_() if t is not None else None for t in _flat(layers)]
    specs = _specs(layers, ts)
    out = rasfast.graph_transformer_pool(x, (indptr, ei[0][order]), None, gp, specs, backend="cpu")
    got = torch.autograd.grad(out.sum(), [t for t in ts if t is not None])
    want = ref.graph_transformer_pool(x, ei, None, gp, specs)
    exp = torch.autograd.grad(want.sum(), [t for t in ts if t is not None])
    for a, b in zip(got, exp):
        torch.testing.assert_close(a, b, rtol=2e-3, atol=1e-4)


def _encoder(din=6, hidden=8, heads=2, layers=2, edge_dim=3, seed=0, dropout=0.0):
    torch.manual_seed(seed)
    return GraphEncoder(in_channels=din, hidden=hidden, heads=heads, num_layers=layers,
                        edge_dim=edge_dim, llm_hidden=None, dropout=dropout)


@pytest.mark.parametrize("sizes", [[3], [4, 0, 5], [1, 2, 7, 1]])
def test_opcheck_with_autograd(sizes):
    g = torch.Generator().manual_seed(len(sizes))
    enc = _encoder(seed=len(sizes))
    x, ei, ea, gp = _graph(g, sizes, 2, 6, 3, torch.float32)
    x.requires_grad_()
    args = enc._layer_args(detach=False)
    opcheck(torch.ops.rasfast.graph_transformer_pool.default, (x, ei, None, ea, gp, *args, "cpu"))
    conv_args = flat_layers(enc._live_specs(detach=False)[:1])
    opcheck(torch.ops.rasfast.transformer_conv.default, (x, ei, None, ea, *conv_args, "cpu"))


def test_registered_operator_gradients_match_eager():
    g = torch.Generator().manual_seed(0)
    enc = _encoder(layers=3)
    x, ei, ea, gp = _graph(g, [6, 5], 3, 6, 3, torch.float32)
    x.requires_grad_()
    params = [x] + list(enc.parameters())
    out = torch.ops.rasfast.graph_transformer_pool(x, ei, None, ea, gp,
                                                   *enc._layer_args(detach=False), "cpu")
    got = torch.autograd.grad(out.square().sum(), params)
    enc.train()
    want = enc.encode_batch(x, ei, ea, gp)
    exp = torch.autograd.grad(want.square().sum(), params)
    torch.testing.assert_close(out, want)
    for a, b in zip(got, exp):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-6)


def _train(enc, batch, steps, lr=0.05):
    x, ei, ea, gp = batch
    target = torch.randn(gp.numel() - 1, enc.hidden, generator=torch.Generator().manual_seed(1))
    opt = torch.optim.Adam(enc.parameters(), lr=lr)
    losses = []
    enc.train()
    for _ in range(steps):
        opt.zero_grad()
        loss = (enc.encode_batch(x, ei, ea, gp) - target).square().mean()
        loss.backward()
        opt.step()
        losses.append(float(loss.detach()))
    return losses


@pytest.mark.parametrize("dropout", [0.0, 0.2])
def test_graph_encoder_trains_through_fused_layers(monkeypatch, dropout):
    g = torch.Generator().manual_seed(2)
    batch = _graph(g, [7, 5, 9], 3, 6, 3, torch.float32)
    enc = _encoder(layers=3, dropout=dropout)
    calls = []
    real = gc._ConvFn.forward

    def counting(ctx, *a):
        calls.append(a[1])
        return real(ctx, *a)

    def no_reference(*a, **k):
        raise AssertionError("training ran the reference layers")

    monkeypatch.setattr(gc._ConvFn, "forward", staticmethod(counting))
    monkeypatch.setattr(ref, "transformer_conv", no_reference)
    losses = _train(enc, batch, 15)
    assert calls and set(calls) == {"cpu"} and len(calls) == 3 * 15
    assert all(p.grad is not None and p.grad.abs().sum() > 0
               for n, p in enc.named_parameters() if not n.endswith("lin_key.bias"))
    if dropout == 0:
        assert losses[-1] < 0.7 * losses[0], losses
    else:
        assert min(losses[-3:]) < losses[0], losses


def test_graph_encoder_training_matches_reference_step():
    """One optimizer step through the fused layers equals one through the torch reference."""
    g = torch.Generator().manual_seed(4)
    batch = _graph(g, [8, 6], 3, 6, 3, torch.float32)
    a, b = _encoder(layers=3, seed=9), _encoder(layers=3, seed=9)
    x, ei, ea, gp = batch
    for enc, backend in ((a, "cpu"), (b, "torch")):
        enc.train()
        enc.encode_batch(x, ei, ea, gp, backend=backend).square().sum().backward()
    for (n, p), q in zip(a.named_parameters(), b.parameters()):
        torch.testing.assert_close(p.grad, q.grad, rtol=2e-3, atol=1e-5, msg=n)


def test_bfloat16_training_through_the_torch_reference_reaches_every_parameter():
    """A bfloat16 model trained through backend "torch" (the reference): every parameter the
    fused layers give a gradient gets one, the LayerNorms' included, close to theirs. The
    reference's LayerNorm parameters were cast to float32 for the call, a copy detached from
    the model's (no gradient), and on CUDA layer_norm refused the mixed dtypes (the seventh
    GPU run's bfloat16 training step)."""
    g = torch.Generator().manual_seed(4)
    x, ei, ea, gp = _graph(g, [8, 6], 3, 6, 3, torch.float32)
    a, b = _encoder(layers=3, seed=9).bfloat16(), _encoder(layers=3, seed=9).bfloat16()
    for enc, backend in ((a, "cpu"), (b, "torch")):
        enc.train()
        enc.encode_batch(x.bfloat16(), ei, ea.bfloat16(), gp,
                         backend=backend).float().square().sum().backward()
    norms = 0
    for (n, p), q in zip(a.named_parameters(), b.parameters()):
        if p.grad is None:
            continue
        assert q.grad is not None, n
        assert q.grad.dtype == torch.bfloat16, n
        if ".weight" in n and p.dim() == 1:  # the LayerNorms' scales
            norms += 1
            rel = float((q.grad.float() - p.grad.float()).norm() / p.grad.float().norm().clamp(min=1e-12))
            assert rel < 0.05, (n, rel)
    assert norms >= 2


@cuda_kernels
def test_cuda_backend_grads_match_reference():
    """The CUDA plan keeps its projections/attention output/edge rows for the same backward
    (RASFAST_CUDA_EMU=1: the emulator, on CPU tensors)."""
    g = torch.Generator().manual_seed(6)
    batch = [t.to(GPU_DEVICE) for t in _graph(g, [9, 7], 3, 6, 3, torch.float32)]
    a, b = _encoder(layers=3, seed=3).to(GPU_DEVICE), _encoder(layers=3, seed=3).to(GPU_DEVICE)
    for enc, backend in ((a, "cuda"), (b, "torch")):
        enc.train()
        enc.encode_batch(*batch, backend=backend).square().sum().backward()
    for (n, p), q in zip(a.named_parameters(), b.parameters()):
        torch.testing.assert_close(p.grad, q.grad, rtol=2e-3, atol=1e-5, msg=n)


def test_dropout_training_matches_reference_with_same_masks():
    """Dropout between the fused layers: with the same RNG state the fused and the reference
    training paths draw the same masks, so their gradients agree."""
    g = torch.Generator().manual_seed(8)
    x, ei, ea, gp = _graph(g, [8, 6, 5], 3, 6, 3, torch.float32)
    a = _encoder(layers=3, seed=11, dropout=0.3)
    b = _encoder(layers=3, seed=11, dropout=0.3)
    outs = []
    for enc, backend in ((a, "cpu"), (b, "torch")):
        enc.train()
        torch.manual_seed(123)
        out = enc.encode_batch(x, ei, ea, gp, backend=backend)
        out.square().sum().backward()
        outs.append(out.detach())
    torch.testing.assert_close(outs[0], outs[1], rtol=1e-4, atol=1e-5)
    torch.manual_seed(124)   # another mask: another output (dropout is on)
    assert not torch.allclose(a.encode_batch(x, ei, ea, gp).detach(), outs[0])
    for (n, p), q in zip(a.named_parameters(), b.parameters()):
        torch.testing.assert_close(p.grad, q.grad, rtol=2e-3, atol=1e-5, msg=n)


def test_compiled_training_step_uses_registered_autograd():
    """torch.compile(fullgraph=True) of a GraphEncoder training loss: one
    rasfast::graph_transformer_pool operator whose registered backward
    (rasfast::graph_conv_backward) gives the eager gradients."""
    g = torch.Generator().manual_seed(12)
    x, ei, ea, gp = _graph(g, [6, 5], 3, 6, 3, torch.float32)
    enc = _encoder(layers=2, seed=4).train()

    def loss_fn(x, ei, ea, gp):
        return enc.encode_batch(x, ei, ea, gp).square().sum()

    torch.compile(loss_fn, fullgraph=True, backend="aot_eager")(x, ei, ea, gp).backward()
    got = [p.grad.clone() for p in enc.parameters()]
    enc.zero_grad()
    loss_fn(x, ei, ea, gp).backward()
    for (n, p), a in zip(enc.named_parameters(), got):
        torch.testing.assert_close(a, p.grad, rtol=1e-4, atol=1e-6, msg=n)


def test_compiled_training_step_dynamic_sizes_one_graph():
    """A training loss compiled with dynamic sizes: other node, edge and graph counts reuse
    the one graph (no size guard from rasfast's layer) and give the eager gradients."""
    from torch._dynamo.testing import CompileCounterWithBackend
    g = torch.Generator().manual_seed(13)
    enc = _encoder(layers=2, seed=5, edge_dim=5).train()

    def loss_fn(x, ei, ea, gp):
        return enc.encode_batch(x, ei, ea, gp).square().sum()

    counter = CompileCounterWithBackend("aot_eager")
    torch._dynamo.reset()
    compiled = torch.compile(loss_fn, fullgraph=True, backend=counter, dynamic=True)
    frames = []
    for sizes in ([6, 5], [9, 2, 4, 8], [3, 13, 7, 4, 2]):
        x, ei, ea, gp = _graph(g, sizes, 3, 6, 5, torch.float32)
        enc.zero_grad()
        compiled(x, ei, ea, gp).backward()
        got = [p.grad.clone() for p in enc.parameters()]
        enc.zero_grad()
        loss_fn(x, ei, ea, gp).backward()
        for (n, p), a in zip(enc.named_parameters(), got):
            torch.testing.assert_close(a, p.grad, rtol=1e-4, atol=1e-6, msg=n)
        frames.append(counter.frame_count)
    assert frames[0] >= 1 and frames == frames[:1] * 3, frames  # compiled once, then reused


class _MatmulDtypes(torch.utils._python_dispatch.TorchDispatchMode):
    """Records (rows, operand dtypes) of every matrix product."""

    def __init__(self):
        super().__init__()
        self.seen = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = func.overloadpacket.__name__
        if name in ("mm", "addmm", "bmm", "matmul"):
            mats = [a for a in args if isinstance(a, torch.Tensor) and a.dim() >= 2]
            self.seen.append((max(m.shape[-2] for m in mats), {m.dtype for m in mats}))
        return func(*args, **(kwargs or {}))


def _bf16_grads(layers, x, ei, ea, gp, backend):
    lb = [(ConvWeights(w.heads, w.channels, w.concat,
                       *[None if t is None else t.bfloat16() for t in gc._layer_tensors(w, None)[:10]]),
           None if nw is None else NormWeights(nw.weight.bfloat16(), nw.bias.bfloat16(), nw.eps), r)
          for w, nw, r in layers]
    mode = _MatmulDtypes()
    _, got = _grads(lb, x.bfloat16(), ei, None if ea is None else ea.bfloat16(), gp, backend, 0, mode)
    return got, mode.seen


@pytest.mark.parametrize("cfg", CONFIGS[:1] + CONFIGS[3:])
def test_bfloat16_backward_gemms_run_in_bfloat16(cfg):
    """A bfloat16 step's backward GEMMs take bfloat16 operands, as PyG's autograd does (the
    float32 GEMMs made the H100 bf16 training step 2.6x PyG's time), and its gradients are
    as close to the float32 step's as the reference layers' bfloat16 autograd is."""
    g, layers = _build(cfg, seed=11, din=24, dtype=torch.float32)
    x, ei, ea, gp = _graph(g, [40, 17, 33], 3, 24, cfg["edge_dim"], torch.float32)
    _, want = _grads(layers, x, ei, ea, gp, "cpu", 0)
    got, seen = _bf16_grads(layers, x, ei, ea, gp, "cpu")
    base, _ = _bf16_grads(layers, x, ei, ea, gp, "ref")
    big = [d for rows, d in seen if rows >= min(x.shape[0], ei.shape[1])]
    assert big, "no node- or edge-sized GEMM recorded in the backward"
    assert all(d == {torch.bfloat16} for d in big), seen
    rel = lambda a, b: float((a.float() - b).norm() / b.norm())  # noqa: E731
    ours, refs = [], []
    for a, r, b in zip(got, base, want):
        if b is None or float(b.norm()) < 1e-3 * float(want[0].norm()):
            continue   # absent, or a key bias (its true gradient is 0: rounding only)
        ours.append(rel(a, b))
        refs.append(rel(r, b))
    # the deep config (3 layers of 2 channels) is ill-conditioned in bfloat16: the reference's
    # own errors reach 100x; the shallow one is not, and each gradient is held on its own
    assert np.mean(ours) <= 1.5 * np.mean(refs) + 0.01, (ours, refs)
    if cfg["layers"] <= 2:
        assert max(ours) < 0.06, ours


# ------------------------------------------------------------ the compiled attention backward
def _attention_case(seed, n, e, h, c, edge, grouped):
    """nodes [n, 3hc + 5], d_agg [n, h, c], an _EdgeGraph over e random edges (self loops,
    repeated edges, nodes with no in- or out-edges), e_rows when ``edge``."""
    g = torch.Generator().manual_seed(seed)
    hc = h * c
    src = torch.randint(0, max(n - 1, 1), (e,), generator=g)      # node n-1: no out-edges
    dst = torch.randint(1, n, (e,), generator=g) if n > 1 else torch.zeros(e, dtype=torch.int64)
    ei = torch.stack([src, dst])                                    # node 0: no in-edges
    ea = None
    if edge:
        ea = (torch.randn(4, 6, generator=g)[torch.randint(0, 4, (e,), generator=g)] if grouped
              else torch.randn(e, 6, generator=g))
    graph = gc._EdgeGraph(gc.as_csr(ei, n, torch.device("cpu")), ea, n)
    nodes = torch.randn(n, 3 * hc + 5, generator=g)
    d_agg = torch.randn(n, h, c, generator=g)
    d_skip = torch.randn(n, 5, generator=g)
    w_edge = torch.randn(hc, 6, generator=g) * 0.3 if edge else None
    return nodes, d_agg, d_skip, graph, ea, w_edge


@pytest.mark.parametrize("n,e,h,c", [(1, 0, 1, 1), (2, 3, 1, 4), (7, 20, 3, 5), (40, 160, 2, 16), (30, 70, 1, 33),
                                     (9, 0, 2, 3)])
@pytest.mark.parametrize("edge,grouped", [(False, False), (True, False), (True, True)])
def test_compiled_attention_backward_equals_the_torch_composition(n, e, h, c, edge, grouped):
    """csrc/graph_conv graph_conv_attend_backward against the composed torch backward (float32;
    the float64 gradchecks above run the torch one), under every instruction set this CPU
    runs."""
    nodes, d_agg, d_skip, graph, ea, w_edge = _attention_case(n * 31 + e, n, e, h, c, edge, grouped)
    if edge and grouped and e >= 64:
        assert graph.groups is not None  # the distinct-rows path is the one tested
    want = gc._attention_backward_torch(nodes, d_agg, d_skip, graph, ea, w_edge, h, c, 5, None,
                                        torch.float32, torch.float32)
    mod = rasfast.dispatch.cpu_module()
    before = mod.graph_conv_simd_level()
    try:
        for isa in mod.graph_conv_simd_variants():
            mod.graph_conv_set_simd(isa)
            got = gc._attention_backward_cpu(nodes, d_agg, d_skip, graph, ea, w_edge, h, c, 5,
                                             None, torch.float32)
            torch.testing.assert_close(got[0], want[0], rtol=1e-4, atol=1e-5)
            if edge:
                torch.testing.assert_close(got[1], want[1], rtol=1e-4, atol=1e-5)
            else:
                assert got[1] is None and want[1] is None
    finally:
        mod.graph_conv_set_simd(before)


@cuda_kernels
@pytest.mark.parametrize("n,e,h,c", [(1, 0, 1, 1), (2, 3, 1, 4), (7, 20, 3, 5), (40, 160, 2, 16), (30, 70, 1, 33),
                                     (9, 0, 2, 3), (6, 25, 2, 130)])
@pytest.mark.parametrize("edge,grouped", [(False, False), (True, False), (True, True)])
def test_cuda_attention_backward_equals_the_torch_composition(n, e, h, c, edge, grouped):
    """csrc/graph_conv/graph_conv.cu attend_back_* against the composed torch backward (float32;
    nodes without in- or out-edges, repeated edges, self loops, C across the lane counts)."""
    from rasfast.ops.graph_conv_gpu import attention_backward
    nodes, d_agg, d_skip, graph, ea, w_edge = _attention_case(n * 31 + e, n, e, h, c, edge, grouped)
    want = gc._attention_backward_torch(nodes, d_agg, d_skip, graph, ea, w_edge, h, c, 5, None,
                                        torch.float32, torch.float32)
    dev = GPU_DEVICE
    rptr, rpos = graph.reverse()
    e_rows = graph.rows(ea) @ w_edge.t() if edge else None
    mv = lambda t: None if t is None else t.to(dev)  # noqa: E731
    csr = type(graph.csr)(*[t.to(dev) for t in graph.csr])
    got = attention_backward(nodes.to(dev), d_agg.to(dev), d_skip.to(dev), csr, graph.src.to(dev),
                             graph.dst.to(dev), mv(graph.row_of_edge), rptr.to(dev), rpos.to(dev),
                             mv(e_rows), h, c, 5)
    torch.testing.assert_close(got[0].cpu(), want[0], rtol=1e-4, atol=1e-5)
    if edge:
        torch.testing.assert_close(got[1].cpu(), want[1], rtol=1e-4, atol=1e-5)
    else:
        assert got[1] is None and want[1] is None


@cuda_kernels
def test_cuda_training_runs_the_cuda_attention_backward(monkeypatch):
    """A float32 step with backend cuda takes the CUDA attention backward (the torch and the
    CPU ones are made to raise) and gives the reference's gradients."""
    g = torch.Generator().manual_seed(6)
    batch = [t.to(GPU_DEVICE) for t in _graph(g, [9, 7, 4], 3, 6, 3, torch.float32)]
    a, b = _encoder(layers=3, seed=3).to(GPU_DEVICE), _encoder(layers=3, seed=3).to(GPU_DEVICE)
    b.train()
    b.encode_batch(*batch, backend="torch").square().sum().backward()

    def other_path(*args, **kwargs):
        raise AssertionError("an attention backward other than the CUDA one ran")
    monkeypatch.setattr(gc, "_attention_backward_torch", other_path)
    monkeypatch.setattr(gc, "_attention_backward_cpu", other_path)
    a.train()
    a.encode_batch(*batch, backend="cuda").square().sum().backward()
    for (name, p), q in zip(a.named_parameters(), b.parameters()):
        torch.testing.assert_close(p.grad, q.grad, rtol=2e-3, atol=1e-5, msg=name)


def test_cpu_float32_training_runs_the_compiled_attention_backward(monkeypatch):
    """A float32 step on the CPU takes the compiled backward (the torch composition is made to
    raise), float64 takes the torch one, and the compiled one checks the indices it follows."""
    g, layers = _build(CONFIGS[0], seed=11, din=6, dtype=torch.float32)
    x, ei, ea, gp = _graph(g, [9, 12], 2, 6, CONFIGS[0]["edge_dim"], torch.float32)
    want = _grads(layers, x, ei, ea, gp, "ref", 0)[1]

    def torch_path(*a, **k):
        raise AssertionError("the torch attention backward ran")
    monkeypatch.setattr(gc, "_attention_backward_torch", torch_path)
    got = _grads(layers, x, ei, ea, gp, "cpu", 0)[1]
    for a, b in zip(got, want):
        if b is not None and a is not None:
            torch.testing.assert_close(a, b, rtol=2e-3, atol=1e-4)
    assert not gc._fused_attention_backward(x.double(), torch.float64,
                                            gc._EdgeGraph(gc.as_csr(ei, x.shape[0], x.device), ea,
                                                          x.shape[0]))
    nodes, d_agg, d_skip, graph, ea2, w_edge = _attention_case(5, 6, 12, 2, 3, True, False)
    rptr, rpos = graph.reverse()
    bad = rpos.clone()
    bad[0] = 12  # a CSR position past E
    graph._reverse = (rptr, bad)
    with pytest.raises(Exception, match="rpos"):
        gc._attention_backward_cpu(nodes, d_agg, d_skip, graph, ea2, w_edge, 2, 3, 5, None,
                                   torch.float32)


def test_compiled_attention_backward_writes_every_element_of_its_reused_outputs():
    """d_nodes and de are the thread's reused scratch (rasfast/ops/host_scratch.py): poisoned
    with NaN, larger than the call and left by a call of another size, they must still come
    back equal to the torch composition (every element written, nothing stale read)."""
    from rasfast.ops import host_scratch
    host_scratch.buffer("attention_backward.d_nodes", (10_000,)).fill_(float("nan"))
    host_scratch.buffer("attention_backward.de", (10_000,)).fill_(float("nan"))
    for n, e, edge in ((40, 160, True), (7, 20, True), (30, 70, False), (9, 31, True)):
        nodes, d_agg, d_skip, graph, ea, w_edge = _attention_case(n + e, n, e, 2, 4, edge, False)
        want = gc._attention_backward_torch(nodes, d_agg, d_skip, graph, ea, w_edge, 2, 4, 5,
                                            None, torch.float32, torch.float32)
        got = gc._attention_backward_cpu(nodes, d_agg, d_skip, graph, ea, w_edge, 2, 4, 5, None,
                                         torch.float32)
        torch.testing.assert_close(got[0], want[0], rtol=1e-4, atol=1e-5)
        if edge:
            torch.testing.assert_close(got[1], want[1], rtol=1e-4, atol=1e-5)
        for t in got:  # poison again: the next call must not depend on this one's values
            if t is not None:
                t.fill_(float("nan"))


def test_training_steps_of_varying_batch_sizes_share_scratch_without_leaking_state():
    """Batches of different sizes in turn (as in training) give each batch's own gradients:
    the reused backward buffers carry nothing from one step to the next."""
    g, layers = _build(CONFIGS[0], seed=21, din=6, dtype=torch.float32)
    batches = [_graph(g, sizes, 3, 6, CONFIGS[0]["edge_dim"], torch.float32)
               for sizes in ([20, 30, 25], [8, 5], [40, 40, 10, 12])]
    first = [_grads(layers, *b, "cpu", 0)[1] for b in batches]
    again = [_grads(layers, *b, "cpu", 0)[1] for b in reversed(batches)][::-1]
    for a_list, b_list in zip(first, again):
        for a, b in zip(a_list, b_list):
            if a is not None:
                assert torch.equal(a, b)
