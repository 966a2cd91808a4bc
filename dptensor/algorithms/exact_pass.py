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
  a)^T``; a second, read-only pass finds them among the rows without ``||m|| + ||a|| < 2**b``
  (from each row's ``||m||^2``, kept by the first pass) by a rigorous upper bound on ``||m -
  a||^2`` from ``||x||`` and ``x^T a``, and maps them with the held-rows map itself;
* the total is the trace of that Gram matrix (a sum of the same squares).

Where the mean makes the shortcut unsafe (a coordinate of ``c 2**b / B`` within ``2**-20`` of a
half-integer or beyond ``2**21``: public, from the release) the centred statistics take the plain
second pass, a block at a time (:func:`~dptensor.algorithms.exact.grid_centred_stats`).
"""
from __future__ import annotations

import math

import numpy as np

from .grid_kernel import grid_map
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
#: Rows per step of the second pass's first filter (a few float64 numbers per row).
_FILTER = 1 << 16


def one_pass_bytes(d: int, n: int = 0) -> int:
    """Bytes the two passes allocate at most, from the shape: a few blocks of rows in float64
    (the buffer, a block's scaled rows, its products), each row's norm in float32 (``X / 2d``)
    and a few d x d arrays of exact integers (the sums, the centring's outer products, the
    corrections), at 64 bytes an integer."""
    rows = cache_block_rows(d + 1)
    return 8 * (4 * rows * (d + 1) + 4 * _SMALL * d + 4 * _FILTER) + 4 * int(n) \
        + 8 * 64 * (d + 1) ** 2


class GridSums:
    """The first pass's exact integers: ``s = sum m_i`` (d,), ``G0 = sum m_i m_i^T`` (d x d) and
    the number of rows, all Python integers (object arrays); ``norms``: each row's ``||m_i||^2``
    in float32 (rounded to nearest: within a relative ``2**-24``), or None."""

    def __init__(self, s, G0, n, norms=None):
        self.s, self.G0, self.n, self.norms = s, G0, int(n), norms

    def mean_stat(self, unit: float) -> Exact:
        """``row_sum(M, unit)`` of the grid rows."""
        return Exact(self.s, unit / _ONE)


def _fast_grid(block, data_norm, out, norms, use_kernel=True) -> bool:
    """``grid_rows(block, B)`` written into ``out``'s first columns and each row's exact
    ``||m||^2`` into ``norms``: ``rint(x 2**b / B)`` for the rows whose integers have ``||m||^2 <
    4**b`` (the map leaves those as they are: no entry reached ``2**b``, so none was divided,
    and none is scaled back), the map itself for the others (:mod:`.grid_kernel`). Returns
    False, mapping nothing more, where an entry is NaN or infinite: its row is one of the
    others (a NaN or an infinity makes ``||m||^2`` fail the test), so only they are read."""
    d = block.shape[1]
    if grid_map(block, _ONE * 1.0 / data_norm, out, norms, _LIMIT, use_kernel):  # as grid_rows
        rest = np.flatnonzero(~(norms < _LIMIT))
        if not np.all(np.isfinite(block[rest])):
            return False
        M = grid_rows(block[rest], data_norm)
        out[rest, :d] = M
        norms[rest] = np.einsum("ij,ij->i", M, M, dtype=np.float64)  # integers: exact
    return True


def grid_sums(X, data_norm: float, use_kernel: bool = True):
    """The first pass: the grid rows a block at a time, each block's ``[M 1]^T [M 1]`` one exact
    product (entries below ``CHUNK 4**b = 2**52``), added in integers; and every row's
    ``||m||^2`` (float32, for the second pass's first filter). ``use_kernel=False``: NumPy's map
    (the same integers). ``None`` where ``X`` holds a NaN or an infinity (found by the map
    itself: the caller refuses ``X`` before its spend, with no pass of its own for them)."""
    X = np.asarray(X)
    n, d = X.shape
    rows = cache_block_rows(d + 1)
    buffer = np.ones((min(rows, n), d + 1))  # the last column stays 1: the sums and the count
    norms, squares = np.empty(n, dtype=np.float32), np.empty(min(rows, n))
    acc = _IntSum()
    for start in range(0, n, rows):
        block = X[start:start + rows]
        A = buffer[:len(block)]
        if not _fast_grid(block, float(data_norm), A, squares[:len(block)], use_kernel):
            return None
        norms[start:start + len(block)] = squares[:len(block)]
        acc.add(A.T @ A)
    total = acc.total((d + 1, d + 1))
    return GridSums(total[:d, d].copy(), total[:d, :d].copy(), n, norms)


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
    the float rounding of ``||u||^2`` and ``u^T a`` over-counted), and those whose ``||m||`` may
    reach ``2**b``. Read in float64 blocks of ``u = fl(x 2**b / B)``, the map's own products
    (never ``||x||^2`` in X's scale: at a data norm below ~1e-154 its squares underflow)."""
    rows = cache_block_rows(block.shape[1])
    parts = [_candidates_of(block[start:start + rows], a, na1, na2, data_norm) + start
             for start in range(0, block.shape[0], rows)]
    return np.concatenate(parts) if parts else np.empty(0, dtype=np.int64)


def _candidates_of(block, a, na1, na2, data_norm):
    """:func:`_candidates` of one block of rows."""
    d = block.shape[1]
    unit = 2.0 ** -24 if block.dtype == np.float32 else 2.0 ** -53
    gamma = 2.0 * (d + 4) * unit  # over ``gamma_d``: any order of the dot products' sums
    with np.errstate(all="ignore"):
        # u = fl(x c) as grid_rows computes it (an overflow is inf: the row is a candidate)
        U = np.multiply(block, _ONE * 1.0 / data_norm, dtype=np.float64)
        sq = np.einsum("ij,ij->i", U, U)
        t = U @ a  # ~ u^T a
        # ||m|| <= ||u|| + sqrt(d) / 2 (rounding to integers), with a margin
        r = np.sqrt(sq) * (1.0 + 2.0 ** -30) + 0.5 * math.sqrt(d) + 1.0
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


def _near_rows(X, norms, na2):
    """The blocks of rows :func:`_candidates` reads: every row of ``X`` by blocks, or, with the
    first pass's ``norms``, only the rows without a certain ``||m - a|| <= ||m|| + ||a|| <
    2**b`` (every other row's centred map is ``m - a``: see :func:`_candidates`), gathered."""
    if norms is None:
        rows = max(cache_block_rows(X.shape[1]), CHUNK // 4)  # read-only: large blocks, no copy
        for start in range(0, X.shape[0], rows):
            yield X[start:start + rows]
        return
    # Upper bounds, each rounding over-counted: norms in float32 are within 2**-24 of ||m||^2,
    # na2 is above ||a||^2, and the square roots, sums and products round by 2**-53 each.
    ra = math.sqrt(na2) * (1.0 + 2.0 ** -40)
    for start in range(0, X.shape[0], _FILTER):
        with np.errstate(all="ignore"):
            r = np.sqrt(norms[start:start + _FILTER].astype(np.float64) * (1.0 + 2.0 ** -20))
            r = r * (1.0 + 2.0 ** -40) + ra
            near = np.flatnonzero(~(r * r * (1.0 + 2.0 ** -40) < _LIMIT))
        step = cache_block_rows(X.shape[1])  # gathered a block at a time: no copy of X's size
        for part in range(0, near.size, step):
            yield X[start + near[part:part + step]]


def _centring(X, sums, data_norm, mean, a):
    """``- s a^T - a s^T + n a a^T`` plus the candidate rows' corrections, in integers."""
    X = np.asarray(X)
    ai = a.astype(np.int64).astype(object)
    na1 = float(np.abs(a).sum())  # exact: integers below 2**53
    na2 = float(a @ a) * (1.0 + 2.0 ** -50)  # (rounded above beyond d = 2**11)
    plus, minus = _IntSum(), _IntSum()
    for block in _near_rows(X, sums.norms, na2):
        idx = _candidates(block, a, na1, na2, float(data_norm))
        if idx.size:
            _correction(block[idx], float(data_norm), mean, a, plus, minus)
    shape = (X.shape[1],) * 2
    outer = np.multiply.outer
    return (sums.n * outer(ai, ai) - outer(sums.s, ai) - outer(ai, sums.s)
            + plus.total(shape) - minus.total(shape))
