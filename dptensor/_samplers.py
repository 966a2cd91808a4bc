r"""Exact samplers of rounded Laplace and rounded Gaussian noise, from uniform random integers.

``rounded_laplace(S, rng, size)`` returns integers distributed exactly as ``round(S * L)`` with
``L`` a standard Laplace variable, and ``rounded_gaussian(S, rng, size)`` exactly as
``round(S * N)`` with ``N`` standard normal (``S``: positive scales, one per value or one for all). No floating-point approximation of a
density enters the output: each value is decided by comparing uniform random bits with bounds
that are proven, and a comparison the bounds cannot settle draws more bits and settles it in exact
rational arithmetic. The output is therefore a *post-processing* of an exact continuous Laplace or
Gaussian variable, which is what lets :mod:`dptensor.mechanisms` price it with the unchanged
Laplace and Gaussian events (see ``docs/derivations/sampling.rst``).

How a magnitude ``Y`` (exponential for Laplace, half-normal for Gauss) is drawn, vectorised:

1. A *cell* ``c`` (width ``w = 2**-6``) is drawn by inversion of a 64-bit uniform against a table of
   cumulative envelope weights ``w exp(-g(c w))`` (``g(y) = y`` or ``y**2/2``), computed once with
   :mod:`decimal`, whose ``exp`` is correctly rounded, and floored to 64 bits with a checked margin.
2. ``Y = (c + theta) w`` with ``theta`` uniform, accepted with probability
   ``exp(-(g(Y) - g(c w)))`` by the Bernoulli(exp(-A)) series of Canonne, Kamath & Steinke (2020,
   Alg. 1), each Bernoulli(A/K) decided by interval bounds that use only IEEE-exact
   ``+ - *`` (their rounding error is bounded by a margin).
3. ``round(S * Y)`` is decided from ``theta``'s interval the same way, and a random sign applied.

Beyond the table (``Y >= 8``) the exponential restarts at the edge (it is memoryless) and the
half-normal takes an exact rational slow path.
"""
from __future__ import annotations

import math
from decimal import Decimal, localcontext
from fractions import Fraction

import numpy as np

__all__ = ["rounded_laplace", "rounded_gaussian", "laplace_pmf", "gaussian_pmf"]

_W_LOG2 = 6                     # cell width w = 2**-6
_W = 2.0 ** -_W_LOG2
_THETA_BITS = 52                # bits of theta drawn up front (theta0 = k 2**-52 is an exact double)
_V_BITS = 53                    # bits of each uniform in the Bernoulli series
_MARGIN = 2.0 ** -49            # relative bound on the rounding error of the few float operations
_ROUND_TOL = 2.0 ** -46         # distance from a half-integer below which rounding is settled exactly
_TWO64 = 1 << 64
_GUIDE_BITS = 16               # the guide table indexes cells by the top bits of the uniform


class _Table:
    """Cell proposal for the density ``exp(-g(y))`` on ``[0, inf)``: exact 64-bit CDF boundaries."""

    def __init__(self, kind: str, n_cells: int):
        self.kind, self.n_cells = kind, n_cells
        self.length = Fraction(n_cells, 1 << _W_LOG2)
        self._cache = {}
        bounds = [self.cdf_floor(j, 64) for j in range(n_cells)]
        if any(b2 <= b1 for b1, b2 in zip(bounds, bounds[1:])) or bounds[-1] >= _TWO64:
            raise RuntimeError("cell table is not strictly increasing")  # cannot happen for these sizes
        self.bounds = np.array(bounds, dtype=np.uint64)
        self.upper = np.r_[self.bounds, np.uint64(_TWO64 - 1)]     # boundary above each cell
        self.lower = np.r_[np.uint64(0), self.bounds]               # boundary below each cell
        # Guide: for each value of the top bits of U, the first cell U can fall in.
        tops = (np.arange(1 << _GUIDE_BITS, dtype=np.uint64) << np.uint64(64 - _GUIDE_BITS))
        self.guide = np.searchsorted(self.bounds, tops, side="right").astype(np.int64)

    def _weights(self, prec: int):
        """Envelope weights of the cells and the tail, as Decimals accurate to ``prec`` digits."""
        with localcontext() as ctx:
            ctx.prec = prec + 10
            w = Decimal(1) / (1 << _W_LOG2)
            L = Decimal(self.length.numerator) / self.length.denominator
            if self.kind == "exp":
                cells = [w * (-(w * c)).exp() for c in range(self.n_cells)]
                tail = (-L).exp()                       # the exact mass of [L, inf)
            else:
                cells = [w * (-(w * c) ** 2 / 2).exp() for c in range(self.n_cells)]
                tail = (-L * L / 2).exp() / L           # envelope exp(-L^2/2 - L (y - L))
            return cells, tail

    def _cumulative(self, prec: int):
        """Cumulative envelope weights over the total, to ``prec`` digits (cached per precision)."""
        if prec not in self._cache:
            with localcontext() as ctx:
                ctx.prec = prec + 10
                cells, tail = self._weights(prec)
                total, acc, cdf = sum(cells) + tail, Decimal(0), []
                for weight in cells:
                    acc += weight
                    cdf.append(acc / total)
            self._cache[prec] = cdf
        return self._cache[prec]

    def cdf_floor(self, j: int, bits: int) -> int:
        """``floor(2**bits * P(cell <= j))`` under the proposal, certified by a relative error margin.

        The Decimal sums carry ``prec + 10`` digits from correctly rounded terms, so their relative
        error is far below ``10**-prec``; the floor is accepted only when the whole interval
        ``x (1 +- 10**-prec)`` has one floor, and the precision doubles otherwise.
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
        raise RuntimeError("cannot certify a table boundary")  # pragma: no cover - needs a dyadic CDF


_EXP = _Table("exp", 8 << _W_LOG2)
_HALF_NORMAL = _Table("half_normal", 8 << _W_LOG2)


def _uniform_bits(rng, size, bits):
    """``size`` uniform integers of ``bits`` bits (uint64)."""
    raw = rng.integers(0, _TWO64, size=size, dtype=np.uint64, endpoint=False)
    return raw >> np.uint64(64 - bits)


def _draw_cells(table: _Table, size: int, rng) -> np.ndarray:
    """Cell indices by exact inversion; index ``n_cells`` means the tail."""
    U = rng.integers(0, _TWO64, size=size, dtype=np.uint64, endpoint=False)
    cell = table.guide[(U >> np.uint64(64 - _GUIDE_BITS)).astype(np.intp)]
    # A linear search from the guide's start; with 2**16 guide entries nearly every value moves
    # at most once, so the first step runs on whole arrays and the rest on the few left.
    # upper[c] is the boundary above cell c (a sentinel 2**64 - 1 for the tail).
    move = U >= table.upper[cell]
    cell += move
    np.minimum(cell, table.n_cells, out=cell)
    active = np.flatnonzero(move)
    while active.size:
        c = cell[active]
        move = U[active] >= table.upper[c]
        active = active[move]
        cell[active] = np.minimum(c[move] + 1, table.n_cells)
    # u = (U + R)/2^64 with R the bits not drawn: U equal to the boundary below its cell
    # (lower[c]) leaves u < CDF undecided.
    for i in np.flatnonzero(U == table.lower[cell]):  # probability about 2**-64 each
        if cell[i] > 0:
            cell[i] = _resolve_tie(table, int(cell[i]) - 1, int(U[i]), rng)
    return cell


def _resolve_tie(table: _Table, j: int, U: int, rng) -> int:
    bits, value = 64, U
    while True:
        bits, value = bits + 64, (value << 64) | int(rng.integers(0, _TWO64, dtype=np.uint64))
        bound = table.cdf_floor(j, bits)
        if value != bound:
            return j if value < bound else j + 1


def _accept_bounds(kind: str, cell_f, theta0):
    """Bounds on ``A(theta) = g((c + theta) w) - g(c w)`` for theta in ``[theta0, theta0 + 2**-52)``
    (``cell_f``: the cells as doubles)."""
    if kind == "exp":
        return theta0 * _W, (theta0 + 2.0 ** -_THETA_BITS) * _W     # exact: products by a power of two
    # A = theta (2c + theta) w^2/2 grows by at most (c + 1) w^2 2**-52 across the interval.
    lo = 2.0 * cell_f
    lo += theta0
    lo *= theta0
    lo *= _W * _W / 2
    hi = cell_f + 1.0
    hi *= _W * _W * 2.0 ** -_THETA_BITS
    hi += lo
    hi *= 1 + _MARGIN
    lo *= 1 - _MARGIN
    return lo, hi


def _bernoulli_exp_series(a_lo, a_hi, rng):
    """Bernoulli(exp(-A)) for ``A`` in ``[a_lo, a_hi]`` (within [0, 1]): CKS Alg. 1, vectorised.

    The series draws ``V ~ U[0, 1)`` and continues (``K += 1``) while ``V K < A``; the result is
    ``K`` odd. Returns ``(result, pending, K, V)``: ``pending`` marks values whose comparison the
    bounds could not settle, with the counter ``K`` and the undecided ``V`` to continue from.
    """
    n = a_lo.size
    # First round, on whole arrays: K = 1, so stopping now means a result of 1 (K odd).
    V = _uniform_bits(rng, n, _V_BITS)
    v0 = V.astype(np.float64) * 2.0 ** -_V_BITS
    yes = v0 + 2.0 ** -_V_BITS <= a_lo   # V < A surely: continue (K = 1: the products are exact)
    result = v0 >= a_hi                  # V >= A surely: stop, K = 1
    pending = ~(yes | result)
    V_pending = np.where(pending, V, np.uint64(0))
    K = np.ones(n, dtype=np.int64)
    active = np.flatnonzero(yes)
    K[active] = 2
    while active.size:  # later rounds, on the few that continue
        V = _uniform_bits(rng, active.size, _V_BITS)
        v0 = V.astype(np.float64) * 2.0 ** -_V_BITS
        k = K[active]
        yes = (v0 + 2.0 ** -_V_BITS) * k * (1 + _MARGIN) <= a_lo[active]
        no = v0 * k * (1 - _MARGIN) >= a_hi[active]
        undecided = ~(yes | no)
        result[active[no]] = k[no] % 2 == 1
        pending[active[undecided]] = True
        V_pending[active[undecided]] = V[undecided]
        active = active[yes]
        K[active] += 1
    return result, pending, K, V_pending


class _Lazy:
    """A uniform real in [0, 1) known to ``bits`` bits; more are drawn on demand."""

    def __init__(self, value: int, bits: int, rng):
        self.value, self.bits, self.rng = value, bits, rng

    def refine(self):
        self.value = (self.value << 32) | int(self.rng.integers(0, 1 << 32))
        self.bits += 32

    @property
    def lo(self):
        return Fraction(self.value, 1 << self.bits)

    @property
    def hi(self):
        return Fraction(self.value + 1, 1 << self.bits)


def _exact_A(kind: str, cell: int, theta: Fraction) -> Fraction:
    w = Fraction(1, 1 << _W_LOG2)
    if kind == "exp":
        return theta * w
    return theta * (2 * cell + theta) * w * w / 2


def _slow_bernoulli_exp(A, theta: _Lazy, rng, K=1, V=None):
    """Exact Bernoulli(exp(-A(theta))), A increasing in theta with values in [0, 1]; rational arithmetic."""
    while True:
        V = V or _Lazy(int(rng.integers(0, 1 << 32)), 32, rng)
        while True:  # Bernoulli(A/K): is V K < A(theta)?
            if V.hi * K <= A(theta.lo):
                yes = True
                break
            if V.lo * K >= A(theta.hi):
                yes = False
                break
            theta.refine()
            V.refine()
        if not yes:
            return K % 2 == 1
        K, V = K + 1, None


def _slow_round(S: Fraction, offset: Fraction, scale: Fraction, theta: _Lazy) -> int:
    """``round(S (offset + scale theta))`` exactly, drawing bits of theta until it is settled."""
    while True:
        lo = math.floor(S * (offset + scale * theta.lo) + Fraction(1, 2))
        hi = math.floor(S * (offset + scale * theta.hi) + Fraction(1, 2))
        if lo == hi:
            return lo
        theta.refine()


def _slow_exponential(rng) -> tuple:
    """An exact Exp(1) variable as ``(offset, theta)``: ``E = offset + w theta`` with theta lazy."""
    offset = Fraction(0)
    while True:
        cell = int(_draw_cells(_EXP, 1, rng)[0])
        if cell == _EXP.n_cells:
            offset += _EXP.length
            continue
        theta = _Lazy(int(_uniform_bits(rng, 1, _THETA_BITS)[0]), _THETA_BITS, rng)
        if _slow_bernoulli_exp(lambda t: _exact_A("exp", cell, t), theta, rng):
            return offset + Fraction(cell, 1 << _W_LOG2), theta


def _slow_gaussian_tail(S: Fraction, rng) -> int:
    """``round(S Y)`` for ``Y`` half-normal conditioned on ``Y >= L``: ``Y = L + E/L`` accepted with
    probability ``exp(-(E/L)**2 / 2)`` (the envelope ``exp(-L^2/2 - L (y - L))`` is tight at L)."""
    L, w = _HALF_NORMAL.length, Fraction(1, 1 << _W_LOG2)
    while True:
        offset, theta = _slow_exponential(rng)

        def A(t, offset=offset):  # (E/L)^2/2 with E = offset + w t
            return ((offset + w * t) / L) ** 2 / 2

        parts = max(1, math.ceil(A(Fraction(1))))  # split exp(-A) into factors exp(-A/parts), each <= 1
        if all(_slow_bernoulli_exp(lambda t: A(t) / parts, theta, rng) for _ in range(parts)):
            return _slow_round(S, L + offset / L, w / L, theta)


def _one_pass(table: _Table, S: np.ndarray, base: np.ndarray, rng):
    """One proposal for each value: ``(magnitude, sign, done)``, all on whole arrays.

    ``base`` (exponential only) counts the table lengths already passed by restarts at the edge
    and is updated in place; values not ``done`` (rejected, or restarted) need another pass.
    """
    cell = _draw_cells(table, base.size, rng)
    tail = cell == table.n_cells
    raw = rng.integers(0, _TWO64, size=base.size, dtype=np.uint64, endpoint=False)
    theta_int = raw >> np.uint64(64 - _THETA_BITS)
    sign = (raw & np.uint64(1)).astype(bool)                      # a bit theta does not use
    theta0 = theta_int.astype(np.float64) * 2.0 ** -_THETA_BITS   # exact: 52 bits
    cell_f = cell.astype(np.float64)
    a_lo, a_hi = _accept_bounds(table.kind, cell_f, theta0)
    accepted, pending, K, V = _bernoulli_exp_series(a_lo, a_hi, rng)
    theta_slow = {}
    for i in np.flatnonzero(pending & ~tail):  # comparisons the bounds could not settle: finish exactly
        theta, c = _Lazy(int(theta_int[i]), _THETA_BITS, rng), int(cell[i])
        accepted[i] = _slow_bernoulli_exp(lambda t, c=c: _exact_A(table.kind, c, t), theta, rng,
                                          K=int(K[i]), V=_Lazy(int(V[i]), _V_BITS, rng))
        theta_slow[i] = theta
    # round(v) for v = S w (base + c + theta), theta in [theta0, theta0 + 2**-52): with x the
    # computed v + 1/2 and r = floor(x), the answer is r whenever x - r (exact, by Sterbenz)
    # keeps a distance tol from 0 and 1; tol bounds the interval's width S w 2**-52 and every
    # rounding error (relative 2**-52 on v, absolute 2**-53 on the + 1/2) many times over.
    total = (base + cell).astype(np.float64) if base.any() else cell_f  # base: exponential restarts
    total += theta0
    Sw = S * _W
    x = total
    x *= Sw
    tol = (x + Sw + 1.0) * _ROUND_TOL
    x += 0.5
    r_lo = np.floor(x)
    x -= r_lo
    unsure = (x <= tol) | (x >= 1.0 - tol)
    w = Fraction(1, 1 << _W_LOG2)
    for i in np.flatnonzero(accepted & (unsure | pending) & ~tail):
        theta = theta_slow.get(i) or _Lazy(int(theta_int[i]), _THETA_BITS, rng)
        S_i = Fraction(float(S if S.ndim == 0 else S[i]))
        r_lo[i] = _slow_round(S_i, int(base[i] + cell[i]) * w, w, theta)
    done = accepted & ~tail
    if tail.any():
        if table is _EXP:  # memoryless: Y - L given Y >= L is Exp(1) again, drawn afresh
            base[tail] += table.n_cells
        else:
            for i in np.flatnonzero(tail):  # probability about 1e-15 each
                r_lo[i] = _slow_gaussian_tail(Fraction(float(S if S.ndim == 0 else S[i])), rng)
            done |= tail
    return r_lo, sign, done


def _rounded(table: _Table, S, size: int, rng) -> np.ndarray:
    """``sign * round(S * Y)`` for ``Y`` with density proportional to exp(-g) on [0, inf); float64 integers.

    ``S`` is a scalar or an array of ``size`` scales.
    """
    S = np.asarray(S, dtype=np.float64)
    S = S if S.ndim == 0 else S.ravel()
    base = np.zeros(size, dtype=np.int64)
    magnitude, sign, done = _one_pass(table, S, base, rng)
    out = np.where(sign, magnitude, -magnitude)
    left = np.flatnonzero(~done)
    while left.size:  # the rejected few, again (by index)
        base_left = base[left]
        magnitude, sign, done = _one_pass(table, S if S.ndim == 0 else S[left], base_left, rng)
        base[left] = base_left
        out[left[done]] = np.where(sign, magnitude, -magnitude)[done]
        left = left[~done]
    return out


def _check_scales(S, size):
    S = np.asarray(S, dtype=np.float64)
    shape = np.shape(S) if size is None else ((size,) if np.ndim(size) == 0 else tuple(size))
    if S.ndim and S.shape != shape:
        S = np.broadcast_to(S, shape)
    if not np.all(S > 0):
        raise ValueError("scales S must be > 0")
    return S, shape


def rounded_laplace(S, rng: np.random.Generator, size=None) -> np.ndarray:
    """Integers distributed exactly as ``round(S L)``, ``L`` standard Laplace, independent.

    ``S``: positive scales, an array (one value each) or a scalar with ``size``. Returned as
    float64, which holds them exactly (they stay far below 2**53).
    """
    S, shape = _check_scales(S, size)
    return _rounded(_EXP, S, int(np.prod(shape)), rng).reshape(shape)


def rounded_gaussian(S, rng: np.random.Generator, size=None) -> np.ndarray:
    """Integers distributed exactly as ``round(S N)``, ``N`` standard normal, independent (as above)."""
    S, shape = _check_scales(S, size)
    return _rounded(_HALF_NORMAL, S, int(np.prod(shape)), rng).reshape(shape)


def laplace_pmf(k, S):
    """``P(round(S L) = k)`` for integer ``k`` (float64; for tests)."""
    k = np.abs(np.asarray(k, dtype=float))
    upper = np.exp(-(k + 0.5) / S) / 2
    return np.where(k == 0, 1 - 2 * upper, np.exp(-(k - 0.5) / S) / 2 - upper)


def gaussian_pmf(k, S):
    """``P(round(S N) = k)`` for integer ``k`` (float64, tail-accurate; for tests)."""
    from scipy.special import ndtr
    k = np.abs(np.asarray(k, dtype=float))
    return ndtr(-(k - 0.5) / S) - ndtr(-(k + 0.5) / S)
