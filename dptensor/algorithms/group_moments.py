r"""Sums over groups of rows for the latent models: each group's rows averaged, rounding bounded.

With ``groups`` (rows sharing a label are one person) a latent model's every moment is
``(1/G) sum_g F(g)`` with ``F(g) = (1/m_g) sum_{i in g} f(x_i)``: the group's average of the
per-row term ``f`` one row's sensitivity is derived for. An average of terms in a convex set
(a ball, non-negative vectors of a norm, PSD matrices of a trace) stays in it, so replacing a
whole group moves each moment by at most one row's sensitivity, over the public ``G``. The
weight ``1 / m_g`` is the same in every moment, so the moments are those of one reweighted data
set and keep the relations the method of moments relies on.

Floating point (recipe: each group's contribution from its rows alone, then a sum over ``G``
public terms): groups of at most :data:`GROUP_BATCH` rows are summed by size (all groups of
``m`` rows in one sum, then divided by ``m``): a chain of at most ``GROUP_BATCH G`` terms;
every larger group is summed alone, divided by its size, and only then added to the others,
so its own rounding (at most ``gamma`` of :data:`MAX_GROUP_ROWS` terms times one row's bound)
is a per-group margin that two neighbours add at most twice; a group of more rows than
:data:`MAX_GROUP_ROWS` weighs 0. :func:`group_rounding` gives both: the public
:class:`~dptensor.mechanisms.Rounding` of the sum and the margin added to the sensitivity.
Derivation: ``docs/derivations/latent.rst``, "Groups of rows".
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ..mechanisms import Rounding
from .moments import SPARE_TERMS, rounding, whitening_roundings

__all__ = ["GROUP_BATCH", "MAX_GROUP_ROWS", "GroupLayout", "group_layout", "group_reduce",
           "group_rounding", "unit_rounding", "unit_whitening_roundings"]

#: Groups of at most this many rows are summed together with every group of their size.
GROUP_BATCH = 16
#: A group of more rows than this weighs 0 in every moment (its rounding would pass the margin).
MAX_GROUP_ROWS = 2 ** 30
#: Rows per partial sum of float32 rows (cast to float64 one block at a time).
_BLOCK = 4096


@dataclass(frozen=True)
class GroupLayout:
    """The rows' order (sorted by group size class, then by group) and the parts summed alone:
    ``(start, stop, size)`` slices of the sorted rows, each divided by ``size`` once summed."""

    order: np.ndarray
    parts: tuple
    n_groups: int


def group_layout(codes, n_groups: int) -> GroupLayout:
    """The layout of labels ``codes`` (``0 .. n_groups - 1``): the small groups of each size in
    one part, each larger group (up to :data:`MAX_GROUP_ROWS` rows) a part of its own."""
    codes = np.asarray(codes, dtype=np.int64)
    sizes = np.bincount(codes, minlength=int(n_groups))
    klass = np.minimum(sizes, GROUP_BATCH + 1)[codes]
    order = np.lexsort((codes, klass))  # stable: a group's rows keep their order
    sorted_codes, parts, start = codes[order], [], 0
    for m in range(1, GROUP_BATCH + 1):
        count = int(np.sum(sizes == m)) * m
        if count:
            parts.append((start, start + count, m))
        start += count
    bounds = np.flatnonzero(np.diff(sorted_codes[start:])) + start + 1
    for lo, hi in zip(np.r_[start, bounds], np.r_[bounds, len(codes)]):
        if lo < hi and hi - lo <= MAX_GROUP_ROWS:
            parts.append((int(lo), int(hi), int(hi - lo)))
    return GroupLayout(order, tuple(parts), int(n_groups))


def _as_float64(block):
    if isinstance(block, np.ndarray) and block.dtype != np.float64:
        return block.astype(np.float64)
    return block


def group_reduce(rows, layout: GroupLayout, partial, *args):
    """``sum_parts (1/size) partial(part's rows, *args)``: a tuple of sums over rows (``partial``
    as :meth:`~dptensor.latent._base.SpectralLatentModel._reduce` takes it), each part summed in
    float64 (float32 rows: cast in blocks of at most 4096 rows, whole groups where they are
    small) and divided by its size before it joins the others."""
    # rows made where they are read (clipped rows: a ``block(start, stop)`` method) come in
    # blocks too, never as a whole part
    take = rows.block if hasattr(rows, "block") else lambda lo, hi: rows[lo:hi]
    total = partial(_as_float64(take(0, 0)), *args)  # zeros of the right shapes
    narrow = hasattr(rows, "block") or (isinstance(rows, np.ndarray)
                                        and rows.dtype != np.float64)
    for start, stop, size in layout.parts:
        # float32 rows: float64 copies of blocks (of whole small groups), never of a whole part
        step = (_BLOCK // size) * size if size <= GROUP_BATCH else _BLOCK
        step = step if narrow else stop - start
        part = None
        for lo in range(start, stop, step):
            piece = partial(_as_float64(take(lo, min(lo + step, stop))), *args)
            part = piece if part is None else tuple(a + b for a, b in zip(part, piece))
        total = tuple(t + p / size for t, p in zip(total, part))
    return total


def _gamma_total(total: float, terms: int) -> float:
    """``gamma_terms * total`` (rounded up: :meth:`~dptensor.mechanisms.Rounding.allowance` is
    twice it)."""
    return Rounding(total=float(total), terms=int(terms)).allowance() / 2.0


def group_rounding(total: float, n_groups: int, inner: int = 0, offset: float = 0.0):
    """``(Rounding, margin)`` of a grouped release (``total``, ``inner`` as for
    :func:`~dptensor.algorithms.moments.rounding`: the sum over units, in the released scale,
    of a unit's term by its summands' absolute values; ``offset``: a public offset's).

    Every coordinate's chain through the small groups' sums, the parts' sum and the scalings is
    at most ``(GROUP_BATCH + 1) (G + 1) + inner + SPARE_TERMS`` operations; ``2 total`` covers the
    parts' absolute values (a large group's computed contribution exceeds its bound by at most
    its margin). ``margin``: twice a large group's own rounding, ``gamma_{MAX_GROUP_ROWS + inner
    + SPARE_TERMS}`` times one unit's bound ``total / G``: what the replaced group and its
    replacement add to the exact sensitivity, on top of the Rounding's allowance.
    """
    G = int(n_groups)
    outer = Rounding(total=2.0 * float(total) + float(offset),
                     terms=(GROUP_BATCH + 1) * (G + 1) + int(inner) + SPARE_TERMS)
    margin = 2.0 * _gamma_total(float(total) / G, MAX_GROUP_ROWS + int(inner) + SPARE_TERMS)
    return outer, margin


def unit_rounding(total: float, n: int, inner: int = 0, layout: GroupLayout | None = None):
    """``(Rounding, margin)``: :func:`~dptensor.algorithms.moments.rounding` with no margin (one
    row a unit, ``n`` rows), or :func:`group_rounding` over ``layout``'s groups."""
    if layout is None:
        return rounding(total, n, inner), 0.0
    return group_rounding(total, layout.n_groups, inner)


def unit_whitening_roundings(n: int, d: int, p: int, unit_total: float, offset: float = 0.0,
                             layout: GroupLayout | None = None):
    """``((analyze, margin), (step, margin), (projection, margin))``: as
    :func:`~dptensor.algorithms.moments.whitening_roundings` (whose scalings by ``sqrt(p)`` and
    ``p`` they take), over groups when ``layout`` is given (margins 0 without)."""
    if layout is None:
        return tuple((r, 0.0) for r in whitening_roundings(n, d, p, unit_total, offset))
    G, root = layout.n_groups, math.sqrt(p)
    return (group_rounding(unit_total, G, 0, offset),
            group_rounding(root * unit_total, G, d, root * offset),
            group_rounding(p * unit_total, G, 2 * d, p * offset))
