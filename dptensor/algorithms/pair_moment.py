r"""The weighted pair product ``C^T diag(w) C`` of sparse counts, as a dense symmetric matrix.

The topic model's pair moment (Analyze Gauss releases its upper triangle) is this product over
the documents' counts ``C`` (CSR, canonical: sorted, one entry per word). scipy's sparse
product forms it in two passes over every document's word pairs (a symbolic one for the
output's size, then the numeric one) and over both triangles. :func:`weighted_gram` walks each
document's pairs ``i <= j`` once, with a compiled loop when numba is installed (the ``fast``
extra), and mirrors the upper triangle.

Floating point: entry ``(i, j)``, ``i <= j``, is ``sum_c ((c_i w_c) c_j)`` over the documents in
their order, each product rounded as written and added to the running sum, which is the chain
scipy's product computes for the upper triangle (``(C^T diag(w)) C``: the left factor's entries
``c_i w_c`` first, then one product and one addition per document). The upper triangle, all that
is released, is therefore the same bit for bit on either path, and its rounding is that of a sum
of ``n`` terms, as the pair moment's :class:`~dptensor.mechanisms.Rounding` takes it
(``docs/derivations/latent.rst``, "Rounding"). Only the lower triangle changes: a mirror of the
upper one (exactly symmetric), where scipy's had the products in the other order.
"""
from __future__ import annotations

import warnings

import numpy as np
import scipy.sparse as sp

from .compiled import compiled

__all__ = ["weighted_gram", "weighted_gram_scipy", "compiled_kernel"]



#: Documents per block of :func:`_upper_pairs`: their counts (about 12 bytes a stored entry)
#: stay in cache while each output row in turn takes the block's pairs.
BLOCK_ROWS = 2048


def _upper_pairs(indptr, indices, data, weights, d):  # pragma: no cover (compiled)
    """The upper triangle of ``C^T diag(weights) C``, each entry summed over the rows in order.

    By blocks of rows, in order; within a block by output row ``i``: the block's rows holding
    word ``i``, in order, each adding its pairs ``(i, j >= i)`` to row ``i``. Every entry still
    takes its rows' products one after the other in row order, and row ``i`` (d numbers) stays
    in the fastest cache while it does (a row at a time, as scipy's product works).
    """
    out = np.zeros((d, d))
    n = len(indptr) - 1
    start = np.zeros(d + 1, dtype=np.int64)
    for lo_row in range(0, n, BLOCK_ROWS):
        hi_row = min(lo_row + BLOCK_ROWS, n)
        base, top = indptr[lo_row], indptr[hi_row]
        # the block's stored entries by word, rows in order within each word (a counting sort)
        start[:] = 0
        for a in range(base, top):
            start[indices[a] + 1] += 1
        for i in range(d):
            start[i + 1] += start[i]
        fill = start[:d].copy()
        entry = np.empty(top - base, dtype=np.int64)
        owner = np.empty(top - base, dtype=np.int64)
        for r in range(lo_row, hi_row):
            for a in range(indptr[r], indptr[r + 1]):
                i = indices[a]
                entry[fill[i]] = a
                owner[fill[i]] = r
                fill[i] += 1
        for i in range(d):
            row = out[i]
            for t in range(start[i], start[i + 1]):
                a, r = entry[t], owner[t]
                w = weights[r]
                if w == 0.0:  # adds +0.0 to sums that are >= +0.0: skipping it changes no bit
                    continue
                v = data[a] * w
                for b in range(a, indptr[r + 1]):  # sorted indices: j >= i
                    row[indices[b]] += v * data[b]
    return out


def _warm_up(kernel):
    kernel(np.array([0, 1], dtype=np.int32), np.array([0], dtype=np.int32), np.ones(1),
           np.ones(1), 1)  # int32 indices; the others compile when met


def compiled_kernel():
    """The compiled :func:`_upper_pairs`, or ``None`` without numba (or where it fails to
    compile: the scipy path is the same computation, slower). Once per process, on first use;
    plain floating point (no ``fastmath``, so nothing fused or reordered)."""
    return compiled("pair_moment", _upper_pairs, _warm_up)


def weighted_gram_scipy(C, weights):
    """``C^T diag(weights) C`` (dense) by scipy's sparse product: the fallback, and the reference
    the compiled path is tested against."""
    return (C.T @ sp.diags(weights) @ C).toarray()


def weighted_gram(C, weights, use_kernel=True):
    """``C^T diag(weights) C`` as a dense d x d array, exactly symmetric.

    ``C``: canonical CSR float64 (sorted indices, no duplicates); ``weights``: one per row, >= 0.
    The upper triangle is scipy's product bit for bit (see the module's notes); without the
    compiled kernel (or with ``use_kernel=False``) it is scipy's product, mirrored.
    """
    kernel = compiled_kernel() if use_kernel else None
    d = C.shape[1]
    upper = None
    if kernel is not None:
        try:  # int64 indices (over 2**31 entries) compile on first use; a failure falls back
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                upper = kernel(C.indptr, C.indices, C.data,
                               np.ascontiguousarray(weights, dtype=np.float64), d)
        except Exception:
            upper = None
    if upper is None:
        upper = weighted_gram_scipy(C, weights)
    # the strict upper triangle added onto zeros: exact (the weights are >= 0, so no sum is -0.0)
    out = np.triu(upper)
    out += np.triu(upper, 1).T
    return out
