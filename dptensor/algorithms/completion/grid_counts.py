"""The observed positions' counts per row of each mode (:class:`~.observations.Observations`)
and the dense grid's flat positions and mask (:class:`~.observations.DenseGrid`), each in one
compiled pass over the entries where NumPy makes a ``bincount`` per mode (with its own passes
for the bounds), or ``ravel_multi_index``, a ``bincount`` over the cells and a cast. Counts of
integers: the same numbers bit for bit. With numba installed (the ``fast`` extra); without it,
or where an index lies outside the shape, the caller's NumPy path runs (and refuses it as
before)."""
from __future__ import annotations

import math

import numpy as np

from ..compiled import compiled

__all__ = ["entry_counts", "grid_positions"]


#: Interleaved partial counts per mode in :func:`_counts_kernel`: entries sorted by a mode (as
#: the grid's C order leaves them) add to one row's count in a chain, each increment waiting on
#: the last; four counts of every row, entry ``e`` adding to ``e % 4``'s, break the chain (0.51
#: -> about 0.15 ms at 60^3 half observed). Integers: the same counts in any order.
_LANES = 4


def _counts_kernel(X, counts) -> bool:  # pragma: no cover (compiled)
    """``counts[m][i]``: the entries with ``X[e, m] == i``; False at an index out of range."""
    n, d = X.shape
    for m in range(d):
        c = counts[m]
        size = len(c)
        part = np.zeros((size, _LANES), dtype=np.int64)
        for e in range(n):
            i = X[e, m]
            if i < 0 or i >= size:
                return False
            part[i, e % _LANES] += 1
        for i in range(size):
            c[i] = float(part[i].sum())
    return True


def _grid_kernel(X, shape, flat, mask) -> float:  # pragma: no cover (compiled)
    """``flat[e]``: entry ``e``'s position in C order, ``mask``: the entries per cell; returns
    the most at one cell, or -1 at an index out of the shape."""
    n, d = X.shape
    most = 0.0
    for e in range(n):
        pos = 0
        for m in range(d):
            i = X[e, m]
            if i < 0 or i >= shape[m]:
                return -1.0
            pos = pos * shape[m] + i
        flat[e] = pos
        mask[pos] += 1.0
        if mask[pos] > most:
            most = mask[pos]
    return most


def _warm_counts(kernel):
    # order 3, in the entries' column-major layout (Observations'), as most fits
    kernel(np.zeros((2, 3), dtype=np.int64, order="F"), (np.zeros(1), np.zeros(1), np.zeros(1)))


def _warm_grid(kernel):
    X = np.zeros((2, 3), dtype=np.int64, order="F")
    kernel(X, np.ones(3, dtype=np.int64), np.empty(2, dtype=np.int64), np.zeros(1))


def entry_counts(X, shape):
    """Every mode's row counts (float), or ``None`` (no numba, another dtype, or an index out
    of range: the caller's ``bincount`` then)."""
    kernel = compiled("entry_counts", _counts_kernel, _warm_counts)
    if kernel is None or X.dtype != np.int64 or X.shape[1] != len(shape):
        return None
    counts = tuple(np.zeros(n) for n in shape)
    return list(counts) if kernel(X, counts) else None


def grid_positions(X, shape):
    """``(flat positions, mask, most entries at one cell)``, or ``None`` (as
    :func:`entry_counts`)."""
    kernel = compiled("grid_positions", _grid_kernel, _warm_grid)
    if kernel is None or X.dtype != np.int64 or X.shape[1] != len(shape):
        return None
    flat, mask = np.empty(len(X), dtype=np.int64), np.zeros(math.prod(shape))
    most = kernel(X, np.asarray(shape, dtype=np.int64), flat, mask)
    return None if most < 0 else (flat, mask, most)
