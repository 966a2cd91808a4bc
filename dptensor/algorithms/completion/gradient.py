"""Full-batch (DP) gradient descent over every factor and the core, with clipped per-entry
gradients and a public Gauss-Newton preconditioner."""
from __future__ import annotations

import math

import numpy as np

from ...mechanisms import Rounding, joint_gaussian_release
from .design import (
    _core_normal_equations,
    _grid_core_normal_equations,
    _grid_offsets,
    _row_bias,
    grid_design,
    mode_design,
)
from .model import Model, interaction_design, offsets, predict
from .observations import DenseGrid, Observations
from .releases import entry_rounding


def _grid_gradient_statistics(model: Model, grid: DenseGrid, Yg, counts, clip_norm):
    """:func:`clipped_gradient` and the per-row sums of :func:`gradient_descent` on the dense
    layout.

    Returns ``(grams, sums, core_gram, ssr)``: every mode's Gauss-Newton matrices and summed
    clipped gradients (negated), the core's (Tucker), and the residuals' sum of squares. Each
    entry's squared design norm is a sum over modes of a function of the other modes' indices
    (plus, for Tucker, a product over modes), so it is formed on the grid by broadcasting.
    """
    d = len(model.factors)
    designs = [grid_design(model, m) for m in range(d)]
    U0 = model.factors[0]
    b = _row_bias(model, 0)
    A = np.hstack([U0, np.ones((len(U0), 1)), (b if b is not None else np.zeros(len(U0)))[:, None]])
    B = np.hstack([designs[0], _grid_offsets(model, 0)[:, None], np.ones((len(designs[0]), 1))])
    resid = Yg - (A @ B.T).reshape(grid.shape)
    resid *= grid.mask
    ssr = float(np.vdot(resid, resid))
    weights = resid
    if clip_norm is not None and np.isfinite(clip_norm):
        sq = np.zeros(grid.shape)
        for m, Z in enumerate(designs):
            others = grid.shape[:m] + grid.shape[m + 1:]
            sq += np.expand_dims(np.einsum("cr,cr->c", Z, Z).reshape(others), m)
        if model.core is not None:
            rows = np.ones(grid.shape)
            for m, U in enumerate(model.factors):
                along_m = [-1 if k == m else 1 for k in range(d)]
                rows = rows * np.einsum("ir,ir->i", U, U).reshape(along_m)
            sq += rows
        norm = np.abs(resid) * np.sqrt(sq)
        weights = resid * np.minimum(1.0, clip_norm / np.maximum(norm, 1e-300))
    grams, sums = [], []
    for m, Z in enumerate(designs):
        gram, rhs = grid.normal_equations(m, Z, weights, counts[m])
        grams.append(gram)
        sums.append(rhs)
    core_gram = None
    if model.core is not None:
        core_gram, core_sum = _grid_core_normal_equations(model, grid, weights)
        sums.append(core_sum.reshape(model.core.shape))
    return grams, sums, core_gram, ssr


def clipped_gradient(model: Model, X: np.ndarray, resid: np.ndarray, clip_norm, design=None):
    """Per-entry gradients of ``1/2 resid^2``, clipped jointly over all parameters, and their sums.

    Entry ``e``'s gradient is ``-resid[e] v_e`` with ``v_e`` the stacked designs ``K_m[e]`` of every
    mode (and, for Tucker, the Kronecker product of its rows for the core): a fixed direction times
    the residual. Its joint l2 norm is ``|resid[e]| ||v_e||``; clipping to ``clip_norm`` scales the
    residual by ``min(1, clip_norm / (|resid[e]| ||v_e||))``. Returns ``(weights, K, R)`` where
    ``weights[e]`` is the clipped residual: the gradient sums are ``-S_m (weights * K_m)`` for the
    factors and ``-sum_e weights[e] kr_e`` for the core.
    """
    R, K = interaction_design(model, X) if design is None else design
    # Fixed modes (all-ones factors) have no parameters, hence no gradient.
    sq = sum(np.einsum("er,er->e", K[m], K[m]) for m in model.free_modes())
    if model.core is not None:
        sq = sq + np.prod([np.einsum("er,er->e", r, r) for r in R], axis=0)
    weights = resid
    if clip_norm is not None and np.isfinite(clip_norm):
        norm = np.abs(resid) * np.sqrt(sq)
        weights = resid * np.minimum(1.0, clip_norm / np.maximum(norm, 1e-300))
    return weights, K, R


def _step(model: Model, free, grams, sums, core_gram, *, learning_rate, reg, reg_core, damping):
    """One preconditioned step of every factor with one (and of the core) from the summed
    (released) gradients and their public Gauss-Newton Grams."""
    nf = len(free)
    new = list(model.factors)
    for j, m in enumerate(free):
        U, gram = model.factors[m], grams[j]
        r = U.shape[1]
        grad = -sums[j] + reg * U
        gram[:, np.arange(r), np.arange(r)] += reg + damping + 1e-12
        new[m] = U - learning_rate * np.linalg.solve(gram, grad[:, :, None])[:, :, 0]
    if model.core is not None:
        grad = -sums[nf] + reg_core * model.core
        gram = core_gram
        gram[np.diag_indices_from(gram)] += reg_core + damping + 1e-12
        core_step = np.linalg.solve(gram, grad.ravel()).reshape(grad.shape)
        model.core = model.core - learning_rate * core_step
    model.factors = new


def gradient_descent(obs: Observations, y: np.ndarray, model: Model, *, learning_rate, n_iter, reg,
                     reg_core, clip_norm=None, noise_multiplier=0.0, damping=0.0, rng=None,
                     history=None, callback=None):
    """(DP) full-batch gradient descent over every factor and the core, in place on ``model``.

    Each step: the clipped per-entry gradients are summed per row (one sparse product per mode)
    and over all entries for the core; ``N(0, (noise_multiplier * 2 clip_norm)^2)`` is added to
    every coordinate of every sum (rows without entries excepted: their sum is 0 whatever the data),
    since one entry's clipped gradient (norm ``<= clip_norm``) moves all these sums together by at
    most ``2 clip_norm`` in l2; then each row moves by
    ``-learning_rate * (H_i + damping I)^{-1} (noisy sum + reg u_i)`` where
    ``H_i = sum_{e in row i} K_m[e] K_m[e]^T + reg I`` is a Gauss-Newton preconditioner. ``H_i``
    depends only on Omega and on parameters already released, so it is public: using it is
    post-processing, and ``damping`` (public too) shrinks noisy rows with few entries. All modes
    move at once from the same noisy gradient, so one step is one Gaussian release
    (:func:`~dptensor.mechanisms.joint_gaussian_release` of all the sums together).
    The biases (offsets) stay fixed.
    """
    X = obs.X
    noisy = noise_multiplier > 0
    if noisy and clip_norm is None:
        raise ValueError("noise_multiplier > 0 needs clip_norm: it sets the sensitivity")
    grid = obs.grid(model)
    if grid is not None:
        Yg = grid.scatter(y)
    free = model.free_modes()  # a mode without a factor has no gradient (never on the grid)
    rounding = gradient_rounding(obs, model, clip_norm) if noisy else None
    for step in range(n_iter):
        if grid is None:
            base = y - offsets(model, X)
            design = interaction_design(model, X)
            resid = base - np.einsum("er,er->e", design[0][0], design[1][0])
            ssr = float(resid @ resid)
            w, K, R = clipped_gradient(model, X, resid, clip_norm, design=design)
            # The per-row gradient sums and Gauss-Newton matrices in one pass over the entries
            # sorted by mode m (as in ALS): rhs = sum_e K_m[e] w_e = -gradient; then the core's.
            grams, sums, core_gram = [], [], None
            for m in free:
                L = obs.layout(m)
                gram, rhs = L.normal_equations(mode_design(model, L, m), w[L.perm])
                grams.append(gram)
                sums.append(rhs)
            if model.core is not None:
                L = obs.layout(0)
                core_gram, core_sum = _core_normal_equations(model, L, w[L.perm])
                sums.append(core_sum.reshape(model.core.shape))
        else:
            grams, sums, core_gram, ssr = _grid_gradient_statistics(model, grid, Yg, obs.counts,
                                                                    clip_norm)
        rmse = math.sqrt(ssr / len(y))
        if history is not None:
            history.append(rmse)
        nf = len(free)
        # One release of every sum of the step (the rows that hold an entry, and the core).
        if noisy:
            seen = [obs.counts[m] > 0 for m in free]
            released = joint_gaussian_release([sums[j][seen[j]] for j in range(nf)] + sums[nf:],
                                              2.0 * clip_norm, noise_multiplier, rng,
                                              rounding=rounding)
            for j in range(nf):
                sums[j][seen[j]] = released[j]
            sums[nf:] = released[nf:]
        _step(model, free, grams, sums, core_gram, learning_rate=learning_rate, reg=reg,
              reg_core=reg_core, damping=damping)
        if callback is not None:
            # The training loss is passed on only when it is recorded (non-private fits).
            callback(step, rmse if history is not None else None)
    if history is not None:
        history.append(float(np.sqrt(np.mean((y - predict(model, X))**2))))
    return model


def gradient_rounding(obs: Observations, model: Model, clip_norm) -> Rounding:
    """The rounding of a DP gradient step's joint release: each entry's clipped gradient has norm
    at most ``clip_norm`` over every sum together; a row's sum has at most its count of summands,
    the Tucker core's every entry's, and on the dense layout the core's partial sums over mode 0
    are multiplied by the other modes' rows, one product per mode."""
    longest = max(int(obs.counts[m].max()) for m in model.free_modes())
    if model.core is None:
        return entry_rounding(len(obs.X), clip_norm, longest)
    return entry_rounding(len(obs.X), clip_norm, max(longest, len(obs.X)), later=obs.order - 1)
