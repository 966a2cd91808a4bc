r"""Groups of rows for the tensor power methods: third-order statistics that one group moves as
one row does.

A tensor fit's queries are ``T(I,u,u) = sum_i (q_i.u)^2 q_i`` and ``T(u,u,u) = sum_i (q_i.u)^3``
(times ``B^3 / n``). One row adds at most ``||q||^3 ||u||^2`` and ``||q||^3 ||u||^3``, so a group
whose rows have ``sum_{i in g} ||q_i||^3 <= 1`` adds at most what one row of norm 1 adds:

* :func:`group_scale_cubes` scales each group's grid rows onto that bound, checked in integers
  (the third-order analogue of :func:`~dptensor.algorithms.groups.group_scale_rows`, whose
  square bound would shrink a group of ``s`` equal rows to ``s^(-1/2)`` of one row's weight
  where the cube bound keeps one row's weight);
* :func:`moment_product_split` computes both queries as exact integer sums with no per-row
  rounding (the row-level :func:`~dptensor.algorithms.exact.moment_product` rounds each row's
  ``t^2``, an allowance that a group of many rows would multiply);
* :func:`group_moment_sensitivities` is their sensitivity, without allowance;
* :func:`moment_tensor_split` is the dense moment ``sum_i q_i^(x)3`` as exact integers (input
  perturbation releases its distinct entries);
* :func:`group_blocks` cuts the groups (not the rows) into a stream's blocks.

Derivation: ``docs/derivations/tensor_decomposition.rst``, "Groups of rows".
"""
from __future__ import annotations

import math

import numpy as np

from .exact import BITS, Exact, _int_norms, _IntSum, grid_vectors

__all__ = ["group_cube_bounds", "group_scale_cubes", "moment_product_split",
           "group_moment_sensitivities", "ExactGroupMoment", "group_blocks",
           "moment_tensor_split"]

_ONE = float(2 ** BITS)
#: ``sum_{i in g} ||m_i||^3 <= 2**(3 BITS)`` is ``sum ||q_i||^3 <= 1``.
_LIMIT = 2 ** (3 * BITS)
#: Rows per float64 product of :func:`moment_product_split`: its terms are below ``2**42``.
_CHUNK = 2 ** 10
#: The projections ``t = m^T k`` (``|t| < 2**41``) in balanced base-``2**11`` digits.
_BASE, _DIGITS = 2.0 ** 11, 4
_SCALINGS = 6  # rescaling passes before a group still over the bound is dropped (never seen)


def group_cube_bounds(M, codes, n_groups: int) -> np.ndarray:
    r"""Exact integer upper bounds ``A_g >= sum_{i in g} ||m_i||^3`` (Python integers, dtype
    object).

    Each row's ``s = ||m||^2`` is an exact integer below ``2**41``; ``c = s ceil(sqrt(s))``
    (``isqrt`` in int64, corrected exactly) is an integer at least ``||m||^3``, below ``2**62``.
    Its high and low 31-bit halves are summed per group in int64 (no wrap below ``2**32`` rows)
    and joined in Python integers.
    """
    codes, s = np.asarray(codes), _int_norms(M)
    r = np.floor(np.sqrt(s.astype(np.float64))).astype(np.int64)
    r -= r * r > s
    r += (r + 1) * (r + 1) <= s  # r = isqrt(s), exactly
    c = s * (r + (r * r < s))    # s ceil(sqrt(s)) >= s^(3/2)
    high, low = np.zeros(int(n_groups), np.int64), np.zeros(int(n_groups), np.int64)
    np.add.at(high, codes, c >> 31)
    np.add.at(low, codes, c & ((1 << 31) - 1))
    return high.astype(object) * (1 << 31) + low.astype(object)


def group_scale_cubes(M, codes, n_groups: int) -> np.ndarray:
    r"""Grid rows with each group scaled so that ``sum_{i in g} ||m_i||^3 <= 2**(3 BITS)``.

    A group over the bound (by :func:`group_cube_bounds`) has its rows replaced by ``trunc(m_i
    t_g)`` with ``t_g = (2**(3 BITS) / A_g)^(1/3) (1 - 2**-30)``: truncation never grows a
    coordinate, so the cube sum falls by about ``t_g^3``. The bound is checked again in
    integers, a group still over it (its ceilings' slack, on many tiny rows) scaled again, and
    one still over after a few passes becomes zero rows. Every step reads the group alone.
    Returns a new array.
    """
    codes = np.asarray(codes)
    M = np.array(M, dtype=np.float64)
    over = group_cube_bounds(M, codes, n_groups) > _LIMIT
    for _ in range(_SCALINGS):
        if not over.any():
            return M
        bounds = group_cube_bounds(M, codes, n_groups)
        t = np.array([(float(_LIMIT) / float(a)) ** (1.0 / 3.0) * (1 - 2.0 ** -30) if o else 1.0
                      for a, o in zip(bounds, over)])
        M *= t[codes][:, None]
        np.trunc(M, out=M)
        over = group_cube_bounds(M, codes, n_groups) > _LIMIT
    M[over[codes]] = 0.0
    return M


def _digits(T):
    """``t = sum_a d_a 2**(11 a)`` with ``|d_a| <= 2**10`` (``|d_3| <= 2**8``), all exact."""
    digits, rest = [], T
    for a in range(_DIGITS - 1, 0, -1):
        high = np.rint(rest / _BASE ** a)
        rest = rest - high * _BASE ** a
        digits.append(high)
    digits.append(rest)
    return digits[::-1]


def _square_digits(T):
    """``t^2 = sum_c e_c 2**(11 c)``, ``e_c = sum_{a+b=c} d_a d_b`` (``|e_c| < 2**22``), stacked
    as ``(rows, 7 L)``."""
    d = _digits(T)
    e = [sum(d[a] * d[c - a] for a in range(max(0, c - _DIGITS + 1), min(c, _DIGITS - 1) + 1))
         for c in range(2 * _DIGITS - 1)]
    return np.hstack(e)


def moment_product_split(M, K, unit: float = 1.0) -> Exact:
    r"""``[sum_i m_i t_i^2 ; sum_i t_i^3]`` with ``t = m^T K``, exactly: no rounding anywhere.

    ``t`` is an exact float64 integer (``|t| <= ||m|| ||k|| < 2**41``); its digits' products
    ``e_c`` (:func:`_square_digits`) are below ``2**22``, so every product ``m_j e_c`` is below
    ``2**42`` and a float64 sum of :data:`_CHUNK` of them is exact; ``sum_i m_i t_i^2 = sum_c
    2**(11 c) sum_i m_i e_{c,i}`` in Python integers. The scalar is ``sum_i t_i^3 = k^T sum_i
    m_i t_i^2``, exact in integers too. Returns a (d + 1) x L :class:`Exact` in ``unit 2**-(6
    BITS)`` per integer (the vector rows carried at ``2**BITS`` times their integers): rows
    ``0..d-1`` are ``sum_i (q_i.u)^2 q_i``, row ``d`` is ``sum_i (q_i.u)^3`` (times ``unit``).
    """
    K = np.asarray(K, dtype=np.float64)
    _check_columns(K)
    L, width = K.shape[1], 2 * _DIGITS - 1
    acc = _IntSum()
    for start in range(0, M.shape[0], _CHUNK):
        C = np.asarray(M[start:start + _CHUNK], dtype=np.float64)
        acc.add(C.T @ _square_digits(C @ K))
    parts = acc.total((M.shape[1], width * L))
    S = sum(parts[:, c * L:(c + 1) * L] * (1 << (11 * c)) for c in range(width))
    cubes = (K.astype(np.int64).astype(object) * S).sum(axis=0)
    ints = np.vstack([S * (1 << BITS), cubes[None, :]])
    return Exact(ints, unit / _ONE ** 6)


def moment_tensor_split(M, unit: float = 1.0) -> Exact:
    r"""The dense moment ``sum_i m_ia m_ib m_ic`` (d x d x d), exactly: no rounding anywhere.

    Each pair product ``p = m_b m_c`` is an exact float64 integer (``|p| <= 4**BITS``), written
    in the same balanced base-``2**11`` digits as :func:`moment_product_split`'s ``t`` (all
    below ``2**10``), so every product ``m_a d_k`` is below ``2**30`` and a float64 sum of up to
    ``2**22`` of them is exact; the four digit sums are joined in Python integers. Returns an
    :class:`Exact` in ``unit 2**-(3 BITS)`` per integer.
    """
    d = M.shape[1]
    rows = max(1, min(2 ** 22, 2 ** 22 // (d * d)))  # a chunk's d^2 pair digits: 4 x 32 MiB
    acc = _IntSum()
    for start in range(0, M.shape[0], rows):
        C = np.asarray(M[start:start + rows], dtype=np.float64)
        P = (C[:, :, None] * C[:, None, :]).reshape(len(C), d * d)
        acc.add(C.T @ np.hstack(_digits(P)))
    parts = acc.total((d, _DIGITS * d * d))
    ints = sum(parts[:, k * d * d:(k + 1) * d * d] * (1 << (11 * k)) for k in range(_DIGITS))
    return Exact(ints.reshape(d, d, d), unit / _ONE ** 3)


def _check_columns(K):
    """Refuse grid columns longer than ``2**(BITS+1)`` (a public check: ``|t| < 2**41`` for every
    grid row then, which the digits' bounds need); unit columns are about ``2**BITS`` long."""
    Ki = np.asarray(K).astype(np.int64)
    if Ki.size and int((Ki * Ki).sum(axis=0).max()) > 4 ** (BITS + 1):
        raise ValueError("moment_product_split takes grid columns of norm at most 2 (unit "
                         "candidates on the grid)")


def group_moment_sensitivities(K, data_norm: float, n_groups: int):
    r"""Per-column l2 sensitivities of :func:`moment_product_split`'s two queries over
    ``n_groups`` groups scaled by :func:`group_scale_cubes`, times ``B^3 / n_groups``.

    With ``r_l = ceil(||k_l||) 2**-BITS >= ||u_l||`` (from the exact integer ``||k_l||^2``),
    a group adds ``||sum_i (q_i.u)^2 q_i|| <= sum_i ||q_i||^3 r^2 <= r^2`` and ``|sum_i
    (q_i.u)^3| <= r^3``; replacing it moves each by at most twice that. The sums are exact: no
    allowance, only the rounding of these few products (the factors ``1 + 2**-50``).
    """
    Ki = np.asarray(K).astype(np.int64)
    sq = (Ki * Ki).sum(axis=0)
    r = np.array([(math.isqrt(int(v)) + 1) / _ONE for v in sq])
    scale = 2.0 * float(data_norm) ** 3 / float(n_groups) * (1 + 2.0 ** -50)
    return scale * r ** 2 * (1 + 2.0 ** -51), scale * r ** 3 * (1 + 2.0 ** -51)


class ExactGroupMoment:
    """The third moment ``(B^3 / G) sum_i q_i^(x)3`` of group-scaled grid rows ``M`` (G groups)
    as a tensor operator: ``apply_evaluate(U)`` returns two exact statistics."""

    def __init__(self, M, data_norm: float, n_groups: int):
        self.M, self.data_norm, self.n = M, float(data_norm), int(n_groups)
        self.shape = (M.shape[1],) * 3

    def apply_evaluate(self, U):
        stat = moment_product_split(self.M, grid_vectors(U), self.data_norm ** 3 / self.n)
        return Exact(stat.ints[:-1], stat.unit), Exact(stat.ints[-1], stat.unit)

    def apply(self, U):
        return self.apply_evaluate(U)[0]

    def evaluate(self, U):
        return self.apply_evaluate(U)[1]


def group_blocks(codes, n_groups: int, per_block: int, n_blocks: int, rng):
    """The rows of each of a stream's ``n_blocks`` blocks, each block ``per_block`` whole groups.

    The groups are permuted by ``rng`` (independent of the data) and cut in order into blocks of
    ``per_block``; groups past the last block are not read. Each group lies in one block, so
    blocks read disjoint groups. Returns a list of row-index arrays (rows in their order in X).
    """
    place = np.empty(int(n_groups), dtype=np.int64)
    place[rng.permutation(int(n_groups))] = np.arange(int(n_groups))
    block = place[np.asarray(codes)] // int(per_block)
    order = np.argsort(block, kind="stable")
    cuts = np.searchsorted(block[order], np.arange(int(n_blocks) + 1))
    return [order[cuts[b]:cuts[b + 1]] for b in range(int(n_blocks))]
