"""The top k eigenpairs of a released symmetric d x d matrix, at a cost that grows with k.

A dense eigendecomposition of a d x d matrix costs ``O(d^3)``: at d = 9066 items it is minutes,
for the three eigenvectors a spectral start uses. A Krylov method on the same matrix costs a
few passes over it, ``O(d^2)`` each. The matrix has already been released, so which solver reads
it, and to what precision, is post-processing: privacy is unchanged.

Which path is taken is a public rule of ``d`` and ``k`` only (:func:`use_top_k`); small or
nearly full problems keep the dense path, whose results are then unchanged bit for bit.

A released matrix ``A = C + E`` carries noise ``E`` of a public spectral norm (``2 sigma sqrt(d)``
for a symmetric Gaussian release of entry std ``sigma``). Resolving the eigenpairs of ``A`` far
below ``||E||`` buys nothing: ``E`` has already moved them from ``C``'s by up to ``||E||``
(Weyl, Davis-Kahan). Given ``noise_norm``, :func:`top_k_eigh` stops a block Krylov iteration as
soon as every residual ``||A v - lambda v||`` is below ``NOISE_FRACTION * noise_norm``; without it
(no noise) ARPACK resolves the pairs to ``TOP_K_TOL`` as before.
"""

from __future__ import annotations

import numpy as np
import scipy.linalg
import scipy.sparse.linalg

__all__ = ["TOP_K_MIN_DIM", "TOP_K_MAX_SHARE", "NOISE_FRACTION", "use_top_k", "top_k_eigh"]

#: Below this dimension LAPACK is fast enough (well under a second) and kept.
TOP_K_MIN_DIM = 500
#: Lanczos pays off while ``k`` is a small share of ``d``; past it the dense path is kept.
TOP_K_MAX_SHARE = 0.1
#: ARPACK's residual tolerance, relative to the eigenvalues: agreement with LAPACK to about this.
TOP_K_TOL = 1e-10
#: The residual a noisy matrix's eigenpairs are resolved to, as a share of the noise's norm. A
#: Ritz pair of residual ``r`` lies within ``r / gap`` (in ``sin`` of the angle) of the eigenvector
#: it approximates and its value within ``r``, where the noise itself moves them by up to
#: ``||E|| / gap`` and ``||E||`` (Davis-Kahan, Weyl): the solver adds at most 1e-3 of the noise's
#: own error bound, a change of about 0.2% at most in a ``sin^2`` distance to the truth.
NOISE_FRACTION = 1e-3
#: Columns a block carries beyond the ``k`` asked for: they speed the ``k``-th pair's convergence
#: on a clustered spectrum (the top of a noise-dominated matrix, the edge of a semicircle).
BLOCK_EXTRA = 8
#: Blocks of products at most (each one pass over ``A``); past them ARPACK finishes the job.
MAX_BLOCKS = 80


def use_top_k(d: int, k: int) -> bool:
    """Whether the k top eigenpairs of a d x d matrix are found by a Krylov method (public rule).

    >>> use_top_k(9066, 3), use_top_k(400, 3), use_top_k(1000, 200)
    (True, False, False)
    """
    return d >= TOP_K_MIN_DIM and 1 <= k <= TOP_K_MAX_SHARE * d


def _start(d: int, b: int = 1) -> np.ndarray:
    # A fixed start, not the fit's generator: the fit's later draws stay those of the dense path.
    # Random rather than all ones, which a centred matrix's top eigenvectors can be orthogonal to.
    start = np.random.default_rng(0).standard_normal((d, b))
    return start[:, 0] if b == 1 else start


def _select(w, k, order):
    key = -w if order == "algebraic" else -np.abs(w)
    return np.argsort(key, kind="stable")[:k]


def _extend(Q, Z, floor):
    """An orthonormal basis of the part of ``Z`` outside ``span(Q)`` (twice projected out, for
    orthogonality to rounding); columns below ``floor`` are dropped (an invariant subspace)."""
    for _ in range(2):
        Z = Z - Q @ (Q.T @ Z)
    U, s, _ = np.linalg.svd(Z, full_matrices=False)
    return U[:, s > floor]


def _block_krylov(A, k, order, target):
    """Rayleigh-Ritz on a growing block Krylov space of ``A`` (block Lanczos with full
    reorthogonalisation) until the ``k`` selected Ritz pairs' residuals are below ``target``.
    Returns ``(values, vectors)``, or ``None`` when ``MAX_BLOCKS`` passes did not get there."""
    d = A.shape[0]
    b = min(k + BLOCK_EXTRA, d // 4)
    Q = np.linalg.qr(_start(d, b))[0]
    AQ = A @ Q
    T = Q.T @ AQ
    floor = 1e-12 * max(float(np.linalg.norm(AQ, 2)), target)
    for _ in range(MAX_BLOCKS):
        theta, S = np.linalg.eigh((T + T.T) / 2.0)
        idx = _select(theta, k, order)
        if len(idx) < k:
            return None
        w, S = theta[idx], S[:, idx]
        V = Q @ S
        if np.linalg.norm(AQ @ S - V * w, axis=0).max() <= target:
            return w, V
        new = _extend(Q, AQ[:, -b:], floor)
        if new.shape[1] == 0 or Q.shape[1] + new.shape[1] > d // 2:
            return None
        A_new = A @ new
        T = np.block([[T, Q.T @ A_new], [A_new.T @ Q, new.T @ A_new]])
        Q, AQ = np.hstack([Q, new]), np.hstack([AQ, A_new])
    return None


def top_k_eigh(A: np.ndarray, k: int, *, order: str = "algebraic",
               noise_norm: float | None = None):
    """The k eigenpairs of a symmetric ``A`` largest by ``order``, in descending order of it.

    ``order="algebraic"``: the largest eigenvalues (ARPACK ``"LA"``); ``"magnitude"``: the
    largest in absolute value (``"LM"``). Returns ``(values, vectors)`` (vectors d x k). A
    deterministic function of ``A``: Krylov methods from a fixed start.

    ``noise_norm``: the typical spectral norm of the noise ``A`` was released with (public:
    ``2 sigma sqrt(d)`` for a symmetric Gaussian release of entry std ``sigma``); the pairs are
    then resolved to a residual ``NOISE_FRACTION * noise_norm`` by a block Krylov iteration (one
    pass over ``A`` a block, where a single-vector product costs as much). ``None`` or 0 (no
    noise): ARPACK to ``TOP_K_TOL``. Should a block iteration not get there within
    ``MAX_BLOCKS``, ARPACK answers; should ARPACK fail (no convergence, a start inside an
    invariant subspace of a degenerate matrix), the dense eigendecomposition: slower, never wrong.
    """
    if order not in ("algebraic", "magnitude"):
        raise ValueError(f"order must be 'algebraic' or 'magnitude', got {order!r}")
    d = A.shape[0]
    if noise_norm is not None and noise_norm > 0 and np.isfinite(noise_norm):
        found = _block_krylov(A, k, order, NOISE_FRACTION * float(noise_norm))
        if found is not None:
            return found
    try:
        w, V = scipy.sparse.linalg.eigsh(
            A, k=k, which="LA" if order == "algebraic" else "LM", v0=_start(d),
            tol=TOP_K_TOL, ncv=min(d - 1, max(2 * k + 1, 40)))
    except scipy.sparse.linalg.ArpackError:
        w, V = scipy.linalg.eigh(A)
    idx = _select(w, k, order)
    return w[idx], V[:, idx]
