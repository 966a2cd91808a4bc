r"""Exact samplers of rounded Laplace and rounded Gaussian noise, from uniform random integers.

``rounded_laplace(S, rng, size)`` returns integers distributed exactly as ``round(S * L)`` with
``L`` a standard Laplace variable, and ``rounded_gaussian(S, rng, size)`` exactly as
``round(S * N)`` with ``N`` standard normal (``S``: positive scales, one per value or one for all).
No floating-point approximation of a density enters the output: each value is decided by
comparing uniform random bits with bounds that are proven, and a comparison the bounds cannot
settle draws more bits and settles it in exact rational arithmetic. The output is therefore a
*post-processing* of an exact continuous Laplace or Gaussian variable, which is what lets
:mod:`dptensor.mechanisms` price it with the unchanged Laplace and Gaussian events (see
``docs/derivations/sampling.rst``).

How a magnitude ``Y`` (exponential for Laplace, half-normal for Gauss) is drawn, vectorised:

1. ``[0, 8)`` is cut into cells of width ``w = 2**-6``. Relative to its value at the cell's
   left edge, the density ``exp(-g(y))`` (``g(y) = y`` or ``y**2/2``) over cell ``c`` is
   ``exp(-A(theta))``, ``y = (c + theta) w``, ``A(theta) = g(y) - g(c w)``, between
   ``exp(-A(1))`` and 1. Its box splits into a *rectangle* (heights below ``exp(-A(1))``, all
   under the density) and a *cap* (the rest). A segment (a rectangle, a cap's box, or the tail
   beyond 8) is drawn by inversion of a 64-bit uniform ``U`` against a table of cumulative masses
   computed once with :mod:`decimal`, whose ``exp`` is correctly rounded, and floored to 64 bits
   with a checked margin.
2. In a rectangle, ``theta`` is uniform: nothing to accept. In a cap, ``theta`` is uniform and
   a uniform height of the box, ``exp(-s)`` with ``s = A(1) u`` and ``u`` of density
   proportional to ``exp(-A(1) u)`` on [0, 1), is accepted iff ``A(theta) < s``; ``u`` comes
   by rejection with the Bernoulli(exp(-a)) of Canonne, Kamath & Steinke (2020, Alg. 1). A
   rejected proposal starts again from the table. Every comparison is decided by interval
   bounds that use only IEEE-exact ``+ - *`` (their rounding error is bounded by a margin).
3. ``round(S * Y)`` is decided from ``theta``'s interval the same way, and a random sign applied.

The fast path: a ``U`` whose top 16 bits name a slice of the table inside one rectangle (98% of
them) has its cell decided by those bits alone, and its other bits are still uniform: they give
``theta`` (47 bits) and the sign. One word per value and a dozen operations on cache-sized
chunks; the other values take the full path, with fresh words.

Beyond the table (``Y >= 8``) the exponential restarts at the edge (it is memoryless) and the
half-normal takes an exact rational slow path.

Where numba is installed (the ``fast`` extra), :mod:`._sampler_kernel` runs the same method in
compiled loops: the fast path gives the values above bit for bit, and the full method runs value
by value on the fresh words that follow the release's words in the stream, handing what its
bounds cannot settle, with the state reached, to the exact paths here. The law is the same; the
words the full method reads are not the same as the vectorised rounds', so a seeded release
differs between an install with numba and one without (each reproduces its own).
"""
from __future__ import annotations

import math
import warnings
from fractions import Fraction

import numpy as np

from ._tables import _GUIDE_BITS, _TWO64, _W_LOG2, _Table

__all__ = ["rounded_laplace", "rounded_gaussian", "laplace_pmf", "gaussian_pmf"]

_W = 2.0 ** -_W_LOG2
_W_EXACT = Fraction(1, 1 << _W_LOG2)
_THETA_BITS = 52                # bits of theta on the full path (theta0 = k 2**-52: a double)
_FAST_BITS = 47                 # bits of theta on the fast path: bits 1..47 of U (bit 0: the sign)
_V_BITS = 53                    # bits of each uniform in the Bernoulli series
_MARGIN = 2.0 ** -49            # relative bound on the rounding error of the few float operations
_ROUND_TOL = 2.0 ** -50         # bounds the rounding error of S w (c + theta) + 1/2, relative to it
_CHUNK = 1 << 16                # values per fast-path chunk: few Python calls, arrays in cache
# Bit generators whose raw words are 64-bit.
_RAW64 = (np.random.PCG64, np.random.PCG64DXSM, np.random.Philox, np.random.SFC64)


_EXP = _Table("exp", 8 << _W_LOG2)
_HALF_NORMAL = _Table("half_normal", 8 << _W_LOG2)


def _where(mask):
    """Positions of the True values of a 1-d mask (``np.flatnonzero`` without its overhead)."""
    return mask.nonzero()[0]


def _raw(rng, size):
    """``size`` uniform 64-bit words (uint64), straight from the bit generator if its words are."""
    if isinstance(rng.bit_generator, _RAW64):
        return rng.bit_generator.random_raw(size)
    return rng.integers(0, _TWO64, size=size, dtype=np.uint64, endpoint=False)


def _uniform_bits(rng, size, bits):
    """``size`` uniform integers of ``bits`` bits (uint64)."""
    return _raw(rng, size) >> np.uint64(64 - bits)


def _draw_segments(table: _Table, U: np.ndarray, rng) -> np.ndarray:
    """Segment indices of the words ``U`` by exact inversion (``table.tail``: beyond the table)."""
    # The number of boundaries at or below U is its segment (upper[s] is the boundary above
    # segment s; nothing lies above the tail): one binary search, cheap on the few words left
    # by the fast path.
    seg = table.bounds.searchsorted(U, side="right")
    # u = (U + R)/2^64 with R the bits not drawn: U equal to the boundary below its segment
    # (lower[s]) leaves u < CDF undecided.
    for i in _where(U == table.lower[seg]):  # probability about 2**-64 each
        if seg[i] > 0:
            seg[i] = _resolve_tie(table, int(seg[i]) - 1, int(U[i]), rng)
    return seg


def _resolve_tie(table: _Table, j: int, U: int, rng) -> int:
    bits, value = 64, U
    while True:
        bits, value = bits + 64, (value << 64) | int(_raw(rng, 1)[0])
        bound = table.cdf_floor(j, bits)
        if value != bound:
            return j if value < bound else j + 1


# ---------------------------------------------------------------- a cap's theta
def _A(kind: str, cell, theta, w):
    """``A(theta) = g((c + theta) w) - g(c w)``, increasing in theta, at most ``A(1) <= 1/8``.

    On doubles (``w = _W``, a power of two) it takes at most two roundings, a relative error
    below 2**-51, and ``A(1)`` is exact; on Fractions (``w`` a Fraction) it is exact.
    """
    if kind == "exp":
        return theta * w
    return theta * (2 * cell + theta) * (w * w / 2)


def _interval(f, k):
    """Bounds on ``f(t)``, f increasing, for ``t`` in ``[k 2**-52, (k + 1) 2**-52)`` (``k``: 52-bit
    integers): f's double values at the two ends (exact doubles), widened by ``_MARGIN``."""
    t = k.astype(np.float64) * 2.0 ** -_THETA_BITS
    return f(t) * (1 - _MARGIN), f(t + 2.0 ** -_THETA_BITS) * (1 + _MARGIN)


def _bernoulli_exp_series(a_lo, a_hi, rng):
    """Bernoulli(exp(-a)) for ``a`` in ``[a_lo, a_hi]`` (within [0, 1]): CKS Alg. 1, vectorised.

    The series draws ``V ~ U[0, 1)`` and continues (``K += 1``) while ``V K < a``; the result is
    ``K`` odd. Returns ``(result, pending, K, V)``: ``pending`` marks values whose comparison the
    bounds could not settle, with the counter ``K`` and the undecided ``V`` to continue from.
    """
    n = a_lo.size
    # First round, on whole arrays: K = 1, so stopping now means a result of 1 (K odd).
    V = _uniform_bits(rng, n, _V_BITS)
    v0 = V.astype(np.float64) * 2.0 ** -_V_BITS
    yes = v0 + 2.0 ** -_V_BITS <= a_lo   # V < a surely: continue (K = 1: the products are exact)
    result = v0 >= a_hi                  # V >= a surely: stop, K = 1
    pending = ~(yes | result)
    # Read only where pending: V there is the first round's until a later round replaces it.
    V_pending, K = V, np.ones(n, dtype=np.int64)
    active = _where(yes)
    if active.size:
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


def _slow_bernoulli_exp(f, x: _Lazy, rng, K=1, V=None):
    """Exact Bernoulli(exp(-f(x))) for an increasing ``f`` (Fractions, values in [0, 1]) of the lazy
    uniform ``x``, continuing the series from ``K`` and ``V``; rational arithmetic."""
    while True:
        V = V or _Lazy(int(rng.integers(0, 1 << 32)), 32, rng)
        while True:  # Bernoulli(a/K): is V K < f(x)?
            if V.hi * K <= f(x.lo):
                yes = True
                break
            if V.lo * K >= f(x.hi):
                yes = False
                break
            x.refine()
            V.refine()
        if not yes:
            return K % 2 == 1
        K, V = K + 1, None


def _slow_less(f, x: _Lazy, g, y: _Lazy) -> bool:
    """``f(x) < g(y)`` exactly, for increasing ``f`` and ``g`` of the lazy uniforms x and y."""
    while True:
        if f(x.hi) <= g(y.lo):
            return True
        if f(x.lo) >= g(y.hi):
            return False
        x.refine()
        y.refine()


def _truncated_exponential(A1, rng):
    """``u`` in [0, 1) with density proportional to ``exp(-A1 u)``, one for each ``A1`` (exact
    doubles, at most 1): ``u`` uniform, kept with probability ``exp(-A1 u)``, until kept. Returns
    ``u`` as 52-bit integers and the few the exact path refined, as ``_Lazy`` by position."""
    u, lazy, todo = None, {}, None
    while todo is None or todo.size:
        first = todo is None  # the first round runs on all of them: no gathers
        k = _uniform_bits(rng, A1.size if first else todo.size, _THETA_BITS)
        a = A1 if first else A1[todo]
        yes, pending, K, V = _bernoulli_exp_series(*_interval(lambda x: a * x, k), rng)
        for i in _where(pending).tolist():  # not settled by the bounds: exactly
            x, a_i = _Lazy(int(k[i]), _THETA_BITS, rng), Fraction(float(a[i]))
            yes[i] = _slow_bernoulli_exp(lambda t: a_i * t, x, rng, K=int(K[i]),
                                         V=_Lazy(int(V[i]), _V_BITS, rng))
            if yes[i]:
                lazy[i if first else int(todo[i])] = x
        if first:
            if np.count_nonzero(yes) == yes.size:
                return k, lazy
            u, todo = np.where(yes, k, np.uint64(0)), _where(~yes)
        else:
            u[todo[yes]] = k[yes]
            todo = todo[~yes]
    return u, lazy


def _cap_accept(kind: str, cell, theta_int, rng, lazy, positions):
    """Whether each cap proposal (cell, uniform 52-bit theta) is kept: with probability
    ``(exp(-A(theta)) - exp(-A(1))) / (1 - exp(-A(1)))``, the share of the cap's box (heights
    ``exp(-A(1))`` to 1, relative to the cell's top) under the density at theta.

    A uniform height in the box is ``exp(-s)`` with ``s`` of density proportional to ``exp(-s)``
    on [0, A(1)]: ``s = A(1) u``, ``u`` a truncated exponential; it lies under the density iff
    ``A(theta) < s``. Thetas the exact path refines are kept in ``lazy`` by position.
    """
    c_f = cell.astype(np.float64)
    # A(1), exact: w, or (2 c + 1) w^2/2
    A1 = np.full(c_f.size, _W) if kind == "exp" else (2.0 * c_f + 1.0) * (_W * _W / 2)
    u, u_lazy = _truncated_exponential(A1, rng)
    return _cap_decide(kind, cell, theta_int, A1, u, u_lazy, rng, lazy, positions)


def _cap_decide(kind: str, cell, theta_int, A1, u, u_lazy, rng, lazy, positions):
    """``A(theta) < A(1) u`` for each cap proposal, given its ``u`` (52-bit integers, and those
    the exact path refined in ``u_lazy``): by float bounds, else exactly."""
    c_f = cell.astype(np.float64)
    a_lo, a_hi = _interval(lambda x: _A(kind, c_f, x, _W), theta_int)
    s_lo, s_hi = _interval(lambda x: A1 * x, u)
    kept = a_hi <= s_lo                                   # A(theta) < A(1) u surely
    for j in _where(~kept & (a_lo < s_hi)).tolist():  # not settled by the bounds: exactly
        c, A1_j = int(cell[j]), Fraction(float(A1[j]))
        theta = lazy.setdefault(int(positions[j]), _Lazy(int(theta_int[j]), _THETA_BITS, rng))
        x = u_lazy.get(j) or _Lazy(int(u[j]), _THETA_BITS, rng)
        kept[j] = _slow_less(lambda t: _A(kind, c, t, _W_EXACT), theta, lambda t: A1_j * t, x)
    return kept


# ---------------------------------------------------------------- exact slow paths
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
    offset, n = Fraction(0), _EXP.n_cells
    while True:
        seg = int(_draw_segments(_EXP, _raw(rng, 1), rng)[0])
        if seg == _EXP.tail:
            offset += _EXP.length
            continue
        theta = _Lazy(int(_uniform_bits(rng, 1, _THETA_BITS)[0]), _THETA_BITS, rng)
        lazy = {0: theta}  # (the cap's exact path refines this theta)
        if seg < n or _cap_accept("exp", np.array([seg - n]),
                                  np.array([theta.value], dtype=np.uint64), rng, lazy,
                                  np.array([0]))[0]:
            return offset + (seg % n) * _W_EXACT, theta


def _slow_gaussian_tail(S: Fraction, rng):
    """One proposal from the tail segment: ``Y = L + E/L``, ``E`` exponential, has the envelope's
    density ``exp(-L^2/2 - L (y - L))`` on ``[L, inf)`` and is accepted with probability
    ``exp(-(E/L)**2 / 2)``, the half-normal's density over it. Returns ``round(S Y)``, or None
    when rejected: like a rejected cap, the draw then starts again from the table (the table gives
    the tail the envelope's mass, so a rejection must not be retried within the tail)."""
    L, w = _HALF_NORMAL.length, _W_EXACT
    offset, theta = _slow_exponential(rng)

    def A(t):  # (E/L)^2/2 with E = offset + w t
        return ((offset + w * t) / L) ** 2 / 2

    parts = max(1, math.ceil(A(Fraction(1))))  # split exp(-A) into factors exp(-A/parts), each <= 1
    if all(_slow_bernoulli_exp(lambda t: A(t) / parts, theta, rng) for _ in range(parts)):
        return _slow_round(S, L + offset / L, w / L, theta)
    return None


# ---------------------------------------------------------------- the two paths
def _round(x, Sw, bits):
    """``(r, unsure)``: ``r = floor(x + 1/2)`` for ``x`` the computed ``S w (c + theta0)``, where
    the true value lies anywhere in ``[S w (c + theta0), S w (c + theta0 + 2**-bits))``. ``r`` is
    its rounding wherever ``unsure`` is False: x + 1/2 minus its floor (exact, by Sterbenz) keeps a
    distance ``tol`` from 0 and 1, and ``tol`` bounds the interval's width and every rounding error
    (about three of relative 2**-53) twice over."""
    tol = Sw * 2.0 ** (1 - bits) + (x + 1.0) * _ROUND_TOL
    y = x + 0.5
    r = np.floor(y)
    y -= r
    return r, (y <= tol) | (y >= 1.0 - tol)


_THETA_MASK = np.uint64(((1 << _FAST_BITS) - 1) << (52 - _FAST_BITS))  # bits 1..47 of U, shifted 4
_ONE = np.uint64(0x3FF0000000000000)                                   # the bits of 1.0


def _fast_position(table: _Table, U):
    """``(c + theta0, c - 1)`` from each word: ``c - 1`` from the fast guide (-2 outside the
    rectangles), ``1 + theta0`` assembled exactly from bits 1..47 of U, and one rounding."""
    c1 = table.fast[(U >> np.uint64(64 - _GUIDE_BITS)).view(np.int64)]
    bits = U << np.uint64(52 - _FAST_BITS - 1)
    bits &= _THETA_MASK
    bits |= _ONE
    x = bits.view(np.float64)
    x += c1
    return x, c1


def _fast(table: _Table, Sw, U, tol: float, out):
    """The fast path on a chunk of words ``U``, into ``out``: ``sign round(S w (c + theta))``.

    Returns the positions it leaves: words whose bucket is not inside a rectangle (their ``out``
    is meaningless), and roundings the chunk-wide bound ``tol`` (as in :func:`_round`, at the
    largest value) does not settle.
    """
    x, c1 = _fast_position(table, U)
    x *= Sw
    x += 0.5
    r = np.floor(x, out=out)
    x -= r                      # exact (Sterbenz)
    x -= 0.5                    # exact: x is a multiple of 2**-53
    np.abs(x, out=x)
    signed = r.view(np.uint64)
    signed |= U << np.uint64(63)  # bit 0 of U is the sign
    return ((x >= 0.5 - tol) | (c1 < -1.5)).nonzero()[0]


def _fast_exact(table: _Table, Sw, U, idx, out, rng):
    """Settle the fast-path values at positions ``idx`` (words ``U``) that the chunk-wide bound
    left open: with each value's own bound (:func:`_round`), then exactly."""
    x, _ = _fast_position(table, U)
    Sw_idx = Sw if Sw.ndim == 0 else Sw[idx]
    x *= Sw_idx
    r, unsure = _round(x, Sw_idx, _FAST_BITS)
    out[idx] = np.where(U & np.uint64(1), -r, r)
    for i, u in zip(idx[unsure].tolist(), U[unsure].tolist()):
        c = int(table.fast[u >> (64 - _GUIDE_BITS)]) + 1
        theta = _Lazy((u >> 1) & ((1 << _FAST_BITS) - 1), _FAST_BITS, rng)
        magnitude = _slow_round(_scale(Sw, i), c * _W_EXACT, _W_EXACT, theta)
        out[i] = -magnitude if u & 1 else magnitude


def _full(table: _Table, Sw, U, base, rng):
    """The full method for the words ``U``: ``(values, done)``.

    Exact inversion to a segment, a fresh word for a uniform theta of 52 bits and the sign, a
    cap's acceptance, the rounding. ``base`` (exponential only) counts the table lengths already
    passed by restarts at the edge and is updated in place; values not ``done`` (a rejected cap,
    or a restart) must be drawn again from fresh words.
    """
    n = table.n_cells
    seg = _draw_segments(table, U, rng)
    T = _raw(rng, U.size)
    theta_int = T >> np.uint64(64 - _THETA_BITS)          # bit 0 of T is the sign
    beyond = seg >= n                                     # a cap or the tail
    if np.count_nonzero(beyond):  # (count_nonzero: far cheaper than any() on small arrays)
        cell = seg % n
        tail = seg == table.tail
        done = ~tail
        caps = _where(beyond & done)
        lazy = {}
        if caps.size:
            done[caps] = _cap_accept(table.kind, cell[caps], theta_int[caps], rng, lazy, caps)
    else:  # rectangles only: kept, nothing to accept
        cell, tail, done, lazy = seg, None, np.ones(seg.size, dtype=bool), {}
    x = (base + cell).astype(np.float64)
    x += theta_int.astype(np.float64) * 2.0 ** -_THETA_BITS
    x *= Sw
    r, unsure = _round(x, Sw, _THETA_BITS)
    for i in _where(unsure & done).tolist():
        theta = lazy.get(i) or _Lazy(int(theta_int[i]), _THETA_BITS, rng)
        r[i] = _slow_round(_scale(Sw, i), int(base[i] + cell[i]) * _W_EXACT, _W_EXACT, theta)
    if tail is not None and np.count_nonzero(tail):
        if table is _EXP:  # memoryless: Y - L given Y >= L is Exp(1) again, drawn afresh
            base[tail] += n
        else:
            for i in _where(tail).tolist():  # probability about 1e-15 each
                value = _slow_gaussian_tail(_scale(Sw, i), rng)
                if value is not None:
                    r[i], done[i] = value, True
    return np.where(T & np.uint64(1), -r, r), done


def _scale(Sw, i) -> Fraction:
    """The scale ``S`` of value ``i`` as an exact fraction (``Sw = S w``, w a power of two)."""
    return Fraction(float(Sw if Sw.ndim == 0 else Sw[i])) * (1 << _W_LOG2)


def _rounded(table: _Table, S, shape, rng) -> np.ndarray:
    """``sign * round(S * Y)``, ``Y`` of density proportional to exp(-g) on [0, inf), in float64.

    ``S`` is a scalar or an array broadcasting to ``shape``. The fast path runs chunk by chunk;
    the values it leaves (unsettled roundings, words outside a rectangle) are finished after it.
    With the compiled loops (:func:`compiled_kernel`) the same method runs value by value.
    """
    size = math.prod(shape)
    kernel = compiled_kernel()
    if kernel is not None and not np.ndim(S):  # one scale: a 1-element array for the loops
        Sw = np.array([S * _W], dtype=np.float64)               # exact: w is a power of two
        return _rounded_compiled(kernel, table, Sw, size, rng).reshape(shape)
    Sw = np.asarray(S, dtype=np.float64) * _W
    if Sw.ndim:
        Sw = Sw.ravel() if Sw.shape == shape else np.broadcast_to(Sw, shape).ravel()
    if kernel is not None:
        return _rounded_compiled(kernel, table, Sw, size, rng).reshape(shape)
    Sw_max = float(Sw.max(initial=0.0)) if Sw.ndim else float(Sw)
    # _round's tolerance at the largest value, c + theta <= n_cells
    tol = Sw_max * 2.0 ** (1 - _FAST_BITS) + (Sw_max * (table.n_cells + 1) + 1.0) * _ROUND_TOL
    out, left = np.empty(size), []
    for start in range(0, size, _CHUNK):
        U = _raw(rng, min(_CHUNK, size - start))
        chunk = slice(start, start + U.size)
        i = _fast(table, Sw if Sw.ndim == 0 else Sw[chunk], U, tol, out[chunk])
        if i.size:
            left.append((i + start, U[i]))
    if left:
        idx, U = left[0] if len(left) == 1 else (np.concatenate(a) for a in zip(*left))
        inside = table.fast[(U >> np.uint64(64 - _GUIDE_BITS)).view(np.int64)] > -1.5
        if np.count_nonzero(inside):
            _fast_exact(table, Sw, U[inside], idx[inside], out, rng)
            idx, U = idx[~inside], U[~inside]
        _finish(table, Sw, U, idx, out, rng)
    return out.reshape(shape)


def _finish(table: _Table, Sw, U, idx, out, rng, base=None):
    """The full path for the words ``U`` of positions ``idx``, and again (fresh words) for the
    values it rejects. ``base``: table lengths already passed (exponential restarts), or 0."""
    base = np.zeros(idx.size, dtype=np.int64) if base is None else base
    while idx.size:
        values, done = _full(table, Sw if Sw.ndim == 0 else Sw[idx], U, base, rng)
        if np.count_nonzero(done) == done.size:
            out[idx] = values
            return
        out[idx[done]] = values[done]
        idx, base = idx[~done], base[~done]
        U = _raw(rng, idx.size)


# ---------------------------------------------------------------- the compiled loops
_KERNEL = []  # [the compiled module, or None], filled on first use


def compiled_kernel():
    """:mod:`._sampler_kernel`, compiled, or None without numba (or where it fails to compile:
    the NumPy path is the same method). Compiled once per process on tiny public arrays."""
    if not _KERNEL:
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                import dptensor.mechanisms._sampler_kernel as kernel  # (not the package: no circle)
                rng, out = np.random.default_rng(0), np.empty(1)
                _rounded_compiled(kernel, _EXP, np.ones(1), 1, rng)
                top = np.full(1, _TWO64 - 1, dtype=np.uint64)  # the last word: the tail
                _leftovers_compiled(kernel, _EXP, np.ones(1), np.zeros(1, np.int64), top, out, rng)
                # the chunked path's own call (a release over one chunk): compiled here too, not
                # at the first large release, after its spend
                spare = np.empty((2, 1), dtype=np.int64)
                kernel.fast_path(top, _EXP.fast_cells, np.ones(1), _ROUND_TOL, out, 0, spare[0],
                                 spare[1])
                kernel.grid_add(np.zeros(1), 1.0, out, 2.0)
        except Exception:  # ImportError, or a numba that cannot compile here
            kernel = None
        _KERNEL.append(kernel)
    return _KERNEL[0]


def _rounded_compiled(kernel, table: _Table, Sw, size: int, rng) -> np.ndarray:
    """The fast path over ``size`` words, a chunk at a time (the NumPy path's values, bit for
    bit), the full method for the words outside the rectangles on the fresh words that follow
    them in the stream, then the exact roundings the fast path left. A release that fits in one
    chunk takes its words and the spare ones in one draw and one compiled call."""
    if not (Sw.ndim == 1 and Sw.flags.c_contiguous and Sw.dtype == np.float64):
        Sw = np.ascontiguousarray(Sw, dtype=np.float64).reshape(-1)
    out, spare = np.empty(size), np.empty((2, min(size, _CHUNK)), dtype=np.int64)
    n_spare = int(size * _SPARE_SHARE) + _WORDS_EXTRA
    state, at = np.zeros(8, dtype=np.uint64), (0, kernel.DONE, 0)
    if size <= _CHUNK:
        words = _raw(rng, size + n_spare)
        U, buf = words[:size], words[size:]
        n_left, n_unsure, *at = kernel.sample(U, buf, table.fast_cells, table.bounds,
                                              table.guide_cells, table.n_cells,
                                              table.kind == "half_normal", Sw, _MARGIN,
                                              _ROUND_TOL, out, spare[0], spare[1], state)
        left, unsure = spare[0, :n_left], spare[1, :n_unsure]
        left = (left, U[left]) if at[1] != kernel.DONE else None  # (gathers only if needed)
        unsure = (unsure, U[unsure]) if n_unsure else None
    else:
        found = []
        for start in range(0, size, _CHUNK):
            U = _raw(rng, min(_CHUNK, size - start))
            n_left, n_unsure = kernel.fast_path(U, table.fast_cells, Sw, _ROUND_TOL, out, start,
                                                spare[0], spare[1])
            found.append([(i + start, U[i]) for i in (spare[0, :n_left], spare[1, :n_unsure])])
        left, unsure = ([np.concatenate(a) for a in zip(*pairs)] for pairs in zip(*found))
        buf, at = _raw(rng, n_spare), (0, None if left[0].size else kernel.DONE, 0)
    if at[1] != kernel.DONE:
        _leftovers_compiled(kernel, table, Sw, *left, out, rng, buf, state, at)
    if unsure is not None:
        _exact_roundings(table, Sw, *unsure, out, rng)
    return out


def _exact_roundings(table: _Table, Sw, positions, U, out, rng):
    """The roundings the compiled fast path left open, as :func:`_fast_exact` settles them:
    exactly, drawing bits of theta."""
    for i, u in zip(positions.tolist(), U.tolist()):
        c = int(table.fast[u >> (64 - _GUIDE_BITS)]) + 1
        theta = _Lazy((u >> 1) & ((1 << _FAST_BITS) - 1), _FAST_BITS, rng)
        magnitude = _slow_round(_scale(Sw, 0 if Sw.size == 1 else i), c * _W_EXACT, _W_EXACT,
                                theta)
        out[i] = -magnitude if u & 1 else magnitude


#: Spare words drawn after a release's words, per value (about 0.08 are used: a value in 40
#: goes to the full method, which reads about 3 words), and the fresh words drawn per value
#: still to go when they run out; both with some more.
_SPARE_SHARE, _WORDS_PER_LEFTOVER, _WORDS_EXTRA = 0.125, 8, 64


def _leftovers_compiled(kernel, table: _Table, Sw, idx, U, out, rng, buf=None, state=None,
                        at=None):
    """The compiled full method for positions ``idx`` (first words ``U``), on the fresh words
    ``buf`` (drawn here if None), extended whenever a value reaches their end, and the values it
    hands back finished by :func:`_hand_back`. ``at``: where a call of ``kernel.sample`` stopped
    (``(j, code, p)``, with its ``state``), to go on from."""
    if state is None:
        state = np.zeros(8, dtype=np.uint64)
    if buf is None:
        buf = _raw(rng, _WORDS_PER_LEFTOVER * idx.size + _WORDS_EXTRA)
    half_normal = table.kind == "half_normal"
    j, code, p = at if at is not None else (0, None, 0)
    while True:
        if code is None:
            j, code, p = kernel.leftovers(table.bounds, table.guide_cells, table.n_cells,
                                          half_normal, Sw, idx, U, j, buf, p, _MARGIN,
                                          _ROUND_TOL, out, state)
        if code == kernel.DONE:
            return
        if code == kernel.NEED:  # value j replays from its first word on the longer buffer
            more = _raw(rng, _WORDS_PER_LEFTOVER * (idx.size - j) + _WORDS_EXTRA)
            buf, p, code = np.concatenate((buf[p:], more)), 0, None
            continue
        i = int(idx[j])
        out[i] = _hand_back(kernel, table, code, state, Sw[0 if Sw.size == 1 else i], rng)
        j, code = j + 1, None


def _hand_back(kernel, table: _Table, code, state, Sw, rng) -> float:
    """Finish exactly a value the compiled loop could not settle, from the state it reached (see
    :func:`._sampler_kernel._one`); a proposal rejected here is followed by fresh ones."""
    base = np.array([int(state[5])])
    if code == kernel.TIE:  # the NumPy full path on the tied word, from its inversion
        values, done = _full(table, Sw, np.array([state[6]], dtype=np.uint64), base, rng)
        return float(values[0]) if done[0] else _redraw(table, Sw, base, rng)
    if code == kernel.TAIL:
        sign = int(_raw(rng, 1)[0]) & 1
        value = _slow_gaussian_tail(_scale(Sw, 0), rng)
        if value is None:
            return _redraw(table, Sw, base, rng)
        return float(-value if sign else value)
    T, cell = int(state[0]), int(state[4])
    theta = _Lazy(T >> (64 - _THETA_BITS), _THETA_BITS, rng)
    if code != kernel.ROUND and not _cap_continue(table.kind, cell, theta, code == kernel.BERN,
                                                  state, rng):
        return _redraw(table, Sw, base, rng)
    magnitude = _slow_round(_scale(Sw, 0), (int(base[0]) + cell) * _W_EXACT, _W_EXACT, theta)
    return float(-magnitude if T & 1 else magnitude)


def _cap_continue(kind: str, cell: int, theta: _Lazy, in_series: bool, state, rng) -> bool:
    """A cap's acceptance from where the compiled loop stopped: inside the Bernoulli series of
    its ``u`` (``in_series``: counter and uniform in ``state``), or at ``A(theta) < A(1) u``."""
    A1 = _W if kind == "exp" else (2.0 * cell + 1.0) * (_W * _W / 2)
    u, u_lazy = int(state[1]), {}
    if in_series:
        x, a = _Lazy(u, _THETA_BITS, rng), Fraction(A1)
        if _slow_bernoulli_exp(lambda t: a * t, x, rng, K=int(state[2]),
                               V=_Lazy(int(state[3]), _V_BITS, rng)):
            u_lazy = {0: x}
        else:  # u rejected: the truncated exponential's next round, afresh
            k, u_lazy = _truncated_exponential(np.array([A1]), rng)
            u = int(k[0])
    lazy = {0: theta}
    return bool(_cap_decide(kind, np.array([cell]), np.array([theta.value], dtype=np.uint64),
                            np.array([A1]), np.array([u], dtype=np.uint64), u_lazy, rng, lazy,
                            np.array([0]))[0])


def _redraw(table: _Table, Sw, base, rng) -> float:
    """A value whose proposal was rejected: the NumPy full path on fresh words."""
    out = np.empty(1)
    _finish(table, Sw, _raw(rng, 1), np.array([0]), out, rng, base=base)
    return float(out[0])


def _check_scales(S, size):
    if isinstance(S, float) and isinstance(size, tuple):  # one scale (np.float64 too): no arrays
        if not 0.0 < S < math.inf:
            raise ValueError("scales S must be > 0 and finite")
        return np.float64(S), size
    S = np.asarray(S, dtype=np.float64)
    shape = S.shape if size is None else ((size,) if np.ndim(size) == 0 else tuple(size))
    if not S.ndim:  # one scale (the common case: no reductions)
        if not 0.0 < float(S) < np.inf:
            raise ValueError("scales S must be > 0 and finite")
        return S, shape
    if S.shape != shape and np.broadcast_shapes(S.shape, shape) != shape:
        raise ValueError(f"scales of shape {S.shape} do not broadcast to {shape}")
    if S.size and not (S.min() > 0 and S.max() < np.inf):
        raise ValueError("scales S must be > 0 and finite")
    return S, shape


def rounded_laplace(S, rng: np.random.Generator, size=None) -> np.ndarray:
    """Integers distributed exactly as ``round(S L)``, ``L`` standard Laplace, independent.

    ``S``: positive scales, an array (one value each, or broadcasting to ``size``) or a scalar
    with ``size``. Returned as float64, which holds them exactly (they stay far below 2**53).
    """
    S, shape = _check_scales(S, size)
    return _rounded(_EXP, S, shape, rng)


def rounded_gaussian(S, rng: np.random.Generator, size=None) -> np.ndarray:
    """Integers distributed exactly as ``round(S N)``, ``N`` standard normal, independent."""
    S, shape = _check_scales(S, size)
    return _rounded(_HALF_NORMAL, S, shape, rng)


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
