r"""The restarts' pair products ``K[l, (b, c)] = U[b, l] U[c, l]`` over the pairs ``b <= c``.

:class:`~dptensor.algorithms.operators.SymmetricTensor` multiplies its packed half-tensor by
this block at every power step. NumPy builds it with two gathers (``np.take`` of the pairs'
first and second indices) and a product: three passes over ``L d (d + 1) / 2`` numbers. With
numba installed (the ``fast`` extra) one compiled loop writes each product once, in the same
order (``triu_indices``: row by row), 5-10x faster at d = 100-200. Every entry is the one
rounded product ``U[b, l] * U[c, l]`` either way, so the two paths agree bit for bit.
"""
from __future__ import annotations

import numpy as np

from .compiled import compiled

__all__ = ["pair_products", "pair_products_numpy", "compiled_kernel"]

def _pairs_into(Ut, K):  # pragma: no cover (compiled)
    """``K[l]``: the products ``Ut[l, b] * Ut[l, c]`` over ``b <= c``, row by row."""
    L, d = Ut.shape
    for row in range(L):
        u, k, start = Ut[row], K[row], 0
        for b in range(d):
            ub, m = u[b], d - b
            for c in range(m):  # a plain stride-1 loop over the row: vectorised
                k[start + c] = ub * u[b + c]
            start += m


def _warm_up(kernel):
    for dtype in (np.float64, np.float32):
        kernel(np.ones((1, 2), dtype=dtype), np.empty((1, 3), dtype=dtype))


def compiled_kernel():
    """The compiled :func:`_pairs_into`, or ``None`` without numba (or where it fails to compile:
    the NumPy path computes the same bits). Once per process, on first use; plain floating point
    (no ``fastmath``)."""
    return compiled("pair_products", _pairs_into, _warm_up)


def pair_products_numpy(Ut, rows, cols):
    """The fallback and the reference: two gathers along the pairs and their product."""
    return np.take(Ut, rows, axis=1) * np.take(Ut, cols, axis=1)


def pair_products(Ut, rows, cols, out=None, use_kernel=True):
    """``K`` of shape ``(L, len(rows))`` from ``Ut = U.T`` (C-contiguous, ``(L, d)``), for the
    pairs ``rows, cols = np.triu_indices(d)``; written into ``out`` when given (same dtype).

    The compiled loop assumes exactly those pairs in that order (the caller's contract); any
    other dtype than float32/float64, or no numba, takes :func:`pair_products_numpy`.
    """
    kernel = compiled_kernel() if use_kernel and Ut.dtype in (np.float32, np.float64) else None
    if kernel is None:
        K = pair_products_numpy(Ut, rows, cols)
        if out is None:
            return K
        out[...] = K
        return out
    K = np.empty((Ut.shape[0], len(rows)), dtype=Ut.dtype) if out is None else out
    kernel(np.ascontiguousarray(Ut), K)
    return K
