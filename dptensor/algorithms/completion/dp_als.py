"""DP-ALS: sweeps whose per-row right-hand sides are released with Gaussian noise and solved
with empirical-Bayes (Wiener) shrinkage."""
from __future__ import annotations

import math

import numpy as np

from ...mechanisms import gaussian_release
from .design import _offsets_sorted, grid_design, mode_design
from .model import Model, offsets
from .observations import Observations
from .releases import entry_rounding, release_rows


def clip_designs(Kt, quantile, counts=None):
    """Scale every entry's design ``Kt[:, e]`` to l2 norm at most ``C``, the ``quantile`` of the
    norms.

    The designs depend only on Omega and released factors, so ``C`` is public; returns
    ``(clipped Kt, C)``. ``C`` bounds how far one value moves the right-hand side of its row.
    With ``counts`` the columns of ``Kt`` are the columns of an unfolding (:class:`DenseGrid`),
    each the design of ``counts[c]`` entries: ``C`` is the same quantile over the entries.
    """
    norms = np.sqrt(np.einsum("re,re->e", Kt, Kt))
    per_entry = norms if counts is None else np.repeat(norms, counts)
    bound = float(np.quantile(per_entry, quantile)) if quantile < 1 else float(per_entry.max())
    bound = max(bound, 1e-12)
    return Kt * np.minimum(1.0, bound / np.maximum(norms, 1e-300)), bound


def wiener_solve(gram, rhs, noise_var, counts, s2, floor=False):
    """Empirical-Bayes (Wiener) solution of every row's noisy normal equations.

    Row ``i`` observed ``b_i = G_i u_i + K_i^T eps + xi`` with ``G_i`` public, residual noise
    ``eps ~ (0, s2)`` per entry and release noise ``xi ~ N(0, noise_var I)``. With the prior
    ``u_i ~ (0, tau^2 I)``, in the eigenbasis ``G_i = V diag(g) V^T`` each coordinate
    ``c = v^T b_i`` has second moment ``tau^2 g^2 + s2 g + noise_var`` and the posterior mean of
    ``v^T u_i`` is ``tau^2 g c / (tau^2 g^2 + s2 g + noise_var)``. ``s2`` is given (the released
    residual scale: ``g`` varies too little across rows to tell ``g`` from ``g^2``); ``tau^2`` is
    fitted across all rows and directions by weighted least squares on ``c^2 - noise_var - s2 g``
    (released sums and public Grams only: post-processing). Rows without entries get 0.

    ``floor``: an intermediate solve only sets the next designs' directions, so ``tau^2`` is kept
    at least at the noise level of a typical direction rather than letting every row collapse to 0.
    Otherwise (the final solve, whose values are predicted with) ``tau^2`` is taken two standard
    errors low, so that a release swamped by noise shrinks to 0.
    """
    seen = counts > 0
    out = np.zeros_like(rhs)
    if not seen.any():
        return out
    g, V = np.linalg.eigh(gram[seen])
    g = np.maximum(g, 0.0)
    c = np.einsum("ipq,ip->iq", V, rhs[seen])
    tau2 = _fit_signal_variance(g.ravel(), c.ravel() ** 2, noise_var, s2,
                                n_se=0.0 if floor else 2.0)
    if floor:
        tau2 = max(tau2, noise_var / max(float(np.median(g)) ** 2, 1e-300))
    gain = tau2 * g / (tau2 * g**2 + s2 * g + noise_var + 1e-300)
    out[seen] = np.einsum("ipq,iq->ip", V, gain * c)
    return out


def _fit_signal_variance(g, c2, noise_var, s2, n_se=0.0):
    """``tau^2 >= 0`` from ``E c^2 = tau^2 g^2 + s2 g + noise_var`` by weighted least squares,
    the weights (inverse squared second moments) refitted twice from the previous fit, then
    lowered by ``n_se`` (sandwich) standard errors: with little data a pure-noise release can fit a
    positive ``tau^2`` by chance, and a final solve should rather fall back to 0 (offsets only)."""
    t = c2 - noise_var - s2 * g
    tau2 = 0.0
    # 1e-150 keeps the squared second moments finite in noise-free directions with g = 0
    w = 1.0 / np.maximum(g**2 + s2 * g + noise_var, 1e-150) ** 2
    for _ in range(3):
        tau2 = max(float(np.sum(w * g**2 * t) / max(np.sum(w * g**4), 1e-300)), 0.0)
        w = 1.0 / np.maximum(tau2 * g**2 + s2 * g + noise_var, 1e-150) ** 2
    if n_se:
        den = max(float(np.sum(w * g**4)), 1e-300)
        se = math.sqrt(float(np.sum((w * g**2 * (t - tau2 * g**2)) ** 2))) / den
        tau2 = max(tau2 - n_se * se, 0.0)
    return tau2


def _balance(model: Model, m: int):
    """Give every column of the factors other than ``m`` unit root-mean-square (public factors).

    The mode-``m`` solve then sees components on one scale, which its isotropic prior assumes;
    the column scales move into mode ``m``, which the solve replaces, so this changes nothing else.
    """
    for k, U in enumerate(model.factors):
        if k != m and k not in model.fixed:
            rms = np.sqrt(np.mean(U * U, axis=0))
            model.factors[k] = U / np.where(rms > 0, rms, 1.0)


def dp_als(obs: Observations, y: np.ndarray, model: Model, *, n_iter, noise_multiplier, rng, s2,
           design_quantile=0.9, clip=0.5, callback=None):
    """DP alternating least squares on CP factors (the offsets stay at their released values).

    Each half-sweep (one mode) releases every row's right-hand side ``b_i = sum_{e in row i}
    K~_e (y_e - offsets_e)`` with ``N(0, (z C)^2)`` on each coordinate, where ``K~_e`` is the
    entry's design clipped to norm ``C`` (:func:`clip_designs`). One value moves one row's ``b_i``
    by at most ``C`` (values span 1 in scaled units), so the half-sweep is one Gaussian release of
    multiplier ``z`` (parallel composition across rows). The Grams ``sum K~_e K~_e^T`` depend
    only on Omega and released factors: public. Each row is then solved by
    :func:`wiener_solve` (post-processing). ``callback(sweep)`` is called after each sweep with
    nothing data-dependent.
    """
    if model.core is not None:
        raise ValueError("dp_als fits CP models")
    free = model.free_modes()
    grid = obs.grid(model)
    if grid is None:
        layouts = {m: obs.layout(m) for m in free}
    else:  # the clipped residuals on the grid (the offsets stay fixed): the same per-entry values
        base_grid = grid.scatter(np.clip(y - offsets(model, obs.X), -clip, clip))
    for sweep in range(n_iter):
        for m in free:
            _balance(model, m)
            if grid is None:
                L = layouts[m]
                Kt, bound = clip_designs(mode_design(model, L, m), design_quantile)
                base = np.clip(y[L.perm] - _offsets_sorted(model, L), -clip, clip)
                gram, rhs = L.normal_equations(Kt, base)
            else:
                Kt, bound = clip_designs(grid_design(model, m).T, design_quantile,
                                         grid.column_counts(m))
                gram, rhs = grid.normal_equations(m, Kt.T, base_grid, obs.counts[m])
            sens = bound * min(1.0, 2.0 * clip)
            std = noise_multiplier * sens
            if std > 0:  # each entry adds its design (norm <= bound) times its value (<= clip)
                rounding = entry_rounding(len(y), bound * clip, obs.counts[m].max())
                rhs = release_rows(rhs, obs.counts[m] > 0, lambda v: gaussian_release(
                    v, sens, noise_multiplier, rng, rounding=rounding))
            last = sweep == n_iter - 1 and m == free[-1]
            model.factors[m] = wiener_solve(gram, rhs, std**2, obs.counts[m], s2, floor=not last)
        if callback is not None:
            callback(sweep)
    return model
