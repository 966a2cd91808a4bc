"""The clipped power method (``method="clipped_power"``): its sensitivity by brute force, its
noise plan and spend, and the ``"auto"`` rule that picks it (docs/derivations/pca.rst,
"Clipped power steps")."""
import math
import warnings

import numpy as np
import pytest

import dptensor.algorithms.exact as exact_mod
import dptensor.algorithms.pca_methods as methods_mod
import dptensor.algorithms.power as power_mod
from dptensor import PrivatePCA
from dptensor.accounting import GaussianEvent, epsilon_of, gdp_mu
from dptensor.algorithms.exact import (BITS, ExactClippedGram, clipped_gram_product, grid_rows,
                                       grid_vectors)
from dptensor.algorithms.pca_methods import (CLIPPED_STEPS, MAX_CLIPPED_FEATURES,
                                             MIN_CLIPPED_FEATURES, START_SHARE, resolve)
from dptensor.algorithms.power import (MEAN_SHARE, TOTAL_SHARE,
                                       covariance_sensitivity)
from dptensor.datasets import make_spiked_covariance
from dptensor.metrics import sin_theta_distance
from expected_warnings import NON_PRIVATE

ONE = 2.0 ** BITS


def _stat(M, V, op):
    """The exact clipped product of rows ``M`` at ``op``'s bound and radius."""
    return ExactClippedGram(M, op.data_norm, op.radius * op.data_norm / ONE).matmat(V).value()


def _rows_in_ball(rng, count, d, B):
    """Rows at three scales inside the ball, some on its sphere."""
    X = rng.standard_normal((count, d))
    X /= np.linalg.norm(X, axis=1, keepdims=True)
    return X * B * rng.choice([1.0, 0.5, 0.05], size=(count, 1))


@pytest.mark.parametrize("tau_share", [0.05, 0.3, 1.0])
def test_clipped_power_sensitivity_brute_force(tau_share):
    """Replacing any one row by any row of the ball moves the exact clipped product by at most
    the operator's sensitivity; the worst pair found comes close to it (small tau)."""
    rng = np.random.default_rng(1)
    d, p, n, B = 5, 2, 12, 3.0
    tau = tau_share * B
    V = np.linalg.qr(rng.standard_normal((d, p)))[0]
    X = _rows_in_ball(rng, n, d, B)
    M = grid_rows(X, B)
    op = ExactClippedGram(M, B, tau)
    sens = op.sensitivity(V)
    assert 2 * B * tau * (1 - 1e-4) <= sens <= 2 * B * tau * (1 + 1e-15)  # T on the grid, below tau
    base = _stat(M, V, op)
    worst = 0.0
    # random replacements, and the extreme pair a = (w, s), b = (w, -s): a long common part
    # outside span(V), opposite projections of length tau inside it
    W = np.linalg.qr(np.hstack([V, rng.standard_normal((d, d - p))]))[0][:, p:]
    s = V[:, 0] * min(tau, B) * 0.999
    w = W[:, 0] * math.sqrt(max(B ** 2 - np.dot(s, s), 0.0)) * 0.999
    extremes = [(w + s, w - s), (w - s, w + s)]
    for i in range(n):
        candidates = list(_rows_in_ball(rng, 60, d, B))
        for a, b in extremes:
            candidates.append(b)
            Ma = M.copy()
            Ma[i] = grid_rows(a[None], B)[0]
            Mb = M.copy()
            Mb[i] = grid_rows(b[None], B)[0]
            move = np.linalg.norm(_stat(Ma, V, op) - _stat(Mb, V, op))
            assert move <= sens
            worst = max(worst, move)
        for b in candidates:
            Mb = M.copy()
            Mb[i] = grid_rows(b[None], B)[0]
            move = np.linalg.norm(_stat(Mb, V, op) - base)
            assert move <= sens
            worst = max(worst, move)
    if tau_share < 0.5:  # the bound 2 B tau is nearly attained: 2 tau sqrt(B^2 - tau^2)
        assert worst >= 0.9 * sens


def test_every_clipped_projection_is_within_its_radius():
    """Each row's clipped grid projection has ||w|| <= T exactly (integers), whatever the block:
    also for a block that is not orthonormal, whose projections exceed the ball."""
    rng = np.random.default_rng(2)
    d, B = 7, 2.0
    M = grid_rows(_rows_in_ball(rng, 300, d, B), B)
    K = grid_vectors(rng.uniform(-1, 1, (d, 3)))  # entries in [-1, 1], not orthonormal
    for radius in (1, 1000, 2 ** 19, 2 ** BITS):
        one_row = [clipped_gram_product(M[i:i + 1], K, radius) for i in range(0, 300, 37)]
        for row, stat in zip(M[::37], one_row):
            nz = np.flatnonzero(row)
            if nz.size == 0:
                continue
            j = nz[0]  # the term is m w^T: w is row j of the integers over m_j
            w = np.array([int(v) for v in stat.ints[j]]) // int(row[j])
            assert int(np.dot(w.astype(object), w.astype(object))) <= radius ** 2


def _spy(monkeypatch):
    calls = []

    def wrap(real):
        def spy(value, sensitivity, noise_multiplier, rng, dtype=None, **kw):
            calls.append((np.shape(value), float(sensitivity), float(noise_multiplier),
                          kw["rounding"]))
            return real(value, sensitivity, noise_multiplier, rng, dtype, **kw)
        return spy

    for name in ("gaussian_release", "symmetric_gaussian_release"):
        monkeypatch.setattr(power_mod, name, wrap(getattr(power_mod, name)))
    monkeypatch.setattr(methods_mod, "symmetric_gaussian_release",
                        wrap(methods_mod.symmetric_gaussian_release))
    monkeypatch.setattr(exact_mod, "gaussian_release", wrap(exact_mod.gaussian_release))
    return calls


def _spiked(n=2000, d=12, k=2, seed=0):
    X, V, _ = make_spiked_covariance(n, d, k, spike=20.0, random_state=seed)
    return X, V


def test_released_noise_matches_the_recorded_event(monkeypatch):
    """The draws: mean, total, the Analyze Gauss start, then the clipped steps at 2 B tau; the
    event prices exactly those draws and privacy_cost() previews it."""
    monkeypatch.setattr(methods_mod, "MAX_CLIP_SHARE", math.inf)  # the clipping route
    X, _ = _spiked()
    n, d, B = X.shape[0], X.shape[1], 2.0 * math.sqrt(X.shape[1])
    calls = _spy(monkeypatch)
    est = PrivatePCA(2, epsilon=1.0, data_norm=B, method="clipped_power", n_oversamples=1,
                     random_state=0)
    preview = est.privacy_cost(n, d)
    est.fit(X)
    mean, total, start, *steps = calls
    assert mean[1] == pytest.approx(2 * B / n) and total[1] == pytest.approx(B ** 2)
    assert start[0] == (d, d) and start[1] == pytest.approx(covariance_sensitivity(B))
    assert len(steps) == CLIPPED_STEPS and est.n_iter_ == 1 + CLIPPED_STEPS
    for shape, sens, _, _ in steps:  # 2 B tau, tau on the grid, below the bound
        assert shape == (d, 3) and 0 < sens < 2 * B * B
        tau = sens / (2 * B) / (1 + 2.0 ** -50)
        assert (tau / B * ONE) == pytest.approx(round(tau / B * ONE), abs=1e-6)
    assert all(c[3] is None for c in calls)  # exact sums: named, no allowance
    released = [GaussianEvent(c[2], 1) for c in calls]
    assert epsilon_of(released, 1e-5) == pytest.approx(1.0, rel=1e-9)
    assert est.privacy_cost_.epsilon == pytest.approx(1.0, rel=1e-9)
    assert preview.epsilon == est.privacy_cost_.epsilon
    assert preview.event == est.privacy_cost_.event
    mu2 = gdp_mu(1.0, 1e-5) ** 2
    spectral = (1 - MEAN_SHARE - TOTAL_SHARE) * mu2
    assert 1 / start[2] ** 2 == pytest.approx(START_SHARE * spectral)
    assert 1 / steps[-1][2] ** 2 == pytest.approx(0.5 * (1 - START_SHARE) * spectral)


def test_the_pooled_route_releases_the_plan_and_is_analyze_gauss(monkeypatch):
    """Where the start's radius is too large a share of the bound, each planned step releases
    the same Gram matrix again at its multiplier (d x d, sqrt(2) B^2): the same event, and the
    pooled release has Analyze Gauss's noise at the whole spectral budget."""
    monkeypatch.setattr(methods_mod, "MAX_CLIP_SHARE", 0.0)
    X, V = _spiked(n=4000)
    n, d, B = X.shape[0], X.shape[1], 2.0 * math.sqrt(X.shape[1])
    calls = _spy(monkeypatch)
    kw = dict(epsilon=1.0, data_norm=B, n_oversamples=1, random_state=0)
    est = PrivatePCA(2, method="clipped_power", **kw)
    preview = est.privacy_cost(n, d)
    est.fit(X)
    mean, total, *spectral = calls
    assert len(spectral) == 1 + CLIPPED_STEPS and est.n_iter_ == 1 + CLIPPED_STEPS
    for shape, sens, _, rounding in spectral:
        assert shape == (d, d) and sens == pytest.approx(covariance_sensitivity(B))
        assert rounding is None
    assert epsilon_of([GaussianEvent(c[2], 1) for c in calls], 1e-5) == pytest.approx(1.0)
    assert preview == est.privacy_cost_
    ag = PrivatePCA(2, method="analyze_gauss", **kw).fit(X)
    np.testing.assert_allclose(est.explained_variance_noise_, ag.explained_variance_noise_,
                               rtol=1e-12)
    assert sin_theta_distance(est.components_, V) < 0.05


def test_pooling_weights_give_the_whole_budgets_noise():
    """The z^-2 weighted mean of releases of one matrix has entry std sensitivity / sqrt(sum
    z^-2): the pooled release is one Analyze Gauss release at the whole budget."""
    rng = np.random.default_rng(3)
    z = np.array([2.0, 1.5, 1.2])
    d, sens = 60, 0.7
    source = methods_mod.Source(gram=lambda z_l: (np.zeros((d, d)), sens), operator=None)
    result = methods_mod._pooled_gauss(source, np.zeros((d, d)), sens, np.zeros((d, d)), z, rng,
                                       2, None)
    assert result.noise_std == pytest.approx(sens / math.sqrt(np.sum(z ** -2.0)))
    draws = []
    for _ in range(20):  # the start's release, then the pooled ones, on a zero matrix
        start = power_mod.symmetric_gaussian_release(np.zeros((d, d)), sens, z[0], rng)
        pooled = start / z[0] ** 2
        for z_l in z[1:]:
            pooled += power_mod.symmetric_gaussian_release(np.zeros((d, d)), sens, z_l, rng) \
                / z_l ** 2
        draws.append((pooled / np.sum(z ** -2.0))[np.triu_indices(d)])
    assert np.std(np.concatenate(draws)) == pytest.approx(result.noise_std, rel=0.02)


def test_clipping_pays_where_the_radius_is_a_small_share_of_the_bound():
    assert methods_mod.clipping_pays(methods_mod.MAX_CLIP_SHARE * 3.0, 3.0)
    assert not methods_mod.clipping_pays(methods_mod.MAX_CLIP_SHARE * 3.0 * 1.01, 3.0)


def test_clipped_power_recovers_a_clear_subspace():
    X, V = _spiked(n=4000, d=12)
    est = PrivatePCA(2, epsilon=2.0, data_norm=2 * math.sqrt(12), method="clipped_power",
                     n_oversamples=1, random_state=0).fit(X)
    assert est.method_ == "clipped_power"
    assert sin_theta_distance(est.components_, V) < 0.05
    assert np.all(est.explained_variance_ > 0)


@NON_PRIVATE
def test_without_privacy_it_is_the_exact_eigendecomposition():
    X, _ = _spiked(n=500, d=10)
    ours = PrivatePCA(2, method="clipped_power").fit(X)
    ag = PrivatePCA(2, method="analyze_gauss").fit(X)
    # the same Gram matrix up to rounding: Analyze Gauss sums it from the uncentred rows' sums
    np.testing.assert_allclose(ours.components_, ag.components_, rtol=0, atol=1e-12)
    np.testing.assert_allclose(ours.explained_variance_, ag.explained_variance_, rtol=1e-12)


def test_auto_rule_uses_public_settings_only():
    lo, hi = MIN_CLIPPED_FEATURES, MAX_CLIPPED_FEATURES
    assert resolve("auto", lo, False, private=True).name == "clipped_power"
    assert resolve("auto", hi, False, private=True).name == "clipped_power"
    assert resolve("auto", lo - 1, False, private=True).name == "analyze_gauss"
    assert resolve("auto", hi + 1, False, private=True).name == "power"
    assert resolve("auto", lo, False, private=False).name == "analyze_gauss"
    assert resolve("auto", lo, True, private=True).name == "power"
    assert resolve("auto", lo, False, private=True, grouped=True).name == "analyze_gauss"
    est = PrivatePCA(5, epsilon=1.0, data_norm=1.0)
    cost = est.privacy_cost(10 ** 5, lo)
    assert cost.epsilon == pytest.approx(1.0, rel=1e-9)
    assert cost.n_queries == 1 + CLIPPED_STEPS
    paper = PrivatePCA(5, epsilon=1.0, data_norm=1.0, calibration="paper")
    assert paper.privacy_cost(10 ** 5, lo).n_queries == 1  # no paper form: Analyze Gauss


def test_below_the_threshold_auto_plans_as_before():
    """d < MIN_CLIPPED_FEATURES: the plan is Analyze Gauss's, event for event."""
    auto = PrivatePCA(3, epsilon=1.0, data_norm=1.0).privacy_cost(5000, 50)
    ag = PrivatePCA(3, epsilon=1.0, data_norm=1.0, method="analyze_gauss").privacy_cost(5000, 50)
    assert auto.event == ag.event and auto.n_queries == 1


def test_refused_before_any_spend():
    X, _ = _spiked(n=300, d=6)
    with pytest.raises(ValueError, match="paper"):
        PrivatePCA(2, epsilon=1.0, data_norm=5.0, method="clipped_power",
                   calibration="paper").fit(X)
    with pytest.raises(ValueError, match="group"):
        PrivatePCA(2, epsilon=1.0, data_norm=5.0, method="clipped_power").fit(
            X, groups=np.arange(300) // 3)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        grouped = PrivatePCA(2, epsilon=1.0, data_norm=5.0, random_state=0)
        assert grouped.privacy_cost(300, 6).n_queries == 1
