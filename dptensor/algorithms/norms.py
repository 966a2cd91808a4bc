"""Column norms that neither overflow nor underflow: a power step's normalisation."""
from __future__ import annotations

import numpy as np

__all__ = ["column_norms", "square_range"]


def square_range(dtype, rows: int):
    """The magnitudes ``(lo, hi)`` between which a column's largest entry keeps its sum of
    ``rows`` squares in ``dtype`` from overflowing and from losing digits to underflow."""
    info = np.finfo(dtype)
    return float(np.sqrt(info.tiny) / info.eps), float(np.sqrt(info.max / max(rows, 1)))


def column_norms(Y: np.ndarray) -> np.ndarray:
    """The l2 norms of a real ``Y``'s columns: the plain sum of squares (np.linalg.norm's
    numbers) where the column's largest magnitude is within :func:`square_range`, else of the
    column scaled by it. At 1e160 the squares overflowed, at 1e-170 they underflowed to 0, and
    the normalised columns came out zero."""
    big = np.max(np.abs(Y), axis=0) if Y.size else np.zeros(Y.shape[1:])
    lo, hi = square_range(Y.dtype, Y.shape[0])
    far = (big > 0) & np.isfinite(big) & ((big < lo) | (big > hi))
    if not np.any(far):
        return np.sqrt(np.add.reduce(Y * Y, axis=0))
    norms = np.empty(Y.shape[1:], dtype=Y.dtype)
    near = ~far
    norms[near] = np.sqrt(np.add.reduce(Y[:, near] ** 2, axis=0))
    Z = Y[:, far] / big[far]
    norms[far] = big[far] * np.sqrt(np.add.reduce(Z * Z, axis=0))
    return norms
