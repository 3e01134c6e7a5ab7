"""rasfast's ops as PyTorch operators (issue 39 items 1-3): torch.library.opcheck of every
registered operator on fresh random inputs (empty batches and odd sizes included),
torch.compile(fullgraph=True) of a RAS retrieval step and of a GraphEncoder forward (equal
to eager), and torch.export of the GraphEncoder forward. CPU tensors, backend "cpu"/"auto".
The compile tests use the aot_eager backend (fake kernels, functionalisation, the AOT
graph); inductor adds only code generation, and 30 s on 2 cores.
"""
import dataclasses

import numpy as np
import pytest
import torch
from torch.library import opcheck

import rasfast
import rasfast.ops  # noqa: F401  (defines torch.ops.rasfast.*)
from rasfast.ops import _library
from rasfast.ops.graph_conv import flat_layers
from rasfast.models.graph_encoder import GraphEncoder

OPS = ("select_k", "theme_scope", "scoped_dense_search", "theme_scoped_search",
       "segment_topk_scores", "segment_max_rank", "triple_beam_search", "transformer_conv",
       "graph_transformer_pool", "triple_adjacency")
# the autograd check needs a differentiable input; these are inference operators
UTILS = ("test_schema", "test_faketensor", "test_aot_dispatch_dynamic")


def op(name):
    return getattr(torch.ops.rasfast, name).default


def check(name, args):
    opcheck(op(name), args, test_utils=UTILS)


def test_every_public_op_is_registered():
    assert set(OPS) <= set(_library.registered())
    for name in OPS:
        assert hasattr(torch.ops.rasfast, name)


@pytest.mark.parametrize("B,N,k", [(0, 7, 3), (1, 1, 1), (3, 257, 10), (5, 33, 33)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_opcheck_select_k(B, N, k, dtype):
    g = torch.Generator().manual_seed(B * 1000 + N)
    x = torch.randn(B, N, generator=g).to(dtype)
    for largest, sorted_ in ((False, True), (True, False)):
        check("select_k", (x, k, largest, sorted_, "cpu"))
    check("select_k", (x, k, True, True, "torch"))


def _theme_inputs(B, N, T=5, D=7, seed=0):
    g = torch.Generator().manual_seed(seed)
    r = lambda *s: torch.randn(*s, generator=g)  # noqa: E731
    return r(B, T), r(B, D), r(N, T), r(N, D)


@pytest.mark.parametrize("B,N,K,k", [(0, 5, 3, 2), (1, 1, 4, 3), (3, 41, 9, 4), (2, 17, 17, 20)])
def test_opcheck_theme_ops(B, N, K, k):
    q, qe, c, e = _theme_inputs(B, N, seed=B + N)
    for metric in ("l2", "ip"):
        check("theme_scope", (q, c, K, metric, "cpu", "auto"))
        check("theme_scoped_search", (q, qe, c, e, K, k, 0.25, metric, "cpu", "auto"))
    check("theme_scoped_search", (q, qe, c, e, K, k, 0.0, "l2", "torch", "full"))
    scope = torch.stack([torch.randperm(N)[:min(K, N)] for _ in range(B)]) if B else \
        torch.empty((0, min(K, N)), dtype=torch.int64)
    check("scoped_dense_search", (qe, e, scope, k, "cpu", "auto"))
    check("scoped_dense_search", (qe, e, scope.int(), k, "torch", "queries"))


def _ragged(B, M, g):
    cuts = torch.sort(torch.randint(0, M + 1, (max(B - 1, 0),), generator=g)).values
    return torch.cat([torch.tensor([0]), cuts, torch.tensor([M])]) if B else torch.tensor([0])


@pytest.mark.parametrize("B,M,n", [(0, 0, 2), (1, 5, 7), (4, 23, 3), (3, 2, 1)])
def test_opcheck_segment_ops(B, M, n):
    g = torch.Generator().manual_seed(B * 31 + M)
    D, T = 6, 9
    q = torch.randn(B, D, generator=g)
    ptr = _ragged(B, M, g)
    check("segment_topk_scores", (q, torch.randn(M, D, generator=g), ptr, n, None, "cpu"))
    table = torch.randn(T, D, generator=g)
    ids = torch.randint(0, T, (M,), generator=g)
    check("segment_topk_scores", (q, table, ptr.int(), n, ids, "cpu"))
    check("segment_topk_scores", (q, table, ptr, n, ids, "torch"))
    scores = torch.randn(M, generator=g)
    groups = torch.randint(0, 5, (M,), generator=g)
    check("segment_max_rank", (scores, groups, ptr, n, "cpu"))
    check("segment_max_rank", (scores, groups.int(), ptr, n, "torch"))
    check("segment_topk_scores", (q, table, ptr, n, ids, "cpu", "none"))
    check("segment_max_rank", (scores, groups, ptr, n, "cpu", "none"))


def _graph(n, deg, g):
    rows = [torch.sort(torch.randperm(n, generator=g)[:int(torch.randint(0, deg + 1, (1,), generator=g))]).values
            for _ in range(n)]
    indptr = torch.tensor([0] + np.cumsum([len(r) for r in rows]).tolist(), dtype=torch.int64)
    indices = torch.cat(rows) if rows else torch.zeros(0, dtype=torch.int64)
    return indptr, indices.long()


@pytest.mark.parametrize("B,n,b,L", [(0, 6, 2, 2), (1, 1, 1, 1), (3, 13, 3, 2), (2, 9, 4, 3)])
def test_opcheck_triple_beam_search(B, n, b, L):
    g = torch.Generator().manual_seed(B * 7 + n)
    D = 5
    indptr, indices = _graph(n, 4, g)
    emb = torch.randn(n, D, generator=g)
    q = torch.randn(B, D, generator=g)
    ptr = _ragged(B, 2 * B, g)
    ids = torch.randint(0, n, (int(ptr[-1]),), generator=g)
    for backend, mn in (("cpu", None), ("torch", 2)):
        check("triple_beam_search", (indptr, indices, emb, q, ptr, ids, b, L, 2.0 * b, mn, backend))
    check("triple_beam_search", (indptr, indices, emb, q, ptr, ids, b, L, 2.0 * b, None, "cpu", "none"))


def _encoder(din=6, hidden=8, heads=2, layers=2, edge_dim=3, seed=0):
    torch.manual_seed(seed)
    return GraphEncoder(in_channels=din, hidden=hidden, heads=heads, num_layers=layers,
                        edge_dim=edge_dim, llm_hidden=None).eval()


def _batch(sizes, din=6, edge_dim=3, seed=0):
    g = torch.Generator().manual_seed(seed)
    N = sum(sizes)
    gp = torch.tensor([0] + np.cumsum(sizes).tolist(), dtype=torch.int64)
    src, dst = [], []
    for s, e in zip(gp[:-1].tolist(), gp[1:].tolist()):
        if e > s:
            m = 2 * (e - s)
            src.append(torch.randint(s, e, (m,), generator=g))
            dst.append(torch.randint(s, e, (m,), generator=g))
    ei = torch.stack([torch.cat(src), torch.cat(dst)]) if src else torch.zeros((2, 0), dtype=torch.int64)
    return (torch.randn(N, din, generator=g), ei, torch.randn(ei.shape[1], edge_dim, generator=g), gp)


@pytest.mark.parametrize("sizes", [[3], [4, 0, 5], [1, 2, 7, 1]])
def test_opcheck_graph_ops(sizes):
    enc = _encoder(seed=len(sizes))
    x, ei, ea, gp = _batch(sizes, seed=len(sizes))
    args = enc._layer_args()
    for backend in ("cpu", "torch"):
        check("graph_transformer_pool", (x, ei, None, ea, gp, *args, backend))
    check("graph_transformer_pool", (x, ei, None, ea, gp, *args, "cpu", "none"))
    # one layer (with its LayerNorm and ReLU), as an edge_index and as a CSR
    conv_args = flat_layers(enc.layer_specs()[:1])
    check("transformer_conv", (x, ei, None, ea, *conv_args, "cpu"))
    check("transformer_conv", (x, ei, None, ea, *conv_args, "cpu", "full"))
    order = torch.sort(ei[1], stable=True).indices
    indptr = torch.searchsorted(ei[1][order], torch.arange(x.shape[0] + 1))
    check("transformer_conv", (x, indptr, ei[0][order].contiguous(), ea[order], *conv_args, "cpu"))


def test_registered_call_equals_public_op():
    x = torch.randn(4, 500)
    v, i = torch.ops.rasfast.select_k(x, 10, False, True, "auto")
    pv, pi = rasfast.select_k(x, 10)
    assert torch.equal(i, pi) and torch.equal(v, pv)
    with pytest.raises(ValueError, match="k: must be <="):  # the operator checks its arguments
        torch.ops.rasfast.select_k(x, 501, False, True, "cpu")
    with pytest.raises(ValueError, match="backend"):
        torch.ops.rasfast.select_k(x, 3, False, True, "gpu")


# ------------------------------------------------------------------------ compile / export
def _ras_step(q_ppd, q_emb, corpus_ppd, corpus_emb, cand_emb, cand_ptr, indptr, indices,
              seed_ptr, seed_ids):
    """One RAS retrieval step: theme-scoped dense search, a select over its scores, the
    aligner's per-query top-n of ragged candidates, and a beam over the triple graph."""
    ids, scores = rasfast.theme_scoped_search(q_ppd, q_emb, corpus_ppd, corpus_emb, K=16, k=6,
                                              theme_weight=0.25)
    top_v, top_i = rasfast.select_k(scores, 3, largest=True)
    picked = torch.gather(ids, 1, top_i)
    seg_ids, seg_scores = rasfast.segment_topk_scores(q_emb, cand_emb, cand_ptr, 4)
    beams = rasfast.triple_beam_search((indptr, indices), cand_emb, q_emb, (seed_ptr, seed_ids),
                                       beam_width=3, max_len=2)
    return picked, top_v, seg_ids, seg_scores, beams.sequences, beams.scores


def test_compile_ras_retrieval_step_fullgraph():
    g = torch.Generator().manual_seed(5)
    B, N, T, D, M = 3, 50, 4, 8, 12
    r = lambda *s: torch.randn(*s, generator=g)  # noqa: E731
    indptr, indices = _graph(M, 3, g)
    args = (r(B, T), r(B, D), r(N, T), r(N, D), r(M, D), torch.tensor([0, 5, 5, 12]),
            indptr, indices, torch.tensor([0, 2, 3, 5]), torch.tensor([1, 4, 0, 7, 11]))
    torch._dynamo.reset()
    compiled = torch.compile(_ras_step, fullgraph=True, backend="aot_eager")
    got, want = compiled(*args), _ras_step(*args)
    for a, b in zip(got, want):
        assert torch.equal(a, b)
    # a different batch reuses the graph (no data-dependent guard) and still matches eager
    args2 = (r(B, T), r(B, D)) + args[2:]
    for a, b in zip(compiled(*args2), _ras_step(*args2)):
        assert torch.equal(a, b)


def _ras_args(B, N, M, g):
    """_ras_step's inputs at B queries, N corpus rows, M triples (T = 4, D = 8 throughout)."""
    r = lambda *s: torch.randn(*s, generator=g)  # noqa: E731
    indptr, indices = _graph(M, 3, g)
    cand_ptr = torch.tensor([0] + sorted(torch.randint(0, M, (B - 1,), generator=g).tolist()) + [M])
    seed_ptr = torch.tensor([0] + sorted(torch.randint(0, 2 * B, (B - 1,), generator=g).tolist()) + [2 * B])
    return (r(B, 4), r(B, 8), r(N, 4), r(N, 8), r(M, 8), cand_ptr, indptr, indices, seed_ptr,
            torch.randint(0, M, (2 * B,), generator=g))


def test_compile_ras_retrieval_step_dynamic_sizes_one_graph():
    """With dynamic sizes, one compiled graph serves other query, corpus and graph sizes:
    the public ops' Python layer adds no guard on a size (the operators are opaque and their
    fake kernels symbolic). Sizes >= 2 and pairwise different: torch itself specialises 0/1
    and equal sizes (duck sizing)."""
    from torch._dynamo.testing import CompileCounterWithBackend
    g = torch.Generator().manual_seed(8)
    counter = CompileCounterWithBackend("aot_eager")
    torch._dynamo.reset()
    compiled = torch.compile(_ras_step, fullgraph=True, backend=counter, dynamic=True)
    frames = []
    for B, N, M in ((5, 50, 17), (6, 71, 23), (9, 37, 29)):
        args = _ras_args(B, N, M, g)
        for a, b in zip(compiled(*args), _ras_step(*args)):
            assert torch.equal(a, b)
        frames.append(counter.frame_count)
    assert frames[0] >= 1 and frames == frames[:1] * 3, frames  # compiled once, then reused


class _RasStep(torch.nn.Module):
    def forward(self, *args):
        return _ras_step(*args)


def test_export_ras_retrieval_step_dynamic_sizes():
    """torch.export of the retrieval step with every size dynamic (queries, corpus rows,
    triples, seeds): the program runs other sizes, one query included, equal to eager. It
    fails if the public ops' Python layer fixes a size while tracing (as len() of a traced
    tensor did in the segment ops' offset check)."""
    from torch.export import Dim
    g = torch.Generator().manual_seed(3)
    B, N, M = Dim("B", min=1), Dim("N", min=1), Dim("M", min=1)
    ids, seeds = Dim("indices", min=0), Dim("seeds", min=0)
    shapes = ({0: B}, {0: B}, {0: N}, {0: N}, {0: M}, {0: B + 1}, {0: M + 1}, {0: ids}, {0: B + 1},
              {0: seeds})
    with torch.fx.experimental._config.patch(backed_size_oblivious=True):
        ep = torch.export.export(_RasStep(), _ras_args(5, 50, 17, g), dynamic_shapes=(shapes,))
    for b, n, m in ((6, 71, 23), (1, 37, 29), (2, 16, 5)):
        args = _ras_args(b, n, m, g)
        for a, w in zip(ep.module()(*args), _ras_step(*args)):
            assert torch.equal(a, w)


class _Encode(torch.nn.Module):
    def __init__(self, enc):
        super().__init__()
        self.enc = enc

    def forward(self, x, edge_index, edge_attr, graph_ptr):
        return self.enc.encode_batch(x, edge_index, edge_attr, graph_ptr).mean(0)


def test_compile_graph_encoder_forward_fullgraph():
    enc = _encode_module()
    x, ei, ea, gp = _batch([4, 0, 6], seed=3)
    want = enc(x, ei, ea, gp)
    torch._dynamo.reset()
    got = torch.compile(enc, fullgraph=True, backend="aot_eager")(x, ei, ea, gp)
    torch.testing.assert_close(got, want, rtol=0, atol=0)
    # the fused eager path (cached specs) gives the same vector
    assert torch.equal(want, enc.enc.encode_batch(x, ei, ea, gp).mean(0))


def _encode_module():
    return _Encode(_encoder(seed=9))


@pytest.mark.parametrize("form", ["specs", "modules"])
def test_compile_graph_transformer_pool_and_conv_fullgraph(form):
    """The public graph ops compiled as themselves with fullgraph=True (the GPU roofline's
    compiled calls: layers from normalise_layers; or the layer modules), equal to eager. On
    torch 2.11 their traced branch stopped at the weights' memo (cached_on's
    ``__dict__.setdefault``, the seventh GPU run); the modules' form at the module memo's
    data-pointer key (torch 2.13 too) and, on torch 2.11, at ``state_dict()``."""
    from rasfast.ops.graph_conv import normalise_layers
    enc = _encoder(seed=11)
    x, ei, ea, gp = _batch([4, 0, 6], seed=11)
    mods = [(enc.convs[0], enc.norms[0]), enc.convs[1]]
    layers = normalise_layers(mods) if form == "specs" else mods
    conv = layers[0] if form == "modules" else layers[0][0]

    def pool(x, ei, ea, gp):
        return rasfast.graph_transformer_pool(x, ei, ea, gp, layers, backend="cpu", validate="none")

    def one_layer(x, ei, ea):
        c, norm = (conv[0], conv[1]) if isinstance(conv, tuple) else (conv, layers[0][1])
        return rasfast.transformer_conv(x, ei, ea, c, norm=norm, relu=True, backend="cpu")

    torch._dynamo.reset()
    with torch.no_grad():
        for fn, args in ((pool, (x, ei, ea, gp)), (one_layer, (x, ei, ea))):
            want = fn(*args)
            got = torch.compile(fn, fullgraph=True, backend="aot_eager")(*args)
            torch.testing.assert_close(got, want, rtol=0, atol=0)


def test_weight_memos_are_left_alone_while_compiling(monkeypatch):
    """While Dynamo traces, the weights' host memos are neither read nor written (torch 2.11
    cannot trace the frozen dataclasses' ``__dict__.setdefault``; a memo of traced values
    would outlive the trace): cached_on, NormWeights.to and the module memo make their value
    afresh."""
    from rasfast.ops import graph_conv_params as gcp
    enc = _encoder(seed=12)
    w = enc.convs[0].weights()  # a fresh ConvWeights: nothing cached on it yet
    nw = gcp.NormWeights(torch.ones(4), torch.zeros(4))
    made = object()
    monkeypatch.setattr(torch.compiler, "is_compiling", lambda: True)
    assert gcp.cached_on(w, "key", lambda: made) is made
    assert gcp.as_conv_weights(w) is w  # its shape check, unmemoised
    assert gcp.packed_node_weights(w)[0].shape[0] == 3 * w.heads * w.channels + w.out_channels
    assert nw.to(dtype=torch.float64).weight.dtype == torch.float64
    module_w = gcp.as_conv_weights(enc.convs[1])  # read without state_dict() (torch 2.11)
    sd = enc.convs[1].state_dict()
    assert set(gcp._linear_tensors(enc.convs[1])) == set(sd)
    from_sd = gcp._module_weights(enc.convs[1], sd)
    for f in dataclasses.fields(module_w):
        got, want = getattr(module_w, f.name), getattr(from_sd, f.name)
        same = torch.equal(got, want) if isinstance(want, torch.Tensor) else got == want
        assert same, f.name
    assert "_cache" not in w.__dict__ and "_to" not in nw.__dict__
    assert enc.convs[1] not in gcp._MODULE_WEIGHTS
    monkeypatch.undo()  # eager: memoised as before
    assert gcp.cached_on(w, "key", lambda: None) is None and "key" in w.__dict__["_cache"]
    assert nw.to(dtype=torch.float64) is nw.to(dtype=torch.float64)
    assert gcp.as_conv_weights(enc.convs[1]) is gcp.as_conv_weights(enc.convs[1])


def test_compile_question_graphs_to_vectors_fullgraph():
    """RAS's graph building as the loop calls it: the question graphs' numeric half
    (batch_graphs: offsets, concatenation; a torch composition, so it needs no operator of its
    own) and the encoder compile into one graph with the registered pool operator. The
    string half (entities -> ids, encoding) runs before, outside torch."""
    from rasfast.encode import HashingEncoder
    from rasfast.models.question_graph import batch_graphs, build_question_graph
    enc = HashingEncoder(dim=24)
    graphs = [build_question_graph([("a", "r", "b"), ("b", "s", "c"), ("c", "r", "a")], encoder=enc),
              build_question_graph([("x", "r", "y")], encoder=enc)]
    torch.manual_seed(2)
    m = GraphEncoder(in_channels=24, hidden=16, heads=2, num_layers=2, edge_dim=24,
                     llm_hidden=None).eval()

    def vectors(gs):
        return m.encode_batch(*batch_graphs(gs), backend="cpu")

    torch._dynamo.reset()
    with torch.no_grad():
        want = vectors(graphs)
        got = torch.compile(vectors, fullgraph=True, backend="aot_eager")(graphs)
    assert got.shape == (2, 16)
    torch.testing.assert_close(got, want, rtol=0, atol=0)


def test_export_graph_encoder_forward():
    enc = _encode_module()
    x, ei, ea, gp = _batch([5, 3], seed=4)
    ep = torch.export.export(enc, (x, ei, ea, gp))
    assert "rasfast.graph_transformer_pool" in ep.graph_module.print_readable(print_output=False)
    x2, ei2, ea2, gp2 = _batch([2, 6], seed=8)  # same shapes, other values
    for args in ((x, ei, ea, gp), (x2, ei2, ea2, gp2)):
        assert torch.equal(ep.module()(*args), enc(*args))


def test_fake_tensors_go_through_the_operator():
    """Fake tensors (and compiling) take the operator and its fake kernel; eager calls on
    real tensors run the kernels (the C++ operator kernel or the Python kernel function,
    tests/test_native_ops.py)."""
    from torch._subclasses.fake_tensor import FakeTensorMode
    with FakeTensorMode() as mode:
        x = mode.from_tensor(torch.randn(3, 40))
        v, i = rasfast.select_k(x, 5)
        ids, sc = rasfast.theme_scoped_search(x[:, :4], x, torch.randn(9, 4), torch.randn(9, 40), 5, 7)
    assert tuple(i.shape) == (3, 5) and i.dtype == torch.int64
    assert tuple(ids.shape) == (3, 7) and sc.dtype == torch.float32
