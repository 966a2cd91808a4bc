r"""Probabilistic PCA's model read off released PCA parameters, as scikit-learn's PCA defines it.

scikit-learn's ``PCA`` models a row as ``x = mean + W^T z + e`` with ``z ~ N(0, I_k)`` and
``e ~ N(0, sigma^2 I)`` (Tipping and Bishop): its covariance is
``W^T diag(max(lambda - sigma^2, 0)) W + sigma^2 I``, with ``W`` the components, ``lambda`` the
explained variances and ``sigma^2`` the noise variance, the average variance the components do
not explain. Every function here takes those parameters as given (released values), reads no
data but the rows it is asked to score, and so is post-processing.
"""
from __future__ import annotations

import math

import numpy as np

__all__ = ["noise_variance", "model_covariance", "model_precision", "log_likelihood"]


#: ``noise_variance``'s floor, as a share of the released eigenvalues' noise level.
FLOOR_SHARE = 2.0 ** -20


def noise_variance(total_variance, explained_variance, n_samples, n_features, noise_level=0.0):
    """scikit-learn's ``noise_variance_``: ``(total - sum(lambda)) / (min(n, d) - k)``, 0 when
    ``k >= min(n, d)``.

    ``total_variance`` is the trace of the covariance (in the units of ``lambda``). Floored at
    ``FLOOR_SHARE`` times ``noise_level``: a released total below the released eigenvalues' sum
    (noise can do that) leaves no unexplained variance the release can resolve. A private fit
    passes its eigenvalues' noise level (public); a floor far below it keeps its model's
    covariance from being singular: whether it is must not depend on the noise drawn.

    >>> noise_variance(10.0, [4.0, 3.0], 100, 5), noise_variance(6.0, [4.0, 3.0], 100, 5, 2**20)
    (1.0, 1.0)
    """
    k = len(explained_variance)
    rest = min(int(n_samples), int(n_features)) - k
    if rest <= 0:
        return 0.0
    unexplained = (float(total_variance) - float(np.sum(explained_variance, dtype=float))) / rest
    return max(unexplained, FLOOR_SHARE * float(noise_level))


def _factors(components, explained_variance, sigma2, whiten):
    """``(W, D)`` with covariance ``W^T diag(D) W + sigma2 I`` (scikit-learn scales ``W`` by
    ``sqrt(lambda)`` when whitening, and so does this)."""
    W = np.asarray(components)
    ev = np.asarray(explained_variance)
    if whiten:
        W = W * np.sqrt(ev[:, np.newaxis])
    return W, np.where(ev > sigma2, ev - sigma2, 0.0).astype(ev.dtype)


def model_covariance(components, explained_variance, sigma2, *, whiten=False):
    """The model's covariance ``W^T diag(max(lambda - sigma2, 0)) W + sigma2 I`` (d x d)."""
    W, D = _factors(components, explained_variance, sigma2, whiten)
    cov = (W.T * D) @ W
    cov.flat[:: len(cov) + 1] += sigma2
    return cov


def model_precision(components, explained_variance, sigma2, *, whiten=False):
    """The inverse of :func:`model_covariance`, by the matrix inversion lemma when ``k < d``.

    With ``U = diag(sqrt(D)) W``: ``(sigma2 I + U^T U)^-1 = (I - U^T (sigma2 I + U U^T)^-1 U) /
    sigma2``, which needs no ``1 / D`` (a released eigenvalue at the noise level gives ``D = 0``,
    where scikit-learn's form divides by zero). ``k = d``: the covariance's inverse. Raises
    ``ValueError`` when the covariance is singular (``sigma2 = 0`` with ``k < d``).
    """
    W, D = _factors(components, explained_variance, sigma2, whiten)
    k, d = W.shape
    if k == d:
        return np.linalg.inv(model_covariance(components, explained_variance, sigma2,
                                              whiten=whiten))
    if not sigma2 > 0:
        raise ValueError("the model's covariance is singular (noise_variance_ is 0 with "
                         "n_components < n_features): it has no precision")
    U = W * np.sqrt(D)[:, np.newaxis]
    inner = U @ U.T
    inner.flat[:: k + 1] += sigma2
    precision = -(U.T @ np.linalg.solve(inner, U))
    precision.flat[:: d + 1] += 1.0
    return precision / sigma2


def log_likelihood(R, precision):
    """Each centred row's Gaussian log-density under ``precision``: scikit-learn's
    ``score_samples``, ``-(r^T P r + d ln(2 pi) - ln det P) / 2``."""
    d = R.shape[1]
    sign, logdet = np.linalg.slogdet(precision)
    logdet = logdet if sign > 0 else -math.inf  # as scikit-learn's fast_logdet
    quad = np.einsum("ij,ij->i", R, R @ precision)
    return -0.5 * quad - 0.5 * (d * math.log(2.0 * math.pi) - logdet)
