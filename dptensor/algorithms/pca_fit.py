r"""The releases of one PCA fit, in order, from its noise plan: the mean, the total, the spectrum.

Three paths, each a fixed sequence of the releases the plan priced:

* :func:`exact_rows_fit`: a private fit on rows, every statistic an exact sum of grid rows
  (``docs/derivations/exact_sums.rst``), so each sensitivity holds at any ``n`` and in any order;
* :func:`float_rows_fit`: rows in floating point, NumPy or Dask (a fit without privacy);
* :func:`entry_matrix_fit`: a precomputed symmetric matrix under the entry unit.

The caller (:class:`~dptensor.PrivatePCA`) has checked the parameters and spent the budget; these
take the multipliers and the public bound as given. Each path offers its spectral statistics (a
:class:`~dptensor.algorithms.pca_methods.Source`) and the ``method`` (a
:class:`~dptensor.algorithms.pca_methods.PCAMethod`) takes the one it releases.
"""
from __future__ import annotations

import functools
import math

import numpy as np
import scipy.sparse as sp

from .dask import DaskGramMatrix, clip_chunks, dask_gram, is_dask_array
from .exact_entries import ExactEntryMatrix
from .exact_pass import centred_stats, grid_sums, one_pass_bytes
from .float_pass import centred_gram, float_pass_bytes
from .exact import (
    BITS,
    ExactClippedGram,
    ExactGram,
    exact_gaussian_release,
    exact_memory,
    gram,
    grid_rows,
    is_lazy,
    map_rows,
    row_sum,
    rows_stat,
    sum_of_squares,
)
from .groups import ExactGroupGram, group_average_rows, group_scale_rows
from .operators import DenseMatrix, GramMatrix
from .sparse import SparseGram, SparseRows
from .._guards import as_dtype
from .._memory import FLOAT
from ..mechanisms import clip_rows
from .pca_methods import Source
from .power import (
    center_and_clip,
    clip_center_clip,
    covariance_sensitivity,
    entry_power_sensitivity,
    grid_centred,
    private_mean,
    private_total,
    row_power_sensitivity,
    total_variance_sensitivity,
)

__all__ = ["exact_rows_fit", "grouped_rows_fit", "float_rows_fit", "entry_matrix_fit",
           "fit_memory", "finite_in_pass", "float_pass_first", "FINITE_IN_PASS"]


def exact_rows_fit(X, rng, *, k, p, n_iter, bound, method, center, noise, mean_noise,
                   total_noise, verbose=0, sums=None):
    """``(result, mean, total)`` of a private row-level fit on grid rows (``mean``, ``total``:
    ``None`` when not released).

    The rows are ``grid_rows(x, B)`` for the mean, then those centred on the released mean and
    put on the grid again: one public map per row, so each released statistic is exactly
    ``sum_i f(x_i)`` with ``f`` in the range the sensitivity assumes, in any order. ``sums``:
    the first pass's integers where :func:`float_pass_first` took it before the spend.
    """
    B, n = bound, X.shape[0]
    if method.takes_gram and not is_lazy(X):  # Dask or sparse rows: their own block passes
        return _one_pass_exact_fit(X, rng, k=k, p=p, n_iter=n_iter, bound=bound, method=method,
                                   center=center, noise=noise, mean_noise=mean_noise,
                                   total_noise=total_noise, verbose=verbose, sums=sums)
    M, mean = map_rows(X, grid_rows, B), None
    if center:
        stat = rows_stat(M, row_sum, B / n)
        # released in float64, so that the centring is the same for float32 rows
        mean = exact_gaussian_release(stat, 2.0 * B / n, mean_noise, rng)
        M = map_rows(X, grid_centred, B, mean) if is_lazy(X) \
            else grid_rows(M, B, mean, scale=B / 2.0 ** BITS, out=M)
    total = None
    if total_noise:
        stat = rows_stat(M, sum_of_squares, B ** 2)
        sens = total_variance_sensitivity(B)
        total = float(exact_gaussian_release(stat, sens, total_noise, rng))
    sens = covariance_sensitivity(B)
    stat = functools.cache(lambda: rows_stat(M, gram, B ** 2))  # one pass for every release
    source = Source(  # the release rounds to the Gram grid: C is an exact sum on it
        gram=lambda z: (stat().for_release(sens, z), sens),
        operator=lambda: _with_sensitivity(ExactGram(M, B)),
        gauss=dict(rounding=None), power=dict(rounding=None),  # exact sums and products
        clipped=lambda tau: ExactClippedGram(M, B, tau), n_rows=n, bound=B)
    return _released(method.spectrum(source, rng, k=k, p=p, n_iter=n_iter, noise=noise,
                                     verbose=verbose), mean, total, X.dtype)


def _released(result, mean, total, dtype):
    """A private fit's releases, made in float64 (a float32 fit's Gram sums reach n B^2, past
    float32's range from B = 1e17 at n = 2e5), with the components and the mean in X's dtype."""
    return (result._replace(components=as_dtype(result.components, dtype)),
            None if mean is None else as_dtype(mean, dtype), total)


def _one_pass_exact_fit(X, rng, *, k, p, n_iter, bound, method, center, noise, mean_noise,
                        total_noise, verbose=0, sums=None):
    """:func:`exact_rows_fit` for a method that takes the Gram statistic alone, never holding the
    grid rows: one pass for the sums of the grid rows (the mean's, and their Gram matrix), one
    read-only pass for the rows the centring leaves near the sphere
    (:mod:`~dptensor.algorithms.exact_pass`). The same integers as the held rows' statistics,
    so the same releases, in the same order, bit for bit."""
    B, n, mean = bound, X.shape[0], None
    sums = grid_sums(X, B) if sums is None else sums
    if center:
        mean = exact_gaussian_release(sums.mean_stat(B / n), 2.0 * B / n, mean_noise, rng)
    squares, C = centred_stats(X, sums, B, mean, B ** 2, total=bool(total_noise))
    total = None
    if total_noise:
        total = float(exact_gaussian_release(squares, total_variance_sensitivity(B), total_noise,
                                             rng))
    sens = covariance_sensitivity(B)
    source = Source(gram=lambda z: (C.for_release(sens, z), sens), operator=None,
                    gauss=dict(rounding=None))  # an exact sum on the Gram grid, as above
    return _released(method.spectrum(source, rng, k=k, p=p, n_iter=n_iter, noise=noise,
                                     verbose=verbose), mean, total, X.dtype)


def grouped_rows_fit(X, rng, *, codes, n_groups, k, p, n_iter, bound, method, center, noise,
                     mean_noise, total_noise, verbose=0):
    """:func:`exact_rows_fit` with one group of rows as the unit (``codes``: each row's group,
    ``0 .. n_groups - 1``).

    The mean is that of the groups' average grid rows (one vector in the ball per group, over the
    public ``n_groups``); the rows are centred on it and put on the grid again, one by one; then
    every group is scaled onto the ball as a whole (:func:`~dptensor.algorithms.groups.
    group_scale_rows`), so the total, the Gram matrix and the exact power products
    (:class:`~dptensor.algorithms.groups.ExactGroupGram`) move by at most one row's sensitivity
    when a whole group is replaced (``docs/derivations/pca.rst``, "Groups of rows").
    """
    B, G = bound, int(n_groups)
    M, mean = grid_rows(X, B), None
    if center:
        stat = row_sum(group_average_rows(M, codes, G), B / G)
        mean = exact_gaussian_release(stat, 2.0 * B / G, mean_noise, rng)
        M = grid_rows(M, B, mean, scale=B / 2.0 ** BITS, out=M)
    M = group_scale_rows(M, codes, G)
    total = None
    if total_noise:
        stat = sum_of_squares(M, B ** 2)
        total = float(exact_gaussian_release(stat, total_variance_sensitivity(B), total_noise, rng))
    sens = covariance_sensitivity(B)
    source = Source(gram=lambda z: (gram(M, B ** 2).for_release(sens, z), sens),
                    operator=lambda: _with_sensitivity(ExactGroupGram(M, B)),
                    gauss=dict(rounding=None), power=dict(rounding=None))  # exact, as above
    return _released(method.spectrum(source, rng, k=k, p=p, n_iter=n_iter, noise=noise,
                                     verbose=verbose), mean, total, X.dtype)


#: ``FitData.extra`` of a fit whose validation left NaN and infinity to its pass.
FINITE_IN_PASS = "finite in pass"


def finite_in_pass(X, input) -> bool:
    """Whether a fit's check for NaN and infinity can be its pass's own (:func:`float_pass_first`,
    before the spend): rows in memory (not sparse, not Dask), with or without privacy."""
    return input == "data" and not sp.issparse(X) and not is_dask_array(X)


def float_pass_first(X, settings, refuse):
    """Before the spend of a fit on rows in memory, its first pass where its method takes the
    Gram matrix: with privacy, the exact integers of :func:`~dptensor.algorithms.exact_pass.
    grid_sums` (:class:`~dptensor.algorithms.exact_pass.GridSums`, whose map meets every NaN
    and infinity), without, the one pass :func:`~dptensor.algorithms.float_pass.centred_gram`
    (``(mean, C, total)``); else ``None``. ``refuse(X)`` raises the validation's own error for a
    NaN or an infinity: here where the pass meets one (its sums are not finite), or for every
    other method (its rows are read after the spend). Without privacy, finite rows whose
    products overflow are refused too, and so are sums (or, for the other methods, a bound on
    them) past :func:`_room` (float32's: about 2e37 / d), where the eigensolver's own sums of
    them would overflow after the spend (the exact sums are integers on the grid: they cannot)."""
    if settings.private:
        if not settings.method.takes_gram:
            refuse(X)
            return None
        sums = grid_sums(X, settings.bound)
        if sums is not None:
            return sums
        refuse(X)  # the pass met a NaN or an infinity: refused here, whatever refuse checks
        raise ValueError("Input X contains NaN or infinity")
    if not settings.method.takes_gram:
        refuse(X)
        # the power method's products X^T X V reach ||X||_F^2 (centring only lowers it), its rows
        # clipped to data_norm: their squared norms summed in float64, one read, no copy of X
        squares = np.einsum("ij,ij->i", X, X, dtype=np.float64)
        if settings.bound:
            np.minimum(squares, settings.bound ** 2, out=squares)
        if float(np.sum(squares)) < _room(X.dtype, X.shape[1]):
            return None
    else:
        with np.errstate(over="ignore", invalid="ignore"):  # a NaN's or an overflow's: refused
            mean, C, total = centred_gram(X, settings.bound, settings.center)
        if np.all(np.isfinite(np.diagonal(C))) and (mean is None or np.all(np.isfinite(mean))) \
                and total < _room(C.dtype, C.shape[0]):
            return mean, C, total
        refuse(X)
    raise ValueError("the rows' products overflow floating point: scale X down (float32 rows: "
                     "or pass them as float64), or set data_norm to clip the rows")


def _room(dtype, d) -> float:
    """The largest sum of squares a fit's float sums may reach: 1/16 d of the dtype's largest
    float, room for the eigensolver's own sums of them."""
    return float(np.finfo(dtype).max) / (16 * max(d, 1))


def float_rows_fit(X, rng, *, k, p, n_iter, bound, method, center, private, noise, mean_noise,
                   total_noise, tol=0.0, verbose=0, gram=None):
    """``(result, mean, total)`` of a fit on rows in floating point, NumPy or Dask: clip,
    centre on the mean, clip again, then the total and the spectrum (``mean``, ``total``:
    ``None`` when not computed). The caller's ``X`` is never written; ``gram``: the pass
    :func:`float_pass_first` took before the spend."""
    spectrum = functools.partial(_rows_spectrum, k=k, p=p, n_iter=n_iter, bound=bound,
                                 method=method, private=private, noise=noise, tol=tol,
                                 verbose=verbose)
    if isinstance(X, SparseRows):  # the same steps, each data pass over densified row blocks
        Xc = X.map(clip_rows, bound)
        mean = private_mean(Xc, bound, mean_noise, rng) if center else None
        Xc = X.map(_clip_center_clip, bound, mean)
        total = _total(Xc, bound, private, total_noise, rng)
        return spectrum(Xc, rng), mean, total
    if is_dask_array(X):  # Dask rows: the same steps, each data pass a reduction over chunks
        Xc = clip_chunks(X, bound)
        mean = private_mean(Xc, bound, mean_noise, rng) if center else None
        # The power steps prepare each raw chunk inside their own task (no extra pass per
        # step); the one-off passes (Analyze Gauss, the exact total) read the same rows lazily.
        prepare = functools.partial(clip_center_clip, data_norm=bound, mean=mean)
        Xc = X.map_blocks(prepare, dtype=X.dtype)
        total = _total(Xc, bound, private, total_noise, rng)
        return spectrum(Xc, rng, raw=(X, prepare)), mean, total
    if method.takes_gram and not private:  # one pass of blocks (two for a far mean), no copy
        mean, C, total = centred_gram(X, bound, center) if gram is None else gram
        source = Source(gram=lambda z: (C, 1.0), operator=None)
        return method.spectrum(source, rng, k=k, p=p, n_iter=n_iter, noise=noise,
                               verbose=verbose, dtype=X.dtype), mean, total
    Xc = clip_rows(X, bound)  # a new array when clipping; the caller's X is never written
    mean = private_mean(Xc, bound, mean_noise, rng) if center else None
    Xc = center_and_clip(Xc, mean, bound, copy=Xc is X)
    total = _total(Xc, bound, private, total_noise, rng)
    return spectrum(Xc, rng), mean, total


def _clip_center_clip(block, bound, mean):
    """The in-memory path's steps on one block of rows, in the same operations (so the same
    rounding): clip into a new array, then centre and clip that one in place."""
    Xc = clip_rows(block, bound)
    return center_and_clip(Xc, mean, bound, copy=Xc is block)


def _total(Xc, bound, private, total_noise, rng):
    """The released total ``sum_i ||c_i||^2``: noisy from its share, exact without privacy,
    else None."""
    if private and not total_noise:
        return None
    return private_total(Xc, bound, total_noise, rng)


def _with_sensitivity(operator):
    """``(operator, sensitivity)`` of an exact operator, which carries its own."""
    return operator, operator.sensitivity


def _rows_spectrum(Xc, rng, *, k, p, n_iter, bound, method, private, noise, tol, verbose,
                   raw=None):
    dask = is_dask_array(Xc)  # Dask rows: X^T X or X^T (X Q) summed over chunks on the workers
    sparse = isinstance(Xc, SparseRows)  # sparse rows: summed over densified blocks

    def gram_(z):
        C = dask_gram(Xc) if dask else Xc.block_sum(lambda B: B.T @ B) if sparse else Xc.T @ Xc
        return C, covariance_sensitivity(bound) if private else 1.0

    def operator_():
        op = DaskGramMatrix(*raw) if dask else SparseGram(Xc) if sparse else GramMatrix(Xc)
        return op, row_power_sensitivity(bound, p) if private else 1.0

    return method.spectrum(Source(gram_, operator_, power=dict(tol=tol)), rng, k=k, p=p,
                           n_iter=n_iter, noise=noise, verbose=verbose, dtype=Xc.dtype)


def entry_matrix_fit(A, rng, *, k, p, n_iter, bound, method, noise, paper=False, tol=0.0,
                     verbose=0):
    """The spectrum of a precomputed symmetric matrix under the entry unit: Analyze Gauss (the
    pair is one entry of the upper triangle) or the PPM, its noise scaled by the previous
    iterate's largest rows (``paper``: ``sqrt(2p) ||X||_inf`` as Hardt–Price print it)."""
    # Analyze Gauss releases A itself: each entry a unit's own value, no float sum to allow for
    source = Source(gram=lambda z: (A, bound), gauss=dict(order="magnitude", rounding=None),
                    operator=lambda: _entry_operator(A, p, bound, noise, paper),
                    power=dict(tol=tol))
    private = bool(np.any(np.asarray(noise) > 0))  # its releases in float64, as the rows' fits
    result = method.spectrum(source, rng, k=k, p=p, n_iter=n_iter, noise=noise, verbose=verbose,
                             dtype=np.float64 if private else A.dtype)
    return result._replace(components=as_dtype(result.components, A.dtype))


def _entry_operator(A, p, bound, noise, paper):
    """``(operator, sensitivity)`` of the power products on a precomputed matrix."""
    if not np.any(np.asarray(noise) > 0):  # no release: the float products are the fit's own
        return DenseMatrix(A), 1.0
    # Private: exact products of the entries on their grid (exact_entries), released on their
    # own grid; no float rounding of sums over entries of unbounded size reaches the release.
    operator = ExactEntryMatrix(A, bound)
    root = math.sqrt(2 * p)

    def sensitivity(X):
        Xq = operator.grid_iterate(X)
        if paper:  # noise sigma * bound * ||X||_inf exactly as the paper prints it
            return operator.bound * root * float(np.max(np.abs(Xq)))
        return entry_power_sensitivity(Xq, operator.bound)

    return operator, sensitivity


def fit_memory(n_rows, d, *, p, method, private, precomputed, grouped=False):
    """``(bytes, advice)``: a PCA fit's peak allocation from its shape, an upper bound in float64.

    A method that takes the Gram statistic alone (Analyze Gauss) on rows never holds a copy of
    them: a few blocks of rows and d x d sums, and without privacy a float32 norm per row
    (:func:`~dptensor.algorithms.exact_pass.one_pass_bytes`,
    :func:`~dptensor.algorithms.float_pass.float_pass_bytes`). Otherwise the
    rows' clipped and centred copy (``n_rows`` at once: all of them, one chunk of a
    stream, none for Dask or a precomputed matrix), then the ``method``'s own arrays
    (:meth:`~dptensor.algorithms.pca_methods.PCAMethod.memory`: Analyze Gauss's d x d matrix with
    its noise and eigendecomposition, or the power method's n x p and d x p products); a private
    fit adds its exact statistics, and a grouped one (``grouped``) the group-scaled copy of its
    grid rows.
    """
    n = n_rows or 0
    arrays, columns = method.memory(n, d, p)
    if method.takes_gram and n_rows is not None and not (grouped or precomputed):  # no copy
        rows = one_pass_bytes(d, n) if private else float_pass_bytes(n, d)
        return arrays * FLOAT + rows, method.advice
    peak = n * d + 4 * n + arrays
    exact = exact_memory(n, d, columns) if private else 0  # the exact sums' grid rows
    if private and precomputed:
        exact += method.exact_entry_bytes(d)
    if grouped:  # the group-scaled copy of the grid rows and the split power products
        exact += (n * d + 4 * n + 4 * n * p) * FLOAT
    return peak * FLOAT + exact, method.advice
