"""Adversarial checks of the clipped power method's pooled fallback and the whitening over the
frequent words: each test is a spy or a brute force that the version before it got wrong (or,
for the brute force, a bound the release relies on)."""
import warnings

import numpy as np

import dptensor.algorithms.exact as exact
import dptensor.algorithms.pca_methods as pca_methods
from dptensor import PrivatePCA


def _one_direction_rows(n=400, d=5, seed=0):
    """Rows whose energy sits in one direction, near the bound: the start's radius is over a
    quarter of it, so the clipped method pools its releases into Analyze Gauss."""
    rng = np.random.default_rng(seed)
    return (np.outer(rng.choice([-1.0, 1.0], n), np.eye(d)[0]) * 0.9
            + 0.01 * rng.standard_normal((n, d)))


def test_each_pooled_release_rounds_the_exact_gram_on_its_own_grid(monkeypatch):
    """The pooled fallback releases the Gram once more per planned step, at that step's
    multiplier. A release at multiplier ``z`` is exact for its sensitivity only if its value is
    the exact sum rounded on its own grid (``grid_step(s z)``, error <= half that step a
    coordinate, which the release's slack covers). The start's value is rounded on the start's
    grid; a step's multiplier is smaller (it has more of the budget), its grid finer, so reusing
    the start's value put twice the error the step's slack covers on each coordinate: a
    sensitivity above the accounted one. At epsilon 1.3 the two grids differ (checked)."""
    stats, seen = [], []
    prepare, release = exact.Exact.for_release, pca_methods.symmetric_gaussian_release

    def for_release(self, sensitivity, z):
        stats.append(self)
        return prepare(self, sensitivity, z)

    def spy(value, sensitivity, z, rng, **kw):
        seen.append((np.array(value), float(sensitivity), float(z)))
        return release(value, sensitivity, z, rng, **kw)

    monkeypatch.setattr(exact.Exact, "for_release", for_release)
    monkeypatch.setattr(pca_methods, "symmetric_gaussian_release", spy)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        PrivatePCA(2, epsilon=1.3, data_norm=1.0, method="clipped_power",
                   random_state=0).fit(_one_direction_rows())
    gram = stats[-1]  # the Gram statistic (the mean's and total's come first)
    assert len(seen) == 3  # the start and one release per planned step: the pooled route
    assert len({z for _, _, z in seen}) > 1
    for value, sensitivity, z in seen:
        np.testing.assert_array_equal(value, prepare(gram, sensitivity, z))


def test_the_frequent_words_columns_move_by_at_most_the_dense_sensitivity():
    """Brute force over every document of at most 3 of each of 4 words (and at least 3 words):
    the released query of the pair moment's columns (the m x m block's upper triangle, the
    other words' rows times sqrt(2)) of one clipped document's term moves by at most
    ``sqrt(2) tau_2`` when the document is replaced (the sensitivity the release is charged
    at, ``DOCUMENT_SENSITIVITY``), for several chosen word sets and clipping bounds. The
    bound is reached (two documents on disjoint words of S): it is no looser than claimed."""
    import itertools

    import scipy.sparse as sp

    from dptensor.algorithms.vocabulary import column_query
    from dptensor.latent.lda import DOCUMENT_SENSITIVITY, _column_sums

    docs = [np.array(c, float) for c in itertools.product(range(4), repeat=4) if sum(c) >= 3]
    worst = 0.0
    for tau in [(None, None), (0.6, 0.3), (0.9, 0.05)]:
        for words in [np.array([0]), np.array([1, 3]), np.array([0, 1, 2])]:
            Q = np.array([column_query(_column_sums(sp.csr_matrix(c[None]), tau, words)[0],
                                       words) for c in docs])
            G = Q @ Q.T
            sq = np.diag(G)
            far = np.sqrt(np.maximum(sq[:, None] + sq[None] - 2.0 * G, 0.0)).max()
            worst = max(worst, far / (DOCUMENT_SENSITIVITY * (tau[1] or 1.0)))
    assert 0.999 < worst <= 1.0 + 1e-12


def _overflowing_duplicates():
    """An int8 CSR matrix whose first row stores 100 twice at column 0: ``toarray`` sums them in
    int8 (-56), the fit reads them in float64 (200)."""
    import scipy.sparse as sp

    X = np.random.default_rng(0).integers(-3, 4, (300, 5)).astype(np.int8)
    S = sp.csr_matrix(X)
    n0 = S.indptr[1]
    data = np.concatenate([[100, 100], S.data[n0:]]).astype(np.int8)
    indices = np.concatenate([[0, 0], S.indices[n0:]]).astype(np.int32)
    indptr = np.concatenate([[0], S.indptr[1:] - n0 + 2]).astype(np.int32)
    return sp.csr_matrix((data, indices, indptr), shape=X.shape)


def test_sparse_duplicates_summed_otherwise_by_the_fit_never_share_the_dense_rows_noise():
    """A fit keys sparse rows as the dense rows ``toarray`` gives (``AsDense``) so that the two
    agree. Duplicate entries are summed by ``toarray`` in the matrix's own dtype, by the fit in
    float64: an int8 pair of 100s is -56 in the key and 200 in the fit. A seeded fit of it then
    drew the noise of the fit of the dense -56 row, on other data: the difference of the two
    releases was the difference of their statistics, without noise."""
    from dptensor.mechanisms import randomness

    D = _overflowing_duplicates()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        exact_sparse = PrivatePCA(2, data_norm=300.0).fit(D)
        exact_dense = PrivatePCA(2, data_norm=300.0).fit(D.toarray())
    # the premise: the two fits read different data
    assert not np.allclose(exact_sparse.explained_variance_, exact_dense.explained_variance_)
    assert randomness.data_digest(randomness.AsDense(D)) != randomness.data_digest(D.toarray())
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        a = PrivatePCA(2, epsilon=1.0, data_norm=300.0, random_state=0).fit(D)
        b = PrivatePCA(2, epsilon=1.0, data_norm=300.0, random_state=0).fit(D.toarray())
    noise_a = a.explained_variance_ - exact_sparse.explained_variance_
    noise_b = b.explained_variance_ - exact_dense.explained_variance_
    assert not np.allclose(noise_a, noise_b)


def test_sparse_rows_without_duplicates_still_key_as_their_dense_rows():
    """Explicit zeros and unsorted indices change no value the fit reads: still the dense key."""
    import scipy.sparse as sp

    from dptensor.mechanisms import randomness

    X = np.random.default_rng(1).integers(-3, 4, (50, 6)).astype(np.float64)
    S = sp.csr_matrix(X)
    S.data[:4] = 0.0  # explicit zeros, stored
    order = np.arange(S.indptr[1])[::-1]  # the first row's indices unsorted
    S.indices[:S.indptr[1]], S.data[:S.indptr[1]] = S.indices[order], S.data[order]
    S = sp.csr_matrix((S.data, S.indices, S.indptr), shape=S.shape)
    assert not S.has_sorted_indices
    assert randomness.data_digest(randomness.AsDense(S)) == randomness.data_digest(S.toarray())
