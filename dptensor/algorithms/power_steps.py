r"""A component's non-private power steps on a dense symmetric tensor, in compiled calls only.

A step ``u <- (T - D)(I, u, u) / ||(T - D)(I, u, u)||`` of every restart is the compiled pass of
:mod:`~dptensor.algorithms.symmetric_contraction` (about 0.1 ms at d = 100 for 10 restarts) and
then, in NumPy, the deflation's two small products, the normalisation and the pass's zero-padded
layout, made anew each step: about 25 us more, a fifth of the step. Here the restarts stay in the
pass's layout for all R steps, and what follows each pass is one compiled loop
(:func:`_finish_kernel`) over the pass's output: the same operations as
:class:`~dptensor.algorithms.operators.DeflatedTensor`'s ``apply`` and
:func:`~dptensor.algorithms.power.normalize_columns`, the deflation summed in float64 in another
order (equal to rounding). A private fit releases every step through its mechanism and never takes
this path.
"""
from __future__ import annotations

import math

import numpy as np

from .compiled import compiled
from .norms import square_range
from .symmetric_contraction import BLOCK, single_pass

__all__ = ["deflated_power_steps"]


def _finish_kernel(Y, U, V, lam, W, lo, hi):  # pragma: no cover (compiled)
    """``U <-`` the columns of ``Y - sum_j lam_j (v_j . u)^2 v_j`` (``u``: U's column before the
    step, ``v_j``: V's rows) at unit norm, a zero column staying zero; ``Y <- 0`` for the next
    pass. ``W`` (k x L, float64) is scratch for ``lam_j (v_j . u)^2``. A column whose largest
    magnitude is outside ``(lo, hi)`` (:func:`~.norms.square_range`) has its norm from the
    column scaled by that magnitude, as :func:`~.norms.column_norms` does."""
    k, d = V.shape
    L = U.shape[1]
    for j in range(k):
        for m in range(L):
            W[j, m] = 0.0
        for i in range(d):
            v = V[j, i]
            for m in range(L):
                W[j, m] += v * U[i, m]
        for m in range(L):
            W[j, m] = lam[j] * W[j, m] * W[j, m]
    norms = np.zeros(L, dtype=Y.dtype)
    big = np.zeros(L)
    for i in range(d):
        for j in range(k):
            v = V[j, i]
            for m in range(L):
                Y[i, m] -= v * W[j, m]
        for m in range(L):
            norms[m] += Y[i, m] * Y[i, m]
            big[m] = max(big[m], abs(Y[i, m]))
    for m in range(L):
        if 0.0 < big[m] < np.inf and not lo <= big[m] <= hi:
            s = 0.0
            for i in range(d):
                s += (Y[i, m] / big[m]) ** 2
            norms[m] = big[m] * math.sqrt(s)
        else:
            norms[m] = math.sqrt(norms[m])
        if not norms[m] > 0:
            norms[m] = 1.0
    for i in range(d):
        for m in range(L):
            U[i, m] = Y[i, m] / norms[m]
    Y[:] = 0


def _warm_up(kernel):
    for dtype in (np.float64, np.float32):
        Y, U = np.ones((4, 2), dtype=dtype), np.ones((4, 2), dtype=dtype)
        kernel(Y, U, np.ones((1, 3)), np.ones(1), np.empty((1, 2)), 1e-100, 1e100)


def deflated_power_steps(P, U, eigenvalues, components, n_steps: int):
    """``n_steps`` power steps of ``T - sum_j lambda_j v_j^(x)3`` on U's columns (d x L), ``P =
    pack_distinct(T)``, each a compiled pass and one compiled finish; ``None`` where the pass
    does not take U in one pass of its own width (or is not compiled): the caller's steps then
    compute the same to rounding."""
    d, L = U.shape
    kernel = single_pass(P, U)
    finish = compiled("power_step_finish", _finish_kernel, _warm_up)
    if kernel is None or finish is None:
        return None
    Ut = np.zeros((d + BLOCK - 1, L), dtype=P.dtype)  # the pass's layout: three zero rows past d
    Ut[:d] = U
    Y = np.zeros_like(Ut)
    V = np.ascontiguousarray(components, dtype=np.float64).reshape(-1, d)
    lam = np.ascontiguousarray(eigenvalues, dtype=np.float64).reshape(-1)
    W = np.empty((len(lam), L))
    lo, hi = square_range(P.dtype, d)
    for _ in range(int(n_steps)):
        kernel(P, Ut, Y)
        finish(Y[:d], Ut[:d], V, lam, W, lo, hi)
    return Ut[:d].copy()
