"""dptensor.latent: moment identities and sensitivities by brute force, recovery against ground
truth, the privacy plan and its accounting, and the estimators' interface."""
import itertools
import math
import pickle
import warnings

import numpy as np
import pytest
import scipy.sparse as sp
from sklearn.base import clone
from sklearn.linear_model import LogisticRegression
from sklearn.pipeline import make_pipeline
from sklearn.utils.estimator_checks import parametrize_with_checks

from dptensor import BudgetExceededError, PrivacyAccountant
from dptensor._operators import moment_tensor
from dptensor.accounting import epsilon_of
from dptensor.datasets import gaussian_mixture_norm_bound, make_gaussian_mixture, make_lda_corpus
from dptensor.latent import PrivateGaussianMixture, PrivateLatentDirichletAllocation, match_rows
from dptensor.latent._pipeline import SHARES, plan_noise, release_mean, release_second, sym3, whiten
from dptensor.latent.gaussian_mixture import spherical_variance, whitened_bound
from dptensor.latent.lda import DOCUMENT_SENSITIVITY, DocumentPairOperator, document_moments
from dptensor.mechanisms import clip_rows
from dptensor.tensor_decomposition import row_sensitivity

pytestmark = pytest.mark.filterwarnings("ignore::dptensor.PrivacyWarning")


@pytest.fixture(scope="module")
def mixture():
    X, means, weights, _ = make_gaussian_mixture(40_000, 12, 3, separation=1.0, random_state=0)
    return X, means, weights


@pytest.fixture(scope="module")
def corpus():
    return make_lda_corpus(3000, 60, 3, alpha0=1.0, topic_concentration=0.1, doc_length=(30, 60),
                           random_state=1)


def brute_pair_and_triple(doc):
    """Averages of e_a e_b^T over ordered distinct position pairs, and of e_a e_b e_c over triples."""
    words = np.repeat(np.arange(len(doc)), doc.astype(int))
    d = len(doc)
    E2, E3 = np.zeros((d, d)), np.zeros((d, d, d))
    pairs = list(itertools.permutations(range(len(words)), 2))
    for p, q in pairs:
        E2[words[p], words[q]] += 1.0 / len(pairs)
    triples = list(itertools.permutations(range(len(words)), 3))
    for p, q, r in triples:
        E3[words[p], words[q], words[r]] += 1.0 / len(triples)
    return E2, E3


def docs_up_to(d, max_len):
    """Every count vector over d words with 3 <= length <= max_len."""
    for length in range(3, max_len + 1):
        for combo in itertools.combinations_with_replacement(range(d), length):
            yield np.bincount(combo, minlength=d).astype(float)


# -- the shared pipeline -----------------------------------------------------------------------

@pytest.mark.parametrize("queries, steps", [(1, 1), (2100, 1), (1, 7)])
def test_plan_spends_exactly_the_target(queries, steps):
    plan = plan_noise(1.0, 1e-5, queries, steps)
    assert epsilon_of(plan.event, 1e-5) == pytest.approx(1.0, rel=1e-9)
    second = sum(1 / z**2 for z in plan.z_second)
    mu2 = 1 / plan.z_mean**2 + second + queries / plan.z_third**2
    assert 1 / plan.z_mean**2 / mu2 == pytest.approx(SHARES["mean"])
    assert second / mu2 == pytest.approx(SHARES["second"]) and len(plan.z_second) == steps
    assert not plan_noise(np.inf, 1e-5, queries).private


def test_releases_add_noise_at_multiplier_times_sensitivity(rng):
    plan = plan_noise(1.0, 1e-5, 1)
    noise = release_mean(np.zeros(20000), 0.3, plan, rng)
    assert np.std(noise) == pytest.approx(0.3 * plan.z_mean, rel=0.03)
    E = release_second(np.zeros((200, 200)), 0.2, plan, rng)
    np.testing.assert_array_equal(E, E.T)
    assert np.std(E[np.triu_indices(200)]) == pytest.approx(0.2 * plan.z_second[0], rel=0.03)
    free = plan_noise(np.inf, 1e-5, 1)
    assert not release_mean(np.zeros(3), 0.3, free, rng).any()


def test_sym3_places_the_odd_index_everywhere(rng):
    G, m = rng.standard_normal((3, 3)), rng.standard_normal(3)
    G = G + G.T
    expected = (np.einsum("ab,c->abc", G, m) + np.einsum("ac,b->abc", G, m) + np.einsum("bc,a->abc", G, m))
    np.testing.assert_allclose(sym3(G[:, :, None] * m), expected)


def test_match_rows_finds_the_permutation(rng):
    true = rng.standard_normal((5, 4))
    perm, dist = match_rows(true[[3, 0, 4, 1, 2]] + 1e-3, true)
    assert perm.tolist() == [1, 3, 4, 0, 2] and dist.max() < 0.01


# -- Gaussian mixture: moments, sensitivity, recovery --------------------------------------------

def test_gmm_whitened_tensor_equals_dense_moment_contracted(rng):
    """data + correction == M3(W, W, W) with M3 formed densely in d^3 from its definition."""
    X, *_ = make_gaussian_mixture(500, 6, 2, random_state=2)
    n, d = X.shape
    model = PrivateGaussianMixture(2, random_state=0)
    ctx = model._prepare(X, np.inf)
    mean, second, *_ = model._first_moments(ctx)
    M2 = model._second_moment(ctx, mean, second, rng)
    wh = whiten(M2, 2, rng)
    data, correction, _ = model._whitened_third(ctx, wh, mean, second)
    s2 = ctx["variance"]
    eye = np.eye(d)
    M3 = moment_tensor(X) - s2 * (np.einsum("a,bc->abc", mean, eye) + np.einsum("b,ac->abc", mean, eye)
                                  + np.einsum("c,ab->abc", mean, eye))
    W = wh.W
    np.testing.assert_allclose(data.T + correction, np.einsum("abc,ai,bj,ck->ijk", M3, W, W, W), atol=1e-10)
    np.testing.assert_allclose(W.T @ M2 @ W, np.eye(2), atol=1e-10)


def test_spherical_variance_is_the_mean_of_the_bottom_eigenvalues(rng):
    V = np.linalg.qr(rng.standard_normal((8, 8)))[0]
    spectrum = np.array([9.0, 5.0, 2.0, 2.0, 2.0, 2.0, 2.0, 2.0])
    assert spherical_variance(V @ np.diag(spectrum) @ V.T, 3) == pytest.approx(2.0)
    noisy = np.array([9.0, 5.0, 2.5, 2.2, 2.0, 1.8, 1.6, 1.9])
    assert spherical_variance(V @ np.diag(noisy) @ V.T, 3) == pytest.approx(noisy[2:].mean())


def test_gmm_third_moment_row_sensitivity_brute_force(rng):
    """Replacing one row moves the whitened data tensor by at most 2 B_W^3 / n (Frobenius)."""
    n, d, k, B = 6, 5, 3, 2.0
    W = rng.standard_normal((d, k))
    bound_w = whitened_bound(B, W, 0.5, 1.0)
    assert bound_w <= B * np.linalg.norm(W, 2) + 1e-12
    worst = 0.0
    for _ in range(300):
        X = clip_rows(rng.standard_normal((n, d)) * 3, B)
        X2 = X.copy()
        X2[rng.integers(n)] = clip_rows(rng.standard_normal((1, d)) * 3, B)[0]
        T1, T2 = (moment_tensor(clip_rows(Z @ W, bound_w)) for Z in (X, X2))
        worst = max(worst, np.linalg.norm(T1 - T2))
    # the extreme pair: two rows along the top whitened direction, opposite signs, at the clip
    u = np.linalg.svd(W.T)[0][:, 0]
    Y = np.zeros((n, k))
    Y2 = Y.copy()
    Y[0], Y2[0] = bound_w * u, -bound_w * u
    extreme = np.linalg.norm(moment_tensor(Y) - moment_tensor(Y2))
    assert worst <= row_sensitivity(bound_w, n) + 1e-12
    assert extreme == pytest.approx(row_sensitivity(bound_w, n))


def test_gmm_recovers_means_weights_and_variance(mixture):
    X, means, weights = mixture
    model = PrivateGaussianMixture(3, random_state=0).fit(X)
    perm, dist = match_rows(model.means_, means)
    assert dist.max() / np.linalg.norm(means, axis=1).min() < 0.05
    np.testing.assert_allclose(model.weights_[perm], weights, atol=0.02)
    np.testing.assert_allclose(model.covariances_, 1.0, atol=0.02)
    assert model.method_ == "exact" and model.privacy_cost_.epsilon == math.inf
    # the mixture interface: posterior, labels and likelihood agree with the true model's
    proba = model.predict_proba(X[:500])
    np.testing.assert_allclose(proba.sum(axis=1), 1.0)
    assert np.array_equal(model.predict(X[:500]), proba.argmax(axis=1))
    truth = PrivateGaussianMixture(3)
    truth.means_, truth.weights_, truth.covariances_, truth.n_features_in_ = means, weights, np.ones(3), 12
    assert model.score(X) == pytest.approx(truth.score(X), abs=0.01)
    assert np.mean(model.predict(X) == perm.argsort()[truth.predict(X)]) > 0.99


@pytest.mark.parametrize("method", ["perturb", "power"])
def test_gmm_private_fit_is_accounted_and_accurate(mixture, method):
    X, means, _ = mixture
    bound = gaussian_mixture_norm_bound(means, 1.0, X.shape[1])
    budget = PrivacyAccountant(epsilon=10.0, delta=1e-5)
    model = PrivateGaussianMixture(3, epsilon=4.0, data_norm=bound, method=method, n_restarts=5,
                                   n_iter=10, accountant=budget, random_state=0).fit(X)
    assert budget.spent()[0] == pytest.approx(4.0, rel=1e-6)
    assert len(budget.history()) == 1 and model.method_ == method
    assert model.privacy_cost_.n_queries == (1 if method == "perturb" else 3 * 5 * 11) + 2
    _, dist = match_rows(model.means_, means)
    limit = 0.15 if method == "perturb" else 0.6  # the power method's many queries cost more noise
    assert dist.mean() / np.linalg.norm(means, axis=1).mean() < limit


def test_gmm_refusals(mixture):
    X, means, _ = mixture
    with pytest.raises(ValueError, match="data_norm"):
        PrivateGaussianMixture(3, epsilon=1.0).fit(X)
    with pytest.raises(ValueError, match="n_components"):
        PrivateGaussianMixture(13).fit(X)
    with pytest.raises(ValueError, match="method"):
        PrivateGaussianMixture(3, method="dense").fit(X)
    budget = PrivacyAccountant(epsilon=1.0, delta=1e-5)
    with pytest.raises(BudgetExceededError):
        PrivateGaussianMixture(3, epsilon=2.0, data_norm=10.0, accountant=budget).fit(X)
    with pytest.raises(BudgetExceededError):  # non-private costs epsilon = inf
        PrivateGaussianMixture(3, accountant=budget).fit(X)
    assert len(budget.history()) == 0


def test_gmm_holds_only_released_values_and_reproduces(mixture):
    X, means, _ = mixture
    kw = dict(epsilon=2.0, data_norm=gaussian_mixture_norm_bound(means, 1.0, 12), random_state=3)
    a, b = PrivateGaussianMixture(3, **kw).fit(X), PrivateGaussianMixture(3, **kw).fit(X)
    np.testing.assert_array_equal(a.means_, b.means_)
    fitted = {k for k in vars(a) if k.endswith("_") and not k.startswith("_")}
    assert fitted == {"means_", "weights_", "covariances_", "method_", "n_samples_", "n_features_in_",
                      "privacy_cost_"}
    assert not [k for k in vars(a) if k.startswith("_")]
    assert "Generator" not in repr(pickle.loads(pickle.dumps(a)).__dict__)


# -- LDA: moments, sensitivity, recovery ---------------------------------------------------------

def test_document_moments_are_the_position_averages():
    rng = np.random.default_rng(5)
    C = rng.integers(0, 3, size=(4, 5)).astype(float)
    C[:, 0] += 2  # every document has >= 3 words
    mean, second = document_moments(sp.csr_matrix(C))
    brute = [brute_pair_and_triple(c) for c in C]
    np.testing.assert_allclose(mean, np.mean(C / C.sum(1, keepdims=True), axis=0))
    np.testing.assert_allclose(second, np.mean([b[0] for b in brute], axis=0), atol=1e-12)


def test_lda_whitened_tensor_equals_triple_average_contracted():
    rng = np.random.default_rng(6)
    C = rng.integers(0, 3, size=(5, 4)).astype(float)
    C[:, 1] += 3
    model = PrivateLatentDirichletAllocation(2, alpha0=0.7, whitening="dense")
    X = model._validate(sp.csr_matrix(C), reset=True)
    ctx = model._prepare(X, np.inf)
    mean, second, *_ = model._first_moments(ctx)
    wh = whiten(model._second_moment(ctx, mean, second, rng), 2, rng)
    data, correction, _ = model._whitened_third(ctx, wh, mean, second)
    E3 = np.mean([brute_pair_and_triple(c)[1] for c in C], axis=0)
    a0, m1 = 0.7, mean
    M3 = (E3 - a0 / (a0 + 2) * (np.einsum("ab,c->abc", second, m1) + np.einsum("ac,b->abc", second, m1)
                               + np.einsum("bc,a->abc", second, m1))
          + 2 * a0**2 / ((a0 + 1) * (a0 + 2)) * np.einsum("a,b,c->abc", m1, m1, m1))
    W = wh.W
    np.testing.assert_allclose(data, np.einsum("abc,ai,bj,ck->ijk", E3, W, W, W), atol=1e-10)
    np.testing.assert_allclose(data + correction, np.einsum("abc,ai,bj,ck->ijk", M3, W, W, W), atol=1e-10)


def test_lda_sensitivities_brute_force():
    """Every document of length 3..6 over 3 words: the per-document terms of the mean and of the
    pair moment's upper triangle differ by at most sqrt(2) (attained), the whitened triple term by
    at most 2 r^3 (r the largest row norm of W)."""
    rng = np.random.default_rng(7)
    W = rng.standard_normal((3, 2))
    r = np.max(np.linalg.norm(W, axis=1))
    iu = np.triu_indices(3)
    means, pairs, triples = [], [], []
    for c in docs_up_to(3, 6):
        E2, E3 = brute_pair_and_triple(c)
        means.append(c / c.sum())
        pairs.append(E2[iu])
        triples.append(np.einsum("abc,ai,bj,ck->ijk", E3, W, W, W).ravel())

    def spread(terms):
        T = np.array(terms)
        return np.max(np.linalg.norm(T[:, None, :] - T[None, :, :], axis=2))

    assert spread(means) == pytest.approx(DOCUMENT_SENSITIVITY)
    assert spread(pairs) == pytest.approx(DOCUMENT_SENSITIVITY)
    assert spread(triples) <= row_sensitivity(r, 1) + 1e-12
    assert spread(triples) >= 0.5 * row_sensitivity(r, 1)  # the bound is not loose by much here


def test_lda_power_step_sensitivity_brute_force():
    """One power step releases M2 Q for orthonormal Q: over every pair of documents of length 3..5
    on 4 words, (E2(c) - E2(c')) Q has Frobenius norm at most sqrt(2), reached when the span of Q
    holds the two words of two one-word documents."""
    rng = np.random.default_rng(8)
    docs = list(docs_up_to(4, 5))
    pairs = np.array([brute_pair_and_triple(c)[0] for c in docs])
    for Q in (np.linalg.qr(rng.standard_normal((4, 2)))[0], np.eye(4)[:, :2]):
        moved = np.einsum("nab,bp->nap", pairs, Q).reshape(len(docs), -1)
        spread = np.max(np.linalg.norm(moved[:, None, :] - moved[None, :, :], axis=2))
        assert spread <= DOCUMENT_SENSITIVITY + 1e-12
    assert spread == pytest.approx(DOCUMENT_SENSITIVITY)  # Q spans e_0, e_1
    # the operator applies exactly M2 = E2 - alpha0/(alpha0+1) m m^T, implicitly
    C = sp.csr_matrix(np.array(docs[:30]))
    mean, second = document_moments(C)
    Q = np.linalg.qr(rng.standard_normal((4, 3)))[0]
    np.testing.assert_allclose(DocumentPairOperator(C, mean, 2.0).matmat(Q),
                               (second - 2.0 / 3.0 * np.outer(mean, mean)) @ Q, atol=1e-12)


@pytest.mark.parametrize("epsilon", [np.inf, 30.0])
def test_lda_power_whitening_matches_dense(corpus, epsilon):
    C, topics, _ = corpus
    kw = dict(epsilon=epsilon, random_state=0)
    dense = PrivateLatentDirichletAllocation(3, whitening="dense", **kw).fit(C)
    power = PrivateLatentDirichletAllocation(3, whitening="power", **kw).fit(C)
    assert (dense.whitening_, power.whitening_) == ("dense", "power")
    if np.isinf(epsilon):  # the same whitening up to the power method's tolerance
        perm, _ = match_rows(power.components_, dense.components_)
        np.testing.assert_allclose(power.components_[perm], dense.components_, atol=1e-6)
    else:  # one Gaussian release for the mean, R for the power steps, one for the third moment
        steps = power.privacy_cost_.n_queries - 2
        assert steps > 1 and power.privacy_cost_.epsilon == pytest.approx(30.0)
        for model in (dense, power):
            perm, _ = match_rows(model.components_, topics)
            assert np.abs(model.components_[perm] - topics).sum(axis=1).mean() < 0.3


def test_lda_recovers_topics_and_proportions(corpus):
    C, topics, alpha = corpus
    model = PrivateLatentDirichletAllocation(3, alpha0=1.0, random_state=0).fit(C)
    perm, _ = match_rows(model.components_, topics)
    l1 = np.abs(model.components_[perm] - topics).sum(axis=1)
    assert l1.max() < 0.15
    np.testing.assert_allclose(model.components_.sum(axis=1), 1.0)
    np.testing.assert_allclose(model.alpha_[perm], alpha, atol=0.1)
    theta = model.transform(C[:50])
    np.testing.assert_allclose(theta.sum(axis=1), 1.0)
    assert theta.shape == (50, 3) and model.perplexity(C[:200]) < 60  # the vocabulary has 60 words


def test_lda_private_fit_is_accounted(corpus):
    C, topics, _ = corpus
    budget = PrivacyAccountant(epsilon=np.inf, delta=1e-5)
    model = PrivateLatentDirichletAllocation(3, epsilon=1.0, accountant=budget, random_state=0).fit(C)
    assert budget.spent()[0] == pytest.approx(1.0, rel=1e-6)
    assert model.privacy_cost_.private and np.isfinite(model.components_).all()
    # an error that falls with epsilon: at a huge budget the private fit matches the exact one
    exact = PrivateLatentDirichletAllocation(3, random_state=0).fit(C)
    loose = PrivateLatentDirichletAllocation(3, epsilon=1e5, random_state=0).fit(C)
    perm, _ = match_rows(loose.components_, exact.components_)
    assert np.abs(loose.components_[perm] - exact.components_).sum(axis=1).max() < 0.02


def test_lda_refuses_what_is_not_a_word_count(corpus):
    C = corpus[0]
    with pytest.raises(ValueError, match="word counts"):
        PrivateLatentDirichletAllocation(3).fit(C * 0.5)
    short = C[:5].toarray()
    short[0] = 0
    short[0, 0] = 2
    with pytest.raises(ValueError, match="at least 3 words"):
        PrivateLatentDirichletAllocation(3).fit(short)
    with pytest.raises(ValueError, match="alpha0"):
        PrivateLatentDirichletAllocation(3, alpha0=0).fit(C)


def test_reuters_loader_and_topics():
    pytest.importorskip("lda")
    from dptensor.datasets import load_reuters

    C, vocab, titles = load_reuters()
    assert C.shape == (395, 4258) == (len(titles), len(vocab))
    model = PrivateLatentDirichletAllocation(10, random_state=0).fit(C)
    top = {vocab[j] for row in model.components_ for j in np.argsort(-row)[:5]}
    assert {"pope", "elvis", "yeltsin"} <= top  # stories the corpus is known for


# -- scikit-learn's contract -----------------------------------------------------------------------

@parametrize_with_checks([PrivateGaussianMixture(2, n_restarts=3, n_iter=5, random_state=0)])
def test_gmm_sklearn_contract(estimator, check):
    check(estimator)


def test_lda_in_a_pipeline_with_shared_accountant(corpus):
    """scikit-learn's generic checks feed real-valued data, which this model refuses (it needs word
    counts); the contract it relies on is checked here: clone, pipeline, pickle, feature names."""
    C, *_ = corpus
    budget = PrivacyAccountant(epsilon=5.0, delta=1e-5)
    lda = PrivateLatentDirichletAllocation(3, epsilon=1.0, accountant=budget, random_state=0)
    copy = clone(lda)
    assert copy.get_params() == lda.get_params() and copy.accountant is budget
    pipe = make_pipeline(copy, LogisticRegression()).fit(C, np.arange(C.shape[0]) % 2)
    assert pipe.predict(C[:3]).shape == (3,) and len(budget.history()) == 1
    fitted = pipe[0]
    assert list(fitted.get_feature_names_out()) == [f"privatelatentdirichletallocation{i}" for i in range(3)]
    restored = pickle.loads(pickle.dumps(fitted))
    np.testing.assert_array_equal(restored.transform(C[:4]), fitted.transform(C[:4]))


def test_gmm_on_dask_rows_matches_in_memory(mixture):
    da = pytest.importorskip("dask.array")
    X, means, _ = mixture
    X = X[:6000]
    kw = dict(epsilon=2.0, data_norm=gaussian_mixture_norm_bound(means, 1.0, 12), random_state=4)
    here = PrivateGaussianMixture(3, **kw).fit(X)
    there = PrivateGaussianMixture(3, **kw).fit(da.from_array(X, chunks=(1000, 12)))
    np.testing.assert_allclose(there.means_, here.means_, atol=1e-9)
    np.testing.assert_allclose(there.weights_, here.weights_, atol=1e-12)
    assert there.privacy_cost_.epsilon == pytest.approx(2.0)


@pytest.mark.parametrize("make, whitening", [
    (lambda: PrivateGaussianMixture(2, epsilon=1.0, delta=1e-6, data_norm=2.0, random_state=0), None),
    (lambda: PrivateGaussianMixture(2, random_state=0), None),
    (lambda: PrivateLatentDirichletAllocation(3, epsilon=1.0, delta=1e-6, random_state=0), "dense"),
    (lambda: PrivateLatentDirichletAllocation(3, epsilon=1.0, delta=1e-6, random_state=0), "power"),
])
def test_privacy_cost_previews_what_the_fit_records_without_data(make, whitening):
    rng = np.random.default_rng(3)
    if whitening is None:
        X = rng.standard_normal((400, 6)) / 3
        est = make()
    else:
        X = rng.poisson(1.0, (400, 30)).astype(float)
        X[:, 0] += 3  # every document has at least 3 words
        est = make().set_params(whitening=whitening)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        preview = est.privacy_cost(*X.shape)
        assert preview == est.fit(X).privacy_cost_
    assert preview.n_queries > 0 if np.isfinite(est.epsilon) else preview.epsilon == np.inf


def test_privacy_cost_refuses_a_private_preview_without_a_bound():
    with pytest.raises(ValueError, match="data_norm is required"):
        PrivateGaussianMixture(2, epsilon=1.0).privacy_cost(100, 6)
