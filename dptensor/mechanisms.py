"""Noise mechanisms: Gaussian, Laplace, AboveThreshold, and row clipping.

Each takes a sensitivity, a noise multiplier or epsilon, and an explicit
``numpy.random.Generator``. None of them touches the accountant: the caller records the matching
:mod:`dptensor.accounting` event *before* calling them.
"""
from __future__ import annotations

import numpy as np

__all__ = ["gaussian_noise", "laplace_noise", "above_threshold", "clip_rows", "symmetric_gaussian_tensor"]


def gaussian_noise(shape, sensitivity, noise_multiplier, rng: np.random.Generator, dtype=np.float64):
    """``N(0, (noise_multiplier * sensitivity)^2)`` noise of the given shape.

    ``sensitivity`` may be an array broadcasting against ``shape`` (a per-column scale, say a
    sensitivity that depends on each restart's previous, already public, iterate).
    """
    scale = np.asarray(sensitivity, dtype=float) * float(noise_multiplier)
    if np.any(scale < 0):
        raise ValueError("sensitivity and noise_multiplier must be >= 0")
    return (rng.standard_normal(shape) * scale).astype(dtype, copy=False)


def laplace_noise(shape, sensitivity, epsilon, rng: np.random.Generator, dtype=np.float64):
    """``Lap(sensitivity / epsilon)`` noise: each coordinate pure ``epsilon``-DP for that sensitivity."""
    if not epsilon > 0:
        raise ValueError(f"epsilon must be > 0, got {epsilon!r}")
    return rng.laplace(0.0, float(sensitivity) / float(epsilon), size=shape).astype(dtype, copy=False)


def above_threshold(queries, threshold, epsilon, rng: np.random.Generator, sensitivity=1.0):
    """AboveThreshold (Dwork & Roth, Alg. 1): index of the first query whose noisy value clears a noisy threshold.

    ``queries`` are the true answers, in order, each of sensitivity ``sensitivity``. The threshold
    gets ``Lap(2 s/eps)`` noise once and each query ``Lap(4 s/eps)``; the whole run is pure
    ``epsilon``-DP whatever the number of queries, and releases only the returned index (``None``
    when no query clears it). All noises are drawn at once: no Python loop over queries.
    """
    queries = np.asarray(queries, dtype=float)
    if queries.ndim != 1:
        raise ValueError("queries must be a 1-D sequence of answers")
    if not epsilon > 0:
        raise ValueError(f"epsilon must be > 0, got {epsilon!r}")
    noisy_threshold = threshold + rng.laplace(0.0, 2.0 * sensitivity / epsilon)
    noisy = queries + rng.laplace(0.0, 4.0 * sensitivity / epsilon, size=queries.shape)
    hits = np.flatnonzero(noisy >= noisy_threshold)
    return int(hits[0]) if hits.size else None


def clip_rows(X, data_norm):
    """Scale down every row of ``X`` whose l2 norm exceeds ``data_norm``; returns a new array.

    This is what makes row-level sensitivities hold whatever the data: after clipping, replacing a
    row moves any sum of per-row terms by a bounded amount. ``data_norm=None`` returns ``X``.

    >>> clip_rows(np.array([[3.0, 4.0], [0.3, 0.4]]), 1.0)
    array([[0.6, 0.8],
           [0.3, 0.4]])
    """
    if data_norm is None:
        return X
    norms = np.linalg.norm(X, axis=1)
    factor = np.minimum(1.0, data_norm / np.maximum(norms, np.finfo(float).tiny))
    return X * factor[:, None].astype(X.dtype, copy=False)


def symmetric_gaussian_tensor(d, sensitivity, noise_multiplier, rng: np.random.Generator, dtype=np.float64):
    """A symmetric d x d x d Gaussian tensor: each distinct entry (i <= j <= k) drawn once with std
    ``noise_multiplier * sensitivity`` and copied to its permutations (the input-perturbation noise)."""
    from ._operators import symmetrize_tensor

    G = np.triu(np.ones((d, d), dtype=bool))
    upper = G[:, :, None] & G[None, :, :]  # i <= j and j <= k
    E = np.zeros((d, d, d), dtype=dtype)
    E[upper] = gaussian_noise(int(upper.sum()), sensitivity, noise_multiplier, rng, dtype)
    # Count how many distinct permutations each entry has, so symmetrising restores each value.
    sym = symmetrize_tensor(E) * 6.0
    counts = symmetrize_tensor(upper.astype(dtype)) * 6.0
    return (sym / counts).astype(dtype, copy=False)
