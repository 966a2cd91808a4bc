"""Noise mechanisms: Gaussian, Laplace, AboveThreshold, and row clipping.

Each takes a sensitivity, a noise multiplier or epsilon, and an explicit
``numpy.random.Generator``. None of them touches the accountant: the caller records the matching
:mod:`dptensor.accounting` event *before* calling them.

The ``*_release`` functions take the true value and return the released one. They are safe against
floating-point attacks (Mironov 2012): the value is rounded to a public power-of-two grid ``gamma``
(a ``2**-GRID_BITS`` fraction of the noise scale) and integer noise drawn *exactly* by
:mod:`dptensor.mechanisms.samplers` is added on that grid, so the set of possible outputs is the
same grid for every input. The noise is ``round(S L)`` or ``round(S N)`` for an exact continuous
Laplace or Gaussian variable: the release is a post-processing of the continuous mechanism applied
to the rounded query, whose sensitivity the rounding raises by at most one grid step per coordinate.
The noise scale is raised to absorb that step (a relative ``zeta = z sqrt(size) 2**-GRID_BITS`` for
Gauss, ``size 2**-GRID_BITS / epsilon`` for Laplace), so each release is priced exactly by the same
:class:`~dptensor.accounting.GaussianEvent` or :class:`~dptensor.accounting.LaplaceEvent` as before.
Derivation: ``docs/derivations/sampling.rst``.

Every noisy release of the library goes through these functions: none adds NumPy's continuous
noise to a value, since a value plus such noise can betray the value through the set of doubles
it can reach.
"""
from __future__ import annotations

import math
import sys
from typing import NamedTuple

import numpy as np

from .samplers import compiled_kernel, rounded_gaussian, rounded_laplace

__all__ = ["above_threshold", "clip_factors", "clip_row_factors", "clip_rows", "row_squares",
           "unclipped", "gaussian_release", "joint_gaussian_release", "laplace_release",
           "symmetric_gaussian_release", "grid_step", "GRID_BITS", "Rounding"]

#: The grid step is the largest power of two at most ``2**-GRID_BITS`` times the noise scale.
GRID_BITS = 30
_UP = 1.0 + 2.0 ** -40  # rounds a computed noise scale up past its floating-point error


class Rounding(NamedTuple):
    """How far floating point can move a computed statistic from the exact one a sensitivity is for.

    A release of a float sum names its rounding here: ``terms`` bounds the floating-point
    operations behind any one coordinate (the summands of its longest sum, offsets included, plus
    any scaling after it), ``total`` bounds, in the release's norm (l2, Frobenius, or l1 for
    Laplace), the sum of the absolute values of everything added: ``n`` units times the bound on
    one unit's contribution, plus the public offsets. ``dtype`` is the precision the sums run in.

    In any order (BLAS, Dask, a permutation of the units) a computed sum is within ``gamma_m``
    times that total of the exact one (Higham, *Accuracy and Stability of Numerical Algorithms*,
    2nd ed., Lemma 3.1 and eq. 4.4: ``gamma_m = m u / (1 - m u)``), and so are its neighbour's:
    the computed statistics of neighbours differ by at most the exact sensitivity plus
    :meth:`allowance` ``= 2 gamma_m total``, which the release adds to the sensitivity
    (``docs/derivations/exact_sums.rst``, "Sums in floating point"). Statistics summed exactly
    (:mod:`dptensor.algorithms.exact`) and values that are no sum are released with
    ``rounding=None``.
    """

    total: float
    terms: int
    dtype: object = np.float64

    def allowance(self) -> float:
        u = float(np.finfo(self.dtype).eps) / 2.0
        m = int(self.terms)
        if m < 0 or not self.total >= 0:
            raise ValueError("Rounding needs terms >= 0 and total >= 0")
        if m * u >= 0.5:
            raise ValueError(f"a sum of {m} terms in {np.dtype(self.dtype).name} has no useful "
                             "rounding bound: sum in a wider type or in fewer terms")
        return 2.0 * m * u / (1.0 - m * u) * float(self.total) * _UP


def _with_rounding(sensitivity, rounding):
    """The sensitivity of the computed statistic: the exact one plus the rounding's allowance
    (a coordinate with sensitivity 0 is no query: it stays 0, released as it is)."""
    if rounding is None:
        return sensitivity
    sensitivity = np.asarray(sensitivity, dtype=np.float64)
    return np.where(sensitivity > 0, sensitivity + rounding.allowance(), sensitivity)


def grid_step(scale):
    """The public grid of a noise scale: the largest power of two ``<= scale * 2**-GRID_BITS``.

    Computed exactly.
    """
    if isinstance(scale, float):  # one scale: the same frexp and ldexp, without array overhead
        return np.float64(math.ldexp(1.0, math.frexp(scale)[1] - 1 - GRID_BITS))
    _, exponent = np.frexp(np.asarray(scale, dtype=np.float64))  # scale = m 2**e, m in [0.5, 1)
    return np.ldexp(1.0, exponent - 1 - GRID_BITS)


#: Values at or beyond this many grid steps (or not finite) are refused: far inside the doubles,
#: so neither ``value / gamma`` nor a sum of the rounded values can overflow.
_GRID_LIMIT = 2.0 ** 1000
_CHUNK = 1 << 16  # values per chunk of the rounding and the noise's addition (in cache)


_REFUSED = "{} must be finite, and far below 2**1000 times the noise scale"


def _limit(gamma) -> float:
    """``2**1000`` grid steps of ``gamma``, as a Python float: past the doubles (a bound of 1e8
    or more) it is the largest double, never an overflow that NumPy would warn of."""
    return min(_GRID_LIMIT * float(gamma), sys.float_info.max)


def _check_grid(value, gamma, name):
    """Refuse non-finite values and values of ``2**1000`` grid steps or more, before dividing (no
    floating-point warning can then arise). Two reductions, no temporary array."""
    if value.size:
        limit = _limit(gamma if isinstance(gamma, float) else np.min(gamma))
        if not (value.max() < limit and value.min() > -limit):  # nan fails too
            raise ValueError(_REFUSED.format(name))


def _on_grid(value, gamma, name="value"):
    """``rint(value / gamma)``: exact, since gamma is a power of two. A zero is +0.0: ``rint``
    keeps the sign of a value within half a step of 0, which the integer must not tell (a
    release ``n + noise`` would be -0.0 for a negative value and a noise of -0.0)."""
    _check_grid(np.asarray(value), gamma, name)
    n = np.divide(value, gamma)
    if isinstance(n, np.ndarray):
        np.rint(n, out=n)
        n += 0.0  # -0.0 + 0.0 is +0.0; every other value is unchanged
        return n
    return np.rint(n) + 0.0


def _noisy(value, gamma, noise):
    """``(rint(value / gamma) + noise) * gamma`` (the release on its grid), into ``noise``.

    ``gamma`` is one power of two; a large release runs chunk by chunk, in cache.
    """
    v, k = value.reshape(-1), noise.reshape(-1)
    kernel = compiled_kernel()
    if kernel is not None and k.flags.c_contiguous:  # one compiled pass, the same arithmetic
        if not kernel.grid_add(np.ascontiguousarray(v), float(gamma), k, _limit(gamma)):
            raise ValueError(_REFUSED.format("value"))
        return noise if noise.ndim else noise[()]
    for start in range(0, v.size, _CHUNK):
        part = v[start:start + _CHUNK]
        _check_grid(part, gamma, "value")
        n = np.divide(part, gamma)
        np.rint(n, out=n)
        n += 0.0  # a zero's sign is the value's, not the integer's (see _on_grid)
        n += k[start:start + _CHUNK]
        np.multiply(n, gamma, out=k[start:start + _CHUNK])
    return noise if noise.ndim else noise[()]  # one value: a scalar, as ``n + noise`` gives


def gaussian_release(value, sensitivity, noise_multiplier, rng: np.random.Generator, dtype=None,
                     *, rounding: Rounding | None = None):
    """``value`` plus Gaussian noise of std ``noise_multiplier * sensitivity``, exact on a grid.

    ``sensitivity`` is the l2 sensitivity of ``value`` (or of each group of its coordinates that
    shares one sensitivity; it may be an array broadcasting against ``value``, say one per column).
    The release is ``1/noise_multiplier``-GDP for that sensitivity, exactly: it is
    ``gamma round(n + S N)`` with ``n = rint(value/gamma)`` and ``S gamma = (1 + zeta) z s``, a
    post-processing of the Gaussian mechanism on ``n``, whose l2 sensitivity is at most
    ``s + gamma sqrt(size) <= (1 + zeta) s``. Coordinates with a zero scale are returned unchanged.
    ``rounding``: the value is a float sum, whose rounding (:class:`Rounding`) raises ``s``.
    """
    value = np.asarray(value, dtype=np.float64)
    z = float(noise_multiplier)
    sensitivity = _with_rounding(sensitivity, rounding)
    zeta = z * math.sqrt(value.size) * 2.0 ** -GRID_BITS * _UP
    if np.ndim(sensitivity) == 0 and z >= 0 and float(sensitivity) * z > 0:
        # One scale (the common case): the same arithmetic on Python floats, without array
        # overhead.
        scale = float(sensitivity) * z
        gamma = grid_step(scale)
        S = scale / gamma * (1.0 + zeta) * _UP
        _check_grid(value, gamma, "value")  # refused before a word is drawn
        out = _noisy(value, gamma, rounded_gaussian(S, rng, size=value.shape))
        return out if dtype is None else out.astype(dtype, copy=False)
    # Per group (say per column), not per value.
    scale = np.asarray(sensitivity, dtype=np.float64) * z
    if np.any(scale < 0) or z < 0:
        raise ValueError("sensitivity and noise_multiplier must be >= 0")
    if np.all(scale > 0):
        gamma = grid_step(scale)
        S = scale / gamma * (1.0 + zeta) * _UP
        out = (_on_grid(value, gamma) + rounded_gaussian(S, rng, size=value.shape)) * gamma
    else:  # coordinates with a zero scale are released as they are
        scale = np.broadcast_to(scale, value.shape)
        out, noisy = value.copy(), scale > 0
        if noisy.any():
            gamma = grid_step(scale[noisy])
            S = scale[noisy] / gamma * (1.0 + zeta) * _UP
            out[noisy] = (_on_grid(value[noisy], gamma) + rounded_gaussian(S, rng)) * gamma
    return out if dtype is None else out.astype(dtype, copy=False)


def laplace_release(value, sensitivity, epsilon, rng: np.random.Generator, dtype=None,
                    *, rounding: Rounding | None = None):
    """``value`` plus ``Lap(sensitivity/epsilon)`` noise, exact on a grid: pure ``epsilon``-DP.

    ``sensitivity`` is the l1 sensitivity of ``value`` (or of each coordinate, when each is its own
    release). The release is ``gamma round(n + S L)`` with ``n = rint(value/gamma)`` and
    ``S gamma = (1 + zeta) s / epsilon``: a post-processing of the Laplace mechanism on ``n``,
    whose l1 sensitivity is at most ``s + gamma size <= (1 + zeta) s``. ``rounding``: as in
    :func:`gaussian_release`, its ``total`` in the l1 norm.
    """
    if not epsilon > 0:
        raise ValueError(f"epsilon must be > 0, got {epsilon!r}")
    value = np.asarray(value, dtype=np.float64)
    s = float(_with_rounding(sensitivity, rounding))
    if not s >= 0:
        raise ValueError(f"sensitivity must be >= 0, got {sensitivity!r}")
    if s == 0:
        return value.copy() if dtype is None else value.astype(dtype)
    scale = s / float(epsilon)
    zeta = value.size * 2.0 ** -GRID_BITS / float(epsilon) * _UP
    gamma = float(grid_step(scale))
    S = scale / gamma * (1.0 + zeta) * _UP
    _check_grid(value, gamma, "value")  # refused before a word is drawn
    out = _noisy(value, gamma, rounded_laplace(S, rng, size=value.shape))
    return out if dtype is None else out.astype(dtype, copy=False)


def symmetric_gaussian_release(T, sensitivity, noise_multiplier, rng: np.random.Generator,
                               dtype=None, frobenius: bool = False, *,
                               rounding: Rounding | None = None):
    """A symmetric matrix or order-3 tensor ``T`` with Gaussian noise on its distinct entries.

    The entries ``T[i, j]`` with ``i <= j`` (``T[i, j, k]`` with ``i <= j <= k``) are the query,
    ``sensitivity`` their l2 sensitivity; they go through :func:`gaussian_release` and are copied
    to their permutations, so the result is exactly symmetric and one Gaussian release.

    ``frobenius=True``: ``sensitivity`` bounds the Frobenius norm of the change of the whole
    symmetric ``T`` instead. The query is then each distinct entry times the square root of its
    number of positions m (1 or 2 for a matrix; 1, 3 or 6 for a tensor): a vector whose l2 norm is
    the Frobenius norm of ``T``, so ``sensitivity`` is its l2 sensitivity; dividing back (post-
    processing) leaves each distinct entry with noise of std ``noise_multiplier * sensitivity /
    sqrt(m)`` -- less than the plain release's wherever ``m > 1``, at the same privacy cost.
    ``rounding`` (:class:`Rounding`): its ``total`` in the norm ``sensitivity`` is in (the l2 norm
    of the distinct entries, or with ``frobenius`` the Frobenius norm).
    """
    T = np.asarray(T)
    d, order = T.shape[0], T.ndim
    if order == 2:
        idx = np.triu_indices(d)
    elif order == 3:
        upper = np.triu(np.ones((d, d), dtype=bool))
        idx = np.nonzero(upper[:, :, None] & upper[None, :, :])
    else:
        raise ValueError(f"T must be a symmetric matrix or order-3 tensor, got ndim={order}")
    from itertools import permutations
    perms = set(permutations(range(order)))
    if frobenius:  # sorted indices: the number of distinct values fixes the number of positions
        distinct = 1 + sum(np.asarray(idx[a] != idx[a + 1], dtype=int) for a in range(order - 1))
        root = np.sqrt(np.array([1.0, 2.0] if order == 2 else [1.0, 3.0, 6.0])[distinct - 1])
        released = gaussian_release(T[idx] * root, sensitivity, noise_multiplier, rng,
                                    rounding=rounding) / root
    else:
        released = gaussian_release(T[idx], sensitivity, noise_multiplier, rng, rounding=rounding)
    out = np.empty(T.shape, dtype=T.dtype if dtype is None else dtype)
    for perm in perms:
        out[tuple(idx[p] for p in perm)] = released
    return out


def joint_gaussian_release(parts, sensitivity, noise_multiplier, rng: np.random.Generator,
                           *, rounding: Rounding | None = None):
    """Several arrays released as ONE Gaussian release: ``sensitivity`` is the l2 sensitivity of
    their concatenation. Returns the released arrays, in order, with their shapes.

    One call, not one per part: the grid allowance must cover the rounding of every coordinate of
    the release together (``sqrt(N)`` for all ``N`` of them), which a call per part would not.
    """
    parts = [np.asarray(p, dtype=np.float64) for p in parts]
    flat = gaussian_release(np.concatenate([p.ravel() for p in parts]), sensitivity,
                            noise_multiplier, rng, rounding=rounding)
    ends = np.cumsum([p.size for p in parts])[:-1]
    return [piece.reshape(p.shape) for piece, p in zip(np.split(flat, ends), parts)]


def above_threshold(queries, threshold, epsilon, rng: np.random.Generator, sensitivity=1.0):
    """AboveThreshold (Dwork & Roth, Alg. 1): index of the first query whose noisy value clears a
    noisy threshold.

    ``queries`` are the true answers, in order, each of sensitivity ``sensitivity``. The threshold
    gets ``Lap(2 s/eps)`` noise once and each query ``Lap(4 s/eps)``; the whole run is pure
    ``epsilon``-DP whatever the number of queries, and releases only the returned index (``None``
    when no query clears it). All noises are drawn at once: no Python loop over queries. They
    are exact rounded Laplace draws on the grid of ``s/eps``, with ``s`` raised to the
    sensitivity of the rounded queries (one grid step more; see ``docs/derivations/sampling.rst``).
    """
    queries = np.asarray(queries, dtype=float)
    if queries.ndim != 1:
        raise ValueError("queries must be a 1-D sequence of answers")
    if not epsilon > 0:
        raise ValueError(f"epsilon must be > 0, got {epsilon!r}")
    # Exact and on a grid: integer queries n_i = rint(q_i/gamma) have sensitivity at most
    # Delta = floor(s/gamma) + 1, and the noises are round(S L) with the scales 2 Delta/eps and
    # 4 Delta/eps; comparing round(n_i + L_i) with round(t + L_t) is comparing n_i + L_i with a
    # threshold that moves with integer shifts, so Dwork & Roth's proof holds unchanged.
    gamma = float(grid_step(float(sensitivity) / epsilon if sensitivity > 0 else 1.0))
    lattice_sensitivity = math.floor(float(sensitivity) / gamma) + 1
    # Integer arithmetic, so that each comparison is the exact one the proof speaks of; the
    # threshold first, then the queries, in one array (one call each: small calls are common).
    n = _on_grid(np.concatenate(([float(threshold)], queries)), gamma, "threshold and queries")
    if np.abs(n).max() >= 2.0 ** 62:
        raise ValueError("queries and threshold must be below 2**32 times their noise scale")
    scales = np.full(n.size, 4.0 * lattice_sensitivity / epsilon * _UP)
    scales[0] = 2.0 * lattice_sensitivity / epsilon * _UP
    noisy = n.astype(np.int64) + rounded_laplace(scales, rng).astype(np.int64)
    hits = (noisy[1:] >= noisy[0]).nonzero()[0]
    return int(hits[0]) if hits.size else None


# Below this squared norm a row's squares may have underflowed (entries below ~1e-154).
_SQUARE_SAFE_MIN = 1e-280


def clip_factors(X, data_norm, squares=None) -> np.ndarray:
    """Row factors ``min(1, data_norm / ||x||)`` (float64), exact for any finite ``X``, silently.

    Clipping runs after the spend, so it must neither warn nor fail on any data: a warning that a
    square overflowed (a row beyond ~1e154) or that ``data_norm / 0`` did (a zero row) would tell
    that such a row exists. Rows whose squared norm under- or overflows are measured rescaled by
    their largest entry. (A factor that is not finite, only possible for rows centred on a
    non-finite released mean, is 0.) ``squares``: the rows' squared norms as :func:`row_squares`
    measures them, where the caller needs them too (the same factors, one measurement).
    """
    X = np.asarray(X)
    with np.errstate(all="ignore"):
        sq = row_squares(X) if squares is None else squares
        factor = np.minimum(1.0, data_norm / np.sqrt(sq))
        hard = ~((sq >= _SQUARE_SAFE_MIN) & (sq < np.inf))
        if hard.any():  # zero, tiny or huge rows (rare): measured rescaled by their largest entry
            rows = X[hard].astype(np.float64)
            peak = np.max(np.abs(rows), axis=1, initial=0.0)
            unit = rows / np.where(peak > 0, peak, 1.0)[:, None]
            ratio = data_norm / peak / np.sqrt(np.einsum("ij,ij->i", unit, unit))
            factor[hard] = np.where(peak == 0, 1.0, np.minimum(1.0, ratio))
        factor[~np.isfinite(factor)] = 0.0
    return factor


def clip_rows(X, data_norm):
    """Scale down every row of ``X`` whose l2 norm exceeds ``data_norm``; returns a new array.

    This is what makes row-level sensitivities hold whatever the data: after clipping, replacing a
    row moves any sum of per-row terms by a bounded amount. ``data_norm=None`` returns ``X``.

    >>> clip_rows(np.array([[3.0, 4.0], [0.3, 0.4]]), 1.0)
    array([[0.6, 0.8],
           [0.3, 0.4]])
    """
    if data_norm is None:
        return X
    with np.errstate(all="ignore"):  # a factor below float32's range underflows to 0: still clipped
        return X * clip_row_factors(X, data_norm)[:, None]


def clip_row_factors(X, data_norm, squares=None) -> np.ndarray:
    """The factors :func:`clip_rows` multiplies the rows of ``X`` by, in ``X``'s dtype
    (``squares``: as in :func:`clip_factors`)."""
    factor = clip_factors(X, data_norm, squares)
    eps = np.finfo(X.dtype).eps if np.issubdtype(X.dtype, np.floating) else 0.0
    if eps > np.finfo(np.float64).eps:
        # Rounding the factor and each product to float32 can lift a clipped row's norm by ~2 eps
        # over the bound (9e-8 of it, far past the noise scales' 2**-40 margin): aim below.
        factor = np.where(factor < 1.0, factor * (1.0 - 4.0 * eps), factor)
    with np.errstate(all="ignore"):
        return factor.astype(X.dtype, copy=False)


def unclipped(squares, data_norm, error=0.0) -> bool:
    """Whether :func:`clip_factors` leaves every row of these ``squares`` (:func:`row_squares`) as
    it is: each at most ``data_norm^2`` by a margin past the rounding of the test (so that its
    factor is exactly 1), none too small or large to measure directly. ``error``: a bound on the
    squares' relative error against :func:`row_squares`' own, where a faster sum in another
    order measured them (``False`` then only says that the exact measurement must decide)."""
    if squares.size == 0:
        return True
    low, top = float(squares.min()), float(squares.max()) * (1.0 + error)
    return bool(low * (1.0 - error) >= _SQUARE_SAFE_MIN and top < np.inf
                and top <= data_norm * data_norm * (1.0 - 2.0 ** -50))


def row_squares(X) -> np.ndarray:
    """Every row's squared l2 norm, summed in float64 (what :func:`clip_factors` measures)."""
    with np.errstate(all="ignore"):
        return np.einsum("ij,ij->i", X, X, dtype=np.float64)
