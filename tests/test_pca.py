"""PrivatePCA: exactness without noise, recovery with noise, sensitivities by brute force, accounting."""
import math
import tracemalloc
import warnings

import numpy as np
import pytest
from scipy.optimize import minimize
from sklearn.decomposition import PCA
from sklearn.linear_model import LogisticRegression
from sklearn.model_selection import GridSearchCV
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler
from sklearn.utils.estimator_checks import parametrize_with_checks

import dptensor.algorithms.exact as exact_mod
import dptensor.algorithms.pca_fit as pca_fit_mod
from dptensor.algorithms.exact_entries import ExactEntryMatrix
import dptensor.algorithms.power as power_mod
from dptensor import BudgetExceededError, PrivacyAccountant, PrivacyWarning, PrivatePCA
from dptensor.accounting import ComposedEvent, GaussianEvent, epsilon_of, gdp_mu
from dptensor.datasets import make_spiked_covariance
from dptensor.metrics import sin_theta_distance
from dptensor.algorithms.operators import DenseMatrix
from dptensor.algorithms.power import (MEAN_SHARE, TOTAL_SHARE, analyze_gauss, center_and_clip,
                                     covariance_sensitivity, entry_power_sensitivity,
                                     noisy_power_method, orthonormalize, power_schedule,
                                     row_power_sensitivity, total_variance_sensitivity)
from dptensor.algorithms.streaming_power import StreamingPowerMethod
from dptensor.mechanisms import Rounding, clip_rows
from expected_warnings import NON_PRIVATE, noise_dominated

# A private fit on a small fixture, for its accounting, plumbing or what it keeps (not its
# accuracy): at that size its weaker components are noise, as the fit says.
_SMALL_PRIVATE = noise_dominated()



def well_separated(n=400, d=8, seed=0, shift=3.0):
    """Rows with standard deviations 6, 4, 2.5, 1.5, ... (gaps of >= 1.5x between variances) and a mean."""
    rng = np.random.default_rng(seed)
    scales = np.geomspace(6.0, 0.3, d)
    Q = np.linalg.qr(rng.standard_normal((d, d)))[0]
    return (rng.standard_normal((n, d)) * scales) @ Q.T + shift


def assert_same_up_to_sign(A, B, atol):
    signs = np.sign(np.sum(A * B, axis=1))
    np.testing.assert_allclose(A * signs[:, None], B, atol=atol)


# --------------------------------------------------------------------------------------------
# Non-private: the exact methods agree with scikit-learn
# --------------------------------------------------------------------------------------------

@NON_PRIVATE
@pytest.mark.parametrize("method", ["power", "analyze_gauss"])
def test_nonprivate_matches_sklearn(method):
    X = well_separated()
    ours = PrivatePCA(3, method=method, random_state=0).fit(X)
    ref = PCA(3, svd_solver="full").fit(X)
    assert_same_up_to_sign(ours.components_, ref.components_, atol=1e-6)
    np.testing.assert_allclose(ours.explained_variance_, ref.explained_variance_, rtol=1e-8)
    np.testing.assert_allclose(ours.explained_variance_ratio_, ref.explained_variance_ratio_, rtol=1e-8)
    np.testing.assert_allclose(ours.mean_, ref.mean_, rtol=1e-12)
    assert_same_up_to_sign(ours.transform(X).T, ref.transform(X).T, atol=1e-5)
    assert ours.privacy_cost_.epsilon == math.inf and not ours.privacy_cost_.private


@NON_PRIVATE
def test_nonprivate_streaming_converges_to_sklearn():
    """SPM without noise on many blocks: the block covariances average the population's."""
    X = well_separated(n=60000, d=6, seed=1)
    ours = PrivatePCA(2, block_size=3000, random_state=0)
    for batch in np.array_split(X, 7):
        ours.partial_fit(batch)
    ref = PCA(2).fit(X)
    assert ours.n_iter_ == 19 and ours.n_samples_seen_ == 60000  # first block estimates the mean
    assert sin_theta_distance(ours.components_, ref.components_) < 1e-3
    np.testing.assert_allclose(ours.mean_, ref.mean_, atol=0.15)


@NON_PRIVATE
def test_precomputed_nonprivate_matches_eigh():
    rng = np.random.default_rng(3)
    Q = np.linalg.qr(rng.standard_normal((10, 10)))[0]
    w = np.array([9.0, -6.0, 4.0, 2.0, 1.0, 0.5, 0.3, 0.2, 0.1, 0.05])  # indefinite: order by magnitude
    A = (Q * w) @ Q.T
    for method in ("power", "analyze_gauss"):
        est = PrivatePCA(3, input="precomputed", method=method, random_state=0).fit(A)
        assert_same_up_to_sign(est.components_, Q[:, :3].T, atol=1e-6)
        np.testing.assert_allclose(est.explained_variance_, w[:3], rtol=1e-8)


@NON_PRIVATE
def test_float32_kept_and_inverse_transform():
    X = well_separated(d=5).astype(np.float32)
    est = PrivatePCA(5, method="analyze_gauss").fit(X)
    assert est.components_.dtype == np.float32 and est.transform(X).dtype == np.float32
    np.testing.assert_allclose(est.inverse_transform(est.transform(X)), X, atol=1e-3)
    white = PrivatePCA(5, whiten=True, method="power", random_state=0).fit(X.astype(np.float64))
    Z = white.transform(X.astype(np.float64))
    np.testing.assert_allclose(np.cov(Z.T), np.eye(5), atol=1e-6)
    np.testing.assert_allclose(white.inverse_transform(Z), X, atol=1e-4)


# --------------------------------------------------------------------------------------------
# Sensitivities, by brute force over neighbours
# --------------------------------------------------------------------------------------------

def _max_over_pairs(f, d, B, rng, starts=12):
    """Largest f(a, b) over rows of norm B found by local optimisation from random starts."""
    best = 0.0
    for _ in range(starts):
        def neg(v):
            a, b = v[:d], v[d:]
            return -f(B * a / np.linalg.norm(a), B * b / np.linalg.norm(b))
        res = minimize(neg, rng.standard_normal(2 * d), method="BFGS", options={"gtol": 1e-10})
        best = max(best, -res.fun)
    return best


@pytest.mark.parametrize("p", [1, 2, 3])
def test_row_power_sensitivity_brute_force(p, rng):
    d, B = 4, 1.7
    X = orthonormalize(rng.standard_normal((d, p)))

    def change(a, b):
        return np.linalg.norm(np.outer(a, a) @ X - np.outer(b, b) @ X)

    found = _max_over_pairs(change, d, B, rng)
    exact = row_power_sensitivity(B, p)
    assert found <= exact * (1 + 1e-9)
    assert found >= exact * (1 - 1e-5)  # attained: the bound is tight, and below 2 B^2
    assert exact < 2 * B**2
    # Rows inside the ball (not only on the sphere) never exceed it either.
    a = rng.standard_normal((2000, d)) * rng.uniform(0, 1, (2000, 1))
    b = rng.standard_normal((2000, d))
    a = power_mod.clip_rows(a, B)
    b = power_mod.clip_rows(b, B)
    moves = np.linalg.norm(a[:, :, None] * (a @ X)[:, None, :] - b[:, :, None] * (b @ X)[:, None, :],
                           axis=(1, 2))
    assert moves.max() <= exact * (1 + 1e-12)


def test_covariance_sensitivity_brute_force(rng):
    d, B = 3, 0.8
    iu = np.triu_indices(d)

    def change(a, b):
        return np.linalg.norm((np.outer(a, a) - np.outer(b, b))[iu])

    found = _max_over_pairs(change, d, B, rng)
    assert found == pytest.approx(covariance_sensitivity(B), rel=1e-5)
    assert found <= covariance_sensitivity(B) * (1 + 1e-9)
    assert covariance_sensitivity(1.0) == pytest.approx(math.sqrt(2))  # SPEC §4: sqrt(2) for B = 1


@pytest.mark.parametrize("p", [1, 3])
def test_entry_power_sensitivity_exhaustive(p, rng):
    """Every symmetric-pair (and diagonal) neighbour of A, at the extreme |change| = bound."""
    d, bound = 6, 2.5
    X = orthonormalize(rng.standard_normal((d, p)))
    worst = 0.0
    for i in range(d):
        for j in range(i, d):
            D = np.zeros((d, d))
            D[i, j] = D[j, i] = bound
            worst = max(worst, np.linalg.norm(D @ X))
    assert worst == pytest.approx(entry_power_sensitivity(X, bound), rel=1e-12)
    assert worst <= bound * math.sqrt(2 * p) * np.abs(X).max() * (1 + 1e-12)  # Hardt–Price scale x sqrt 2


def test_private_mean_sensitivity(rng):
    n, d, B = 50, 4, 3.0
    X = power_mod.clip_rows(rng.standard_normal((n, d)) * 5, B)
    Y = X.copy()
    Y[0] = -X[0]  # the extreme replacement b = -a
    move = np.linalg.norm(X.mean(0) - Y.mean(0))
    assert move == pytest.approx(2 * np.linalg.norm(X[0]) / n)
    assert move <= 2 * B / n * (1 + 1e-12)


def test_analyze_gauss_noise_has_the_planned_scale(rng):
    C = rng.standard_normal((300, 300))
    C = C + C.T
    res = analyze_gauss(C, 2, np.random.default_rng(7), noise_multiplier=1.5, sensitivity=2.0)
    noisy = power_mod.symmetric_gaussian_release(C, 2.0, 1.5, np.random.default_rng(7))  # the same release
    np.testing.assert_array_equal(noisy, noisy.T)
    upper = (noisy - C)[np.triu_indices(300)]
    assert np.std(upper) == pytest.approx(3.0, rel=0.01)  # 45150 draws: relative std error 0.3%
    assert res.noise_std == 3.0
    np.testing.assert_allclose(res.eigenvalues, np.linalg.eigvalsh(noisy)[::-1][:2], rtol=1e-10)


class _Spy:
    """Records every Gaussian release (shape, sensitivity, multiplier) made by a PCA fit, in order."""

    def __init__(self, monkeypatch):
        self.calls, self.roundings = [], []
        for name in ("gaussian_release", "symmetric_gaussian_release"):
            monkeypatch.setattr(power_mod, name, self._spy(getattr(power_mod, name)))
        monkeypatch.setattr(exact_mod, "gaussian_release", self._spy(exact_mod.gaussian_release))

    def _spy(self, real):
        def spy(value, sensitivity, noise_multiplier, rng, dtype=None, **kw):
            self.calls.append((np.shape(value), float(sensitivity), float(noise_multiplier)))
            self.roundings.append(kw["rounding"])  # every release names its rounding
            return real(value, sensitivity, noise_multiplier, rng, dtype, **kw)
        return spy


@_SMALL_PRIVATE
@pytest.mark.parametrize("method", ["power", "analyze_gauss"])
def test_released_noise_matches_the_recorded_event(method, monkeypatch):
    """The noise actually drawn is multiplier x derived sensitivity, and the event prices exactly it."""
    X = well_separated(n=300, d=6)
    spy = _Spy(monkeypatch)
    B, n = 20.0, 300
    est = PrivatePCA(2, epsilon=1.0, data_norm=B, method=method, n_iter=4, random_state=0).fit(X)
    mean_call, total_call, *spectral = spy.calls
    assert mean_call[0] == (6,) and mean_call[1] == pytest.approx(2 * B / n)
    assert total_call[0] == () and total_call[1] == pytest.approx(B**2)  # the total's sensitivity
    sens = covariance_sensitivity(B) if method == "analyze_gauss" else row_power_sensitivity(B, 2)
    # the power step's grid allowance (docs/derivations/exact_sums.rst) adds a relative ~1e-5
    assert all(sens <= c[1] <= sens * (1 + 1e-4) for c in spectral)
    assert len(spectral) == (1 if method == "analyze_gauss" else 4)
    released = [GaussianEvent(c[2], 1) for c in [mean_call, total_call] + spectral]
    assert epsilon_of(released, 1e-5) == pytest.approx(1.0, rel=1e-9)
    assert est.privacy_cost_.epsilon == pytest.approx(epsilon_of(released, 1e-5), rel=1e-9)


# --------------------------------------------------------------------------------------------
# Calibration and accounting
# --------------------------------------------------------------------------------------------

@pytest.mark.parametrize("kwargs", [
    dict(method="power"), dict(method="analyze_gauss"), dict(method="power", centered=True),
    dict(method="analyze_gauss", centered=True, delta=1e-6), dict(method="power", n_iter=1),
])
@_SMALL_PRIVATE
def test_recorded_cost_equals_target(kwargs):
    X = well_separated(n=200, d=6)
    budget = PrivacyAccountant(epsilon=10.0, delta=1e-5)
    est = PrivatePCA(2, epsilon=0.7, data_norm=20.0, accountant=budget, random_state=0, **kwargs)
    delta = kwargs.get("delta", 1e-5)
    if delta == 1e-5:
        est.fit(X)
    else:  # calibrated at its own delta, charged at the accountant's: the record says what was charged
        with pytest.warns(PrivacyWarning, match="charged"):
            est.fit(X)
    assert epsilon_of(est.privacy_cost_.event, delta) == pytest.approx(0.7, rel=1e-9)
    charged = epsilon_of(est.privacy_cost_.event, 1e-5)
    assert est.privacy_cost_.epsilon == pytest.approx(charged, rel=1e-9) and est.privacy_cost_.delta == 1e-5
    (entry,) = budget.history()
    assert entry.epsilon == pytest.approx(charged, rel=1e-9) and entry.delta == 1e-5
    assert budget.spent()[0] == pytest.approx(charged, rel=1e-9)


@_SMALL_PRIVATE
def test_mean_share_and_final_step_schedule():
    X = well_separated(n=200, d=6)
    est = PrivatePCA(2, epsilon=1.0, data_norm=20.0, method="power", n_iter=5, random_state=0).fit(X)
    event = est.privacy_cost_.event
    assert isinstance(event, ComposedEvent)
    mean, total, early, last = event.events
    mu2 = gdp_mu(1.0, 1e-5) ** 2
    assert 1 / mean.noise_multiplier**2 == pytest.approx(MEAN_SHARE * mu2)
    assert 1 / total.noise_multiplier**2 == pytest.approx(TOTAL_SHARE * mu2)
    assert early.count == 4 and last.count == 1
    assert 1 / last.noise_multiplier**2 == pytest.approx(0.5 * (1 - MEAN_SHARE - TOTAL_SHARE) * mu2)
    z = power_schedule(2.0, 6)
    assert np.sum(1 / z**2) == pytest.approx(4.0) and power_schedule(2.0, 1).tolist() == [0.5]


@_SMALL_PRIVATE
def test_paper_calibration_reproduces_hardt_price_sigma(monkeypatch):
    """Entry-level PPM, calibration='paper': step l adds N(0, sigma^2 ||X_{l-1}||_inf^2) noise."""
    rng = np.random.default_rng(5)
    d, p, L, eps, delta = 30, 3, 4, 0.5, 1e-6
    A = rng.standard_normal((d, d))
    A = A + A.T
    seen = []

    class Recording(ExactEntryMatrix):  # the private products are exact on the entry grid
        def matmat(self, Q):
            seen.append((self.grid_iterate(Q), self.bound))
            return super().matmat(Q)
    monkeypatch.setattr(pca_fit_mod, "ExactEntryMatrix", Recording)
    spy = _Spy(monkeypatch)
    est = PrivatePCA(2, n_oversamples=1, epsilon=eps, delta=delta, n_iter=L, input="precomputed",
                     calibration="paper", random_state=0).fit(A)
    sigma = math.sqrt(4 * p * L * math.log(1 / delta)) / eps  # Hardt & Price, Claim 4.2
    assert len(spy.calls) == L == len(seen)
    for (shape, s, z), (Q, bound) in zip(spy.calls, seen):
        # the grid iterate's ||X||_inf, each entry moving by the bound 1 plus one grid step
        assert shape == (d, p) and 1.0 < bound < 1.0 + 1e-6
        assert s * z == pytest.approx(sigma * bound * np.abs(Q).max(), rel=1e-12)
    # Priced honestly for the symmetric pair (sensitivity sqrt(2p)||X||_inf): below target here.
    assert est.privacy_cost_.event == GaussianEvent(sigma / math.sqrt(2 * p), L)
    assert est.privacy_cost_.epsilon < eps and est.privacy_cost_.calibration == "paper"


@_SMALL_PRIVATE
def test_paper_calibration_warns_when_it_overspends():
    A = np.eye(5)
    with pytest.warns(PrivacyWarning, match="costs epsilon"):
        PrivatePCA(1, epsilon=30.0, n_iter=3, input="precomputed", calibration="paper",
                   random_state=0).fit(A)


@_SMALL_PRIVATE
def test_entry_level_exact_noise_uses_row_norms(monkeypatch):
    rng = np.random.default_rng(2)
    d = 40
    Q = np.linalg.qr(rng.standard_normal((d, d)))[0]
    A = (Q * np.linspace(10, 0.1, d)) @ Q.T
    spy = _Spy(monkeypatch)
    est = PrivatePCA(2, epsilon=2.0, input="precomputed", n_iter=5, random_state=0).fit(A)
    assert est.method_ == "power" and len(spy.calls) == 5
    assert all(0 < c[1] <= math.sqrt(2 * 2) for c in spy.calls)
    assert est.privacy_cost_.epsilon == pytest.approx(2.0, rel=1e-9)


@_SMALL_PRIVATE
def test_budget_refused_before_touching_data():
    budget = PrivacyAccountant(epsilon=1.0, delta=1e-5)
    X = well_separated(n=100, d=5)
    PrivatePCA(2, epsilon=0.8, data_norm=20.0, accountant=budget, random_state=0).fit(X)
    est = PrivatePCA(2, epsilon=0.8, data_norm=20.0, accountant=budget, random_state=0)
    with pytest.raises(BudgetExceededError):
        est.fit(X)
    assert len(budget.history()) == 1 and not hasattr(est, "components_")


# --------------------------------------------------------------------------------------------
# Private recovery
# --------------------------------------------------------------------------------------------

def _private_sin2(n, eps, method, seeds=(0, 1, 2, 3, 4)):
    X, V, _ = make_spiked_covariance(n, 40, 2, spike=4.0, data_norm=1.0, random_state=11)
    return np.median([sin_theta_distance(PrivatePCA(2, epsilon=eps, data_norm=1.0, method=method,
                                                  random_state=s).fit(X).components_, V)
                    for s in seeds])


@pytest.mark.parametrize("method", ["analyze_gauss", "power"])
def test_private_recovery_improves_with_epsilon_and_n(method):
    """Spiked covariance with a clear gap (eigenvalues 5:1), rows of norm <= 1.

    Where the privacy noise dominates, sin^2 ~ ||noise||^2 / gap^2 ~ d / (n mu)^2: a factor 4 in
    epsilon or in n cuts it by ~16 (sampling error, ~d/n, adds a floor). The test asks for a
    factor 4 (median of 5 seeded noise draws), far from what chance could produce and well short
    of the bound's 16, and for a useful estimate at the good end. The median, not the mean: a
    few-step power method from an unlucky random start misses the second direction now and then
    (about 2-3% of fits at eps=4 here, with either noise sampler), and one such fit would swamp a
    mean of three.
    """
    low = _private_sin2(5000, 1.0, method)
    more_eps = _private_sin2(5000, 4.0, method)
    more_n = _private_sin2(20000, 1.0, method)
    assert more_eps < low / 4 and more_n < low / 4
    assert more_eps < 0.1 and more_n < 0.1


def test_private_precomputed_incoherent_recovery():
    """Entry-level PPM on an incoherent matrix: noise ~ sqrt(2p/d) per step, far below the gap."""
    rng = np.random.default_rng(4)
    d = 200
    Q = np.linalg.qr(rng.standard_normal((d, d)))[0]
    A = (Q * np.r_[400.0, 300.0, np.full(d - 2, 5.0)]) @ Q.T
    est = PrivatePCA(2, epsilon=1.0, input="precomputed", random_state=0).fit(A)
    # Last-step noise ~ z_L sqrt(2p/d) per entry (rows of size sqrt(p/d)), about 0.9 here, its
    # projection ~ 0.9 sqrt(d) ~ 13 against a gap of 295: sin^2 ~ 0.002-0.01.
    ppm = sin_theta_distance(est.components_, Q[:, :2].T)
    assert ppm < 0.02
    # Analyze Gauss adds z ~ 3.7 to every entry: sin^2 ~ (3.7 sqrt(d) / 295)^2 ~ 0.03, several
    # times worse. This is the incoherent regime where Hardt–Price's PPM wins.
    ag = PrivatePCA(2, epsilon=1.0, input="precomputed", method="analyze_gauss", random_state=0).fit(A)
    assert sin_theta_distance(ag.components_, Q[:, :2].T) > 2.5 * ppm


def test_private_mean_and_centered_promise():
    X = well_separated(n=20000, d=5, shift=2.0)
    est = PrivatePCA(2, epsilon=1.0, data_norm=25.0, random_state=0).fit(X)
    np.testing.assert_allclose(est.mean_, X.mean(0), atol=0.1)  # noise std 2B/(n mu sqrt .1) ~ 0.03
    centered = PrivatePCA(2, epsilon=1.0, data_norm=25.0, centered=True, random_state=0).fit(X - X.mean(0))
    total, spectral = centered.privacy_cost_.event.events  # no mean release: the total and one spectral
    assert np.all(centered.mean_ == 0) and total.noise_multiplier > spectral.noise_multiplier


# --------------------------------------------------------------------------------------------
# Streaming power method
# --------------------------------------------------------------------------------------------

def test_spm_cut_invariant():
    X, _, _ = make_spiked_covariance(5000, 12, 2, data_norm=1.0, random_state=3)

    def stream(cuts):
        est = PrivatePCA(2, epsilon=1.0, data_norm=1.0, block_size=700, random_state=9)
        for batch in np.split(X, cuts):
            est.partial_fit(batch)
        return est
    a, b, c = stream([]), stream([1, 2, 699, 700, 2100, 4999]), stream(list(range(37, 5000, 37)))
    for other in (b, c):
        np.testing.assert_allclose(other.components_, a.components_, rtol=1e-9, atol=1e-12)
        np.testing.assert_allclose(other.explained_variance_, a.explained_variance_, rtol=1e-9)
        np.testing.assert_allclose(other.mean_, a.mean_, rtol=1e-9, atol=1e-15)
    assert a.n_iter_ == 6 and a.n_samples_seen_ == 5000  # 7 full blocks, the first for the mean


def test_spm_memory_flat_and_one_event():
    d, batch = 50, 500
    rng = np.random.default_rng(0)
    budget = PrivacyAccountant(epsilon=5.0, delta=1e-5)
    est = PrivatePCA(2, epsilon=1.0, data_norm=3.0, block_size=1000, accountant=budget, random_state=0)
    blocks = [rng.standard_normal((batch, d)) for _ in range(4)]

    def feed(n_batches):
        tracemalloc.start()
        for i in range(n_batches):
            est.partial_fit(blocks[i % 4])
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        return peak
    feed(4)  # warm up: the stream and its state exist
    short, long = feed(10), feed(100)
    assert long <= short * 1.05 + 4096  # 10x more rows, same peak: nothing grows with the stream
    assert short < 4 * batch * d * 8  # a few batch-sized temporaries, no stored rows
    assert len(budget.history()) == 1  # the whole stream is one Gaussian event
    assert est.privacy_cost_.event == GaussianEvent(est.privacy_cost_.noise_multiplier, 1)
    assert est.privacy_cost_.epsilon == pytest.approx(1.0, rel=1e-9)
    assert est.n_samples_seen_ == 114 * batch


def test_spm_state_is_o_dp():
    spm = StreamingPowerMethod(30, 2, 100, np.random.default_rng(0), n_oversamples=1, data_norm=1.0)
    spm.update(np.random.default_rng(1).standard_normal((1050, 30)))
    state = [v for v in vars(spm).values() if isinstance(v, np.ndarray)]
    assert sum(v.size for v in state) <= 3 * 30 * 3 + 30 + 2 * 2  # basis, accumulator, mean, outputs


def test_spm_private_recovery():
    X, V, _ = make_spiked_covariance(60000, 30, 2, spike=5.0, data_norm=1.0, random_state=2)
    est = PrivatePCA(2, epsilon=2.0, data_norm=1.0, block_size=10000, random_state=0)
    for batch in np.array_split(X, 13):
        est.partial_fit(batch)
    assert est.n_iter_ == 5 and sin_theta_distance(est.components_, V) < 0.1


# --------------------------------------------------------------------------------------------
# Method choice, input checks, never touching X
# --------------------------------------------------------------------------------------------

@NON_PRIVATE
def test_auto_method_rule():
    X = well_separated(n=50, d=6)
    assert PrivatePCA(2).fit(X).method_ == "analyze_gauss"
    A = np.cov(X.T)
    assert PrivatePCA(2, input="precomputed").fit(A).method_ == "power"
    assert PrivatePCA(2, block_size=10).partial_fit(X).method_ == "streaming_power"
    wide = np.random.default_rng(0).standard_normal((3, power_mod.MAX_DENSE_FEATURES + 1))
    assert PrivatePCA(1, n_iter=2, random_state=0).fit(wide).method_ == "power"


@_SMALL_PRIVATE
@NON_PRIVATE
@pytest.mark.parametrize("kwargs", [dict(method="power"), dict(method="analyze_gauss"),
                                    dict(centered=True), dict(input="precomputed"),
                                    dict(epsilon=np.inf, data_norm=None, method="power")])
def test_never_modifies_X(kwargs):
    X = well_separated(n=60, d=6)
    if kwargs.get("input") == "precomputed":
        X = X.T @ X
    X0 = X.copy()
    est = PrivatePCA(2, random_state=0, **{"epsilon": 1.0, "data_norm": 1.0, **kwargs}).fit(X)
    est.transform(X)
    np.testing.assert_array_equal(X, X0)
    if "input" not in kwargs:
        PrivatePCA(2, epsilon=1.0, data_norm=1.0, block_size=7, random_state=0).partial_fit(X)
        np.testing.assert_array_equal(X, X0)


@pytest.mark.parametrize("kwargs, exc, match", [
    (dict(epsilon=1.0), ValueError, "data_norm is required"),
    (dict(method="svd"), ValueError, "method must be one of"),
    (dict(n_components=0), ValueError, "n_components must be >= 1"),
    (dict(n_components=7), ValueError, "n_components=7 must be <= n_features=6"),
    (dict(n_oversamples=5, method="power"), ValueError, "n_oversamples"),
    (dict(n_iter=0), ValueError, "n_iter must be >= 1"),
    (dict(n_iter=2.5), TypeError, "n_iter must be an integer"),
    (dict(neighbors="entry"), ValueError, "neighbors='entry'"),
    (dict(calibration="loose"), ValueError, "calibration must be one of"),
    (dict(centered="yes"), TypeError, "centered must be a bool"),
    (dict(input="precomputed"), ValueError, "square symmetric"),
])
def test_bad_parameters(kwargs, exc, match):
    with pytest.raises(exc, match=match):
        PrivatePCA(**{"n_components": 2, **kwargs}).fit(well_separated(n=30, d=6))


def test_bad_inputs():
    with pytest.raises(ValueError, match="symmetric"):
        PrivatePCA(2, input="precomputed").fit(np.arange(16.0).reshape(4, 4))
    with pytest.raises(ValueError, match="neighbors='row'"):
        PrivatePCA(2, input="precomputed", neighbors="row").fit(np.eye(4))
    with pytest.raises(ValueError, match="partial_fit"):
        PrivatePCA(2, method="analyze_gauss").partial_fit(np.ones((5, 4)))
    with pytest.raises(ValueError, match="NaN|infinity"):
        PrivatePCA(2).fit(np.full((5, 4), np.nan))


@NON_PRIVATE
def test_feature_names_and_set_output():
    X = well_separated(n=50, d=5)
    est = PrivatePCA(3).fit(X)
    assert list(est.get_feature_names_out()) == ["privatepca0", "privatepca1", "privatepca2"]
    assert est.set_output(transform="default").fit_transform(X).shape == (50, 3)


@_SMALL_PRIVATE
def test_gridsearch_pipeline_records_every_fit():
    rng = np.random.default_rng(0)
    X = well_separated(n=240, d=6)
    y = (X[:, 0] + 0.1 * rng.standard_normal(240) > np.median(X[:, 0])).astype(int)
    budget = PrivacyAccountant(epsilon=100.0, delta=1e-5)
    pipe = make_pipeline(StandardScaler(), PrivatePCA(2, data_norm=3.0, accountant=budget, random_state=0),
                         LogisticRegression())
    search = GridSearchCV(pipe, {"privatepca__epsilon": [0.5, 2.0]}, cv=3).fit(X, y)
    history = budget.history()
    assert len(history) == 2 * 3 + 1  # every CV fit and the refit
    assert sorted(round(e.epsilon, 6) for e in history[:6]) == [0.5] * 3 + [2.0] * 3
    assert history[-1].epsilon == pytest.approx(search.best_params_["privatepca__epsilon"])
    assert budget.spent()[0] == pytest.approx(epsilon_of([e.event for e in history], 1e-5))


def test_algorithm_functions_standalone(rng):
    """The plain functions, as another module would call them."""
    d = 20
    Q = np.linalg.qr(rng.standard_normal((d, d)))[0]
    A = (Q * np.geomspace(20, 0.1, d)) @ Q.T
    res = noisy_power_method(DenseMatrix(A), 2, 200, rng, n_oversamples=1, tol=1e-13)
    assert_same_up_to_sign(res.components, Q[:, :2].T, atol=1e-6)
    assert res.basis.shape == (d, 3) and res.n_iter < 200
    ag = analyze_gauss(A, 2, rng)
    assert_same_up_to_sign(ag.components, Q[:, :2].T, atol=1e-10)
    assert ag.total == pytest.approx(np.trace(A))
    Y = rng.standard_normal((6, 3))
    R = orthonormalize(Y).T @ Y
    np.testing.assert_allclose(np.tril(R, -1), 0, atol=1e-12)
    assert np.all(np.diagonal(R) > 0)  # signs fixed: the QR factorisation is unique


# --------------------------------------------------------------------------------------------
# scikit-learn contract
# --------------------------------------------------------------------------------------------

@noise_dominated("explained_variance_")  # the checks' few rows, at epsilon=1
@NON_PRIVATE  # the first two are the exact method, at epsilon=inf
@parametrize_with_checks([PrivatePCA(), PrivatePCA(method="power", random_state=0),
                          PrivatePCA(epsilon=1.0, data_norm=5.0, random_state=0)])
def test_sklearn_contract(estimator, check):
    check(estimator)


# --------------------------------------------------------------------------------------------
# The total variance behind explained_variance_ratio_, and the noise level of the eigenvalues
# --------------------------------------------------------------------------------------------

def test_total_variance_sensitivity_brute_force():
    """sum_i ||clip(x_i - m, B)||^2 moves by at most B^2 when one row is replaced, and reaches it."""
    rng = np.random.default_rng(21)
    B, n, d = 1.5, 40, 3
    X = rng.standard_normal((n, d))
    m = rng.standard_normal(d) * 0.3  # a released (public) mean: a fixed map row by row
    base = np.einsum("ij,ij->", *(2 * [center_and_clip(X, m, B)]))
    worst = 0.0
    for scale in (0.1, 1.0, 10.0):
        for _ in range(400):
            Y = X.copy()
            Y[rng.integers(n)] = rng.standard_normal(d) * scale
            C = center_and_clip(Y, m, B)
            worst = max(worst, abs(np.einsum("ij,ij->", C, C) - base))
    assert worst <= total_variance_sensitivity(B) * (1 + 1e-12)
    # attained: a row of norm B (after centring) replaced by the mean itself (norm 0)
    Y, Z = X.copy(), X.copy()
    Y[0], Z[0] = m + B * np.eye(d)[0], m
    CY, CZ = center_and_clip(Y, m, B), center_and_clip(Z, m, B)
    assert np.einsum("ij,ij->", CY, CY) - np.einsum("ij,ij->", CZ, CZ) == pytest.approx(B**2)


@pytest.mark.parametrize("method", ["analyze_gauss", "power"])
def test_explained_variance_ratio_is_a_ratio_on_digits(method):
    """On digits at epsilon=1 the components are noise: the ratios still sum to at most 1 and the
    fit says the spectrum is noise-dominated; at epsilon=100 they match scikit-learn's."""
    from sklearn.datasets import load_digits
    from sklearn.decomposition import PCA

    X = load_digits().data
    B = 60.0  # public: pixels lie in [0, 16]; a bound chosen below the worst case 16 * 8 = 128
    with pytest.warns(UserWarning, match="dominated by the privacy noise"):
        noisy = PrivatePCA(2, epsilon=1.0, data_norm=B, method=method, random_state=0).fit(X)
    assert 0 <= noisy.explained_variance_ratio_.sum() <= 1
    assert np.any(noisy.explained_variance_ < 2 * noisy.explained_variance_noise_)
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)
        warnings.simplefilter("ignore", PrivacyWarning)
        # The top two eigenvalues of digits differ by 9% only: the power method needs more than its
        # default 6 steps to separate them from any random start (with 6, about a third of the
        # starts leave the second ratio 10-27% off, whatever the noise sampler).
        steps = {"n_iter": 30} if method == "power" else {}
        sharp = PrivatePCA(2, epsilon=100.0, data_norm=B, method=method, random_state=0, **steps).fit(X)
    ref = PCA(2).fit(X)
    np.testing.assert_allclose(sharp.explained_variance_ratio_, ref.explained_variance_ratio_, rtol=0.05)
    assert np.all(sharp.explained_variance_ > 10 * sharp.explained_variance_noise_)


@pytest.mark.parametrize("method, k", [("analyze_gauss", 3), ("power", 20)])
def test_noise_level_is_where_pure_noise_eigenvalues_sit(method, k):
    """With no signal, the largest released eigenvalue is about explained_variance_noise_."""
    X = np.zeros((1000, 100))
    ratios = []
    for seed in range(3):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            est = PrivatePCA(k, epsilon=1.0, data_norm=1.0, method=method, centered=True, n_iter=3,
                             random_state=seed).fit(X)
        ratios.append(np.max(np.abs(est.explained_variance_)) / est.explained_variance_noise_[0])
    assert 0.75 < np.mean(ratios) < 1.15, ratios
    nonprivate = PrivatePCA(2, random_state=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", PrivacyWarning)
        nonprivate.fit(well_separated(n=200, d=6))
    assert np.all(nonprivate.explained_variance_noise_ == 0)


@_SMALL_PRIVATE
def test_verbose_progress_prints_public_counts_only(capsys):
    """verbose=1 shows the power steps; a private fit prints the same text for any data of that shape."""
    outputs = []
    for seed in (1, 2):
        X = np.random.default_rng(seed).standard_normal((500, 30)) * (1 + seed)
        PrivatePCA(2, epsilon=1.0, data_norm=3.0, method="power", n_iter=5, verbose=1,
                   random_state=0).fit(X)
        outputs.append(capsys.readouterr().out)
    assert outputs[0] == outputs[1]
    assert outputs[0].count("[noisy_power_method] step") == 5 and "step 5/5" in outputs[0]
    est = PrivatePCA(2, epsilon=1.0, data_norm=3.0, block_size=100, verbose=1, random_state=0)
    est.partial_fit(np.random.default_rng(3).standard_normal((350, 4)))
    assert "2 power block(s) released, 350 rows seen" in capsys.readouterr().out


def test_streaming_noise_level_follows_the_block_release():
    est = PrivatePCA(2, epsilon=1.0, data_norm=3.0, block_size=500, centered=True, random_state=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        est.partial_fit(np.random.default_rng(4).standard_normal((1000, 5)))
    z = est.privacy_cost_.noise_multiplier
    std = z * row_power_sensitivity(3.0, 2) / 500  # each entry of a block's release
    np.testing.assert_allclose(est.explained_variance_noise_, math.sqrt(2 * 2) * std)


def test_float_mean_and_total_releases_carry_their_rounding(monkeypatch):
    """private_mean and private_total release float64 sums of float32 rows with the allowance of
    n rows: the mean's total B (in its own units) over n + 1 operations, the total's n B^2 over
    the n d squares."""
    rng = np.random.default_rng(11)
    n, d, B = 20000, 7, 3.0
    X = clip_rows(rng.standard_normal((n, d)).astype(np.float32) * 2, B)
    seen = []
    real = power_mod.gaussian_release

    def spy(value, sensitivity, z, rng, dtype=None, *, rounding):
        seen.append(rounding)
        return real(value, sensitivity, z, rng, dtype, rounding=rounding)
    monkeypatch.setattr(power_mod, "gaussian_release", spy)
    mean = power_mod.private_mean(X, B, 1.0, np.random.default_rng(0))
    total = power_mod.private_total(X, B, 1.0, np.random.default_rng(0))
    assert mean.dtype == np.float32 and np.isfinite(total)
    assert seen == [(B, n + 1, np.float64), (n * B**2, n * d, np.float64)]
    # the sums themselves run in float64: without noise they match a float64 sum of the rows
    X64 = X.astype(np.float64)
    assert power_mod.private_total(X, B, 0.0, None) == pytest.approx(np.sum(X64 * X64), rel=1e-14)


def test_noisy_power_step_on_a_float_product_needs_its_rounding():
    A = np.diag([3.0, 2.0, 1.0])
    with pytest.raises(TypeError, match="rounding="):
        noisy_power_method(DenseMatrix(A), 1, 2, np.random.default_rng(0), noise_multiplier=1.0)
    seen = []

    def rounding(X):
        seen.append(X.shape)
        return Rounding(total=6.0, terms=3)
    noisy_power_method(DenseMatrix(A), 1, 2, np.random.default_rng(0), noise_multiplier=1.0,
                       rounding=rounding)
    assert seen == [(3, 1), (3, 1)]
    res = noisy_power_method(DenseMatrix(A), 1, 50, np.random.default_rng(0), tol=1e-12)
    assert abs(res.components[0, 0]) == pytest.approx(1.0)  # without noise nothing is needed


# ---------------------------------------------------------------- scikit-learn's model, released
def _spiked_rows(n=4000, d=8, seed=0):
    rng = np.random.default_rng(seed)
    return rng.standard_normal((n, d)) * np.r_[4.0, 3.0, np.full(d - 2, 0.5)] / 3


def _fit(est, X, how="fit"):
    """``est`` fitted; a fit without privacy says so (asserted, not hidden)."""
    if math.isfinite(est.epsilon):
        return getattr(est, how)(X)
    with pytest.warns(PrivacyWarning, match="epsilon=inf"):
        return getattr(est, how)(X)


def _sklearn_on(est):
    """scikit-learn's PCA carrying ``est``'s released parameters, nothing fitted by it."""
    ref = PCA(n_components=est.n_components_, whiten=est.whiten)
    for name in ("components_", "explained_variance_", "noise_variance_", "mean_",
                 "n_components_", "n_features_in_"):
        setattr(ref, name, getattr(est, name))
    return ref


@pytest.mark.parametrize("whiten", [False, True])
@pytest.mark.parametrize("kw", [dict(epsilon=np.inf), dict(epsilon=2.0, method="analyze_gauss"),
                                dict(epsilon=2.0, method="power"),
                                dict(epsilon=2.0, method="analyze_gauss", calibration="paper")])
def test_probabilistic_model_is_sklearn_formulas_on_released_parameters(kw, whiten):
    X = _spiked_rows()
    est = _fit(PrivatePCA(n_components=2, data_norm=4.0, whiten=whiten, random_state=0, **kw), X)
    ref = _sklearn_on(est)
    Y = _spiked_rows(50, seed=1)
    np.testing.assert_allclose(est.get_covariance(), ref.get_covariance(), rtol=1e-10)
    np.testing.assert_allclose(est.get_precision(), ref.get_precision(), rtol=1e-8, atol=1e-10)
    np.testing.assert_allclose(est.score_samples(Y), ref.score_samples(Y), rtol=1e-10)
    np.testing.assert_allclose(est.get_precision() @ est.get_covariance(), np.eye(8), atol=1e-9)


@pytest.mark.parametrize("kw", [dict(epsilon=2.0, method="analyze_gauss"),
                                dict(epsilon=2.0, method="power")])
def test_noise_variance_and_singular_values_hold_released_values_only(kw):
    X, n, d, k = _spiked_rows(), 4000, 8, 2
    est = PrivatePCA(n_components=k, data_norm=4.0, random_state=3, **kw).fit(X)
    ev = est.explained_variance_
    # the released total, read back from the released ratios (it is their common denominator)
    total = float(ev.sum() / est.explained_variance_ratio_.sum())
    assert est.noise_variance_ == pytest.approx((total - ev.sum()) / (min(n, d) - k), rel=1e-12)
    np.testing.assert_allclose(est.singular_values_, np.sqrt(ev * (n - 1)), rtol=1e-12)
    # the unnoised statistics of the rows the fit used are not what was released
    R = center_and_clip(clip_rows(X, 4.0), est.mean_, 4.0)
    exact_total = float(np.sum(R * R)) / (n - 1)
    exact_nv = (exact_total - ev.sum()) / (d - k)
    assert abs(est.noise_variance_ - exact_nv) > 1e-9
    assert not np.allclose(est.singular_values_, np.linalg.svd(R, compute_uv=False)[:k])


def test_nonprivate_model_matches_a_fitted_sklearn_pca():
    X = _spiked_rows()
    est = _fit(PrivatePCA(n_components=3), X)
    ref = PCA(n_components=3, svd_solver="full").fit(X)
    assert est.noise_variance_ == pytest.approx(ref.noise_variance_, rel=1e-9)
    np.testing.assert_allclose(est.singular_values_, ref.singular_values_, rtol=1e-9)
    np.testing.assert_allclose(est.get_covariance(), ref.get_covariance(), atol=1e-10)
    np.testing.assert_allclose(est.get_precision(), ref.get_precision(), rtol=1e-7, atol=1e-8)
    np.testing.assert_allclose(est.score_samples(X[:20]), ref.score_samples(X[:20]), rtol=1e-9)


def test_model_absent_where_no_total_is_released():
    X = _spiked_rows()
    paper = PrivatePCA(n_components=2, epsilon=2.0, method="power", calibration="paper",
                       data_norm=4.0, random_state=0).fit(X)
    assert not hasattr(paper, "explained_variance_ratio_") and hasattr(paper, "singular_values_")
    A = X.T @ X
    pre = _fit(PrivatePCA(n_components=2, input="precomputed"), A)
    stream = _fit(PrivatePCA(n_components=2, block_size=1000), X, "partial_fit")
    for est in (paper, pre, stream):
        assert not hasattr(est, "noise_variance_")
        for method in (est.get_covariance, est.get_precision):
            with pytest.raises(AttributeError, match="no total variance"):
                method()
        with pytest.raises(AttributeError, match="no total variance"):
            est.score_samples(X[:3])
    assert not hasattr(pre, "singular_values_") and not hasattr(stream, "singular_values_")


def test_model_precision_where_a_component_is_at_the_noise_level():
    """A released eigenvalue below ``noise_variance_`` (noise can do that) gives no 1/0."""
    from dptensor.algorithms.pca_model import model_covariance, model_precision
    V = np.linalg.qr(np.random.default_rng(0).standard_normal((5, 2)))[0].T
    ev = np.array([3.0, 0.2])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        P = model_precision(V, ev, 0.5)
    np.testing.assert_allclose(P, np.linalg.inv(model_covariance(V, ev, 0.5)), atol=1e-12)
    with pytest.raises(ValueError, match="singular"):
        model_precision(V, ev, 0.0)


@pytest.mark.parametrize("epsilon", [np.inf, 1.0])
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_a_gram_fit_on_rows_holds_no_copy_of_them(epsilon, dtype):
    X = np.random.default_rng(0).standard_normal((60_000, 40)).astype(dtype) * 0.4
    est = PrivatePCA(3, epsilon=epsilon, delta=1e-12, data_norm=4.0, method="analyze_gauss")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        est.fit(X[:100])  # warm up: imports and caches
        tracemalloc.start()
        est.fit(X)
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
    # a few blocks of rows, d x d sums, and without privacy one float32 norm per row
    assert peak < X.nbytes / 4, (peak, X.nbytes)


@noise_dominated("explained_variance_")  # rank-2 rows: the second component may be weak
def test_a_private_model_is_never_singular_whatever_the_noise_drew():
    # Rank-2 rows in 6 dimensions: no variance outside the components, so on about half the
    # seeds the noisy total falls at or below the released eigenvalues' sum. The model (its
    # precision, its scores) must exist on every seed: whether it does is a function of the noise.
    rng = np.random.default_rng(0)
    X = rng.standard_normal((3000, 2)) @ rng.standard_normal((2, 6)) / 4
    floored = 0
    for seed in range(12):
        est = PrivatePCA(n_components=2, epsilon=1.0, data_norm=4.0, random_state=seed).fit(X)
        floor = 2.0 ** -20 * est.explained_variance_noise_.max()
        floored += est.noise_variance_ == floor
        assert est.noise_variance_ >= floor > 0
        assert np.all(np.isfinite(est.score_samples(X[:5])))
        np.testing.assert_allclose(est.get_precision() @ est.get_covariance(), np.eye(6),
                                   atol=1e-6 * np.abs(est.get_precision()).max())
    assert floored  # the case the floor is for was met
