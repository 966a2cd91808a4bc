"""Calibration and composition checked against independent references.

References: the closed-form GDP privacy profile written here with ``scipy.stats.norm`` (not the
library's code), and Google's ``dp-accounting`` (PLD and RDP accountants).
"""
import math

import numpy as np
import pytest
from scipy.optimize import brentq
from scipy.stats import norm

from dptensor.accounting import (AboveThresholdEvent, ComposedEvent, GaussianEvent, LaplaceEvent,
                                 calibrate, calibrate_gaussian, epsilon_of, gdp_delta, gdp_epsilon, gdp_mu,
                                 paper_noisy_power_sigma, paper_tensor_power_noise, rdp_curve, rdp_epsilon)
from dptensor.accounting.composition import ORDERS

dp_accounting = pytest.importorskip("dp_accounting")
from dp_accounting.pld import PLDAccountant  # noqa: E402
from dp_accounting.rdp import RdpAccountant  # noqa: E402


# ---------------------------------------------------------------- independent references
def ref_delta(eps, mu):
    """The mu-GDP privacy profile (Dong, Roth & Su 2019, Cor. 2.13), straight from the formula."""
    return norm.cdf(-eps / mu + mu / 2) - math.exp(eps) * norm.cdf(-eps / mu - mu / 2)


def ref_mu(eps, delta):
    """Largest mu whose profile meets delta at eps (the profile increases with mu)."""
    return brentq(lambda m: ref_delta(eps, m) - delta, 1e-6, 100.0, xtol=1e-14, rtol=1e-13)


def pld_epsilon(noise_multiplier, count, delta):
    acc = PLDAccountant(value_discretization_interval=1e-4)
    acc.compose(dp_accounting.GaussianDpEvent(noise_multiplier), count)
    return acc.get_epsilon(delta)


def _grid():
    """~20 targets over eps in [0.1, 10], delta in [1e-8, 1e-3], K in [1, 1e5]: the corners and
    seeded random interior points (log-uniform)."""
    corners = [(e, d, k) for e in (0.1, 10.0) for d in (1e-8, 1e-3) for k in (1, 100_000)]
    rng = np.random.default_rng(7)
    inner = [(float(10 ** rng.uniform(-1, 1)), float(10 ** rng.uniform(-8, -3)), int(10 ** rng.uniform(0, 5)))
             for _ in range(11)]
    return corners + inner + [(1.0, 1e-5, 1050)]


GRID = _grid()


# ---------------------------------------------------------------- Gaussian (exact GDP)
def test_spec_worked_check():
    # SPEC section 0: K=1050, eps=1, delta=1e-5 -> mu* = 0.268, z = 120.9.
    assert gdp_mu(1.0, 1e-5) == pytest.approx(0.268, abs=5e-4)
    assert calibrate_gaussian(1.0, 1e-5, 1050) == pytest.approx(120.9, abs=0.05)


@pytest.mark.parametrize("eps,delta,K", GRID)
def test_calibrate_gaussian_is_the_gdp_optimum(eps, delta, K):
    z = calibrate_gaussian(eps, delta, K)
    z_opt = math.sqrt(K) / ref_mu(eps, delta)
    # The acceptance bound is 5% of the optimum; the calibration is exact, so hold it far tighter.
    assert z == pytest.approx(z_opt, rel=1e-6)
    assert abs(z / z_opt - 1) < 0.05
    # The calibrated plan costs exactly the target under the closed-form profile ...
    mu = math.sqrt(K) / z
    assert ref_delta(eps, mu) == pytest.approx(delta, rel=1e-5)
    # ... and under the accountant's own composition (what an estimator records).
    assert epsilon_of(GaussianEvent(z, K), delta) == pytest.approx(eps, rel=1e-6)


@pytest.mark.parametrize("eps,delta,K", GRID)
def test_calibrate_gaussian_agrees_with_dp_accounting_pld(eps, delta, K):
    z = calibrate_gaussian(eps, delta, K)
    assert pld_epsilon(z, K, delta) == pytest.approx(eps, rel=0.01)


@pytest.mark.parametrize("mu", [0.05, 0.3, 1.0, 3.0, 8.0])
@pytest.mark.parametrize("eps", [0.0, 0.1, 1.0, 5.0])
def test_gdp_delta_matches_closed_form(mu, eps):
    ref = ref_delta(eps, mu)
    assert gdp_delta(eps, mu) == pytest.approx(ref, rel=1e-9, abs=1e-300)


@pytest.mark.parametrize("mu,delta", [(0.1, 1e-5), (0.5, 1e-8), (1.0, 1e-3), (4.0, 1e-6)])
def test_gdp_epsilon_inverts_the_profile(mu, delta):
    eps = gdp_epsilon(mu, delta)
    assert ref_delta(eps, mu) == pytest.approx(delta, rel=1e-6)
    # More noise (smaller mu) never costs more.
    assert gdp_epsilon(mu / 2, delta) < eps


def test_gaussian_composition_is_exact_gdp():
    # K adaptive releases with multipliers z_i are sqrt(sum 1/z_i^2)-GDP, whatever the grouping.
    events = [GaussianEvent(3.0, 4), GaussianEvent(5.0), GaussianEvent(1.5, 2)]
    mu = math.sqrt(4 / 9 + 1 / 25 + 2 / 2.25)
    assert epsilon_of(events, 1e-5) == pytest.approx(gdp_epsilon(mu, 1e-5), rel=1e-12)
    assert epsilon_of(ComposedEvent(events), 1e-5) == pytest.approx(epsilon_of(events, 1e-5), rel=1e-12)
    acc = PLDAccountant(value_discretization_interval=1e-4)
    for e in events:
        acc.compose(dp_accounting.GaussianDpEvent(e.noise_multiplier), e.count)
    assert epsilon_of(events, 1e-5) == pytest.approx(acc.get_epsilon(1e-5), rel=0.01)


# ---------------------------------------------------------------- RDP path
def _rdp_reference(gauss, laplace, delta):
    acc = RdpAccountant(list(ORDERS))
    for z, k in gauss:
        acc.compose(dp_accounting.GaussianDpEvent(z), k)
    for eps, k in laplace:
        # dp-accounting's Laplace parameter is the scale b for sensitivity 1: eps = 1/b.
        acc.compose(dp_accounting.LaplaceDpEvent(1.0 / eps), k)
    return acc


PLANS = [([(5.0, 10)], [(0.1, 3)], 1e-5),
         ([(50.0, 1000)], [(0.5, 1)], 1e-6),
         ([(1.0, 1)], [], 1e-5),
         ([(10.0, 1)], [(1.0, 10)], 1e-3),
         ([], [(0.05, 200)], 1e-7)]


@pytest.mark.parametrize("gauss,laplace,delta", PLANS)
def test_rdp_agrees_with_dp_accounting(gauss, laplace, delta):
    events = [GaussianEvent(z, k) for z, k in gauss] + [LaplaceEvent(e, k) for e, k in laplace]
    ref = _rdp_reference(gauss, laplace, delta)
    np.testing.assert_allclose(rdp_curve(events), ref._rdp, rtol=1e-9)
    assert rdp_epsilon(rdp_curve(events), delta) == pytest.approx(ref.get_epsilon(delta), rel=0.01)


@pytest.mark.parametrize("gauss,laplace,delta", PLANS)
def test_mixed_plans_take_the_better_valid_bound(gauss, laplace, delta):
    # epsilon_of = min(RDP bound, basic composition of the pure part with the exact GDP part).
    events = [GaussianEvent(z, k) for z, k in gauss] + [LaplaceEvent(e, k) for e, k in laplace]
    rdp = _rdp_reference(gauss, laplace, delta).get_epsilon(delta)
    pure = sum(e * k for e, k in laplace)
    gdp = 0.0
    if gauss:
        acc = PLDAccountant(value_discretization_interval=1e-4)
        for z, k in gauss:
            acc.compose(dp_accounting.GaussianDpEvent(z), k)
        gdp = acc.get_epsilon(delta)
    expected = min(rdp, pure + gdp) if laplace else gdp
    assert epsilon_of(events, delta) == pytest.approx(expected, rel=0.01)


def _randomized_response_rdp(eps, orders):
    """Rényi divergence of eps-randomized response, the worst case among pure eps-DP mechanisms."""
    p = math.exp(eps) / (1 + math.exp(eps))
    q = 1 - p
    return np.log(p**orders * q ** (1 - orders) + q**orders * p ** (1 - orders)) / (orders - 1)


@pytest.mark.parametrize("eps", [0.01, 0.3, 1.0, 3.0])
def test_above_threshold_rdp_is_the_pure_dp_bound(eps):
    orders = ORDERS[ORDERS < 200]
    ours = rdp_curve([AboveThresholdEvent(eps)], orders)
    ref = _randomized_response_rdp(eps, orders)
    np.testing.assert_allclose(ours, np.minimum(ref, eps), rtol=1e-6, atol=1e-12)
    assert np.all(ours <= eps + 1e-12) and np.all(ours <= orders * eps**2 / 2 + 1e-12)
    # One AboveThreshold run is pure eps-DP: never priced above eps, at any delta.
    for delta in (1e-9, 1e-5, 0.0):
        assert epsilon_of(AboveThresholdEvent(eps), delta) <= eps + 1e-12


def test_pure_events_compose_additively_when_that_is_best():
    # Few pure events at small delta: about the sum of epsilons (RDP at a huge order, where each
    # pure event's divergence is capped at its epsilon, shaves a hair off using delta), never more.
    events = [LaplaceEvent(0.25, 2), AboveThresholdEvent(0.5)]
    assert 1.0 - 1e-4 < epsilon_of(events, 1e-5) <= 1.0
    assert epsilon_of(events, 0.0) == 1.0  # pure DP: exactly the sum
    # Many small ones: RDP (advanced-composition-like sqrt growth) wins and is far below the sum.
    many = LaplaceEvent(0.01, 10_000)
    assert epsilon_of(many, 1e-5) < 0.1 * 100.0


# ---------------------------------------------------------------- generic calibration
def test_calibrate_mixed_plan_lands_on_target():
    eps, delta = 1.0, 1e-5

    def plan(z):
        return ComposedEvent([AboveThresholdEvent(0.2), GaussianEvent(z, 100)])

    z = calibrate(eps, delta, plan)
    cost = epsilon_of(plan(z), delta)
    assert cost <= eps and cost == pytest.approx(eps, rel=1e-6)
    # Minimal: a little less noise overshoots.
    assert epsilon_of(plan(z * (1 - 1e-4)), delta) > eps
    # Needs more noise than the Gaussian part alone would at the full budget.
    assert z > calibrate_gaussian(eps, delta, 100)


def test_calibrate_mixed_plan_agrees_with_dp_accounting():
    eps, delta = 2.0, 1e-6

    def plan(z):
        return [LaplaceEvent(0.3, 2), GaussianEvent(z, 50)]

    z = calibrate(eps, delta, plan)
    rdp = _rdp_reference([(z, 50)], [(0.3, 2)], delta).get_epsilon(delta)
    basic = 0.6 + pld_epsilon(z, 50, delta)
    assert min(rdp, basic) == pytest.approx(eps, rel=0.01)


def test_calibrate_gaussian_only_plan_matches_calibrate_gaussian():
    z = calibrate(0.5, 1e-6, lambda z: GaussianEvent(z, 300))
    assert z == pytest.approx(calibrate_gaussian(0.5, 1e-6, 300), rel=1e-7)


def test_calibrate_refuses_impossible_plans():
    with pytest.raises(ValueError, match="fixed"):
        calibrate(1.0, 1e-5, lambda z: [AboveThresholdEvent(2.0), GaussianEvent(z)])


def test_infinite_epsilon_needs_no_noise():
    assert calibrate_gaussian(np.inf, 1e-5, 10) == 0.0
    assert calibrate(np.inf, 1e-5, lambda z: GaussianEvent(z)) == 0.0


@pytest.mark.parametrize("kwargs", [dict(epsilon=0.0, delta=1e-5, n_queries=1),
                                    dict(epsilon=1.0, delta=0.0, n_queries=1),
                                    dict(epsilon=1.0, delta=1.0, n_queries=1),
                                    dict(epsilon=1.0, delta=1e-5, n_queries=0)])
def test_calibrate_gaussian_rejects_bad_targets(kwargs):
    with pytest.raises(ValueError):
        calibrate_gaussian(**kwargs)


# ---------------------------------------------------------------- the papers' formulas
def test_paper_tensor_power_noise_reproduces_wang_anandkumar():
    eps, delta, k, L, R = 1.0, 1e-5, 5, 10, 20
    K = k * L * (R + 1)
    assert K == 1050
    delta0 = delta / (2 * K)
    eps0 = eps / math.sqrt(K * (4 + math.log(2 / delta)))
    nu = 6 * math.sqrt(2 * math.log(1.25 / delta0)) / eps0
    paper = paper_tensor_power_noise(eps, delta, K)
    assert paper == pytest.approx(nu / 6, rel=1e-12)
    exact = calibrate_gaussian(eps, delta, K)
    assert paper / exact >= 6.0  # SPEC section 3: 6.7x more noise than needed
    # The paper's noise is far more private than its target: eps = 0.125 by exact composition.
    assert epsilon_of(GaussianEvent(paper, K), delta) == pytest.approx(0.125, abs=1e-3)


def test_paper_noisy_power_sigma_reproduces_hardt_price():
    eps, delta, p, L = 0.5, 1e-6, 4, 30
    assert paper_noisy_power_sigma(eps, delta, p, L) == pytest.approx(
        math.sqrt(4 * p * L * math.log(1 / delta)) / eps, rel=1e-12)
