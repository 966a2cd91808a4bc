r"""Exact sums over rows: the statistics a private fit releases, computed without rounding error.

A float64 sum of ``n`` terms is off by up to ``n u`` times the terms' sizes (``u = 2**-53``), in
an order BLAS, Dask or a permutation of the rows chooses: between neighbouring data sets the
computed sums can then differ by more than the sensitivity. Here every statistic is an integer
sum, hence exact and independent of the order:

* :func:`grid_rows` is the public per-row map: a row, centred on a public vector and divided by
  the bound ``B``, becomes an integer vector ``m`` with ``||m||^2 <= 4**BITS`` *exactly* (checked
  in integers), so ``q = m 2**-BITS`` has ``||q|| <= 1`` and ``B q`` lies in the ball of radius
  ``B`` that every row-level sensitivity assumes;
* products of two grid values are integers below ``2**(2 BITS) = 2**40``, so any float64 sum of
  at most :data:`CHUNK` of them (BLAS, FMA, blocking included: every partial sum is an integer
  below ``2**53``) is exact; chunk sums are added in int64 and, every 1023 chunks, in Python
  integers, so the total is exact at any ``n``;
* :class:`Exact` holds such an integer sum with its (public) unit, and :meth:`Exact.on_grid`
  rounds the exact value to the noise grid of its release in integer arithmetic, so that
  :func:`~dptensor.mechanisms.gaussian_release` sees the very integer its proof speaks of.

The released statistic is therefore ``sum_i f(x_i)`` exactly, for a per-row map ``f`` bounded as
the sensitivity says. Derivation: ``docs/derivations/exact_sums.rst``.
"""
from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np

from .dask import is_dask_array
from .sparse import SparseRows
from ..mechanisms import gaussian_release, grid_step

__all__ = ["BITS", "CHUNK", "Exact", "grid_rows", "grid_vectors", "row_sum", "gram", "gram_product",
           "moment_product", "moment_sensitivities", "ExactThirdMoment",
           "sum_of_squares", "power_sensitivity", "exact_gaussian_release", "rows_stat", "map_rows",
           "is_lazy", "ExactGram", "cache_block_rows", "grid_centred_stats",
           "clipped_gram_product", "clip_radius_grid", "ExactClippedGram"]

#: Bits of a grid coordinate: a row's coordinates are integer multiples of ``2**-BITS`` of ``B``.
BITS = 20
#: Rows per float64 product: ``CHUNK * 4**BITS = 2**52``, so every partial sum is exact.
CHUNK = 2 ** (52 - 2 * BITS)
_ONE = float(2 ** BITS)
_FOLD = 1023  # int64 chunk sums (each below 2**53) added before moving them to Python integers


class Exact(NamedTuple):
    """An exact statistic ``ints * unit - offset``: integers (dtype object), a public float ``unit``
    and a public float array ``offset`` (a deflation, say), all exact rationals."""

    ints: np.ndarray
    unit: float
    offset: object = 0.0

    def value(self) -> np.ndarray:
        """The nearest float64 values (for use without noise)."""
        top, bottom = self._rational()
        return np.asarray(top, dtype=object).astype(np.float64) / bottom

    def minus(self, offset) -> "Exact":
        """The statistic less a public array (exactly: the offset's doubles are rationals too)."""
        return Exact(self.ints, self.unit, np.asarray(offset, dtype=np.float64) + self.offset)

    def _rational(self):
        """Integers ``top`` and a power of two ``bottom`` with ``value = top / bottom`` exactly."""
        num, den = _ratio(self.unit)
        o_num, o_den = np.frompyfunc(_ratio, 1, 2)(np.asarray(self.offset, dtype=np.float64))
        o_den = np.asarray(o_den, dtype=object)
        bottom = max(den, int(np.max(o_den)))  # powers of two: the largest is a common multiple
        return self.ints * (num * (bottom // den)) - o_num * (bottom // o_den), bottom

    def for_release(self, sensitivity, noise_multiplier) -> np.ndarray:
        """The value on the grid :func:`~dptensor.mechanisms.gaussian_release` rounds it to.

        The same grid step (from the same ``sensitivity * noise_multiplier``), so the release's
        own ``rint(value / gamma)`` returns the exact integer :meth:`on_grid` computed.
        """
        scale = np.asarray(sensitivity, dtype=np.float64) * float(noise_multiplier)
        return self.on_grid(grid_step(scale))

    def on_grid(self, gamma) -> np.ndarray:
        """``gamma rint(value / gamma)`` computed exactly, for power-of-two grid steps ``gamma``.

        The rounding is done in integers (half up), so its error is at most ``gamma / 2`` per
        coordinate whatever the size of the sum; the result is exact when below ``2**53 gamma``.
        """
        value_top, value_bottom = self._rational()
        gamma = np.asarray(gamma, dtype=np.float64)
        g_num, g_den = np.frompyfunc(_ratio, 1, 2)(gamma)  # powers of two
        top, bottom = value_top * g_den, value_bottom * g_num
        steps = (2 * top + bottom) // (2 * bottom)
        return np.asarray(steps, dtype=object).astype(np.float64) * gamma


def _ratio(x: float):
    return float(x).as_integer_ratio()


#: Bytes one exact integer takes in an object array of Python ints (the pointer and the int).
_OBJECT_BYTES = 64


def exact_memory(n_rows: int, d: int, columns: int, dask: bool = False) -> int:
    """Bytes the exact statistics of ``n_rows`` grid rows of width ``d`` add to a fit, for a
    statistic of ``(d + 1) x columns`` integers: the grid rows (none in memory for Dask), one
    chunk's float64 products and int64 sums, and three object arrays of its exact total."""
    rows = 0 if dask else 8 * int(n_rows) * int(d)
    chunk = 8 * (2 * CHUNK * columns + 3 * (d + 1) * columns)
    return rows + chunk + 3 * _OBJECT_BYTES * (d + 1) * columns


class _IntSum:
    """An exact running sum of integer-valued float64 arrays, each below ``2**53`` in magnitude."""

    def __init__(self):
        self.big, self.small, self.count = 0, None, 0

    def add(self, part):
        part = np.asarray(part, dtype=np.float64).astype(np.int64)
        self.small = part if self.small is None else self.small + part
        self.count += 1
        if self.count == _FOLD:  # 1023 * 2**53 < 2**63: fold before int64 could overflow
            self._fold()

    def _fold(self):
        if self.small is not None:
            self.big = self.big + self.small.astype(object)
        self.small, self.count = None, 0

    def total(self, shape) -> np.ndarray:
        self._fold()
        return self.big + np.zeros(shape, dtype=np.int64).astype(object)


def grid_rows(X, data_norm: float, mean=None, scale: float = 1.0, out=None) -> np.ndarray:
    r"""The public per-row map ``x -> m``: integers with ``||m||^2 <= 4**BITS`` exactly.

    ``2**BITS u = x (2**BITS scale / B) - mean (2**BITS / B)`` (elementwise, in float64); a row
    whose largest ``|u_j|`` exceeds 1 is divided by a power of two at least as large (exact);
    ``m0 = rint(2**BITS u)``; a row with ``||m0||^2 > 4**BITS`` (an exact integer sum, so the
    test is order-free), or that was divided, becomes ``trunc(m0 t)`` with ``t = 2**BITS /
    sqrt(||m0||^2)``. A row with a non-finite ``u`` (a NaN or infinity, or an overflow beyond
    ~1e302 B) becomes zero. Every step reads only the row itself, so the map is the same for
    every row, position and order; a clipped row lands within 2 grid steps per coordinate of
    the float clip.

    Returns an integer-valued array of X's float dtype (float32 holds them exactly: 21 bits),
    written into ``out`` if given (which may be X itself).
    """
    X = np.asarray(X)
    if out is None:
        dtype = X.dtype if X.dtype in (np.float32, np.float64) else np.float64
        out = np.empty(X.shape, dtype=dtype)
    rows = 16 * CHUNK
    buffer = out if out.dtype == np.float64 else np.empty((min(rows, X.shape[0]), X.shape[1]))
    for start in range(0, X.shape[0], rows):  # one float64 block of rows at a time
        block = slice(start, start + rows)
        U = buffer[block] if buffer is out else buffer[:len(X[block])]
        _grid_block(X[block], float(data_norm), mean, float(scale), U)
        if U is not out:
            out[block] = U
    return out


def _grid_block(X, data_norm, mean, scale, U):
    with np.errstate(all="ignore"):
        np.multiply(X, _ONE * scale / data_norm, out=U, dtype=np.float64)  # 2**b u
        if mean is not None:
            U -= np.asarray(mean, dtype=np.float64) * (_ONE / data_norm)
        # Rows whose float norm is clearly below 2**b have every |2**b u_j| < 2**b; only the
        # others need the exact peak (a cheap filter: both paths give a row the same integers).
        rest = np.flatnonzero(~(np.einsum("ij,ij->i", U, U) <= _ONE ** 2 * (1 - 2.0 ** -20)))
        halved = np.zeros(len(U), dtype=bool)
        if rest.size:
            R = U[rest]
            peak = np.maximum(R.max(axis=1, initial=-np.inf), -R.min(axis=1, initial=np.inf))
            R[~np.isfinite(peak)] = 0.0
            big = np.isfinite(peak) & (peak > _ONE)
            R[big] /= np.ldexp(1.0, np.frexp(peak[big] / _ONE)[1])[:, None]  # 2**e >= peak: exact
            U[rest] = R
            halved[rest[big]] = True  # their norm was above the bound: scale them back onto it
        _shrink(np.rint(U, out=U), halved)


def _shrink(M, rescale):
    """Rows of ``M`` (integers, ``|m_j| <= 2**BITS``) with ``||m||^2 > 4**BITS``, and the rows
    ``rescale`` (divided by a power of two, from a norm above the bound), scaled onto the sphere
    of radius ``2**BITS`` (to within truncation, never past it), in place."""
    limit = 4 ** BITS
    norms = _int_norms(M)
    over = (norms > limit) | rescale
    if over.any():
        t = np.where(over, _ONE / np.sqrt(np.maximum(norms, 1).astype(np.float64)), 1.0)
        M *= t[:, None]
        np.trunc(M, out=M)  # ||m|| <= 2**BITS (1 + 4u): its square, an integer, is <= 4**BITS
        M[_int_norms(M) > limit] = 0.0  # that bound, checked exactly (never fires)
    return M


def _int_norms(M):
    """Exact ``||m_i||^2`` (int64): a float64 sum of integer squares below ``2**53`` is exact in any
    order (``d <= 2**13``); beyond, an int64 sum (exact for ``d < 2**23``)."""
    if M.shape[1] <= 2 ** 13:
        return np.einsum("ij,ij->i", M, M, dtype=np.float64).astype(np.int64)
    Mi = M.astype(np.int64)
    return np.einsum("ij,ij->i", Mi, Mi)


def cache_block_rows(d: int) -> int:
    """Rows of one block of the one-pass statistics: about 1 MB of float64 (it stays in cache
    between the map and the sums), at most :data:`CHUNK` (one exact float64 product)."""
    return int(min(CHUNK, max(64, (1 << 17) // max(int(d), 1))))


def _grid_blocks(X, data_norm, mean=None):
    """The grid rows of ``X`` (:func:`grid_rows`), centred on ``mean`` as a fit does (the grid rows
    put on the grid again), one float64 block at a time in one reused buffer: no copy of ``X``.

    Each row's integers are those of the whole-array maps (every step reads the row alone)."""
    X = np.asarray(X)
    rows = cache_block_rows(X.shape[1])
    buffer = np.empty((min(rows, X.shape[0]), X.shape[1]))
    scale = float(data_norm) / _ONE
    for start in range(0, X.shape[0], rows):
        M = grid_rows(X[start:start + rows], data_norm, out=buffer[:len(X[start:start + rows])])
        yield M if mean is None else grid_rows(M, data_norm, mean, scale=scale, out=M)


def grid_centred_stats(X, data_norm: float, mean, unit: float, total: bool = True):
    """``(sum_of_squares(M, unit), gram(M, unit))`` of the centred grid rows ``M`` of a fit, in
    one pass over ``X`` without holding ``M`` (the total ``None`` when not ``total``).

    The very integers of the whole-array statistics: each block's are exact, and so is their sum.
    """
    acc, squares = _IntSum(), 0
    for M in _grid_blocks(X, data_norm, mean):
        if total:  # each norm at most 4**BITS: a block's int64 sum is below 2**52
            squares += int(_int_norms(M).sum())
        acc.add(M.T @ M)  # at most CHUNK rows: an exact float64 sum
    d = np.shape(X)[1]
    stat = Exact(np.array(squares, dtype=object), unit / _ONE ** 2) if total else None
    return stat, Exact(acc.total((d, d)), unit / _ONE ** 2)


def grid_vectors(V) -> np.ndarray:
    """A public d x p block (entries in [-1, 1]: orthonormal columns) on the grid, as integers."""
    return np.rint(np.clip(np.asarray(V, dtype=np.float64), -1.0, 1.0) * _ONE)


def _chunks(M, rows=CHUNK):
    for start in range(0, M.shape[0], rows):
        yield np.asarray(M[start:start + rows], dtype=np.float64)


def row_sum(M, unit: float = 1.0) -> Exact:
    """``sum_i m_i`` (d,), exact; the value is ``unit 2**-BITS`` per integer."""
    acc = _IntSum()
    for C in _chunks(M, 2 ** 22):
        acc.add(C.sum(axis=0))  # integers below 2**22 * 2**BITS < 2**53: exact
    return Exact(acc.total(M.shape[1:]), unit / _ONE)


def sum_of_squares(M, unit: float = 1.0) -> Exact:
    """``sum_i ||m_i||^2`` (a 0-d array), exact; ``unit 4**-BITS`` per integer."""
    total = int(np.sum(_int_norms(M).astype(object))) if M.shape[0] else 0
    return Exact(np.array(total, dtype=object), unit / _ONE ** 2)


def gram(M, unit: float = 1.0) -> Exact:
    """``sum_i m_i m_i^T`` (d x d), exact; ``unit 4**-BITS`` per integer."""
    acc = _IntSum()
    for C in _chunks(M):
        acc.add(C.T @ C)
    return Exact(acc.total((M.shape[1],) * 2), unit / _ONE ** 2)


def gram_product(M, K, unit: float = 1.0) -> Exact:
    r"""``sum_i m_i w_i^T`` with ``w_i = rint(m_i^T K / 2**BITS)``: ``X^T X V`` on the grid, exact.

    ``K = grid_vectors(V)`` for a public V. ``m^T K`` is an exact integer (below ``4**BITS`` times
    ``||k_l|| / 2**BITS``), ``w`` rounds it back to the grid (a function of the row alone), and
    each chunk's ``sum m w^T`` is again an exact float64 integer sum. ``unit 4**-BITS`` per integer.
    """
    K = np.asarray(K, dtype=np.float64)
    acc = _IntSum()
    for C in _chunks(M):
        W = np.rint((C @ K) / _ONE)
        acc.add(C.T @ W)
    return Exact(acc.total((M.shape[1], K.shape[1])), unit / _ONE ** 2)


def moment_product(M, K, unit: float = 1.0) -> Exact:
    r"""The third moment's power queries on the grid: ``[sum_i m_i w_i^T ; 2**BITS sum_i c_i]``.

    For a grid row ``q`` and public grid columns ``u`` (``K = grid_vectors(U)``): ``t = q^T u`` is
    exact; ``w = rint(2**BITS fl(t^2))`` and ``c = rint(2**BITS fl(t^3))`` are correctly rounded
    functions of the row alone. Returns a (d + 1) x L :class:`Exact` in ``unit 4**-BITS`` per
    integer: rows ``0..d-1`` are ``T(I, u, u)``, row ``d`` is ``T(u, u, u)`` (times ``unit``).
    """
    K = np.asarray(K, dtype=np.float64)
    acc = _IntSum()
    for C in _chunks(M):
        t = (C @ K) / _ONE ** 2  # exact integers over 4**BITS: the projections q^T u
        sq = t * t
        acc.add(np.vstack([C.T @ np.rint(sq * _ONE), _ONE * np.rint(sq * t * _ONE).sum(axis=0)]))
    return Exact(acc.total((M.shape[1] + 1, K.shape[1])), unit / _ONE ** 2)


def moment_sensitivities(K, data_norm: float, n_samples: int):
    r"""Per-column l2 sensitivities of :func:`moment_product`'s two queries, over ``n_samples``.

    With ``r_l = ||k_l|| 2**-BITS`` (rounded up, from the exact integer ``||k_l||^2``), a grid
    row's terms have ``|t| <= r_l``, so ``||q w|| <= r_l^2 (1 + 2u) + 2**-(BITS+1)`` and
    ``|c| <= r_l^3 (1 + 3u) + 2**-(BITS+1)``; replacing a row moves each by at most twice that,
    times ``B^3 / n``: ``2 B^3 / n`` of :func:`~dptensor.algorithms.tensor_power.row_sensitivity`
    for unit columns, plus the grid's allowance.
    """
    Ki = np.asarray(K).astype(np.int64)
    sq = (Ki * Ki).sum(axis=0)  # exact: d 4**BITS < 2**63
    r = np.array([(math.isqrt(int(v)) + 1) / _ONE for v in sq])
    scale = 2.0 * float(data_norm) ** 3 / float(n_samples) * (1 + 2.0 ** -50)
    half = 0.5 / _ONE
    return scale * (r ** 2 * (1 + 2.0 ** -51) + half), scale * (r ** 3 * (1 + 2.0 ** -51) + half)


def power_sensitivity(K, data_norm: float) -> float:
    r"""l2 sensitivity of :func:`gram_product` (times ``B^2``) for rows in the ball of radius ``B``.

    With ``V_q = K 2**-BITS`` and ``w = V_q^T q + e`` (``|e_l| <= 2**-(BITS+1)``), replacing ``a``
    by ``b`` moves the sum by ``(a a^T - b b^T) V_q + a e_a^T - b e_b^T``, of Frobenius norm at
    most ``sqrt(min(p, 2)) rho + sqrt(p) 2**-BITS``, where ``rho >= ||V_q||_2`` is Gershgorin's
    bound on the exact integer ``K^T K``, rounded up.
    """
    Ki = np.asarray(K).astype(np.int64)
    G = (Ki.T @ Ki).astype(object)  # exact: d 4**BITS < 2**63
    radius = max(sum(abs(v) for v in row) for row in G)
    root = math.isqrt(radius)
    root += root * root < radius
    p = K.shape[1]
    rho = root / _ONE
    allowance = math.sqrt(p) / _ONE
    return float(data_norm) ** 2 * (math.sqrt(min(p, 2)) * rho + allowance) * (1 + 2.0 ** -50)


def range_mean(values, lo: float, hi: float) -> Exact:
    """The mean of ``values`` clipped into ``[lo, hi]`` (NaN as ``lo``), as an exact statistic.

    Each value is mapped alone to an integer ``m`` in ``[0, 2**BITS]`` (its place on a grid of the
    range, in float64 from that value only) and the mean is
    ``lo + (hi - lo) sum_i m_i / (n 2**BITS)``
    with the sum in integers: changing one value moves it by at most ``(hi - lo) / n`` (times
    ``1 + 2**-52`` for the rounded unit) at any ``n`` and in any order.
    """
    u = (np.nan_to_num(np.asarray(values, dtype=np.float64), nan=lo, posinf=hi, neginf=lo) - lo)
    m = np.rint(np.clip(u / (hi - lo), 0.0, 1.0) * _ONE).astype(np.int64)
    unit = (hi - lo) / (m.size * _ONE)
    return Exact(np.array(int(m.sum()), dtype=object), unit).minus(-float(lo))


def exact_gaussian_release(stat: Exact, sensitivity, noise_multiplier, rng, dtype=None):
    """:func:`~dptensor.mechanisms.gaussian_release` of an exact statistic, on its grid exactly."""
    value = stat.for_release(sensitivity, noise_multiplier)
    return gaussian_release(value, sensitivity, noise_multiplier, rng, dtype=dtype,
                            rounding=None)  # exact: no rounding to allow for


def map_rows(X, fn, *args):
    """``fn(X, *args)``, or lazily chunk by chunk for a dask X (each chunk holds whole rows) or
    block by block for sparse rows (:class:`~dptensor.algorithms.sparse.SparseRows`)."""
    if isinstance(X, SparseRows):
        return X.map(fn, *args)
    return X.map_blocks(fn, *args, dtype=X.dtype) if is_dask_array(X) else fn(X, *args)


def is_lazy(X) -> bool:
    """Whether ``X``'s rows are read chunk by chunk (a dask array, sparse rows), not held."""
    return is_dask_array(X) or isinstance(X, SparseRows)


def rows_stat(M, statistic, *args) -> Exact:
    """``statistic(M, *args)`` for grid rows ``M``: NumPy, or a dask array summed over its chunks.

    A dask ``M``'s chunks each give the exact integers of their rows and the tree of additions
    adds Python integers, so the result is the one-shot statistic, bit for bit; so do the dense
    blocks of sparse rows (:class:`~dptensor.algorithms.sparse.SparseRows`), added in order.
    """
    if isinstance(M, SparseRows):
        unit = statistic(np.zeros((0, M.shape[1])), *args).unit  # public: no row is read
        return Exact(M.block_sum(lambda B: statistic(B, *args).ints), unit)
    if not is_dask_array(M):
        return statistic(M, *args)
    from .dask import reduce_row_chunks

    unit = statistic(np.zeros((0, M.shape[1])), *args).unit  # public: no row is read
    (ints,) = reduce_row_chunks(M, _ints_partial, statistic, *args)
    return Exact(ints, unit)


def _ints_partial(chunk, statistic, *args):
    return (statistic(np.asarray(chunk), *args).ints,)


class ExactGram:
    """``B^2 sum_i q_i w_i^T`` (:func:`gram_product`) as a power-method operator; grid rows ``M``.

    ``matmat`` returns an :class:`Exact`, released by :func:`exact_gaussian_release` at the
    sensitivity :meth:`sensitivity` of the same (public) block.
    """

    def __init__(self, M, data_norm: float):
        self.M, self.data_norm = M, float(data_norm)
        self.shape = (M.shape[1], M.shape[1])

    def matmat(self, Q) -> Exact:
        return rows_stat(self.M, gram_product, grid_vectors(Q), self.data_norm ** 2)

    def sensitivity(self, Q) -> float:
        return power_sensitivity(grid_vectors(Q), self.data_norm)


def clip_radius_grid(tau: float) -> int:
    """The integer radius ``T`` of a clipped projection, ``T 2**-BITS <= tau`` (``tau``: the
    radius in units of the bound), within one grid step and ``2**BITS`` (the whole ball)."""
    return int(min(max(math.floor(float(tau) * _ONE), 1), 2 ** BITS))


def clipped_gram_product(M, K, radius: int, unit: float = 1.0) -> Exact:
    r"""``sum_i m_i w_i^T`` with ``w_i`` the grid projection ``rint(m_i^T K / 2**BITS)`` clipped
    to the integer radius ``T = radius``: exact, ``unit 4**-BITS`` per integer.

    Each ``w`` is a function of its row alone: ``||w_0||^2`` is an exact integer; a row with
    ``||w_0||^2 > T^2`` becomes ``trunc(w_0 T / ||w_0||)`` (never past the radius), checked again
    in integers (a row still outside, which never happens, becomes zero). So ``||w|| <= T``
    exactly, whatever ``K``; every product ``m_j w_l`` is an integer below ``2**(2 BITS)`` and the
    chunk sums are exact, as in :func:`gram_product`.
    """
    K = np.asarray(K, dtype=np.float64)
    limit = float(radius) ** 2  # an integer below 2**41: exact
    acc = _IntSum()
    for C in _chunks(M):
        W = np.rint((C @ K) / _ONE)
        norms = np.einsum("ij,ij->i", W, W)  # integer squares: exact below 2**53
        over = norms > limit
        if over.any():
            W[over] *= (float(radius) / np.sqrt(norms[over]))[:, None]
            np.trunc(W, out=W)
            W[np.einsum("ij,ij->i", W, W) > limit] = 0.0
        acc.add(C.T @ W)
    return Exact(acc.total((M.shape[1], K.shape[1])), unit / _ONE ** 2)


class ExactClippedGram:
    """The clipped power product ``B^2 sum_i q_i clip(V^T q_i)^T`` of grid rows ``M``
    (:func:`clipped_gram_product`) for a public radius ``tau`` (in the rows' units: the grid
    radius is ``T = floor(2**BITS tau / B)``, within ``[1, 2**BITS]``).

    Every row's term has Frobenius norm ``||q|| ||w|| 2**-BITS <= T 2**-BITS`` (times ``B^2``),
    so replacing a row moves the sum by at most twice that: :meth:`sensitivity`
    (``docs/derivations/pca.rst``, "Clipped power steps").
    """

    def __init__(self, M, data_norm: float, tau: float):
        self.M, self.data_norm = M, float(data_norm)
        self.radius = clip_radius_grid(float(tau) / self.data_norm)
        self.shape = (M.shape[1], M.shape[1])

    def matmat(self, Q) -> Exact:
        return rows_stat(self.M, clipped_gram_product, grid_vectors(Q), self.radius,
                         self.data_norm ** 2)

    def sensitivity(self, Q=None) -> float:
        """``2 B^2 T 2**-BITS``, rounded up; it does not depend on the block ``Q``."""
        return 2.0 * self.data_norm ** 2 * (self.radius / _ONE) * (1 + 2.0 ** -50)


class ExactThirdMoment:
    """The third moment ``(B^3 / n) sum_i q_i^(x)3`` of grid rows ``M`` as a tensor operator.

    ``apply_evaluate(U)`` returns two :class:`Exact` statistics (:func:`moment_product`): a
    private tensor power method releases them on their grid, deflated by a public offset.
    """

    def __init__(self, M, data_norm: float, n_samples: int):
        self.M, self.data_norm, self.n = M, float(data_norm), int(n_samples)
        self.shape = (M.shape[1],) * 3

    def apply_evaluate(self, U):
        stat = rows_stat(self.M, moment_product, grid_vectors(U), self.data_norm ** 3 / self.n)
        return Exact(stat.ints[:-1], stat.unit), Exact(stat.ints[-1], stat.unit)

    def apply(self, U):
        return self.apply_evaluate(U)[0]

    def evaluate(self, U):
        return self.apply_evaluate(U)[1]
