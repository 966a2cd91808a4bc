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
