r"""Groups of rows as the privacy unit: public per-group maps of grid rows, and exact statistics.

With ``groups`` (rows sharing a label are one person), the neighbouring relation replaces one
whole group: its rows, how many, and their values. Each map here reads one group's rows only,
so a released statistic is ``sum_g F(group g)`` with ``F`` in the range one row's sensitivity
assumes:

* :func:`group_average_rows` (linear statistics, a mean): the group's average grid row, rounded
  and put back in the ball exactly, so the group adds one vector of norm at most ``B``;
* :func:`group_scale_rows` (degree two, Gram matrices and power products): all rows of group
  ``g`` scaled by ``f_g = min(1, B / sqrt(sum_i ||x_i||^2))`` (on the grid, truncated, checked in
  integers), so ``sum_i q_i q_i^T`` is PSD with trace at most 1, as ``q q^T`` of one row is;
* :func:`gram_product_split` and :class:`ExactGroupGram`: the power step ``X^T X V`` as an exact
  integer sum with no per-row rounding (whose allowance would grow with a group's size).

Derivation: ``docs/derivations/pca.rst``, "Groups of rows".
"""
from __future__ import annotations

import math

import numpy as np

from .exact import BITS, CHUNK, Exact, _int_norms, _IntSum, _shrink, grid_vectors

__all__ = ["group_average_rows", "group_scale_rows", "gram_product_split",
           "group_power_sensitivity", "ExactGroupGram", "group_sums_of_squares"]

_ONE = float(2 ** BITS)
_LIMIT = 4 ** BITS
_SPLIT = float(2 ** (BITS + 1))  # the power product's projections t = 2**(BITS+1) h + l


def group_average_rows(M, codes, n_groups: int) -> np.ndarray:
    """Each group's average grid row (``n_groups x d``, integers with ``||a_g||^2 <= 4**BITS``).

    ``s_g = sum_{i in g} m_i`` is summed exactly (float64 integers below ``2**53`` while a group
    has under ``2**32`` rows); ``rint(s_g / |g|)`` is within the ball up to rounding, and
    :func:`~dptensor.algorithms.exact._shrink` puts any that stepped out back on it, checked in
    integers. A function of the group alone.
    """
    codes = np.asarray(codes)
    sums = np.zeros((int(n_groups), M.shape[1]), dtype=np.float64)
    np.add.at(sums, codes, np.asarray(M, dtype=np.float64))
    sizes = np.bincount(codes, minlength=int(n_groups)).astype(np.float64)
    averages = np.rint(sums / np.maximum(sizes, 1.0)[:, None])
    return _shrink(averages, np.zeros(len(averages), dtype=bool))


def group_sums_of_squares(M, codes, n_groups: int) -> np.ndarray:
    """``S_g = sum_{i in g} ||m_i||^2`` for every group, exact at any group size (Python
    integers, dtype object). Each row's square is below ``2**41``; its high and low 21-bit halves
    are summed per group in int64 (below ``2**63`` up to ``2**42`` rows) and joined exactly: an
    int64 sum of whole squares would wrap silently past ``2**22`` rows of the largest norm, and a
    wrapped (negative) sum would leave a huge group unscaled."""
    codes, norms = np.asarray(codes), _int_norms(M)
    high, low = np.zeros(int(n_groups), dtype=np.int64), np.zeros(int(n_groups), dtype=np.int64)
    np.add.at(high, codes, norms >> 21)
    np.add.at(low, codes, norms & ((1 << 21) - 1))
    return high.astype(object) * (1 << 21) + low.astype(object)


def group_scale_rows(M, codes, n_groups: int) -> np.ndarray:
    r"""Grid rows with each group scaled onto the ball: ``sum_{i in g} ||m_i||^2 <= 4**BITS``.

    A group with ``S_g > 4**BITS`` has its rows replaced by ``trunc(m_i t_g)``, ``t_g =
    2**BITS / sqrt(S_g)``; truncation never grows a coordinate, so the new sum is at most
    ``t_g^2 S_g = 4**BITS (1 + 4u)``, an integer, hence at most ``4**BITS``. That bound is then
    checked exactly and a group beyond it (never) becomes zero rows. Returns a new array.
    """
    codes = np.asarray(codes)
    M = np.array(M, dtype=np.float64)
    sums = group_sums_of_squares(M, codes, n_groups)
    over = sums > _LIMIT
    if over.any():
        roots = np.array([math.sqrt(v) if v > 0 else 1.0 for v in sums])  # float sqrt of ints
        t = np.where(over, _ONE / roots, 1.0)
        M *= t[codes][:, None]
        np.trunc(M, out=M)
        still = group_sums_of_squares(M, codes, n_groups) > _LIMIT
        M[still[codes]] = 0.0
    return M


def gram_product_split(M, K, unit: float = 1.0) -> Exact:
    r"""``sum_i m_i (m_i^T K)`` exactly: ``X^T X V`` on the grid with no rounding of ``m^T K``.

    ``t = m^T K`` is an exact float64 integer (``|t| <= ||m|| ||k|| < 2**41``); it is split as
    ``t = 2**(BITS+1) h + l`` with ``h = rint(t 2**-(BITS+1))`` and ``|l| <= 2**BITS``, both exact,
    so every product ``m_j h`` and ``m_j l`` is below ``2**40`` and a chunk's sums of
    :data:`~dptensor.algorithms.exact.CHUNK` of them stay exact; the total is
    ``2**(BITS+1) sum m h^T + sum m l^T`` in Python integers. ``unit 2**-(3 BITS)`` per integer.
    """
    K = np.asarray(K, dtype=np.float64)
    high, low = _IntSum(), _IntSum()
    for start in range(0, M.shape[0], CHUNK):
        C = np.asarray(M[start:start + CHUNK], dtype=np.float64)
        T = C @ K
        H = np.rint(T / _SPLIT)
        high.add(C.T @ H)
        low.add(C.T @ (T - H * _SPLIT))
    shape = (M.shape[1], K.shape[1])
    ints = high.total(shape) * int(_SPLIT) + low.total(shape)
    return Exact(ints, unit / _ONE ** 3)


def group_power_sensitivity(K, data_norm: float) -> float:
    r"""l2 sensitivity of :func:`gram_product_split` (times ``B^2``) when one group is replaced.

    A group adds ``G_g V_q`` with ``G_g = sum_i q_i q_i^T`` PSD of trace at most 1 (after
    :func:`group_scale_rows`) and ``V_q = K 2**-BITS``. For two such ``G, G'``, ``D = G - G'``
    has eigenvalues in ``[-1, 1]`` and ``||D||_F^2 <= ||G||_F^2 + ||G'||_F^2 <= 2``; so
    ``||D V_q||_F^2 <= ||V_q||_2^2`` times the sum of the ``p`` largest eigenvalues of ``D^2``,
    at most ``min(p, 2) rho^2`` with ``rho >= ||V_q||_2`` (Gershgorin's bound on the exact
    ``K^T K``, rounded up). No rounding allowance: the product is exact.
    """
    Ki = np.asarray(K).astype(np.int64)
    G = (Ki.T @ Ki).astype(object)
    radius = max(sum(abs(v) for v in row) for row in G)
    root = math.isqrt(radius)
    root += root * root < radius
    p = K.shape[1]
    return float(data_norm) ** 2 * math.sqrt(min(p, 2)) * (root / _ONE) * (1 + 2.0 ** -50)


class ExactGroupGram:
    """``B^2 sum_i q_i q_i^T V`` of group-scaled grid rows ``M`` as a power-method operator."""

    def __init__(self, M, data_norm: float):
        self.M, self.data_norm = M, float(data_norm)
        self.shape = (M.shape[1], M.shape[1])

    def matmat(self, Q) -> Exact:
        return gram_product_split(self.M, grid_vectors(Q), self.data_norm ** 2)

    def sensitivity(self, Q) -> float:
        return group_power_sensitivity(grid_vectors(Q), self.data_norm)
