"""What a completion fit says of its private start: which factors start from noise (after a fit,
from released values) and the noise level it would record (before, from public quantities).

Both starts release a symmetric matrix and take its top eigenvectors; the levels are half the
spectral edge of the noise (``docs/derivations/completion.rst``, "Noise levels of the private
starts"), in units of the squared clipping level of the residuals the matrix sums.
"""
from __future__ import annotations

import numpy as np

from .modes.statistics import COLUMN_CAP
from .spectral import gram_modes, gram_preview_level
from .user_level import start_noise_level, start_signal_bound

__all__ = ["weakest_factors", "preview_level"]


def weakest_factors(values, noise):
    """``(values, noise)`` per factor, each from the released matrix where it is weakest against
    that matrix's level; ``None`` when there is nothing to judge (no start, or no noise).

    ``values`` (rank,) with one level per factor (user level) or (n_grams, rank) with one level
    per Gram (value level)."""
    values, noise = np.asarray(values, dtype=float), np.asarray(noise, dtype=float)
    if values.ndim == 1:  # user level: one matrix, one level per factor
        values, noise = values[None], noise[None]
    else:  # one row per released Gram, one level per Gram
        noise = np.broadcast_to(noise[:, None], values.shape)
    if not values.size or not np.any(noise > 0):
        return None
    worst = np.argmin(np.maximum(values, 0.0) / noise, axis=0)
    cols = np.arange(values.shape[1])
    return np.maximum(values[worst, cols], 0.0), noise[worst, cols]


def preview_level(params, noise, shape, n_obs):
    """``(level, signal_bound)`` of a fit's start before the data, from its validated
    ``params`` and noise plan (``None``: not private) and the public shape and count.

    User level: the item-item matrix (``rank=0``: none, ``(0.0, None)``). Value level,
    ``"statistics"``: the weakest unfolding Gram at its column cap. Another mode has no start
    (``ValueError``)."""
    if params["unit"] == "user":
        if not params["rank"] or noise is None:
            return 0.0, None
        m, clip = noise["m"], noise["clip"]
        level = start_noise_level(shape[1], m, noise["zs"]["start"], clip) / clip**2
        return level, start_signal_bound(shape[0], m)
    if params["perturbation"] != "statistics":
        raise ValueError("expected_noise previews the spectral start of perturbation="
                         f'"statistics" and of privacy_unit="user", not '
                         f'{params["perturbation"]!r}')
    level = 0.0 if noise is None else max(
        gram_preview_level(n_obs, shape, m, params["fixed"], noise["z_gram"], COLUMN_CAP)
        for m in gram_modes(shape, params["fixed"]))
    return level, float(n_obs)
