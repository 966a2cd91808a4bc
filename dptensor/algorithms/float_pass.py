r"""A fit without privacy on rows in floating point, a block of rows at a time: no copy of ``X``.

The float path clips the rows, centres them on their mean and clips them again, then takes the
total ``sum_i ||c_i||^2`` and the Gram matrix ``sum_i c_i c_i^T``. Held whole, the clipped and
centred rows are one more ``X``; here one pass sums the clipped rows (for the mean) and a second
makes each block's centred rows in a buffer that stays in cache and adds its products to the
total and to a float64 Gram matrix. Each row goes through the same maps as
:func:`~dptensor.mechanisms.clip_rows` and :func:`~dptensor.algorithms.power.center_and_clip`;
the sums are float sums in another order (no release reads them: the fit has no privacy).
"""
from __future__ import annotations

import numpy as np

from ..mechanisms.releases import clip_factors

__all__ = ["clip_factors_mean", "centred_gram", "float_pass_bytes"]

#: Rows of one block: about 1 MB of float64 rows at d = 128, large enough for a fast product.
_BLOCK = 1024


def _blocks(X):
    rows = max(_BLOCK, (1 << 17) // max(X.shape[1], 1))
    for start in range(0, X.shape[0], rows):
        yield X[start:start + rows]


def float_pass_bytes(n: int, d: int) -> int:
    """Bytes the two passes allocate at most (float64): one clip factor per row, a few blocks of
    rows (the buffer, a float32 block widened for the mean) and the d x d sums."""
    rows = max(_BLOCK, (1 << 17) // max(d, 1))
    return 8 * (n + 3 * rows * d + 3 * d * d)


def _factors(rows, data_norm):
    """:func:`~dptensor.mechanisms.clip_rows`'s factors (float32 rows aimed below the bound)."""
    factor = clip_factors(rows, data_norm)
    eps = np.finfo(rows.dtype).eps
    if eps > np.finfo(np.float64).eps:
        factor = np.where(factor < 1.0, factor * (1.0 - 4.0 * eps), factor)
    return factor.astype(rows.dtype, copy=False)


def _first_clip(rows, factor, mean, out):
    """``clip_rows(rows) - mean`` written into ``out`` (one subtraction when no row is clipped;
    ``factor``: the rows' clip factors, None without a bound)."""
    if factor is None or factor.min() >= 1.0:
        if mean is None:
            out[...] = rows
        else:
            np.subtract(rows, mean, out=out)
        return out
    with np.errstate(all="ignore"):  # as clip_rows: a factor may underflow to 0
        np.multiply(rows, factor[:, None], out=out)
    if mean is not None:
        out -= mean
    return out


def _second_clip(C, data_norm):
    """Clip the rows of ``C`` in place as :func:`~dptensor.algorithms.power.center_and_clip`
    does; returns their ``sum ||c||^2`` (float64), from the squared norms the clip measured."""
    with np.errstate(all="ignore"):
        sq = np.einsum("ij,ij->i", C, C, dtype=np.float64)
        if data_norm is None:
            return float(sq.sum())
        if not np.all((sq >= 1e-280) & (sq < np.inf)):  # zero, tiny or huge rows (rare):
            C *= clip_factors(C, data_norm)[:, None].astype(C.dtype)  # measured rescaled
            return float(np.einsum("ij,ij->", C, C, dtype=np.float64))
        factor = np.minimum(1.0, data_norm / np.sqrt(sq))  # clip_factors' own, for such rows
        if factor.min() < 1.0:
            C *= factor[:, None].astype(C.dtype)
        return float(sq @ (factor * factor))


def clip_factors_mean(X, data_norm, center=True):
    """``(factors, mean)``: every row's clip factor (in ``X``'s dtype, one per row: ``X / d``
    bytes; None without a bound) and the mean of the clipped rows, summed in float64, in ``X``'s
    dtype (as :func:`~dptensor.algorithms.power.private_mean` without noise; None when not
    ``center``). One pass over ``X``."""
    factors = None if data_norm is None else np.empty(X.shape[0], dtype=X.dtype)
    total, start = np.zeros(X.shape[1]), 0
    for rows in _blocks(X):
        if factors is not None:
            factor = factors[start:start + len(rows)] = _factors(rows, data_norm)
        start += len(rows)
        if not center:
            continue
        with np.errstate(all="ignore"):
            rows64 = rows.astype(np.float64, copy=False)
            total += rows64.sum(axis=0) if factors is None else factor.astype(np.float64) @ rows64
    mean = (total / X.shape[0]).astype(X.dtype, copy=False) if center else None
    return factors, mean


def centred_gram(X, factors, data_norm, mean):
    """``(C, total)``: ``sum c c^T`` (in ``X``'s dtype, summed in float64 over the blocks) and
    ``sum ||c||^2`` (float64) of the rows clipped (by ``factors``), centred on ``mean`` and
    clipped again."""
    d = X.shape[1]
    gram, total, start = np.zeros((d, d)), 0.0, 0
    buffer = None
    for rows in _blocks(X):
        if buffer is None:
            buffer = np.empty(rows.shape, dtype=X.dtype)
        factor = None if factors is None else factors[start:start + len(rows)]
        start += len(rows)
        C = _first_clip(rows, factor, mean, buffer[:len(rows)])
        total += _second_clip(C, data_norm)
        gram += C.T @ C
    return gram.astype(X.dtype, copy=False), total
