"""Private selection from private candidates: the law of the number of runs, its price and its
calibration.

Pure functions of public quantities (events, targets, counts); the search estimators in
:mod:`dptensor.model_selection._search` use them before they touch any data. Derived in
``docs/derivations/private_selection.rst``.
"""
from __future__ import annotations

import math

import numpy as np
from scipy.optimize import brentq

from ..accounting import GaussianEvent, PrivateSelectionEvent, epsilon_of, gdp_mu
from ..accounting.composition import tnb_gamma

__all__ = ["DISTRIBUTIONS", "check_distribution", "draw_n_runs", "selection_event",
           "calibrate_search"]

#: Laws of the number of runs the search may use, by name: the shape of the truncated negative
#: binomial (0 logarithmic, 1 geometric) or ``inf`` for Poisson. ``distribution="auto"`` prices
#: them all and takes the one that leaves each candidate the most budget.
DISTRIBUTIONS = {"logarithmic": 0.0, "negative_binomial_0.5": 0.5, "geometric": 1.0,
                 "poisson": math.inf}


#: ``"auto"`` considers the Poisson law only when it draws no run at all (and so returns a
#: data-independent choice) with probability ``exp(-mean)`` at most this.
MAX_EMPTY_SEARCH = 0.01


def check_distribution(distribution, mean: float = math.inf) -> dict:
    """Validated ``distribution``: the ``{name: shape}`` laws to try for ``mean`` expected runs."""
    if isinstance(distribution, str):
        if distribution == "auto":
            laws = dict(DISTRIBUTIONS)
            if math.exp(-mean) > MAX_EMPTY_SEARCH:
                del laws["poisson"]
            return laws
        if distribution in DISTRIBUTIONS:
            return {distribution: DISTRIBUTIONS[distribution]}
    elif (isinstance(distribution, (int, float)) and not isinstance(distribution, bool)
          and distribution >= 0):
        return {f"negative_binomial_{float(distribution):g}": float(distribution)}
    raise ValueError(f"distribution must be 'auto', one of {sorted(DISTRIBUTIONS)} or a shape >= 0 "
                     f"(a truncated negative binomial), got {distribution!r}")


def draw_n_runs(shape: float, mean: float, rng: np.random.Generator) -> int:
    """One draw of the number of runs K: Poisson(mean) for ``shape=inf``, else the truncated
    negative binomial of ``shape`` with that mean (``P[K=k] ∝ binom(k+shape-1, k)(1-gamma)^k``, k >=
    1)."""
    if math.isinf(shape):
        return int(rng.poisson(mean))
    gamma = tnb_gamma(shape, mean)
    if gamma >= 1:
        return 1
    if shape == 0:
        return int(rng.logseries(1.0 - gamma))
    if shape == 1:
        return int(rng.geometric(gamma))
    # The negative binomial conditioned on K >= 1 (rejection of 0, probability gamma^shape).
    while True:
        k = int(rng.negative_binomial(shape, gamma))
        if k >= 1:
            return k


def selection_event(candidates, candidate_epsilon: float, delta: float, mean: float, shape: float,
                    refit: bool) -> PrivateSelectionEvent:
    """The search's event: ``candidates`` (their training events), a score at
    ``candidate_epsilon``'s Gaussian-DP parameter (``z = 1/mu``), ``mean`` runs of law ``shape``,
    and the refit or not."""
    score = GaussianEvent(1.0 / gdp_mu(candidate_epsilon, delta), 1)
    return PrivateSelectionEvent(tuple(dict.fromkeys(candidates)), score, float(mean), float(shape),
                                 bool(refit))


def calibrate_search(events_at, epsilon: float, delta: float, mean: float, shapes: dict,
                     refit: bool):
    """The largest per-candidate epsilon (and the law) whose whole search costs at most ``epsilon``.

    ``events_at(e)`` gives the candidates' training events when each targets ``(e, delta)``. The
    search's cost increases with ``e``; for each ``e`` the cheapest law in ``shapes`` is taken, and
    ``e`` is found by a bracketed root search, then nudged down until the cost is within the target.
    Returns ``(e, name, event)``.
    """
    def best(e):
        events = events_at(e)
        priced = [(epsilon_of(selection_event(events, e, delta, mean, s, refit), delta), name)
                  for name, s in shapes.items()]
        return min(priced)

    def gap(log_e):
        return best(math.exp(log_e))[0] - epsilon

    hi = math.log(epsilon)  # the search costs at least one candidate: gap(hi) >= 0
    lo = hi - math.log(10.0)
    while gap(lo) > 0:
        lo -= math.log(10.0)
        if lo < hi - 40:
            raise ValueError(f"no per-candidate budget meets epsilon={epsilon:g} for this search")
    if gap(hi) > 0:
        log_e = brentq(gap, lo, hi, xtol=1e-6, rtol=1e-9)
        while gap(log_e) > 0:  # the root's side: never above the target
            log_e -= 1e-7
    else:
        log_e = hi
    e = math.exp(log_e)
    cost, name = best(e)
    return e, name, selection_event(events_at(e), e, delta, mean, shapes[name], refit)
