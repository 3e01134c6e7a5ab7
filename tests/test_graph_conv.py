"""transformer_conv / graph_transformer_pool against PyG's TransformerConv + global_mean_pool."""
import numpy as np
import pytest
import torch
from conftest import GPU_DEVICE, cuda_kernels, gpu

import rasfast
from backends_util import TRITON_CPU, TRITON_CPU_SKIP, cpu_backends, gpu_backends

tg = pytest.importorskip("torch_geometric")
from torch_geometric.nn import TransformerConv, global_mean_pool  # noqa: E402

BACKENDS = ["torch", "cpu"]


def _conv(din, c, heads, concat=True, beta=False, edge_dim=None, root_weight=True, seed=0):
    torch.manual_seed(seed)
    conv = TransformerConv(din, c, heads=heads, concat=concat, beta=beta, edge_dim=edge_dim,
                           root_weight=root_weight).eval()
    with torch.no_grad():  # non-zero biases so every term is exercised
        for p in conv.parameters():
            if p.dim() == 1:
                p.normal_(0, 0.1)
    return conv


def _graph(n, e, din, edge_dim, seed=1, hub=None):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, din, generator=g)
    ei = torch.randint(0, max(n, 1), (2, e), generator=g) if n else torch.zeros((2, 0), dtype=torch.long)
    if hub is not None:
        ei[1, :] = hub
    ea = torch.randn(e, edge_dim, generator=g) if edge_dim else None
    return x, ei, ea


def _close(out, ref, rel):
    out, ref = torch.as_tensor(out).float(), ref.float()
    scale = max(ref.abs().max().item(), 1e-6) if ref.numel() else 1.0
    torch.testing.assert_close(out, ref, rtol=rel, atol=rel * scale)


def _pyg(conv, x, ei, ea):
    with torch.no_grad():
        return conv(x, ei, ea)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("heads,concat,beta,edge_dim", [
    (1, True, False, None), (4, True, False, 12), (8, True, True, 12), (4, False, False, 12),
    (4, False, True, None), (8, False, True, 20)])
@pytest.mark.parametrize("n,e", [(13, 9), (13, 60)])  # few edges: direct form; many: factored
def test_layer_matches_pyg(backend, heads, concat, beta, edge_dim, n, e):
    conv = _conv(24, 6, heads, concat, beta, edge_dim)
    x, ei, ea = _graph(n, e, 24, edge_dim)
    ref = _pyg(conv, x, ei, ea)
    out = rasfast.transformer_conv(x, ei, ea, conv, backend=backend)
    _close(out, ref, 1e-4)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("case", ["empty", "no_edges", "isolated", "self_loops", "multi_edges", "hub"])
def test_degenerate_graphs(backend, case):
    conv = _conv(16, 8, 4, edge_dim=10)
    n, e = {"empty": (0, 0), "no_edges": (7, 0)}.get(case, (9, 30))
    x, ei, ea = _graph(n, e, 16, 10, hub=0 if case == "hub" else None)
    if case == "hub":
        x, ei, ea = _graph(40, 400, 16, 10, hub=3)  # one node with 400 incoming edges
        ei[0] = torch.arange(400) % 40
    if case == "isolated":
        ei = ei % 4  # nodes 4..8 have no edges at all
    if case == "self_loops":
        ei[0, ::2] = ei[1, ::2]
    if case == "multi_edges":
        ei = torch.cat([ei, ei[:, :10], ei[:, :10]], 1)
        ea = torch.cat([ea, ea[:10] * 2, ea[:10]], 0)
    ref = _pyg(conv, x, ei, ea)
    out = rasfast.transformer_conv(x, ei, ea, conv, backend=backend)
    assert out.shape == ref.shape
    _close(out, ref, 1e-4)


def test_hub_with_large_logits_is_stable():
    """Online softmax over hundreds of edges with logits spread over a wide range."""
    conv = _conv(16, 8, 2, edge_dim=4)
    x, ei, ea = _graph(50, 500, 16, 4, hub=7)
    x = x * 30
    ref = _pyg(conv, x, ei, ea)
    assert torch.isfinite(ref).all()
    _close(rasfast.transformer_conv(x, ei, ea, conv, backend="cpu"), ref, 1e-4)


@pytest.mark.parametrize("dtype,rel", [(torch.float16, 5e-3), (torch.bfloat16, 1e-2)])
@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("e", [10, 50])
def test_half_precision(dtype, rel, backend, e):
    conv = _conv(32, 8, 4, beta=True, edge_dim=16)
    x, ei, ea = _graph(17, e, 32, 16)
    x, ea = x.to(dtype), ea.to(dtype)
    conv16 = conv.to(dtype)
    # oracle: PyG in float32 on the very same (rounded) inputs and weights
    ref = _pyg(_conv(32, 8, 4, beta=True, edge_dim=16).to(dtype).float(), x.float(), ei, ea.float())
    out = rasfast.transformer_conv(x, ei, ea, conv16, backend=backend)
    assert out.dtype == dtype
    _close(out, ref, rel * 3 if backend == "torch" else rel)


def test_root_weight_off_and_layer_norm_epilogue():
    conv = _conv(16, 4, 4, edge_dim=6, root_weight=False)
    x, ei, ea = _graph(11, 40, 16, 6)
    ln = torch.nn.LayerNorm(16)
    with torch.no_grad():
        ln.weight.normal_()
        ln.bias.normal_()
    ref = torch.relu(ln(_pyg(conv, x, ei, ea))).detach()
    for be in BACKENDS:
        _close(rasfast.transformer_conv(x, ei, ea, conv, norm=ln, relu=True, backend=be), ref, 1e-4)


def test_csr_input_and_numpy_kind():
    conv = _conv(16, 4, 2, edge_dim=6)
    x, ei, ea = _graph(10, 35, 16, 6)
    ref = _pyg(conv, x, ei, ea)
    perm = torch.argsort(ei[1], stable=True)
    indptr = torch.cat([torch.zeros(1, dtype=torch.long), torch.bincount(ei[1], minlength=10).cumsum(0)])
    out = rasfast.transformer_conv(x, (indptr, ei[0, perm]), ea[perm], conv, backend="cpu")
    _close(out, ref, 1e-4)
    out_np = rasfast.transformer_conv(x.numpy(), ei.numpy(), ea.numpy(), conv)
    assert isinstance(out_np, np.ndarray)
    _close(torch.from_numpy(out_np), ref, 1e-4)


def test_state_dict_weights():
    conv = _conv(16, 4, 4, edge_dim=6, beta=True)
    x, ei, ea = _graph(10, 35, 16, 6)
    out = rasfast.transformer_conv(x, ei, ea, conv.state_dict(), heads=4)
    _close(out, _pyg(conv, x, ei, ea), 1e-4)


def _pyg_stack(convs, norms, x, ei, ea, ptr):
    with torch.no_grad():
        h = x
        for i, c in enumerate(convs):
            h = c(h, ei, ea)
            if i < len(norms):
                h = torch.relu(norms[i](h))
        batch = torch.repeat_interleave(torch.arange(ptr.numel() - 1), ptr.diff())
        return global_mean_pool(h, batch, size=ptr.numel() - 1)


def _batch(sizes, edges_per_node, din, edge_dim, seed=3):
    g = torch.Generator().manual_seed(seed)
    ptr = torch.tensor([0] + list(np.cumsum(sizes)), dtype=torch.long)
    src, dst = [], []
    for k, s in enumerate(sizes):
        if s:
            m = edges_per_node * s
            src.append(torch.randint(0, s, (m,), generator=g) + ptr[k])
            dst.append(torch.randint(0, s, (m,), generator=g) + ptr[k])
    ei = torch.stack([torch.cat(src), torch.cat(dst)])
    x = torch.randn(int(ptr[-1]), din, generator=g)
    ea = torch.randn(ei.shape[1], edge_dim, generator=g) if edge_dim else None
    return x, ei, ea, ptr


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("edges_per_node,edge_dim,beta_last", [(4, 12, False), (1, 12, False),
                                                               (4, None, False), (4, 12, True)])
def test_pool_matches_pyg_stack(backend, edges_per_node, edge_dim, beta_last):
    convs = [_conv(24, 4, 8, edge_dim=edge_dim, seed=s) for s in range(2)]
    convs.append(_conv(32, 4, 8, edge_dim=edge_dim, beta=beta_last, seed=2))
    convs[0] = _conv(24, 4, 8, edge_dim=edge_dim, seed=0)
    convs[1] = _conv(32, 4, 8, edge_dim=edge_dim, seed=1)
    norms = [torch.nn.LayerNorm(32) for _ in range(2)]
    x, ei, ea, ptr = _batch([5, 0, 9, 1, 13], edges_per_node, 24, edge_dim)
    ref = _pyg_stack(convs, norms, x, ei, ea, ptr)
    layers = [(convs[0], norms[0]), (convs[1], norms[1]), convs[2]]
    out = rasfast.graph_transformer_pool(x, ei, ea, ptr, layers, backend=backend)
    assert out.shape == (5, 32)
    assert torch.all(out[1] == 0)  # empty graph pools to zeros, as global_mean_pool
    _close(out, ref, 1e-4)


def test_pool_all_graphs_empty():
    conv = _conv(8, 4, 2, edge_dim=3)
    x, ei, ea = torch.zeros(0, 8), torch.zeros(2, 0, dtype=torch.long), torch.zeros(0, 3)
    out = rasfast.graph_transformer_pool(x, ei, ea, torch.tensor([0, 0, 0]), [conv])
    assert out.shape == (2, 8) and torch.all(out == 0)


@pytest.mark.triton
def test_triton_tiny():
    """Triton (interpreted without a GPU): a layer and a pooled stack on tiny graphs."""
    if "triton" not in cpu_backends():
        pytest.skip(TRITON_CPU_SKIP)
    conv = _conv(8, 3, 2, beta=True, edge_dim=4)
    x, ei, ea = _graph(6, 12, 8, 4)
    ei[:, 0] = 5  # self loop
    _close(rasfast.transformer_conv(x, ei, ea, conv, backend="triton"), _pyg(conv, x, ei, ea), 1e-4)
    convs = [_conv(8, 4, 2, edge_dim=4, seed=s) for s in range(2)]
    norms = [torch.nn.LayerNorm(8)]
    x, ei, ea, ptr = _batch([3, 0, 4], 2, 8, 4)
    out = rasfast.graph_transformer_pool(x, ei, ea, ptr, [(convs[0], norms[0]), convs[1]], backend="triton")
    _close(out, _pyg_stack(convs, norms, x, ei, ea, ptr), 1e-4)


# ---- bad input ---------------------------------------------------------------------------

def _ok():
    conv = _conv(8, 4, 2, edge_dim=3)
    x, ei, ea = _graph(5, 7, 8, 3)
    return conv, x, ei, ea


@pytest.mark.parametrize("mutate,exc,msg", [
    (lambda a: a.update(x=a["x"].int()), TypeError, "x: unsupported dtype"),
    # float64 is accepted (gradcheck; computed in torch), but must match edge_attr's dtype
    (lambda a: a.update(x=a["x"].double()), TypeError, "must share one dtype"),
    (lambda a: a.update(x=a["x"].numpy().astype(np.float64)), TypeError, "x: float64"),
    (lambda a: a.update(x=a["x"][0]), ValueError, "x: expected a 2-d"),
    (lambda a: a.update(x=a["x"][:, :5]), ValueError, "in_channels"),
    (lambda a: a.update(x=[[1.0]]), TypeError, "x: expected a numpy"),
    (lambda a: a.update(edges=a["edges"].float()), TypeError, "edges: expected an int32 or int64"),
    (lambda a: a.update(edges=a["edges"][0]), ValueError, "edges: expected edge_index of shape"),
    (lambda a: a.update(edges=a["edges"] + 5), ValueError, "node ids must lie in"),
    (lambda a: a.update(edges=a["edges"] - 3), ValueError, "node ids must lie in"),
    (lambda a: a.update(edge_attr=None), ValueError, "edge_attr: required"),
    (lambda a: a.update(edge_attr=a["edge_attr"][:4]), ValueError, "edge_attr: expected shape"),
    (lambda a: a.update(edge_attr=a["edge_attr"].half()), TypeError, "must share one dtype"),
    (lambda a: a.update(edge_attr=a["edge_attr"][:, 0]), ValueError, "edge_attr: expected a 2-d"),
    (lambda a: a.update(weights=42), TypeError, "weights: expected ConvWeights"),
    (lambda a: a.update(heads=3), ValueError, "heads: 3 disagrees"),
    (lambda a: a.update(beta=True), ValueError, "beta: True disagrees"),
    (lambda a: a.update(norm=torch.nn.LayerNorm(5)), ValueError, "norm: LayerNorm weight"),
    (lambda a: a.update(backend="gpu"), ValueError, "backend: expected one of"),
    (lambda a: a.update(edges=(torch.tensor([0, 2, 1, 3, 5, 7]), a["edges"][0])), ValueError,
     "non-decreasing"),
    (lambda a: a.update(edges=(torch.tensor([0, 7]), a["edges"][0])), ValueError, r"N\+1"),
    (lambda a: a.update(edges=(torch.tensor([0, 1, 2, 3, 4, 6]), a["edges"][0])), ValueError,
     "end at E"),
])
def test_layer_bad_input(mutate, exc, msg):
    conv, x, ei, ea = _ok()
    args = dict(x=x, edges=ei, edge_attr=ea, weights=conv)
    mutate(args)
    with pytest.raises(exc, match=msg):
        rasfast.transformer_conv(**args)


def test_edge_attr_without_edge_weights():
    conv = _conv(8, 4, 2, edge_dim=None)
    x, ei, ea = _graph(5, 7, 8, 3)
    with pytest.raises(ValueError, match="edge_attr: given"):
        rasfast.transformer_conv(x, ei, ea, conv)


@pytest.mark.parametrize("ptr,msg", [([0, 3, 2, 5], "non-decreasing"), ([0, 3, 4], "end at N"),
                                     ([1, 5], "start at 0"), ([], "at least one")])
def test_pool_bad_graph_ptr(ptr, msg):
    conv, x, ei, ea = _ok()
    with pytest.raises(ValueError, match=msg):
        rasfast.graph_transformer_pool(x, ei, ea, torch.tensor(ptr, dtype=torch.long), [conv])
    with pytest.raises(TypeError, match="graph_ptr: expected an int"):
        rasfast.graph_transformer_pool(x, ei, ea, torch.tensor([0.0, 5.0]), [conv])


def test_pool_bad_layers():
    conv, x, ei, ea = _ok()
    ptr = torch.tensor([0, 5])
    with pytest.raises(ValueError, match="layers: expected a non-empty"):
        rasfast.graph_transformer_pool(x, ei, ea, ptr, [])
    with pytest.raises(ValueError, match=r"layers\[1\]: in_channels"):
        rasfast.graph_transformer_pool(x, ei, ea, ptr, [conv, _conv(4, 4, 2, edge_dim=3)])
    with pytest.raises(ValueError, match=r"layers\[0\]: expected conv"):
        rasfast.graph_transformer_pool(x, ei, ea, ptr, [(conv, None, True, 1)])


def test_compiled_module_checks_its_buffers():
    """The C++ entry points validate sizes themselves (second line of defence)."""
    mod = rasfast.dispatch.cpu_module()
    i64 = np.zeros(3, np.int64)
    f = np.zeros((2, 12), np.float32)
    with pytest.raises(ValueError):
        mod.graph_conv_attend(np.array([0, 1, 2], np.int64), np.array([0, 5], np.int64),
                              np.array([0, 1], np.int64), 0, f, 0, 4, f, 8, 4, 4, f, 0, 0, f, 0, 0, 0,
                              1, 4, 0.5, np.empty(0, np.int64), np.zeros((1, 2, 4), np.float32),
                              np.zeros((0, 0), np.float32))
    with pytest.raises(ValueError):
        mod.graph_conv_attend(i64, np.zeros(2, np.int64), np.zeros(2, np.int64), 7, f, 0, 4, f, 8, 4, 4,
                              f, 0, 0, f, 0, 0, 0, 1, 4, 0.5, np.empty(0, np.int64),
                              np.zeros((1, 2, 4), np.float32), np.zeros((0, 0), np.float32))


# ---- GPU ---------------------------------------------------------------------------------

@cuda_kernels
@pytest.mark.gpu
@pytest.mark.parametrize("backend", gpu_backends())
@pytest.mark.parametrize("dtype,rel", [(torch.float32, 1e-4), (torch.float16, 5e-3), (torch.bfloat16, 1e-2)])
@pytest.mark.parametrize("heads,concat,beta,edge_dim", [(8, True, False, 16), (4, False, True, None),
                                                        (1, True, True, 16)])
def test_gpu_layer_matches_pyg(backend, dtype, rel, heads, concat, beta, edge_dim):
    conv = _conv(32, 16, heads, concat, beta, edge_dim)
    x, ei, ea = _graph(60, 300, 32, edge_dim, hub=None)
    ei[1, :120] = 0  # a hub
    ref = _pyg(conv.to(dtype).float(), x.to(dtype).float(), ei, None if ea is None else ea.to(dtype).float())
    dev = GPU_DEVICE
    out = rasfast.transformer_conv(x.to(dev, dtype), ei.to(dev), None if ea is None else ea.to(dev, dtype),
                                   conv.to(dev, dtype), backend=backend)
    assert out.dtype == dtype and out.device.type == dev.type
    _close(out.cpu(), ref, rel)


@cuda_kernels
@pytest.mark.gpu
@pytest.mark.parametrize("backend", gpu_backends())
def test_gpu_pool_matches_pyg_stack(backend):
    convs = [_conv(24, 4, 8, edge_dim=12, seed=0), _conv(32, 4, 8, edge_dim=12, seed=1),
             _conv(32, 4, 8, edge_dim=12, seed=2)]
    norms = [torch.nn.LayerNorm(32) for _ in range(2)]
    x, ei, ea, ptr = _batch([5, 0, 9, 1, 13], 4, 24, 12)
    ref = _pyg_stack(convs, norms, x, ei, ea, ptr)
    dev = GPU_DEVICE
    layers = [(convs[0].to(dev), norms[0].to(dev)), (convs[1].to(dev), norms[1].to(dev)), convs[2].to(dev)]
    out = rasfast.graph_transformer_pool(x.to(dev), ei.to(dev), ea.to(dev), ptr.to(dev), layers,
                                         backend=backend)
    _close(out.cpu(), ref, 1e-4)


def test_inputs_requiring_grad():
    """Every backend is differentiable in x (the compiled ones through the composed backward
    of rasfast.ops.graph_conv; tests/test_graph_conv_backward.py checks it in depth)."""
    conv = _conv(8, 4, 2, edge_dim=3)
    x, ei, ea = _graph(6, 14, 8, 3)
    x.requires_grad_(True)
    ref = conv(x, ei, ea)
    g_ref, = torch.autograd.grad(ref.square().sum(), x)
    for backend in ("cpu", "torch"):
        out = rasfast.transformer_conv(x, ei, ea, conv, backend=backend)
        assert out.requires_grad
        _close(out.detach(), ref.detach(), 1e-4)
        g, = torch.autograd.grad(out.square().sum(), x)
        _close(g, g_ref, 1e-4)
    with torch.no_grad():
        assert not rasfast.transformer_conv(x, ei, ea, conv, backend="cpu").requires_grad


def test_module_weights_follow_in_place_updates():
    """Packed weights cached per PyG module are rebuilt after an in-place parameter update."""
    conv = _conv(8, 4, 2, edge_dim=3)
    x, ei, ea = _graph(6, 14, 8, 3)
    before = rasfast.transformer_conv(x, ei, ea, conv, backend="cpu")
    with torch.no_grad():
        conv.lin_key.weight.mul_(3.0)
        conv.lin_skip.bias.add_(1.0)
    after = rasfast.transformer_conv(x, ei, ea, conv, backend="cpu")
    assert not torch.allclose(before, after)
    _close(after, _pyg(conv, x, ei, ea), 1e-4)


from hypothesis import given, strategies as st  # noqa: E402


@given(n=st.integers(0, 12), e=st.integers(0, 60), heads=st.sampled_from([1, 2, 4]),
       concat=st.booleans(), beta=st.booleans(), edge=st.booleans(), seed=st.integers(0, 2**16))
def test_random_graphs_cpu_vs_reference(n, e, heads, concat, beta, edge, seed):
    """Fresh random graphs (incl. empty, edgeless, dense multi-graphs) on the cpu backend."""
    e = e if n else 0
    conv = _conv(10, 3, heads, concat, beta, 5 if edge else None, seed=seed % 7)
    x, ei, ea = _graph(n, e, 10, 5 if edge else None, seed=seed)
    ref = rasfast.transformer_conv(x, ei, ea, conv, backend="torch")
    _close(rasfast.transformer_conv(x, ei, ea, conv, backend="cpu"), ref, 1e-4)


# ---- every CPU code path: the kernels' instruction sets x the projection GEMMs ----------
# graph_conv's CPU kernels are compiled for AVX-512, AVX2 and the baseline ISA and pick one
# at run time; the projections run on oneDNN or BLAS (rasfast.ops.cpu_gemm). Each pair must
# match PyG, including the sizes that cross the 8/16-float vector widths and half dtypes.
from rasfast.ops import cpu_gemm  # noqa: E402


def _gemm_backends():
    names = ["blas"]
    try:
        cpu_gemm.set_backend("onednn")
        names.append("onednn")
    except ValueError:
        pass
    finally:
        cpu_gemm.set_backend(None)
    return names


@pytest.mark.parametrize("gemm", _gemm_backends())
@pytest.mark.parametrize("simd", rasfast.dispatch.cpu_module().graph_conv_simd_variants())
def test_every_cpu_path_matches_pyg(simd, gemm):
    mod = rasfast.dispatch.cpu_module()
    best = mod.graph_conv_simd_level()
    try:
        mod.graph_conv_set_simd(simd)
        cpu_gemm.set_backend(gemm)
        assert mod.graph_conv_simd_level() == simd and cpu_gemm.backend() == gemm
        # channel counts 3, 17 and 40: tails of every vector width; few and many edges
        for c, heads, e in [(3, 2, 9), (17, 3, 60), (40, 2, 30)]:
            conv = _conv(19, c, heads, edge_dim=7, seed=c)
            x, ei, ea = _graph(13, e, 19, 7, seed=e)
            _close(rasfast.transformer_conv(x, ei, ea, conv, backend="cpu"), _pyg(conv, x, ei, ea), 1e-4)
        convs = [_conv(24, 4, 8, edge_dim=12, seed=0), _conv(32, 4, 8, edge_dim=12, seed=1),
                 _conv(32, 4, 8, edge_dim=12, beta=True, seed=2)]
        norms = [torch.nn.LayerNorm(32) for _ in range(2)]
        x, ei, ea, ptr = _batch([5, 0, 9, 1, 13], 4, 24, 12)
        ref = _pyg_stack(convs, norms, x, ei, ea, ptr)
        out = rasfast.graph_transformer_pool(x, ei, ea, ptr, [(convs[0], norms[0]), (convs[1], norms[1]), convs[2]],
                                             backend="cpu")
        _close(out, ref, 1e-4)
        for dtype, rel in [(torch.float16, 5e-3), (torch.bfloat16, 1e-2)]:
            conv = _conv(16, 8, 2, edge_dim=6, seed=4).to(dtype)
            x, ei, ea = _graph(11, 40, 16, 6, seed=5)
            got = rasfast.transformer_conv(x.to(dtype), ei, ea.to(dtype), conv, backend="cpu")
            ref = rasfast.transformer_conv(x.to(dtype).float(), ei, ea.to(dtype).float(),
                                           _conv(16, 8, 2, edge_dim=6, seed=4).to(dtype).float(), backend="torch")
            _close(got.float(), ref, rel)
    finally:
        mod.graph_conv_set_simd(best)
        cpu_gemm.set_backend(None)


def test_simd_and_gemm_choices_reject_unknown_names(monkeypatch):
    mod = rasfast.dispatch.cpu_module()
    with pytest.raises(ValueError, match="name"):
        mod.graph_conv_set_simd("neon")
    with pytest.raises(ValueError, match="name"):
        cpu_gemm.set_backend("cublas")
    monkeypatch.setenv("RASFAST_CPU_GEMM", "blas")
    cpu_gemm.set_backend(None)
    try:
        assert cpu_gemm.backend() == "blas"
        monkeypatch.setenv("RASFAST_CPU_GEMM", "mkl")
        cpu_gemm.set_backend(None)
        with pytest.raises(ValueError, match="RASFAST_CPU_GEMM"):
            cpu_gemm.backend()
    finally:
        monkeypatch.delenv("RASFAST_CPU_GEMM")
        cpu_gemm.set_backend(None)


def test_cpu_gemm_linear_matches_float64():
    g = torch.Generator().manual_seed(7)
    for m, k, n in [(0, 5, 3), (1, 1, 1), (37, 19, 33), (420, 384, 64)]:
        x, w, b = torch.randn(m, k, generator=g), torch.randn(n, k, generator=g), torch.randn(n, generator=g)
        want = x.double() @ w.double().t() + b.double()
        for name in _gemm_backends():
            cpu_gemm.set_backend(name)
            try:
                got = cpu_gemm.linear(x, w, b)
                assert got.shape == (m, n) and got.dtype == torch.float32
                assert torch.allclose(got.double(), want, rtol=1e-5, atol=1e-4 * max(1, k) ** 0.5), name
                assert torch.allclose(cpu_gemm.linear(x, w).double(), want - b.double(), rtol=1e-5,
                                      atol=1e-4 * max(1, k) ** 0.5), name
            finally:
                cpu_gemm.set_backend(None)


def test_cpu_gemm_matmul_reads_views_in_place_and_matches_float64():
    """matmul(a, b) = a @ b for the backward's operand views (transposes, column and row
    slices, strided columns) and empty sizes, on both GEMMs; on oneDNN, float32 only (other
    dtypes keep torch's product)."""
    g = torch.Generator().manual_seed(11)
    r = lambda *s: torch.randn(*s, generator=g)  # noqa: E731
    base = r(37, 50)
    cases = [(base, r(50, 29)), (base.t(), r(37, 11)), (base[:, 5:25], r(20, 13)),
             (base[3:20], r(50, 29)), (base, r(29, 50).t()), (base, r(50, 80)[:, 7:40]),
             (base[:, ::2], r(25, 6)), (base.t()[:, 4:9], r(5, 17)), (r(1, 1), r(1, 1)),
             (r(0, 4), r(4, 3)), (r(3, 0), r(0, 4)), (r(3, 4), r(4, 0)), (r(260, 150).t(), r(260, 130))]
    for name in _gemm_backends():
        cpu_gemm.set_backend(name)
        try:
            for a, b in cases:
                want = a.double() @ b.double()
                got = cpu_gemm.matmul(a, b)
                assert got.shape == want.shape and got.dtype == torch.float32
                assert torch.allclose(got.double(), want, rtol=1e-5, atol=1e-4 * max(1, a.shape[1]) ** 0.5), \
                    (name, a.shape, a.stride(), b.shape, b.stride())
            assert cpu_gemm.onednn_serves(base, base.t()) == (name == "onednn")
            assert not cpu_gemm.onednn_serves(base.bfloat16(), base.t().bfloat16())
            assert cpu_gemm.matmul(base.bfloat16(), base.t().bfloat16()).dtype == torch.bfloat16
        finally:
            cpu_gemm.set_backend(None)


@pytest.mark.parametrize("min_rows", [cpu_gemm.BMM_ONEDNN_MIN_ROWS, 1])
def test_cpu_gemm_bmm_matches_float64(monkeypatch, min_rows):
    """bmm(a, b, out, add) = add + a @ b per batch entry, written into ``out`` (a reused
    buffer), for the plan's operands (column-slice and transposed views), empty sizes and a
    half dtype, on both GEMMs; with the per-head oneDNN products from the default row count
    and from one row (every case then takes them)."""
    monkeypatch.setattr(cpu_gemm, "BMM_ONEDNN_MIN_ROWS", min_rows)
    g = torch.Generator().manual_seed(12)
    r = lambda *s: torch.randn(*s, generator=g)  # noqa: E731
    nodes = r(61, 5 * 12)
    cases = [(nodes[:, :36].view(61, 3, 12).transpose(0, 1), r(3, 12, 40), True),  # q heads
             (r(3, 53, 40), r(3, 12, 40).transpose(1, 2), True),
             (r(3, 23, 40), r(3, 40, 12), False),
             (r(2, 1, 7), r(2, 7, 1), False), (r(4, 0, 5), r(4, 5, 3), True),
             (r(2, 3, 0), r(2, 0, 4), False), (r(0, 3, 4), r(0, 4, 2), True)]
    for name in _gemm_backends():
        cpu_gemm.set_backend(name)
        try:
            for a, b, with_add in cases:
                add = r(a.shape[0], a.shape[1], b.shape[2]) if with_add else None
                out = torch.full((a.shape[0], a.shape[1], b.shape[2]), float("nan"))
                got = cpu_gemm.bmm(a, b, out, add=add)
                want = a.double() @ b.double() + (0 if add is None else add.double())
                assert got is out and torch.allclose(got.double(), want, rtol=1e-5, atol=1e-4), \
                    (name, a.shape, b.shape, with_add)
            a, b = r(2, 5, 8).bfloat16(), r(2, 8, 3).bfloat16()
            got = cpu_gemm.bmm(a, b, torch.empty(2, 5, 3, dtype=torch.bfloat16))
            torch.testing.assert_close(got.float(), (a.float() @ b.float()), rtol=2e-2, atol=2e-2)
        finally:
            cpu_gemm.set_backend(None)


def test_projection_gemms_follow_the_busy_machine_rules(monkeypatch):
    """The GEMMs are torch ops on the OpenMP runtime the kernels share: inside a call they run
    at the width csrc/common/parallel.h gives the call's work (serial for a small batch,
    capped by rasfast.set_num_threads), and the caller's torch width is restored after."""
    from rasfast.ops import graph_conv_cpu
    seen = []
    real = cpu_gemm.linear
    monkeypatch.setattr(cpu_gemm, "linear", lambda *a, **k: seen.append(torch.get_num_threads()) or real(*a, **k))
    convs = [_conv(24, 4, 8, edge_dim=12, seed=0), _conv(32, 4, 8, edge_dim=12, seed=1)]
    x, ei, ea, ptr = _batch([5, 9, 13], 4, 24, 12)
    before = torch.get_num_threads()
    rasfast.graph_transformer_pool(x, ei, ea, ptr, [(convs[0], torch.nn.LayerNorm(32)), convs[1]],
                                   backend="cpu")
    assert seen and set(seen) == {1}            # 27 nodes: far below the parallel grain
    assert torch.get_num_threads() == before
    big = rasfast.dispatch.cpu_module().parallel_grain() * 64
    try:
        rasfast.set_num_threads(1)
        with graph_conv_cpu.torch_width(big):
            assert torch.get_num_threads() == 1
    finally:
        rasfast.set_num_threads(0)
    assert torch.get_num_threads() == before


# ---- the CSR of a host edge_index ---------------------------------------------------------
@pytest.mark.parametrize("n,e", [(1, 0), (7, 40), (300, 2_000), (65_536, 50)])
def test_host_edge_index_csr_is_the_device_sort(n, e):
    """A numpy edge_index of a question-sized batch is sorted on the host (16-bit keys,
    numpy's stable radix sort) and moved in one copy: the CSR equals the device path's stable
    sort, repeated destinations in edge order, and a bad id names the range as before."""
    from rasfast.ops.graph_conv import _HOST_CSR_MAX_EDGES, as_csr
    g = torch.Generator().manual_seed(n + e)
    ei = torch.randint(0, min(n, 5) if e > 30 else n, (2, e), generator=g)  # many repeats
    ei[0] = torch.randint(0, n, (e,), generator=g)
    dev = torch.device("cpu")
    host, torch_path = as_csr(ei.numpy(), n, dev), as_csr(ei, n, dev)
    for a, b in zip(host, torch_path):
        assert a.dtype == torch.int64 and a.is_contiguous() and torch.equal(a, b)
    assert e <= _HOST_CSR_MAX_EDGES
    bad = ei.numpy().copy()
    if e:
        bad[1, e // 2] = n
        with pytest.raises(ValueError, match=rf"edges: node ids must lie in \[0, N\) with N = {n}"):
            as_csr(bad, n, dev)


def test_host_edge_index_csr_limits():
    """Past 32,768 edges or 65,536 nodes the host array takes the device path (same CSR)."""
    from rasfast.ops import graph_conv as gc
    calls = []
    real = gc._host_csr
    gc._host_csr = lambda *a: calls.append(a[1]) or real(*a)
    try:
        g = torch.Generator().manual_seed(0)
        for n, e in ((100, gc._HOST_CSR_MAX_EDGES + 1), (70_000, 10), (100, 10)):
            ei = torch.randint(0, n, (2, e), generator=g)
            got = gc.as_csr(ei.numpy(), n, torch.device("cpu"))
            want = gc.as_csr(ei, n, torch.device("cpu"))
            assert all(torch.equal(a, b) for a, b in zip(got, want))
    finally:
        gc._host_csr = real
    assert calls == [100]


@cuda_kernels
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("heads,channels,concat,beta,norm", [
    (4, 8, True, False, True), (2, 40, False, True, False), (1, 70, True, False, True),
    (3, 130, True, True, True), (8, 16, True, False, True), (12, 8, True, False, True),
    (4, 130, False, True, True), (5, 40, True, True, False)])
def test_layer_kernel_is_attend_then_epilogue(dtype, heads, channels, concat, beta, norm, monkeypatch):
    """The one-launch layer kernel (a block per node: every head's attention into shared
    memory, then the epilogue) gives the two kernels' output bit for bit: the same
    arithmetic, across channel tiles (R = 1..8), head means, the beta gate, LayerNorm, an
    empty graph in the batch and isolated nodes; below 4 heads or above 8 the two kernels
    serve (graph_conv_layer_fusable), which the test checks too."""
    dev = GPU_DEVICE
    din = 24
    conv = _conv(din, channels, heads, concat=concat, beta=beta, edge_dim=6,
                 seed=heads + channels).to(dev, dtype)
    out_w = heads * channels if concat else channels
    layers = [(conv, torch.nn.LayerNorm(out_w).to(dev))] if norm else [conv]
    x, ei, ea, ptr = _batch([5, 0, 9, 1, 13], 4, din, 6)
    x, ea = x.to(dev, dtype), ea.to(dev, dtype)
    ei, ptr = ei.to(dev), ptr.to(dev)
    mod = rasfast.dispatch.cuda_module()
    assert mod.graph_conv_layer_fusable(heads, channels, concat) == (4 <= heads <= 8)
    fused = rasfast.graph_transformer_pool(x, ei, ea, ptr, layers, backend="cuda")
    monkeypatch.setenv("RASFAST_GRAPH_CONV_FUSED", "0")
    apart = rasfast.graph_transformer_pool(x, ei, ea, ptr, layers, backend="cuda")
    assert torch.equal(fused, apart)
    layer_in = rasfast.transformer_conv(x, ei, ea, conv, backend="cuda")
    monkeypatch.delenv("RASFAST_GRAPH_CONV_FUSED")
    assert torch.equal(rasfast.transformer_conv(x, ei, ea, conv, backend="cuda"), layer_in)
