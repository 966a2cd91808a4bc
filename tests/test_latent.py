"""dptensor.latent: moment identities and sensitivities by brute force, recovery against ground
truth, the privacy plan and its accounting, and the estimators' interface."""
import itertools
import math
import pickle
import tracemalloc
import warnings

import numpy as np
import pytest
import scipy.sparse as sp
from sklearn.base import clone
from sklearn.linear_model import LogisticRegression
from sklearn.pipeline import make_pipeline
from sklearn.utils.estimator_checks import parametrize_with_checks

from dptensor import BudgetExceededError, PrivacyAccountant
from dptensor.algorithms.operators import moment_tensor
from dptensor.accounting import epsilon_of
from dptensor.datasets import gaussian_mixture_norm_bound, make_gaussian_mixture, make_lda_corpus
from dptensor.latent import PrivateGaussianMixture, PrivateLatentDirichletAllocation, match_rows
from dptensor.algorithms.moments import (PROJECTION_SHARE, SHARES, ImplicitMatrix, plan_noise, power_subspace,
                                       release, release_second, sym3, whiten)
from dptensor.algorithms.eigen import top_eigenpairs
from dptensor.latent.gaussian_mixture import spherical_variance, whitened_bound
from dptensor.latent.lda import (DOCUMENT_SENSITIVITY, LDA_FIRST_SHARE, PAIR_PARTS_RATIO,
                                 TRIPLE_PARTS_RATIO, _clip_scale, _pair_products, _triple_sums,
                                 document_moments, document_norms, document_weights,
                                 topic_noise_std)
from dptensor.mechanisms import clip_rows, symmetric_gaussian_release
from dptensor.algorithms.tensor_power import row_sensitivity
from dptensor.algorithms.power import (auto_n_iter, covariance_sensitivity, power_schedule,
                                     row_power_sensitivity)
from expected_warnings import noise_dominated

# A private fit on a small fixture, for its accounting, plumbing or what it keeps (not its
# accuracy): at that size its weaker components are noise, as the fit says.
_SMALL_PRIVATE = noise_dominated()


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


def docs_up_to(d, max_len, min_len=3):
    """Every count vector over d words with min_len <= length <= max_len."""
    for length in range(min_len, max_len + 1):
        for combo in itertools.combinations_with_replacement(range(d), length):
            yield np.bincount(combo, minlength=d).astype(float)


# -- the shared pipeline -----------------------------------------------------------------------

@pytest.mark.parametrize("queries, n_power, n_first", [(1, 0, 1), (2100, 0, 2), (1, 7, 1), (2100, 5, 2)])
def test_plan_spends_exactly_the_target(queries, n_power, n_first):
    plan = plan_noise(1.0, 1e-5, queries, n_power, n_first)
    assert epsilon_of(plan.event, 1e-5) == pytest.approx(1.0, rel=1e-9)
    first = sum(1 / z**2 for z in plan.z_first)
    second = sum(1 / z**2 for z in plan.z_second)
    mu2 = first + second + queries / plan.z_third**2
    assert first / mu2 == pytest.approx(SHARES["first"]) and len(plan.z_first) == n_first
    assert second / mu2 == pytest.approx(SHARES["second"]) and len(plan.z_second) == max(1, n_power + 1)
    assert plan.n_queries == n_first + len(plan.z_second) + queries
    if n_power:  # the projection gets its share; the steps are scheduled as PCA's power method
        assert 1 / plan.z_second[-1]**2 / second == pytest.approx(PROJECTION_SHARE)
        np.testing.assert_allclose(plan.z_second[:-1], power_schedule(
            np.sqrt(second * (1 - PROJECTION_SHARE)), n_power))
    assert not plan_noise(np.inf, 1e-5, queries, n_power, n_first).private


@pytest.mark.parametrize("n_power", [0, 5])
def test_plan_with_given_shares_spends_exactly_the_target(n_power):
    shares = {"first": 0.05, "second": 0.8, "third": 0.15}
    plan = plan_noise(1.0, 1e-5, 30, n_power, 2, shares)
    assert epsilon_of(plan.event, 1e-5) == pytest.approx(1.0, rel=1e-9)
    parts = [sum(1 / z**2 for z in plan.z_first), sum(1 / z**2 for z in plan.z_second), 30 / plan.z_third**2]
    np.testing.assert_allclose(np.array(parts) / sum(parts), [0.05, 0.8, 0.15])
    with pytest.raises(ValueError, match="sum to 1"):
        plan_noise(1.0, 1e-5, 1, shares={"first": 0.1, "second": 0.5, "third": 0.5})


@pytest.mark.parametrize("d, k", [(60, 3), (2000, 10), (11, 10)])
def test_lda_shares_follow_the_degrees_of_freedom(d, k):
    """The topic model splits the budget s_j ~ dof_j^(1/3): k (d - k) for the pair moment's
    subspace, k^2 for the whitened third moment; the fit costs exactly its target."""
    model = PrivateLatentDirichletAllocation(k, epsilon=1.0, delta=1e-5)
    shares = model._shares({"d": d}, k)
    assert sum(shares.values()) == pytest.approx(1.0) and shares["first"] == LDA_FIRST_SHARE
    assert shares["second"] / shares["third"] == pytest.approx((max(d - k, 1) / k) ** (1 / 3))
    assert model.privacy_cost(1000, d).epsilon == pytest.approx(1.0, rel=1e-9)


@pytest.mark.parametrize("inside_e2", [False, True])
def test_topic_noise_std_is_the_first_order_noise_of_the_topics(rng, inside_e2):
    """Topics mu_i = U Lambda^(1/2) v_i / sqrt(w_i) from a second moment released in the Frobenius
    geometry (off-diagonal noise z s / sqrt(2)): over 200 draws their entries move with the std
    that ``topic_noise_std`` predicts from ``noise = z s / sqrt(2)``. ``inside_e2``: as the private
    topic model whitens, the released matrix is ``E2 = M2 + c m m^T`` and M2 is whitened inside
    E2's top-k subspace (``basis_values``), exactly: ``W^T (E2 - c m m^T) W = I``."""
    d, k, s, c = 80, 3, 2e-5, 0.5
    mu = rng.dirichlet(np.full(d, 0.3), size=k)
    w = np.array([0.2, 0.3, 0.5])
    M2 = (mu.T * w) @ mu
    m = mu.T @ np.array([0.3, 0.3, 0.4])
    clean = whiten(M2, k, rng)
    V = np.sqrt(w)[:, None] * (clean.W.T @ mu.T).T  # rows v_i, orthonormal
    scale = 1.0 / np.sqrt(w)
    draws, predicted = [], []
    for _ in range(200):
        if inside_e2:
            released = symmetric_gaussian_release(M2 + c * np.outer(m, m), s, 1.0, rng, frobenius=True)
            values, basis = top_eigenpairs(released, k, rng)
            bm = basis.T @ m
            noisy = whiten(basis.T @ released @ basis - c * np.outer(bm, bm), k, rng, basis=basis,
                           noise=s / np.sqrt(2), basis_values=values)
            np.testing.assert_allclose(noisy.W.T @ (released - c * np.outer(m, m)) @ noisy.W, np.eye(k),
                                       atol=1e-9)
        else:
            released = symmetric_gaussian_release(M2, s, 1.0, rng, frobenius=True)
            noisy = whiten(released, k, rng, noise=s / np.sqrt(2))
        signs = np.sign(np.sum(noisy.vectors * clean.vectors, axis=0))  # align to the clean whitening
        draws.append((scale[:, None] * V) @ (noisy.vectors * signs * np.sqrt(noisy.values)).T)
        predicted.append(topic_noise_std(V * signs, scale, noisy))  # V in the noisy whitening's signs
    observed = np.std(np.array(draws), axis=0).mean(axis=1)
    np.testing.assert_allclose(observed, np.mean(predicted, axis=0), rtol=0.1)


def test_releases_add_noise_at_multiplier_times_sensitivity(rng):
    plan = plan_noise(1.0, 1e-5, 1)
    noise = release(np.zeros(20000), 0.3, plan.z_first[0], rng, rounding=None)
    assert np.std(noise) == pytest.approx(0.3 * plan.z_first[0], rel=0.03)
    E = release_second(np.zeros((200, 200)), 0.2, plan, rng, rounding=None)
    np.testing.assert_array_equal(E, E.T)
    assert np.std(E[np.triu_indices(200)]) == pytest.approx(0.2 * plan.z_second[0], rel=0.03)
    free = plan_noise(np.inf, 1e-5, 1)
    assert not release(np.zeros(3), 0.3, free.z_first[0], rng, rounding=None).any()


def test_power_subspace_releases_d_by_p_steps_and_a_p_by_p_projection(rng):
    """The private power whitening: the top subspace of a spiked matrix within the noise, and the
    projection's noise at the planned multiplier (never a d x d noise: the operator is implicit)."""
    d, k = 300, 3
    U = np.linalg.qr(rng.standard_normal((d, k)))[0]
    A = U @ np.diag([5.0, 4.0, 3.0]) @ U.T
    calls = []

    class Operator:
        shape = (d, d)

        def matmat(self, Q):
            calls.append(Q.shape)
            return A @ Q

    plan = plan_noise(8.0, 1e-5, 1, n_power=4)
    V, P = power_subspace(Operator(), k, plan, rng, step_sensitivity=1e-3,
                          projection_sensitivity=1e-3, step_rounding=None, projection_rounding=None)
    assert V.shape == (d, 2 * k) and P.shape == (2 * k, 2 * k) and set(calls) == {(d, 2 * k)}
    assert len(calls) == 5  # four power steps and the projection: one product each
    np.testing.assert_allclose(V.T @ V, np.eye(2 * k), atol=1e-12)
    assert np.linalg.norm(U - V @ (V.T @ U), 2) < 0.05
    np.testing.assert_allclose(np.linalg.eigvalsh(P)[::-1][:k], [5.0, 4.0, 3.0], atol=0.05)
    free = plan_noise(np.inf, 1e-5, 1, n_power=4)
    V, P = power_subspace(Operator(), k, free, rng, step_sensitivity=0.0,
                          projection_sensitivity=0.0, step_rounding=None, projection_rounding=None)
    np.testing.assert_allclose(P, V.T @ A @ V, atol=1e-12)
    assert np.linalg.norm(U - V @ (V.T @ U), 2) < 1e-6


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

@pytest.mark.parametrize("whitening", ["dense", "power"])
def test_gmm_whitened_tensor_equals_dense_moment_contracted(rng, whitening):
    """data + correction == M3(W, W, W) with M3 formed densely in d^3 from its definition."""
    X, *_ = make_gaussian_mixture(500, 6, 2, random_state=2)
    n, d = X.shape
    model = PrivateGaussianMixture(2, whitening=whitening, random_state=0)
    ctx = model._prepare(X, np.inf)
    plan = plan_noise(np.inf, 1e-5, 1, int(whitening == "power"), ctx["n_first"])
    mean = model._release_first(ctx, plan, rng)
    wh = model._release_whitening(ctx, mean, plan, rng)
    data, correction, _, _ = model._whitened_third(ctx, wh, mean)
    s2 = ctx["variance"]
    eye = np.eye(d)
    M3 = moment_tensor(X) - s2 * (np.einsum("a,bc->abc", mean, eye) + np.einsum("b,ac->abc", mean, eye)
                                  + np.einsum("c,ab->abc", mean, eye))
    W = wh.W
    np.testing.assert_allclose(data.T + correction, np.einsum("abc,ai,bj,ck->ijk", M3, W, W, W), atol=1e-10)
    M2 = X.T @ X / n - s2 * eye
    np.testing.assert_allclose(W.T @ M2 @ W, np.eye(2), atol=1e-7)
    # the variance: the mean of the bottom d - k + 1 eigenvalues of the covariance; the power
    # whitening takes the top k - 1 from the covariance projected on V (Rayleigh-Ritz, a hair low)
    rel = 1e-10 if whitening == "dense" else 1e-3
    assert s2 == pytest.approx(spherical_variance(np.cov(X.T, bias=True), 2), rel=rel)


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


def test_gmm_power_whitening_sensitivities_brute_force(rng):
    """The power whitening's releases under replace-one (rows clipped to B): a step X^T X Q / n
    moves by at most row_power_sensitivity(B, p) / n, the projection's upper triangle by
    covariance_sensitivity(B) / n, the trace by B^2 / n; the extreme pairs reach each bound."""
    n, d, p, B = 5, 6, 3, 1.5
    Q = np.linalg.qr(rng.standard_normal((d, p)))[0]
    iu = np.triu_indices(p)
    worst = np.zeros(3)
    for _ in range(500):
        X = clip_rows(rng.standard_normal((n, d)) * 2, B)
        X2 = X.copy()
        X2[rng.integers(n)] = clip_rows(rng.standard_normal((1, d)) * 2, B)[0]
        S, S2 = X.T @ X / n, X2.T @ X2 / n
        worst = np.maximum(worst, [np.linalg.norm((S - S2) @ Q), np.linalg.norm((Q.T @ (S - S2) @ Q)[iu]),
                                   abs(np.trace(S) - np.trace(S2))])
    limits = np.array([row_power_sensitivity(B, p), covariance_sensitivity(B), B**2]) / n
    assert np.all(worst <= limits + 1e-12)
    a, b = B * Q[:, 0], B * Q[:, 1]  # orthogonal rows of norm B inside span(Q); then a row against 0
    M = (np.outer(a, a) - np.outer(b, b)) / n
    np.testing.assert_allclose([np.linalg.norm(M @ Q), np.linalg.norm((Q.T @ M @ Q)[iu]), B**2 / n],
                               limits, rtol=1e-12)


def test_gmm_second_moment_frobenius_sensitivity_brute_force(rng):
    """The mixture releases its symmetric matrices in the Frobenius geometry: replacing one row
    (clipped to B) moves the whole E[x x^T] and the whole projection V^T E[x x^T] V by at most
    covariance_sensitivity(B) / n = sqrt(2) B^2 / n in Frobenius norm; orthogonal rows of norm
    B inside span(V) reach it."""
    n, d, p, B = 5, 6, 3, 1.5
    V = np.linalg.qr(rng.standard_normal((d, p)))[0]
    worst = np.zeros(2)
    for _ in range(500):
        X = clip_rows(rng.standard_normal((n, d)) * 2, B)
        X2 = X.copy()
        X2[rng.integers(n)] = clip_rows(rng.standard_normal((1, d)) * 2, B)[0]
        D = (X.T @ X - X2.T @ X2) / n
        worst = np.maximum(worst, [np.linalg.norm(D), np.linalg.norm(V.T @ D @ V)])
    limit = covariance_sensitivity(B) / n
    assert np.all(worst <= limit + 1e-12)
    a, b = B * V[:, 0], B * V[:, 1]
    M = (np.outer(a, a) - np.outer(b, b)) / n
    np.testing.assert_allclose([np.linalg.norm(M), np.linalg.norm(V.T @ M @ V)], limit, rtol=1e-12)


@pytest.mark.parametrize("whitening", ["dense", "power"])
def test_gmm_symmetric_releases_use_the_frobenius_geometry(mixture, monkeypatch, whitening):
    """Every symmetric release of a private mixture fit (Analyze Gauss or the projection, and the
    whitened third moment) is made in the Frobenius geometry, whose sensitivities are derived
    above: off-diagonal noise 1 / sqrt(2) of the plain release's, and 1 / sqrt(3) or 1 / sqrt(6)
    on the tensor's repeated entries; the recorded noise level says so."""
    from dptensor.algorithms import moments

    calls = []
    real = moments.symmetric_gaussian_release

    def recording(*args, frobenius=False, **kwargs):
        calls.append(frobenius)
        return real(*args, frobenius=frobenius, **kwargs)

    monkeypatch.setattr(moments, "symmetric_gaussian_release", recording)
    X, means, _ = mixture
    B = gaussian_mixture_norm_bound(means, 1.0, X.shape[1])
    model = PrivateGaussianMixture(3, epsilon=4.0, data_norm=B, whitening=whitening,
                                   random_state=0).fit(X)
    assert calls == [True, True]
    if whitening == "dense":
        plan = model._plan(X.shape).settings.noise
        std = plan.z_second[0] * covariance_sensitivity(B) / len(X) / np.sqrt(2.0)
        assert model.m2_eigenvalues_noise_[0] == pytest.approx(2 * np.sqrt(X.shape[1]) * std)


@pytest.mark.parametrize("epsilon", [np.inf, 4.0])
def test_gmm_power_whitening_matches_dense(mixture, epsilon):
    """Never forming d x d: without privacy the same means as Analyze Gauss's dense path; private,
    accounted (the mean, the trace, R power steps, the projection, the third moment) and accurate."""
    X, means, _ = mixture
    kw = dict(epsilon=epsilon, random_state=0)
    if np.isfinite(epsilon):
        kw["data_norm"] = gaussian_mixture_norm_bound(means, 1.0, X.shape[1])
    dense = PrivateGaussianMixture(3, whitening="dense", **kw).fit(X)
    power = PrivateGaussianMixture(3, whitening="power", **kw).fit(X)
    assert (dense.whitening_, power.whitening_) == ("dense", "power")
    if np.isinf(epsilon):
        perm, _ = match_rows(power.means_, dense.means_)
        np.testing.assert_allclose(power.means_[perm], dense.means_, atol=1e-3)
        assert power.covariances_[0] == pytest.approx(dense.covariances_[0], rel=1e-3)
    else:
        assert power.privacy_cost_.epsilon == pytest.approx(epsilon)
        assert power.privacy_cost_.n_queries == 2 + auto_n_iter(X.shape[1], True) + 1 + 1
        for model in (dense, power):
            _, dist = match_rows(model.means_, means)
            assert dist.mean() / np.linalg.norm(means, axis=1).mean() < 0.15


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
    # m2_eigenvalues_ are released (the whitening's), their noise level public; the precisions
    # are the released variance's inverse, n_iter_ and converged_ public constants
    assert fitted == {"means_", "weights_", "covariances_", "method_", "whitening_", "n_samples_",
                      "n_features_in_", "privacy_cost_", "m2_eigenvalues_", "m2_eigenvalues_noise_",
                      "precisions_", "precisions_cholesky_", "n_iter_", "converged_"}
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


@pytest.mark.parametrize("whitening", ["dense", "power"])
def test_lda_whitened_tensor_equals_triple_average_contracted(whitening):
    rng = np.random.default_rng(6)
    C = make_lda_corpus(40, 5, 2, alpha0=0.7, doc_length=(3, 6), random_state=6)[0].toarray()
    model = PrivateLatentDirichletAllocation(2, alpha0=0.7, whitening=whitening)
    X = model._validate(sp.csr_matrix(C), reset=True)
    ctx = model._prepare(X, np.inf)
    plan = plan_noise(np.inf, 1e-5, 1, int(whitening == "power"), ctx["n_first"])
    mean = model._release_first(ctx, plan, rng)
    wh = model._release_whitening(ctx, mean, plan, rng)
    data, correction, _, _ = model._whitened_third(ctx, wh, mean)
    brute = [brute_pair_and_triple(c) for c in C]
    E2, E3 = np.mean([b[0] for b in brute], axis=0), np.mean([b[1] for b in brute], axis=0)
    a0, m1 = 0.7, mean
    M3 = (E3 - a0 / (a0 + 2) * (np.einsum("ab,c->abc", E2, m1) + np.einsum("ac,b->abc", E2, m1)
                               + np.einsum("bc,a->abc", E2, m1))
          + 2 * a0**2 / ((a0 + 1) * (a0 + 2)) * np.einsum("a,b,c->abc", m1, m1, m1))
    W = wh.W
    np.testing.assert_allclose(W.T @ (E2 - a0 / (a0 + 1) * np.outer(m1, m1)) @ W, np.eye(2), atol=1e-7)
    np.testing.assert_allclose(data, np.einsum("abc,ai,bj,ck->ijk", E3, W, W, W), atol=1e-10)
    np.testing.assert_allclose(data + correction, np.einsum("abc,ai,bj,ck->ijk", M3, W, W, W), atol=1e-6)


def spread(terms):
    """The largest l2 distance between two of the (flattened) per-document terms."""
    T = np.array([np.ravel(t) for t in terms])
    return np.max(np.linalg.norm(T[:, None, :] - T[None, :, :], axis=2))


def test_document_norms_and_clip_scales_brute_force():
    """||E1(c)||, ||E2(c)||_F from three sums per document equal those of the brute-force averages;
    every ||E2(c)||_F lies in [0, 1] (so the clipping scale's mean has sensitivity 1 / n)."""
    docs = np.array(list(docs_up_to(3, 6)))
    length, e1, e2 = document_norms(sp.csr_matrix(docs))
    brute = [brute_pair_and_triple(c)[0] for c in docs]
    np.testing.assert_allclose(length, docs.sum(axis=1))
    np.testing.assert_allclose(e1, np.linalg.norm(docs / length[:, None], axis=1))
    np.testing.assert_allclose(e2, [np.linalg.norm(b) for b in brute], atol=1e-12)
    assert e2.min() > 0 and e2.max() == pytest.approx(1.0)  # reached by one word repeated
    np.testing.assert_array_equal(_clip_scale(e2, None), 1.0)
    assert np.all(_clip_scale(e2, 0.4) * e2 <= 0.4 + 1e-12)


@pytest.mark.parametrize("tau", [(None, None), (0.8, 0.6), (0.9, 0.45), (0.5, 0.9)])
def test_lda_clipped_first_and_second_sensitivities_brute_force(tau):
    """Every document of length 3..6 over 3 words, each scaled by its one weight
    s_c = min(1, tau_1 / ||E1(c)||, tau_2 / ||E2(c)||_F): the terms of the mean differ by at most
    sqrt(2) tau_1 and those of the pair moment's upper triangle (and whole matrix) by at most
    sqrt(2) tau_2 (1 unclipped), each reached by two one-word documents."""
    iu = np.triu_indices(3)
    docs = np.array(list(docs_up_to(3, 6, min_len=0)))  # 0-2 words: no terms, weight 0
    length, weight = document_weights(sp.csr_matrix(docs), tau)
    assert np.all(weight[length < 3] == 0) and np.all(weight[length >= 3] > 0)
    _, e1, e2 = document_norms(sp.csr_matrix(docs))
    np.testing.assert_allclose(weight, np.where(length >= 3, np.minimum(_clip_scale(e1, tau[0]),
                                                                         _clip_scale(e2, tau[1])), 0.0))
    means = docs / np.maximum(length, 1)[:, None] * weight[:, None]
    pairs = [brute_pair_and_triple(c)[0][iu] * s for c, s in zip(docs, weight)]
    tau1, tau2 = tau[0] or 1.0, tau[1] or 1.0
    assert spread(means) <= DOCUMENT_SENSITIVITY * tau1 + 1e-12
    assert spread(pairs) <= DOCUMENT_SENSITIVITY * tau2 + 1e-12
    one_word = weight[np.isclose(e1, 1.0)][0]  # a one-word document: ||E1|| = ||E2||_F = 1
    assert spread(means) >= DOCUMENT_SENSITIVITY * one_word - 1e-12  # two one-word documents
    assert spread(pairs) >= DOCUMENT_SENSITIVITY * one_word - 1e-12
    if tau[0] is None:  # unclipped: reached
        assert spread(means) == pytest.approx(DOCUMENT_SENSITIVITY)
    # the whole matrices (the Frobenius geometry of the release): the same bound
    whole = [brute_pair_and_triple(c)[0] * s for c, s in zip(docs, weight)]
    assert spread(whole) <= DOCUMENT_SENSITIVITY * tau2 + 1e-12


@pytest.mark.parametrize("whitening", ["dense", "power"])
def test_lda_clipped_moments_are_one_reweighted_corpus(whitening):
    """With the noise switched off, a clipped fit's mean and pair moment are the weighted averages
    of the documents' E1(c) and E2(c) under one weight per document (document_weights), divided by
    the mean weight read off the released mean: the relations between the moments (M2 = E2 -
    c M1 M1^T) then hold for the reweighted corpus. Some documents are clipped, with unequal
    weights, so a wrong normaliser or a weight of its own per moment would fail this."""
    import dataclasses

    C, _, _ = make_lda_corpus(300, 12, 3, doc_length=(3, 12), random_state=2)
    C = sp.csr_matrix(C)
    model = PrivateLatentDirichletAllocation(3, epsilon=1.0, delta=1e-5, whitening=whitening,
                                             doc_clip=1.0)
    ctx = model._prepare(C, 1.0)
    _, plan = model._noise_plan(ctx, 3, 1.0, 1e-5)
    quiet = dataclasses.replace(plan, z_first=(0.0,) * len(plan.z_first),
                                z_second=(0.0,) * len(plan.z_second))
    mean = model._release_first(ctx, quiet, np.random.default_rng(0))
    length, weight = document_weights(C, ctx["tau"])
    assert 0.2 < np.mean(weight < 1) < 0.9 and np.ptp(weight) > 0.1  # clipped, unequally
    assert ctx["weight"] == pytest.approx(weight.mean())
    docs = C.toarray()
    np.testing.assert_allclose(mean, (weight / length) @ docs / weight.sum(), rtol=1e-10)
    brute = np.array([brute_pair_and_triple(c)[0] for c in docs])
    pairs = np.einsum("n,nab->ab", weight, brute) / weight.sum()
    if whitening == "dense":
        np.testing.assert_allclose(ctx["second"] / ctx["weight"], pairs, rtol=1e-9, atol=1e-15)


@pytest.mark.parametrize("bound", [None, 0.5])
def test_lda_power_step_and_projection_sensitivity_brute_force(bound):
    tau = (None, bound)
    """A power step releases M2 Q for orthonormal Q (d x p), the projection the upper triangle of
    V^T M2 V: over every pair of documents of length 3..5 on 4 words, the clipped terms
    s_c E2(c) Q and s_c V^T E2(c) V differ by at most sqrt(2) tau, reached when the span holds the
    words of two one-word documents."""
    rng = np.random.default_rng(8)
    docs = np.array(list(docs_up_to(4, 5)))
    C = sp.csr_matrix(docs)
    scale = document_weights(C, tau)[1]
    pairs = np.array([brute_pair_and_triple(c)[0] for c in docs]) * scale[:, None, None]
    iu = np.triu_indices(2)
    tau = bound or 1.0
    for Q in (np.linalg.qr(rng.standard_normal((4, 2)))[0], np.eye(4)[:, :2]):
        steps = np.einsum("nab,bp->nap", pairs, Q)
        projections = np.einsum("ap,nab,bq->npq", Q, pairs, Q)[:, iu[0], iu[1]]
        assert spread(steps) <= DOCUMENT_SENSITIVITY * tau + 1e-12
        assert spread(projections) <= DOCUMENT_SENSITIVITY * tau + 1e-12
        whole = np.einsum("ap,nab,bq->npq", Q, pairs, Q)  # the projection's Frobenius geometry
        assert spread(whole) <= DOCUMENT_SENSITIVITY * tau + 1e-12
    assert spread(steps) == pytest.approx(DOCUMENT_SENSITIVITY * tau)  # Q spans e_0, e_1
    # the chunk sums apply exactly sum_c s_c E2(c) Q, implicitly
    Q = np.linalg.qr(rng.standard_normal((4, 3)))[0]
    np.testing.assert_allclose(_pair_products(C, Q, (None, bound))[0], pairs.sum(axis=0) @ Q, atol=1e-12)


@pytest.mark.parametrize("bound, tau", [(None, None), (0.6, None), (0.6, (0.7, 0.5)), (2.0, (0.8, 0.4))])
def test_lda_third_sensitivity_and_triple_bound_brute_force(bound, tau):
    """Every document of length 3..6 over 3 words: ||E3(c)(W, W, W)|| is at most the per-document
    bound beta_c = a (S1^3 - 3 S1 S2 + 2 S3) (the sum of ||w_a|| ||w_b|| ||w_c|| over distinct
    triples); with the document's weight s_c (the same as in the mean and the pair moment) lowered
    to bound^3 / beta_c where needed, two terms differ by at most 2 bound^3 (2 r^3 unclipped); the
    chunk sums equal the brute-force weighted average."""
    rng = np.random.default_rng(7)
    W = rng.standard_normal((3, 2))
    rho = np.linalg.norm(W, axis=1)
    r = rho.max()
    docs = np.array(list(docs_up_to(3, 6)))
    terms, betas = [], []
    for c in docs:
        E3 = brute_pair_and_triple(c)[1]
        terms.append(np.einsum("abc,ai,bj,ck->ijk", E3, W, W, W))
        betas.append(np.einsum("abc,a,b,c->", E3, rho, rho, rho))
    terms, betas = np.array(terms), np.array(betas)
    assert np.all(np.linalg.norm(terms.reshape(len(docs), -1), axis=1) <= betas + 1e-12)
    cube = None if bound is None else bound**3
    C = sp.csr_matrix(docs)
    scale = np.minimum(document_weights(C, tau)[1], _clip_scale(betas, cube))
    clipped = terms * scale[:, None, None, None]
    limit = row_sensitivity(r if bound is None else min(bound, r), 1)
    assert spread(clipped) <= limit + 1e-12
    if tau is None:
        assert spread(clipped) >= 0.5 * limit  # the bound is not loose by much here
    # the chunk sums: whitened cube, Z and s give the weighted average
    cube_sum, Z, s = _triple_sums(C, W, tau, cube)
    data = cube_sum - sym3(np.einsum("ia,ib,ic->abc", W, W, Z)) + 2 * np.einsum("i,ia,ib,ic->abc", s, W, W, W)
    np.testing.assert_allclose(data, clipped.sum(axis=0), atol=1e-10)


@pytest.mark.parametrize("light", [1e-6, 1e-9, 1e-10])
def test_lda_triple_bound_holds_where_its_formula_cancels(light):
    """One word with a large whitened row (norm 1) and two with tiny ones: beta_c = 6 light^2 / 6,
    but S1^3 - 3 S1 S2 + 2 S3 is computed as 0 for rows 10^9 apart (S1^3 = 1 + 6e-9 cancels), which
    left the term unclipped, 10^4 times over a bound set below beta_c. With the rounding margin the
    computed term stays within the bound (the margin only clips more). The parts it is summed
    from are far larger (about 1 against light^2): the weight keeps them within
    TRIPLE_PARTS_RATIO times the bound as well, which here clips the term below it."""
    W = np.array([[1.0, 0.0], [0.0, light], [light, 0.0]])
    C = sp.csr_matrix(np.array([[1.0, 1.0, 1.0]]))
    bound = 1e-3 * light**2  # beta_c = light^2 for this document: it must be clipped 1000-fold
    cube, Z, s = _triple_sums(C, W, None, bound)
    term = cube - sym3(np.einsum("ia,ib,ic->abc", W, W, Z)) + 2 * np.einsum("i,ia,ib,ic->abc", s, W, W, W)
    assert np.linalg.norm(term) <= bound
    S1, S2, S3 = 1 + 2 * light, 1 + 2 * light**2, 1 + 2 * light**3
    parts = (S1**3 + 3 * S1 * S2 + 2 * S3) / 6.0  # a = 1/6 at 3 words
    pieces = np.abs(cube) + 3 * np.einsum("ia,ib,ic->abc", np.abs(W), np.abs(W), np.abs(Z)) \
        + 2 * np.einsum("i,ia,ib,ic->abc", s, np.abs(W), np.abs(W), np.abs(W))
    assert np.linalg.norm(pieces) <= TRIPLE_PARTS_RATIO * bound * (1 + 1e-12)
    if light == 1e-6:  # no cancellation: the margin leaves the clip as it was, nearly
        expected = min(bound, TRIPLE_PARTS_RATIO * bound * light**2 / parts)
        assert np.linalg.norm(term) >= 0.5 * expected


def test_lda_doc_clip_range_refused_before_the_spend():
    """The mean weight is floored at tau_2 >= doc_clip^2 / d and divided by after the spend: a
    doc_clip whose square underflows (a zero floor: a ZeroDivisionError after the spend, whenever
    the noise made the released mean's sum negative) is refused before it, and nothing is spent;
    a huge one (doc_clip**2 overflowed: OverflowError after the spend) clips nothing."""
    C, _, _ = make_lda_corpus(200, 30, 3, doc_length=(3, 20), random_state=0)
    budget = PrivacyAccountant(epsilon=10.0, delta=1e-5)
    # 1e-120: the square holds, the third moment's cubic bound underflows (sensitivity 0)
    for clip in (1e-170, 1e-120):
        tiny = PrivateLatentDirichletAllocation(3, epsilon=1.0, delta=1e-5, doc_clip=clip,
                                                accountant=budget, random_state=0)
        with pytest.raises(ValueError, match="doc_clip must be at least"):
            tiny.fit(C)
        with pytest.raises(ValueError, match="doc_clip must be at least"):
            tiny.privacy_cost(200, 30)
    assert budget.history() == []
    for whitening in ("dense", "power"):
        # nearly no noise: clipping nothing, it is the unclipped fit
        huge, none = (PrivateLatentDirichletAllocation(3, epsilon=1e9, delta=1e-5, doc_clip=clip,
                                                       whitening=whitening, random_state=0).fit(C)
                      for clip in (1e200, None))
        np.testing.assert_allclose(huge.components_, none.components_, atol=1e-4)


@pytest.mark.parametrize("k", [5, 6])
def test_top_eigenpairs_of_an_implicit_matrix_asking_for_every_eigenpair(k):
    """Lanczos needs k < d: n_components = n_features (allowed) crashed every non-private fit with
    the power whitening, in scipy ("Cannot use scipy.linalg.eigh for LinearOperator A with k >= N")."""
    rng = np.random.default_rng(0)
    B = rng.standard_normal((6, 6))
    A = B @ B.T
    values, vectors = top_eigenpairs(ImplicitMatrix(6, lambda Q: A @ Q), k, np.random.default_rng(1))
    expected = np.sort(np.linalg.eigvalsh(A))[::-1][:k]
    np.testing.assert_allclose(values, expected, rtol=1e-10)
    np.testing.assert_allclose(A @ vectors, vectors * values, atol=1e-9)
    X, _, _, _ = make_gaussian_mixture(2000, 4, 2, random_state=0)
    C = make_lda_corpus(500, 6, 2, doc_length=(5, 10), random_state=0)[0]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # epsilon = inf
        gmm = PrivateGaussianMixture(4, whitening="power", random_state=0).fit(X)
        lda = PrivateLatentDirichletAllocation(6, whitening="power", random_state=0).fit(C)
    assert np.isfinite(gmm.means_).all() and np.allclose(lda.components_.sum(axis=1), 1.0)


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
    else:  # the clipping scale and the mean, R power steps and the projection, the third moment
        steps = power.privacy_cost_.n_queries - 4
        assert steps > 1 and power.privacy_cost_.epsilon == pytest.approx(30.0)
        assert dense.privacy_cost_.n_queries == 4
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


def test_lda_refinement_raises_the_likelihood_and_is_refused_when_private(corpus):
    """EM steps from the spectral topics (epsilon = inf only): the training log-likelihood rises
    and the topics move closer to the truth; a private fit refuses them before any spend."""
    C, topics, _ = corpus
    spectral = PrivateLatentDirichletAllocation(3, random_state=0).fit(C)
    refined = PrivateLatentDirichletAllocation(3, refine_iter=3, random_state=0).fit(C)
    assert refined.score(C) > spectral.score(C)

    def error(model):
        perm, _ = match_rows(model.components_, topics)
        return np.abs(model.components_[perm] - topics).sum(axis=1).mean()

    assert error(refined) < error(spectral)
    np.testing.assert_allclose(refined.components_.sum(axis=1), 1.0)
    budget = PrivacyAccountant(epsilon=10.0, delta=1e-5)
    with pytest.raises(ValueError, match="refine_iter needs epsilon=np.inf"):
        PrivateLatentDirichletAllocation(3, epsilon=1.0, refine_iter=2, accountant=budget).fit(C)
    assert len(budget.history()) == 0


def test_lda_private_fit_is_accounted(corpus):
    C, topics, _ = corpus
    budget = PrivacyAccountant(epsilon=np.inf, delta=1e-5)
    model = PrivateLatentDirichletAllocation(3, epsilon=1.0, accountant=budget, random_state=0).fit(C)
    assert budget.spent()[0] == pytest.approx(1.0, rel=1e-6)
    assert model.privacy_cost_.private and np.isfinite(model.components_).all()
    # an error that falls with epsilon: at a huge budget the unclipped private fit matches the
    # exact one; clipping the documents' terms (the default) adds a small bias
    exact = PrivateLatentDirichletAllocation(3, random_state=0).fit(C)
    for clip, limit in ((None, 0.02), (1.0, 0.05)):
        loose = PrivateLatentDirichletAllocation(3, epsilon=1e5, doc_clip=clip, random_state=0).fit(C)
        perm, _ = match_rows(loose.components_, exact.components_)
        assert np.abs(loose.components_[perm] - exact.components_).sum(axis=1).max() < limit


def test_lda_topic_threshold_lowers_the_private_error(corpus):
    """Zeroing the entries within ``topic_threshold`` noise deviations of 0 (post-processing of
    released values) lowers the private topic error on sparse topics, spends the same, and does
    nothing without privacy."""
    C, topics, _ = corpus

    def error(model):
        perm, _ = match_rows(model.components_, topics)
        return np.abs(model.components_[perm] - topics).sum(axis=1).mean()

    kw = dict(epsilon=3.0, delta=1e-5, doc_clip=1.0)
    on = [PrivateLatentDirichletAllocation(3, random_state=s, **kw).fit(C) for s in range(3)]
    off = [PrivateLatentDirichletAllocation(3, topic_threshold=None, random_state=s, **kw).fit(C)
           for s in range(3)]
    assert np.mean([error(m) for m in on]) < 0.85 * np.mean([error(m) for m in off])
    assert on[0].privacy_cost_.event == off[0].privacy_cost_.event
    np.testing.assert_allclose(PrivateLatentDirichletAllocation(3, random_state=0).fit(C).components_,
                               PrivateLatentDirichletAllocation(3, topic_threshold=None, random_state=0)
                               .fit(C).components_, rtol=1e-9, atol=1e-15)
    for bad in (-1.0, np.inf, "2", True):
        with pytest.raises(ValueError, match="topic_threshold"):
            PrivateLatentDirichletAllocation(3, topic_threshold=bad, **kw).fit(C)


def test_lda_refuses_what_is_not_a_word_count(corpus):
    """Negative counts are refused in scikit-learn's words ("Negative values in data", as its own
    LatentDirichletAllocation and the positive-only tag's check expect), fractional ones saying
    so; both before any spend."""
    C = corpus[0]
    budget = PrivacyAccountant(epsilon=10.0, delta=1e-6)
    with pytest.raises(ValueError, match="word counts .*not whole numbers"):
        PrivateLatentDirichletAllocation(3, epsilon=1.0, accountant=budget).fit(C * 0.5)
    negative = C.toarray()
    negative[0, 0] = -1
    with pytest.raises(ValueError, match="Negative values in data: X must hold word counts"):
        PrivateLatentDirichletAllocation(3, epsilon=1.0, accountant=budget).fit(negative)
    assert budget.history() == []
    with pytest.raises(ValueError, match="alpha0"):
        PrivateLatentDirichletAllocation(3, alpha0=0).fit(C)
    for clip in (0, -1.0, np.inf, np.nan, "1", True):  # None is the way to clip nothing: said so
        with pytest.raises(ValueError, match="doc_clip must be a finite number > 0, or None to clip nothing"):
            PrivateLatentDirichletAllocation(3, epsilon=1.0, doc_clip=clip, accountant=budget).fit(C)
    assert budget.history() == []


def test_lda_input_errors_quote_no_document(corpus):
    """An error is released too: scikit-learn's checks print a 1-D array in full, quote a string
    it cannot convert and print a complex array. Raw text, one document as a 1-D row, a scalar,
    complex counts: refused before the spend, naming only the shape or the dtype."""
    C = corpus[0]
    row = C[0].toarray().ravel()
    secret = "patient 4711 has a rare condition"
    budget = PrivacyAccountant(epsilon=10.0, delta=1e-6)
    for bad, words in [(row, "2-D"), (np.float64(row.sum()), "2-D"), ([secret, "a b c"] * 5, "vectorizer"),
                       (np.array([["3", secret]] * 5, dtype=object), "vectorizer"),
                       (C.toarray() + 1j, "real numbers"), (sp.csr_matrix(C, dtype=complex), "real numbers")]:
        for fit in (True, False):
            model = PrivateLatentDirichletAllocation(3, epsilon=1.0, accountant=budget, random_state=0)
            if not fit:  # transform, score and perplexity validate the same way
                model.fit(C)
            with pytest.raises(ValueError, match=words) as err:
                model.fit(bad) if fit else model.transform(bad)
            text = str(err.value)
            assert secret not in text and "4711" not in text and "array=" not in text
            assert err.value.__cause__ is None
            assert err.value.__suppress_context__ or err.value.__context__ is None
    assert len(budget.history()) == 6  # the six fits on C only
    # what scikit-learn accepts still fits: an object array of numbers, a list of lists
    as_objects = PrivateLatentDirichletAllocation(3, random_state=0).fit(C.toarray().astype(object))
    as_lists = PrivateLatentDirichletAllocation(3, random_state=0).fit(C.toarray().tolist())
    np.testing.assert_allclose(as_objects.components_, as_lists.components_)


@_SMALL_PRIVATE
def test_lda_a_huge_document_cannot_decide_the_fit(corpus):
    """Counts whose powers overflow made the clipping scale NaN (``inf - inf``), so one document
    of 10^103 words made a private fit fail after its spend: such documents are refused before it,
    and the longest admitted one leaves the fit finite."""
    C = corpus[0].toarray()
    budget = PrivacyAccountant(epsilon=10.0, delta=1e-6)
    for words in (2.0**53, 1e103):
        huge = C.copy()
        huge[0] = 0
        huge[0, 1] = words
        with pytest.raises(ValueError, match="fewer than 2\\*\\*53 words"):
            PrivateLatentDirichletAllocation(3, epsilon=1.0, accountant=budget, random_state=0).fit(huge)
    assert budget.history() == []
    longest = C.copy()
    longest[0] = 0
    longest[0, 1] = 2.0**53 - 1
    for clip in (1.0, None):
        model = PrivateLatentDirichletAllocation(3, epsilon=1.0, doc_clip=clip, random_state=0).fit(longest)
        assert np.all(np.isfinite(model.components_)) and np.all(np.isfinite(model.alpha_))


def _split_into_unit_entries(C):
    """The same counts as a non-canonical CSR matrix: a count c stored as c duplicate entries of 1."""
    C = sp.csr_matrix(C)
    rows = np.repeat(np.repeat(np.arange(C.shape[0]), np.diff(C.indptr)), C.data.astype(int))
    cols = np.repeat(C.indices, C.data.astype(int))
    indptr = np.r_[0, np.cumsum(np.bincount(rows, minlength=C.shape[0]))]
    split = sp.csr_matrix((np.ones(len(cols)), cols, indptr), shape=C.shape)
    assert not split.has_canonical_format and (split.toarray() == C.toarray()).all()
    return split


@_SMALL_PRIVATE
def test_lda_counts_split_over_duplicate_entries_are_clipped_as_their_sums(corpus):
    """A CSR matrix may store one count as several duplicate entries. The per-document norms that
    set the clipping are sums of powers of the stored entries: before, a document [2, 1] stored as
    three entries of 1 had ||E2(c)||_F 0.41 instead of 0.58, so its clipped terms could exceed the
    bound the sensitivity assumes. Now the counts are summed first: the norms and every released
    value are those of the canonical matrix, and the caller's matrix is left as it was."""
    doc = _split_into_unit_entries(np.array([[2.0, 1.0, 0.0]]))
    np.testing.assert_allclose(document_norms(doc)[2], document_norms(np.array([[2.0, 1.0, 0.0]]))[2])
    assert np.sqrt(np.sum(document_moments(np.array([[2.0, 1.0, 0.0]]))[1] ** 2)) == pytest.approx(
        document_norms(doc)[2][0])
    C = corpus[0][:600]
    split = _split_into_unit_entries(C)
    for whitening in ("dense", "power"):
        kw = dict(epsilon=2.0, delta=1e-6, whitening=whitening, random_state=3)
        canonical = PrivateLatentDirichletAllocation(3, **kw).fit(C)
        duplicated = PrivateLatentDirichletAllocation(3, **kw).fit(split)
        np.testing.assert_allclose(duplicated.components_, canonical.components_, rtol=1e-10, atol=1e-12)
    assert not split.has_canonical_format


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


@pytest.mark.parametrize("whitening", ["dense", "power"])
def test_gmm_on_dask_rows_matches_in_memory(mixture, whitening):
    da = pytest.importorskip("dask.array")
    X, means, _ = mixture
    X = X[:6000]
    kw = dict(epsilon=2.0, data_norm=gaussian_mixture_norm_bound(means, 1.0, 12), whitening=whitening,
              random_state=4)
    here = PrivateGaussianMixture(3, **kw).fit(X)
    there = PrivateGaussianMixture(3, **kw).fit(da.from_array(X, chunks=(1000, 12)))
    np.testing.assert_allclose(there.means_, here.means_, atol=1e-9)
    np.testing.assert_allclose(there.weights_, here.weights_, atol=1e-12)
    assert there.privacy_cost_.epsilon == pytest.approx(2.0)


@pytest.mark.parametrize("whitening", ["dense", "power"])
def test_lda_on_dask_counts_matches_in_memory(corpus, whitening, same_noise):
    """Every pass over the documents is one reduction over the row chunks: the same released topics
    as in memory (same seed, its noise keyed by the seed alone: a seeded fit keys it by the data's
    form too, sparse here, dense chunks there), checked and refused lazily before any spend."""
    da = pytest.importorskip("dask.array")
    C = corpus[0][:1200].toarray()
    kw = dict(epsilon=20.0, whitening=whitening, random_state=5)
    here = PrivateLatentDirichletAllocation(3, **kw).fit(C)
    there = PrivateLatentDirichletAllocation(3, **kw).fit(da.from_array(C, chunks=(250, -1)))
    np.testing.assert_allclose(there.components_, here.components_, atol=1e-9)
    np.testing.assert_allclose(there.alpha_, here.alpha_, atol=1e-9)
    assert there.privacy_cost_ == here.privacy_cost_ and there.whitening_ == whitening
    # the non-private fit and its EM refinement: one reduction per pass as well
    kw = dict(whitening=whitening, refine_iter=2, random_state=5)
    here = PrivateLatentDirichletAllocation(3, **kw).fit(C)
    there = PrivateLatentDirichletAllocation(3, **kw).fit(da.from_array(C, chunks=(250, -1)))
    np.testing.assert_allclose(there.components_, here.components_, atol=1e-8)
    budget = PrivacyAccountant(epsilon=10.0, delta=1e-5)
    bad = C.copy()
    bad[700, 3] = 0.5
    with pytest.raises(ValueError, match="word counts"):
        PrivateLatentDirichletAllocation(3, epsilon=1.0, accountant=budget).fit(
            da.from_array(bad, chunks=(250, -1)))
    assert len(budget.history()) == 0


@pytest.mark.parametrize("make, whitening", [
    (lambda: PrivateGaussianMixture(2, epsilon=1.0, delta=1e-6, data_norm=2.0, random_state=0), None),
    (lambda: PrivateGaussianMixture(2, epsilon=1.0, delta=1e-6, data_norm=2.0, whitening="power",
                                    random_state=0), None),
    (lambda: PrivateGaussianMixture(2, random_state=0), None),
    (lambda: PrivateLatentDirichletAllocation(3, epsilon=1.0, delta=1e-6, doc_clip=None, random_state=0),
     "dense"),
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


@_SMALL_PRIVATE
@pytest.mark.parametrize("whitening", ["dense", "power"])
def test_short_documents_weigh_nothing(whitening):
    """Documents of 0, 1 or 2 words have no terms (the third moment needs three distinct positions):
    they weigh 0 in every moment, so a fit neither refuses them (an error that depends on the data
    would be an unaccounted release, and filtering them would make n depend on the data) nor is
    moved by them. Without privacy the fit with them equals the fit without them, in memory and on
    Dask; a private fit on them spends once and stays finite."""
    da = pytest.importorskip("dask.array")
    from dptensor.datasets import make_lda_corpus

    C, _, _ = make_lda_corpus(1000, 30, 3, doc_length=(5, 40), random_state=0)
    one = np.eye(30)
    shorts = sp.csr_matrix(np.array([np.zeros(30), one[4], 2 * one[7], one[1] + one[2]]))  # 0, 1, 2, 2 words
    padded = sp.vstack([shorts[:2], C[:500], shorts[2:], C[500:]]).tocsr()
    kw = dict(whitening=whitening, random_state=3)
    alone = PrivateLatentDirichletAllocation(3, **kw).fit(C)
    for X in (padded, da.from_array(padded.toarray(), chunks=(300, -1))):
        with_short = PrivateLatentDirichletAllocation(3, **kw).fit(X)
        np.testing.assert_allclose(with_short.components_, alone.components_, atol=1e-8)
        np.testing.assert_allclose(with_short.alpha_, alone.alpha_, rtol=1e-6)
    budget = PrivacyAccountant(epsilon=10.0, delta=1e-6)
    mixed = sp.vstack([shorts[[0, 1, 2, 3] * 50], C[:20]]).tocsr()
    private = PrivateLatentDirichletAllocation(3, epsilon=1.0, accountant=budget, **kw).fit(mixed)
    assert len(budget.history()) == 1 and np.all(np.isfinite(private.components_))
    mean, second = document_moments(padded)
    np.testing.assert_allclose(mean, document_moments(C)[0])
    np.testing.assert_allclose(second, document_moments(C)[1])


@pytest.mark.parametrize("whitening", ["dense", "power"])
@pytest.mark.parametrize("doc_clip", [1.0, None])
@pytest.mark.parametrize("method", ["perturb", "power"])
def test_a_corpus_of_short_documents_only(whitening, doc_clip, method):
    """No document of 3 words: a private fit releases noise, finite, at the previewed cost, with no
    warning and no error that would depend on the data (only the one that the released
    eigenvalues are noise, a function of released values); a fit without privacy, which has
    nothing to learn from, says so (not an eigensolver's failure or an infinite alpha_)."""
    da = pytest.importorskip("dask.array")
    one = np.eye(8)
    X = np.array([np.zeros(8), one[1], 2 * one[3], one[2] + one[5]] * 10)
    kw = dict(whitening=whitening, doc_clip=doc_clip, method=method, n_restarts=2, n_iter=5, random_state=0)
    for data in (sp.csr_matrix(X), da.from_array(X, chunks=(15, -1))):
        budget = PrivacyAccountant(epsilon=10.0, delta=1e-4)
        private = PrivateLatentDirichletAllocation(2, epsilon=1.0, delta=1e-4, accountant=budget, **kw)
        preview = private.privacy_cost(*X.shape)
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            warnings.filterwarnings("ignore", "the released m2_eigenvalues_", UserWarning)
            private.fit(data)
        assert private.privacy_cost_ == preview and len(budget.history()) == 1
        assert np.all(np.isfinite(private.components_)) and np.all(np.isfinite(private.alpha_))
        with pytest.raises(ValueError, match="no document has 3 words"):
            PrivateLatentDirichletAllocation(2, **{**kw, "method": "auto"}).fit(data)


def test_whitening_of_a_noise_dominated_release_stays_on_its_scale(rng):
    # Noise can make every top eigenvalue of the released M2 negative; the floor was then 1e-6 times
    # the smallest float, a whitening near 1e157, and the data products after the spend overflowed
    # (warnings, or a release refused as not finite) depending on the data.
    M2 = -np.diag([0.02, 0.05, 0.1])
    w = whiten(M2, 2, rng)
    assert np.all(np.isfinite(w.W)) and np.max(np.abs(w.W)) <= 1.0 / np.sqrt(1e-6 * 0.05) * (1 + 1e-12)


@_SMALL_PRIVATE
def test_lda_noise_dominated_fit_is_silent_after_the_spend():
    # With 30 short documents at epsilon=1 the released M2 of this seed has a negative top eigenvalue.
    X = np.random.default_rng(0).poisson(2, (30, 8)).astype(float)
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        lda = PrivateLatentDirichletAllocation(n_components=1, epsilon=1.0, delta=1e-6, doc_clip=0.5,
                                               accountant=PrivacyAccountant(epsilon=10, delta=1e-6),
                                               random_state=0).fit(X)
    assert np.all(np.isfinite(lda.components_))


# -- floating-point rounding of the releases (docs/derivations/latent.rst, "Rounding") --------

def _gamma(m):
    u = 2.0**-53
    return m * u / (1.0 - m * u)


@pytest.fixture
def recorded(monkeypatch):
    """Every release the pipeline makes, as (kind, sensitivity, rounding), passed on unchanged;
    the power whitening's steps as ("power", the sensitivity noisy_power_method releases at)."""
    import dptensor.algorithms.moments as pipeline
    calls = []

    def wrap(kind, real):
        def release(value, sensitivity, *args, rounding, **kwargs):
            calls.append((kind, float(np.max(sensitivity)), rounding))
            return real(value, sensitivity, *args, rounding=rounding, **kwargs)
        return release

    def power(operator, *args, sensitivity, rounding, **kwargs):
        # the sensitivity each step is released at: the given one plus its rounding's allowance
        calls.append(("power", float(sensitivity) + rounding.allowance(), rounding))
        return real_power(operator, *args, sensitivity=sensitivity, rounding=rounding, **kwargs)

    real_power = pipeline.noisy_power_method
    monkeypatch.setattr(pipeline, "gaussian_release", wrap("plain", pipeline.gaussian_release))
    monkeypatch.setattr(pipeline, "symmetric_gaussian_release",
                        wrap("symmetric", pipeline.symmetric_gaussian_release))
    monkeypatch.setattr(pipeline, "noisy_power_method", power)
    return calls


def _terms_ok(r, n, inner=0):
    """The chain counts the n units, the inner sums, and a few scalings (no more than 64)."""
    return n + inner <= r.terms <= n + inner + 64


@pytest.mark.parametrize("whitening", ["dense", "power"])
def test_gmm_releases_carry_their_rounding(mixture, recorded, whitening):
    """Each release of a private mixture fit names a Rounding whose total is n times the bound on
    one row's term (B for the mean, B^2 for the trace and Analyze Gauss, sqrt(p) B^2 per power
    step, B_W^3 for the third moment: 2 B_W^3 / n is its sensitivity), and the power steps'
    sensitivity is raised by exactly that allowance."""
    X, means, _ = mixture
    n, d, k, p = X.shape[0], X.shape[1], 3, 6
    B = gaussian_mixture_norm_bound(means, 1.0, d)
    PrivateGaussianMixture(k, epsilon=4.0, data_norm=B, whitening=whitening, random_state=0).fit(X)
    kinds = [c[0] for c in recorded]
    mean, third = recorded[0], recorded[-1]
    assert mean[0] == "plain" and mean[2].total == pytest.approx(B) and _terms_ok(mean[2], n)
    assert third[0] == "symmetric" and _terms_ok(third[2], n)
    assert third[2].total == pytest.approx(third[1] * n / 2.0, rel=1e-12)  # B_W^3
    if whitening == "dense":
        assert kinds == ["plain", "symmetric", "symmetric"]
        assert recorded[1][2].total == pytest.approx(B * B) and _terms_ok(recorded[1][2], n)
        return
    trace, steps, projection = recorded[1], recorded[2], recorded[3]
    assert kinds == ["plain", "plain", "power", "symmetric", "symmetric"]
    assert trace[2].total == pytest.approx(B * B) and _terms_ok(trace[2], n, d)
    assert projection[2].total == pytest.approx(p * B * B) and _terms_ok(projection[2], n, 2 * d)
    raised = steps[1] - row_power_sensitivity(B, p) / n
    least = 2.0 * _gamma(n + d) * math.sqrt(p) * B * B  # the allowance of n + d terms at least
    assert least <= raised <= least * (n + d + 64) / (n + d) * (1 + 1e-9)


@pytest.mark.parametrize("whitening", ["dense", "power"])
def test_lda_releases_carry_their_rounding(corpus, recorded, whitening):
    """The topic model's releases: the clipping scale (each term in [0, 1]: total 1), the mean
    (total tau_1), the pair moment (PAIR_PARTS_RATIO tau_2, per power step sqrt(p) times that over
    the weight plus the offset), the third moment (TRIPLE_PARTS_RATIO b^3 over the weight, whose
    sensitivity is 2 b^3 / (n weight)). tau_1, tau_2 and b^3 are read off the sensitivities."""
    C = corpus[0]
    n, d, k = C.shape[0], C.shape[1], 3
    p = 2 * k
    PrivateLatentDirichletAllocation(k, epsilon=4.0, whitening=whitening, random_state=0).fit(C)
    scale, mean, third = recorded[0], recorded[1], recorded[-1]
    assert scale[2].total == 1.0 and _terms_ok(scale[2], n)
    assert mean[2].total == pytest.approx(mean[1] * n / DOCUMENT_SENSITIVITY)
    assert _terms_ok(mean[2], n)
    assert third[2].total == pytest.approx(TRIPLE_PARTS_RATIO * third[1] * n / 2.0, rel=1e-12)
    assert _terms_ok(third[2], n, 2 * d)
    if whitening == "dense":
        pair = recorded[2]
        assert pair[2].total == pytest.approx(PAIR_PARTS_RATIO * pair[1] * n / DOCUMENT_SENSITIVITY)
        assert _terms_ok(pair[2], n)
        return
    projection = recorded[-2]
    parts = PAIR_PARTS_RATIO * projection[1] * n / DOCUMENT_SENSITIVITY  # 4 tau_2 / weight
    offset = projection[2].total / p - parts  # c ||m||^2 of the released mean: in (0, 1)
    assert 0.0 < offset < 1.0 and _terms_ok(projection[2], n, 2 * d)
    step = [c for c in recorded if c[0] == "power"][0]
    raised = step[1] - projection[1]  # the steps' and the projection's sensitivities are equal
    least = 2.0 * _gamma(n + d) * math.sqrt(p) * (parts + offset)
    assert least <= raised <= least * (n + d + 64) / (n + d) * (1 + 1e-9)


def test_lda_summands_within_their_public_bounds():
    """Every document of length 3..6 on 4 words: the absolute values of the pair term's summands,
    ``D (c c^T + diag c)``, have Frobenius norm at most (2 + sqrt(3)) ||E2(c)||_F <=
    PAIR_PARTS_RATIO ||E2(c)||_F (equality at three distinct words); unclipped, the triple term's
    parts ``a (S1^3 + 3 S1 S2 + 2 S3)`` are at most 10 r^3 <= TRIPLE_PARTS_RATIO r^3 (equality
    at one word repeated 3 times whose row norm is r), and clipped at most
    TRIPLE_PARTS_RATIO b^3."""
    rng = np.random.default_rng(3)
    W = rng.standard_normal((4, 2))
    rho = np.linalg.norm(W, axis=1)
    docs = np.array(list(docs_up_to(4, 6)))
    ratios, cubes = [], []
    for c in docs:
        m = c.sum()  # the document's length
        parts = np.linalg.norm(np.outer(c, c) + np.diag(c)) / (m * (m - 1))
        ratios.append(parts / np.linalg.norm(brute_pair_and_triple(c)[0]))
        S1, S2, S3 = (c @ rho**j for j in (1, 2, 3))
        cubes.append((S1**3 + 3 * S1 * S2 + 2 * S3) / (m * (m - 1) * (m - 2)))
    assert max(ratios) <= 2 + math.sqrt(3) + 1e-12 < PAIR_PARTS_RATIO
    assert max(cubes) == pytest.approx(10 * rho.max()**3) and 10 < TRIPLE_PARTS_RATIO
    bound = 0.5 * np.median(cubes)
    C = sp.csr_matrix(docs)
    for b3 in (bound, 1e-3 * bound):
        for i in range(len(docs)):  # one chunk per document: its own parts
            cube, Z, s = _triple_sums(C[i], W, None, b3)
            A = np.abs(W)
            pieces = np.abs(cube) + 3 * np.einsum("ia,ib,ic->abc", A, A, np.abs(Z)) \
                + 2 * np.einsum("i,ia,ib,ic->abc", s, A, A, A)
            assert np.linalg.norm(pieces) <= TRIPLE_PARTS_RATIO * b3 * (1 + 1e-12)


def test_gmm_mean_between_neighbours_within_sensitivity_and_allowance():
    """Brute force on rows built to cancel (norm B, sums near 0 against n B): over shuffled row
    orders and float32 input, the computed means of neighbours (one row replaced by its negative)
    differ by at most 2 B / n plus the allowance 2 gamma_(n+16) B."""
    from dptensor.latent.gaussian_mixture import _moment_sums
    rng = np.random.default_rng(5)
    n, d, B = 3000, 4, 1.0
    X = rng.standard_normal((n, d)) * np.logspace(0, -12, d)
    X = clip_rows(X / np.linalg.norm(X, axis=1, keepdims=True), B)
    limit = 2 * B / n + 2 * _gamma(n + 16) * B
    for rows in (X, clip_rows(X.astype(np.float32), B)):  # the fit clips float32 rows in float32
        others = rows.copy()
        others[0] = -rows[0]
        for _ in range(20):
            order = rng.permutation(n)
            a = PrivateGaussianMixture._reduce({"rows": rows[order]}, _moment_sums, False)[0] / n
            b = PrivateGaussianMixture._reduce({"rows": others[rng.permutation(n)]}, _moment_sums,
                                               False)[0] / n
            assert np.linalg.norm(a - b) <= limit


def test_gmm_on_float32_rows_sums_in_float64_without_a_float64_copy():
    """float32 rows stay float32 (their clipped copy is float32) and every sum runs on float64
    blocks: the fit's peak allocation stays below one float64 copy of X beside the float32 ones,
    and its fitted means are those of the same rows in float64, held as float32."""
    import tracemalloc
    X, _, _, _ = make_gaussian_mixture(100_000, 40, 2, separation=2.0, random_state=1)
    X32 = X.astype(np.float32)
    kw = dict(n_components=2, random_state=0, whitening="dense")
    tracemalloc.start()
    low = PrivateGaussianMixture(**kw).fit(X32)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert peak < 8 * X.size
    high = PrivateGaussianMixture(**kw).fit(X32.astype(np.float64))
    assert low.means_.dtype == np.float32  # computed in float64, then held in the input's type
    np.testing.assert_allclose(low.means_, high.means_, rtol=2**-23, atol=1e-9)


# -- a fit that learns nothing says so, before and after (m2_eigenvalues_noise_, expected_noise) --

def _latent_warnings(est, X):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        est.fit(X)
    return [str(w.message) for w in caught if w.category is UserWarning]


_M2_WARNING = (r"the released m2_eigenvalues_ of component\(s\) \[[0-9, ]+\] is below twice its "
               r"noise level \(m2_eigenvalues_noise_\): those components are dominated by the "
               r"privacy noise\. Use fewer components, more data, a larger epsilon or a tighter "
               r"bound \(data_norm, doc_clip\)\.")


def _mixture_rows(n, seed):
    rng = np.random.default_rng(seed)
    return 4.0 * np.eye(5)[:3][rng.integers(0, 3, n)] + 0.5 * rng.standard_normal((n, 5))


def _topic_corpus(n, seed, d=30, k=3):
    rng = np.random.default_rng(seed)
    topics = rng.dirichlet(np.full(d, 0.1), k)
    theta = rng.dirichlet(np.full(k, 1.0 / k), n)
    return np.array([rng.multinomial(50, t @ topics) for t in theta], dtype=float)


@pytest.mark.parametrize("whitening", ["dense", "power"])
def test_noise_dominated_latent_fits_warn_and_clear_ones_do_not(whitening):
    import re
    models = [(PrivateGaussianMixture(3, data_norm=6.0, whitening=whitening, random_state=0),
               _mixture_rows(300, 0), _mixture_rows(200_000, 1)),
              (PrivateLatentDirichletAllocation(3, whitening=whitening, random_state=0),
               _topic_corpus(200, 2), _topic_corpus(50_000, 3))]
    for est, small, large in models:
        said = _latent_warnings(est.set_params(epsilon=0.3), small)
        assert len(said) == 1 and re.fullmatch(_M2_WARNING, said[0])  # component numbers only
        assert np.any(est.m2_eigenvalues_ < 2 * est.m2_eigenvalues_noise_)
        assert _latent_warnings(est.set_params(epsilon=10.0), large) == []
        assert np.all(est.m2_eigenvalues_ > 10 * est.m2_eigenvalues_noise_)


@pytest.mark.parametrize("whitening", ["dense", "power"])
def test_latent_expected_noise_is_the_noise_the_fit_records(whitening):
    X = _mixture_rows(5000, 4)
    gmm = PrivateGaussianMixture(3, epsilon=1.0, data_norm=6.0, whitening=whitening,
                                 random_state=0)
    preview = gmm.expected_noise(*X.shape)
    plan = plan_noise(1.0, 1e-5, 1, auto_n_iter(5, True) if whitening == "power" else 0)
    if whitening == "dense":  # Analyze Gauss's semicircle edge, 2 sqrt(d) sigma, with sigma the
        # off-diagonal std of the Frobenius geometry's release, 1 / sqrt(2) of the plain one's
        expected = (2 * math.sqrt(5) * plan.z_second[0] * covariance_sensitivity(6.0) / 5000
                    / math.sqrt(2))
    else:  # the last power step's Ritz values, sqrt(2 p) sigma with p = 2k capped at d
        expected = math.sqrt(2 * 5) * plan.z_second[-2] * math.sqrt(2) * 36.0 / 5000
    assert preview.noise == pytest.approx(expected) and preview.signal_bound == 36.0
    _latent_warnings(gmm, X)
    np.testing.assert_allclose(gmm.m2_eigenvalues_noise_, preview.noise, rtol=1e-12)
    # the topic model's preview is at the unclipped scale: the fit's own without clipping (up to
    # the released mean weight, 1 here but for its noise), at most it with clipping
    C = _topic_corpus(20_000, 5)
    for clip in (None, 1.0):
        lda = PrivateLatentDirichletAllocation(3, epsilon=1.0, doc_clip=clip, whitening=whitening,
                                               random_state=0)
        preview = lda.expected_noise(*C.shape)
        assert preview.signal_bound == 1.0
        _latent_warnings(lda, C)
        if clip is None:
            np.testing.assert_allclose(lda.m2_eigenvalues_noise_, preview.noise, rtol=0.05)
        else:
            assert np.all(lda.m2_eigenvalues_noise_ <= preview.noise)
    free = PrivateGaussianMixture(3, data_norm=6.0, whitening=whitening)
    assert free.expected_noise(*X.shape).noise == 0.0
    assert np.all(free.fit(X).m2_eigenvalues_noise_ == 0)


# -- scikit-learn's mixture and LDA attributes, and float32 in, float32 out ------------------------
@pytest.fixture(scope="module")
def small_mixture():
    X, means, weights, _ = make_gaussian_mixture(4000, 5, 3, separation=2.0, random_state=3)
    return X


def sklearn_twin(gmm):
    """scikit-learn's spherical GaussianMixture holding the same (released) parameters."""
    from sklearn.mixture import GaussianMixture
    twin = GaussianMixture(gmm.n_components, covariance_type="spherical")
    twin.weights_, twin.means_ = gmm.weights_, gmm.means_
    twin.covariances_, twin.precisions_cholesky_ = gmm.covariances_, gmm.precisions_cholesky_
    return twin


@pytest.mark.parametrize("epsilon", [np.inf, 2.0])
def test_gmm_bic_aic_and_precisions_are_scikit_learns_on_the_same_parameters(small_mixture,
                                                                           epsilon):
    X = small_mixture
    B = float(np.max(np.linalg.norm(X, axis=1)))
    gmm = PrivateGaussianMixture(3, epsilon=epsilon, data_norm=B, random_state=0).fit(X)
    twin, n, k = sklearn_twin(gmm), len(X), 3
    np.testing.assert_allclose(gmm.precisions_, 1.0 / gmm.covariances_)
    np.testing.assert_allclose(gmm.score_samples(X), twin.score_samples(X), rtol=1e-10)
    # one common variance where scikit-learn's spherical model counts k
    assert gmm._n_parameters() == twin._n_parameters() - (k - 1) == 3 * 5 + 2 + 1
    np.testing.assert_allclose(gmm.bic(X), twin.bic(X) - (k - 1) * np.log(n), rtol=1e-10)
    np.testing.assert_allclose(gmm.aic(X), twin.aic(X) - 2 * (k - 1), rtol=1e-10)
    assert gmm.n_iter_ == gmm.n_iter and gmm.converged_ is True
    # the criterion prefers the true number of components to one
    one = PrivateGaussianMixture(1, random_state=0).fit(X)
    assert gmm.bic(X) < one.bic(X) and gmm.aic(X) < one.aic(X)


def test_gmm_sample_draws_from_the_released_mixture_on_its_own_stream(small_mixture):
    gmm = PrivateGaussianMixture(3, random_state=0).fit(small_mixture)
    X, y = gmm.sample(60_000, random_state=1)
    assert X.shape == (60_000, 5) and y.shape == (60_000,)
    np.testing.assert_allclose(np.bincount(y, minlength=3) / len(y), gmm.weights_, atol=0.01)
    for j in range(3):
        np.testing.assert_allclose(X[y == j].mean(axis=0), gmm.means_[j], atol=0.05)
        np.testing.assert_allclose(X[y == j].var(axis=0), gmm.covariances_[j], rtol=0.05)
    np.testing.assert_array_equal(gmm.sample(7, random_state=1)[0],
                                  gmm.sample(7, random_state=1)[0])  # seeded: reproducible
    # None takes the estimator's random_state; a Generator advances
    np.testing.assert_array_equal(gmm.sample(7)[0], gmm.sample(7, random_state=0)[0])
    g = np.random.default_rng(5)
    assert not np.array_equal(gmm.sample(7, random_state=g)[0], gmm.sample(7, random_state=g)[0])
    # the stream is keyed apart from a seed's plain stream (and the fit's, keyed by its spend)
    plain = np.random.default_rng(0).standard_normal(5)
    assert not np.any(np.isin(np.round(gmm.sample(50, random_state=0)[0], 12), np.round(plain, 12)))
    for bad in (0, -1, 2.5, True):
        with pytest.raises(ValueError, match="n_samples"):
            gmm.sample(bad)


def test_gmm_float32_in_float32_out(small_mixture):
    X32 = small_mixture.astype(np.float32)
    gmm32 = PrivateGaussianMixture(3, random_state=0).fit(X32)
    gmm64 = PrivateGaussianMixture(3, random_state=0).fit(X32.astype(np.float64))
    for name in ("means_", "weights_", "covariances_", "precisions_", "precisions_cholesky_"):
        assert getattr(gmm32, name).dtype == np.float32, name
        np.testing.assert_allclose(getattr(gmm32, name), getattr(gmm64, name), rtol=1e-4)
    assert gmm32.predict_proba(X32).dtype == gmm32.score_samples(X32).dtype == np.float32
    # either in float64 gives float64, as scikit-learn's promotes them
    assert gmm64.predict_proba(X32).dtype == np.float64
    assert gmm32.score_samples(X32.astype(np.float64)).dtype == np.float64
    np.testing.assert_array_equal(gmm32.predict(X32), gmm64.predict(X32))


def test_lda_perplexity_is_scikit_learns_formula_on_the_words_likelihood(corpus):
    C, _, _ = corpus
    model = PrivateLatentDirichletAllocation(3, random_state=0).fit(C)
    docs = sp.csr_matrix(C[:300], dtype=float)
    theta = model.transform(docs)
    dense = docs.toarray()
    log_lik = np.sum(dense * np.log(np.maximum(theta @ model.components_, 1e-300)))
    np.testing.assert_allclose(model.score(docs), log_lik, rtol=1e-8)
    np.testing.assert_allclose(model.perplexity(docs), np.exp(-log_lik / dense.sum()), rtol=1e-8)
    assert model.n_iter_ == 0
    refined = PrivateLatentDirichletAllocation(3, refine_iter=2, random_state=0).fit(C)
    assert refined.n_iter_ == 2 and not hasattr(model, "partial_fit")


def test_lda_float32_in_float32_out(corpus):
    C, _, _ = corpus
    C32 = C[:2000].toarray().astype(np.float32)
    model32 = PrivateLatentDirichletAllocation(3, random_state=0).fit(C32)
    model64 = PrivateLatentDirichletAllocation(3, random_state=0).fit(C32.astype(np.float64))
    for name in ("components_", "alpha_"):
        assert getattr(model32, name).dtype == np.float32, name
        np.testing.assert_allclose(getattr(model32, name), getattr(model64, name), rtol=1e-5,
                                   atol=1e-7)
    assert model32.transform(C32).dtype == np.float32
    assert model32.transform(sp.csr_matrix(C32)).dtype == np.float32
    # the model's type whatever the input's, as scikit-learn's LatentDirichletAllocation
    assert model32.transform(C32.astype(np.float64)).dtype == np.float32
    assert model64.transform(C32).dtype == np.float64
    private = PrivateLatentDirichletAllocation(3, epsilon=1.0, random_state=0).fit(C32)
    assert private.components_.dtype == np.float32


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_a_private_mixture_holds_no_clipped_copy_of_its_rows(dtype):
    X = np.random.default_rng(0).standard_normal((60_000, 40)).astype(dtype)
    est = PrivateGaussianMixture(3, epsilon=1.0, delta=1e-9, data_norm=8.0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        est.fit(X[:500])  # warm up: imports and caches
        tracemalloc.start()
        est.fit(X)
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
    # one clip factor and one whitened row (k floats) per row, blocks of rows, d x d sums
    assert peak < X.nbytes / 2, (peak, X.nbytes)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_clipped_rows_are_clip_rows_and_unclipped_blocks_are_views(dtype):
    from dptensor.latent._base import ClippedRows

    rng = np.random.default_rng(4)
    X = rng.standard_normal((9000, 12)).astype(dtype)
    X[5000:5003] *= 10.0  # three clipped rows, in one block
    rows = ClippedRows(X, 8.0)
    expected = clip_rows(X, 8.0)
    for start, stop in ((0, 4096), (4096, 8192), (8192, 9000), (4999, 5001)):
        block = rows.block(start, stop)
        assert block.dtype == dtype and np.array_equal(block, expected[start:stop])
        assert np.shares_memory(block, X) == (stop <= 5000 or start >= 5003)


def test_a_seeded_private_mixture_is_the_same_without_the_compiled_kernels(monkeypatch):
    from dptensor.algorithms import compiled

    X = make_gaussian_mixture(20_000, 12, 3, separation=3.0, random_state=2)[0]
    X[::7] *= 3.0  # many clipped rows: blocks copied and blocks read in place
    params = dict(epsilon=1.0, delta=1e-9, data_norm=10.0, random_state=1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        fast = PrivateGaussianMixture(3, **params).fit(X)
        monkeypatch.setattr(compiled, "ENABLED", False)
        plain = PrivateGaussianMixture(3, **params).fit(X)
    for name in fast._fitted_arrays:
        assert np.array_equal(getattr(fast, name), getattr(plain, name)), name


@noise_dominated("m2_eigenvalues_")  # the small corpus at epsilon=1: a component may be weak
def test_lda_auto_doc_clip_is_one_where_the_noise_is_small_and_less_below(corpus):
    """``doc_clip="auto"`` (the default) reads n, d and the target only: sqrt(q / q0) within
    [0.5, 1] for q = n mu / sqrt(d). A fit at auto is bit for bit the fit at the clip it resolves
    to: 1 at many documents (the previous default's fit), less at few; with groups the rule
    counts the groups. (The seeded noise is keyed by the parameters, "auto" among them, so the
    fits are compared through the clip they record and their cost.)"""
    from dptensor.accounting.composition import gdp_mu
    from dptensor.latent._base import AUTO_DOC_CLIP, auto_doc_clip

    least, most, q0 = AUTO_DOC_CLIP
    assert PrivateLatentDirichletAllocation().doc_clip == "auto"
    assert auto_doc_clip(10**6, 2000, 1.0, 1e-5) == most
    assert auto_doc_clip(10, 2000, 1.0, 1e-5) == least
    q = 3000 * gdp_mu(1.0, 1e-5) / math.sqrt(60)
    assert auto_doc_clip(3000, 60, 1.0, 1e-5) == pytest.approx(math.sqrt(q / q0))
    C, _, _ = corpus
    for eps, clip in ((1.0, math.sqrt(q / q0)), (64.0, 1.0)):
        kw = dict(epsilon=eps, delta=1e-5, random_state=3)
        auto = PrivateLatentDirichletAllocation(3, **kw).fit(C)
        fixed = PrivateLatentDirichletAllocation(3, doc_clip=clip, **kw).fit(C)
        assert auto.doc_clip_ == fixed.doc_clip_ == pytest.approx(clip, rel=1e-15)
        assert auto.privacy_cost_ == fixed.privacy_cost_ and auto.privacy_cost_.epsilon == pytest.approx(eps)
    assert PrivateLatentDirichletAllocation(3).fit(C).doc_clip_ is None  # no privacy: no clip
    groups = np.arange(C.shape[0]) // 3  # 1000 authors of three documents
    q = 1000 * gdp_mu(1.0, 1e-5) / math.sqrt(60)
    auto = PrivateLatentDirichletAllocation(3, epsilon=1.0, delta=1e-5, random_state=3).fit(
        C, groups=groups)
    assert math.sqrt(q / q0) < least and auto.doc_clip_ == least  # 1000 units, not 3000
