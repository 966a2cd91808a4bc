"""What the public positions of a value-level fit say of themselves: whether who rated what
follows a structure beyond each row's count (:func:`position_ratio`), the input of
``perturbation="auto"``'s choice of the implicit mode."""
from __future__ import annotations

import numpy as np
import scipy.sparse as sp
from scipy.sparse.linalg import svds

__all__ = ["position_ratio"]


def _second_value(rows, cols, shape) -> float:
    """The second singular value of the incidence matrix ``A`` (ones where a pair is observed)
    scaled as ``D_r^{-1/2} A D_c^{-1/2}`` (its first is 1)."""
    A = sp.csr_matrix((np.ones(len(rows)), (rows, cols)), shape=shape)
    A.data[:] = 1.0  # a pair observed at several positions of the other modes counts once
    dr = np.maximum(np.asarray(A.sum(axis=1)).ravel(), 1.0)
    dc = np.maximum(np.asarray(A.sum(axis=0)).ravel(), 1.0)
    N = sp.diags(dr ** -0.5) @ A @ sp.diags(dc ** -0.5)
    if min(shape) <= 3:
        return float(np.sort(np.linalg.svd(N.toarray(), compute_uv=False))[-2])
    values = svds(N, k=2, return_singular_vectors=False, random_state=0)
    return float(np.min(values))


def position_ratio(X, shape, modes=(0, 1), seed=0) -> float:
    """How far the pairs of ``modes`` (users and items) that hold entries follow a structure of
    their own: the second singular value of their normalised incidence matrix over that of the
    same entries with the second mode's indices shuffled (every row keeps its count, every column
    its count, the pairs are random: a configuration-model null). About 1 for positions drawn at
    random from the rows' and columns' popularity; 2.4 on all of MovieLens-100K's ratings (1.8
    on ua's training ratings: it grows with their number), where people rate what they expect
    to like. Reads the positions only (public at value level), with a fixed seed."""
    a, b = (np.asarray(X[:, m]) for m in modes)
    size = (int(shape[modes[0]]), int(shape[modes[1]]))
    if min(size) < 2:  # one user or one item: no second direction, no structure to follow
        return 0.0
    null = _second_value(a, np.random.default_rng(seed).permutation(b), size)
    return _second_value(a, b, size) / max(null, np.finfo(float).tiny)
