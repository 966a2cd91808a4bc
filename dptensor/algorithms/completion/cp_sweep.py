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

from .design import _row_bias
from .model import Model
from .observations import _assemble, _pair_index
from .tucker import TuckerSweep3

__all__ = ["CPSweep3"]


class CPSweep3(TuckerSweep3):
    """:meth:`normal_equations` of an order-3 CP model's modes on the grid, from the passes and
    contractions of :class:`~.tucker.TuckerSweep3` (which it is, but for the core), the same
    sums as :meth:`DenseGrid.normal_equations <.observations.DenseGrid.normal_equations>` to
    rounding."""

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
        ``x`` (:meth:`~.tucker.TuckerSweep3._residuals`; ``base``: the values less the offsets
        its design leaves out, :meth:`~.tucker.TuckerSweep3._offset_squares`), where a product
        over the grid read it once more a sweep."""
        (gram, rhs), bias = self._last_equations
        x = model.factors[2] if not bias else np.hstack([model.factors[2],
                                                         model.biases[2][:, None]])
        lam = reg + 1e-12
        fit = float(np.einsum("ip,ipq,iq->", x, gram, x)) - lam * float(np.sum(x * x))
        squares = self._offset_squares(model, exclude=2 if bias else None)
        return self._residuals(model, squares, 2.0 * float(np.sum(x * rhs)), fit)
