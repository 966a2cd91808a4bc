"""The top k eigenpairs of a released symmetric d x d matrix, at a cost that grows with k.

A dense eigendecomposition of a d x d matrix costs ``O(d^3)``: at d = 9066 items it is minutes,
for the three eigenvectors a spectral start uses. Lanczos (ARPACK) on the same matrix costs a
few tens to a few hundreds of matrix-vector products, ``O(d^2)`` each. The matrix has already
been released, so which solver reads it is post-processing: privacy is unchanged.

Which path is taken is a public rule of ``d`` and ``k`` only (:func:`use_top_k`); small or
nearly full problems keep the dense path, whose results are then unchanged bit for bit.
"""

from __future__ import annotations

import numpy as np
import scipy.linalg
import scipy.sparse.linalg

__all__ = ["TOP_K_MIN_DIM", "TOP_K_MAX_SHARE", "use_top_k", "top_k_eigh"]

#: Below this dimension LAPACK is fast enough (well under a second) and kept.
TOP_K_MIN_DIM = 500
#: Lanczos pays off while ``k`` is a small share of ``d``; past it the dense path is kept.
TOP_K_MAX_SHARE = 0.1
#: ARPACK's residual tolerance, relative to the eigenvalues: agreement with LAPACK to about this.
TOP_K_TOL = 1e-10


def use_top_k(d: int, k: int) -> bool:
    """Whether the k top eigenpairs of a d x d matrix are found by Lanczos (a public rule).

    >>> use_top_k(9066, 3), use_top_k(400, 3), use_top_k(1000, 200)
    (True, False, False)
    """
    return d >= TOP_K_MIN_DIM and 1 <= k <= TOP_K_MAX_SHARE * d


def _start(d: int) -> np.ndarray:
    # A fixed start, not the fit's generator: the fit's later draws stay those of the dense path.
    # Random rather than all ones, which a centred matrix's top eigenvectors can be orthogonal to.
    return np.random.default_rng(0).standard_normal(d)


def top_k_eigh(A: np.ndarray, k: int, *, order: str = "algebraic"):
    """The k eigenpairs of a symmetric ``A`` largest by ``order``, in descending order of it.

    ``order="algebraic"``: the largest eigenvalues (ARPACK ``"LA"``); ``"magnitude"``: the
    largest in absolute value (``"LM"``). Returns ``(values, vectors)`` (vectors d x k). A
    deterministic function of ``A``: Lanczos from a fixed start. Should ARPACK fail (no
    convergence, a start inside an invariant subspace of a degenerate matrix) the dense
    eigendecomposition answers instead: slower, never wrong.
    """
    if order not in ("algebraic", "magnitude"):
        raise ValueError(f"order must be 'algebraic' or 'magnitude', got {order!r}")
    d = A.shape[0]
    try:
        w, V = scipy.sparse.linalg.eigsh(
            A, k=k, which="LA" if order == "algebraic" else "LM", v0=_start(d),
            tol=TOP_K_TOL, ncv=min(d - 1, max(2 * k + 1, 40)))
    except scipy.sparse.linalg.ArpackError:
        w, V = scipy.linalg.eigh(A)
    key = -w if order == "algebraic" else -np.abs(w)
    idx = np.argsort(key, kind="stable")[:k]
    return w[idx], V[:, idx]
