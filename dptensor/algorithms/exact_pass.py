r"""A private row-level PCA fit's exact statistics in one pass over the rows, never holding them.

The statistics are those of :mod:`~dptensor.algorithms.exact` over the held grid rows: the sum
``s = sum_i m_i`` of the grid rows ``m_i = grid_rows(x_i, B)`` (for the mean), then, with the
released mean ``c``, the Gram matrix ``sum_i g_i g_i^T`` and the total ``sum_i ||g_i||^2`` of the
centred grid rows ``g_i`` (``m_i`` put on the grid again, centred on ``c``). Here they are the same
integers, computed without a copy of ``X`` (``docs/derivations/exact_sums.rst``, "One pass"):

* one pass makes the grid rows a block at a time and sums ``m_i``, ``m_i m_i^T`` and the count in
  one exact product of the block with a column of ones appended;
* with ``a = rint(c 2**b / B)`` (public) the centred map of a row is ``g = m - a`` unless the row
  lands near or beyond the sphere of radius ``2**b`` (it is then scaled back), so
  ``sum g g^T = sum m m^T - s a^T - a s^T + n a a^T`` plus, for those rows, ``g g^T - (m - a)(m -
  a)^T``; a second, read-only pass finds them by a rigorous upper bound on ``||m - a||^2`` from
  ``||x||`` and ``x^T a`` and maps them with the held-rows map itself;
* the total is the trace of that Gram matrix (a sum of the same squares).

Where the mean makes the shortcut unsafe (a coordinate of ``c 2**b / B`` within ``2**-20`` of a
half-integer or beyond ``2**21``: public, from the release) the centred statistics take the plain
second pass, a block at a time (:func:`~dptensor.algorithms.exact.grid_centred_stats`).
"""
from __future__ import annotations

import math

import numpy as np

from .exact import (
    BITS,
    CHUNK,
    Exact,
    _IntSum,
    cache_block_rows,
    grid_centred_stats,
    grid_rows,
)

__all__ = ["GridSums", "grid_sums", "centred_stats", "one_pass_bytes"]

_ONE = float(2 ** BITS)
_LIMIT = 4.0 ** BITS
#: Rows per exact float64 product of the correction terms (entries up to 3 * 2**BITS).
_SMALL = 256


def one_pass_bytes(d: int) -> int:
    """Bytes the two passes allocate at most, from ``d`` alone: a few blocks of rows in float64
    (the buffer, a block's scaled rows, its products) and a few d x d arrays of exact integers
    (the sums, the centring's outer products, the corrections), at 64 bytes an integer."""
    rows = cache_block_rows(d + 1)
    return 8 * (4 * rows * (d + 1) + 4 * _SMALL * d) + 8 * 64 * (d + 1) ** 2


class GridSums:
    """The first pass's exact integers: ``s = sum m_i`` (d,), ``G0 = sum m_i m_i^T`` (d x d) and
    the number of rows, all Python integers (object arrays)."""

    def __init__(self, s, G0, n):
        self.s, self.G0, self.n = s, G0, int(n)

    def mean_stat(self, unit: float) -> Exact:
        """``row_sum(M, unit)`` of the grid rows."""
        return Exact(self.s, unit / _ONE)


def _fast_grid(block, data_norm, out):
    """``grid_rows(block, B)`` written into ``out``: ``rint(x 2**b / B)`` for the rows whose
    integers have ``||m||^2 < 4**b`` (the map leaves those as they are: no entry reached
    ``2**b``, so none was divided, and none is scaled back), the map itself for the others."""
    with np.errstate(all="ignore"):
        np.multiply(block, _ONE * 1.0 / data_norm, out=out, dtype=np.float64)  # as grid_rows
        np.rint(out, out=out)
        # In float64: a sum of integer squares below 4**b is exact, and a non-finite one
        # (an overflowed row) fails the test as it should (an int64 cast would not).
        rest = np.flatnonzero(~(np.einsum("ij,ij->i", out, out) < _LIMIT))
    if rest.size:
        out[rest] = grid_rows(block[rest], data_norm)
    return out


def grid_sums(X, data_norm: float) -> GridSums:
    """The first pass: the grid rows a block at a time, each block's ``[M 1]^T [M 1]`` one exact
    product (entries below ``CHUNK 4**b = 2**52``), added in integers."""
    X = np.asarray(X)
    n, d = X.shape
    rows = cache_block_rows(d + 1)
    buffer = np.ones((min(rows, n), d + 1))  # the last column stays 1: the sums and the count
    acc = _IntSum()
    for start in range(0, n, rows):
        block = X[start:start + rows]
        A = buffer[:len(block)]
        _fast_grid(block, float(data_norm), A[:, :d])
        acc.add(A.T @ A)
    total = acc.total((d + 1, d + 1))
    return GridSums(total[:d, d].copy(), total[:d, :d].copy(), n)


def _shift(mean, data_norm):
    """``(mu, a)``: the centre on the grid as the map computes it and its nearest integers, or
    None when the shortcut ``rint(m - mu) = m - a`` is not certain for every ``|m_j| <= 2**b``."""
    if (_ONE * (data_norm / _ONE)) / data_norm != 1.0:  # the map's own scale of a grid row
        return None
    with np.errstate(all="ignore"):
        mu = np.asarray(mean, dtype=np.float64) * (_ONE / data_norm)  # as grid_rows computes it
        a = np.rint(mu)
        # far from a half-integer (the subtraction's rounding, below 2**-31 here, cannot tie it)
        safe = np.all(np.abs(mu) <= 2.0 * _ONE) and np.all(np.abs(mu - a) < 0.5 - 2.0 ** -20)
    return (mu, a) if safe else None


def _candidates(block, a, na1, na2, data_norm):
    """Rows of ``block`` that may land near or beyond the sphere once centred, or that the first
    pass scaled: those without a certain ``||m - a||^2 < 4**b`` (an upper bound, rigorous with
    the float rounding of ``||x||^2`` and ``x^T a`` over-counted), and those whose ``||m||`` may
    reach ``2**b``."""
    d = block.shape[1]
    unit = 2.0 ** -24 if block.dtype == np.float32 else 2.0 ** -53
    gamma = 2.0 * (d + 4) * unit  # over ``gamma_d``: any order of the dot products' sums
    c = _ONE * 1.0 / data_norm
    with np.errstate(all="ignore"):
        sq = np.einsum("ij,ij->i", block, block, dtype=np.float64)
        t = (block @ a.astype(block.dtype)).astype(np.float64) * c  # ~ x^T a 2**b / B
        # ||m|| <= ||x|| 2**b / B + sqrt(d) / 2 (rounding to integers), with a margin
        r = c * np.sqrt(sq) * (1.0 + 2.0 ** -30) + 0.5 * math.sqrt(d) + 1.0
        # m^T a >= t - ||a||_1 / 2 - 2 gamma r ||a||, so ||m - a||^2 <= bound
        bound = r * r - 2.0 * t + na2 + na1 + 4.0 * gamma * r * math.sqrt(na2)
        # the rounding of the bound itself: a few roundings of terms up to its largest one
        bound += 2.0 ** -40 * (r * r + 2.0 * np.abs(t) + na2 + na1) + 16.0
        keep = (bound < _LIMIT) & (r < _ONE)
    return np.flatnonzero(~keep)


def _correction(rows, data_norm, mean, a, plus, minus):
    """Add ``sum g g^T`` and ``sum (m - a)(m - a)^T`` of the candidate ``rows`` (the held-rows
    map itself) to ``plus`` and ``minus``, in products of at most ``_SMALL`` rows (exact)."""
    for start in range(0, len(rows), _SMALL):
        part = rows[start:start + _SMALL]
        M = grid_rows(part, data_norm, out=np.empty(part.shape))  # float64: exact products
        D = M - a  # integers below 3 * 2**b: each product sum below 2**53
        G = grid_rows(M, data_norm, mean, scale=data_norm / _ONE)
        plus.add(G.T @ G)
        minus.add(D.T @ D)


def centred_stats(X, sums: GridSums, data_norm: float, mean, unit: float, total: bool = True):
    """``(total, gram)``: :func:`~dptensor.algorithms.exact.grid_centred_stats` of ``X``, from
    the first pass's integers and a read-only pass for the rows near the sphere (``mean``: the
    released one, or None for uncentred rows)."""
    d = sums.s.shape[0]
    shift = None if mean is None else _shift(mean, data_norm)
    if mean is not None and shift is None:  # the shortcut is not certain: the plain pass
        return grid_centred_stats(X, data_norm, mean, unit, total)
    G = sums.G0
    if mean is not None:
        G = G + _centring(X, sums, data_norm, mean, shift[1])
    stat = Exact(G, unit / _ONE ** 2)
    squares = Exact(np.array(sum(G[j, j] for j in range(d)), dtype=object), unit / _ONE ** 2)
    return (squares if total else None), stat


def _centring(X, sums, data_norm, mean, a):
    """``- s a^T - a s^T + n a a^T`` plus the candidate rows' corrections, in integers."""
    X = np.asarray(X)
    ai = a.astype(np.int64).astype(object)
    na1 = float(np.abs(a).sum())  # exact: integers below 2**53
    na2 = float(a @ a) * (1.0 + 2.0 ** -50)  # (rounded above beyond d = 2**11)
    plus, minus = _IntSum(), _IntSum()
    rows = max(cache_block_rows(X.shape[1]), CHUNK // 4)  # read-only: larger blocks cost no copy
    for start in range(0, X.shape[0], rows):
        block = X[start:start + rows]
        idx = _candidates(block, a, na1, na2, float(data_norm))
        if idx.size:
            _correction(block[idx], float(data_norm), mean, a, plus, minus)
    shape = (X.shape[1],) * 2
    outer = np.multiply.outer
    return (sums.n * outer(ai, ai) - outer(sums.s, ai) - outer(ai, sums.s)
            + plus.total(shape) - minus.total(shape))
