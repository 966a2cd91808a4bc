r"""Preprocessing of sparse rating tensors: the per-time-slice bi-scaling of observed values.

:class:`BiScaler` (and its one-call form :func:`bi_scale`) standardises the rows and columns of
every slice of a sparse 3-way array, as the tensor completion study does to the MovieLens-100K
(user, item, day) ratings (:func:`dptensor.datasets.load_movielens_100k`) before completing them.
"""
from __future__ import annotations

import numbers

import numpy as np
from sklearn.base import BaseEstimator

from ._guards import fixed_floating_point
from ._validation import check_completion_targets, check_data_scale, check_positive_int
from .exceptions import real_scalar

__all__ = ["BiScaler", "bi_scale"]


def _check_nonnegative(value, name):
    value = real_scalar(value)
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not (0 <= value < np.inf):
        raise ValueError(f"{name} must be a finite number >= 0, got {value!r}")
    return float(value)


def _check_values(values, n_obs):
    """The observed values, one per index triple, as finite float64 (refused otherwise, as a
    completion's are: a missing entry is one left out, not a NaN)."""
    return check_completion_targets(values, n_obs, name="values", of="indices", advice=(
        "pass only the observed entries (dptensor.completion.to_observations turns a "
        "NaN-marked array into (indices, values))"))


def _scatter(ids, values, fill, shape):
    """A dense array of ``shape``: ``values`` at the flat positions ``ids``, ``fill`` elsewhere."""
    out = np.full(int(np.prod(shape)), fill, dtype=float)
    out[ids] = values
    return out.reshape(shape)


class BiScaler(BaseEstimator):
    r"""Standardise the rows and columns of every slice of a sparse 3-way array (bi-scaling).

    Bi-scaling (Hastie, Mazumder, Lee & Zadeh 2015) models each observed entry of a matrix as
    ``x_ij = alpha_i + beta_j + tau_i gamma_j z_ij`` and chooses row and column centres
    ``alpha, beta`` and scales ``tau, gamma`` so that the ``z`` have mean 0 and variance 1 along
    every row and every column, over the observed entries. Here each slice along ``axis`` (the
    day, for (user, item, day) ratings) is bi-scaled on its own, as in the tensor completion study
    on MovieLens-100K: ``alpha`` is indexed by (slice, row), ``beta`` by (slice, column), and so on.

    What is fitted, exactly: the values are first standardised globally,
    ``u = (x - mean_) / std_``, then

    .. math:: u_{sij} = \alpha_{si} + \beta_{sj} + \tau_{si}\gamma_{sj} z_{sij}

    by alternating exact updates (holding the others fixed) until no parameter (centres, and
    scales on a log scale) moves by more than ``tol``:

    * ``alpha_si = sum_j w (u - beta) / (sum_j w + shrinkage)`` with ``w = 1/(tau gamma)``, which
      makes the row means of ``z`` zero (exactly when ``shrinkage=0``); ``beta`` likewise;
    * ``tau_si^2 = (sum_j ((u - alpha - beta)/gamma)^2 + scale_prior) / (m_si + scale_prior)``
      over the row's ``m_si`` entries, which makes the row variances of ``z`` one (exactly when
      ``scale_prior=0``); ``gamma`` likewise.

    Why the two priors: a slice of a ratings tensor is very sparse (a user rates a handful of
    items a day), and with ``scale_prior=0`` a row whose few entries the centres fit exactly has
    zero variance, its scale collapses to 0 and the scales of its columns blow up (measured: log
    scales past 80 on MovieLens-like data). ``scale_prior`` pseudo-residuals of size one global
    standard deviation keep every scale bounded; on well-filled rows and columns they change
    little; ``shrinkage`` does the same for the centres. Rows or columns with fewer than
    ``min_count`` entries keep scale 1, and groups never
    observed keep centre 0 and scale 1, so :meth:`inverse_transform` is defined at every index.

    Parameters
    ----------
    axis : int, default=2
        The slicing axis; the other two are the rows and columns.
    max_iter : int, default=100
    tol : float, default=1e-6
    min_count : int, default=2
        Fewest entries a row/column needs in a slice to get its own scale.
    shrinkage : float >= 0, default=1.0
        Pseudo-entries at the global mean in every centre update. They pin down the additive
        model's free constant (``alpha + c, beta - c`` fit a slice equally well): without them the
        alternation drifts for hundreds of iterations on sparse slices (measured on
        MovieLens-like data: not converged after 300 at ``shrinkage=0.1``, 45 iterations at 1).
    scale_prior : float >= 0, default=1.0
        Pseudo-residuals (of one global standard deviation) in every scale update.

    Attributes
    ----------
    shape_ : tuple
    mean_, std_ : float
        The global standardisation.
    row_center_, row_scale_ : arrays of shape (n_slices, n_rows)
        ``alpha`` and ``tau`` (in units of ``std_``).
    col_center_, col_scale_ : arrays of shape (n_slices, n_cols)
        ``beta`` and ``gamma``.
    n_iter_ : int

    Examples
    --------
    >>> idx = np.array([[0, 0, 0], [0, 1, 0], [1, 0, 0], [1, 1, 0]])
    >>> z, scaler = bi_scale(idx, [1.0, 2.0, 3.0, 5.0])
    >>> np.allclose(scaler.inverse_transform(idx, z), [1.0, 2.0, 3.0, 5.0])
    True
    """

    def __init__(self, axis=2, max_iter=100, tol=1e-6, min_count=2, shrinkage=1.0, scale_prior=1.0):
        self.axis = axis
        self.max_iter = max_iter
        self.tol = tol
        self.min_count = min_count
        self.shrinkage = shrinkage
        self.scale_prior = scale_prior

    def _groups(self, indices):
        """Flat (slice, row) and (slice, column) group ids of each index triple."""
        indices = np.asarray(indices)
        if indices.ndim != 2 or indices.shape[1] != 3:
            raise ValueError(f"indices must have shape (n_obs, 3), got {indices.shape}")
        if not np.issubdtype(indices.dtype, np.integer):
            raise TypeError(f"indices must be integers, got dtype {indices.dtype}")
        if np.any(indices < 0) or np.any(indices >= np.asarray(self.shape_)):
            raise ValueError(f"indices out of bounds for shape {self.shape_}")
        row_axis, col_axis = [a for a in range(3) if a != self.axis]
        n_r, n_c = self.shape_[row_axis], self.shape_[col_axis]
        s = indices[:, self.axis]
        return s * n_r + indices[:, row_axis], s * n_c + indices[:, col_axis]

    @fixed_floating_point  # alike whatever the caller's np.errstate, as the estimators
    def fit(self, indices, values, shape=None):
        """Learn centres and scales from the observed ``values`` at ``indices`` (n_obs, 3).

        ``shape`` defaults to one past the largest index along each axis.
        """
        if self.axis not in (0, 1, 2):
            raise ValueError(f"axis must be 0, 1 or 2, got {self.axis!r}")
        check_positive_int(self.max_iter, "max_iter")
        check_positive_int(self.min_count, "min_count")
        shrink = _check_nonnegative(self.shrinkage, "shrinkage")
        prior = _check_nonnegative(self.scale_prior, "scale_prior")
        indices = np.asarray(indices)
        if indices.ndim != 2:
            raise ValueError(f"indices must have shape (n_obs, 3), got {indices.shape}")
        values = check_data_scale(_check_values(values, indices.shape[0]), "values", why=(
            "the standardisation squares them, which overflows float64 there (an infinite std_ "
            "and scales). Rescale the values (divide them by a power of ten)"))
        if values.size == 0:
            raise ValueError("values is empty")
        if shape is None:
            shape = tuple(int(m) + 1 for m in indices.max(axis=0))
        self.shape_ = tuple(int(m) for m in shape)
        row_ids, col_ids = self._groups(indices)
        row_axis, col_axis = [a for a in range(3) if a != self.axis]
        n_s, n_r, n_c = self.shape_[self.axis], self.shape_[row_axis], self.shape_[col_axis]
        # Work on the observed groups only: slices are sparse, most (slice, row) pairs are empty.
        row_ids, rows = np.unique(row_ids, return_inverse=True)
        col_ids, cols = np.unique(col_ids, return_inverse=True)
        n_rows, n_cols = len(row_ids), len(col_ids)

        self.mean_ = float(values.mean())
        self.std_ = float(values.std()) or 1.0
        u = (values - self.mean_) / self.std_
        row_count = np.bincount(rows, minlength=n_rows)
        col_count = np.bincount(cols, minlength=n_cols)
        row_free, col_free = row_count >= self.min_count, col_count >= self.min_count
        alpha, beta = np.zeros(n_rows), np.zeros(n_cols)
        tau, gamma = np.ones(n_rows), np.ones(n_cols)

        def centre(groups, target, w, n):
            total = np.maximum(np.bincount(groups, w, n) + shrink, 1e-300)
            return np.bincount(groups, target * w, n) / total

        def scale(groups, sq, free, count):
            var = (np.bincount(groups, sq, len(count)) + prior) / np.maximum(count + prior, 1e-300)
            return np.where(free & (var > 0), np.sqrt(np.maximum(var, 1e-300)), 1.0)

        for it in range(1, int(self.max_iter) + 1):
            old = np.concatenate([alpha, beta, np.log(tau), np.log(gamma)])
            w = 1.0 / (tau[rows] * gamma[cols])
            alpha = centre(rows, u - beta[cols], w, n_rows)
            beta = centre(cols, u - alpha[rows], w, n_cols)
            resid = u - alpha[rows] - beta[cols]
            tau = scale(rows, (resid / gamma[cols]) ** 2, row_free, row_count)
            gamma = scale(cols, (resid / tau[rows]) ** 2, col_free, col_count)
            new = np.concatenate([alpha, beta, np.log(tau), np.log(gamma)])
            if np.max(np.abs(new - old)) < self.tol:
                break
        self.n_iter_ = it
        self.row_center_ = _scatter(row_ids, alpha, 0.0, (n_s, n_r))
        self.row_scale_ = _scatter(row_ids, tau, 1.0, (n_s, n_r))
        self.col_center_ = _scatter(col_ids, beta, 0.0, (n_s, n_c))
        self.col_scale_ = _scatter(col_ids, gamma, 1.0, (n_s, n_c))
        return self

    def _parts(self, indices):
        if not hasattr(self, "row_center_"):
            raise ValueError("this BiScaler is not fitted yet; call fit first")
        rows, cols = self._groups(indices)
        centre = self.row_center_.ravel()[rows] + self.col_center_.ravel()[cols]
        scale = self.row_scale_.ravel()[rows] * self.col_scale_.ravel()[cols]
        return centre, scale

    @fixed_floating_point
    def transform(self, indices, values):
        """``z = ((x - mean_) / std_ - alpha - beta) / (tau gamma)`` at the given indices."""
        centre, scale = self._parts(indices)
        return ((_check_values(values, centre.size) - self.mean_) / self.std_ - centre) / scale

    @fixed_floating_point
    def inverse_transform(self, indices, z):
        """``x = mean_ + std_ (alpha + beta + tau gamma z)``: back to the original scale."""
        centre, scale = self._parts(indices)
        z = check_completion_targets(z, centre.size, name="z", of="indices", advice=(
            "a bi-scaled value (from transform, or a model fitted to its output) must be finite "
            "to map back; drop or fill in those entries first"))
        return self.mean_ + self.std_ * (centre + scale * z)

    def fit_transform(self, indices, values, shape=None):
        return self.fit(indices, values, shape).transform(indices, values)


def bi_scale(indices, values, shape=None, **params):
    """Bi-scale values per slice: returns ``(z, scaler)``.

    ``scaler.inverse_transform(indices, z)`` undoes it; ``params`` go to :class:`BiScaler`, which
    documents the model.
    """
    scaler = BiScaler(**params)
    return scaler.fit_transform(indices, values, shape), scaler
