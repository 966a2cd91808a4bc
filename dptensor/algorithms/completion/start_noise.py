"""What a completion fit says of its private start: which factors start from noise (after a fit,
from released values) and the noise level it would record (before, from public quantities).

Both starts release a symmetric matrix and take its top eigenvectors; the levels are half the
spectral edge of the noise (``docs/derivations/completion.rst``, "Noise levels of the private
starts"), in units of the squared clipping level of the residuals the matrix sums.
"""
from __future__ import annotations

import numpy as np

from .fit_noise import preview as component_preview
from .modes.statistics import COLUMN_CAP
from .spectral import gram_modes, gram_preview_level
from .user_level import start_signal_bound
from .user_start import start_level

__all__ = ["weakest_factors", "preview_level", "USER_ADVICE", "VALUE_ADVICE"]

#: What a user-level fit whose factors start from noise advises.
USER_ADVICE = ("Its item factors learned nothing beyond the offsets: use rank=0 (offsets only), "
               "a smaller rank, more users or a larger epsilon.")
#: What a value-level fit whose factors start from noise advises.
VALUE_ADVICE = ("Its factors start from noise and learn little beyond the offsets: use a "
                "smaller rank, factor_modes=(0, 1) for ratings, more data or a larger epsilon.")


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


def preview_level(params, noise, shape, n_obs, width=1.0):
    """``(level, signal_bound, attribute)`` of a fit before the data, from its validated
    ``params`` and noise plan (``None``: not private), the public shape and count and the value
    range's ``width``; ``attribute`` names where the fit records the level.

    User level: the item-item matrix (``rank=0``: none, ``(0.0, None)``). Value level,
    ``"statistics"``: the weakest unfolding Gram at its column cap. The other modes: a
    component at the values' width (:func:`~dptensor.algorithms.completion.fit_noise.preview`,
    in the caller's units: its bound is ``width``)."""
    start = "start_eigenvalues_noise_"
    if params["unit"] == "user":
        if not params["rank"] or noise is None:
            return 0.0, None, start
        m, clip = noise["m"], noise["clip"]
        level = start_level(shape[1], params["rank"], m, noise["zs"]["start"], clip) / clip**2
        return level, start_signal_bound(shape[0], m), start
    if params["perturbation"] != "statistics":
        level = width * component_preview(params, noise, shape, n_obs)
        return level, float(width), "component_rms_noise_"
    level = 0.0 if noise is None else max(
        gram_preview_level(n_obs, shape, m, params["fixed"], noise["z_gram"], COLUMN_CAP)
        for m in gram_modes(shape, params["fixed"]))
    return level, float(n_obs), start
