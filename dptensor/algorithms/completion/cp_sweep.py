"""The order-3 CP fit's per-row sums on the grid from the Tucker sweep's passes.

A CP row's design at the cell of rows ``j``, ``k`` of the other two modes is ``z = u_j * v_k``
(elementwise), so every sum its normal equations need is a diagonal of the sums the Tucker sweep
forms (:class:`~.tucker.TuckerSweep3`: the mask against ``F = [u, b u, u u^T]`` of both modes,
the values against both factors): ``sum M z_p z_q`` pairs feature ``(p, q)`` of ``u u^T`` with
the same of ``v v^T``, ``sum M z_p`` and its offsets pair ``u_p`` (or ``b u_p``) with ``v_p`` (or
``b v_p``), ``sum Y z_p`` pairs ``u_p`` with ``v_p``. One pass serves two updates, as there (three
passes every two sweeps), where :meth:`~.observations.DenseGrid.normal_equations` multiplies the
float64 mask and values by the Khatri-Rao rows of each update: six reads of the grid a sweep.
"""
from __future__ import annotations

import numpy as np

from .design import _grid_ssr, _row_bias, grid_design
from .model import Model
from .observations import _assemble, _pair_index
from .tucker import TuckerSweep3

__all__ = ["CPSweep3"]

#: :meth:`CPSweep3.ssr`'s residuals from the normal equations are taken from the grid instead
#: below this share of the sums they are the difference of (an RMSE 1e-4 of the values' RMS):
#: the sums' rounding, about 1e-15 of their size, is then about 1e-7 of the residuals at most.
LOST = 1e-8


class CPSweep3(TuckerSweep3):
    """:meth:`normal_equations` of an order-3 CP model's modes on the grid, from the passes and
    contractions of :class:`~.tucker.TuckerSweep3` (which it is, but for the core), the same
    sums as :meth:`DenseGrid.normal_equations <.observations.DenseGrid.normal_equations>` to
    rounding."""

    def __init__(self, grid, Yg, counts):
        super().__init__(grid, Yg, counts)
        self._grid, self._values = grid, Yg  # for :meth:`ssr`'s exact residuals

    def solve(self, model: Model, m: int, reg, bias: bool, dof: bool):
        """``None``: the rows are solved from :meth:`normal_equations` by the caller."""
        return None

    def normal_equations(self, model: Model, m: int, bias: bool):
        """Mode ``m``'s per-row Grams and right-hand sides (its own row bias a trailing unknown
        when ``bias``; else that bias taken off the values)."""
        Q, V = self._contractions(model, m)  # (rows, F, F), (rows, r, r): lower mode first
        r = model.rank
        p = np.arange(r)
        pairs = 2 * r + np.arange(len(_pair_index(r)[0]))
        z_sums = Q[:, p, p]
        # sum M z_p (intercept + b_j + b_k): the lower mode's bias with it, the higher's
        offset_z = model.intercept * z_sums + Q[:, r + p, p] + Q[:, p, r + p]
        rhs = V[:, p, p] - offset_z
        base_sums = self.row_sums[m] - self._others_offsets(model, m)
        if not bias:
            b = _row_bias(model, m)
            if b is not None:
                rhs = rhs - b[:, None] * z_sums
            equations = _assemble(Q[:, pairs, pairs], rhs, self.counts[m])
        else:
            equations = _assemble(Q[:, pairs, pairs], rhs, self.counts[m], (z_sums, base_sums))
        if m == 2:  # the last update's: the sweep's residuals (:meth:`ssr`)
            self._last_equations = (equations, bias)
        return equations

    def ssr(self, model: Model, reg) -> float:
        """The sum of squared residuals after mode 2's rows were solved (in place, their Grams
        given the ridge ``reg + 1e-12``) from its normal equations: for each row's solution
        ``x``, ``sum (base - z x)^2 = sum base^2 - 2 x . rhs + x^T G x``, exact for any ``x``
        (``base``: the values less the offsets its design leaves out, :meth:`_base_squares`),
        where a product over the grid read it once more a sweep.

        A difference of sums: where the residuals are below ``LOST`` of the sums' size (offsets
        of 1e6 with residuals of 1e-5) it is rounding, and the residuals are summed over the
        grid instead (:func:`~.design._grid_ssr`, one more read), as the grid's own equations
        do: the expansion's rounding set the empirical-Bayes ridge, the training RMSE and the
        stop."""
        (gram, rhs), bias = self._last_equations
        x = model.factors[2] if not bias else np.hstack([model.factors[2],
                                                         model.biases[2][:, None]])
        lam = reg + 1e-12
        fit = float(np.einsum("ip,ipq,iq->", x, gram, x)) - lam * float(np.sum(x * x))
        squares = self._base_squares(model, exclude=2 if bias else None)
        cross = 2.0 * float(np.sum(x * rhs))
        ssr = squares - cross + fit
        if ssr <= LOST * (self.yy + abs(squares) + abs(cross) + abs(fit)):
            return _grid_ssr(self._grid, self._values, model, grid_design(model, 0))
        return ssr

    def _base_squares(self, model: Model, exclude=None) -> float:
        """``sum over observed cells of (y - o)^2``, ``o`` the intercept and the modes' biases
        but mode ``exclude``'s: from ``sum y^2``, the values' and counts' row sums and the pair
        counts (``sum (o)^2`` over cells expands into pairs of modes)."""
        mu = float(model.intercept)
        modes = [(k, _row_bias(model, k)) for k in range(3) if k != exclude]
        modes = [(k, b) for k, b in modes if b is not None]
        n = float(np.sum(self.counts[0]))
        cross = mu * float(np.sum(self.row_sums[0]))
        squares = mu * mu * n
        for k, b in modes:
            cross += float(b @ self.row_sums[k])
            squares += float((b * b) @ self.counts[k]) + 2.0 * mu * float(b @ self.counts[k])
        for i, (k, b) in enumerate(modes):
            for k2, b2 in modes[i + 1:]:
                squares += 2.0 * float(b @ self.pair_counts[(k, k2)] @ b2)
        return self.yy - 2.0 * cross + squares
