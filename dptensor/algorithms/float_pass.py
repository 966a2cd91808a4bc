r"""A fit without privacy on rows in floating point, a block of rows at a time: no copy of ``X``.

The float path clips the rows, centres them on their mean and clips them again, then takes the
total ``sum_i ||c_i||^2`` and the Gram matrix ``sum_i c_i c_i^T``. Held whole, the clipped and
centred rows are one more ``X``; here one pass reads each block of rows once: its product first
(the block then sits in cache), then its squared norms (for the clip) and its column sums, all
added to float64 totals.

* float64 rows go into the product as they are (a view of ``X``, no copy); a block with rows
  clipped to at most half their norm is scaled into a buffer first, while milder clips are
  corrected by their own rows' products (the raw rows' rounding is then no larger than a bound
  row's). The centred Gram is ``S - s mu^T - mu s^T + n mu mu^T`` from the sums: exact, but the
  rounding of feature ``j``'s entries grows with ``mu_j^2`` over its variance, and it lands on
  every eigenvalue, the smallest too. So this holds only where the first block's clipped mean
  is within :data:`CANCELLATION` variances of 0 on every feature (centred data); elsewhere the
  rows are centred on that mean in a buffer, as float32 rows are;
* float32 rows are always centred on the first block's clipped mean in a float32 buffer (its
  products in float32 then hold the spread, not the mean).

After the pass the shift is checked against the final mean and spread, feature by feature: where
the mean is still more than :data:`CANCELLATION` variances from it (a first block unlike the
rest), a second pass sums the rows centred on the mean itself.

The clip's factors are :func:`~dptensor.mechanisms.clip_rows`' own: with numba, a vectorised sum
of squares (any order) first shows that no row of a block is near the bound, and only a block
where one may be is measured as ``clip_rows`` measures; without numba, that measurement alone.
The second clip (rows whose distance to the mean passes the bound) needs the mean, known only
after the pass: each row keeps its squared norm over the bound's (float32: 4 bytes a row), and
afterwards the rows that the centring can take past the bound, ``||c|| + ||mu||`` over it, are
read again (a block at a time), clipped exactly as
:func:`~dptensor.algorithms.power.center_and_clip` does and their products corrected. So each row
goes through the same maps as ``clip_rows`` and ``center_and_clip``; the sums are float sums in
another order and form (no release reads them: the fit has no privacy), the same with numba or
without.
"""
from __future__ import annotations

import numpy as np

from ..mechanisms.releases import (clip_factors, clip_row_factors, clip_rows, row_squares,
                                   unclipped)
from .compiled import compiled

__all__ = ["centred_gram", "float_pass_bytes", "CANCELLATION"]

#: The fewest rows of one block; blocks hold about 2 MB of float64 rows (2621 at d = 100): large
#: enough for a fast product, and read again from cache for the norms and the column sums.
_BLOCK = 1024
#: The largest squared distance, in variances of a feature, from its mean to the shift the sums
#: are taken about (0 for centred float64 data): the rounding of a feature's centred entries grows
#: by about one plus this ratio over a sum of centred rows'.
CANCELLATION = 4.0
#: Relative slack on the second clip's test of which rows to read again: past any rounding of
#: the stored norms (float32) and of the centred rows.
_SLACK = 2.0 ** -16


def _rows(d):
    return max(_BLOCK, (1 << 18) // max(d, 1))


def float_pass_bytes(n: int, d: int) -> int:
    """Bytes the pass allocates at most (float64): each row's squared norm over the bound's
    (float32), three blocks of rows (the buffer, or the rows read again for the second clip and
    their clipped copies), a block's norms and the d x d sums."""
    rows = _rows(d)
    return 4 * n + 8 * (3 * rows * d + 2 * rows + 6 * d * d)


def centred_gram(X, data_norm, center=True):
    """``(mean, C, total)``: the mean of the clipped rows (summed in float64, in ``X``'s dtype, as
    :func:`~dptensor.algorithms.power.private_mean` without noise; None when not ``center``),
    ``sum c c^T`` (in ``X``'s dtype, summed in float64) and ``sum ||c||^2`` (float64, its trace)
    of the rows clipped, centred on the mean and clipped again. One pass over ``X``, two where the
    mean is far out against the spread (see the module notes)."""
    n = X.shape[0]
    norms = None if data_norm is None else np.empty(n, dtype=np.float32)
    shift = _shift(X, data_norm) if center else None
    s, S = _sums(X, data_norm, shift, norms)
    mean = None
    if center:
        offset = np.zeros(X.shape[1]) if shift is None else shift.astype(np.float64)
        mean = (offset + s / max(n, 1)).astype(X.dtype)
        S = _centre(S, s, n, mean.astype(np.float64) - offset)
        if _far(mean.astype(np.float64) - offset, np.diag(S) / max(n, 1)):
            S = _sums(X, data_norm, mean, None)[1]  # the rows centred on the mean itself
    if data_norm is not None:
        _second_clip(S, X, data_norm, mean, norms)
    return mean, S.astype(X.dtype, copy=False), float(np.trace(S))


def _shift(X, data_norm):
    """What the sums are taken about: ``None`` (the origin) for float64 rows whose first block's
    clipped mean is near it against the block's spread, else that mean (in ``X``'s dtype)."""
    first = clip_rows(X[:_rows(X.shape[1])], data_norm)
    mean = first.mean(axis=0, dtype=np.float64)
    if X.dtype == np.float64 and not _far(mean, first.var(axis=0, dtype=np.float64)):
        return None
    return mean.astype(X.dtype)


def _far(delta, variance) -> bool:
    """Whether a shift ``delta`` from the mean is more than :data:`CANCELLATION` variances on
    some feature (a constant feature: any shift)."""
    with np.errstate(all="ignore"):  # an overflowing square is far; NaN is not far
        return bool(np.any(delta * delta > CANCELLATION * variance))


def _centre(S, s, n, delta):
    """``sum (r - delta)(r - delta)^T`` from ``S = sum r r^T`` and ``s = sum r`` over ``n`` rows."""
    cross = np.outer(s, delta)
    return S - cross - cross.T + n * np.outer(delta, delta)


def _square_sums(rows, out):
    """``out[i] = sum_j rows[i, j]^2`` in float64, summed in any order (``fastmath``: reassociated
    and fused, so vectorised): only a test with room for its rounding reads it."""
    for i in range(rows.shape[0]):
        total = 0.0
        for j in range(rows.shape[1]):
            v = np.float64(rows[i, j])
            total += v * v
        out[i] = total


def _column_sums(rows, out):
    """``out = rows.sum(axis=0, dtype=np.float64)``, in NumPy's order (row after row): plain
    floating point, so the same numbers."""
    out[:] = 0.0
    for i in range(rows.shape[0]):
        for j in range(rows.shape[1]):
            out[j] += np.float64(rows[i, j])


def _warm_up(kernel, *shape):
    for dtype in (np.float64, np.float32):
        kernel(np.ones((3, 2), dtype), np.empty(shape))


def _kernels():
    """The compiled measurements, or ``None`` without numba."""
    squares = compiled("float_pass_squares", _square_sums, lambda k: _warm_up(k, 3),
                       fastmath={"reassoc", "contract"})
    sums = compiled("float_pass_sums", _column_sums, lambda k: _warm_up(k, 2))
    return None if squares is None or sums is None else (squares, sums)


def _squares(rows, kernels, out):
    """``(sq, error)``: the rows' squared norms and a bound on their relative error against
    :func:`~dptensor.mechanisms.releases.row_squares`' (0: they are its own)."""
    if kernels is None or not rows.flags.c_contiguous:  # compiled for C-ordered rows only
        return row_squares(rows), 0.0
    kernels[0](rows, out[:len(rows)])
    return out[:len(rows)], (rows.shape[1] + 1) * 2.0 ** -52  # past any order's rounding


def _columns(rows, kernels, out):
    """The rows' column sums (float64, row after row, compiled or not) into ``out``."""
    # one column: NumPy sums it pairwise, not row after row
    if kernels is None or not rows.flags.c_contiguous or rows.shape[1] == 1:
        return np.sum(rows, axis=0, dtype=np.float64, out=out)
    kernels[1](rows, out)
    return out


def _sums(X, data_norm, shift, norms):
    """``(s, S)`` (float64): ``sum r`` and ``sum r r^T`` over ``r = clip_rows(x) - shift`` (no
    shift: None); writes each row's squared norm over the bound's into ``norms`` (1 for a row
    clipped, or too small or large to measure directly)."""
    n, d = X.shape
    rows_, kernels = _rows(d), _kernels()
    s, S, part, column = np.zeros(d), np.zeros((d, d)), np.empty((d, d), X.dtype), np.empty(d)
    with np.errstate(all="ignore"):  # a bound whose square over- or underflows: 0 or inf
        scale = None if data_norm is None else 1.0 / np.float64(data_norm) ** 2
    buffer, squares = None, np.empty(rows_)
    for start in range(0, n, rows_):
        rows = X[start:start + rows_]
        if shift is None:  # the product first, the rest then reads the block from cache
            with np.errstate(over="ignore", invalid="ignore"):  # a huge row's: recomputed below
                np.matmul(rows.T, rows, out=part)
        factor = None
        if data_norm is not None:
            sq, error = _squares(rows, kernels, squares)
            within = unclipped(sq, data_norm, error)  # most blocks: every factor 1
            if not within and error:  # near the bound: clip_rows' own measurement decides
                sq, error = row_squares(rows), 0.0
                within = unclipped(sq, data_norm)
            if within:
                if norms is not None:
                    np.multiply(sq, scale, out=norms[start:start + len(rows)])
            else:
                factor = clip_row_factors(rows, data_norm, squares=sq)
                if norms is not None:  # a clipped row, or one measured rescaled: read again
                    hard = (factor < 1.0) | ~((sq >= 1e-280) & (sq < np.inf))
                    with np.errstate(all="ignore"):
                        norms[start:start + len(rows)] = np.where(hard, 1.0, sq * scale)
                if not np.any(factor < 1.0):
                    factor = None
        if shift is None and (factor is None or factor.min() >= 0.5):
            r = rows  # X's own rows: no copy, their product taken
        else:
            if buffer is None:
                buffer = np.empty((rows_, d), dtype=X.dtype)
            r = buffer[:len(rows)]
            if factor is None:
                np.subtract(rows, shift, out=r)
            else:
                with np.errstate(all="ignore"):  # as clip_rows: a factor may underflow to 0
                    np.multiply(rows, factor[:, None], out=r)
                if shift is not None:
                    r -= shift
            factor = None
            np.matmul(r.T, r, out=part)
        S += part
        s += _columns(r, kernels, column)
        if factor is not None:  # mild clips: the clipped rows' products for the raw ones
            clipped = factor < 1.0
            raw = rows[clipped]
            cut = raw * factor[clipped, None]
            S += (cut.T @ cut).astype(np.float64) - raw.T @ raw
            s += cut.sum(axis=0, dtype=np.float64) - raw.sum(axis=0, dtype=np.float64)
    return s, S


def _second_clip(S, X, data_norm, mean, norms):
    """Correct ``S`` in place for the rows the centring takes past the bound: those rows read
    again, a block at a time, and clipped as :func:`~dptensor.algorithms.power.center_and_clip`
    does (a centred row pulled back to the bound)."""
    reach = 0.0 if mean is None else float(np.linalg.norm(mean.astype(np.float64))) / data_norm
    # Rows with ||c|| + ||mu|| within the bound stay; the rest are read again (all of them when
    # the mean itself is that far out). The test in float32 is well inside the slack.
    limit = (1.0 - reach) * (1.0 - _SLACK)
    limit = limit * limit if limit > 2.0 ** -60 else -np.inf
    rows_ = _rows(X.shape[1])
    starts = np.arange(0, X.shape[0], rows_)
    for start in starts[np.maximum.reduceat(norms, starts) >= limit]:
        C = X[start:start + rows_][norms[start:start + rows_] >= limit]
        C = clip_rows(C, data_norm)
        if mean is not None:
            C -= mean
        factor = clip_factors(C, data_norm).astype(C.dtype)
        out = factor < 1.0
        if not out.any():
            continue
        before = C[out]
        with np.errstate(all="ignore"):
            after = (before * factor[out, None]).astype(np.float64, copy=False)
        before = before.astype(np.float64, copy=False)
        S += after.T @ after - before.T @ before
