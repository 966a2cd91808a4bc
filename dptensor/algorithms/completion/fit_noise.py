"""What the privacy noise of a completion mode does to its released components and offsets: the
level a fit records beside the released values (after the fit) and the level it would record
(before, from public quantities), in the model's scaled units (the caller multiplies by the value
range's width).

A fit's *components* are its CP columns (a Tucker model is one component, its whole interaction);
each is judged by its root mean square over every position of the tensor (:func:`component_rms`,
a function of the released factors and core). Its *offsets* are judged per mode by the root mean
square of the released row effects. Each level is the root mean square that the mode's noise
alone puts there (``docs/derivations/completion.rst``, "Noise levels of the released
components and offsets"); a released value below twice its level is the noise's.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from .model import _CHUNK, Model, _khatri_rao_rows, interaction_design
from .offsets import offset_noise

__all__ = ["ReleaseNoise", "component_rms", "offsets_rms", "offset_levels", "input_levels",
           "output_levels", "gradient_levels", "implicit_levels", "dominated", "preview"]


@dataclass(frozen=True)
class ReleaseNoise:
    """A fit's noise levels (scaled units): one per component and one per mode's offsets."""

    components: np.ndarray
    offsets: np.ndarray


def component_rms(factors, core, shape) -> np.ndarray:
    """Each component's root mean square over all ``prod(shape)`` positions: for CP column ``r``,
    ``prod_m ||U_m[:, r]|| / sqrt(n_m)``; for Tucker one value, the whole interaction's
    (``sqrt(<G, G x_m U_m^T U_m>) / sqrt(N)``). Released values only."""
    if core is None:
        norms = [np.linalg.norm(U, axis=0) / math.sqrt(max(n, 1)) for U, n in zip(factors, shape)]
        return np.prod(norms, axis=0) if norms else np.zeros(0)
    return np.array([_tucker_rms(core, [U.T @ U for U in factors], shape)])


def _tucker_rms(core, grams, shape) -> float:
    """``sqrt(<G, G x_m A_m>) / sqrt(N)`` for symmetric PSD ``A_m`` (the factors' Grams, or
    a noise covariance on one mode)."""
    out = core
    for m, A in enumerate(grams):
        out = np.moveaxis(np.tensordot(A, out, axes=(1, m)), 0, m)
    return math.sqrt(max(float(np.vdot(core, out)), 0.0) / math.prod(shape))


def offsets_rms(biases, counts) -> np.ndarray:
    """Per mode, the root mean square of the released row effects over the observed entries
    (row ``i`` weighted by its public count ``n_i``: what the offsets add to a typical fitted
    value; 0 for a mode without any)."""
    return np.array([math.sqrt(float(np.dot(c, b**2)) / max(float(c.sum()), 1.0)) if len(b)
                     else 0.0 for b, c in zip(biases, counts)])


def _rows_rms(obs, row_var) -> np.ndarray:
    """Per mode, ``sqrt(sum_i n_i var_i / n_obs)``, weighted as :func:`offsets_rms` (a row
    without entries has weight 0: its offset is 0 whatever the data), ``row_var(m, counts)``
    the noise variance of a seen row's offset."""
    out = []
    for m, counts in enumerate(obs.counts):
        seen = counts > 0
        n = counts[seen].astype(float)
        out.append(math.sqrt(float(np.dot(n, row_var(m, n))) / max(float(n.sum()), 1.0)))
    return np.array(out)


def offset_levels(obs, offsets, n_global) -> np.ndarray:
    """The offsets' levels of a Gaussian or Laplace release ``offsets = (mechanism, budget)``
    (:func:`~dptensor.algorithms.completion.offsets.offset_noise`): row ``i``'s noisy sum over
    its ``n_i`` entries is divided by ``n_i`` (before shrinkage, which only lowers the noise)."""
    noise = offset_noise(obs, *offsets, n_global=n_global)
    return _rows_rms(obs, lambda m, n: noise.variance(m + 1) / n**2)


def input_levels(obs, model: Model, epsilon, fit_intercept=True) -> ReleaseNoise:
    """Input perturbation: every value carries ``Lap(1/epsilon)``, variance ``s^2 = 2/eps^2``.
    A row mean over ``n_i`` values has variance ``s^2 / n_i``; a component fitted by least
    squares to the noise takes its share of ``sum n_m`` free parameters of the ``n_obs`` values,
    root mean square ``s sqrt(dof / n_obs)`` (Tucker: ``dof = sum n_m r + r^order``)."""
    s2 = 2.0 / epsilon**2
    offsets = _rows_rms(obs, lambda m, n: s2 / n) if fit_intercept else np.zeros(obs.order)
    free = model.free_modes()
    if model.core is None:
        dof = sum(obs.shape[m] for m in free)
        return ReleaseNoise(np.full(model.rank, math.sqrt(s2 * dof / len(obs.X))), offsets)
    dof = sum(n * model.rank for n in obs.shape) + model.core.size
    return ReleaseNoise(np.array([math.sqrt(s2 * dof / len(obs.X))]), offsets)


def output_levels(model: Model, last, scale_b, shape, offsets) -> ReleaseNoise:
    """Output perturbation: ``Lap(b)`` on every coordinate of the last factor, ``b = scale_b``:
    its columns carry noise of norm ``nu = b sqrt(2 n_last)``. A CP component's level is its
    root mean square times ``nu / ||U_last[:, r]||``; Tucker's, the interaction with
    ``U_last^T U_last`` replaced by the noise's ``nu^2 I``."""
    nu2 = 2.0 * scale_b**2 * shape[last]
    if model.core is None:
        rms = component_rms(model.factors, None, shape)
        col = np.linalg.norm(model.factors[last], axis=0)
        return ReleaseNoise(rms * math.sqrt(nu2) / np.maximum(col, 1e-300), offsets)
    grams = [U.T @ U for U in model.factors]
    grams[last] = nu2 * np.eye(model.rank)
    return ReleaseNoise(np.array([_tucker_rms(model.core, grams, shape)]), offsets)


def gradient_levels(obs, model: Model, p, z, damping, offsets) -> ReleaseNoise:
    """DP gradient descent: every step adds ``N(0, (2 z clip)^2)`` to a row's gradient sum and
    moves the row by ``lr (H_i + (reg + damping) I)^{-1}`` times it; over ``n_iter`` steps a
    coordinate ``r`` of row ``i`` carries noise of variance ``n_iter (lr 2 z clip / (reg +
    damping + H_i[r, r]))^2``, ``H_i`` the public Gauss-Newton matrix at the released factors
    (its diagonal; the steps' contraction of earlier noise is left out, so the level is high
    rather than low). A CP component is as noisy as its weakest mode (the largest ratio of a
    column's noise norm to its norm); a Tucker model adds the core's noise (its Gauss-Newton
    diagonal) and every factor's, pushed through the other factors."""
    step = p["lr"] * 2.0 * z * p["clip"]
    free = model.free_modes()
    curvature, h_core = _curvatures(obs, model, free)
    col_var = {}
    for m in free:
        var = p["n_iter"] * (step / (p["reg"] + damping + curvature[m])) ** 2
        col_var[m] = np.sum(var * (obs.counts[m] > 0)[:, None], axis=0)  # unseen rows: no noise
    shape = obs.shape
    if model.core is None:
        rms = component_rms(model.factors, None, shape)
        ratio = np.max([np.sqrt(col_var[m]) / np.maximum(np.linalg.norm(model.factors[m], axis=0),
                                                         1e-300) for m in free], axis=0)
        return ReleaseNoise(rms * ratio, offsets)
    grams = [U.T @ U for U in model.factors]
    total = 0.0
    for m in free:  # each factor's noise through the others
        noisy = list(grams)
        noisy[m] = np.diag(col_var[m])
        total += _tucker_rms(model.core, noisy, shape) ** 2
    var_core = p["n_iter"] * (step / (p["reg_core"] + damping + h_core)) ** 2
    weight = _khatri_rao_rows([np.diag(G)[None] for G in grams])[0]  # prod_m ||U_m[:, k_m]||^2
    total += float(np.sum(var_core * weight)) / math.prod(shape)
    return ReleaseNoise(np.array([math.sqrt(total)]), offsets)


def _curvatures(obs, model: Model, free):
    """The diagonals of the public Gauss-Newton matrices at the released factors: per mode with a
    factor, ``H_i[r, r] = sum_{e in row i} K_m[e, r]^2`` (n_m, rank), and for Tucker the core's,
    ``sum_e prod_m R_m[e, k_m]^2`` (C order; ``None`` for CP). In blocks of entries, each of at
    most ``_CHUNK`` floats, so that it allocates no more than a step of the fit."""
    width = 2 * model.rank * obs.order + (model.core.size if model.core is not None else 0)
    chunk = max(1, _CHUNK // width)
    rows = {m: np.zeros((obs.shape[m], model.rank)) for m in free}
    core = 0.0
    for start in range(0, len(obs.X), chunk):
        X = obs.X[start:start + chunk]
        R, K = interaction_design(model, X)
        for m in free:
            for r in range(model.rank):
                rows[m][:, r] += np.bincount(X[:, m], K[m][:, r] ** 2, minlength=obs.shape[m])
        if model.core is not None:
            core = core + _khatri_rao_rows([v**2 for v in R]).sum(axis=0)
    return rows, (None if model.core is None else np.asarray(core))


#: Draws of the release noise alone that :func:`implicit_levels` passes through the fit's
#: filter (from a fixed seed: the level is a function of the release and of Omega).
NOISE_PROBES = 2


def implicit_levels(obs, model: Model, design, apply, noise_std, offsets) -> ReleaseNoise:
    """The implicit interaction: one release of ``B = sum_e t_e x_e`` with ``N(0, noise_std^2)``
    per coordinate, then the Wiener filter ``apply`` fitted to it (a linear map; ``None``: it
    gave 0). The level of each released column is the root mean square of the components that
    the filter makes of the noise alone (``NOISE_PROBES`` draws), ``design.factors`` of
    ``apply(xi)``. A filter that gave 0 has no such map: the level is then the unfiltered one,
    the release as noisy as values carrying ``s^2 = noise_std^2 P / sum_e |x_e|^2``
    (``P = (n_lead + n_partner) rank`` directions), ``s sqrt(dof / n_obs)`` for a column with
    ``dof`` free parameters."""
    if apply is None:
        energy = float(np.sum(np.sum(design.Q**2, axis=1)[obs.X[:, design.partner]]
                              + np.sum(design.P**2, axis=1)[obs.X[:, design.lead]]))
        s2 = noise_std**2 * design.shape[0] / max(energy, 1e-300)
        n_lead, n_partner = obs.shape[design.lead], obs.shape[design.partner]
        dof = np.concatenate([np.full(design.rank, n_partner), np.full(design.rank, n_lead)])
        return ReleaseNoise(np.sqrt(s2 * dof / len(obs.X)), offsets)
    probes = np.random.default_rng(0).standard_normal((NOISE_PROBES,) + design.shape)
    squares = 0.0
    for xi in probes:
        factors = list(model.factors)
        factors[design.lead], factors[design.partner] = design.factors(apply(noise_std * xi))
        squares = squares + component_rms(factors, None, obs.shape) ** 2
    return ReleaseNoise(np.sqrt(squares / NOISE_PROBES), offsets)


def dominated(values, noise) -> np.ndarray:
    """The indices whose released ``values`` are below twice their (positive) ``noise``."""
    values, noise = np.asarray(values, dtype=float), np.asarray(noise, dtype=float)
    return np.flatnonzero((noise > 0) & (np.abs(values) < 2.0 * noise))


def preview(params, noise, shape, n_obs) -> float:
    """The component level a fit of a mode other than ``"statistics"`` would record, before the
    data, for a component at the values' width (root mean square 1 in scaled units) with
    balanced columns on positions spread evenly (``docs/derivations/completion.rst``): a
    function of the plan and public quantities only (0 without privacy)."""
    if noise is None:
        return 0.0
    mode, rank, n_iter = params["perturbation"], params["rank"], params["n_iter"]
    free = [m for m in range(len(shape)) if m not in params["fixed"]]
    tucker = params["kind"] == "tucker"
    if mode == "input":
        dof = (sum(shape) * rank + rank ** len(shape)) if tucker else sum(shape[m] for m in free)
        return math.sqrt(2.0 / noise["laplace_eps"] ** 2 * dof / n_obs)
    total = math.prod(shape)
    # balanced columns of a component of rms 1: every column of norm a = N^(1/(2 n_f)),
    # every row coordinate a / sqrt(n_m)
    a2 = total ** (1.0 / len(free))
    if mode == "output":
        b = 2.0 * n_iter * params["clip"] * params["lr"] / noise["laplace_eps"]
        return math.sqrt(2.0 * shape[free[-1]] / a2) * b
    if mode == "gradient":
        # The damping shrinks the steps' signal and noise alike: a preview against a signal
        # bound leaves it out (the fit's level, beside its damped values, keeps it).
        z, clip = noise["z"], params["clip"]
        ratios = []
        for m in free:
            h = (n_obs / shape[m]) * math.prod(a2 / shape[k] for k in free if k != m)
            var = n_iter * (params["lr"] * 2.0 * z * clip / (params["reg"] + h)) ** 2
            ratios.append(math.sqrt(var * shape[m] / a2))
        return max(ratios)
    if mode == "implicit":
        n_par = rank * (shape[free[0]] + shape[free[1]])
        # the release's sensitivity at most sqrt(2) (its clip at 1/2) and every design's
        # |x_e|^2 at its bound 2
        s2 = noise["z"] ** 2 * n_par / n_obs
        return math.sqrt(s2 * max(shape[free[0]], shape[free[1]]) / n_obs)
    raise ValueError(f"no component level for perturbation={mode!r}")


#: What a fit whose released components are noise-dominated advises.
COMPONENT_ADVICE = ("They learned little beyond the offsets: use a smaller rank, "
                    "factor_modes=(0, 1) for ratings, more data or a larger epsilon.")
#: What a fit whose released offsets are noise-dominated advises.
OFFSET_ADVICE = ("Those row effects are mostly noise, or absent from the data (then "
                 "fit_intercept=False fits none): use a larger offset_share, more entries per "
                 "row or a larger epsilon.")


def noise_attributes(factors, core, biases, counts, noise, scale) -> dict:
    """The released components' and offsets' root mean squares and their noise levels, in the
    caller's units (``scale`` the value range's width; ``counts`` each mode's public row counts;
    ``noise`` a :class:`ReleaseNoise` in scaled units, ``None``: no noise). ``factors=None`` (a
    user-level fit, whose users' side is not released): nothing to judge, all empty."""
    if factors is None:
        return dict.fromkeys(("component_rms_", "component_rms_noise_", "offsets_rms_",
                              "offsets_rms_noise_"), np.zeros(0))
    shape = [len(c) for c in counts]
    values, offsets = component_rms(factors, core, shape), offsets_rms(biases, counts)
    if noise is None:
        return {"component_rms_": values, "component_rms_noise_": np.zeros(len(values)),
                "offsets_rms_": offsets, "offsets_rms_noise_": np.zeros(len(offsets))}
    return {"component_rms_": values, "component_rms_noise_": scale * noise.components,
            "offsets_rms_": offsets, "offsets_rms_noise_": scale * noise.offsets}
