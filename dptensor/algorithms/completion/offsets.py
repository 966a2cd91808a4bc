"""The private offsets (global mean and per-mode row effects), their empirical-Bayes shrinkage
and the released residual scale, and the plan of their noise."""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy.optimize import brentq

from ...accounting.composition import epsilon_of
from ...accounting.events import ComposedEvent, GaussianEvent, LaplaceEvent
from ...mechanisms import Rounding, gaussian_release, laplace_release
from .dp_als import _fit_signal_variance
from .model import Model, offsets
from .observations import Observations
from .plain_offsets import plain_row_offsets
from .releases import entry_rounding, release_rows


#: The norm, in l1 and so in l2, of one value's terms ``(y, min(y^2, 1/4))`` in
#: :func:`total_statistics` for values in ``[-1/2, 1/2]``: at most ``1/2 + 1/4``.
TOTAL_TERM_BOUND = 0.75


#: Sensitivity, in l1 and in l2 alike, of :func:`total_statistics` for values in ``[-1/2, 1/2]``
#: (where the clip of the squares is inactive): a value moving from ``y`` to ``y'`` by
#: ``d = |y - y'| <= 1`` moves the pair by ``d (1 + |y + y'|)`` in l1 and ``d sqrt(1 + (y + y')^2)``
#: in l2, and ``|y + y'| <= 1 - d``, so by at most ``d (2 - d) <= 1`` and
#: ``d sqrt(1 + (1 - d)^2) <= 1``.
TOTAL_SENSITIVITY = 1.0


def total_statistics(y: np.ndarray) -> np.ndarray:
    """``(sum y, sum min(y^2, 1/4))``: released together, the global mean and the values' spread."""
    return np.array([y.sum(), np.minimum(y * y, 0.25).sum()])


#: Share of the offsets' budget given to each of their sums over every entry (the total with its
#: spread, the statistics mode's residual scale) by :func:`offset_noise`. Their noise is divided by
#: all ``n`` entries, so a small share keeps it far below any row's: on MovieLens-100K at
#: epsilon = 1 moving the total from a fifth of the offsets' budget to 0.02 took the private
#: offsets' test RMSE from 1.034 to 1.025 (0.005 gave 1.0245: no more to win).
GLOBAL_SHARE = 0.02


@dataclass(frozen=True)
class OffsetNoise:
    """The noise of the offsets' releases (the total first, one per mode, then the other sums over
    every entry): ``"laplace"`` with one epsilon per release (pure DP, epsilons add up), or
    ``"gaussian"`` with one noise multiplier per release (``sum 1/z_k^2`` is the group's ``mu^2``).
    Each release touches one coordinate per entry, with the same sensitivity in l1 and l2."""

    mechanism: str
    levels: np.ndarray

    def release(self, k, values, sensitivity, rng, *, rounding: Rounding | None):
        """Release ``k``: ``values`` (sensitivity ``sensitivity``, floating-point ``rounding``: the
        same bound in l1 and l2, one coordinate per entry) plus its noise."""
        level = float(self.levels[k])
        if self.mechanism == "laplace":
            return laplace_release(values, sensitivity, level, rng, rounding=rounding)
        return gaussian_release(values, sensitivity, level, rng, rounding=rounding)

    def variance(self, k, sensitivity=1.0):
        """The noise variance of release ``k`` (``Lap(b)``: ``2 b^2``)."""
        level = float(self.levels[k])
        if self.mechanism == "laplace":
            return 2.0 * (sensitivity / level) ** 2
        return (level * sensitivity) ** 2


def offset_noise(obs: Observations, mechanism: str, budget: float,
                 n_global: int = 1) -> OffsetNoise:
    """The offsets' releases for a group's ``budget`` (Laplace: its epsilon; Gaussian: its noise
    multiplier as ``n_global + order`` releases, ``mu^2 = (n_global + order) / budget^2``).

    Each sum over every entry gets ``GLOBAL_SHARE`` of the budget (of epsilon, or of ``mu^2``). The
    modes share the rest by their public counts so that the noise on a typical row mean is the same
    fraction of its sampling error (``s / sqrt(c_m)``, ``c_m`` the median number of entries in a row
    of mode ``m``) in every mode: Laplace ``eps_m`` proportional to ``c_m^(-1/2)``, Gaussian
    ``z_m^2`` to ``c_m``. The sparsest mode (items of a ratings matrix) gets the least noise. Counts
    are functions of Omega: public.
    """
    typical = np.asarray([float(np.median(c[c > 0])) if np.any(c > 0) else 1.0 for c in obs.counts])
    rows_share = 1.0 - n_global * GLOBAL_SHARE
    if mechanism == "laplace":
        weights = typical ** -0.5
        glob, rows = GLOBAL_SHARE * budget, rows_share * budget * weights / weights.sum()
    else:
        mu2 = (n_global + obs.order) / budget**2
        glob = 1.0 / math.sqrt(GLOBAL_SHARE * mu2)
        rows = np.sqrt(typical * np.sum(1.0 / typical) / (rows_share * mu2))
    return OffsetNoise(mechanism, np.concatenate([[glob], rows, np.full(n_global - 1, glob)]))


def row_offsets(obs: Observations, y: np.ndarray, *, shrink=1.0, noise: OffsetNoise | None = None,
                rng=None, empirical_bayes=False, spread=None):
    """Global mean and per-mode row effects by one backfitting sweep, optionally released privately.

    With ``noise`` (:func:`offset_noise`; releases 0 to ``order``), ``intercept = (sum y + noise) /
    n``, released jointly with the clipped sum of squares (:func:`total_statistics`, sensitivity
    ``TOTAL_SENSITIVITY`` for values in ``[-1/2, 1/2]``, which the noisy path assumes) whose spread
    is the per-entry variance of the shrinkage; then for each mode in turn
    ``b_m[i] = (S_i + noise) / (n_i + kappa_i)`` where ``S_i`` sums, over row ``i``'s entries, ``y``
    minus the offsets released so far. Without noise ``kappa_i = shrink``; with noise it is the
    empirical-Bayes shrinkage of :func:`eb_shrinkage`, computed from the noisy sums and public
    counts only. Returns ``(intercept, biases)``.

    Privacy (used by the estimator): changing one entry's value (in an interval of width 1) moves
    the total by at most 1, and one row sum of each mode by at most 1 (the offsets subtracted were
    released before, so they are constants): the release of mode ``m`` has sensitivity 1 in l1 and
    l2, and the ``order + 1`` releases compose (Laplace: their epsilons add; Gaussian: their
    ``1/z^2`` add). Rows with no entry sum to 0 whatever the data: no noise there
    (:func:`release_rows`).
    """
    noisy = noise is not None
    if not noisy and not empirical_bayes:
        plain = plain_row_offsets(obs, y, shrink)  # compiled: the same numbers bit for bit
        if plain is not None:
            return plain
    n = max(len(y), 1)
    s2 = None
    if noisy:
        # Private values lie in [-1/2, 1/2]: the total and the clipped sum of squares are one joint
        # release, whose spread stands for the per-entry variance of the empirical-Bayes shrinkage
        # below (an upper bound: it still holds the row effects).
        total, squares = noise.release(0, total_statistics(y), TOTAL_SENSITIVITY, rng,
                                       rounding=entry_rounding(n, TOTAL_TERM_BOUND, n))
        # Clamping (post-processing) can only bring the mean closer: it lies in [-1/2, 1/2].
        intercept = float(np.clip(total / n, -0.5, 0.5))
        s2 = float(np.clip(squares / n - intercept**2, 1e-4, 0.25))
    else:
        intercept = float(y.sum()) / n
    resid = y - intercept
    biases = []
    for m in range(obs.order):
        sums = obs.scatter(m, resid)
        counts = obs.counts[m]
        noise_var = 0.0
        if noisy:
            # |resid| <= 1/2 + 1/2 + m: the value, the clamped mean and m clamped row effects
            rounding = entry_rounding(n, 1.0 + m, counts.max())
            sums = release_rows(sums, counts > 0,
                                lambda v: noise.release(m + 1, v, 1.0, rng, rounding=rounding))
            noise_var = noise.variance(m + 1)
        if noisy or empirical_bayes:
            # Values that carry their own noise: their spread is measured directly
            # (post-processing).
            s2_m = float(np.var(resid)) if (empirical_bayes and not noisy) else s2
            kappa, s2_fit = eb_shrinkage(sums, counts, noise_var, s2=s2_m, return_s2=True)
            if spread is not None:
                spread.append(s2_fit)
        else:
            kappa = shrink
        b = np.where(counts > 0, sums / np.maximum(counts + kappa, 1e-12), 0.0)
        if noisy:
            # A row effect beyond the range's width would by itself move predictions out of the
            # range: clamping it (post-processing) only removes noise.
            b = np.clip(b, -1.0, 1.0)
        biases.append(b)
        resid = resid - b[obs.X[:, m]]
    return float(intercept), biases


def eb_shrinkage(sums, counts, noise_var, s2=None, return_s2=False, n_se=2.0):
    """Per-row shrinkage ``kappa_i = (s^2 + noise_var / n_i) / tau^2`` from noisy row sums.

    Model: row effect ``beta_i ~ (0, tau^2)``, per-entry residual variance ``s^2``, released sum
    ``S_i = n_i beta_i + data noise + N(0, noise_var)``. Then the raw mean ``S_i / n_i`` has
    second moment ``tau^2 + s^2 / n_i + noise_var / n_i^2`` and ``S_i / (n_i + kappa_i)`` is the
    posterior mean of ``beta_i``. A known ``s2`` is used as given and ``tau^2`` is fitted as for
    the factor rows (:func:`_fit_signal_variance`, with ``G = n_i``), ``n_se`` standard errors low
    so that rows swamped by noise fall back to 0; otherwise ``tau^2`` and ``s^2`` are fitted
    together from the row means. Only released sums and public counts enter: post-processing.
    """
    seen = counts > 0
    n = counts[seen]
    if s2 is not None:
        # The released sum is the one-coordinate case of a noisy normal equation: G = n_i, so the
        # signal variance is fitted exactly as for the factor rows (:func:`_fit_signal_variance`:
        # weights refitted to the variance of each sum, sandwich standard error).
        tau2 = max(_fit_signal_variance(n, sums[seen] ** 2, noise_var, s2, n_se=n_se), 1e-8)
    else:  # non-private values: fit s^2 beside tau^2 from the row means
        mean = sums[seen] / n
        design = np.stack([np.ones_like(n), 1.0 / n], axis=1)
        w = n  # the spread of a mean's square falls with the row's count
        A, t = design * np.sqrt(w)[:, None], (mean**2 - noise_var / n**2) * np.sqrt(w)
        coef, *_ = np.linalg.lstsq(A, t, rcond=None)
        dof = max(len(n) - A.shape[1], 1)
        se = np.sqrt(np.sum((t - A @ coef) ** 2) / dof * np.linalg.pinv(A.T @ A)[0, 0])
        tau2 = max(coef[0] - n_se * se, 1e-8)
        s2 = max(coef[1], 0.0)
    kappa = (s2 + noise_var / np.maximum(counts, 1)) / tau2
    return (kappa, s2) if return_s2 else kappa


def residual_scale(obs: Observations, y: np.ndarray, model: Model, *,
                   noise: OffsetNoise | None, rng, index=-1, bound=0.5):
    """A released root-mean-square of the residuals after the offsets, to set the clipping level.

    Releases ``sum_e min(t_e^2, bound^2)`` with ``t_e = y_e - offsets_e`` (offsets released, so
    constants) as release ``index`` of ``noise`` (``None``: no noise): each term lies in
    ``[0, bound^2]``, so one value moves the sum by at most ``bound^2``, in l1 and l2. Returns
    ``sqrt(max(noisy sum, 0) / n)``.
    """
    t = np.minimum((y - offsets(model, obs.X)) ** 2, bound**2)
    total = float(t.sum())
    if noise is not None:
        rounding = entry_rounding(len(y), bound**2, len(y))
        total = float(noise.release(index, total, bound**2, rng, rounding=rounding))
    return math.sqrt(max(total, 0.0) / len(y))


def offsets_plan(n_o, mu, mu_f, epsilon, delta):
    """``(offsets, events)`` for the ``n_o`` releases of the offsets when the factors' Gaussian
    releases take ``mu_f`` of a fit's ``(epsilon, delta)`` (``mu`` in Gaussian DP): ``offsets`` is
    ``(mechanism, budget)`` for :func:`offset_noise`, or ``None`` when there are none.

    Gaussian: the rest of ``mu^2``, ``n_o / z_o^2 = mu^2 - mu_f^2``: the whole fit is then exactly
    ``mu``-GDP. Laplace: the largest ``eps_o`` whose pure release composes with ``mu_f`` within
    ``(epsilon, delta)`` by the accountant's own pricing. Each offsets' release touches one
    coordinate per entry, where Laplace noise is smaller than Gaussian noise for the same budget,
    but its budget composes with a Gaussian one less tightly than Gaussian shares do: the mechanism
    is the one with the smaller noise variance per release when the ``n_o`` releases share the
    budget equally (``2 (n_o / eps_o)^2`` against ``z_o^2``), decided from public parameters only.
    """
    if n_o == 0:
        return None, []
    z_o = math.sqrt(n_o / (mu**2 - mu_f**2))
    factors = GaussianEvent(1.0 / mu_f, 1)  # prices as the factors' releases: same mu

    def excess(eps_o):
        return epsilon_of(ComposedEvent([LaplaceEvent(eps_o), factors]), delta) - epsilon

    # Not dptensor.accounting.calibrate: that root-find gives the smallest Gaussian multiplier,
    # searched in log z to a relative tolerance, and this is the largest pure budget, searched in
    # eps_o to 1e-14 epsilon. Asking calibrate for z = 1 / eps_o would land a few ulps elsewhere
    # and so move every seeded fit's released offsets; the two share only the pricing
    # (epsilon_of), which is what makes the plan exact.
    hi = epsilon
    while excess(hi) <= 0:  # at a large delta Renyi DP prices a pure budget below itself
        hi *= 2.0
    try:
        eps_o = brentq(excess, 1e-12 * epsilon, hi, xtol=1e-14 * epsilon)
    except (RuntimeError, ValueError):
        # no pure budget found (epsilon near 1e-200: the pricing's differences underflow): the
        # Gaussian share, exact in any case, is the plan; the choice is only the smaller noise
        return ("gaussian", z_o), [GaussianEvent(z_o, n_o)]
    while excess(eps_o) > 0:  # brentq may land a hair above the root
        eps_o *= 1.0 - 1e-12
    if 2.0 * (n_o / eps_o) ** 2 < z_o**2:
        return ("laplace", eps_o), [LaplaceEvent(eps_o)]
    return ("gaussian", z_o), [GaussianEvent(z_o, n_o)]
