"""AdaptivePrivatePCA: the AboveThreshold step, the filtered update's sensitivity, the recorded
cost, utility against the non-adaptive row-level power method, and the scikit-learn contract."""
from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from sklearn.utils.estimator_checks import parametrize_with_checks

from dptensor import AdaptivePrivatePCA, BudgetExceededError, PrivacyAccountant, PrivacyWarning
from dptensor.algorithms import adaptive_power as mod
from dptensor.accounting import AboveThresholdEvent, ComposedEvent, GaussianEvent
from dptensor.algorithms.adaptive_power import (choose_threshold, contributions,
                                               filtered_sensitivity, filtered_update, grid_counts,
                                               svt_epsilon_for, threshold_grid, zcdp_rho)
from dptensor.mechanisms import clip_rows
from dptensor.metrics import sin_theta_distance
from expected_warnings import NON_PRIVATE, noise_dominated


def gaussian_rows(n, d, rng, spike=5.0, data_norm=3.0):
    """Gaussian rows with covariance proportional to I + spike v v^T (v Haar-random: low coherence),
    trace 1 (typical row norm 1), clipped to the public bound data_norm (rarely binding)."""
    Q = np.linalg.qr(rng.standard_normal((d, d)))[0]
    scale = np.ones(d)
    scale[0] += spike
    X = (rng.standard_normal((n, d)) * np.sqrt(scale / scale.sum())) @ Q.T
    return clip_rows(X, data_norm), Q[:, :1].T


def spiked_rows(n, d, rng, spikes=(5.0,)):
    """Gaussian rows, covariance I + sum s_i v_i v_i^T on a Haar-random basis (low coherence),
    scaled by one common factor so the longest row has norm 1 (so data_norm=1 is tight)."""
    Q = np.linalg.qr(rng.standard_normal((d, d)))[0]
    scale = np.ones(d)
    scale[:len(spikes)] += np.asarray(spikes)
    X = (rng.standard_normal((n, d)) * np.sqrt(scale)) @ Q.T
    return X / np.linalg.norm(X, axis=1).max(), Q[:, :len(spikes)].T


# ---------------------------------------------------------------------------- the grid and counts

def test_grid_is_public_geometric_and_tops_at_data_norm_squared():
    grid = threshold_grid(1000, 2.0)
    assert grid[-1] == 4.0  # ||a|| |a.x| <= ||a||^2 <= data_norm^2 for a unit x
    np.testing.assert_allclose(grid[1:] / grid[:-1], 2.0)
    assert grid[0] <= 4.0 / 1000 < 2 * grid[0]
    assert threshold_grid(1, 1.0).tolist() == [1.0]


def test_grid_counts_match_brute_force_and_include_ties():
    rng = np.random.default_rng(0)
    grid = threshold_grid(64, 1.0)
    c = np.concatenate([rng.uniform(0, 1, 200), grid[[0, 3, 6]], [0.0]])  # exact ties count as kept
    brute = np.array([(c <= g).sum() for g in grid])
    np.testing.assert_array_equal(grid_counts(c, grid), brute)


def test_contributions_are_the_norms_of_the_per_row_update_terms():
    rng = np.random.default_rng(1)
    X = rng.standard_normal((30, 4))
    x = rng.standard_normal(4)
    x /= np.linalg.norm(x)
    c = contributions(X @ x, np.einsum("ij,ij->i", X, X))
    np.testing.assert_allclose(c, np.linalg.norm(X * (X @ x)[:, None], axis=1))


# ---------------------------------------------------------------------------- AboveThreshold step

def test_equal_contributions_pick_the_grid_point_just_above():
    # Every row a_i = +-r e_1 and x = e_1: c_i = r^2 = 0.3 for all rows; the grid point just above
    # is 0.5. Counts are 0 below it and n at and above it, far beyond the Laplace noise.
    n, r2 = 5000, 0.3
    signs = np.where(np.random.default_rng(2).random(n) < 0.5, -1.0, 1.0)
    X = np.zeros((n, 3))
    X[:, 0] = signs * math.sqrt(r2)
    x = np.array([1.0, 0.0, 0.0])
    c = contributions(X @ x, np.einsum("ij,ij->i", X, X))
    grid = threshold_grid(n, 1.0)
    rng = np.random.default_rng(3)
    picks = [choose_threshold(c, grid, 0.1, 0.05, rng) for _ in range(300)]
    # P(pick != 0.5) = P(L_q - L_t < -180) = 0.0074 per run: 0.97 fails once in 1e4 seeds, 0.99 in 6.
    assert np.mean(np.isclose(picks, 0.5)) >= 0.97


def test_a_few_large_rows_are_filtered_many_are_not():
    n, eps1, beta = 20000, 0.5, 0.05
    margin = 6 * math.log(1 / beta) / eps1  # ~36 rows may be dropped
    grid = threshold_grid(n, 1.0)
    rng = np.random.default_rng(4)
    few = np.r_[np.full(n - 10, 0.1), np.ones(10)]       # 10 rows < margin: drop them, theta = 0.125
    many = np.r_[np.full(n - 400, 0.1), np.ones(400)]    # 400 rows >> margin: keep all, theta = 1
    assert 10 < margin and 400 > 10 * margin             # the two cases are what they claim to be
    picks = np.array([choose_threshold(few, grid, eps1, beta, rng) for _ in range(200)])
    # The count at 0.125 clears the target by 26 against Lap(8) + Lap(4) noise: most runs stop
    # there; a miss (probability 0.025) moves one grid point up, where the count clears by the
    # same 26. The threshold's noise is shared, so two misses in a row (a pick of 0.5 or more)
    # have probability 0.0017 per run (exact integral, and 20 000 simulated runs): 0.34 expected
    # in 200 runs, more than 3 with probability 5e-4.
    assert np.mean(picks == 0.125) >= 0.9 and np.sum(picks > 0.25) <= 3
    assert [choose_threshold(many, grid, eps1, beta, rng) for _ in range(200)] == [1.0] * 200


def test_no_grid_point_clears_falls_back_to_the_top(monkeypatch):
    monkeypatch.setattr(mod, "above_threshold", lambda *a, **k: None)
    assert choose_threshold(np.zeros(10), threshold_grid(10, 3.0), 1.0, 0.05, None) == 9.0


# ---------------------------------------------------------------------------- sensitivities

def _rows_on_a_lattice(d, data_norm):
    """Candidate rows: a small lattice in the data_norm ball, plus the sphere points along x's axes."""
    pts = np.array(list(itertools.product([-1.0, -0.5, 0.0, 0.5, 1.0], repeat=d))) * data_norm
    return pts[np.linalg.norm(pts, axis=1) <= data_norm + 1e-12]


def test_filtered_update_sensitivity_brute_force():
    # Every neighbour pair (replace one row by any candidate row) of several small data sets, for
    # several iterates and every grid threshold: ||update(X) - update(X')|| <= s(theta) <= 2 theta.
    # Candidates: a lattice in the data_norm ball plus, for each iterate, the rows that reach the
    # bound (norm-data_norm rows at the angles where their term has norm theta or sits at 45 deg).
    rng = np.random.default_rng(5)
    d, n, data_norm = 2, 4, 1.5
    lattice = _rows_on_a_lattice(d, data_norm)
    worst_ratio = {}
    for _ in range(3):
        X = lattice[rng.choice(len(lattice), n)]
        for x in (np.array([1.0, 0.0]), np.array([0.6, 0.8]), rng.standard_normal(d)):
            x = x / np.linalg.norm(x)
            e = np.array([-x[1], x[0]])
            for theta in threshold_grid(n, data_norm):
                s = filtered_sensitivity(theta, data_norm)
                assert s <= 2 * theta
                cos = np.clip(theta / data_norm**2, 0, np.sqrt(0.5))
                sin = np.sqrt(1 - cos**2)
                edge = data_norm * np.array([cos * x + sin * e, cos * x - sin * e])
                cands = np.vstack([lattice, edge * (1 - 1e-12)])

                def update(Z):
                    p = Z @ x
                    return filtered_update(Z, p, contributions(p, np.einsum("ij,ij->i", Z, Z)), theta)

                for i, b in itertools.product(range(n), cands):
                    for first in (X[i], edge[0] * (1 - 1e-12)):
                        Xa, Xb = X.copy(), X.copy()
                        Xa[i], Xb[i] = first, b
                        gap = np.linalg.norm(update(Xb) - update(Xa))
                        assert gap <= s * (1 + 1e-9)
                        worst_ratio[theta] = max(worst_ratio.get(theta, 0.0), gap / s)
    assert min(worst_ratio.values()) > 0.999  # the bound is reached at every threshold


def test_counts_sensitivity_is_one_brute_force():
    rng = np.random.default_rng(6)
    d, n, data_norm = 2, 5, 1.0
    cands = _rows_on_a_lattice(d, data_norm)
    X = cands[rng.choice(len(cands), n)]
    x = np.array([0.6, 0.8])
    grid = threshold_grid(n, data_norm)

    def counts(Z):
        return grid_counts(contributions(Z @ x, np.einsum("ij,ij->i", Z, Z)), grid)

    base = counts(X)
    for i, b in itertools.product(range(n), cands):
        Xp = X.copy()
        Xp[i] = b
        assert np.max(np.abs(counts(Xp) - base)) <= 1


def test_implicit_deflation_equals_projecting_the_rows():
    # The loop never forms P a; its contributions and update must be those of the projected rows.
    rng = np.random.default_rng(7)
    X = clip_rows(rng.standard_normal((50, 6)), 1.0)
    V = np.linalg.qr(rng.standard_normal((6, 2)))[0].T
    P = np.eye(6) - V.T @ V
    x = P @ rng.standard_normal(6)
    x /= np.linalg.norm(x)
    Xp = X @ P
    assert np.all(np.linalg.norm(Xp, axis=1) <= 1 + 1e-12)  # projection keeps rows in the ball
    sq = np.einsum("ij,ij->i", X, X) - ((X @ V.T) ** 2).sum(axis=1)
    c = contributions(X @ x, sq)
    c_true = contributions(Xp @ x, np.einsum("ij,ij->i", Xp, Xp))
    np.testing.assert_allclose(c, c_true, atol=1e-12)
    theta = np.median(c)
    np.testing.assert_allclose(P @ filtered_update(X, X @ x, c, theta),
                               filtered_update(Xp, Xp @ x, c_true, theta), atol=1e-12)


# ---------------------------------------------------------------------------- accounting

def test_budget_split_definition():
    rho = zcdp_rho(1.0, 1e-5)
    # rho-zCDP -> (rho + 2 sqrt(rho ln(1/delta)), delta)-DP, solved for rho.
    assert math.isclose(rho + 2 * math.sqrt(rho * math.log(1e5)), 1.0, rel_tol=1e-12)
    eps1 = svt_epsilon_for(1.0, 1e-5, 0.2, 5)
    assert math.isclose(5 * eps1**2 / 2, 0.2 * rho, rel_tol=1e-12)


@pytest.mark.parametrize("n_components, n_iter", [(1, 5), (2, 3)])
@noise_dominated("explained_variance_")  # one spike: a second component is noise
def test_recorded_cost_equals_target_and_is_recorded_before_release(monkeypatch, n_components, n_iter):
    rng = np.random.default_rng(8)
    X, _ = spiked_rows(3000, 8, rng)
    budget = PrivacyAccountant(epsilon=3.0, delta=1e-5)
    spent_at_first_release = []
    real = mod.above_threshold

    def spy(*args, **kwargs):
        spent_at_first_release.append(budget.spent()[0])
        return real(*args, **kwargs)

    monkeypatch.setattr(mod, "above_threshold", spy)
    est = AdaptivePrivatePCA(n_components=n_components, epsilon=0.7, data_norm=1.0, n_iter=n_iter,
                             accountant=budget, random_state=0).fit(X)
    rounds = n_components * n_iter
    assert spent_at_first_release[0] == pytest.approx(0.7, rel=1e-6)  # recorded before any release
    assert est.privacy_cost_.epsilon == pytest.approx(0.7, rel=1e-6)
    assert est.privacy_cost_.delta == 1e-5
    assert budget.spent()[0] == pytest.approx(0.7, rel=1e-6)
    z_var = est.variance_noise_multiplier_
    assert est.privacy_cost_.event == ComposedEvent((AboveThresholdEvent(est.svt_epsilon_, rounds),
                                                     GaussianEvent(est.noise_multiplier_, rounds),
                                                     GaussianEvent(z_var, 1)))
    assert 1 / (2 * z_var**2) == pytest.approx(mod.VARIANCE_SHARE * zcdp_rho(0.7, 1e-5))
    assert est.svt_epsilon_ == pytest.approx(svt_epsilon_for(0.7, 1e-5, est.svt_fraction, rounds))
    # calibrate returns the least noise: 1% less noise would overspend.
    from dptensor.accounting import epsilon_of
    cheaper = ComposedEvent((AboveThresholdEvent(est.svt_epsilon_, rounds),
                             GaussianEvent(0.99 * est.noise_multiplier_, rounds), GaussianEvent(z_var, 1)))
    assert epsilon_of(cheaper, 1e-5) > 0.7
    assert est.thresholds_.shape == (n_components, n_iter)
    assert set(est.thresholds_.ravel()) <= set(threshold_grid(3000, 1.0))


def test_budget_refused_before_touching_the_data(monkeypatch):
    budget = PrivacyAccountant(epsilon=0.5, delta=1e-5)
    monkeypatch.setattr(mod, "above_threshold", lambda *a, **k: pytest.fail("released over budget"))
    X = np.random.default_rng(9).standard_normal((100, 3)) / 3
    with pytest.raises(BudgetExceededError):
        AdaptivePrivatePCA(epsilon=1.0, data_norm=1.0, accountant=budget, random_state=0).fit(X)
    assert budget.spent()[0] == 0.0


# ---------------------------------------------------------------------------- utility

def test_beats_the_non_adaptive_row_level_power_method_on_low_coherence_data():
    # n=1e5, d=50, spike 5 (eigengap ratio 1/6), rows of typical norm 1 under the public bound
    # data_norm=3 (a bound fixed before seeing the data), epsilon=1, both at default settings.
    # The non-adaptive method adds noise for a row of norm 3 (sensitivity 9); the adaptive one
    # finds theta = 9/4 (the (n - m)-th contribution is about 1.2), exact sensitivity 0.48 x 9,
    # and pays for AboveThreshold with 10% of the budget. The errors are heavy-tailed (about one
    # fit in fifty, of either method, ends far off), so a mean over a few seeds is fragile (the
    # mean over 6 seeds clears 0.85 in only 3 resampled seed sets out of 4); the median is not.
    # Measured over 96 seeds: median sin^2 8.3e-4 against 1.23e-3 (ratio 0.67), and the median
    # ratio over 20 seeds clears 0.85 in 98% of resampled seed sets. One row under 1e5 keeps the
    # default delta=1e-5 below 1/n (the same rows, less the last).
    from dptensor import PrivatePCA

    ad, na = [], []
    for seed in range(20):
        X, V = gaussian_rows(99_999, 50, np.random.default_rng(100 + seed), data_norm=3.0)
        fit = dict(epsilon=1.0, data_norm=3.0, random_state=seed)
        a = AdaptivePrivatePCA(**fit).fit(X)
        p = PrivatePCA(n_components=1, method="power", centered=True, **fit).fit(X)
        ad.append(sin_theta_distance(a.components_, V))
        na.append(sin_theta_distance(p.components_, V))
    assert np.median(ad) < 0.85 * np.median(na), (ad, na)
    assert np.median(ad) < 2e-3  # and it has found the direction


def test_non_private_is_the_exact_power_method_with_deflation():
    rng = np.random.default_rng(10)
    X, _ = spiked_rows(2000, 6, rng, spikes=(8.0, 3.0))
    est = AdaptivePrivatePCA(n_components=2, epsilon=np.inf, data_norm=None, n_iter=200,
                             random_state=0)
    with pytest.warns(PrivacyWarning, match="epsilon=inf"):
        est.fit(X)
    w, U = np.linalg.eigh(X.T @ X)
    assert sin_theta_distance(est.components_[:1], U[:, -1:].T) < 1e-10
    assert sin_theta_distance(est.components_, U[:, -2:].T) < 1e-10
    assert np.all(np.isinf(est.thresholds_))
    assert not est.privacy_cost_.private


def test_private_deflation_finds_the_top_two_subspace():
    rng = np.random.default_rng(11)
    X, V = spiked_rows(99_999, 20, rng, spikes=(10.0, 5.0))  # delta=1e-5 below 1/n
    est = AdaptivePrivatePCA(n_components=2, epsilon=2.0, data_norm=1.0, random_state=0).fit(X)
    np.testing.assert_allclose(est.components_ @ est.components_.T, np.eye(2), atol=1e-12)
    assert sin_theta_distance(est.components_, V) < 0.05


# ---------------------------------------------------------------------------- estimator contract

def test_float32_kept_input_untouched_and_feature_names():
    rng = np.random.default_rng(12)
    X = (rng.standard_normal((500, 4)) / 2).astype(np.float32)
    X0 = X.copy()
    est = AdaptivePrivatePCA(n_components=2, epsilon=1.0, data_norm=0.5, random_state=0).fit(X)
    np.testing.assert_array_equal(X, X0)  # clipping happened on a copy
    assert est.components_.dtype == np.float32
    assert est.transform(X).dtype == np.float32
    assert est.transform(X).shape == (500, 2)
    assert est.get_feature_names_out().tolist() == ["adaptiveprivatepca0", "adaptiveprivatepca1"]


def test_same_seed_same_release():
    X, _ = spiked_rows(2000, 5, np.random.default_rng(13))
    a = AdaptivePrivatePCA(epsilon=1.0, data_norm=1.0, random_state=3).fit(X)
    b = AdaptivePrivatePCA(epsilon=1.0, data_norm=1.0, random_state=3).fit(X)
    np.testing.assert_array_equal(a.components_, b.components_)
    np.testing.assert_array_equal(a.thresholds_, b.thresholds_)


@pytest.mark.parametrize("params, error, match", [
    ({"beta": 0.0}, ValueError, "beta"),
    ({"beta": 1.5}, ValueError, "beta"),
    ({"svt_fraction": 1.0}, ValueError, "svt_fraction"),
    ({"svt_fraction": "0.2"}, TypeError, "svt_fraction"),
    ({"n_iter": 0}, ValueError, "n_iter"),
    ({"n_components": 4}, ValueError, "n_components"),
    ({"data_norm": None}, ValueError, "data_norm"),
    ({"data_norm": -1.0}, ValueError, "data_norm"),
    ({"epsilon": 0.0}, ValueError, "epsilon"),
    ({"delta": 0.0}, ValueError, "delta"),
])
def test_bad_parameters_are_named(params, error, match):
    X = np.random.default_rng(14).standard_normal((20, 3))
    with pytest.raises(error, match=match):
        AdaptivePrivatePCA(**{"epsilon": 1.0, "data_norm": 1.0, **params}).fit(X)


@parametrize_with_checks([AdaptivePrivatePCA(epsilon=1.0, data_norm=1.0, random_state=0),
                          AdaptivePrivatePCA(n_components=2)])
@NON_PRIVATE  # the second estimator is the exact method, at epsilon=inf
@noise_dominated("explained_variance_")  # the checks' few rows, at epsilon=1
def test_sklearn_contract(estimator, check):
    check(estimator)


# ---------------------------------------------------------------------------- variances, inverse_transform

def test_component_variances_sensitivity_brute_force():
    """((a . v_j)^2)_j moves by at most sqrt(min(k, 2)) B^2 under replace-one, and reaches it."""
    rng = np.random.default_rng(30)
    B, d = 2.0, 4
    for k in (1, 2, 3):
        V = np.linalg.qr(rng.standard_normal((d, k)))[0].T
        worst = 0.0
        for _ in range(3000):
            a, b = (clip_rows(rng.standard_normal((1, d)) * s, B)[0] for s in rng.uniform(0.1, 5, 2))
            worst = max(worst, np.linalg.norm((V @ a) ** 2 - (V @ b) ** 2))
        bound = math.sqrt(min(k, 2)) * B**2
        assert worst <= bound * (1 + 1e-12)
        a, b = B * V[0], (B * V[1] if k > 1 else np.zeros(d))
        assert np.linalg.norm((V @ a) ** 2 - (V @ b) ** 2) == pytest.approx(bound)
        X = rng.standard_normal((6, d))
        Y = X.copy()
        X[2], Y[2] = a, b
        moved = mod.component_variances(X, V, B, 0.0, None) - mod.component_variances(Y, V, B, 0.0, None)
        assert np.linalg.norm(moved) == pytest.approx(bound)


def test_explained_variance_tracks_the_spectrum_and_its_noise_is_drawn_as_derived(monkeypatch):
    X, _ = spiked_rows(50_000, 20, np.random.default_rng(31), spikes=(10.0, 5.0))
    true = np.linalg.eigvalsh(X.T @ X / (X.shape[0] - 1))[::-1][:2]
    exact = AdaptivePrivatePCA(n_components=2, n_iter=50, random_state=0)
    with pytest.warns(PrivacyWarning, match="epsilon=inf"):
        exact.fit(X)
    np.testing.assert_allclose(exact.explained_variance_, true, rtol=1e-6)
    assert np.all(exact.explained_variance_noise_ == 0)
    calls = []
    real = mod.gaussian_release

    def spy(value, sensitivity, multiplier, rng, dtype=None, *, rounding):
        calls.append((np.shape(value), float(sensitivity), float(multiplier)))
        roundings.append(rounding)
        values.append(np.array(value, dtype=float))
        return real(value, sensitivity, multiplier, rng, dtype, rounding=rounding)

    roundings, values = [], []

    monkeypatch.setattr(mod, "gaussian_release", spy)
    est = AdaptivePrivatePCA(n_components=2, epsilon=4.0, data_norm=1.0, random_state=0).fit(X)
    assert calls[-1] == ((2,), pytest.approx(math.sqrt(2.0)), pytest.approx(est.variance_noise_multiplier_))
    # Every round's update: one release of the d-vector at the sensitivity of its released threshold.
    rounds = calls[:-1]
    assert len(rounds) == est.thresholds_.size
    for (shape, sens, mult), theta in zip(rounds, est.thresholds_.ravel()):
        assert shape == (20,) and mult == pytest.approx(est.noise_multiplier_)
        assert sens == pytest.approx(mod.filtered_sensitivity(theta, 1.0))
    n = X.shape[0]
    # Each float sum's rounding: n row terms, of norm at most theta (first component), plus a
    # row's own dot product (one B^2 = 1 more, d = 20 more operations); after k = 1 released
    # component the projection too: (k + 2)(n + 1) B^2 and n + d + k + 2; the variances' n B^2.
    d, (first, second) = 20, est.thresholds_
    expected = [(n * min(t, 1.0) + 1.0, n + d) for t in first] + \
        [(3.0 * (n + 1), n + d + 3)] * len(second) + [(n * 1.0, n)]
    assert [(r.total, r.terms, r.dtype) for r in roundings] == \
        [(total, terms, np.float64) for total, terms in expected]
    # A deflated round releases the projected update, the statistic the lens of theta bounds.
    for value in values[len(first):-1]:
        assert abs(est.components_[0] @ value) <= 1e-12 * np.linalg.norm(value)
    expected_noise = math.sqrt(2) * est.variance_noise_multiplier_ / (n - 1)
    assert est.explained_variance_noise_[0] == pytest.approx(expected_noise)
    np.testing.assert_allclose(est.explained_variance_, true, rtol=0.1)


def test_inverse_transform_maps_back_onto_the_components_span():
    X, _ = spiked_rows(3000, 6, np.random.default_rng(32), spikes=(8.0, 3.0))
    est = AdaptivePrivatePCA(n_components=2, epsilon=2.0, data_norm=1.0, random_state=0).fit(X)
    back = est.inverse_transform(est.transform(X))
    P = est.components_.T @ est.components_
    np.testing.assert_allclose(back, X @ P, atol=1e-12)
    np.testing.assert_allclose(est.transform(back), est.transform(X), atol=1e-12)
    with pytest.raises(ValueError, match="shape"):
        est.inverse_transform(X)


def test_filtered_update_sums_float32_rows_in_float64():
    """float32 rows are widened block by block: the update is their float64 sum (whose rounding
    the release allows for), not a float32 one, whose error would be ~1e7 times larger."""
    rng = np.random.default_rng(41)
    X = (rng.standard_normal((3 * mod.BLOCK_ROWS + 17, 8)) / 4).astype(np.float32)
    proj = X @ np.ones(8, dtype=np.float32) / np.float32(math.sqrt(8))
    c = np.abs(proj.astype(np.float64)) * np.linalg.norm(X.astype(np.float64), axis=1)
    theta = float(np.quantile(c, 0.9))
    got = mod.filtered_update(X, proj, c, theta)
    X64 = X.astype(np.float64)
    want = X64.T @ np.where(c <= theta, proj.astype(np.float64), 0.0)
    assert got.dtype == np.float64
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)


@noise_dominated("explained_variance_")  # 500 rows at epsilon=2: the second may be weak
def test_float32_rows_are_projected_in_float64(monkeypatch):
    """The threshold tests and the update read each row's dot product with the iterate: in
    float64 for float32 rows too, the precision the update's rounding allowance assumes."""
    import dptensor.algorithms.adaptive_power as ap
    seen = []
    real = ap.contributions
    monkeypatch.setattr(ap, "contributions", lambda proj, sq: seen.append(proj.dtype) or real(proj, sq))
    X = np.random.default_rng(41).standard_normal((500, 8)).astype(np.float32)
    AdaptivePrivatePCA(2, epsilon=2.0, data_norm=3.0, n_iter=2, random_state=0).fit(X)
    assert seen and all(dtype == np.float64 for dtype in seen)
    np.testing.assert_array_equal(ap.row_products(X, np.ones(8)), X.astype(np.float64) @ np.ones(8))


# ---------------------------------------------------------------- scikit-learn's attributes
def test_ratio_without_privacy_is_over_the_clipped_uncentred_total():
    rng = np.random.default_rng(12)
    X, _ = spiked_rows(2000, 6, rng, spikes=(8.0, 3.0))
    X = X + 0.3  # off-centre: the total is uncentred, as the components are
    est = AdaptivePrivatePCA(n_components=2, epsilon=np.inf, data_norm=0.8, n_iter=200,
                             random_state=0)
    with pytest.warns(PrivacyWarning, match="epsilon=inf"):
        est.fit(X)
    C = clip_rows(X, 0.8)
    w = np.linalg.eigvalsh(C.T @ C)[::-1]
    # sklearn's explained_variance_ / total, both over n - 1: the top eigenvalues over the trace
    np.testing.assert_allclose(est.explained_variance_ratio_, w[:2] / w.sum(), rtol=1e-9)
    total = np.sum(C * C) / (C.shape[0] - 1)
    np.testing.assert_allclose(est.explained_variance_ratio_, est.explained_variance_ / total,
                               rtol=1e-12)
    assert est.explained_variance_ratio_.sum() <= 1.0


@pytest.mark.parametrize("epsilon", [np.inf, 2.0])
def test_mean_is_zero_and_transform_is_sklearns_formula(epsilon):
    rng = np.random.default_rng(13)
    X, _ = spiked_rows(20_000, 5, rng, spikes=(10.0, 5.0))
    X = (X + 0.5).astype(np.float32)
    est = AdaptivePrivatePCA(n_components=2, epsilon=epsilon, data_norm=2.0, random_state=0)
    if math.isfinite(epsilon):
        est.fit(X)
    else:
        with pytest.warns(PrivacyWarning, match="epsilon=inf"):
            est.fit(X)
    assert est.mean_.dtype == np.float32 and not np.any(est.mean_)
    np.testing.assert_allclose(est.transform(X[:10]), (X[:10] - est.mean_) @ est.components_.T,
                               rtol=1e-6)


def test_private_fit_sets_no_ratio_over_an_unreleased_total():
    rng = np.random.default_rng(14)
    X, _ = spiked_rows(20_000, 5, rng, spikes=(10.0, 5.0))
    est = AdaptivePrivatePCA(n_components=2, epsilon=2.0, data_norm=2.0, random_state=0).fit(X)
    assert not hasattr(est, "explained_variance_ratio_")
    assert hasattr(est, "explained_variance_")  # the released values are there
    with pytest.warns(PrivacyWarning, match="epsilon=inf"):
        est.set_params(epsilon=np.inf).fit(X)  # a refit without privacy sets it ...
    assert hasattr(est, "explained_variance_ratio_")
    est.set_params(epsilon=2.0).fit(X)  # ... and a private refit removes it again
    assert not hasattr(est, "explained_variance_ratio_")
