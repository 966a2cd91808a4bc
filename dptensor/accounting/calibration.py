"""Noise calibration: a target ``(epsilon, delta)`` and a query plan in, noise multipliers out.

``"exact"`` calibration uses the accountant's own composition (:func:`epsilon_of`), so that the cost
an estimator records equals its target. The ``paper_*`` helpers reproduce the formulas printed in
the papers, for side-by-side comparison (``calibration="paper"``); they are never the default.
"""
from __future__ import annotations

import math

from scipy.optimize import brentq

from .composition import epsilon_of, gdp_mu
from .events import GaussianEvent

__all__ = ["calibrate_gaussian", "calibrate", "paper_tensor_power_noise", "paper_noisy_power_sigma"]


def calibrate_gaussian(epsilon: float, delta: float, n_queries: int) -> float:
    """Noise multiplier z making ``n_queries`` adaptive Gaussian releases exactly (eps, delta)-DP.

    ``z = sqrt(n_queries) / mu*`` where ``mu*`` is the largest GDP parameter meeting the target: the
    least noise any calibration of Gaussian releases can add.

    >>> round(calibrate_gaussian(1.0, 1e-5, 1050), 1)
    120.9
    """
    _check_target(epsilon, delta)
    if n_queries < 1:
        raise ValueError(f"n_queries must be >= 1, got {n_queries!r}")
    if math.isinf(epsilon):
        return 0.0
    z = math.sqrt(n_queries) / gdp_mu(epsilon, delta)
    step = math.ulp(z)  # the event rebuilds mu from z, a rounding away: step up until it meets
    while epsilon_of(GaussianEvent(z, n_queries), delta) > epsilon:
        z, step = z + step, 2.0 * step
    return z


def calibrate(epsilon: float, delta: float, make_event, *, rtol: float = 1e-9) -> float:
    """The smallest noise multiplier ``z`` with ``epsilon_of(make_event(z), delta) <= epsilon``.

    ``make_event(z)`` builds the fit's whole event for multiplier ``z`` (say a fixed AboveThreshold
    share plus Gaussian steps at ``z``); its cost must decrease as ``z`` grows. Raises
    ``ValueError`` when no amount of Gaussian noise meets the target (the fixed parts already
    exceed it).
    """
    _check_target(epsilon, delta)
    if math.isinf(epsilon):
        return 0.0

    def excess(log_z):
        return epsilon_of(make_event(math.exp(log_z)), delta) - epsilon

    lo, hi = math.log(1e-3), math.log(10.0)
    while excess(lo) < 0:
        lo -= 4.0
        if lo < -60:
            return math.exp(lo)
    while excess(hi) > 0:
        hi += 4.0
        if hi > 60:
            raise ValueError(f"no Gaussian noise level meets epsilon={epsilon}, delta={delta}: "
                             "the fixed (non-Gaussian) parts of the plan already exceed it")
    log_z = brentq(excess, lo, hi, xtol=rtol)
    # brentq may land a hair below the root; step up until the plan is within budget.
    while excess(log_z) > 0:
        log_z += rtol
    return math.exp(log_z)


def paper_tensor_power_noise(epsilon: float, delta: float, n_queries: int) -> float:
    """Wang & Anandkumar (2016) Alg. 3 calibration, as a noise multiplier ``z = nu / 6``.

    ``delta0 = delta / (2K)``, ``eps0 = eps / sqrt(K (4 + ln(2/delta)))``,
    ``nu = 6 sqrt(2 ln(1.25/delta0)) / eps0``; the factor 6 is the tensor-entry sensitivity scale,
    which dptensor applies separately, so this returns ``nu / 6``.
    """
    _check_target(epsilon, delta)
    k = n_queries
    delta0 = delta / (2 * k)
    eps0 = epsilon / math.sqrt(k * (4 + math.log(2 / delta)))
    return math.sqrt(2 * math.log(1.25 / delta0)) / eps0


def paper_noisy_power_sigma(epsilon: float, delta: float, n_components: int, n_iter: int) -> float:
    """Hardt & Price (2014) private power method: ``sigma = eps^-1 sqrt(4 p L ln(1/delta))``.

    The noise at step ``l`` is ``N(0, ||X_{l-1}||_inf^2 sigma^2)`` per entry.
    """
    _check_target(epsilon, delta)
    return math.sqrt(4 * n_components * n_iter * math.log(1 / delta)) / epsilon


def gaussian_plan(noise_multiplier: float, n_queries: int) -> GaussianEvent:
    """The event of ``n_queries`` Gaussian releases at one multiplier (shorthand for estimators)."""
    return GaussianEvent(noise_multiplier, int(n_queries))


def _check_target(epsilon, delta):
    if not epsilon > 0:
        raise ValueError(f"epsilon must be > 0 (np.inf for no privacy), got {epsilon!r}")
    if not 0 <= delta < 1:
        raise ValueError(f"delta must be in [0, 1), got {delta!r}")
    if math.isfinite(epsilon) and delta == 0:
        raise ValueError("delta must be > 0 for Gaussian noise: with delta=0 every Gaussian "
                         "release has infinite epsilon")
