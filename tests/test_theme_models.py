"""Theme models: the paper's classifier/shifter and the unsupervised k-means default."""
import numpy as np
import pytest
import torch

from rasfast.theme import (ClassifierThemeModel, KMeansThemeModel, ThemeClassifier, ThemeShifter,
                           fit_classifier, fit_shifter, load_theme_model)

BACKENDS = ["torch", "faiss"]


@pytest.fixture
def one_thread():
    """Tiny models train ~30x faster single-threaded on a busy 2-core CI machine."""
    prev = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(prev)


def _blobs(n_per=40, centers=4, dim=16, seed=0):
    g = torch.Generator().manual_seed(seed)
    c = torch.randn(centers, dim, generator=g) * 4
    x = c.repeat_interleave(n_per, 0) + 0.3 * torch.randn(centers * n_per, dim, generator=g)
    return x, torch.arange(centers).repeat_interleave(n_per)


# ------------------------------------------------------------------ the paper's models
def test_classifier_shapes_and_probabilities():
    m = ThemeClassifier(in_dim=24, num_themes=298).eval()
    assert [type(l).__name__ for l in m.net] == ["Linear", "ReLU", "Dropout", "Linear"]
    assert m.net[0].out_features == 512 and m.net[3].out_features == 298
    p = m(torch.randn(7, 24))
    assert p.shape == (7, 298)
    assert bool(((p > 0) & (p < 1)).all())
    assert torch.equal(p, m(torch.randn(7, 24)) * 0 + p)  # eval: no dropout noise


def test_shifter_shapes_and_distribution():
    m = ThemeShifter(num_themes=298).eval()
    widths = [l.out_features for l in m.net if isinstance(l, torch.nn.Linear)]
    assert widths == [512, 256, 298]
    p = m(torch.rand(5, 298))
    assert p.shape == (5, 298)
    assert torch.allclose(p.sum(1), torch.ones(5), atol=1e-5)
    assert bool((p >= 0).all())


def test_classifier_training_loss_decreases(one_thread):
    g = torch.Generator().manual_seed(1)
    x = torch.randn(256, 12, generator=g)
    w = torch.randn(12, 6, generator=g)
    y = (x @ w > 0).float()
    m = ThemeClassifier(12, 6, hidden=32, dropout=0.1)
    hist = fit_classifier(m, x, y, epochs=25, lr=2e-2, batch_size=64)
    assert len(hist) == 25
    assert hist[-1] < 0.5 * hist[0]
    acc = ((m(x) > 0.5).float() == y).float().mean()
    assert acc > 0.9


def test_shifter_training_loss_decreases(one_thread):
    g = torch.Generator().manual_seed(2)
    q = torch.rand(256, 8, generator=g)
    target = torch.softmax(3 * q.flip(1), dim=1)  # a learnable "shift" of the themes
    m = ThemeShifter(8, hidden=(32, 16), dropout=0.0)
    hist = fit_shifter(m, q, target, epochs=25, lr=2e-2, batch_size=64)
    assert hist[-1] < 0.3 * hist[0]


def test_fit_errors():
    m = ThemeClassifier(4, 3, hidden=8)
    with pytest.raises(ValueError, match="labels"):
        fit_classifier(m, torch.randn(5, 4), torch.rand(4, 3))
    with pytest.raises(ValueError, match="labels"):
        fit_classifier(m, torch.randn(5, 4), torch.full((5, 3), 2.0))
    with pytest.raises(ValueError, match="embeddings"):
        fit_classifier(m, torch.randn(5, 7), torch.rand(5, 3))
    with pytest.raises(ValueError, match="epochs"):
        fit_classifier(m, torch.randn(5, 4), torch.rand(5, 3), epochs=0)
    s = ThemeShifter(3, hidden=(4,))
    with pytest.raises(ValueError, match="doc_themes"):
        fit_shifter(s, torch.rand(5, 3), -torch.rand(5, 3))
    with pytest.raises(ValueError, match="doc_themes"):
        fit_shifter(s, torch.rand(5, 3), torch.zeros(5, 3))
    with pytest.raises(ValueError, match="dropout"):
        ThemeClassifier(4, 3, dropout=1.0)
    with pytest.raises(ValueError, match="num_themes"):
        ThemeShifter(0)


def test_classifier_theme_model_save_load_identical(tmp_path):
    torch.manual_seed(0)
    clf, sh = ThemeClassifier(10, 7, hidden=16), ThemeShifter(7, hidden=(12, 8))
    model = ClassifierThemeModel(clf, sh, name="toy")
    x = np.random.default_rng(0).standard_normal((9, 10)).astype(np.float32)
    p, qp = model.ppd(x), model.query_ppd(x)
    assert isinstance(p, np.ndarray) and p.shape == (9, 7) and qp.shape == (9, 7)
    assert np.allclose(qp.sum(1), 1, atol=1e-5)
    model.save(tmp_path / "m")
    loaded = load_theme_model(tmp_path / "m")
    assert isinstance(loaded, ClassifierThemeModel) and loaded.name == "toy"
    assert np.array_equal(loaded.ppd(x), p) and np.array_equal(loaded.query_ppd(x), qp)
    # without shifter, queries use the classifier
    plain = ClassifierThemeModel(clf)
    assert np.array_equal(plain.query_ppd(x), plain.ppd(x))
    with pytest.raises(ValueError, match="shifter"):
        ClassifierThemeModel(clf, ThemeShifter(5))
    with pytest.raises(ValueError, match="embeddings"):
        model.ppd(x[:, :4])


# ------------------------------------------------------------------ k-means default
@pytest.mark.parametrize("backend", BACKENDS)
def test_kmeans_ppd_rows_are_distributions(backend):
    x, _ = _blobs()
    m = KMeansThemeModel(num_themes=6, scale=10, backend=backend).fit(x)
    p = m.ppd(x)
    assert isinstance(p, torch.Tensor) and p.shape == (x.shape[0], 6) and p.dtype == torch.float32
    assert torch.allclose(p.sum(1), torch.ones(x.shape[0]), atol=1e-5)
    assert bool((p >= 0).all())
    assert np.allclose(m.query_ppd(x.numpy()), p.numpy())
    assert torch.allclose(m.centroids.norm(dim=1), torch.ones(6), atol=1e-5)


@pytest.mark.parametrize("backend", BACKENDS)
def test_kmeans_finds_separated_clusters(backend):
    x, label = _blobs(centers=4)
    m = KMeansThemeModel(num_themes=4, scale=20, backend=backend, seed=3).fit(x)
    assign = m.ppd(x).argmax(1)
    # every blob maps to a single theme, and different blobs to different themes
    themes = [set(assign[label == c].tolist()) for c in range(4)]
    assert all(len(t) == 1 for t in themes)
    assert len(set().union(*themes)) == 4


@pytest.mark.parametrize("backend", BACKENDS)
def test_kmeans_deterministic_and_save_load(backend, tmp_path):
    x, _ = _blobs(n_per=30, centers=5, dim=12, seed=4)
    a = KMeansThemeModel(num_themes=7, backend=backend, seed=11).fit(x)
    b = KMeansThemeModel(num_themes=7, backend=backend, seed=11).fit(x)
    assert torch.equal(a.centroids, b.centroids)
    a.save(tmp_path / "km")
    c = load_theme_model(tmp_path / "km")
    assert isinstance(c, KMeansThemeModel) and c.name == a.name
    assert torch.equal(c.ppd(x), a.ppd(x))


def test_kmeans_torch_lloyd_handles_duplicates():
    # more centroids than distinct points: empty clusters are re-seeded, no NaN
    x = torch.tensor([[1.0, 0.0], [0.0, 1.0]]).repeat(10, 1)
    m = KMeansThemeModel(num_themes=4, backend="torch").fit(x)
    assert torch.isfinite(m.centroids).all()
    assert torch.isfinite(m.ppd(x)).all()


def test_kmeans_errors(tmp_path):
    x, _ = _blobs(n_per=2, centers=2)
    with pytest.raises(ValueError, match="not fitted"):
        KMeansThemeModel(3).ppd(x)
    with pytest.raises(ValueError, match="at least"):
        KMeansThemeModel(num_themes=10).fit(x)
    with pytest.raises(ValueError, match="scale"):
        KMeansThemeModel(scale=0)
    with pytest.raises(ValueError, match="backend"):
        KMeansThemeModel(backend="sklearn")
    m = KMeansThemeModel(2, backend="torch").fit(x)
    with pytest.raises(ValueError, match="dim"):
        m.ppd(torch.randn(3, 5))
    with pytest.raises(ValueError, match="NaN"):
        m.ppd(torch.full((1, x.shape[1]), float("nan")))
    with pytest.raises(TypeError, match="embeddings"):
        m.ppd([[1.0] * x.shape[1]])
    with pytest.raises(ValueError, match="theme_model.json"):
        load_theme_model(tmp_path)
    m.save(tmp_path / "km")
    (tmp_path / "km" / "centroids.npy").write_bytes(b"\x93NUMPY")
    with pytest.raises(ValueError, match="centroids.npy"):
        load_theme_model(tmp_path / "km")
