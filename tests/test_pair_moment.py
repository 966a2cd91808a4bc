"""The topic model's pair product ``C^T diag(w) C`` (dptensor.algorithms.pair_moment).

The upper triangle, all that Analyze Gauss releases, must be scipy's sparse product bit for bit
(the same chain of additions per entry, so the same rounding and the same Rounding allowance),
on the compiled path, on its pure-Python source and on the fallback; a seeded private fit
releases the same values, without groups and with them.
"""
import numpy as np
import pytest
import scipy.sparse as sp

from dptensor.algorithms import pair_moment
from dptensor.algorithms.pair_moment import _upper_pairs, weighted_gram, weighted_gram_scipy
from dptensor.datasets import make_lda_corpus
from dptensor.latent import PrivateLatentDirichletAllocation
from dptensor.latent import lda


def _upper(A):
    return A[np.triu_indices(len(A))]


def _counts(rng, n, d, density=0.3):
    """Canonical CSR counts with empty rows, and weights with zeros and wide magnitudes."""
    C = sp.random(n, d, density=density, format="csr", random_state=rng,
                  data_rvs=lambda m: rng.integers(1, 9, m).astype(float))
    C.sum_duplicates()
    w = rng.uniform(0.0, 1.0, n) * 10.0 ** rng.integers(-8, 3, n)
    w[rng.random(n) < 0.2] = 0.0
    return C, w


def _assert_scipy_upper(C, w, got):
    ref = weighted_gram_scipy(C, w)
    assert np.array_equal(_upper(got), _upper(ref))  # bit for bit, not within a tolerance
    assert np.array_equal(got, got.T)
    np.testing.assert_allclose(got, ref, rtol=1e-14, atol=0)  # the lower triangle: a mirror


def test_the_kernels_source_sums_each_entry_as_scipy_does_across_row_blocks():
    rng = np.random.default_rng(0)
    # more rows than one block (2048), so the blocks' order matters; pure Python, numba or not
    C, w = _counts(rng, pair_moment.BLOCK_ROWS + 300, 6, density=0.5)
    upper = _upper_pairs(C.indptr, C.indices, C.data, w, C.shape[1])
    assert np.array_equal(np.tril(upper, -1), np.zeros_like(upper))
    _assert_scipy_upper(C, w, upper + np.triu(upper, 1).T)


@pytest.mark.parametrize("use_kernel", [True, False])
def test_weighted_gram_is_scipys_upper_triangle_mirrored(use_kernel):
    rng = np.random.default_rng(1)
    C, w = _counts(rng, 500, 40)
    _assert_scipy_upper(C, w, weighted_gram(C, w, use_kernel=use_kernel))


def test_the_compiled_kernel_matches_scipy_on_a_topic_corpus():
    pytest.importorskip("numba")
    assert pair_moment.compiled_kernel() is not None
    C, _, _ = make_lda_corpus(3000, 300, 5, random_state=2)
    D = lda._pair_weights(lda._counts(C), (None, 0.05))  # clipped: weights below 1 / (l (l-1))
    _assert_scipy_upper(C, D, weighted_gram(C, D))


def _scipy_pairs(C, weights, use_kernel=True):
    return weighted_gram_scipy(C, weights)  # the old product, both triangles as scipy gave them


@pytest.mark.filterwarnings("ignore:the released m2_eigenvalues_")  # a small corpus, noisy
@pytest.mark.parametrize("groups", [False, True])
def test_a_seeded_private_dense_fit_releases_what_the_scipy_product_gave(monkeypatch, groups):
    C, _, _ = make_lda_corpus(1500, 60, 3, random_state=4)
    labels = np.arange(C.shape[0]) // 3 if groups else None

    def fit():
        model = PrivateLatentDirichletAllocation(3, epsilon=2.0, delta=1e-5, whitening="dense",
                                                 random_state=5)
        return model.fit(C, groups=labels) if groups else model.fit(C)

    new = fit()
    monkeypatch.setattr(lda, "weighted_gram", _scipy_pairs)
    old = fit()
    assert new.whitening_ == "dense"
    assert np.array_equal(new.components_, old.components_)
    assert np.array_equal(new.alpha_, old.alpha_)
    assert np.array_equal(new.m2_eigenvalues_, old.m2_eigenvalues_)
