"""Sparse rows (scipy.sparse CSR and CSC) for the PCA family: the same releases as the dense fit
with the same seed, computed a densified block of rows at a time, through the same release sites
with the same rounding allowances."""
import warnings

import numpy as np
import pytest
import scipy.sparse as sp

import dptensor.algorithms.adaptive_power as adaptive_power
import dptensor.algorithms.exact as exact
import dptensor.algorithms.power as power
import dptensor.algorithms.sparse as sparse_rows
import dptensor.mechanisms.randomness as randomness
from dptensor import AdaptivePrivatePCA, PrivacyAccountant, PrivatePCA
from dptensor.latent import PrivateLatentDirichletAllocation

pytestmark = [pytest.mark.filterwarnings("ignore::dptensor.PrivacyWarning"),
              pytest.mark.filterwarnings("ignore:the released explained_variance_")]

N, D = 1200, 10
PRIVATE = dict(epsilon=1.0, data_norm=3.0)
ATTRIBUTES = ("components_", "explained_variance_", "explained_variance_noise_", "mean_")


@pytest.fixture(autouse=True)
def small_blocks(monkeypatch):
    """Blocks of 100 rows (and digest leaves of 50), so every fit reads many blocks."""
    monkeypatch.setattr(sparse_rows, "BLOCK_ENTRIES", 100 * D)
    monkeypatch.setattr(randomness, "LEAF_BYTES", 50 * D * 8)


def _rows(dtype=np.float64, seed=0):
    rng = np.random.default_rng(seed)
    S = sp.random(N, D, density=0.3, format="csr", random_state=seed,
                  data_rvs=rng.standard_normal)
    S = sp.diags(np.linspace(0.5, 3.0, N)) @ S  # some rows above the bound: clipping matters
    return S.astype(dtype).tocsr()


def _same(a, b, names=ATTRIBUTES):
    for name in names:
        np.testing.assert_array_equal(getattr(a, name), getattr(b, name), err_msg=name)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("fmt", ["csr", "csc"])
@pytest.mark.parametrize("kw", [dict(PRIVATE), dict(PRIVATE, method="power"),
                                dict(PRIVATE, centered=True)])
def test_private_fit_on_sparse_rows_is_the_dense_fit_bit_for_bit(dtype, fmt, kw):
    S = _rows(dtype)
    dense = PrivatePCA(3, random_state=7, **kw).fit(S.toarray())
    fit = PrivatePCA(3, random_state=7, **kw).fit(S.asformat(fmt))
    _same(dense, fit, ATTRIBUTES + ("explained_variance_ratio_", "singular_values_",
                                    "noise_variance_"))
    assert fit.components_.dtype == dtype and fit.privacy_cost_ == dense.privacy_cost_
    assert fit.n_samples_ == N and fit.n_features_in_ == D


@pytest.mark.parametrize("dtype,rtol", [(np.float64, 1e-10), (np.float32, 1e-3)])
@pytest.mark.parametrize("kw", [dict(), dict(method="power"), dict(data_norm=2.0)])
def test_fit_without_privacy_on_sparse_rows_is_the_dense_fit_to_rounding(dtype, rtol, kw):
    S = _rows(dtype)
    dense = PrivatePCA(3, random_state=0, **kw).fit(S.toarray())
    fit = PrivatePCA(3, random_state=0, **kw).fit(S)
    for name in ("components_", "explained_variance_", "explained_variance_ratio_", "mean_"):
        np.testing.assert_allclose(getattr(fit, name), getattr(dense, name), rtol=rtol,
                                   atol=rtol * 1e-2, err_msg=name)


def _recorded_releases(fit):
    """Every Gaussian release a fit makes: its shape, sensitivity, multiplier and rounding."""
    calls = []
    with pytest.MonkeyPatch.context() as patch:
        for module, name in ((exact, "gaussian_release"), (power, "gaussian_release"),
                             (power, "symmetric_gaussian_release"),
                             (adaptive_power, "gaussian_release")):
            original = getattr(module, name)

            def record(value, sensitivity, multiplier, rng, *args, _original=original, **kw):
                calls.append((np.shape(value), np.asarray(sensitivity).tolist(), multiplier,
                              kw.get("rounding")))
                return _original(value, sensitivity, multiplier, rng, *args, **kw)
            patch.setattr(module, name, record)
        fit()
    return calls


@pytest.mark.parametrize("estimator", [PrivatePCA(3, **PRIVATE),
                                       PrivatePCA(3, method="power", n_iter=4, **PRIVATE),
                                       AdaptivePrivatePCA(2, n_iter=3, **PRIVATE)])
def test_sparse_rows_release_at_the_same_sites_with_the_same_allowances(estimator):
    S = _rows()
    on_dense = _recorded_releases(lambda: estimator.set_params(random_state=3).fit(S.toarray()))
    on_sparse = _recorded_releases(lambda: estimator.set_params(random_state=3).fit(S))
    assert len(on_dense) >= 3 and on_sparse == on_dense


def test_sparse_rows_are_densified_a_block_at_a_time(monkeypatch):
    S = _rows()
    seen = []
    original = sp.csr_matrix.toarray

    def toarray(self, *args, **kw):
        seen.append(self.shape[0])
        return original(self, *args, **kw)
    monkeypatch.setattr(sp.csr_matrix, "toarray", toarray)
    PrivatePCA(3, random_state=0, **PRIVATE).fit(S)
    PrivatePCA(3, method="power", **PRIVATE).fit(S)
    AdaptivePrivatePCA(2, random_state=0, **PRIVATE).fit(S)
    assert seen and max(seen) <= 100  # the fixture's blocks, never the whole N = 1200 rows


def test_sparse_fit_never_subtracts_a_mean_from_the_sparse_matrix(monkeypatch):
    def refuse(self, other):
        raise AssertionError("a mean subtracted from the sparse matrix")
    monkeypatch.setattr(sp.csr_matrix, "__sub__", refuse)
    S = _rows()
    fit = PrivatePCA(3, random_state=0, **PRIVATE).fit(S)
    fit.transform(S), fit.score(S), fit.score_samples(S)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_transform_score_and_score_samples_take_sparse_rows(dtype):
    S = _rows(dtype)
    X = S.toarray()
    fit = PrivatePCA(3, random_state=0, **PRIVATE).fit(X)
    np.testing.assert_array_equal(fit.transform(S), fit.transform(X))
    np.testing.assert_array_equal(fit.transform(S.tocsc()), fit.transform(X))
    assert fit.score(S) == fit.score(X)
    # a d x d product per block: float32's matrix kernels may round a block's rows differently
    np.testing.assert_allclose(fit.score_samples(S), fit.score_samples(X),
                               rtol=0 if dtype == np.float64 else 1e-6)
    whitened = PrivatePCA(3, whiten=True, random_state=0, **PRIVATE).fit(X)
    np.testing.assert_array_equal(whitened.transform(S), whitened.transform(X))


def test_a_stream_of_sparse_chunks_is_the_dense_stream():
    S = _rows()
    dense = PrivatePCA(3, block_size=300, random_state=2, **PRIVATE)
    stream = PrivatePCA(3, block_size=300, random_state=2, **PRIVATE)
    for start in range(0, N, 500):
        dense.partial_fit(S[start:start + 500].toarray())
        stream.partial_fit(S[start:start + 500].tocsc())
    _same(dense, stream)
    assert stream.n_samples_seen_ == N


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("kw", [dict(PRIVATE), dict(), dict(data_norm=2.0)])
def test_adaptive_pca_on_sparse_rows_is_the_dense_fit(dtype, kw):
    S = _rows(dtype)
    X = S.toarray()
    dense = AdaptivePrivatePCA(2, random_state=5, **kw).fit(X)
    fit = AdaptivePrivatePCA(2, random_state=5, **kw).fit(S.tocsc())
    tol = 1e-12 if dtype == np.float64 else 1e-5
    np.testing.assert_array_equal(fit.thresholds_, dense.thresholds_)
    for name in ("components_", "explained_variance_"):
        np.testing.assert_allclose(getattr(fit, name), getattr(dense, name), rtol=tol, atol=tol)
    assert fit.privacy_cost_ == dense.privacy_cost_ and fit.components_.dtype == dtype
    np.testing.assert_allclose(fit.transform(S), dense.transform(X), rtol=tol, atol=tol)
    assert fit.score(S) == pytest.approx(dense.score(X), rel=tol)


@pytest.mark.parametrize("estimator", [PrivatePCA, AdaptivePrivatePCA])
def test_groups_with_sparse_rows_are_refused_before_the_spend(estimator):
    accountant = PrivacyAccountant(epsilon=5.0, delta=1e-5)
    model = estimator(2, accountant=accountant, **PRIVATE)
    with pytest.raises(TypeError, match=f"{estimator.__name__}.fit with groups needs dense rows"):
        model.fit(_rows(), groups=np.arange(N) // 3)
    assert accountant.spent() == (0.0, 0.0)


def test_a_precomputed_matrix_must_be_dense():
    A = sp.identity(D, format="csr")
    with pytest.raises(TypeError, match="dense data is required"):
        PrivatePCA(2, input="precomputed").fit(A)


@pytest.mark.parametrize("fmt", ["csr", "csc"])
def test_lda_takes_sparse_counts(fmt):
    rng = np.random.default_rng(0)
    counts = sp.random(400, 12, density=0.4, format="csr", random_state=0,
                       data_rvs=lambda k: rng.integers(1, 4, size=k)).astype(np.float64)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        dense = PrivateLatentDirichletAllocation(3, random_state=0).fit(counts.toarray())
        fit = PrivateLatentDirichletAllocation(3, random_state=0).fit(counts.asformat(fmt))
    np.testing.assert_allclose(fit.components_, dense.components_, rtol=1e-8, atol=1e-10)


@pytest.mark.parametrize("estimator", [PrivatePCA, AdaptivePrivatePCA])
@pytest.mark.parametrize("fmt", ["csr", "csc"])
def test_a_seeded_search_on_sparse_rows_is_the_search_on_the_dense_rows(estimator, fmt):
    """A search splits sparse rows as it splits dense ones, and keys its noise (and hands its
    candidates seeds whose noise is keyed) by the dense rows they stand for: the same release.
    Before, a search refused sparse X although its candidates take it."""
    from dptensor.model_selection import PrivateGridSearchCV

    S = _rows()
    searches = [PrivateGridSearchCV(estimator(data_norm=3.0), {"n_components": [1, 2, 3]},
                                    epsilon=2.0, random_state=4) for _ in range(2)]
    dense, sparse = searches[0].fit(S.toarray()), searches[1].fit(S.asformat(fmt))
    assert sparse.best_params_ == dense.best_params_
    assert sparse.best_score_ == dense.best_score_
    assert sparse.privacy_cost_ == dense.privacy_cost_
    _same(sparse.best_estimator_, dense.best_estimator_)
    np.testing.assert_array_equal(sparse.transform(S), dense.transform(S.toarray()))


def test_a_search_refuses_sparse_rows_its_candidates_would_refuse_before_the_spend():
    from dptensor import StreamingTensorPower
    from dptensor.model_selection import PrivateGridSearchCV

    accountant = PrivacyAccountant(epsilon=50.0, delta=1e-5)
    pca = PrivateGridSearchCV(PrivatePCA(data_norm=3.0), {"n_components": [1, 2]}, epsilon=2.0,
                              accountant=accountant)
    with pytest.raises(TypeError, match="a private search with groups needs dense rows"):
        pca.fit(_rows(), groups=np.arange(N) // 3)  # the PCA family bounds a group dense only
    stream = PrivateGridSearchCV(StreamingTensorPower(data_norm=3.0, batch_size=200),
                                 {"n_components": [1, 2]}, epsilon=2.0, accountant=accountant)
    with pytest.raises(TypeError, match="StreamingTensorPower takes dense rows only"):
        stream.fit(_rows())
    assert accountant.spent() == (0.0, 0.0)
