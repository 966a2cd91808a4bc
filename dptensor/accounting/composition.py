r"""Pricing and composing privacy events.

Two exact-or-tight tools, and the cheaper of their answers is used:

* **Gaussian DP** (Dong, Roth & Su 2019). A Gaussian release with noise multiplier ``z`` is
  ``(1/z)``-GDP and ``K`` adaptive ones are ``sqrt(sum 1/z_i^2)``-GDP, exactly. A ``mu``-GDP
  mechanism is ``(eps, delta(eps))``-DP for

  .. math::

     \delta(\varepsilon) = \Phi(-\varepsilon/\mu + \mu/2)
                           - e^{\varepsilon}\Phi(-\varepsilon/\mu - \mu/2),

  and no smaller curve holds, so while every event is Gaussian this is the optimum.
* **Rényi DP** over a grid of orders, with the conversion of Canonne, Kamath & Steinke (2020):
  ``eps = min_a rdp(a) + log(1 - 1/a) - (log delta + log a)/(a - 1)``. It prices Laplace and
  AboveThreshold (pure eps-DP) together with Gaussians.

Pure-epsilon events also compose with a Gaussian block by basic composition
(``eps_pure + eps_gdp(delta)``); the smaller of that and the RDP answer is returned.

A private hyperparameter search (:class:`~dptensor.accounting.events.PrivateSelectionEvent`) is
priced in RDP only, by Papernot & Steinke's theorems (:func:`selection_rdp`, derived in
``docs/derivations/private_selection.rst``).
"""
from __future__ import annotations

import functools
import math

import numpy as np
from scipy.optimize import brentq
from scipy.special import log_ndtr

from .events import (AboveThresholdEvent, GaussianEvent, LaplaceEvent, NonPrivateEvent,
                     PrivacyEvent, PrivateSelectionEvent)

__all__ = ["gdp_delta", "gdp_epsilon", "gdp_mu", "rdp_curve", "rdp_epsilon", "rdp_delta",
           "epsilon_of", "selection_rdp", "repeat_and_select_rdp", "tnb_gamma", "tnb_mean",
           "ORDERS"]

#: Rényi orders searched by the RDP conversion: dense where small budgets live, sparse beyond.
ORDERS = np.concatenate([np.linspace(1.01, 8.0, 400), np.linspace(8.05, 64.0, 560),
                         np.geomspace(64.5, 1e5, 300)])


#: The GDP conversions solve for a delta this much (relatively) below the target: the profile's
#: two terms nearly cancel, so its floating-point value may lie a few ulps of delta below the
#: true one; with the margin, a calibrated release provably costs at most its target.
GDP_MARGIN = 1e-10


def gdp_delta(epsilon: float, mu: float) -> float:
    """delta at which a ``mu``-GDP mechanism is ``epsilon``-DP (the GDP privacy profile)."""
    if mu <= 0:
        return 0.0
    if math.isinf(mu):
        return 1.0
    a = -epsilon / mu + mu / 2
    b = -epsilon / mu - mu / 2
    return max(0.0, math.exp(log_ndtr(a)) - math.exp(epsilon + log_ndtr(b)))


def _gdp_delta_above(epsilon: float, mu: float) -> float:
    """:func:`gdp_delta` plus a bound on its rounding error: at most 1, never below the true
    profile. The two terms may cancel to far below their size (epsilon=1e-6 at delta=1e-300
    leaves 1e-5 of them), where a relative margin on delta does not cover their rounding; each
    term's error is a few ulps of its logarithm, whose size it multiplies."""
    if mu <= 0 or math.isinf(mu):
        return gdp_delta(epsilon, mu)
    a, b = -epsilon / mu + mu / 2, -epsilon / mu - mu / 2
    log_a, log_b = float(log_ndtr(a)), epsilon + float(log_ndtr(b))  # gdp_delta's two terms
    term_a, term_b = math.exp(log_a), math.exp(log_b)
    error = 64 * 2.0**-52 * sum(t * (1.0 + abs(v)) for t, v in ((term_a, log_a), (term_b, log_b))
                                if v > -math.inf)  # a term of -inf is an exact 0
    return min(1.0, max(0.0, term_a - term_b) + error)


#: The GDP conversions are pure functions of two floats, each a few root searches: cached, for a
#: search prices many candidates at the same (epsilon, delta) in every round of its own root
#: search.
_CONVERSIONS = 4096


@functools.lru_cache(maxsize=_CONVERSIONS)
def gdp_epsilon(mu: float, delta: float) -> float:
    """The smallest epsilon with ``gdp_delta(epsilon, mu) <= delta``."""
    if mu <= 0:
        return 0.0
    if delta <= 0 or math.isinf(mu):
        return math.inf
    target = delta * (1.0 - GDP_MARGIN)
    if _gdp_delta_above(0.0, mu) <= target:
        return 0.0
    hi = max(1.0, mu * mu)
    while _gdp_delta_above(hi, mu) > target:
        hi *= 2.0
    epsilon = brentq(lambda e: _gdp_delta_above(e, mu) - target, 0.0, hi, xtol=1e-14,
                     rtol=1e-13)
    step = math.ulp(epsilon)  # the root's tolerance may leave it a hair low: step up past it
    while _gdp_delta_above(epsilon, mu) > target:
        epsilon, step = epsilon + step, 2.0 * step
    return epsilon


@functools.lru_cache(maxsize=_CONVERSIONS)
def gdp_mu(epsilon: float, delta: float) -> float:
    """The largest ``mu`` such that ``mu``-GDP implies ``(epsilon, delta)``-DP."""
    if math.isinf(epsilon) or delta >= 1:
        return math.inf
    if delta <= 0:
        return 0.0
    lo, hi = 1e-12, 1.0
    target = delta * (1.0 - GDP_MARGIN)
    while _gdp_delta_above(epsilon, hi) < target:
        lo, hi = hi, hi * 2.0
    mu = brentq(lambda m: _gdp_delta_above(epsilon, m) - target, lo, hi, xtol=1e-15, rtol=1e-13)
    step = math.ulp(mu)  # a hair high, the noise it calibrates would cost more than epsilon
    while gdp_epsilon(mu, delta) > epsilon:
        mu, step = mu - step, 2.0 * step
    return mu


def _pure_rdp(epsilon: float, orders: np.ndarray) -> np.ndarray:
    """RDP of any pure ``epsilon``-DP mechanism (Bun & Steinke 2016, Prop. 3.3), at most epsilon."""
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        tight = np.log((np.sinh(orders * epsilon) - np.sinh((orders - 1) * epsilon))
                       / np.sinh(epsilon)) / (orders - 1)
    tight = np.where(np.isfinite(tight), tight, np.inf)
    return np.minimum(np.minimum(tight, orders * epsilon**2 / 2), epsilon)


def _laplace_rdp(epsilon: float, orders: np.ndarray) -> np.ndarray:
    """RDP of the Laplace mechanism with scale sensitivity/epsilon (Mironov 2017, Prop. 6)."""
    a = orders
    log_terms = np.logaddexp(np.log(a / (2 * a - 1)) + (a - 1) * epsilon,
                             np.log((a - 1) / (2 * a - 1)) - a * epsilon)
    return np.minimum(log_terms / (a - 1), epsilon)


def rdp_curve(events, orders: np.ndarray = ORDERS) -> np.ndarray:
    """Rényi divergence bound of the adaptive composition of ``events`` at each order."""
    total = np.zeros_like(orders, dtype=float)
    for event in _leaves(events):
        if isinstance(event, GaussianEvent):
            total += event.count * orders / (2.0 * event.noise_multiplier**2)
        elif isinstance(event, LaplaceEvent):
            total += event.count * _laplace_rdp(event.epsilon, orders)
        elif isinstance(event, AboveThresholdEvent):
            total += event.count * _pure_rdp(event.epsilon, orders)
        elif isinstance(event, PrivateSelectionEvent):
            total += selection_rdp(event, orders)
        elif isinstance(event, NonPrivateEvent):
            total += np.inf
        else:
            raise TypeError(f"cannot price {type(event).__name__}")
    return total


def rdp_epsilon(rdp: np.ndarray, delta: float, orders: np.ndarray = ORDERS) -> float:
    """Canonne–Kamath–Steinke conversion of an RDP curve to epsilon at ``delta``."""
    if delta <= 0:
        return math.inf
    eps = rdp + np.log1p(-1.0 / orders) - (math.log(delta) + np.log(orders)) / (orders - 1)
    return float(max(0.0, np.min(eps)))


def epsilon_of(events, delta: float) -> float:
    """Epsilon, at ``delta``, of the adaptive composition of ``events`` (an event or an iterable).

    Exact GDP while every event is Gaussian; otherwise the smaller of the RDP bound and basic
    composition of the pure-epsilon part with the GDP of the Gaussian part.

    >>> round(epsilon_of(GaussianEvent(noise_multiplier=120.9, count=1050), 1e-5), 3)
    1.0
    >>> round(epsilon_of([AboveThresholdEvent(0.1), GaussianEvent(10.0, 5)], 1e-5), 3)
    0.92
    """
    leaves = list(_leaves(events))
    if not leaves:
        return 0.0
    if any(isinstance(e, NonPrivateEvent) for e in leaves):
        return math.inf
    if any(isinstance(e, PrivateSelectionEvent) for e in leaves):  # priced in RDP only
        return rdp_epsilon(rdp_curve(leaves), delta)
    mu2 = sum(e.mu**2 for e in leaves if isinstance(e, GaussianEvent))
    pure = sum(e.count * e.epsilon for e in leaves if not isinstance(e, GaussianEvent))
    basic = pure + gdp_epsilon(math.sqrt(mu2), delta) if mu2 > 0 else pure
    if pure == 0:
        return basic
    return min(basic, rdp_epsilon(rdp_curve(leaves), delta))


def _leaves(events):
    if isinstance(events, PrivacyEvent):
        events = [events]
    for event in events:
        yield from event.leaves()


def rdp_delta(rdp: np.ndarray, epsilon: float, orders: np.ndarray = ORDERS) -> float:
    """delta at which an RDP curve is ``epsilon``-DP: the Canonne–Kamath–Steinke bound inverted.

    ``log delta = min_a (a - 1)(rdp(a) - epsilon + log(1 - 1/a)) - log a``, capped at 1.
    """
    with np.errstate(invalid="ignore"):
        log_delta = (orders - 1) * (rdp - epsilon + np.log1p(-1.0 / orders)) - np.log(orders)
    return float(min(1.0, math.exp(min(0.0, np.nanmin(log_delta)))))


def _rdp_deltas(rdp: np.ndarray, epsilons, orders: np.ndarray = ORDERS) -> list[float]:
    """:func:`rdp_delta` at each of ``epsilons``, as one array operation: the same operations on
    every element, hence the same bits, as a call for each."""
    eps = np.asarray(epsilons, dtype=float)[:, None]
    with np.errstate(invalid="ignore"):
        log_delta = (orders - 1) * (rdp - eps + np.log1p(-1.0 / orders)) - np.log(orders)
    return [min(1.0, math.exp(min(0.0, v))) for v in np.nanmin(log_delta, axis=1)]


# --------------------------------------------------------------------------------------------
# Private selection (Papernot & Steinke 2022), derived in docs/derivations/private_selection.rst
# --------------------------------------------------------------------------------------------

def tnb_mean(gamma: float, shape: float) -> float:
    """Mean of the truncated negative binomial ``P[K=k] ∝ binom(k+shape-1, k) (1-gamma)^k``, k >= 1.

    ``shape=0`` is the logarithmic law, ``shape=1`` the geometric one (mean ``1/gamma``).
    """
    if gamma >= 1:
        return 1.0
    if shape == 0:
        return (1.0 / gamma - 1.0) / math.log(1.0 / gamma)
    return shape * (1.0 - gamma) / (gamma * -math.expm1(shape * math.log(gamma)))


def tnb_gamma(shape: float, mean: float) -> float:
    """The ``gamma`` at which the truncated negative binomial of ``shape`` has ``mean`` (>= 1)."""
    if mean <= 1:
        return 1.0
    if shape == 1:
        return 1.0 / mean
    # tnb_mean decreases from +inf (gamma -> 0) to 1 (gamma -> 1)
    return brentq(lambda g: tnb_mean(g, shape) - mean, 1e-300, 1.0 - 1e-15, xtol=1e-300, rtol=1e-14)


def repeat_and_select_rdp(rdp: np.ndarray, mean: float, shape: float,
                          orders: np.ndarray = ORDERS) -> np.ndarray:
    r"""RDP of running a mechanism of RDP curve ``rdp`` a random K times and releasing the best run.

    Truncated negative binomial K of ``shape`` (Papernot & Steinke 2022, Thm. 2), for every
    ``lambda > 1`` and any ``lambda_hat >= 1``:

    .. math:: \varepsilon'(\lambda) = \varepsilon(\lambda)
              + (1+\eta)(1-1/\hat\lambda)\varepsilon(\hat\lambda)
              + (1+\eta)\log(1/\gamma)/\hat\lambda + \log \mathbb{E}[K]/(\lambda-1),

    minimised over ``lambda_hat`` in ``orders``. Poisson K (``shape=inf``, Thm. 6):
    ``eps(lambda) + E[K] delta_hat + log E[K] / (lambda - 1)`` where the run is
    ``(eps_hat, delta_hat)``-DP with ``eps_hat = log(1 + 1/(lambda - 1))`` (``delta_hat`` from
    :func:`rdp_delta`). Rényi divergences grow with the order, so each value is then replaced by
    the least value at any higher order.
    """
    rdp = np.asarray(rdp, dtype=float)
    if math.isinf(shape):
        deltas = _rdp_deltas(rdp, [math.log1p(1.0 / (a - 1.0)) for a in orders], orders)
        out = np.array([r + mean * d + math.log(mean) / (a - 1.0)
                        for a, r, d in zip(orders, rdp, deltas)])
    else:
        gamma = tnb_gamma(shape, mean)
        constant = (1.0 + shape) * np.min((1.0 - 1.0 / orders) * rdp - math.log(gamma) / orders)
        out = rdp + math.log(tnb_mean(gamma, shape)) / (orders - 1.0) + constant
    return np.minimum.accumulate(out[::-1])[::-1]


def selection_rdp(event: PrivateSelectionEvent, orders: np.ndarray = ORDERS) -> np.ndarray:
    """RDP curve of a :class:`~dptensor.accounting.events.PrivateSelectionEvent`.

    One run trains a random candidate on the training part and scores it on the disjoint
    validation part: a changed unit lies in one part only, so the run's curve is the pointwise
    maximum of the candidates' curves and the score's. The search's curve follows from
    :func:`repeat_and_select_rdp`; a refit adds the largest candidate curve.
    """
    candidates = np.max([rdp_curve(e, orders) for e in event.candidates], axis=0)
    run = np.maximum(candidates, rdp_curve(event.score, orders))
    total = repeat_and_select_rdp(run, event.mean, event.shape, orders)
    return total + candidates if event.refit else total
