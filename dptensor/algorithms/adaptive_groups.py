r"""Adaptive private power iteration with one group of rows (a person) as the unit.

The rounds of :func:`~dptensor.algorithms.adaptive_power.adaptive_power_iteration`, with every
per-row quantity replaced by the same quantity of a whole group, computed exactly on the grid
(``docs/derivations/exact_sums.rst``):

* the rows are grid rows, each group scaled onto the ball as a whole
  (:func:`~dptensor.algorithms.groups.group_scale_rows`: ``sum_{i in g} ||q_i||^2 <= 1``);
* a group's term in the power step is ``u_g = sum_{i in g} q_i (q_i . k)`` with ``k`` the
  iterate on the grid, an exact int64 sum (:func:`group_terms`); it lies in the ball with
  diameter ``[0, B^2 k]``, as one row's term does;
* AboveThreshold counts groups ``#{g : c_g <= theta}`` over the grid of the public number of
  groups ``G``; the kept groups' terms are added exactly (:func:`kept_update`), so the release
  has no rounding allowance, and the lens bound of one row holds for one group
  (:func:`group_update_sensitivity`, with a margin for the float norm ``c_g`` the test reads);
* deflation maps every row through the public projection, onto the grid and the group's ball
  again (:func:`deflated_rows`); the variances are an exact sum as well
  (:func:`group_component_variances`).

Plain arrays in, arrays out. Derivation: ``docs/derivations/adaptive_pca.rst``, "Groups of
rows".
"""
from __future__ import annotations

import numpy as np

from .adaptive_power import choose_threshold, filtered_sensitivity, threshold_grid
from .exact import BITS, Exact, _shrink, exact_gaussian_release, grid_rows, grid_vectors
from .groups import group_scale_rows
from .power import row_power_sensitivity

__all__ = ["group_rows", "deflated_rows", "iterate_on_grid", "group_terms",
           "group_contributions", "kept_update", "norm_margin", "group_update_sensitivity",
           "group_variance_sensitivity", "group_component_variances",
           "grouped_adaptive_power_iteration", "TERM_UNIT", "GROUP_BLOCK", "SQUARES_BLOCK"]

#: One integer of a group's term ``sum m (m . k)``, in units of ``B^2``: three grid factors.
TERM_UNIT = 2.0 ** (-3 * BITS)
#: Rows whose int64 products are formed at once by :func:`group_terms`.
GROUP_BLOCK = 2 ** 12
#: Rows whose squared products the variances' exact sum forms at once.
SQUARES_BLOCK = 2 ** 18
#: Relative margin on a sensitivity computed in float64 (a few roundings of a few operations).
_FLOAT_MARGIN = 2.0 ** -40
_HALF = 30  # bits of the low half when the kept terms (below 2**60) are added over groups
if 3 * BITS > 62:  # the int64 bounds of group_terms: three grid factors below 2**62
    raise ImportError("group terms need 3 * BITS <= 62")


def group_rows(X, codes, n_groups: int, data_norm: float):
    """``(M, codes)``: grid rows of ``X`` sorted by group (stable), each group scaled onto the
    ball (``sum_{i in g} ||m_i||^2 <= 4**BITS``, checked in integers), and their sorted codes."""
    codes = np.asarray(codes)
    order = np.argsort(codes, kind="stable")
    M = grid_rows(X, data_norm)[order]
    codes = codes[order]
    return group_scale_rows(M, codes, n_groups), codes


def deflated_rows(M, codes, n_groups: int, V, data_norm: float):
    """Every grid row projected off the released rows of ``V``, put on the grid again, and each
    group scaled onto the ball again: the rows of the next component.

    The projection is onto the grid components ``K`` (``grid_vectors(V^T)``): ``s = M K`` is an
    exact integer product, and ``m - sum_j s_j k_j 4**-BITS`` is formed elementwise, column
    ``j`` after column ``j``, so each row's result is a function of that row alone, whatever its
    position or the other rows (a BLAS product's rounding need not be). Whatever that rounding,
    the result meets the bounds exactly after the grid and the scaling.
    """
    K = grid_vectors(np.asarray(V, dtype=np.float64).T)
    S = M @ K * 2.0 ** (-2 * BITS)  # exact integers, then an exact power-of-two scaling
    Y = np.array(M, dtype=np.float64)
    for j in range(K.shape[1]):
        Y -= S[:, j:j + 1] * K[:, j]
    Y = grid_rows(Y, data_norm, scale=float(data_norm) / 2.0 ** BITS, out=Y)
    return group_scale_rows(Y, codes, n_groups)


def iterate_on_grid(x) -> np.ndarray:
    """The public iterate ``x`` on the grid: integers ``k`` with ``||k||^2 <= 4**BITS``, checked
    exactly (rounding each coordinate can lengthen it, so it is shrunk back as a row is)."""
    k = grid_vectors(np.asarray(x, dtype=np.float64)[None, :])
    return _shrink(k, np.zeros(1, dtype=bool))[0]


def group_terms(M, codes, k, n_groups: int) -> np.ndarray:
    r"""``U[g] = sum_{i in g} m_i (m_i . k)`` for every group, exactly, as int64 (``M`` sorted by
    ``codes``, group-scaled grid rows; ``k`` from :func:`iterate_on_grid`).

    ``t_i = m_i . k`` is an exact float64 integer (every partial sum is below ``||m|| ||k|| <=
    2**40``); each product ``m_ij t_i`` is below ``2**60``. Every partial sum over a subset
    ``S`` of one group's rows is ``(M_S^T M_S k)_j``, at most ``lambda_max ||k|| <= 4**BITS
    2**BITS = 2**60`` (``M_S^T M_S`` is PSD with trace at most the group's ``4**BITS``): int64
    never overflows, in any order.
    """
    UT = np.zeros((M.shape[1], int(n_groups)), dtype=np.int64)
    k = np.asarray(k, dtype=np.float64)
    for start in range(0, M.shape[0], GROUP_BLOCK):
        C, c = M[start:start + GROUP_BLOCK], codes[start:start + GROUP_BLOCK]
        t = (C @ k).astype(np.int64)
        heads = np.flatnonzero(np.r_[True, c[1:] != c[:-1]])
        # transposed, so each feature's products are contiguous: reduceat is 3x faster so
        P = np.ascontiguousarray(C.T, dtype=np.int64)
        P *= t
        UT[:, c[heads]] += np.add.reduceat(P, heads, axis=1)
    return np.ascontiguousarray(UT.T)


def norm_margin(n_features: int) -> float:
    """``eta`` with ``||U_g|| <= (1 + eta) c_g`` for the float norm ``c_g`` of
    :func:`group_contributions`: the conversion to float64, the squares, a sum of ``d`` positive
    terms and the root take at most ``(d + 3) u`` off it; twice ``gamma_{d+4}``."""
    m = (int(n_features) + 4) * 2.0 ** -53
    return 2.0 * m / (1.0 - m)


def group_contributions(U, top: float) -> np.ndarray:
    """Each group's ``c_g``: the float64 norm of its exact term (integer units), capped at the
    grid's top (where every group is kept). Squares and sums elementwise, column after column,
    so ``c_g`` is a function of the group's term alone, whatever its row in ``U``."""
    F = U.astype(np.float64)
    squares = np.zeros(F.shape[0])
    for j in range(F.shape[1]):
        squares += F[:, j] * F[:, j]
    return np.minimum(np.sqrt(squares), float(top))


def kept_update(U, c, theta: float, data_norm: float) -> Exact:
    """``B^2 sum_{g : c_g <= theta} u_g`` as an exact statistic (``theta`` in integer units).

    The kept terms (each below ``2**60``) are split into a high and a low ``2**30`` part,
    summed in int64 (exact up to ``2**32`` groups) and joined in Python integers.
    """
    kept = U[c <= theta]
    high, low = kept >> _HALF, kept & ((1 << _HALF) - 1)
    ints = (high.sum(axis=0).astype(object) * (1 << _HALF) + low.sum(axis=0).astype(object))
    return Exact(np.asarray(ints, dtype=object), float(data_norm) ** 2 * TERM_UNIT)


def group_update_sensitivity(theta: float, data_norm: float, n_features: int) -> float:
    """l2 sensitivity of :func:`kept_update` when one whole group is replaced: the lens of
    :func:`~dptensor.algorithms.adaptive_power.filtered_sensitivity` at ``theta (1 + eta)``
    (``eta`` :func:`norm_margin`, since the test reads a float norm), raised by a float margin."""
    wide = float(theta) * (1.0 + norm_margin(n_features))
    return filtered_sensitivity(wide, data_norm) * (1.0 + _FLOAT_MARGIN)


def group_variance_sensitivity(K, data_norm: float) -> float:
    """l2 sensitivity of :func:`group_component_variances`' statistic under replace-one-group:
    ``sqrt(min(k, 2)) rho^2 B^2``, ``rho^2 >= ||K 2**-BITS||_2^2`` by Gershgorin on the exact
    ``K^T K`` (the grid components are orthonormal only up to rounding)."""
    Ki = np.asarray(K).astype(np.int64).astype(object)
    G = Ki.T @ Ki
    radius = max(sum(abs(v) for v in row) for row in G)
    rho2 = radius / 4 ** BITS  # an int over a power of two: correctly rounded
    return row_power_sensitivity(data_norm, K.shape[1]) * rho2 * (1.0 + _FLOAT_MARGIN)


def group_component_variances(M, components, data_norm: float, noise_multiplier: float, rng):
    """``(values, sensitivity)``: ``w_j = B^2 sum_i (q_i . k_j)^2`` over the group-scaled grid
    rows ``M`` for the grid components ``k_j``, exact (:func:`_exact_squares`), plus Gaussian
    noise at ``noise_multiplier`` when it is positive."""
    K = grid_vectors(np.asarray(components, dtype=np.float64).T)
    ints = _exact_squares(M, K)
    stat = Exact(ints, float(data_norm) ** 2 * 2.0 ** (-4 * BITS))
    sensitivity = group_variance_sensitivity(K, data_norm)
    if noise_multiplier > 0:
        return exact_gaussian_release(stat, sensitivity, noise_multiplier, rng), sensitivity
    return stat.value(), sensitivity


def _exact_squares(M, K) -> np.ndarray:
    """``sum_i (m_i . k_j)^2`` for every column ``k_j`` of ``K``, in Python integers.

    ``t = M K`` is exact (integers below ``2**41``); ``t = 2**21 h + l`` with ``|h|, |l| <=
    2**20``, so ``t^2 = 2**42 h^2 + 2**22 h l + l^2`` with every product below ``2**40``, summed
    in int64 over blocks of :data:`SQUARES_BLOCK` rows (below ``2**58``) and the blocks in Python
    integers.
    """
    total = np.zeros(K.shape[1], dtype=np.int64).astype(object)
    for start in range(0, M.shape[0], SQUARES_BLOCK):
        T = np.asarray(M[start:start + SQUARES_BLOCK], dtype=np.float64) @ K
        H = np.rint(T * 2.0 ** -21)
        L = (T - H * 2.0 ** 21).astype(np.int64)
        H = H.astype(np.int64)
        parts = [np.sum(v, axis=0).astype(object) for v in (H * H, H * L, L * L)]
        total = total + parts[0] * 2 ** 42 + parts[1] * 2 ** 22 + parts[2]
    return np.asarray(total, dtype=object)


def grouped_adaptive_power_iteration(X, codes, n_groups: int, n_components: int, n_iter: int, *,
                                     rng, data_norm: float, svt_epsilon: float,
                                     noise_multiplier: float, beta: float = 0.05, verbose: int = 0):
    """``(components, thresholds, M)``: the private rounds over ``n_groups`` groups (``codes``:
    each row's group ``0 .. G - 1``); ``M`` the group-scaled grid rows, sorted by group, for the
    variances' release. Deflation and the starts as in the row-level loop."""
    d, B = X.shape[1], float(data_norm)
    M, codes = group_rows(X, codes, n_groups, B)
    base = M
    grid = threshold_grid(n_groups, 1.0) / TERM_UNIT  # 2**(3 BITS - j): integer units, exact
    V = np.zeros((0, d))
    thresholds = np.full((n_components, n_iter), np.inf)

    def project(y):  # onto the complement of the released components (post-processing)
        return y - V.T @ (V @ y)

    for comp in range(n_components):
        if comp:
            M = deflated_rows(base, codes, n_groups, V, B)
        x = _unit(project(rng.standard_normal(d)))  # public start: costs nothing
        for t in range(n_iter):
            U = group_terms(M, codes, iterate_on_grid(x), n_groups)
            c = group_contributions(U, grid[-1])
            theta = choose_threshold(c, grid, svt_epsilon, beta, rng)
            thresholds[comp, t] = theta * TERM_UNIT * B ** 2
            y = exact_gaussian_release(kept_update(U, c, theta, B),
                                       group_update_sensitivity(thresholds[comp, t], B, d),
                                       noise_multiplier, rng)
            if verbose:
                print(f"[AdaptivePrivatePCA] component {comp + 1} round {t + 1}: "
                      f"theta = {thresholds[comp, t]:.4g}")
            y = project(np.asarray(y, dtype=np.float64))
            x = _unit(y) if np.linalg.norm(y) > 0 else x
        V = np.vstack([V, x[None, :]])
    return V.astype(X.dtype, copy=False), thresholds, base


def _unit(y):
    norm = np.linalg.norm(y)
    return y / norm if norm > 0 else y

