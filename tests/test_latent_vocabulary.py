"""The topic model's whitening over its most frequent words (``whitening`` a number of words)."""
import itertools

import numpy as np
import pytest
import scipy.sparse as sp

from dptensor import PrivacyAccountant
from dptensor.algorithms import vocabulary as voc
from dptensor.algorithms.moments import m2_noise_level
from dptensor.datasets import make_lda_corpus
from dptensor.latent import PrivateGaussianMixture, PrivateLatentDirichletAllocation, match_rows
from dptensor.latent import lda
from dptensor.latent.lda import DOCUMENT_SENSITIVITY, document_moments, document_weights
from expected_warnings import noise_dominated

pytestmark = pytest.mark.filterwarnings("ignore::dptensor.PrivacyWarning")


@pytest.fixture(scope="module")
def corpus():
    return make_lda_corpus(3000, 60, 3, alpha0=1.0, topic_concentration=0.1, doc_length=(30, 60),
                           random_state=1)


def _pair_term(doc):
    """``(c c^T - diag c) / (l (l - 1))``: the average of e_a e_b^T over distinct positions."""
    length = doc.sum()
    return (np.outer(doc, doc) - np.diag(doc)) / (length * (length - 1.0))


def _docs(d, max_len, min_len=3):
    for length in range(min_len, max_len + 1):
        for combo in itertools.combinations_with_replacement(range(d), length):
            yield np.bincount(combo, minlength=d).astype(float)


def _error(topics, true):
    perm, _ = match_rows(topics, true)
    return float(np.mean(np.abs(topics[perm] - true).sum(axis=1)))


def test_pair_columns_are_the_pair_sums_columns():
    """The chosen columns computed alone (blocks of documents, never d x d) are those of the
    weighted pair sums, with the diagonal's correction on the chosen words' rows only."""
    rng = np.random.default_rng(0)
    C, _, _ = make_lda_corpus(9000, 30, 3, doc_length=(0, 12), random_state=0)  # > one block
    C = sp.csr_matrix(C)
    tau = (0.3, 0.05)
    words = np.sort(rng.choice(30, 7, replace=False))
    (whole,) = lda._pair_sums(C, tau)
    (columns,) = lda._column_sums(C, tau, words)
    np.testing.assert_allclose(columns, whole[:, words], rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("tau", [(None, None), (0.6, 0.3)])
@pytest.mark.parametrize("words", [[0, 2], [1], [0, 1, 2, 3]])
def test_column_query_sensitivity_brute_force(tau, words):
    """Every document of 3..6 words over 4, weighted as a fit weighs it: the released query of its
    pair term's columns moves by at most sqrt(2) tau_2 between two documents (the whole matrix's
    Frobenius bound), reached by two one-word documents when both words are chosen."""
    words = np.asarray(words)
    docs = np.array(list(_docs(4, 6)))
    _, weight = document_weights(sp.csr_matrix(docs), tau)
    queries = np.array([voc.column_query(_pair_term(c)[:, words] * s, words)
                        for c, s in zip(docs, weight)])
    spread = np.max(np.linalg.norm(queries[:, None] - queries[None, :], axis=2))
    bound = DOCUMENT_SENSITIVITY * (tau[1] or 1.0)
    assert spread <= bound * (1 + 1e-12)
    if tau[0] is None and len(words) >= 2:
        assert spread == pytest.approx(bound)
    # the query's norm never exceeds the whole symmetric matrix's Frobenius norm (any matrix)
    rng = np.random.default_rng(1)
    for _ in range(20):
        A = rng.standard_normal((4, 4))
        A = A + A.T
        assert np.linalg.norm(voc.column_query(A[:, words], words)) <= np.linalg.norm(A) + 1e-12


def test_released_columns_carry_analyze_gauss_noise():
    """One release: the m x m block comes back symmetric, each entry with the dense release's
    noise in the Frobenius geometry (z s on the diagonal, z s / sqrt(2) elsewhere); outside the
    block, z s / sqrt(2) too; a fixed seed gives the same noise."""
    words = np.array([1, 4, 5])
    z, s, reps = 2.0, 0.5, 4000
    rng = np.random.default_rng(2)
    draws = np.array([voc.release_columns(np.zeros((7, 3)), words, s, z, rng, rounding=None)
                      for _ in range(reps)])
    np.testing.assert_array_equal(draws[:, words], np.swapaxes(draws[:, words], 1, 2))
    std = draws.std(axis=0)
    diagonal = std[words, np.arange(3)]
    np.testing.assert_allclose(diagonal, z * s, rtol=0.06)
    off = np.ones((7, 3), bool)
    off[words, np.arange(3)] = False
    np.testing.assert_allclose(std[off], z * s / np.sqrt(2.0), rtol=0.06)
    a = voc.release_columns(np.ones((7, 3)), words, s, z, np.random.default_rng(5), rounding=None)
    b = voc.release_columns(np.ones((7, 3)), words, s, z, np.random.default_rng(5), rounding=None)
    np.testing.assert_array_equal(a, b)


def test_vocabulary_whitening_from_exact_moments_maps_every_word_back(corpus):
    """From the exact moments: W is 0 outside the chosen words and whitens their M2 block, and
    the map back on the other words is M2's columns through W, so a noiseless fit recovers the
    topics on every word (as the dense whitening does) from 20 of the 60 words."""
    C, topics, _ = corpus
    mean, second = document_moments(C)
    c = 0.5  # alpha0 / (alpha0 + 1)
    words = voc.frequent_words(mean, 20)
    w = voc.vocabulary_whitening(second[:, words], words, mean, c, 3, np.random.default_rng(0),
                                 private=False)
    M2 = second - c * np.outer(mean, mean)
    outside = np.setdiff1d(np.arange(60), words)
    assert np.all(w.W[outside] == 0)
    np.testing.assert_allclose(w.W.T @ M2 @ w.W, np.eye(3), atol=1e-8)
    np.testing.assert_allclose(w.unwhiten[outside], M2[outside][:, words] @ w.W[words],
                               atol=1e-12)
    dense = PrivateLatentDirichletAllocation(3, random_state=0).fit(C)
    few = PrivateLatentDirichletAllocation(3, whitening=20, random_state=0).fit(C)
    assert few.whitening_ == "vocabulary" and dense.whitening_ == "power"
    assert _error(few.components_, topics) < 1.5 * _error(dense.components_, topics) + 0.02
    assert _error(few.components_, topics) < 0.25


def test_frequent_words_are_the_largest_released_frequencies():
    mean = np.array([0.1, 0.3, 0.3, 0.05, 0.25])
    np.testing.assert_array_equal(voc.frequent_words(mean, 2), [1, 2])
    np.testing.assert_array_equal(voc.frequent_words(mean, 3), [1, 2, 4])


@noise_dominated("m2_eigenvalues_")  # the third topic of 3000 documents at epsilon = 2
def test_a_private_vocabulary_fit_spends_as_the_dense_one_and_records_its_noise(corpus):
    """The columns are part of Analyze Gauss's release: the same plan and cost as the dense
    whitening; m2_eigenvalues_noise_ is the m x m block's semicircle edge (sqrt(m / d) of the
    dense one's), which the preview (expected_noise) gives from public values; a seed gives the
    same fit, another seed other noise."""
    C, _, _ = corpus
    kw = dict(epsilon=2.0, delta=1e-5, doc_clip=None, random_state=0)
    dense = PrivateLatentDirichletAllocation(3, whitening="dense", **kw).fit(C)
    few = PrivateLatentDirichletAllocation(3, whitening=15, **kw).fit(C)
    assert few.privacy_cost_ == dense.privacy_cost_
    assert few.whitening_ == "vocabulary" and dense.whitening_ == "dense"
    edge = m2_noise_level(1.0, 15, 3, False) / m2_noise_level(1.0, 60, 3, False)
    assert edge < 0.55  # about sqrt(15 / 60)
    # up to the released mean weight each divides by (1 here, but for its noise)
    np.testing.assert_allclose(few.m2_eigenvalues_noise_, dense.m2_eigenvalues_noise_ * edge,
                               rtol=0.05)
    preview = PrivateLatentDirichletAllocation(3, whitening=15, **kw).expected_noise(*C.shape)
    np.testing.assert_allclose(few.m2_eigenvalues_noise_, preview.noise, rtol=0.05)
    again = PrivateLatentDirichletAllocation(3, whitening=15, **kw).fit(C)
    np.testing.assert_array_equal(again.components_, few.components_)
    other = PrivateLatentDirichletAllocation(3, whitening=15, **{**kw, "random_state": 1}).fit(C)
    assert not np.array_equal(other.m2_eigenvalues_, few.m2_eigenvalues_)


BAD_WORDS = [0, -1, 2, 61, 2.0, 2.5, True, False, None, "vocabulary", "Auto", "dens"]


@pytest.mark.parametrize("whitening", BAD_WORDS)
def test_the_whitening_words_are_checked_before_the_spend(corpus, whitening):
    """Fewer words than components, more than the vocabulary's 60 (once fitted silently as the
    dense release), a float, a bool or a misspelt name: refused by fit and by the previews, with
    nothing in the ledger."""
    C, _, _ = corpus
    budget = PrivacyAccountant(10.0, 1e-5)
    model = PrivateLatentDirichletAllocation(3, epsilon=1.0, whitening=whitening,
                                             accountant=budget)
    for call in (lambda: model.fit(C), lambda: model.privacy_cost(*C.shape),
                 lambda: model.expected_noise(*C.shape)):
        with pytest.raises(ValueError, match="whitening"):
            call()
    assert budget.history() == [] and not hasattr(model, "components_")


def test_the_whitening_words_message_names_both_bounds(corpus):
    C, _, _ = corpus
    for words in (2, 61):
        with pytest.raises(ValueError, match="at least n_components=3 .* at most n_features=60"):
            PrivateLatentDirichletAllocation(3, epsilon=1.0, whitening=words).fit(C)
    assert PrivateLatentDirichletAllocation(3, whitening=60).privacy_cost(*C.shape)
    with pytest.raises(ValueError, match="whitening must be one of"):
        PrivateLatentDirichletAllocation(3, epsilon=1.0, whitening=True).fit(C)
    X = np.random.default_rng(0).standard_normal((200, 6))
    budget = PrivacyAccountant(10.0, 1e-5)
    for words in (3, "Dense"):  # the mixture takes no number of words
        with pytest.raises(ValueError, match=r"whitening must be one of \('auto', 'dense', "
                                             r"'power'\), got"):
            PrivateGaussianMixture(2, epsilon=1.0, data_norm=4.0, whitening=words,
                                   accountant=budget).fit(X)
    assert budget.history() == []


def test_the_memory_advice_names_the_whitening_each_model_is_best_served_by():
    """The topic model's power method learned the least of its whitenings (choosing.rst), so
    its memory refusal advises fewer words' columns first; the mixture's, the power method."""
    _, advice = PrivateLatentDirichletAllocation(3, epsilon=1.0)._memory_estimate(10**5, 6000)
    assert advice.startswith("Use fewer words' columns (whitening=m")
    _, advice = PrivateGaussianMixture(3, epsilon=1.0)._memory_estimate(10**5, 6000)
    assert advice.startswith("Use whitening='power'")


def test_auto_whitening_words_read_public_values_only(corpus, monkeypatch):
    """The rule reads the vocabulary's size only: the dense release up to AUTO_WORDS words, the
    columns of the AUTO_WORDS most frequent beyond (never the power method, nor a d x d matrix,
    in a private fit); a fit without privacy keeps its exact implicit path."""
    assert voc.auto_whitening_words(2000) == 2000 == voc.AUTO_WORDS
    assert voc.auto_whitening_words(30_000) == 2000 and voc.auto_whitening_words(60) == 60
    C, _, _ = corpus
    kw = dict(epsilon=2.0, delta=1e-5, random_state=0)
    assert PrivateLatentDirichletAllocation(3, **kw).fit(C).whitening_ == "dense"
    monkeypatch.setattr(voc, "AUTO_WORDS", 20)  # as if the corpus's 60 words were many
    model = PrivateLatentDirichletAllocation(3, **kw)
    dense = PrivateLatentDirichletAllocation(3, whitening="dense", **kw)
    saved = dense._fit_memory(3000, 60, 3, False, 0)[0] - model._fit_memory(3000, 60, 3, False,
                                                                            0)[0]
    assert saved == 7 * 60 * (60 - 20) * 8  # the d x 20 columns' bound, not the d x d matrix's
    model.fit(C)
    assert model.whitening_ == "vocabulary"
    assert PrivateLatentDirichletAllocation(3).fit(C).whitening_ == "power"


def test_the_frequent_words_columns_on_dask_counts_match_in_memory(corpus, same_noise):
    """The columns are one more reduction over the row chunks: the same released topics."""
    da = pytest.importorskip("dask.array")
    C = corpus[0][:1200].toarray()
    kw = dict(epsilon=20.0, whitening=20, random_state=5)
    here = PrivateLatentDirichletAllocation(3, **kw).fit(C)
    there = PrivateLatentDirichletAllocation(3, **kw).fit(da.from_array(C, chunks=(250, -1)))
    np.testing.assert_allclose(there.components_, here.components_, atol=1e-9)
    assert there.whitening_ == here.whitening_ == "vocabulary"


def test_entry_noise_std_is_the_first_order_noise_of_the_topics_on_every_word():
    """Topics from released columns (the chosen words' block and every other word's row): over
    200 draws their entries move with the std entry_noise_std predicts, inside the chosen words
    (as the dense whitening's) and outside them (each row's noise through Lambda^(-1/2))."""
    rng = np.random.default_rng(4)
    d, k, s, c = 80, 3, 2e-5, 0.5
    mu = rng.dirichlet(np.full(d, 0.3), size=k)
    w = np.array([0.2, 0.3, 0.5])
    m = mu.T @ np.array([0.3, 0.3, 0.4])
    E2 = (mu.T * w) @ mu + c * np.outer(m, m)
    words = voc.frequent_words(m, 30)
    clean = voc.vocabulary_whitening(E2[:, words], words, m, c, k, rng, private=False)
    V = np.sqrt(w)[:, None] * (clean.W.T @ mu.T).T  # rows v_i, orthonormal
    np.testing.assert_allclose(V @ V.T, np.eye(k), atol=1e-9)
    scale = 1.0 / np.sqrt(w)
    draws, predicted = [], []
    for _ in range(200):
        released = voc.release_columns(E2[:, words], words, s, 1.0, rng, rounding=None)
        noisy = voc.vocabulary_whitening(released, words, m, c, k, rng, noise=s / np.sqrt(2))
        signs = np.sign(np.sum(noisy.vectors * clean.vectors, axis=0))
        draws.append((scale[:, None] * V * signs) @ noisy.unwhiten.T)
        predicted.append(voc.entry_noise_std(V * signs, scale, noisy))
    observed, predicted = np.std(np.array(draws), axis=0), np.mean(predicted, axis=0)
    outside = np.setdiff1d(np.arange(d), words)
    for part in (words, outside):
        np.testing.assert_allclose(observed[:, part].mean(axis=1),
                                   predicted[:, part].mean(axis=1), rtol=0.1)
    # and the map back is unbiased to first order: the mean topic is the true one
    np.testing.assert_allclose(np.mean(draws, axis=0), mu, atol=3 * observed.max() / np.sqrt(200))
