r"""Private PCA: the noisy power method (Hardt–Price), its streaming form, and Analyze Gauss.

Three ways to release the top-k principal subspace of a symmetric matrix ``A`` under a
Gaussian mechanism (SPEC §4):

* the **noisy power method** ``X_l = QR(A X_{l-1} + G_l)``, ``L`` releases of a d x p block, each
  priced at its own sensitivity: row-level for data (``A = sum_i x_i x_i^T`` over clipped rows,
  never formed) or entry-level for a precomputed symmetric matrix (PPM, noise scaled by the
  previous iterate's largest rows);
* the **streaming power method** (SPM): one power step per disjoint block of rows, O(dp) memory,
  and by parallel composition the whole stream costs one Gaussian release;
* **Analyze Gauss** (Dwork–Talwar–Thakurta–Zhang): one symmetric Gaussian matrix added to ``A``,
  then its top-k eigenvectors.

The functions here are plain arrays-in, arrays-out algorithms (no scikit-learn, no budgets);
:class:`PrivatePCA` plans the noise, records the spend and calls them. Every sensitivity used is
derived in ``docs/derivations/pca.rst`` and checked by brute force in ``tests/test_pca.py``.
"""
from __future__ import annotations

import functools
import math
import numbers
import warnings
from typing import NamedTuple

import numpy as np
import scipy.linalg
from sklearn.base import BaseEstimator, ClassNamePrefixFeaturesOutMixin, TransformerMixin
from sklearn.utils.validation import check_is_fitted

from ._base import PrivateEstimatorMixin
from .algorithms.exact import (BITS, Exact, ExactGram, exact_gaussian_release, exact_memory, gram,
                     gram_product, grid_rows, grid_vectors, map_rows, power_sensitivity, row_sum,
                     rows_stat, sum_of_squares)
from .algorithms.dask import DaskGramMatrix, RowChunks, check_dask_array, clip_chunks, dask_gram, is_dask_array
from .algorithms.operators import DenseMatrix, GramMatrix
from ._power import flip_signs
from ._memory import FLOAT, check_fits
from .mechanisms.randomness import RowDigest, rekeyed
from .exceptions import PrivacyWarning
from ._validation import (check_data_norm, check_positive_int, check_verbose, validate_private_data,
                          validate_stream_chunk)
from .accounting import ComposedEvent, GaussianEvent, NonPrivateEvent, calibrate_gaussian, epsilon_of, gdp_mu
from .accounting.calibration import paper_noisy_power_sigma
from .mechanisms import (Rounding, clip_factors, clip_rows, gaussian_release,
                         symmetric_gaussian_release)

__all__ = ["PrivatePCA", "PCAResult", "orthonormalize", "rayleigh_ritz", "noisy_power_method",
           "analyze_gauss", "private_mean", "center_and_clip",
           "row_power_sensitivity", "entry_power_sensitivity", "covariance_sensitivity",
           "auto_n_iter", "power_schedule", "StreamingPowerMethod", "MEAN_SHARE", "FINAL_STEP_SHARE",
           "TOTAL_SHARE", "MAX_DENSE_FEATURES", "total_variance_sensitivity", "private_total",
           "eigenvalue_noise_level"]

#: Share of the squared GDP budget ``mu^2`` spent on the private mean when ``centered=False``:
#: ``mu_mean^2 = MEAN_SHARE mu^2`` and the spectral part gets the rest, so the whole fit is exactly
#: ``mu``-GDP. The mean's error enters the covariance only to second order (``n ||e||^2``) while
#: the spectral noise enters to first order, so a small share suffices; it raises the spectral
#: noise by ``1/sqrt(0.9) - 1``, about 5%.
MEAN_SHARE = 0.1

#: Share of the squared GDP budget ``mu^2`` spent on the total variance ``sum_i ||c_i||^2`` of a
#: private row-level fit (``calibration="exact"``), the denominator of ``explained_variance_ratio_``.
#: Its sensitivity is ``B^2``, against ``n`` times a typical ``||c||^2``, so its relative error is
#: about ``B^2 / (mu sqrt(0.02) n mean ||c||^2)``: 1.5% at ``mu = 1``, ``n = 2000`` and
#: ``mean ||c||^2 = B^2 / 4``. It raises the spectral noise by ``1/sqrt(0.98) - 1``, about 1%.
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
    r"""Exact sensitivity of the total ``sum_i ||c_i||^2`` over rows clipped to ``||c|| <= B``: ``B^2``.

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
    ``noise_std`` the std of each noise entry of the last release (0 without noise; a public number).
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
    past ``X``), ordered by singular value, i.e. by ``|eigenvalue|``. Eigenvalues are the Ritz values
    of ``A`` on ``span(X)``: eigenvalues of the symmetric part of ``X^T Y = X^T A X + X^T G``, ordered
    by magnitude; unlike singular values they are not inflated by the noise. Both are
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
        e.g. :class:`~dptensor._operators.GramMatrix` (data, ``X^T (X Q)``, never forming d x d)
        or :class:`~dptensor._operators.DenseMatrix`; or :class:`~dptensor._exact.ExactGram`,
        whose exact products are released on their grid (private fits on rows).
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
        the products are no float sums. Exact products (:class:`~dptensor._exact.Exact`) need
        none. A noisy release of a float product without it is refused (``TypeError``): a
        silent default would release the sum without its allowance.
    tol : float, default=0
        Stop early once the top-k part of the iterate moves by less than ``tol`` (spectral norm of
        its component outside the previous span). Use only without noise: a private plan pays for every
        release it planned, so stopping early would only waste it.

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
        if verbose and (it == n_iter or it % max(1, n_iter // 10) == 0):  # progress: public counts only
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
    matching what the power method converges to).
    """
    d = C.shape[0]
    noisy = symmetric_gaussian_release(C, sensitivity, noise_multiplier, rng, rounding=rounding) \
        if noise_multiplier > 0 else np.array(C, copy=True)
    if order == "algebraic":
        w, V = scipy.linalg.eigh(noisy, subset_by_index=[d - n_components, d - 1])
        idx = np.argsort(-w, kind="stable")
    else:
        w, V = scipy.linalg.eigh(noisy)
        idx = np.argsort(-np.abs(w), kind="stable")[:n_components]
    return PCAResult(flip_signs(V[:, idx].T), w[idx], 1, float(np.trace(noisy)),
                     noise_std=float(noise_multiplier * sensitivity) if noise_multiplier > 0 else 0.0)


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

    >>> eigenvalue_noise_level(1.0, 100, "analyze_gauss"), round(eigenvalue_noise_level(1.0, 2, "power"), 6)
    (20.0, 2.0)
    """
    factor = 2.0 * math.sqrt(size) if method == "analyze_gauss" else math.sqrt(2.0 * size)
    return factor * float(noise_std)


def private_total(Xc, data_norm: float, noise_multiplier: float, rng: np.random.Generator) -> float:
    """``sum_i ||c_i||^2`` over rows already clipped to ``data_norm``, plus ``N(0, (z B^2)^2)`` noise.

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


def _clip_center_clip(chunk, data_norm, mean):
    """The rows a private fit uses, from raw rows: clip, centre on the released mean, clip again."""
    return center_and_clip(clip_rows(chunk, data_norm), mean, data_norm)

def _grid_centred(chunk, data_norm, mean):
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


class StreamingPowerMethod:
    r"""The Streaming Power Method (Hardt & Price, Fig. 2) over disjoint blocks of rows.

    Rows arrive in batches of any size; they fill blocks of exactly ``block_size`` rows. Unless the
    data are declared centred, the first block only estimates the mean (released with noise
    ``z 2B/T``); each later block ``l`` releases ``Y_l = (1/T) sum_{block} c c^T X_{l-1} + G_l`` with
    ``c = clip(x - mean, B)`` and ``G_l`` at ``z * row_power_sensitivity(B, p) / T``, then
    ``X_l = QR(Y_l)``. State is O(d p): the iterate, a d x p accumulator and a d-vector; no row is
    kept. The result does not depend on how the stream is cut into batches (noise is drawn only when
    a block completes, in block order).

    Privacy: every row is in exactly one block and each block's release is one Gaussian at
    multiplier ``z`` on that block alone, so by parallel composition (adaptive, on disjoint data) the
    whole stream is ``1/z``-GDP under replace-one, however many blocks it has.
    """

    def __init__(self, n_features: int, n_components: int, block_size: int, rng: np.random.Generator, *,
                 n_oversamples: int = 0, data_norm=None, noise_multiplier: float = 0.0,
                 centered: bool = False, dtype=np.float64, digest: RowDigest | None = None):
        self.n_components, self.block_size = int(n_components), int(block_size)
        self.digest = digest  # a seeded stream keys each block's noise by the rows read so far
        self.data_norm, self.noise_multiplier = data_norm, float(noise_multiplier)
        self.rng = rng
        self.dtype = np.dtype(dtype)
        p = n_components + n_oversamples
        self.basis = orthonormalize(rng.standard_normal((n_features, p)).astype(self.dtype))
        self.mean = np.zeros(n_features, dtype=self.dtype) if centered else None
        # The mean block's running sum and the power block's running product: exact integer sums
        # of grid rows (:mod:`dptensor._exact`) when private, plain float sums otherwise.
        exact = self.noise_multiplier > 0
        self._sum = 0 if exact else np.zeros(n_features, dtype=self.dtype)
        self._acc = 0 if exact else np.zeros((n_features, p), dtype=self.dtype)
        self._count = 0
        self.n_samples_seen = 0
        self.n_blocks = 0
        self.components = self.eigenvalues = None

    def update(self, X: np.ndarray) -> "StreamingPowerMethod":
        """Feed a batch of rows (not modified)."""
        start, n = 0, X.shape[0]
        while start < n:
            take = min(n - start, self.block_size - self._count)
            rows = X[start:start + take]
            if self.digest is not None:
                self.digest.update(rows)
            if self.noise_multiplier > 0:
                self._add_exact(rows)
            elif self.mean is None:
                self._sum += clip_rows(rows, self.data_norm).sum(axis=0)
            else:
                chunk = clip_rows(rows, self.data_norm)  # a new array unless unbounded: then copy
                C = center_and_clip(chunk, self.mean, self.data_norm, copy=self.data_norm is None)
                self._acc += C.T @ (C @ self.basis)
            self._count += take
            start += take
            if self._count == self.block_size:
                self._close_block()
        self.n_samples_seen += n
        return self

    def _add_exact(self, rows):
        """A private stream's rows, on the grid as a batch fit puts them, added to exact sums."""
        B = self.data_norm
        M = grid_rows(rows, B)
        if self.mean is None:
            self._sum = self._sum + row_sum(M).ints
        else:
            M = grid_rows(M, B, self.mean, scale=B / 2.0 ** BITS, out=M)
            self._acc = self._acc + gram_product(M, grid_vectors(self.basis)).ints

    def _close_block(self):
        T, z, exact = self.block_size, self.noise_multiplier, self.noise_multiplier > 0
        rng = self.rng if self.digest is None else rekeyed(self.rng, self.digest.words())
        if self.mean is None:
            if exact:
                stat = Exact(self._sum, self.data_norm / T / 2.0 ** BITS)
                self.mean = exact_gaussian_release(stat, 2.0 * self.data_norm / T, z, rng,
                                                   dtype=self.dtype)
            else:
                self.mean = self._sum / T
            self._sum = None  # the unnoised sum is needed no longer than this release
        else:
            if exact:
                stat = Exact(self._acc, self.data_norm ** 2 / T / 4.0 ** BITS)
                s = power_sensitivity(grid_vectors(self.basis), self.data_norm) / T
                Y = exact_gaussian_release(stat, s, z, rng, dtype=self.dtype)
                self._acc = 0
            else:
                Y = self._acc / T
                self._acc[...] = 0
            self.components, self.eigenvalues = rayleigh_ritz(self.basis, Y, self.n_components)
            self.basis = orthonormalize(Y)
            self.n_blocks += 1
        self._count = 0


# --------------------------------------------------------------------------------------------
# The estimator
# --------------------------------------------------------------------------------------------

def _last(z) -> float:
    """The last (or only) multiplier of a plan: the one that sets the released error."""
    return float(np.ravel(z)[-1])


_METHODS = ("auto", "power", "analyze_gauss")
_INPUTS = ("data", "precomputed")
_NEIGHBORS = (None, "row", "entry")
_CALIBRATIONS = ("exact", "paper")


class PrivatePCA(ClassNamePrefixFeaturesOutMixin, TransformerMixin, PrivateEstimatorMixin, BaseEstimator):
    r"""Differentially private PCA: noisy power method, streaming power method, or Analyze Gauss.

    Parameters
    ----------
    n_components : int, default=2
        Number of components k.
    epsilon : float, default=np.inf
        Privacy budget of one fit (or one stream); ``np.inf`` runs the exact, non-private method.
    delta : float or None, default=None
        ``None``: the accountant's delta, else 1e-5. A private ``fit`` on rows warns
        (``PrivacyWarning``) when delta is not below ``1/n_samples``; a ``partial_fit`` stream,
        whose length is not known when it starts, is not checked.
    n_iter : int or "auto", default="auto"
        Power steps (each one release). ``"auto"``: :func:`auto_n_iter` (private: 3 at d = 50, 5 at
        d = 10^4; non-private: until the iterate is still, at most 300).
    n_oversamples : int, default=0
        Extra columns of the power block, ``p = n_components + n_oversamples``.
    method : {"auto", "power", "analyze_gauss"}, default="auto"
        ``"auto"``: Analyze Gauss for row-level data with at most :data:`MAX_DENSE_FEATURES`
        features, the power method otherwise (more features, a precomputed entry-level matrix, and
        always for ``partial_fit``). See Notes. Memory: Analyze Gauss holds a few d x d arrays,
        the power method n x p and d x p ones, beside the rows' clipped copy; a fit whose bound
        exceeds what the process can allocate is refused before its spend
        (:class:`~dptensor.MemoryRefusedError`, naming what to change).
    input : {"data", "precomputed"}, default="data"
        ``"data"``: X is (n_samples, n_features). ``"precomputed"``: X is a symmetric d x d matrix ``A``
        whose top-k eigenvectors (by magnitude) are wanted; ``transform`` then takes d-dimensional rows.
    neighbors : {None, "row", "entry"}, default=None
        The privacy unit. ``"row"`` (the default for data): replace one row. ``"entry"`` (the
        default, and the only choice, for precomputed input): one symmetric pair ``A_ij = A_ji`` (or one
        diagonal entry) changes by at most ``data_norm`` (1 when ``data_norm`` is None).
    data_norm : float or None, default=None
        Row-level: the public l2 bound rows are clipped to; required when epsilon is finite.
        Entry-level: the bound on an entry's change.
    centered : bool, default=False
        ``False``: the mean is estimated (privately, from its own budget share ``MEAN_SHARE`` of
        ``mu^2``) and subtracted, and centred rows are clipped again to ``data_norm``. ``True``: the
        caller promises the data are already centred by public means; nothing is subtracted and
        ``mean_`` is zero. The promise cannot be checked.
    calibration : {"exact", "paper"}, default="exact"
        ``"exact"``: the least noise meeting ``(epsilon, delta)`` by exact GDP composition, so the
        recorded cost equals the target. ``"paper"``: the papers' formulas (Hardt–Price
        ``sigma = eps^-1 sqrt(4 p L ln(1/delta))`` times ``||X_{l-1}||_inf`` for entry-level PPM, its
        multiplier ``sqrt(4 L ln(1/delta))/eps`` for row-level power steps, the classical
        ``sqrt(2 ln(1.25/delta))/eps`` for Analyze Gauss); the cost recorded is what that noise
        really costs.
    whiten : bool, default=False
        ``transform`` divides by ``sqrt(explained_variance_)`` (the released estimate).
    block_size : int or None, default=None
        Rows per block of the streaming power method (``partial_fit`` only). ``None``:
        ``max(1000, 10 * n_features)``. Fixed for a stream, so the result does not depend on the
        batch sizes given to ``partial_fit``.
    accountant : PrivacyAccountant or None, default=None
        Records every fit's spend before its first noisy release; refuses fits over budget.
    random_state : None, int or Generator, default=None
        ``None`` (fresh entropy) for real releases; a seed makes the noise reproducible.
    verbose : int, default=0

    Attributes
    ----------
    components_ : ndarray of shape (n_components, n_features)
        Released principal axes (orthonormal rows, largest entry positive).
    explained_variance_ : ndarray of shape (n_components,)
        Private estimate of the variance along each component, released at no extra cost as
        post-processing: Analyze Gauss's noisy eigenvalues, or the power method's Ritz values
        from its last product; divided by ``n_samples - 1`` for data (a covariance), raw
        eigenvalues of ``A`` for precomputed input. Floored at 0 for data.
    explained_variance_ratio_ : ndarray of shape (n_components,)
        ``explained_variance_`` over the total variance, a share of a whole (it sums to at most 1).
        The total is exact without privacy; a private row-level fit with ``calibration="exact"``
        releases it from its own budget share :data:`TOTAL_SHARE` (``sum_i ||c_i||^2`` over the
        clipped, centred rows plus Gaussian noise; sensitivity ``data_norm^2``); with
        ``calibration="paper"`` or precomputed input, Analyze Gauss's released trace serves. When
        noise pushes the released eigenvalues' sum above the released total, they are divided by
        their own sum instead. Not set when no total is released (private power method with
        ``calibration="paper"`` or on a precomputed matrix; ``partial_fit``).
    explained_variance_noise_ : ndarray of shape (n_components,)
        The typical size of the privacy noise in each released eigenvalue, in the units of
        ``explained_variance_``: a public function of the noise plan
        (:func:`eigenvalue_noise_level`; 0 without privacy). A component whose
        ``explained_variance_`` is not clearly above it (below twice it) is dominated by noise, and
        ``fit`` warns (``UserWarning``) naming it.
    mean_ : ndarray of shape (n_features,)
        The released (private) mean, or zeros when ``centered=True`` or the input is precomputed.
    n_components_, n_features_in_, feature_names_in_ :
        As in scikit-learn.
    n_samples_ : int
        Rows used by ``fit`` (public under the replace-one relation).
    n_samples_seen_ : int
        Rows streamed through ``partial_fit``.
    method_ : str
        The method ``"auto"`` resolved to (``"power"``, ``"analyze_gauss"`` or ``"streaming_power"``).
    n_iter_ : int
        Products released (power steps, completed power blocks, or 1 for Analyze Gauss).
    privacy_cost_ : PrivacyCost
        The fit's (or stream's) cost, recorded with the accountant before any noisy release.

    Notes
    -----
    **Guarantee.** With a finite epsilon, a fit is ``(epsilon, delta)``-DP for the chosen unit: all
    it releases (``components_``, ``explained_variance_``, ``mean_``, the total behind the ratio) is
    post-processing of Gaussian releases whose sensitivities are derived in
    ``docs/derivations/pca.rst``; ``n`` and ``d`` are public. A stream through ``partial_fit`` is ``(epsilon, delta)``-DP as a whole, under
    replace-one of a streamed row, by parallel composition over disjoint blocks.

    **Which method.** Analyze Gauss releases one noisy d x d matrix; the row-level power method
    releases ``n_iter`` noisy d x p products at the same sensitivity, so its noise is ``sqrt(n_iter)``
    larger for the same budget and it is less accurate whenever the d x d matrix fits. It wins on
    memory and time, O(n d p) per step and O(d p) state (d = 10^4 and beyond), and in streams. For
    a precomputed matrix under entry-level privacy, the PPM noise scales with the iterate's largest
    rows: on an incoherent matrix (rows of size ``sqrt(p/d)``) it is far below Analyze Gauss's; on a
    coherent one it is not, and ``method="analyze_gauss"`` is better.

    Examples
    --------
    >>> import numpy as np
    >>> from dptensor import PrivatePCA
    >>> rng = np.random.default_rng(0)
    >>> X = rng.standard_normal((10000, 5)) * [5.0, 2.0, 1.0, 0.5, 0.1]
    >>> pca = PrivatePCA(n_components=2, epsilon=1.0, data_norm=12.0, random_state=0).fit(X)
    >>> np.abs(pca.components_.round(1)).tolist()
    [[1.0, 0.0, 0.0, 0.0, 0.0], [0.0, 1.0, 0.0, 0.0, 0.0]]
    >>> round(pca.privacy_cost_.epsilon, 6)
    1.0
    """

    _stream_attributes = ("_stream",)

    def __init__(self, n_components=2, *, epsilon=np.inf, delta=None, n_iter="auto", n_oversamples=0,
                 method="auto", input="data", neighbors=None, data_norm=None, centered=False,
                 calibration="exact", whiten=False, block_size=None, accountant=None, random_state=None,
                 verbose=0):
        self.n_components = n_components
        self.epsilon = epsilon
        self.delta = delta
        self.n_iter = n_iter
        self.n_oversamples = n_oversamples
        self.method = method
        self.input = input
        self.neighbors = neighbors
        self.data_norm = data_norm
        self.centered = centered
        self.calibration = calibration
        self.whiten = whiten
        self.block_size = block_size
        self.accountant = accountant
        self.random_state = random_state
        self.verbose = verbose

    # ------------------------------------------------------------------ validation
    def _check_params(self, n_features, *, streaming=False):
        """Validated settings as a dict; raises ValueError/TypeError naming the parameter."""
        for name, value, allowed in (("method", self.method, _METHODS), ("input", self.input, _INPUTS),
                                     ("neighbors", self.neighbors, _NEIGHBORS),
                                     ("calibration", self.calibration, _CALIBRATIONS)):
            if value not in allowed:
                raise ValueError(f"{name} must be one of {allowed}, got {value!r}")
        check_verbose(self.verbose)
        k = check_positive_int(self.n_components, "n_components")
        over = check_positive_int(self.n_oversamples, "n_oversamples", minimum=0)
        if k > n_features:
            raise ValueError(f"n_components={k} must be <= n_features={n_features} "
                             f"(X has {n_features} feature(s))")
        epsilon, delta = self._privacy_target()
        private = math.isfinite(epsilon)
        precomputed = self.input == "precomputed"
        neighbors = self.neighbors or ("entry" if precomputed else "row")
        if precomputed and neighbors != "entry":
            raise ValueError("neighbors='row' needs the rows themselves (input='data'): a precomputed "
                             "matrix hides the clipping that the row-level guarantee rests on")
        if not precomputed and neighbors != "row":
            raise ValueError("neighbors='entry' is the unit of a precomputed matrix "
                             "(input='precomputed'); data input is private per row")
        if neighbors == "entry":
            bound = 1.0 if self.data_norm is None else check_data_norm(self.data_norm, np.inf)
        else:
            bound = check_data_norm(self.data_norm, epsilon)
        if not isinstance(self.centered, (bool, np.bool_)):
            raise TypeError(f"centered must be a bool, got {self.centered!r}")
        if not isinstance(self.whiten, (bool, np.bool_)):
            raise TypeError(f"whiten must be a bool, got {self.whiten!r}")
        method = self.method
        if streaming:
            if method == "analyze_gauss" or precomputed:
                raise ValueError("partial_fit runs the streaming power method on rows: it needs "
                                 "method='auto' or 'power' and input='data'")
            if private and self.calibration == "paper":
                raise ValueError("calibration='paper' has no streaming form (Hardt–Price's SPM is not "
                                 "private); use calibration='exact'")
            method = "streaming_power"
        elif method == "auto":
            method = "analyze_gauss" if (not precomputed and n_features <= MAX_DENSE_FEATURES) else "power"
        p = k + over
        if method != "analyze_gauss" and p > n_features:
            raise ValueError(f"n_components + n_oversamples = {p} must be <= n_features={n_features}")
        if self.n_iter == "auto":
            n_iter, tol = auto_n_iter(n_features, private), (0.0 if private else 1e-13)
        else:
            n_iter, tol = check_positive_int(self.n_iter, "n_iter"), 0.0
        return dict(k=k, p=p, epsilon=epsilon, delta=delta, private=private, precomputed=precomputed,
                    neighbors=neighbors, bound=bound, method=method, n_iter=n_iter, tol=tol,
                    center=not (self.centered or precomputed))

    def _validate_input(self, X, reset):
        if is_dask_array(X):  # rows on a Dask cluster: checked lazily, never pulled here
            if self.input == "precomputed":
                raise TypeError("input='precomputed' takes a d x d NumPy matrix, not a dask array; "
                                "pass the rows themselves (input='data') to run on Dask")
            return check_dask_array(self, X, reset=reset)
        X = validate_private_data(self, X, dtype=[np.float64, np.float32], reset=reset)
        if self.input == "precomputed":
            if X.shape[0] != X.shape[1]:
                raise ValueError(f"input='precomputed' needs a square symmetric matrix, got shape {X.shape}")
            scale = max(float(np.max(np.abs(X))), np.finfo(X.dtype).tiny)
            if np.max(np.abs(X - X.T)) > (1e-10 if X.dtype == np.float64 else 1e-5) * scale:
                raise ValueError("input='precomputed' needs a symmetric matrix; X differs from X.T")
        return X

    # ------------------------------------------------------------------ planning
    def _plan(self, s):
        """Noise multipliers and the privacy event for settings ``s`` (no data involved)."""
        eps, delta = s["epsilon"], s["delta"]
        if not s["private"]:
            return dict(z=0.0, z_mean=0.0, z_total=0.0, event=None, n_queries=0)
        method, center = s["method"], s["center"]
        if method == "streaming_power":
            z = calibrate_gaussian(eps, delta, 1)
            return dict(z=z, z_mean=z, z_total=0.0, event=GaussianEvent(z, 1), n_queries=1)
        queries = s["n_iter"] if method == "power" else 1
        mu = gdp_mu(eps, delta)
        # Exact row-level fits release the total variance from its own share (the ratio's denominator).
        total = self.calibration == "exact" and not s["precomputed"]
        spectral_share = 1.0 - (MEAN_SHARE if center else 0.0) - (TOTAL_SHARE if total else 0.0)
        z_mean = 1.0 / (mu * math.sqrt(MEAN_SHARE)) if center else 0.0
        z_total = 1.0 / (mu * math.sqrt(TOTAL_SHARE)) if total else 0.0
        if self.calibration == "exact":
            z = power_schedule(mu * math.sqrt(spectral_share), queries)
        elif method == "analyze_gauss":
            z = math.sqrt(2.0 * math.log(1.25 / delta)) / eps
        elif s["neighbors"] == "entry":  # noise sigma ||X||_inf, priced at sensitivity sqrt(2p) ||X||_inf
            z = paper_noisy_power_sigma(eps, delta, s["p"], queries) / math.sqrt(2 * s["p"])
        else:
            z = paper_noisy_power_sigma(eps, delta, s["p"], queries) / math.sqrt(s["p"])
        z = np.broadcast_to(np.asarray(z, dtype=float), (queries,))
        if z[0] == z[-1]:  # an even split: one event of `queries` releases
            events = [GaussianEvent(float(z[0]), queries)]
        else:
            events = [GaussianEvent(float(z[0]), queries - 1), GaussianEvent(float(z[-1]), 1)]
        if total:
            events.insert(0, GaussianEvent(z_total, 1))
        if center:
            events.insert(0, GaussianEvent(z_mean, 1))
        event = ComposedEvent(tuple(events)) if len(events) > 1 else events[0]
        if self.calibration == "paper":
            cost = epsilon_of(event, delta)
            if cost > eps * (1 + 1e-9):
                warnings.warn(f"calibration='paper' costs epsilon={cost:.4g} > the target {eps:g} under "
                              f"this unit ({s['neighbors']}); the accountant records the true cost",
                              PrivacyWarning, stacklevel=3)
        return dict(z=z, z_mean=z_mean, z_total=z_total, event=event, n_queries=queries)

    def _record(self, s, plan, entropy, data_shape, n_rows, data=()):
        """Record the fit's spend (epsilon = inf when not private); return its cost and generator.
        ``n_rows``: the rows held in memory at once (``None``: on Dask workers)."""
        event = NonPrivateEvent("epsilon=inf") if plan["event"] is None else plan["event"]
        return self._spend(event, entropy=entropy, delta=s["delta"],
                           memory=self._fit_memory(s, n_rows, data_shape),
                           noise_multiplier=_last(plan["z"]), n_queries=plan["n_queries"],
                           calibration=self.calibration, data_shape=data_shape, data=data)

    @staticmethod
    def _fit_memory(s, n_rows, data_shape):
        """``(bytes, advice)``: the fit's peak allocation from its shape, an upper bound in float64.

        The rows' clipped and centred copy (``n_rows`` at once: all of them, one chunk of a
        stream, none for Dask or a precomputed matrix), then the d x d matrix of Analyze Gauss
        with its noise and eigendecomposition, or the power method's n x p and d x p products.
        """
        d = data_shape[-1] if s["method"] != "streaming_power" else data_shape[0]
        n = n_rows or 0
        rows = n * d + 4 * n
        if s["method"] == "analyze_gauss":
            peak, columns = rows + 6 * d * d, d
            advice = "Use method='power' (O(d p) memory), or fewer features"
        else:
            peak, columns = rows + n * s["p"] * 2 + 12 * d * s["p"] + 4 * d, s["p"]
            advice = "Use fewer components or rows at once (partial_fit in chunks, or a Dask array)"
        exact = exact_memory(n, d, columns) if s["private"] else 0  # the exact sums' grid rows
        return peak * FLOAT + exact, advice

    def _memory_estimate(self, n_samples, n_features):
        """``(bytes, advice)`` of a ``fit`` on ``n_samples`` x ``n_features`` data (no data
        read)."""
        s = self._check_params(n_features)
        return self._fit_memory(s, n_samples, (n_samples, n_features))

    # ------------------------------------------------------------------ fitting
    def fit(self, X, y=None):
        """Fit on data X (n_samples, n_features) or a precomputed symmetric matrix; one release plan.

        ``X`` is never modified. A NaN or an infinity anywhere in ``X`` is refused with
        ``ValueError`` before anything is spent (every row is in hand then); a stream through
        :meth:`partial_fit`, which spends first, maps such rows instead. Returns self.
        """
        X = self._validate_input(X, reset=True)
        s = self._check_params(X.shape[1])
        for attr in ("_stream", "n_samples_seen_", "_stream_detached"):  # a batch fit ends any stream
            self.__dict__.pop(attr, None)
        if not s["precomputed"]:
            self._check_delta_for(X.shape[0], s["epsilon"], s["delta"])
        plan = self._plan(s)
        entropy = self._entropy()
        n_rows = None if is_dask_array(X) or s["precomputed"] else X.shape[0]
        # before any noisy release
        self.privacy_cost_, rng = self._record(s, plan, entropy, X.shape, n_rows, (X,))
        if s["precomputed"]:
            result = self._fit_matrix(X, s, plan, rng)
            mean, scale = np.zeros(X.shape[1], dtype=X.dtype), 1.0
            total = None if s["private"] else float(np.trace(X))
        elif s["private"]:  # exact sums of grid rows (NumPy or Dask): sensitivities hold at any n
            result, mean, total = self._fit_exact(X, s, plan, rng)
            mean = np.zeros(X.shape[1], dtype=X.dtype) if mean is None else mean
            self.n_samples_ = X.shape[0]
            scale = 1.0 / max(X.shape[0] - 1, 1)
        elif is_dask_array(X):  # Dask rows: the same steps, each data pass a reduction over row chunks
            Xc = clip_chunks(X, s["bound"])
            mean = private_mean(Xc, s["bound"], plan["z_mean"], rng) if s["center"] else None
            # The power steps prepare each raw chunk inside their own task (no extra pass per step);
            # the one-off passes (Analyze Gauss, the exact total) read the same rows lazily.
            prepare = functools.partial(_clip_center_clip, data_norm=s["bound"], mean=mean)
            Xc = X.map_blocks(prepare, dtype=X.dtype)
            total = self._total(Xc, s, plan, rng)
            result = self._fit_rows(Xc, s, plan, rng, raw=(X, prepare))
            mean = np.zeros(X.shape[1], dtype=X.dtype) if mean is None else mean
            self.n_samples_ = X.shape[0]
            scale = 1.0 / max(X.shape[0] - 1, 1)
        else:
            Xc = clip_rows(X, s["bound"])  # a new array when clipping; the caller's X is never written
            mean = private_mean(Xc, s["bound"], plan["z_mean"], rng) if s["center"] else None
            Xc = center_and_clip(Xc, mean, s["bound"], copy=Xc is X)
            total = self._total(Xc, s, plan, rng)
            result = self._fit_rows(Xc, s, plan, rng)
            mean = np.zeros(X.shape[1], dtype=X.dtype) if mean is None else mean
            self.n_samples_ = X.shape[0]
            scale = 1.0 / max(X.shape[0] - 1, 1)
        # The total variance: released from its own share (exact row-level fits), exact without
        # privacy, else the trace of Analyze Gauss's released matrix (calibration="paper",
        # precomputed input); the private power method otherwise releases none.
        if total is None and result.total is not None:
            total = result.total
        self.method_ = s["method"]
        size = X.shape[1] if s["method"] == "analyze_gauss" else s["p"]
        noise = eigenvalue_noise_level(result.noise_std, size, s["method"])
        self._set_spectrum(result, mean, scale, total, noise, floor=not s["precomputed"])
        return self

    @staticmethod
    def _total(Xc, s, plan, rng):
        """The released total ``sum_i ||c_i||^2``: noisy from its share, exact without privacy, else None."""
        if s["private"] and not plan["z_total"]:
            return None
        return private_total(Xc, s["bound"], plan["z_total"], rng)

    def _fit_exact(self, X, s, plan, rng):
        """A private row-level fit on grid rows: every statistic an exact sum (exact_sums.rst).

        The rows are ``grid_rows(x, B)`` for the mean, then those centred on the released mean and
        put on the grid again: one public map per row, so each released statistic is exactly
        ``sum_i f(x_i)`` with ``f`` in the range the sensitivity assumes, in any order.
        """
        B, n = s["bound"], X.shape[0]
        M, mean = map_rows(X, grid_rows, B), None
        if s["center"]:
            stat = rows_stat(M, row_sum, B / n)
            # released in float64, so that the centring is the same for float32 rows
            mean = exact_gaussian_release(stat, 2.0 * B / n, plan["z_mean"], rng)
            M = map_rows(X, _grid_centred, B, mean) if is_dask_array(X) \
                else grid_rows(M, B, mean, scale=B / 2.0 ** BITS, out=M)
        total = None
        if plan["z_total"]:
            stat = rows_stat(M, sum_of_squares, B ** 2)
            sens = total_variance_sensitivity(B)
            total = float(exact_gaussian_release(stat, sens, plan["z_total"], rng))
        z = _last(plan["z"])
        if s["method"] == "analyze_gauss":
            sens = covariance_sensitivity(B)
            C = rows_stat(M, gram, B ** 2).for_release(sens, z)  # the release rounds to this grid
            result = analyze_gauss(C, s["k"], rng, noise_multiplier=z, sensitivity=sens,
                                   rounding=None)  # C: an exact sum on the release's grid
            result = result._replace(components=result.components.astype(X.dtype, copy=False))
        else:
            operator = ExactGram(M, B)
            result = noisy_power_method(operator, s["k"], s["n_iter"], rng, noise_multiplier=plan["z"],
                                        sensitivity=operator.sensitivity,
                                        n_oversamples=s["p"] - s["k"], verbose=self.verbose,
                                        dtype=X.dtype, rounding=None)  # exact products
        return result, (None if mean is None else mean.astype(X.dtype, copy=False)), total

    def _fit_rows(self, Xc, s, plan, rng, raw=None):
        dask = is_dask_array(Xc)  # Dask rows: X^T X or X^T (X Q) summed over chunks on the workers
        if s["method"] == "analyze_gauss":
            sens = covariance_sensitivity(s["bound"]) if s["private"] else 1.0
            return analyze_gauss(dask_gram(Xc) if dask else Xc.T @ Xc, s["k"], rng,
                                 noise_multiplier=_last(plan["z"]), sensitivity=sens)
        sens = row_power_sensitivity(s["bound"], s["p"]) if s["private"] else 1.0
        operator = DaskGramMatrix(*raw) if dask else GramMatrix(Xc)
        return noisy_power_method(operator, s["k"], s["n_iter"], rng, noise_multiplier=plan["z"],
                                  sensitivity=sens, n_oversamples=s["p"] - s["k"], tol=s["tol"],
                                  verbose=self.verbose, dtype=Xc.dtype)

    def _fit_matrix(self, A, s, plan, rng):
        bound = s["bound"]
        if s["method"] == "analyze_gauss":  # the pair is one entry of the upper triangle
            return analyze_gauss(A, s["k"], rng, noise_multiplier=_last(plan["z"]), sensitivity=bound,
                                 order="magnitude", rounding=None)  # each entry a unit's own value
        if self.calibration == "paper":
            root = math.sqrt(2 * s["p"])

            def sensitivity(X):  # noise sigma * bound * ||X||_inf exactly as the paper prints it
                return bound * root * float(np.max(np.abs(X)))
        else:
            def sensitivity(X):
                return entry_power_sensitivity(X, bound)
        # OPEN: the products A X are float sums over entries that no public bound limits, so no
        # public allowance covers their rounding (docs/derivations/pca.rst, "Rounding").
        return noisy_power_method(DenseMatrix(A), s["k"], s["n_iter"], rng, noise_multiplier=plan["z"],
                                  sensitivity=sensitivity, n_oversamples=s["p"] - s["k"], tol=s["tol"],
                                  verbose=self.verbose, dtype=A.dtype, rounding=None)

    def _set_spectrum(self, result, mean, scale, total, noise, *, floor):
        self.components_ = result.components
        ev = np.asarray(result.eigenvalues, dtype=result.components.dtype) * scale
        self.explained_variance_ = np.maximum(ev, 0) if floor else ev
        self.explained_variance_noise_ = np.full(ev.shape, noise * scale, dtype=ev.dtype)
        self.__dict__.pop("explained_variance_ratio_", None)
        if total is not None:
            # Noise can push the released eigenvalues above the released total; dividing by the
            # larger of the two keeps the ratios a share of a whole (post-processing).
            whole = max(float(total), float(np.sum(np.abs(self.explained_variance_))) / scale)
            if whole > 0:
                self.explained_variance_ratio_ = self.explained_variance_ / (whole * scale)
        weak = np.flatnonzero(np.abs(self.explained_variance_) < 2 * self.explained_variance_noise_)
        if weak.size:
            warnings.warn(f"the released explained_variance_ of component(s) {(weak + 1).tolist()} is below "
                          "twice its noise level (explained_variance_noise_): those components are "
                          "dominated by the privacy noise. Use fewer components, more data, a larger "
                          "epsilon or a tighter data_norm.", UserWarning, stacklevel=3)
        self.mean_ = mean
        self.n_components_ = result.components.shape[0]
        self.n_iter_ = result.n_iter
        if self.verbose:
            print(f"[PrivatePCA] {self.method_}: {self.n_iter_} release(s), "
                  f"epsilon={self.privacy_cost_.epsilon:.4g}")

    # ------------------------------------------------------------------ streaming
    def partial_fit(self, X, y=None):
        """Stream a batch of rows through the Streaming Power Method (see :class:`StreamingPowerMethod`).

        The first call plans and records the whole stream's cost (one Gaussian event, whatever its
        length). Components exist once the first power block has closed. ``fit`` starts over.

        Parameters
        ----------
        X : array-like of shape (n_rows, n_features), or a dask array (fed chunk by chunk)
            The next rows of the stream, any number. Not modified. In a private stream a row that
            holds a NaN or an infinity is used as a zero row (see Notes); a non-private stream
            refuses it with ``ValueError``.
        y : ignored

        Returns
        -------
        self

        Notes
        -----
        A private stream spends at its first call, before its later chunks exist, so it cannot
        refuse a non-finite value in one without an error after the spend that depends on the
        data. It therefore takes every row, in every chunk (the first too, so that the result does
        not depend on where the stream is cut), through one public map: a row with a NaN or an
        infinity becomes the zero row. The row keeps its place in its block and is counted in
        ``n_samples_seen_``; the map acts on each row alone, so the stream's guarantee and
        sensitivities are unchanged (``docs/derivations/pca.rst``). Nothing warns or reports how
        many rows were mapped: check the rows first if that matters to you.
        """
        if is_dask_array(X):  # Dask rows: pulled one chunk at a time, in order (the cut does not matter)
            for chunk in RowChunks(X):
                self.partial_fit(chunk)
            return self
        self._check_stream_attached()
        first = getattr(self, "_stream", None) is None
        X = validate_stream_chunk(self, X, reset=first, dtype=[np.float64, np.float32])
        if first:
            d = X.shape[1]
            s = self._check_params(d, streaming=True)
            T = (max(1000, 10 * d) if self.block_size is None
                 else check_positive_int(self.block_size, "block_size"))
            plan = self._plan(s)
            entropy = self._entropy()
            # the stream holds one chunk and its block's sums at a time: this chunk stands for it
            self.privacy_cost_, rng = self._record(s, plan, entropy, (d, T), X.shape[0])
            self._stream = StreamingPowerMethod(
                d, s["k"], T, rng, n_oversamples=s["p"] - s["k"], data_norm=s["bound"],
                noise_multiplier=plan["z"], centered=not s["center"], dtype=X.dtype,
                digest=None if self.random_state is None else RowDigest(X.dtype, d))
            self.method_ = "streaming_power"
            std = (_last(plan["z"]) * row_power_sensitivity(s["bound"], s["p"]) / T) if s["private"] else 0.0
            self._stream_noise = eigenvalue_noise_level(std, s["p"], "power")
            for attr in ("components_", "explained_variance_", "explained_variance_ratio_", "mean_",
                         "n_samples_", "explained_variance_noise_"):
                self.__dict__.pop(attr, None)
        else:  # a later chunk, larger maybe: refused by its shape alone, and the stream goes on
            check_fits(2 * X.size * FLOAT, "PrivatePCA.partial_fit",
                       "Pass the rows in smaller chunks (the result does not depend on the cut)")
        before = self._stream.n_blocks
        # the stream computes in its own dtype: a float64 chunk of a float32 stream is cast first
        stream = self._stream.update(np.asarray(X, dtype=self._stream.dtype))
        self.n_samples_seen_ = stream.n_samples_seen
        self.n_iter_ = stream.n_blocks
        if self.verbose and stream.n_blocks > before:  # progress: counts only, all public
            print(f"[PrivatePCA] stream: {stream.n_blocks} power block(s) released, "
                  f"{stream.n_samples_seen} rows seen", flush=True)
        if stream.mean is not None:
            self.mean_ = stream.mean
        if stream.components is not None:
            self.components_ = stream.components
            self.explained_variance_ = np.maximum(stream.eigenvalues, 0)
            self.explained_variance_noise_ = np.full(self.explained_variance_.shape, self._stream_noise,
                                                     dtype=self.explained_variance_.dtype)
            self.n_components_ = stream.components.shape[0]
        return self

    # ------------------------------------------------------------------ transforming
    def transform(self, X):
        """Project rows onto ``components_`` (after subtracting ``mean_``); X is not modified."""
        check_is_fitted(self, "components_")
        if is_dask_array(X):  # a lazy dask projection, computed where the rows are
            X = check_dask_array(self, X, reset=False, check_finite=False)
        else:
            X = validate_private_data(self, X, dtype=[np.float64, np.float32], reset=False)
        Z = (X - self.mean_) @ self.components_.T
        if self.whiten:
            Z = Z / self._whitening_scale()
        return Z

    def inverse_transform(self, X):
        """Map projections back to feature space: ``Z @ components_ + mean_`` (whitening undone)."""
        check_is_fitted(self, "components_")
        Z = np.asarray(X)
        if Z.ndim != 2 or Z.shape[1] != self.n_components_:
            raise ValueError(f"X must have shape (n_samples, {self.n_components_}), got {Z.shape}")
        if self.whiten:
            Z = Z * self._whitening_scale()
        return Z @ self.components_ + self.mean_

    def _whitening_scale(self):
        ev = np.abs(self.explained_variance_)
        # A private estimate can be 0; floor it so whitening stays finite (post-processing).
        return np.sqrt(np.maximum(ev, np.finfo(ev.dtype).eps * max(float(ev.max()), 1.0)))

    @property
    def _n_features_out(self):
        return self.n_components_

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.transformer_tags.preserves_dtype = ["float64", "float32"]
        return tags

    # ------------------------------------------------------------------ pricing and scoring
    def privacy_cost(self, n_samples, n_features):
        """The cost and noise multiplier a ``fit`` on ``n_samples`` x ``n_features`` data would record.

        Computed from the parameters alone, with the fit's own plan (:meth:`_plan`): no data is
        read and nothing is spent. Returns a :class:`~dptensor.PrivacyCost`.
        """
        check_positive_int(n_samples, "n_samples")
        s = self._check_params(check_positive_int(n_features, "n_features"))
        plan = self._plan(s)
        return self._preview(plan["event"], delta=s["delta"], noise_multiplier=_last(plan["z"]),
                             n_queries=plan["n_queries"], calibration=self.calibration)

    def _score_units(self, X, y=None):
        """Per-row captured variance and its public range ``(0, 1)`` (``None`` without ``data_norm``)."""
        check_is_fitted(self, "components_")
        if self.input == "precomputed":
            raise ValueError("score needs rows (input='data'); a precomputed matrix has no per-row score")
        X = validate_private_data(self, X, dtype=[np.float64, np.float32], reset=False)
        V = self.components_
        if self.data_norm is None:
            R = X - self.mean_
            return np.einsum("ij,ij->i", R @ V.T, R @ V.T), None
        B = float(self.data_norm)
        R = center_and_clip(clip_rows(X, B), self.mean_, B)  # the rows as the fit used them
        P = R @ V.T
        return np.clip(np.einsum("ij,ij->i", P, P) / B**2, 0.0, 1.0), (0.0, 1.0)

    def score(self, X, y=None):
        """Captured variance: the mean over rows of ``||V r||^2 / data_norm^2``, higher is better.

        ``r`` is the row as the fit uses it (clipped to ``data_norm``, centred on ``mean_``,
        clipped again) and ``V`` the released components, so each row's score lies in [0, 1]: a
        replaced row moves the mean over ``n`` rows by at most ``1/n``, the sensitivity with which
        :class:`~dptensor.model_selection.PrivateGridSearchCV` releases it. Without ``data_norm``
        it is the unnormalised ``||V (x - mean_)||^2``, with no bound. ``y`` is ignored. The
        score itself is not private: it reads ``X`` exactly.
        """
        return self._mean_score(X, y)
