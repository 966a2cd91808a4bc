r"""Sparse rows (``scipy.sparse`` CSR or CSC) as input: densified one block of rows at a time.

The PCA family's statistics are sums over rows of per-row maps (clip, centre, clip again, put on
the grid), and a per-row map of a dense block is the same map of the same rows of the whole
array. :class:`SparseRows` therefore holds the CSR matrix and the maps still to apply, and hands
out dense blocks of :func:`block_rows` rows, mapped: memory O(block d) beyond the matrix itself,
and no mean is ever subtracted from the sparse matrix (only from a block's dense copy).

An exact statistic (:mod:`dptensor.algorithms.exact`) summed block by block is the one-shot
integer sum, so a private fit on sparse rows releases bit for bit what the dense fit releases
with the same seed; float sums (a fit without privacy, the adaptive power method) differ from the
dense ones by rounding only, within the same :class:`~dptensor.mechanisms.Rounding` allowance,
which holds for any order of the additions.
"""
from __future__ import annotations

import numpy as np
import scipy.sparse as sp

__all__ = ["SparseRows", "block_rows", "row_blocks", "map_row_blocks"]

#: The most entries (rows times features) one densified block holds: 32 MiB of float64.
BLOCK_ENTRIES = 2 ** 22


def block_rows(n_features: int) -> int:
    """Rows per densified block at ``n_features`` columns (public: a function of the shape)."""
    return max(1, BLOCK_ENTRIES // max(int(n_features), 1))


def row_blocks(X, rows=None):
    """Dense blocks of consecutive rows of ``X`` (sparse: densified one at a time; dense: views)."""
    if sp.issparse(X):
        X = X.tocsr()
    rows = rows or block_rows(X.shape[1])
    for start in range(0, X.shape[0], rows):
        block = X[start:start + rows]
        yield block.toarray() if sp.issparse(block) else block


def map_row_blocks(fn, X):
    """``fn(X)`` for a dense X; for a sparse X the rows of ``fn`` of each dense block, stacked
    (``fn`` maps rows to rows: a projection, a per-row score)."""
    if not sp.issparse(X):
        return fn(X)
    parts = [fn(block) for block in row_blocks(X)]
    return np.concatenate(parts) if parts else fn(np.zeros((0, X.shape[1]), dtype=X.dtype))


class SparseRows:
    """Rows of a sparse matrix with per-row maps still to apply, read one dense block at a time.

    ``blocks()`` densifies each block of :func:`block_rows` rows and applies the maps in order
    (``fn(block, *args)``, each a function of every row alone); :meth:`map` adds a map, lazily.
    """

    ndim = 2

    def __init__(self, X, maps=()):
        self.X = X if X.format == "csr" else X.tocsr()
        self.maps = tuple(maps)
        self.shape = self.X.shape
        self.dtype = self.X.dtype

    def map(self, fn, *args) -> "SparseRows":
        """The same rows with ``fn(block, *args)`` applied after the present maps."""
        return SparseRows(self.X, self.maps + ((fn, args),))

    def blocks(self):
        for block in row_blocks(self.X):
            for fn, args in self.maps:
                block = fn(block, *args)
            yield block

    def block_sum(self, fn):
        """``sum`` of ``fn(block)`` over the blocks (of a 0-row block when there are none)."""
        total = None
        for block in self.blocks():
            part = fn(block)
            total = part if total is None else total + part
        return fn(np.zeros((0, self.shape[1]), dtype=self.dtype)) if total is None else total


class SparseGram:
    """``A = X^T X`` of mapped sparse rows (:class:`SparseRows`) applied as ``sum_b X_b^T (X_b
    Q)`` over dense blocks: :class:`~dptensor.algorithms.operators.GramMatrix` for sparse rows."""

    def __init__(self, rows: SparseRows):
        self.rows = rows
        self.shape = (rows.shape[1], rows.shape[1])

    def matmat(self, Q):
        return self.rows.block_sum(lambda B: B.T @ (B @ Q))
