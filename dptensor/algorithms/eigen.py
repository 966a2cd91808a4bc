"""The top k eigenpairs of a released symmetric d x d matrix, at a cost that grows with k.

A dense eigendecomposition of a d x d matrix costs ``O(d^3)``: at d = 9066 items it is minutes,
for the three eigenvectors a spectral start uses. Lanczos (ARPACK) on the same matrix costs a
few tens to a few hundreds of matrix-vector products, ``O(d^2)`` each. The matrix has already
been released, so which solver reads it, and to what precision, is post-processing: privacy is
unchanged.

Which path is taken is a public rule of ``d`` and ``k`` only (:func:`use_top_k`); small or
nearly full problems keep the dense path, whose results are then unchanged bit for bit.

A released matrix ``A = C + E`` carries noise ``E`` of a public spectral norm (``2 sigma sqrt(d)``
for a symmetric Gaussian release of entry std ``sigma``). Resolving the eigenpairs of ``A`` far
below ``||E||`` buys nothing: ``E`` has already moved them from ``C``'s by up to ``||E||``
(Weyl, Davis-Kahan). Given ``noise_norm``, :func:`top_k_eigh` stops Lanczos (ARPACK) as soon as
every residual ``||A v - lambda v||`` is below ``NOISE_FRACTION * noise_norm``; without it (no
noise) the pairs are resolved to ``TOP_K_TOL`` as before. On a noise-dominated top (clustered
eigenvalues at the semicircle's edge) that halves the products or better.

:func:`top_eigenpairs` serves the latent models' whitenings: arrays and implicit operators
(``matmat`` products over the data, never formed), Lanczos from a start the fit's generator
draws. Both solvers fall back to LAPACK should ARPACK fail: they run past a fit's spend.
"""

from __future__ import annotations

import numpy as np
import scipy.linalg
import scipy.sparse.linalg

__all__ = ["TOP_K_MIN_DIM", "TOP_K_MAX_SHARE", "NOISE_FRACTION", "use_top_k", "top_k_eigh",
           "top_eigenpairs"]

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
#: own error bound to the distance to the truth (to its ``sin^2``, at most 0.2% of the bound's).
NOISE_FRACTION = 1e-3
#: ARPACK's tolerance is relative to each eigenvalue; a noisy matrix's run first assumes its top
#: ones at most this many noise norms (a noise-dominated top sits at about one: the semicircle's
#: edge), and reruns at the tolerance the values found call for should a residual miss.
NOISE_SCALE_GUESS = 2.0


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


def _select(w, k, order):
    key = -w if order == "algebraic" else -np.abs(w)
    return np.argsort(key, kind="stable")[:k]


def _arpack(A, k, order, tol, start=None, ncv=None):
    d = A.shape[0]
    w, V = scipy.sparse.linalg.eigsh(
        A, k=k, which="LA" if order == "algebraic" else "LM",
        v0=_start(d) if start is None else start, tol=tol,
        ncv=min(d - 1, max(2 * k + 1, 40)) if ncv is None else ncv)
    idx = _select(w, k, order)
    return w[idx], V[:, idx]


def _to_noise(A, k, order, noise_norm):
    """ARPACK stopped once every residual ``||A v - lambda v||`` is below ``NOISE_FRACTION *
    noise_norm``, checked on the pairs found; ``None`` where two tolerances did not get there.
    ARPACK's criterion is relative (a residual below ``tol |lambda|``): the first run assumes
    ``|lambda| <= NOISE_SCALE_GUESS * noise_norm``, the second the largest value the first found
    (twice it, for margin)."""
    target = NOISE_FRACTION * noise_norm
    scale = NOISE_SCALE_GUESS * noise_norm
    for _ in range(2):
        w, V = _arpack(A, k, order, NOISE_FRACTION * noise_norm / scale)
        if np.linalg.norm(A @ V - V * w, axis=0).max() <= target:
            return w, V
        scale = 2.0 * max(scale, float(np.abs(w).max()))
    return None


def top_k_eigh(A: np.ndarray, k: int, *, order: str = "algebraic",
               noise_norm: float | None = None):
    """The k eigenpairs of a symmetric ``A`` largest by ``order``, in descending order of it.

    ``order="algebraic"``: the largest eigenvalues (ARPACK ``"LA"``); ``"magnitude"``: the
    largest in absolute value (``"LM"``). Returns ``(values, vectors)`` (vectors d x k). A
    deterministic function of ``A``: Lanczos from a fixed start.

    ``noise_norm``: the typical spectral norm of the noise ``A`` was released with (public:
    ``2 sigma sqrt(d)`` for a symmetric Gaussian release of entry std ``sigma``); the pairs are
    then resolved to residuals below ``NOISE_FRACTION * noise_norm`` (checked). ``None`` or 0 (no
    noise), or should that not be reached: ARPACK to ``TOP_K_TOL``. Should ARPACK fail (no
    convergence, a start inside an invariant subspace of a degenerate matrix), the dense
    eigendecomposition: slower, never wrong.
    """
    if order not in ("algebraic", "magnitude"):
        raise ValueError(f"order must be 'algebraic' or 'magnitude', got {order!r}")
    if noise_norm is not None and noise_norm > 0 and np.isfinite(noise_norm):
        try:
            found = _to_noise(A, k, order, float(noise_norm))
        except scipy.sparse.linalg.ArpackError:
            found = None
        if found is not None:
            return found
    try:
        return _arpack(A, k, order, TOP_K_TOL)
    except scipy.sparse.linalg.ArpackError:
        w, V = scipy.linalg.eigh(A)
    idx = _select(w, k, order)
    return w[idx], V[:, idx]


def _formed(operator) -> np.ndarray:
    """The symmetric d x d matrix of an operator with ``matmat``, from d products."""
    A = operator.matmat(np.eye(operator.shape[0]))
    return (A + A.T) / 2.0


def _dense_top(A: np.ndarray, k: int):
    d = A.shape[0]
    return scipy.linalg.eigh(A, subset_by_index=[d - k, d - 1])


def top_eigenpairs(A, k: int, rng, *, dense_below: int = 600):
    """The k algebraically largest eigenpairs of a symmetric d x d ``A`` (values descending).

    ``A`` is an array, or an operator with ``shape`` and ``matmat`` (never formed). Small dense d:
    LAPACK on the requested subset. Otherwise Lanczos (ARPACK), started from a vector drawn from
    ``rng`` so that the result is a deterministic function of ``A`` and the seed. Should ARPACK
    fail (:func:`top_k_eigh` alike), LAPACK on ``A``, formed from d products if implicit: a fit
    past its spend never fails on what its solver makes of a released matrix.
    """
    d = A.shape[0]
    if not isinstance(A, np.ndarray) and k >= d - 1:
        A = _formed(A)  # Lanczos needs k < d: with (nearly) every eigenpair asked for, form A
    if isinstance(A, np.ndarray) and (d <= dense_below or k >= d - 1):
        w, V = _dense_top(A, k)
    else:
        linear = A if isinstance(A, np.ndarray) else scipy.sparse.linalg.LinearOperator(
            (d, d), matvec=lambda v: A.matmat(v.reshape(-1, 1)).ravel(), matmat=A.matmat,
            dtype=np.float64)
        try:
            w, V = _arpack(linear, k, "algebraic", 1e-8, start=rng.standard_normal(d),
                           ncv=min(d, max(4 * k, 40)))
        except scipy.sparse.linalg.ArpackError:
            w, V = _dense_top(A if isinstance(A, np.ndarray) else _formed(A), k)
    order = np.argsort(-w, kind="stable")
    return w[order], V[:, order]
