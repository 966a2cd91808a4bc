"""The peak memory of a completion fit, from public quantities only."""
from __future__ import annotations

import math

from .implicit import LANCZOS_MAXITER, TOP_DIRECTIONS
from .model import _CHUNK
from .observations import DENSE_MAX_CELLS, dense_ratio
from .spectral import kronecker_start, spectral_floats
from .user_level import COOCCURRENCE_BLOCK
from .user_start import power_block, start_method


def _grid_cells(n_obs, shape, tucker, als):
    """The cells of the dense layout when :meth:`Observations.grid` may choose it, else 0."""
    ratio = dense_ratio(tucker, als, len(shape))
    cells = math.prod(shape)
    return cells if cells <= min(ratio * n_obs, DENSE_MAX_CELLS) else 0


def fit_floats(n_obs, shape, rank, *, tucker, mode, fixed=(), chooses=False):
    """Floats (8 bytes each) a completion fit holds at its peak: an upper bound from public
    quantities only (the number of entries, the shape, the rank, the model and the solver).

    ``mode``: ``"als"``, ``"gd"``, ``"statistics"`` (DP-ALS with its spectral start) or
    ``"implicit"``. Every term is the size of an array the path forms, with the largest of its
    temporaries: the entries sorted by each mode, the per-entry terms of one mode's normal
    equations (``rank (rank + 1) / 2`` products and the design), the rows' Grams and solves, a
    few grid arrays when the dense layout may be chosen, the Tucker core's Gram, the spectral
    start's unfolding Grams (``n_m^2`` per mode) and its projected step. ``chooses``: a fit
    that chooses its modes on held-out entries first (``factor_modes="auto"`` without noise)
    also holds the nine tenths' positions, values and layouts, and the split.
    """
    if mode == "user":
        return user_floats(n_obs, shape, rank)
    d, n, r = len(shape), n_obs, rank
    free = [m for m in range(d) if m not in fixed]
    rows = max(shape)
    total = 8 * n + 2 * sum(shape) + d * (d + 3) * n  # values, counts, the sorted layouts
    if chooses:
        total += 2 * n + (8 * n + 2 * sum(shape) + d * (d + 3) * n)
    terms = r * (r + 1) // 2 + 4 * r + 4  # one mode's per-entry terms, its design and residuals
    solve = rows * (r + 1) * (r + 1) * 6  # the rows' Grams, their copies and solves
    if mode == "implicit":
        dim = sum(shape[m] for m in free) * r
        return total + n * (2 * r + 8) + dim * (min(LANCZOS_MAXITER, dim) + 3 * TOP_DIRECTIONS + 32)
    if tucker:  # the designs of every mode, the core's Kronecker rows (in blocks) and Gram
        width = r ** d
        total += 3 * d * n * r + 2 * min(_CHUNK, n * width) + 3 * width * width + n * terms
    elif mode == "gd":  # every mode's gathered rows and designs, and the clipped gradients
        total += 5 * d * n * r + 8 * n
    else:
        total += n * terms
    total += solve
    cells = _grid_cells(n, shape, tucker, mode != "gd")
    if cells:  # the mask, the values, a residual grid, and one product's columns of a mode
        columns = max(cells // shape[m] for m in range(d))
        total += 6 * cells + columns * (terms + (r**d if tucker else 0))
    if mode == "statistics":
        lead = free[0]
        grams = max((shape[m] ** 2 * 7 for m in free if m != lead), default=0)  # with eigh's copy
        kron = kronecker_start(n, shape, r, lead, fixed)
        total += grams + spectral_floats(n, shape, r, lead, fixed, kron=kron)
    return total


def user_floats(n_obs, shape, rank):
    """Floats a user-level fit (``privacy_unit="user"``) holds at its peak, an upper bound from
    the number of entries, the shape and the rank: the entries' layouts (as :func:`fit_floats`),
    the bounding's keys and orders, the per-entry products of one normal-equation pass, every
    user's and item's Gram with its copies and solve, and the start the public rule names
    (:func:`~dptensor.algorithms.completion.user_start.start_method`): the items x items matrix
    with its copies, or the power start's blocks, which never form it."""
    n, r, d, n_items = n_obs, rank, len(shape), shape[1]
    total = 8 * n + 2 * sum(shape) + d * (d + 3) * n + 16 * n  # layouts, the bounding
    total += n * (r * r + 4 * r + 8) + (shape[0] + n_items) * (r + 1) ** 2 * 6
    if not r:
        return total
    if start_method(n_items, r) == "power":  # the block, its product, QR and SVD; sparse rows
        return total + 8 * n_items * power_block(r) + 8 * n
    return total + 7 * n_items ** 2 + 3 * n_items * min(n_items, COOCCURRENCE_BLOCK) + 8 * n


def fit_advice(tucker):
    """What to change when a fit's bound (:func:`fit_floats`) exceeds what can be allocated."""
    if tucker:
        return ("Lower rank (a Tucker core holds rank^order numbers, its Gram their square), "
                "or fit decomposition='cp'")
    return ("Lower rank, leave modes out of factor_modes, or split the data (a mode with "
            "many rows costs n_m^2 for the spectral start of perturbation='statistics')")
