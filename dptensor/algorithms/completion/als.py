"""Alternating least squares over the observed entries (the non-private fit)."""
from __future__ import annotations

import numpy as np

from .design import (
    _grid_core_step,
    _grid_offsets,
    _grid_ssr,
    _interaction_sorted,
    _offsets_sorted,
    _ridge_solve,
    _row_bias,
    _tucker_core_step,
    grid_design,
    grid_value_sums,
    mode_design,
)
from .model import Model
from .observations import Observations, sweep_fits
from .cp_sweep import CPSweep3
from .tucker import TuckerSweep3


def als(obs: Observations, y: np.ndarray, model: Model, *, reg, reg_core, n_iter, tol=1e-10,
        fit_biases=True, prior_var=None, warmup=5, dof=False, history=None, callback=None):
    """Alternating least squares over the observed entries only, in place on ``model``.

    Mode by mode, every row solves its own ridge regression of the residual on the leave-one-out
    design ``K_m`` (plus a constant column for the row's bias when ``fit_biases``). The entries are
    kept sorted by each mode (:class:`ModeLayout`), so the per-row normal equations of all rows are
    a few contiguous products and one ``reduceat``, solved as one stacked ``np.linalg.solve``:
    ``O(|Omega| p^2)`` flops per mode with ``p = rank + 1``, no Python loop over rows or entries.
    Tucker then solves the core's ridge regression on the Kronecker rows. Stops when the
    objective's relative decrease falls below ``tol``. Appends the training RMSE of each sweep to
    ``history`` when given; ``callback(sweep, rmse)`` is called after each sweep.

    With ``prior_var``, after ``warmup`` sweeps the ridge is the empirical-Bayes one, ``reg +
    s2 / prior_var``, where ``s2`` estimates the noise variance from the last sweep's residuals.
    With ``dof`` it is their sum of squares over ``n - df`` (:func:`noise_variance`, ``df`` the
    ridge fits' effective degrees of freedom), not over ``n``: where the rows have few entries
    each, the fit's own residuals shrink with its overfitting and would drag the ridge down
    with them.
    """
    d = obs.order
    grid = obs.grid(model, als=True)
    layouts = ys = Yg = sweep3 = None
    if grid is None:
        layouts = [obs.layout(m) for m in range(d)]
        ys = [y[L.perm] for L in layouts]
    else:
        Yg = grid.scatter(y)
        # order 3: the grid's passes (a CP model's sums are the diagonal of a Tucker model's),
        # where their per-row sums stay within the grid's memory (:func:`sweep_fits`)
        order3 = TuckerSweep3 if model.core is not None else CPSweep3
        fits = d == 3 and sweep_fits(obs.shape, model.rank)
        sweep3 = order3(grid, Yg, obs.counts) if fits else None
        value_sums = (grid_value_sums(grid, Yg, obs.counts[0])
                      if model.core is not None and sweep3 is None else None)
    prev, mse, s2 = np.inf, None, None
    reg0, reg_core0 = reg, reg_core
    for sweep in range(n_iter):
        if prior_var is not None and sweep >= warmup and s2 is not None:
            # Empirical Bayes: ridge = noise variance / prior variance of a parameter.
            reg, reg_core = reg0 + s2 / prior_var, reg_core0 + s2 / prior_var
        # The degrees of freedom only feed s2, which only the next sweep's empirical-Bayes ridge
        # reads: none in the sweeps before the warmup's last or in the last sweep.
        sweep_dof = dof and prior_var is not None and warmup - 1 <= sweep < n_iter - 1
        df = 1.0 + (model.core.size if model.core is not None else 0)  # the intercept, the core
        for m in range(d):
            if m in model.fixed:  # no factor to fit: only the row effects, by their own ridge
                if fit_biases:  # (a model with fixed modes always runs on the sparse layout)
                    df += _fixed_mode_biases(model, layouts[m], ys[m], m, reg)
                continue
            df += _mode_step(model, m, obs, (grid, sweep3, layouts, ys, Yg), reg, fit_biases,
                             sweep_dof)
        if model.core is not None:
            if grid is None:
                ssr = _tucker_core_step(model, layouts[0], ys[0], reg_core)
            elif sweep3 is not None:
                ssr = sweep3.core_step(model, reg_core)
            else:
                ssr = _grid_core_step(model, grid, Yg, reg_core, value_sums)
        elif sweep3 is not None:
            ssr = sweep3.ssr(model, reg)
        else:
            ssr = _cp_ssr(model, grid, Yg, layouts, ys, d)
        mse = ssr / len(y)
        s2 = noise_variance(ssr, len(y), df) if sweep_dof else mse
        loss = _objective(model, ssr, reg, reg_core)
        if history is not None:
            history.append(float(np.sqrt(mse)))
        if callback is not None:
            callback(sweep, float(np.sqrt(mse)))
        if abs(prev - loss) <= tol * max(prev, 1e-300) and sweep > warmup:
            break
        prev = loss
    return model


def _mode_step(model, m, obs, layout, reg, fit_biases, dof) -> float:
    """Mode ``m``'s rows solved in place on the layout in use (``layout``: the grid, the order-3
    sweep (Tucker's or CP's), the sorted layouts and values, the values on the grid); returns their
    effective degrees of freedom with ``dof`` (else 0)."""
    grid, sweep3, layouts, ys, Yg = layout
    if sweep3 is not None:
        solved = sweep3.solve(model, m, reg, fit_biases, dof)
        if solved is not None:  # compiled: the rows solved in place
            return solved
        gram, rhs = sweep3.normal_equations(model, m, fit_biases)
    elif grid is None:
        L = layouts[m]
        Kt = mode_design(model, L, m)
        base = ys[m] - _offsets_sorted(model, L, skip=m if fit_biases else None)
        gram, rhs = L.normal_equations(Kt, base, bias=fit_biases)
    else:
        gram, rhs = grid.normal_equations(m, grid_design(model, m), Yg, obs.counts[m],
                                          _grid_offsets(model, m),
                                          None if fit_biases else _row_bias(model, m),
                                          bias=fit_biases)
    return _solve_rows(model, m, gram, rhs, reg, fit_biases, dof)


def _objective(model, ssr, reg, reg_core) -> float:
    """The ridge objective: half the sum of squared residuals and of the penalties."""
    loss = 0.5 * ssr + 0.5 * reg * sum(np.sum(model.factors[m] ** 2) for m in model.free_modes())
    if model.core is not None:
        loss += 0.5 * reg_core * np.sum(model.core**2)
    return loss


def _fixed_mode_biases(model, L, y_m, m, reg) -> float:
    """A mode without factors: its row effects' ridge update on the residual, in place; returns
    their effective degrees of freedom."""
    base = y_m - _offsets_sorted(model, L) - _interaction_sorted(model, L, m)
    model.biases[m] = (model.biases[m] * L.counts
                       + L.segment_sum(base[None])[:, 0]) / (L.counts + reg + 1e-12)
    return float(np.sum(L.counts / (L.counts + reg + 1e-12)))


def _solve_rows(model, m, gram, rhs, reg, fit_biases, dof) -> float:
    """Mode ``m``'s rows from their normal equations (``gram`` gets the ridge), in place; returns
    their effective degrees of freedom with ``dof`` (else 0)."""
    p = gram.shape[1]
    gram[:, np.arange(p), np.arange(p)] += reg + 1e-12
    sol = _ridge_solve(gram, rhs[:, :, None])[:, :, 0]
    model.factors[m] = sol[:, :model.rank]
    if fit_biases:
        model.biases[m] = sol[:, model.rank]
    return ridge_dof(gram, reg + 1e-12) if dof else 0.0


#: :func:`noise_variance` divides by at least this share of the entries: a fit whose degrees of
#: freedom reach the number of entries says nothing about the noise, and its ridge must not blow up
#: (or divide by zero) in the sweep before the next ones bring the degrees of freedom down.
MIN_RESIDUAL_DOF = 0.1


def noise_variance(ssr, n, df) -> float:
    """The noise variance estimated by the residuals (sum of squares ``ssr`` over ``n`` entries) of
    a fit of ``df`` effective degrees of freedom: ``ssr / (n - df)`` (unbiased for a linear
    smoother of trace ``df``), the denominator at least ``MIN_RESIDUAL_DOF * n``."""
    return ssr / max(n - df, MIN_RESIDUAL_DOF * n)


def ridge_dof(gram, reg) -> float:
    """The effective degrees of freedom of stacked ridge fits, ``sum_i tr((G_i + reg)^-1 G_i) =
    sum_i (p - reg tr((G_i + reg)^-1))``, from their ridged Grams ``G_i + reg`` (a row without
    entries counts 0).

    The inverses by one stacked LU (a tenth of the cost of the pseudo-inverse's
    eigendecompositions, and as accurate: both err by about the Gram's condition number times
    the rounding); the pseudo-inverse for the rows where the ridge may be lost in the Gram's
    rounding (below ``1e-14`` of its trace, where the pseudo-inverse drops the directions the
    ridge alone held, as :func:`_ridge_solve`), or for all where the LU fails."""
    p = gram.shape[1]
    lost = reg <= 1e-14 * np.abs(np.trace(gram, axis1=1, axis2=2))
    try:
        with np.errstate(all="ignore"):
            inv_trace = np.trace(np.linalg.inv(gram), axis1=1, axis2=2)
    except np.linalg.LinAlgError:
        lost[:] = True
        inv_trace = np.empty(len(gram))
    if lost.any():
        inv_trace[lost] = np.trace(np.linalg.pinv(gram[lost], hermitian=True), axis1=1, axis2=2)
    return float(np.sum(p - reg * inv_trace))


def _cp_ssr(model, grid, Yg, layouts, ys, d) -> float:
    """A CP model's sum of squared residuals, on the last mode's layout or the dense grid."""
    if grid is None:
        layout = layouts[d - 1]
        resid = (ys[-1] - _offsets_sorted(model, layout)
                 - _interaction_sorted(model, layout, d - 1))
        return float(resid @ resid)
    return _grid_ssr(grid, Yg, model, grid_design(model, 0))
