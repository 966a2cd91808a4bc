"""Small pieces shared by every tensor power method (batch, streaming, private or not).

A power method keeps L candidate vectors ("restarts") as the columns of a d x L block ``U``, so
that every step is a few BLAS calls over all restarts at once. These helpers draw that block,
renormalise it, pick the winning restart, and give released axes a deterministic sign; none of
them touches data or privacy (they are post-processing of released values).
"""
from __future__ import annotations

import numpy as np

__all__ = ["random_unit_columns", "normalize_columns", "select_restart", "flip_signs"]


def random_unit_columns(d: int, L: int, rng: np.random.Generator, dtype=np.float64) -> np.ndarray:
    """``L`` independent vectors uniform on the unit sphere of R^d, as the columns of a (d, L) array.

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
    norms = np.linalg.norm(Y, axis=0)
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
