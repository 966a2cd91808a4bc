r"""Adaptive private power iteration: AboveThreshold picks each round's threshold, rows above it
sit out.

A row-level private power method must add noise for the worst row a neighbour could hold: the
update ``sum_i a_i (a_i . x)`` moves by up to ``2 data_norm^2`` when one row is replaced. On
low-coherence data almost every row contributes far less than that, ``c_i = ||a_i|| |a_i . x|``
small. Each round here finds, privately, a threshold ``theta`` that all but
``O(log(1/beta)/eps1)`` rows stay under, drops the rows above it, and adds noise for at most
``2 theta`` instead. The derivation is in ``docs/derivations/adaptive_pca.rst``; plain arrays in,
arrays out: :class:`~dptensor.AdaptivePrivatePCA` plans the budget split and records the spend.
"""
from __future__ import annotations

import math

import numpy as np
import scipy.sparse as sp

from ..mechanisms import Rounding, above_threshold, gaussian_release
from .power import row_power_sensitivity
from .sparse import block_rows, map_row_blocks, row_blocks

__all__ = ["adaptive_power_iteration", "threshold_grid", "contributions", "grid_counts",
           "choose_threshold", "filtered_update", "filtered_sensitivity", "svt_epsilon_for",
           "zcdp_rho", "VARIANCE_SHARE", "component_variances", "update_rounding", "BLOCK_ROWS"]

#: Share of the total zCDP budget ``rho`` spent on ``explained_variance_``: one Gaussian release
#: of ``sum_i (a_i . v_j)^2`` for every released component ``v_j`` (sensitivity
#: ``sqrt(min(k, 2)) data_norm^2``). Its relative error is about
#: ``sqrt(2) B^2 / (sqrt(2 * 0.05 rho) n lambda)``: 1.5% at epsilon = 1, n = 5e4 and a variance a
#: twentieth of ``B^2``; it takes 5% of the budget from the power steps.
VARIANCE_SHARE = 0.05


# --------------------------------------------------------------------------------------------
# The pieces of one round. Plain functions of arrays, so the tests can check each on its own.
# --------------------------------------------------------------------------------------------

def threshold_grid(n: int, data_norm: float) -> np.ndarray:
    """The public candidate thresholds: ``data_norm^2 * 2^-j`` for ``j = J..0``, increasing.

    The top is ``data_norm^2``: with ``||a|| <= data_norm`` and a unit iterate ``x``,
    ``||a|| |a . x| <= ||a||^2 <= data_norm^2``, so at the top every row is kept. The floor is the
    first power of two at or below ``data_norm^2 / n``: if all but a few rows contribute less than
    that, the kept rows' whole update is smaller than one worst-case row, so a finer grid could not
    buy a useful release. The grid depends on public values only (``n``, ``data_norm``).
    """
    levels = max(0, math.ceil(math.log2(max(int(n), 1))))
    return float(data_norm) ** 2 * np.exp2(-np.arange(levels, -1, -1, dtype=float))


def contributions(projections: np.ndarray, sq_norms: np.ndarray) -> np.ndarray:
    """Per-row contribution ``c_i = ||a_i|| |a_i . x|`` (float64), from ``a_i . x`` and
    ``||a_i||^2``.

    ``c_i`` is the l2 norm of row ``i``'s term ``a_i (a_i . x)`` in the power update.
    """
    return np.sqrt(np.maximum(sq_norms, 0.0)) * np.abs(projections.astype(np.float64, copy=False))


def grid_counts(c: np.ndarray, grid: np.ndarray) -> np.ndarray:
    """``counts[j] = #{i : c_i <= grid[j]}`` for every grid point, in one pass over the rows.

    ``searchsorted`` places each row at the first grid point it does not exceed; a cumulative
    histogram of those places is every count at once (O(n log J), no loop over rows or points).
    """
    place = np.searchsorted(grid, c, side="left")
    return np.cumsum(np.bincount(place, minlength=grid.size + 1))[: grid.size]


def choose_threshold(c: np.ndarray, grid: np.ndarray, epsilon: float, beta: float,
                     rng: np.random.Generator) -> float:
    """AboveThreshold over the grid: the first ``theta_j`` whose count clears
    ``n - 6 ln(1/beta)/eps``.

    Each count has sensitivity 1 under replace-one (one row moves in or out of one side of the
    threshold), ``n`` is public, so the run is pure ``epsilon``-DP and releases only the index.
    When no grid point clears (possible only through the noise), the top ``data_norm^2`` is used:
    every row is kept and the round is the non-adaptive one.
    """
    n = c.shape[0]
    target = n - 6.0 * math.log(1.0 / beta) / epsilon
    j = above_threshold(grid_counts(c, grid), target, epsilon, rng, sensitivity=1.0)
    return float(grid[-1] if j is None else grid[j])


def filtered_update(X: np.ndarray, projections: np.ndarray, c: np.ndarray,
                    theta: float) -> np.ndarray:
    """``sum_{i : c_i <= theta} a_i (a_i . x)``: the power step on the kept rows only.

    Zeroing the dropped rows' weights keeps it a GEMV (no copy of the kept rows). Its l2
    sensitivity is :func:`filtered_sensitivity` (at most ``2 theta``). Summed in float64 whatever
    ``X``'s dtype: float32 rows are widened one block of :data:`BLOCK_ROWS` at a time (never a
    float64 copy of ``X``), so its rounding is :func:`update_rounding`'s.
    """
    weights = np.where(c <= theta, projections.astype(np.float64, copy=False), 0.0)
    if X.dtype == np.float64 and not sp.issparse(X):
        return X.T @ weights
    out = np.zeros(X.shape[1])
    rows = _block(X)
    for i, block in enumerate(row_blocks(X, rows)):  # sparse rows: densified blocks
        out += np.asarray(block, dtype=np.float64).T @ weights[i * rows:(i + 1) * rows]
    return out


#: Rows of float32 data widened to float64 at once by :func:`filtered_update`.
BLOCK_ROWS = 8192


def _block(X) -> int:
    """Rows per float64 block: :data:`BLOCK_ROWS`, fewer for wide sparse rows (whose densified
    block :func:`~dptensor.algorithms.sparse.block_rows` bounds)."""
    return min(BLOCK_ROWS, block_rows(X.shape[1])) if sp.issparse(X) else BLOCK_ROWS


def row_products(X: np.ndarray, x: np.ndarray) -> np.ndarray:
    """``X x`` in float64 whatever ``X``'s dtype (float32 rows widened a block at a time): each
    row's dot product then misses its exact value by ``gamma_d`` of float64, the per-row
    rounding :func:`update_rounding` allows for (float32's would be ``2**29`` times more)."""
    x = np.asarray(x, dtype=np.float64)
    if X.dtype == np.float64 and not sp.issparse(X):
        return X @ x
    return np.concatenate([np.asarray(block, dtype=np.float64) @ x
                           for block in row_blocks(X, _block(X))] or [np.zeros(0)])


def row_sq_norms(X) -> np.ndarray:
    """``||a_i||^2`` of every row in float64 (sparse rows: from densified blocks)."""
    return map_row_blocks(lambda A: np.einsum("ij,ij->i", A, A, dtype=np.float64), X)


def update_rounding(n_samples: int, n_features: int, theta: float, data_norm: float,
                    n_released: int) -> Rounding:
    """The rounding of a released power step, :func:`filtered_update` in float64, projected off
    the ``n_released`` components once there are any.

    The exact statistic is ``sum_i a'_i w_i`` over the kept rows (``a' = P a``, ``w_i`` the
    computed ``a_i . x``, ``c_i`` the computed ``||a'_i|| |w_i| <= theta``). Computed: one sum of
    ``n`` terms ``a_i w_i`` (each of norm at most ``B^2``, and at most ``theta`` before any
    deflation), then ``y - V^T (V y)``, ``d + k + 2`` more operations whose error is at most
    ``gamma (1 + k) ||y||``. A row's own term misses the lens of :func:`filtered_sensitivity` by
    its dot product's rounding, at most ``gamma_d B^2``: one more ``B^2`` in the total. So
    ``terms = n + d`` and ``total = n min(theta, B^2) + B^2`` on the first component, and
    ``terms = n + d + k + 2``, ``total = (k + 2)(n + 1) B^2`` after ``k`` released ones.
    """
    n, d, k, top = int(n_samples), int(n_features), int(n_released), float(data_norm) ** 2
    if k == 0:
        return Rounding(total=n * min(float(theta), top) + top, terms=n + d)
    return Rounding(total=(k + 2) * (n + 1) * top, terms=n + d + k + 2)


def filtered_sensitivity(theta: float, data_norm: float) -> float:
    """l2 sensitivity of :func:`filtered_update` under replace-one: at most ``2 theta``, and exact.

    Replacing row ``a`` by ``b`` changes one term, ``u = a (a . x)`` or 0 (dropped) into another.
    Every possible term lies in the ball with diameter ``[0, data_norm^2 x]`` (``||u||^2 = ||a||^2
    (a . x)^2 <= data_norm^2 (u . x)``) and, when kept, in the ball ``||u|| <= theta``; 0 lies in
    both. The sensitivity is the diameter of that lens, ``t = theta / data_norm^2``::

        2 theta sqrt(1 - t^2)   for t <= 1/sqrt(2),   data_norm^2 beyond

    (two terms of norm ``theta`` mirrored about ``x``). SPEC §5 states the bound ``2 theta``; the
    lens is never larger and is half of it at the grid's top, ``theta = data_norm^2``.
    """
    top = float(data_norm) ** 2
    t = min(float(theta) / top, 1.0)
    return top if t >= math.sqrt(0.5) else 2.0 * float(theta) * math.sqrt(1.0 - t * t)


# --------------------------------------------------------------------------------------------
# The loop.
# --------------------------------------------------------------------------------------------

def adaptive_power_iteration(X, n_components: int, n_iter: int, *, rng: np.random.Generator,
                             data_norm: float | None = None, svt_epsilon: float | None = None,
                             noise_multiplier: float = 0.0, beta: float = 0.05, verbose: int = 0):
    """Top ``n_components`` directions of ``A^T A`` by adaptive (private) power iteration with
    deflation.

    Parameters
    ----------
    X : ndarray (n, d)
        Rows already clipped to ``data_norm`` (the caller clips; this function does not check).
    n_components, n_iter : int
        Components, found one after another, and rounds per component.
    rng : numpy.random.Generator
        Draws the starts, the AboveThreshold noise and the Gaussian noise.
    data_norm : float or None
        Public row-norm bound; the grid's top. Needed when ``svt_epsilon`` is given.
    svt_epsilon : float or None
        Pure epsilon of each round's AboveThreshold. ``None``: no filtering and no noise (the
        plain, non-private power method on ``A^T A``).
    noise_multiplier : float
        Gaussian multiplier ``z``: each round's update gets ``N(0, (s z)^2 I)`` with
        ``s = filtered_sensitivity(theta, data_norm) <= 2 theta``.
    beta : float
        AboveThreshold's failure probability (sets how many rows a round may drop).

    Returns
    -------
    components : ndarray (n_components, d), orthonormal rows, X's dtype
    thresholds : ndarray (n_components, n_iter), the released ``theta`` of every round
        (``inf`` when not private: nothing is filtered)

    Deflation: once ``v_1..v_{j-1}`` are released, component ``j`` runs on the projected rows
    ``a' = P a`` with ``P = I - V V^T``. Projection never grows a norm, so ``||a'|| <= data_norm``
    and every bound of the rank-1 round holds unchanged. It is implicit: with ``x`` kept
    orthogonal to ``V``, ``a' . x = a . x`` and ``||a'||^2 = ||a||^2 - ||V^T a||^2``, so the update
    is ``P X_kept^T (X_kept x)`` and ``X`` is never copied.
    """
    n, d = X.shape
    private = svt_epsilon is not None
    grid = threshold_grid(n, data_norm) if private else None
    sq_norms = row_sq_norms(X)
    V = np.zeros((0, d), dtype=np.float64)
    thresholds = np.full((n_components, n_iter), np.inf)

    def project(y):  # onto the complement of the released components (post-processing)
        return y - V.T @ (V @ y)

    for k in range(n_components):
        x = _unit(project(rng.standard_normal(d)))  # public start: costs nothing
        for t in range(n_iter):
            proj = row_products(X, x)
            if private:
                c = contributions(proj, sq_norms)
                theta = choose_threshold(c, grid, svt_epsilon, beta, rng)
                # projected before the release: the lens bounds the projected terms a' (a . x)
                # only (the unprojected a (a . x) can reach B^2 after a deflation)
                y = gaussian_release(project(filtered_update(X, proj, c, theta)),
                                     filtered_sensitivity(theta, data_norm), noise_multiplier, rng,
                                     rounding=update_rounding(n, d, theta, data_norm, k))
                thresholds[k, t] = theta
                if verbose:
                    print(f"[AdaptivePrivatePCA] component {k + 1} round {t + 1}: "
                          f"theta = {theta:.4g}")
            else:
                # X^T (X x); sparse rows through filtered_update's blocks, every row kept
                y = filtered_update(X, proj, proj, np.inf) if sp.issparse(X) \
                    else (X.T @ proj).astype(np.float64)
            y = project(y)
            x = _unit(y) if np.linalg.norm(y) > 0 else x
        V = np.vstack([V, x[None, :]])
        # The next component sees the projected rows: their squared norms drop by (a . v_k)^2.
        sq_norms = sq_norms - row_products(X, x) ** 2
    return V.astype(X.dtype, copy=False), thresholds


def _unit(y):
    norm = np.linalg.norm(y)
    return y / norm if norm > 0 else y


# --------------------------------------------------------------------------------------------
# The budget split.
# --------------------------------------------------------------------------------------------

def component_variances(X: np.ndarray, components: np.ndarray, data_norm, noise_multiplier: float,
                        rng: np.random.Generator) -> np.ndarray:
    """``sum_i (a_i . v_j)^2`` for every component ``v_j``, plus Gaussian noise (one release).

    Rows ``a_i`` are already clipped to ``data_norm``; ``components`` are orthonormal rows, a
    previous release. Replacing row ``a`` by ``b`` moves the vector ``((a . v_j)^2)_j`` to
    ``((b . v_j)^2)_j``: both non-negative with sums at most ``B^2``, so the change has norm at most
    ``sqrt(||u||^2 + ||w||^2) <= sqrt(2) B^2``, or ``B^2`` for one component; attained at
    ``a = B v_1``, ``b = B v_2``. That is
    :func:`~dptensor.algorithms.power.row_power_sensitivity` with ``p = k``.

    Rounding: the squares are each row's own (its per-row map, float64), then one sum of ``n``
    terms whose l2 norm is at most ``sum_j (a . v_j)^2 <= B^2``: ``total = n B^2``, ``terms = n``.
    """
    V = components.astype(X.dtype, copy=False)
    totals = np.zeros(V.shape[0]) if sp.issparse(X) else None
    for block in row_blocks(X) if totals is not None else ():  # sparse rows, densified blocks
        totals += np.sum((block @ V.T).astype(np.float64) ** 2, axis=0)
    if totals is None:
        totals = np.sum((X @ V.T).astype(np.float64) ** 2, axis=0)
    if noise_multiplier > 0:
        n = X.shape[0]
        totals = gaussian_release(totals, row_power_sensitivity(data_norm, V.shape[0]),
                                  noise_multiplier, rng,
                                  rounding=Rounding(total=n * float(data_norm) ** 2, terms=n))
    return totals


def zcdp_rho(epsilon: float, delta: float) -> float:
    """The zCDP ``rho`` whose standard conversion gives exactly ``(epsilon, delta)``.

    Bun & Steinke (2016): ``rho``-zCDP implies ``(rho + 2 sqrt(rho ln(1/delta)), delta)``-DP;
    solving for ``rho`` gives ``(sqrt(ln(1/delta) + epsilon) - sqrt(ln(1/delta)))^2``. Used only to
    *define* the AboveThreshold share; the final noise is calibrated with the accountant itself.
    """
    log_inv = math.log(1.0 / delta)
    return (math.sqrt(log_inv + epsilon) - math.sqrt(log_inv)) ** 2


def svt_epsilon_for(epsilon: float, delta: float, svt_fraction: float, n_rounds: int) -> float:
    """Per-round AboveThreshold epsilon:
    ``n_rounds * eps1^2 / 2 = svt_fraction * zcdp_rho(eps, delta)``.

    Pure ``eps1``-DP is ``eps1^2/2``-zCDP, so the AboveThreshold runs together take the fraction
    ``svt_fraction`` of the total zCDP budget; the Gaussian steps get what the accountant leaves.
    """
    return math.sqrt(2.0 * svt_fraction * zcdp_rho(epsilon, delta) / n_rounds)
