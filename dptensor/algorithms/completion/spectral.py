"""The private spectral start of DP-ALS: released unfolding Grams, a projected step, and a
small CP fitted to the released values."""
from __future__ import annotations

import functools
import math

import numpy as np
import scipy.sparse as sp

from ...mechanisms import Rounding, gaussian_release
from ..eigen import top_k_eigh, use_top_k
from .als import als
from .design import _grid_rows
from .dp_als import clip_designs, wiener_solve
from .model import Model, _khatri_rao_rows, init_model, offsets
from .observations import Observations
from .releases import entry_rounding, release_rows


#: Restarts of the small CP in :func:`spectral_start` (post-processing of released values, so
#: free): one start landed in a poor local optimum in two of eight draws on the 100^3 study at
#: epsilon = 4, five in none.
N_RESTARTS = 5


def unfolding_columns(obs: Observations, m: int, others=None):
    """Column of every entry in the mode-``m`` unfolding (only the columns that hold an entry are
    numbered) and the number of entries in each column: both public (functions of Omega).
    ``others``: the modes that index the columns (default: every mode but ``m``)."""
    others = [k for k in range(obs.order) if k != m] if others is None else list(others)
    dims = [obs.shape[k] for k in others]
    if math.prod(dims) < 2**62:  # one integer per column: the fast way
        cols = np.ravel_multi_index(tuple(obs.X[:, k] for k in others), dims)
    else:  # more columns than an int64 numbers (many modes): the index tuples themselves
        cols = obs.X[:, others]
    _, col_id, col_counts = np.unique(cols, axis=0, return_inverse=True, return_counts=True)
    return col_id.ravel(), col_counts


def _first_per_group(group, k):
    """Mask keeping the first ``k`` entries (in index order) of every group: public (Omega only)."""
    order = np.argsort(group, kind="stable")
    sorted_groups = group[order]
    starts = np.searchsorted(sorted_groups, sorted_groups, side="left")
    keep = np.zeros(len(group), dtype=bool)
    keep[order] = (np.arange(len(group)) - starts) < k
    return keep


def unfolding_gram(obs: Observations, t: np.ndarray, m: int, clip, cap=None, others=None):
    """``(M, Delta)``: the off-diagonal Gram ``Y Y^T`` of the mode-``m`` unfolding of the clipped
    values ``clip(t, -clip, clip)`` and the l2 sensitivity of its upper triangle.

    ``cap`` keeps only the first ``cap`` entries (in index order, a function of Omega only) of
    every column: the sensitivity grows with the fullest column, ``Delta = D clip sqrt(n_col - 1)``
    with ``D = min(1, 2 clip)`` (how far one value moves its clipped value) and ``n_col`` the
    largest number of kept entries in a column; the diagonal is zeroed (not released).

    Several entries can share a cell (row, column): a position observed twice, or, with ``others``
    (a subset of the other modes, those with a factor), entries that differ only in the other
    modes. Only the first of each cell (index order, public) is kept, so every cell holds one
    clipped value, at most ``clip`` in size, and the bound holds (summed, a cell could hold
    ``2 clip`` and move the release by twice as much).
    """
    col_id, col_counts = unfolding_columns(obs, m, others)
    keep = _first_per_group(col_id * obs.shape[m] + obs.X[:, m], 1)
    col_counts = np.bincount(col_id[keep], minlength=len(col_counts))
    if cap is not None:
        keep &= _first_per_group(np.where(keep, col_id, -1), cap)
        col_counts = np.minimum(col_counts, cap)
    tc = np.clip(t[keep], -clip, clip)
    Y = sp.csr_array((tc, (obs.X[keep, m], col_id[keep])), shape=(obs.shape[m], len(col_counts)))
    M = (Y @ Y.T).toarray()
    np.fill_diagonal(M, 0.0)
    sens = min(1.0, 2.0 * clip) * clip * math.sqrt(max(int(col_counts.max()) - 1, 1))
    return M, sens


def gram_rounding(obs: Observations, m: int, clip) -> Rounding:
    """The rounding of :func:`unfolding_gram`'s upper triangle: ``M_ij`` is a dot product over the
    columns rows ``i`` and ``j`` share (at most the larger row count), and in the Frobenius norm
    ``sum_c ||y_c y_c^T|| = sum_c ||y_c||^2 <= clip^2`` per kept entry, at most every entry."""
    return entry_rounding(len(obs.X), clip**2, obs.counts[m].max())


def projected_statistics(obs: Observations, t: np.ndarray, bases, design_quantile=0.9, lead=0,
                         model=None, kron=True):
    """Mode-``lead`` normal equations on the designs ``kron(V_k[e_k], k != lead)`` (the released
    bases; with ``kron=False`` their elementwise product, a CP design of ``rank`` columns), clipped
    to their public bound ``C``: ``(grams, rhs, C)``.
    One value of ``t`` moves one row's right-hand side by at most its change times ``C``."""
    grid = obs.grid(model) if lead == 0 else None
    if grid is not None:
        Kt, bound = clip_designs(_grid_rows(bases[1:], kron=kron).T, design_quantile,
                                 grid.column_counts(0))
        gram, rhs = grid.normal_equations(0, Kt.T, grid.scatter(t), obs.counts[0])
        return gram, rhs, bound
    L = obs.layout(lead)
    rows = [np.take(bases[k], L.index[k], axis=0) for k in range(obs.order) if k != lead]
    if kron:
        Kt = _khatri_rao_rows(rows).T
    else:  # a fixed mode's basis has one column: it broadcasts
        Kt = functools.reduce(np.multiply, rows).T
    Kt, bound = clip_designs(np.ascontiguousarray(Kt), design_quantile)
    gram, rhs = L.normal_equations(Kt, t[L.perm])
    return gram, rhs, bound


#: The Kronecker designs of :func:`spectral_start` (and the small CP after them) are used while
#: their largest arrays hold at most this many floats (1 GiB); past it, with many modes, the CP
#: design of ``rank`` columns (see :func:`kronecker_start`).
SPECTRAL_MAX_FLOATS = 1 << 27


def _kron_widths(shape, rank, lead, fixed):
    """The columns of each other mode's basis in :func:`spectral_start` (a fixed mode: one)."""
    return [1 if k in fixed else rank for k in range(len(shape)) if k != lead]


def kronecker_start(n_obs, shape, rank, lead, fixed=()):
    """Whether :func:`spectral_start` projects on Kronecker designs: their per-entry terms
    (``p (p + 1) / 2 + p`` for ``p = prod`` of the bases' widths), the lead's Grams and the small
    CP's cells fit in ``SPECTRAL_MAX_FLOATS``. Public: the number of entries, shape, rank, modes."""
    return spectral_floats(n_obs, shape, rank, lead, fixed, kron=True) <= SPECTRAL_MAX_FLOATS


def spectral_floats(n_obs, shape, rank, lead, fixed=(), kron=True):
    """Floats held at the peak of :func:`spectral_start`'s projected step and small CP (an upper
    bound, from public quantities)."""
    d = len(shape)
    p = math.prod(_kron_widths(shape, rank, lead, fixed)) if kron else rank
    terms = p * (p + 1) // 2 + 3 * p + 2
    n_lead = shape[lead]
    step = (terms + p + 4) * n_obs + n_lead * (terms + 5 * p * p + 4 * p)
    if not kron:
        return step
    cells = n_lead * p  # the small CP: ALS on every cell of W, order d
    return step + cells * ((d + 3) * d + rank * (rank + 1) // 2 + 4 * rank + 8)


def _top_vectors(M, r, noise_norm=None):
    """The top ``r`` eigenpairs ``(values, vectors)`` of the released Gram ``M`` (algebraic
    order): Lanczos where :func:`~dptensor.algorithms.eigen.use_top_k` says (a large mode,
    few columns), resolved to well below ``noise_norm`` (the release's noise norm, public), else
    LAPACK."""
    if use_top_k(M.shape[0], r):
        return top_k_eigh(M, r, noise_norm=noise_norm)
    vals, vecs = np.linalg.eigh(M)
    top = np.argsort(vals)[::-1][:r]
    return vals[top], vecs[:, top]


def gram_noise_level(n_rows, sens, z) -> float:
    """Half the spectral edge of a released Gram's noise: its strict upper triangle holds
    ``N(0, (z sens)^2)`` per entry, mirrored (diagonal 0), a Wigner matrix whose eigenvalues reach
    ``2 sqrt(n_rows) z sens``. A direction whose released eigenvalue is below twice this level
    is the noise's. Public quantities (the sensitivity from Omega and released values)."""
    return math.sqrt(n_rows) * z * sens


def gram_modes(shape, fixed):
    """The modes whose unfolding Gram the start releases: every mode with a factor but the
    first (the lead)."""
    free = [m for m in range(len(shape)) if m not in fixed]
    return free[1:]


def gram_preview_level(n_obs, shape, m, fixed, z, column_cap):
    """:func:`gram_noise_level` of mode ``m``'s Gram before the data, in units of the clipping
    level ``c <= 1/2`` (the sensitivity ``2c sqrt(n_col - 1)`` over ``c^2``: the level does not
    depend on ``c``): the fullest column holds its cap, ``column_cap`` times the mean count over
    the columns that ``n_obs`` positions spread evenly would fill."""
    cols = math.prod(shape[k] for k in range(len(shape)) if k != m and k not in fixed)
    filled = cols * -math.expm1(-n_obs / cols)
    cap = max(2, math.ceil(column_cap * n_obs / filled))
    return gram_noise_level(shape[m], 2.0 * math.sqrt(cap - 1), z)


def _gram_bases(obs: Observations, resid, model: Model, others, rng, *, z_g, gram_clip,
                column_cap):
    """Step 1 of :func:`spectral_start`: each mode's basis (other than the lead's) from its
    released unfolding Gram (a constant one for a mode without a factor); returns the bases and
    the Grams' sensitivities."""
    d, r = obs.order, model.rank
    bases, used, spectra = [None] * d, [], []
    for m in others:
        if m in model.fixed:  # one public direction: padding it with zero columns would only add
            bases[m] = np.full((obs.shape[m], 1), 1.0 / math.sqrt(obs.shape[m]))  # null directions
            continue
        cap = None
        free_others = [k for k in model.free_modes() if k != m]  # fixed modes index no column
        if column_cap is not None:
            counts = unfolding_columns(obs, m, free_others)[1]
            cap = max(2, math.ceil(column_cap * len(resid) / len(counts)))
        M, sens = unfolding_gram(obs, resid, m, gram_clip, cap, others=free_others)
        # One release of the strict upper triangle (the diagonal is 0, not released), mirrored.
        if z_g > 0:
            iu = np.triu_indices(M.shape[0], 1)
            upper = gaussian_release(M[iu], sens, z_g, rng,
                                     rounding=gram_rounding(obs, m, gram_clip))
            M = np.zeros_like(M)
            M[iu] = upper
            M += M.T
        vals, top = _top_vectors(M, r, 2.0 * gram_noise_level(M.shape[0], sens, z_g))
        # a mode with fewer rows than the rank: the missing directions are 0
        bases[m] = np.hstack([top, np.zeros((top.shape[0], r - top.shape[1]))])
        # in units of the clipping level (released), where the preview's level is the fit's
        spectra.append((np.pad(vals, (0, r - len(vals))) / gram_clip**2,
                        gram_noise_level(M.shape[0], sens, z_g) / gram_clip**2 if z_g > 0 else 0.0))
        used.append(sens)
    if spectra:  # post-processing of the releases: what the fit says of its start
        model.start = (np.array([v for v, _ in spectra]), np.array([n for _, n in spectra]))
    return bases, used


def _small_cp(obs: Observations, model: Model, W, bases, lead, others, rng, n_inner):
    """Step 3 of :func:`spectral_start`: a small CP fitted to the solve ``W`` (post-processing of
    released values, from ``N_RESTARTS`` random starts), its factors mapped back through the
    bases into ``model``."""
    r = model.rank
    small_shape = (obs.shape[lead],) + tuple(bases[k].shape[1] for k in others)
    cells = Observations(np.stack(np.unravel_index(np.arange(W.size), small_shape), axis=1),
                         small_shape)
    small, best = None, np.inf
    for _ in range(N_RESTARTS):  # CP-ALS has local optima; on released values restarts are free
        trial = init_model(small_shape, r, "cp", rng, scale=0.1)
        history = []
        try:
            with np.errstate(all="ignore"):
                als(cells, W.ravel(), trial, reg=1e-6, reg_core=0.0, n_iter=n_inner,
                    fit_biases=False, tol=1e-10, history=history)
        except np.linalg.LinAlgError:  # a degenerate restart (tiny data): the next one may not be
            continue
        if history and np.isfinite(history[-1]) and history[-1] < best:
            small, best = trial, history[-1]
    if small is None:  # every restart degenerate: keep the data-independent start (post-processing)
        return
    model.factors[lead] = small.factors[0]
    for j, k in enumerate(others, start=1):
        B = bases[k] @ small.factors[j]
        if k in model.fixed:  # B's rows are all B[0] (a constant basis): keep ones, move the scales
            model.factors[lead] = model.factors[lead] * B[0]
        else:
            model.factors[k] = B


def spectral_start(obs: Observations, y: np.ndarray, model: Model, *, noise_multiplier, rng, clip,
                   s2, gram_clip=None, column_cap=None, design_quantile=0.9, n_inner=50,
                   gram_noise_multiplier=None):
    """Private warm start for CP: noisy spectral subspaces, one noisy projected step, a small CP.

    With ``t_e = y_e - offsets_e`` (offsets released, so one value moves ``t_e`` by at most 1);
    "mode 0" below is the first mode with a factor (``lead``), and a fixed mode's basis is the
    public constant vector (its factor stays all ones; the scales move into the lead's factor):

    1. For each mode ``m >= 1``: release the upper triangle of :func:`unfolding_gram` (values
       clipped to ``gram_clip``, columns capped at ``column_cap`` times their mean count) plus
       ``N(0, (z Delta_m)^2)`` per coordinate, mirrored. ``V_m`` = top ``rank`` eigenvectors
       (by Lanczos for a large mode: :func:`_top_vectors`).
    2. Mode 0: every row's right-hand side on the designs ``kron(V_1[e_1], ..., V_{d-1}[e_{d-1}])``
       clipped to norm ``C`` (:func:`clip_designs`), with ``clip(t_e, -clip, clip)``, plus
       ``N(0, (z D C)^2)``, ``D = min(1, 2 clip)``: one release, solved per row by
       :func:`wiener_solve` into ``W`` (n_0 x rank^(d-1)): the tensor in the bases V.
    3. Post-processing: a CP of the small dense ``W`` (non-private ALS on released values, the best
       fit of ``N_RESTARTS`` random starts) gives ``U_0`` and ``B_m``; ``U_m = V_m B_m``.

    With many modes the designs of step 2 have ``rank^(d-1)`` columns and ``W`` as many per row:
    when :func:`kronecker_start` says they would not fit in ``SPECTRAL_MAX_FLOATS`` (public
    quantities only), step 2 uses the elementwise products of the bases instead (a CP design of
    ``rank`` columns: the same release, the same sensitivity) and step 3 is skipped: ``U_0`` is
    the solve and ``U_m = V_m``, left to the sweeps to align.

    That is one Gaussian release per mode with a factor. Returns the sensitivities (for tests).
    """
    d, r = obs.order, model.rank
    lead = model.free_modes()[0]
    others = [k for k in range(d) if k != lead]
    D = min(1.0, 2.0 * clip)
    resid = y - offsets(model, obs.X)
    t = np.clip(resid, -clip, clip)
    gram_clip = clip if gram_clip is None else gram_clip
    z_g = noise_multiplier if gram_noise_multiplier is None else gram_noise_multiplier
    bases, used = _gram_bases(obs, resid, model, others, rng, z_g=z_g, gram_clip=gram_clip,
                              column_cap=column_cap)
    kron = kronecker_start(len(y), obs.shape, r, lead, model.fixed)
    gram, rhs, bound = projected_statistics(obs, t, bases, design_quantile, lead, model, kron=kron)
    std = noise_multiplier * D * bound
    counts = obs.counts[lead]
    if std > 0:  # each entry adds its design (norm <= bound) times its value (<= clip)
        rounding = entry_rounding(len(y), bound * clip, counts.max())
        rhs = release_rows(rhs, counts > 0, lambda v: gaussian_release(
            v, D * bound, noise_multiplier, rng, rounding=rounding))
    used.append(D * bound)
    W = wiener_solve(gram, rhs, std**2, counts, s2, floor=True)
    if not kron:  # W holds the lead's factor in the bases' columns (post-processing from here)
        model.factors[lead] = W
        for k in others:
            if k in model.fixed:  # its constant basis 1/sqrt(n_k): the scale moves into the lead
                model.factors[lead] = model.factors[lead] * bases[k][0, 0]
            else:
                model.factors[k] = bases[k]
        return used
    _small_cp(obs, model, W, bases, lead, others, rng, n_inner)
    return used
