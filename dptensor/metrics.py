r"""Metrics with known ground truth: component recovery, eigenvalues, subspaces and RMSE.

Components are stored as rows, shape (k, d), as in every estimator's ``components_``. A
component is defined only up to sign (``v`` and ``-v`` span the same line; for a symmetric
third-order tensor ``lambda v⊗3 = (-lambda)(-v)⊗3``) and a set of components only up to order,
so :func:`recovery_error` and :func:`eigenvalue_error` first pair estimated and true components
with :func:`match_components`.
"""
from __future__ import annotations

import numpy as np
from scipy.optimize import linear_sum_assignment

__all__ = ["match_components", "recovery_error", "eigenvalue_error", "sin_theta_distance",
           "subspace_distance", "rmse"]


def _as_rows(A, name) -> np.ndarray:
    A = np.asarray(A, dtype=float)
    if A.ndim == 1:
        A = A[None, :]
    if A.ndim != 2 or A.shape[0] == 0 or A.shape[1] == 0:
        raise ValueError(f"{name} must be a non-empty 2-D array of components (k, d), "
                         f"got shape {A.shape}")
    if not np.all(np.isfinite(A)):
        raise ValueError(f"{name} contains NaN or infinity")
    return A


def _pair(estimated, true):
    estimated, true = _as_rows(estimated, "estimated"), _as_rows(true, "true")
    if estimated.shape[1] != true.shape[1]:
        raise ValueError(f"estimated and true must have the same number of features, got "
                         f"{estimated.shape[1]} and {true.shape[1]}")
    if estimated.shape[0] < true.shape[0]:
        raise ValueError(f"estimated has {estimated.shape[0]} components, fewer than the "
                         f"{true.shape[0]} true components to match")
    return estimated, true


def _normalize_rows(A):
    norms = np.linalg.norm(A, axis=1, keepdims=True)
    return A / np.where(norms > 0, norms, 1.0)


def match_components(estimated, true):
    """Pair each true component with a distinct estimated one, up to sign.

    The pairing maximises the sum of ``|cos|`` between paired rows (the Hungarian algorithm,
    :func:`scipy.optimize.linear_sum_assignment`), so it is a global optimum, not a greedy one.

    Parameters
    ----------
    estimated : array of shape (k_est, d), k_est >= k
    true : array of shape (k, d)

    Returns
    -------
    permutation : int array of shape (k,)
        ``estimated[permutation[i]]`` is paired with ``true[i]``.
    signs : array of shape (k,) of +1.0 / -1.0
        ``signs[i] * estimated[permutation[i]]`` points the same way as ``true[i]`` (+1 on a tie).

    Examples
    --------
    >>> import numpy as np
    >>> true = np.eye(3)
    >>> estimated = np.array([[0, 0, -1.0], [1.0, 0, 0], [0, 1.0, 0]])
    >>> perm, signs = match_components(estimated, true)
    >>> perm.tolist(), signs.tolist()
    ([1, 2, 0], [1.0, 1.0, -1.0])
    """
    estimated, true = _pair(estimated, true)
    cos = _normalize_rows(true) @ _normalize_rows(estimated).T  # (k, k_est)
    rows, cols = linear_sum_assignment(-np.abs(cos))
    permutation = np.empty(true.shape[0], dtype=np.intp)
    permutation[rows] = cols
    signs = np.where(cos[np.arange(true.shape[0]), permutation] < 0, -1.0, 1.0)
    return permutation, signs


def recovery_error(estimated, true):
    """Per-component l2 error ``||s_i v_hat_{pi(i)} - v_i||_2`` after matching up to sign and order.

    Neither input is rescaled, so with unit-norm rows the error is ``sqrt(2 - 2 |cos|)`` and lies in
    ``[0, sqrt(2)]``.

    Parameters
    ----------
    estimated : array of shape (k_est, d), k_est >= k
    true : array of shape (k, d)

    Returns
    -------
    errors : array of shape (k,)
        ``errors[i]`` is the error on ``true[i]``.

    Examples
    --------
    >>> import numpy as np
    >>> recovery_error(-np.eye(2)[::-1], np.eye(2)).tolist()
    [0.0, 0.0]
    """
    estimated, true = _pair(estimated, true)
    permutation, signs = match_components(estimated, true)
    return np.linalg.norm(signs[:, None] * estimated[permutation] - true, axis=1)


def eigenvalue_error(estimated_values, true_values, estimated=None, true=None):
    """Relative eigenvalue errors ``|lambda_hat_{pi(i)} - lambda_i| / |lambda_i|``.

    With ``estimated`` and ``true`` components given, ``pi`` is the pairing of
    :func:`match_components`, so that eigenvalues are compared with the components they belong to;
    without them the values are compared in the order given. Values are compared as they are, not
    up to sign: tensor estimators report positive eigenvalues (orienting each component so that
    ``T(v, v, v) > 0``), as the generators in :mod:`dptensor.datasets` do.

    Parameters
    ----------
    estimated_values : array of shape (k_est,)
    true_values : array of shape (k,), non-zero
    estimated : array of shape (k_est, d), optional
    true : array of shape (k, d), optional

    Returns
    -------
    errors : array of shape (k,)

    Examples
    --------
    >>> eigenvalue_error([2.0, 1.1], [1.0, 2.0], [[0, 1.0], [1.0, 0]],
    ...                  [[1.0, 0], [0, 1.0]]).round(3).tolist()
    [0.1, 0.0]
    """
    est_vals = np.asarray(estimated_values, dtype=float).ravel()
    true_vals = np.asarray(true_values, dtype=float).ravel()
    if np.any(true_vals == 0):
        raise ValueError("true_values must be non-zero for a relative error")
    if (estimated is None) != (true is None):
        raise ValueError("give both estimated and true components, or neither")
    if estimated is None:
        if est_vals.shape[0] < true_vals.shape[0]:
            raise ValueError(f"estimated_values has {est_vals.shape[0]} values, fewer than the "
                             f"{true_vals.shape[0]} true values")
        permutation = np.arange(true_vals.shape[0])
    else:
        estimated, true = _pair(estimated, true)
        if estimated.shape[0] != est_vals.shape[0] or true.shape[0] != true_vals.shape[0]:
            raise ValueError("each set of eigenvalues must have one value per component")
        permutation, _ = match_components(estimated, true)
    return np.abs(est_vals[permutation] - true_vals) / np.abs(true_vals)


def _orthonormal_rows(A, name):
    """An orthonormal basis (rows) of the row space of ``A``."""
    A = _as_rows(A, name)
    Q, R = np.linalg.qr(A.T)
    diag = np.abs(np.diag(R))
    if diag.size == 0 or diag.min() <= 1e-12 * max(diag.max(), 1e-300):
        raise ValueError(f"{name} must have linearly independent rows")
    return Q.T


def _bases(U, V):
    Qu, Qv = _orthonormal_rows(U, "U"), _orthonormal_rows(V, "V")
    if Qu.shape[1] != Qv.shape[1]:
        raise ValueError(f"U and V must have the same number of features, got {Qu.shape[1]} and "
                         f"{Qv.shape[1]}")
    return Qu, Qv


def sin_theta_distance(U, V, squared=True):
    r"""``sin`` of the largest principal angle from the row space of ``U`` to that of ``V``.

    This is ``||(I - P_V) Q_U^T||_2``, where ``Q_U`` is an orthonormal basis of the rows of ``U``
    and ``P_V`` the orthogonal projector onto the rows of ``V`` (both are orthonormalised first, so
    any basis of a subspace gives the same value). For ``k_U = k_V`` it is symmetric and equals
    ``||P_U - P_V||_2``; it is 1 when ``k_U > k_V``. This is the distance in the noisy power
    method's guarantee (Hardt & Price).

    Parameters
    ----------
    U : array of shape (k_U, d)
    V : array of shape (k_V, d)
    squared : bool, default=True
        Return ``sin^2`` (True) or ``sin`` (False).

    Returns
    -------
    float in [0, 1]

    Examples
    --------
    >>> import numpy as np
    >>> t = np.pi / 6
    >>> round(sin_theta_distance([[1.0, 0, 0]], [[np.cos(t), np.sin(t), 0]]), 6)
    0.25
    >>> round(sin_theta_distance([[1.0, 0, 0]], [[np.cos(t), np.sin(t), 0]], squared=False), 6)
    0.5
    """
    Qu, Qv = _bases(U, V)
    residual = Qu - (Qu @ Qv.T) @ Qv
    s = min(1.0, float(np.linalg.norm(residual, ord=2)))
    return s * s if squared else s


def subspace_distance(U, V):
    r"""Normalised projection distance ``||P_U - P_V||_F / sqrt(k_U + k_V)``, in [0, 1].

    ``P_U``, ``P_V`` are the orthogonal projectors onto the row spaces of ``U`` (k_U, d) and ``V``
    (k_V, d). For ``k_U = k_V = k``, ``||P_U - P_V||_F^2 = 2 sum_i sin^2 theta_i``, so the value is
    the root mean square of the sines of all ``k`` principal angles: 0 for the same subspace, 1 for
    orthogonal ones. Where :func:`sin_theta_distance` reports the worst direction, this averages
    over all of them. Computed from the k_U x k_V matrix ``Q_U Q_V^T``, never a d x d projector.

    Examples
    --------
    >>> round(subspace_distance([[1.0, 0, 0], [0, 1.0, 0]], [[1.0, 0, 0], [0, 0, 1.0]]) ** 2, 6)
    0.5
    """
    Qu, Qv = _bases(U, V)
    ku, kv = Qu.shape[0], Qv.shape[0]
    squared = ku + kv - 2.0 * float(np.sum((Qu @ Qv.T) ** 2))
    return float(np.sqrt(max(squared, 0.0) / (ku + kv)))


def rmse(y_true, y_pred):
    """Root mean squared error ``sqrt(mean((y_true - y_pred)^2))`` over all entries.

    Examples
    --------
    >>> round(rmse([1.0, 2.0, 3.0], [1.0, 2.0, 5.0]), 4)
    1.1547
    """
    y_true, y_pred = np.asarray(y_true, dtype=float), np.asarray(y_pred, dtype=float)
    if y_true.shape != y_pred.shape:
        raise ValueError(f"y_true and y_pred must have the same shape, got {y_true.shape} and "
                         f"{y_pred.shape}")
    if y_true.size == 0:
        raise ValueError("y_true is empty")
    return float(np.sqrt(np.mean((y_true - y_pred) ** 2)))
