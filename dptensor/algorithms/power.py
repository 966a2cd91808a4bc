r"""The power methods on a symmetric matrix, and what they share with the tensor power methods.

Two ways to release the top-k principal subspace of a symmetric matrix ``A`` under a Gaussian
mechanism (``docs/derivations/pca.rst``):

* the **noisy power method** ``X_l = QR(A X_{l-1} + G_l)``, ``L`` releases of a d x p block, each
  priced at its own sensitivity: row-level for data (``A = sum_i x_i x_i^T`` over clipped rows,
  never formed) or entry-level for a precomputed symmetric matrix (PPM, noise scaled by the
  previous iterate's largest rows);
* **Analyze Gauss** (Dwork–Talwar–Thakurta–Zhang): one symmetric Gaussian matrix added to
  ``A``, then its top-k eigenvectors.

Beside them: their sensitivities, iteration schedules and budget shares, the private mean and
total variance of clipped rows, the centring and clipping of rows, the eigenvalues' noise level,
and the small block helpers every power method uses (batch or streaming, matrix or tensor: draw
a block of unit columns, renormalise it, pick the winning restart, fix released signs). Plain
arrays in, arrays out: :class:`~dptensor.PrivatePCA` plans the noise, records the spend and calls
them. Every sensitivity is derived in ``docs/derivations/pca.rst`` and checked by brute force in
``tests/test_pca.py``.
"""
from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np
import scipy.linalg

from .dask import is_dask_array
from .norms import column_norms
from .eigen import top_k_eigh, use_top_k
from .sparse import SparseRows
from .exact import BITS, Exact, exact_gaussian_release, grid_rows
from ..mechanisms import (
    Rounding,
    clip_factors,
    clip_rows,
    gaussian_release,
    symmetric_gaussian_release,
)

__all__ = ["PCAResult", "orthonormalize", "rayleigh_ritz", "noisy_power_method", "analyze_gauss",
           "private_mean", "private_total", "center_and_clip", "row_power_sensitivity",
           "entry_power_sensitivity", "covariance_sensitivity", "total_variance_sensitivity",
           "auto_n_iter", "power_schedule", "eigenvalue_noise_level", "total_rounding",
           "mean_rounding", "clip_center_clip", "grid_centred", "MEAN_SHARE", "FINAL_STEP_SHARE",
           "TOTAL_SHARE", "MAX_DENSE_FEATURES",
           "random_unit_columns", "normalize_columns", "select_restart", "flip_signs"]

#: Share of the squared GDP budget ``mu^2`` spent on the private mean when ``centered=False``:
#: ``mu_mean^2 = MEAN_SHARE mu^2`` and the spectral part gets the rest, so the whole fit is exactly
#: ``mu``-GDP. The mean's error enters the covariance only to second order (``n ||e||^2``) while
#: the spectral noise enters to first order, so a small share suffices; it raises the spectral
#: noise by ``1/sqrt(0.9) - 1``, about 5%.
MEAN_SHARE = 0.1

#: Share of the squared GDP budget ``mu^2`` spent on the total variance ``sum_i ||c_i||^2`` of a
#: private row-level fit (``calibration="exact"``), the denominator of
#: ``explained_variance_ratio_``. Its sensitivity is ``B^2``, against ``n`` times a typical
#: ``||c||^2``, so its relative error is about ``B^2 / (mu sqrt(0.02) n mean ||c||^2)``: 1.5% at
#: ``mu = 1``, ``n = 2000`` and ``mean ||c||^2 = B^2 / 4``. It raises the spectral noise by
#: ``1/sqrt(0.98) - 1``, about 1%.
TOTAL_SHARE = 0.02

#: Share of the spectral ``mu^2`` given to the last power step (exact calibration); see
#: :func:`power_schedule`.
FINAL_STEP_SHARE = 0.5

#: ``method="auto"`` uses Analyze Gauss for row-level data with at most this many features (its
#: d x d matrix is then at most 32 MB in float64 and its eigendecomposition takes seconds), and
#: the power method beyond, where only O(dp) iterates fit comfortably.
MAX_DENSE_FEATURES = 2000


# --------------------------------------------------------------------------------------------
# Sensitivities (derived in docs/derivations/pca.rst, brute-forced in tests/test_pca.py)
# --------------------------------------------------------------------------------------------

def row_power_sensitivity(data_norm: float, block: int) -> float:
    r"""Exact l2 (Frobenius) sensitivity of ``A X`` for ``A = sum_i x_i x_i^T`` under replace-one.

    Rows have norm at most ``data_norm = B`` and ``X`` is d x p with orthonormal columns. With
    ``M = a a^T - b b^T`` (rank 2, eigenvalues ``l1 >= 0 >= l2``),
    ``||M X||_F^2 = tr(X^T M^2 X)`` is at most the sum of the ``p`` largest eigenvalues of ``M^2``:
    ``l1^2 + l2^2 = |a|^4 + |b|^4 - 2 (a.b)^2 <= 2 B^4`` for ``p >= 2``, and
    ``max(l1^2, l2^2) <= B^4`` for ``p = 1``. Both are attained (orthogonal ``a, b`` of norm ``B``
    inside the span of ``X``), so the sensitivity is ``sqrt(min(p, 2)) B^2``: a factor ``sqrt(2)``
    below the triangle-inequality bound ``2 B^2``.

    >>> round(row_power_sensitivity(1.0, 3), 6)
    1.414214
    """
    return float(data_norm) ** 2 * math.sqrt(min(int(block), 2))


def entry_power_sensitivity(X: np.ndarray, entry_bound: float = 1.0) -> float:
    r"""Exact l2 sensitivity of ``A X`` under the symmetric matrix-entry relation.

    Neighbouring symmetric matrices differ in one pair ``A_ij = A_ji`` (``i != j``) or one diagonal
    entry, by at most ``entry_bound``. Then ``Delta(A X) = c (e_i X_j + e_j X_i)`` (row ``i`` of
    the product moves by row ``j`` of ``X`` and vice versa), of Frobenius norm
    ``|c| sqrt(||X_i||^2 + ||X_j||^2)``, or ``|c| ||X_i||`` on the diagonal. The largest is
    ``entry_bound * sqrt(r_1^2 + r_2^2)`` with ``r_1 >= r_2`` the two largest row norms of ``X``:
    at most ``sqrt(2 p) ||X||_inf``, the Hardt–Price scale times ``sqrt(2)`` for the pair.
    ``X`` is a previous release, so a noise scale that depends on it is fine.
    """
    sq = np.einsum("ij,ij->i", X, X)
    top = np.partition(sq, sq.size - 2)[-2:] if sq.size >= 2 else sq
    return float(entry_bound) * math.sqrt(float(np.sum(top)))


def total_variance_sensitivity(data_norm: float) -> float:
    r"""Exact sensitivity of the total ``sum_i ||c_i||^2`` over rows clipped to ``||c|| <= B``:
    ``B^2``.

    Replace-one changes one term from ``||a||^2`` to ``||b||^2``, both in ``[0, B^2]``, so the total
    moves by at most ``B^2``, attained at ``||a|| = B``, ``b = 0``.

    >>> total_variance_sensitivity(3.0)
    9.0
    """
    return float(data_norm) ** 2


def covariance_sensitivity(data_norm: float) -> float:
    r"""Exact l2 sensitivity of the upper triangle (diagonal included) of ``sum_i x_i x_i^T``.

    Replace-one with rows of norm at most ``B`` moves the matrix by ``M = a a^T - b b^T``; the
    upper triangle has squared norm ``(||M||_F^2 + sum_i M_ii^2) / 2``, each term at most
    ``2 B^4`` (``||M||_F^2 = |a|^4 + |b|^4 - 2 (a.b)^2``, ``sum_i (a_i^2 - b_i^2)^2 <=
    sum_i a_i^4 + b_i^4``), both attained at ``a = B e_1``, ``b = B e_2``: ``sqrt(2) B^2``.
    """
    return math.sqrt(2.0) * float(data_norm) ** 2


# --------------------------------------------------------------------------------------------
# Algorithms
# --------------------------------------------------------------------------------------------

#: ``noisy_power_method``'s ``rounding`` when none is given: a float product then has no release.
_NO_ROUNDING = object()


class PCAResult(NamedTuple):
    """What a spectral algorithm returns.

    ``components`` (k, d) orthonormal rows, ``eigenvalues`` (k,) estimates of the matching
    eigenvalues of ``A``, ``n_iter`` the number of products (releases) made, ``total`` the trace of
    the released matrix (Analyze Gauss only, else ``None``), ``basis`` the last d x p iterate,
    ``noise_std`` the std of each noise entry of the last release (0 without noise; a public
    number).
    """

    components: np.ndarray
    eigenvalues: np.ndarray
    n_iter: int
    total: float | None = None
    basis: np.ndarray | None = None
    noise_std: float = 0.0


def orthonormalize(Y: np.ndarray) -> np.ndarray:
    """Orthonormal basis of the columns of ``Y`` (reduced QR), signs fixed so that ``diag(R) >= 0``.

    Fixing the signs makes the factorisation unique, so the power method is a deterministic
    function of its releases. Keeps ``Y``'s floating dtype.
    """
    Q, R = np.linalg.qr(Y)
    signs = np.where(np.diagonal(R) < 0, -1.0, 1.0).astype(Q.dtype, copy=False)
    return Q * signs


def rayleigh_ritz(X: np.ndarray, Y: np.ndarray, n_components: int):
    """Top-k directions and eigenvalue estimates from the last product ``Y = A X + G``.

    Components are the top left singular vectors of ``Y`` (the most converged subspace, one step
    past ``X``), ordered by singular value, i.e. by ``|eigenvalue|``. Eigenvalues are the Ritz
    values of ``A`` on ``span(X)``: eigenvalues of the symmetric part of ``X^T Y = X^T A X + X^T
    G``, ordered by magnitude; unlike singular values they are not inflated by the noise. Both are
    post-processing of ``Y``, so they cost nothing more. Rows get a deterministic sign (largest
    entry positive).
    """
    U = np.linalg.svd(Y, full_matrices=False)[0][:, :n_components]
    H = X.T @ Y
    ritz = np.linalg.eigvalsh((H + H.T) / 2)
    ritz = ritz[np.argsort(-np.abs(ritz), kind="stable")][:n_components]
    return flip_signs(U.T), ritz


def noisy_power_method(operator, n_components: int, n_iter: int, rng: np.random.Generator, *,
                       noise_multiplier: float = 0.0, sensitivity=1.0, n_oversamples: int = 0,
                       init: np.ndarray | None = None, tol: float = 0.0, verbose: int = 0,
                       dtype=None, rounding=_NO_ROUNDING) -> PCAResult:
    r"""The noisy power method (Hardt & Price 2014, Fig. 1) on a symmetric operator.

    ``X_0 = QR(G_0)`` from a data-independent Gaussian d x p start (``p = n_components +
    n_oversamples``); for ``l = 1..n_iter``: ``Y_l = A X_{l-1} + G_l``, ``X_l = QR(Y_l)``, with
    ``G_l`` entries ``N(0, (noise_multiplier * s_l)^2)``. The output is extracted from the last
    product by :func:`rayleigh_ritz`.

    Parameters
    ----------
    operator : object with ``shape == (d, d)`` and ``matmat(Q) -> A @ Q``
        e.g. :class:`~dptensor.algorithms.operators.GramMatrix` (data, ``X^T (X Q)``, never forming
        d x d) or :class:`~dptensor.algorithms.operators.DenseMatrix`; or
        :class:`~dptensor.algorithms.exact.ExactGram`, whose exact products are released on their
        grid (private fits on rows).
    n_components, n_iter : int
        ``n_iter`` is the number of products, each one Gaussian release when noise is added.
    rng : numpy.random.Generator
    noise_multiplier : float or sequence of n_iter floats, default=0
        Gaussian multiplier ``z`` of every step, or one per step (see :func:`power_schedule`);
        0: the exact power method.
    sensitivity : float or callable, default=1
        The l2 sensitivity ``s_l`` of one product, or ``sensitivity(X_prev) -> float`` for a scale
        that depends on the previous (public) iterate, as in the entry-level PPM.
    n_oversamples : int, default=0
    init : array (d, p), optional
        A public start; orthonormalised first.
    rounding : Rounding, callable or None
        The floating-point rounding of a float product ``A X`` (:class:`~dptensor.mechanisms.
        Rounding`, or ``rounding(X_prev) -> Rounding``), added to its sensitivity; ``None`` says
        the products are no float sums. Exact products (:class:`~dptensor.algorithms.exact.Exact`)
        need none. A noisy release of a float product without it is refused (``TypeError``): a
        silent default would release the sum without its allowance.
    tol : float, default=0
        Stop early once the top-k part of the iterate moves by less than ``tol`` (spectral norm of
        its component outside the previous span). Use only without noise: a private plan pays for
        every release it planned, so stopping early would only waste it.

    Returns
    -------
    PCAResult
    """
    d = operator.shape[0]
    p = n_components + n_oversamples
    dtype = np.dtype(dtype or np.float64)
    X = orthonormalize(rng.standard_normal((d, p)).astype(dtype) if init is None
                       else np.asarray(init, dtype=dtype))
    z = np.broadcast_to(np.asarray(noise_multiplier, dtype=float), (n_iter,))
    Y, std = None, 0.0
    for it in range(1, n_iter + 1):
        Y = operator.matmat(X)
        std = 0.0
        if z[it - 1] > 0:
            s = sensitivity(X) if callable(sensitivity) else sensitivity
            std = float(s) * float(z[it - 1])
            if isinstance(Y, Exact):
                Y = exact_gaussian_release(Y, s, z[it - 1], rng, dtype=dtype)
            else:
                step = _step_rounding(rounding, X)
                Y = gaussian_release(Y, s, z[it - 1], rng, dtype=dtype, rounding=step)
        if verbose and (it == n_iter or it % max(1, n_iter // 10) == 0):  # public counts only
            print(f"[noisy_power_method] step {it}/{n_iter} done (d={d}, p={p})", flush=True)
        if it == n_iter:
            break
        X_next = orthonormalize(Y)
        if tol > 0:
            # QR keeps spans nested (the first j columns of X_l span A^l X_0[:, :j]), so the first
            # k columns alone say whether the top-k subspace has settled.
            Xk, Nk = X[:, :n_components], X_next[:, :n_components]
            moved = np.linalg.norm(Nk - Xk @ (Xk.T @ Nk), ord=2)
            if verbose > 1:
                print(f"[noisy_power_method] iteration {it}: moved {moved:.3e}")
            if moved <= tol:  # X spans an invariant subspace to within tol: Y = A X is final
                break
        X = X_next
    components, eigenvalues = rayleigh_ritz(X, Y, n_components)
    return PCAResult(components, eigenvalues, it, None, orthonormalize(Y), std)


def _step_rounding(rounding, X):
    """The rounding of one float power step's product (see :func:`noisy_power_method`)."""
    if rounding is _NO_ROUNDING:
        raise TypeError("a noisy power step on a float product needs rounding= (a Rounding, or "
                        "None when the product is no float sum)")
    return rounding(X) if callable(rounding) else rounding


def analyze_gauss(C: np.ndarray, n_components: int, rng: np.random.Generator, *,
                  noise_multiplier: float = 0.0, sensitivity: float = 1.0,
                  order: str = "algebraic", rounding: Rounding | None = None) -> PCAResult:
    r"""Analyze Gauss (Dwork, Talwar, Thakurta & Zhang 2014): top-k eigenvectors of ``C + E``.

    ``C`` is the exact symmetric matrix (``sum_i x_i x_i^T`` over clipped rows, or a precomputed
    ``A``); ``C + E`` is :func:`~dptensor.mechanisms.symmetric_gaussian_release` of ``C`` (Gaussian
    noise of std ``noise_multiplier * sensitivity`` on the upper triangle, diagonal included,
    mirrored), where ``sensitivity`` is that of ``C``'s upper triangle
    (:func:`covariance_sensitivity` for rows).
    One Gaussian release; everything after it is post-processing. ``C`` is not modified.
    ``rounding``: that of a float sum ``C`` (:class:`~dptensor.mechanisms.Rounding`); ``None``
    for an exact ``C`` (the grid sums of a private fit) or one whose every entry is one unit's own
    value (a precomputed matrix under the entry unit: no sum).

    ``order="algebraic"`` takes the largest eigenvalues (a covariance: noise can only create
    spurious negative ones), ``"magnitude"`` the largest in absolute value (an indefinite ``A``,
    matching what the power method converges to). Few components of a large d
    (:func:`~dptensor.algorithms.eigen.use_top_k`, public) are found by Lanczos on the
    released matrix in the same order, at ``O(d^2)`` per pass rather than one ``O(d^3)`` solve,
    to a residual well below the noise's norm (:func:`~dptensor.algorithms.eigen.top_k_eigh`).
    """
    d = C.shape[0]
    noisy = symmetric_gaussian_release(C, sensitivity, noise_multiplier, rng, rounding=rounding) \
        if noise_multiplier > 0 else np.array(C, copy=True)
    if use_top_k(d, n_components):  # few components of a large d: Lanczos, same order
        # resolved to well below the release's own noise (public), not to rounding
        w, V = top_k_eigh(noisy, n_components, order=order, noise_norm=eigenvalue_noise_level(
            noise_multiplier * sensitivity, d, "analyze_gauss"))
        idx = np.arange(n_components)
    elif order == "algebraic":
        w, V = scipy.linalg.eigh(noisy, subset_by_index=[d - n_components, d - 1])
        idx = np.argsort(-w, kind="stable")
    else:
        w, V = scipy.linalg.eigh(noisy)
        idx = np.argsort(-np.abs(w), kind="stable")[:n_components]
    return PCAResult(flip_signs(V[:, idx].T), w[idx], 1, float(np.trace(noisy)),
                     noise_std=(float(noise_multiplier * sensitivity) if noise_multiplier > 0
                                else 0.0))


def eigenvalue_noise_level(noise_std: float, size: int, method: str) -> float:
    r"""The typical size of the noise in a released eigenvalue: a public function of the noise plan.

    Analyze Gauss: eigenvalues of ``C + E``, with ``E`` a symmetric d x d Gaussian matrix of entry
    std ``sigma``. Weyl's inequality moves each by at most ``||E||_2``, which concentrates at
    ``2 sqrt(d) sigma`` (the edge of the semicircle), and that is where the top eigenvalues of
    pure noise sit: ``2 sqrt(d) sigma`` (``size = d``). Power methods: Ritz values, the
    eigenvalues of ``X^T A X + sym(X^T G)`` with ``X`` orthonormal d x p and independent of the
    last step's noise ``G``, so ``sym(X^T G)`` is a p x p symmetric Gaussian (diagonal std
    ``sigma``, off-diagonal ``sigma / sqrt(2)``) of norm about ``sqrt(2 p) sigma`` (``size = p``).
    An eigenvalue not clearly above this level (below twice it) is dominated by noise.

    >>> eigenvalue_noise_level(1.0, 100, "analyze_gauss")
    20.0
    >>> round(eigenvalue_noise_level(1.0, 2, "power"), 6)
    2.0
    """
    factor = 2.0 * math.sqrt(size) if method == "analyze_gauss" else math.sqrt(2.0 * size)
    return factor * float(noise_std)


def private_total(Xc, data_norm: float, noise_multiplier: float, rng: np.random.Generator) -> float:
    """``sum_i ||c_i||^2`` over rows already clipped to ``data_norm``, plus ``N(0, (z B^2)^2)``
    noise.

    The total variance (times ``n - 1``), released for ``explained_variance_ratio_``; its
    sensitivity is :func:`total_variance_sensitivity`, raised by the float sum's rounding
    (:func:`total_rounding`). Summed in float64 whatever ``Xc``'s dtype (row blocks of float32
    rows are widened one at a time). A Dask ``Xc``: one reduction.
    """
    total = float(_float64_sum(Xc, _sum_of_squares))
    if noise_multiplier > 0:
        sens = total_variance_sensitivity(data_norm)
        total = float(gaussian_release(total, sens, noise_multiplier, rng,
                                       rounding=total_rounding(data_norm, *Xc.shape)))
    return total


def total_rounding(data_norm: float, n_samples: int, n_features: int) -> Rounding:
    """The rounding of ``sum_i ||c_i||^2`` in float64: one sum of the ``n d`` squares, each row's
    adding at most ``B^2``: ``total = n B^2``, ``terms = n d`` (``docs/derivations/pca.rst``)."""
    return Rounding(total=float(n_samples) * float(data_norm) ** 2,
                    terms=int(n_samples) * int(n_features))


def mean_rounding(data_norm: float, n_samples: int) -> Rounding:
    """The rounding of the mean ``(1/n) sum_i c_i`` in float64: a sum of ``n`` rows of norm at
    most ``B``, then the division: ``terms = n + 1``; in the mean's units
    ``total = n B / n = B``."""
    return Rounding(total=float(data_norm), terms=int(n_samples) + 1)


def _sum_of_squares(M):
    return (M * M).sum() if is_dask_array(M) else np.einsum("ij,ij->", M, M)


#: Rows widened to float64 at once by the float64 sums of float32 rows (8 MB at d = 128).
_BLOCK_ROWS = 8192


def _float64_sum(X, fn):
    """``fn`` (a sum over rows) of ``X`` in float64: on float32 rows a sum of ``fn`` of row blocks
    widened one at a time (never a float64 copy of ``X``). A Dask ``X``: per chunk, one
    reduction."""
    if isinstance(X, SparseRows):  # densified row blocks, each widened to float64
        return X.block_sum(lambda B: fn(np.asarray(B, dtype=np.float64)))
    if is_dask_array(X):
        return np.asarray(fn(X.astype(np.float64)).compute()) if X.dtype != np.float64 \
            else np.asarray(fn(X).compute())
    if X.dtype == np.float64:
        return fn(X)
    return sum(fn(np.asarray(X[i:i + _BLOCK_ROWS], dtype=np.float64))
               for i in range(0, X.shape[0], _BLOCK_ROWS))


def private_mean(X: np.ndarray, data_norm, noise_multiplier: float, rng: np.random.Generator):
    """Mean of rows already clipped to ``data_norm``, plus ``N(0, (z 2B/n)^2)`` noise.

    Replacing one row moves the mean by ``||a - b|| / n <= 2 B / n`` (attained at ``b = -a``);
    the float sum's rounding (:func:`mean_rounding`) raises it. Summed in float64 (row blocks of
    float32 rows widened one at a time); returned in ``X``'s dtype.
    """
    n = X.shape[0]
    mean = np.asarray(_float64_sum(X, lambda M: M.sum(axis=0))) / n
    if noise_multiplier > 0:
        mean = gaussian_release(mean, 2.0 * data_norm / n, noise_multiplier, rng,
                                rounding=mean_rounding(data_norm, n))
    return mean.astype(X.dtype, copy=False)


def center_and_clip(X: np.ndarray, mean, data_norm, *, copy: bool = True) -> np.ndarray:
    """``clip(x - mean, data_norm)`` for every row.

    With ``mean`` a previous (public) release this is a fixed map applied row by row, so the
    row-level sensitivities above hold for the centred rows with the same ``data_norm``. Rows are
    re-clipped because ``||x - mean||`` can reach ``||x|| + ||mean||``; a row pulled in here only
    shortens, it never turns. ``copy=False`` works in place on ``X`` (for an array the caller owns,
    so that a fit holds one copy of the data, not two).
    """
    if copy:
        return clip_rows(X - mean if mean is not None else X, data_norm)
    if mean is not None:
        X -= mean
    if data_norm is not None:
        with np.errstate(all="ignore"):  # silent whatever the rows hold (see clip_factors)
            X *= clip_factors(X, data_norm)[:, None].astype(X.dtype)
    return X


def clip_center_clip(chunk, data_norm, mean):
    """The rows a private fit uses, from raw rows: clip, centre on the released mean, clip again."""
    return center_and_clip(clip_rows(chunk, data_norm), mean, data_norm)

def grid_centred(chunk, data_norm, mean):
    """The grid rows a private fit uses, from raw rows: on the grid, centred on the mean, again."""
    M = grid_rows(chunk, data_norm)
    return M if mean is None else grid_rows(M, data_norm, mean, scale=data_norm / 2.0 ** BITS)


def power_schedule(mu: float, n_iter: int, final_share: float = None) -> np.ndarray:
    """Per-step noise multipliers of ``n_iter`` power steps that are together exactly ``mu``-GDP.

    The last step gets ``final_share`` of ``mu^2`` (default :data:`FINAL_STEP_SHARE`), the others
    split the rest evenly: ``sum_l 1/z_l^2 = mu^2``. Only the last release's noise sets the error
    the method ends at (earlier steps only have to bring the iterate near the top subspace, and the
    power step contracts their error away), so weighting it beats Hardt–Price's even split: on a
    spiked covariance (d = 50..200, 5 steps) sin^2 falls by about half.

    >>> z = power_schedule(1.0, 5)
    >>> round(float(np.sum(1 / z**2)), 12), round(float(z[-1]), 4)
    (1.0, 1.4142)
    """
    share = FINAL_STEP_SHARE if final_share is None else float(final_share)
    if n_iter == 1:
        return np.array([1.0 / mu])
    early = math.sqrt((n_iter - 1) / (1.0 - share)) / mu
    return np.array([early] * (n_iter - 1) + [1.0 / (math.sqrt(share) * mu)])


def auto_n_iter(n_features: int, private: bool) -> int:
    """``n_iter="auto"``: the number of power steps used when none is given.

    Private: ``ceil(ln(d) / 2) + 3``; every step costs noise, and on a clear eigengap a few steps
    from a random start (whose angle to the top subspace grows like ``sqrt(d)``, hence the log)
    reach the noise floor: 5 at d = 50, 6 at d = 200, 8 at d = 10^4. Non-private: up to 300 steps,
    stopping once the iterate is still.
    """
    if not private:
        return 300
    return math.ceil(math.log(max(n_features, 2)) / 2) + 3


# --------------------------------------------------------------------------------------------
# Block helpers of every power method (post-processing of released values; no data, no privacy)
# --------------------------------------------------------------------------------------------

def random_unit_columns(d: int, L: int, rng: np.random.Generator, dtype=np.float64) -> np.ndarray:
    """``L`` independent vectors uniform on the unit sphere of R^d, as the columns of a (d, L)
    array.

    A standard Gaussian vector divided by its norm is uniform on the sphere (rotation invariance).
    The start is data-independent, so it costs no privacy.
    """
    G = rng.standard_normal((int(d), int(L)))
    return normalize_columns(G).astype(dtype, copy=False)


def normalize_columns(Y: np.ndarray) -> np.ndarray:
    """``Y`` with each column scaled to unit l2 norm; an all-zero column stays zero (no NaN).

    Returns a new array of ``Y``'s floating dtype.
    """
    Y = np.asarray(Y)
    norms = column_norms(Y) if Y.dtype.kind == "f" else np.linalg.norm(Y, axis=0)
    # A zero column has no direction to keep; dividing by 1 leaves it at zero instead of NaN.
    safe = np.where(norms > 0, norms, 1.0).astype(Y.dtype, copy=False)
    return Y / safe


def select_restart(lams) -> int:
    """Index of the winning restart: the largest eigenvalue estimate ``T(u,u,u)`` (first on ties).

    NaN estimates (a diverged restart) never win unless every estimate is NaN, then 0.
    """
    lams = np.asarray(lams, dtype=float).reshape(-1)
    if lams.size == 0:
        raise ValueError("select_restart needs at least one restart")
    if np.all(np.isnan(lams)):
        return 0
    return int(np.nanargmax(lams))


def flip_signs(V: np.ndarray) -> np.ndarray:
    """Each row with its largest-magnitude entry positive (scikit-learn's convention for PCA axes).

    An eigenvector's sign is arbitrary; fixing it makes fitted axes comparable across fits.
    """
    idx = np.argmax(np.abs(V), axis=1)
    signs = np.where(V[np.arange(V.shape[0]), idx] < 0, -1.0, 1.0).astype(V.dtype, copy=False)
    return V * signs[:, None]
