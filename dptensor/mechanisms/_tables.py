"""The proposal tables of the exact samplers (:mod:`dptensor.mechanisms.samplers`): segments of
``[0, 8)`` and the tail, their cumulative masses floored to 64 bits and certified with
:mod:`decimal`, and the guide tables that index them by the top bits of a word.
"""
from __future__ import annotations

from decimal import Decimal, localcontext
from fractions import Fraction

import numpy as np

_W_LOG2 = 6                     # cell width w = 2**-6
_TWO64 = 1 << 64
_GUIDE_BITS = 16                # the guide table indexes segments by the top bits of U


class _Table:
    """Proposal for the density ``exp(-g(y))`` on ``[0, inf)``, in segments with exact 64-bit CDF
    boundaries: ``c`` the rectangle of cell ``c``, ``n_cells + c`` its cap, ``tail`` beyond them."""

    def __init__(self, kind: str, n_cells: int):
        self.kind, self.n_cells, self.tail = kind, n_cells, 2 * n_cells
        self.length = Fraction(n_cells, 1 << _W_LOG2)
        self._cache = {}
        bounds = [self.cdf_floor(j, 64) for j in range(self.tail)]
        if any(b2 <= b1 for b1, b2 in zip(bounds, bounds[1:])) or bounds[-1] >= _TWO64:
            # Cannot happen for these sizes.
            raise RuntimeError("segment table is not strictly increasing")
        self.bounds = np.array(bounds, dtype=np.uint64)
        # The boundary above each segment (the tail's is a placeholder: no word lies above the
        # tail), and the one below.
        self.upper = np.r_[self.bounds, np.uint64(_TWO64 - 1)]
        self.lower = np.r_[np.uint64(0), self.bounds]
        # Guide: for each value of the top bits of U (a bucket), the first segment U can fall in.
        tops = np.arange(1 << _GUIDE_BITS, dtype=np.uint64) << np.uint64(64 - _GUIDE_BITS)
        self.guide = np.searchsorted(self.bounds, tops, side="right").astype(np.int64)
        # A bucket decides its segment when no boundary lies in it, first word included (a tie).
        ends = tops + np.uint64((1 << (64 - _GUIDE_BITS)) - 1)
        decided = ((self.upper[self.guide] > ends)
                   & ((self.guide == 0) | (self.lower[self.guide] < tops)))
        # The fast path's table: c - 1 for a bucket inside rectangle c (1 + theta plus it is
        # c + theta).
        self.fast = np.where(decided & (self.guide < n_cells), self.guide - 1.0, -2.0)
        # The two as small integers for the compiled loops: 128 KB each, which stay in cache.
        self.fast_cells = self.fast.astype(np.int16)
        self.guide_cells = self.guide.astype(np.int16)

    def _weights(self, prec: int):
        """Envelope masses of the segments and of the tail, as Decimals good to ``prec`` digits."""
        with localcontext() as ctx:
            ctx.prec = prec + 10
            w = Decimal(1) / (1 << _W_LOG2)
            L = Decimal(self.length.numerator) / self.length.denominator
            if self.kind == "exp":
                height = [(-(w * c)).exp() for c in range(self.n_cells + 1)]
                tail = (-L).exp()                       # the exact mass of [L, inf)
            else:
                height = [(-(w * c) ** 2 / 2).exp() for c in range(self.n_cells + 1)]
                tail = (-L * L / 2).exp() / L           # envelope exp(-L^2/2 - L (y - L))
            rectangles = [w * h for h in height[1:]]
            caps = [w * (h0 - h1) for h0, h1 in zip(height, height[1:])]
            return rectangles + caps, tail

    def _cumulative(self, prec: int):
        """Cumulative envelope masses over the total, to ``prec`` digits (cached per precision)."""
        if prec not in self._cache:
            with localcontext() as ctx:
                ctx.prec = prec + 10
                segments, tail = self._weights(prec)
                total, acc, cdf = sum(segments) + tail, Decimal(0), []
                for weight in segments:
                    acc += weight
                    cdf.append(acc / total)
            self._cache[prec] = cdf
        return self._cache[prec]

    def cdf_floor(self, j: int, bits: int) -> int:
        """``floor(2**bits * P(segment <= j))`` under the proposal, certified by a relative margin.

        The Decimal sums carry ``prec + 10`` digits from correctly rounded terms (a cap, a
        difference of two heights, loses at most 5 of them: no cap is below 1e-4 of its height),
        so their relative error is far below ``10**-prec``; the floor is accepted only when the
        whole interval ``x (1 +- 10**-prec)`` has one floor, and the precision doubles otherwise.
        """
        prec = bits // 3 + 40
        for _ in range(6):
            with localcontext() as ctx:
                ctx.prec = prec + 10
                x = self._cumulative(prec)[j] * (Decimal(2) ** bits)
                lo, hi = x * (1 - Decimal(10) ** -prec), x * (1 + Decimal(10) ** -prec)
                if int(lo) == int(hi):
                    return int(lo)
            prec *= 2
        # Unreachable unless the CDF is dyadic.
        raise RuntimeError("cannot certify a table boundary")  # pragma: no cover
