"""Compiled loops of the exact samplers (numba, the ``fast`` extra): their method, value by value.

:mod:`dptensor.mechanisms.samplers` draws with whole-array NumPy steps; on a release of a thousand
values those are a hundred calls on arrays of a dozen elements, and on a million values a dozen
passes over memory. These loops do the same decisions in one pass. Imported only when a sampler
first runs (numba's import is slow) and only where numba is installed; without it, or where it
fails to compile, the NumPy path is used.

``fast_path`` settles each word of the first draw exactly as the NumPy fast path does (the same
cell, the same 47 bits of theta, the same rounding and tolerance: bit for bit the same values).
``leftovers`` runs the full method (exact inversion, a cap's acceptance, the rounding) on the few
words it leaves, one value after the other, reading fresh words from a buffer in order: each
value consumes a run of the buffer, and a value that meets the buffer's end is replayed from its
first word once the buffer is extended (the same words, so the same decisions). Whatever the
bounds cannot settle (a tie with a table boundary, a comparison or a rounding too close to call,
the Gaussian's tail beyond the table) is handed back, with the state reached, to the exact
rational paths in Python, which finish that value.

Nothing here holds a generator: the words come in as arrays drawn by the caller.
"""
from __future__ import annotations

import numba
import numpy as np

_JIT = numba.njit(cache=True, nogil=True)
_INLINE = numba.njit(cache=True, nogil=True, inline="always")  # helpers of the loops

#: Return codes of :func:`leftovers`: all done, buffer exhausted, and the hand-backs.
DONE, NEED, TIE, BERN, LESS, ROUND, TAIL = range(7)

_SHIFT_GUIDE = np.uint64(48)      # 64 - guide bits: the bucket of a word
_SHIFT_THETA = np.uint64(12)      # 64 - 52: theta's bits on the full path
_SHIFT_V = np.uint64(11)          # 64 - 53: a Bernoulli uniform
_ONE = np.uint64(1)
_ZERO = np.uint64(0)
_MASK47 = np.uint64((1 << 47) - 1)
_W = 2.0 ** -6


@_JIT
def fast_path(U, fast, Sw, round_tol, out, start, left, unsure):  # pragma: no cover (compiled)
    """The fast path on the words ``U`` of positions ``start + i``, into ``out``:
    ``(n_left, n_unsure)``.

    ``left[:n_left]``: the ``i`` whose bucket is not inside a rectangle (``out`` meaningless);
    ``unsure[:n_unsure]``: roundings the per-value tolerance does not settle (``out`` holds the
    float guess; the exact path replaces it). ``Sw``: one scale, or one per position.
    """
    n_left = n_unsure = 0
    one_scale = Sw.size == 1
    for i in range(U.size):
        u = U[i]
        c1 = np.float64(fast[np.int64(u >> _SHIFT_GUIDE)])  # c - 1, or -2 outside
        if c1 < -1.5:
            left[n_left] = i
            n_left += 1
            continue
        s = Sw[0] if one_scale else Sw[start + i]
        theta = np.float64((u >> _ONE) & _MASK47) * 2.0 ** -47
        x = ((1.0 + theta) + c1) * s       # 1 + theta exact; one rounding, as the NumPy path
        tol = s * 2.0 ** -46 + (x + 1.0) * round_tol
        y = x + 0.5
        r = np.floor(y)
        y -= r
        if y <= tol or y >= 1.0 - tol:
            unsure[n_unsure] = i
            n_unsure += 1
        out[start + i] = r * (1.0 - 2.0 * np.float64(u & _ONE))  # the sign, without a branch
    return n_left, n_unsure


@_JIT
def grid_add(value, gamma, noise, limit):  # pragma: no cover (compiled)
    """``noise = (rint(value / gamma) + noise) * gamma`` in one pass; False (nothing trusted) if
    a value is not finite or at ``limit`` or beyond (``limit`` = 2**1000 grid steps). A zero
    integer is +0.0 (``rint`` keeps a small negative value's sign: the release must not)."""
    ok = True
    for i in range(value.size):
        v = value[i]
        ok &= v < limit and v > -limit  # nan fails too
        noise[i] = ((np.rint(v / gamma) + 0.0) + noise[i]) * gamma  # (no fastmath: kept)
    return ok


@_INLINE
def _segment(bounds, guide, u):  # pragma: no cover (compiled)
    """The number of table boundaries at or below ``u``: its segment, between the guide's counts
    at the first words of ``u``'s bucket and of the next (by bisection: where the density is
    low, one bucket holds hundreds of boundaries)."""
    b = np.int64(u >> _SHIFT_GUIDE)
    lo = np.int64(guide[b])
    hi = np.int64(guide[b + 1]) if b + 1 < guide.size else np.int64(bounds.size)
    while lo < hi:
        mid = (lo + hi) >> 1
        if bounds[mid] <= u:
            lo = mid + 1
        else:
            hi = mid
    return lo


@_INLINE
def _a_bounds(half_normal, cell, k, margin):  # pragma: no cover (compiled)
    """Bounds on ``A(theta)`` for theta in ``[k, k + 1) 2**-52``, as the NumPy path's _interval."""
    t = np.float64(k) * 2.0 ** -52
    t1 = t + 2.0 ** -52
    if half_normal:
        c2 = 2.0 * cell
        return (t * (c2 + t) * (_W * _W / 2)) * (1 - margin), \
            (t1 * (c2 + t1) * (_W * _W / 2)) * (1 + margin)
    return (t * _W) * (1 - margin), (t1 * _W) * (1 + margin)


@_INLINE
def _bernoulli(a_lo, a_hi, buf, p, margin):  # pragma: no cover (compiled)
    """Bernoulli(exp(-a)), a in [a_lo, a_hi]: CKS's series as the NumPy path's, reading words from
    ``buf[p:]``. Returns ``(got, p, K, V)``: ``got`` 1 or 0, -1 (buffer exhausted) or -2
    (undecided, with the counter ``K`` and the uniform ``V``)."""
    K = 1
    while True:
        if p >= buf.size:
            return -1, p, K, _ZERO
        V = buf[p] >> _SHIFT_V
        p += 1
        v0 = np.float64(V) * 2.0 ** -53
        if K == 1:
            yes, no = v0 + 2.0 ** -53 <= a_lo, v0 >= a_hi
        else:
            yes = (v0 + 2.0 ** -53) * K * (1 + margin) <= a_lo
            no = v0 * K * (1 - margin) >= a_hi
        if yes:
            K += 1
        elif no:
            return K % 2, p, K, V
        else:
            return -2, p, K, V


@_INLINE
def _cap(half_normal, cell, theta_int, buf, p, margin):  # pragma: no cover (compiled)
    """A cap proposal's acceptance (the NumPy path's _cap_accept): ``(got, p, u, K, V)``, ``got``
    1 kept, 0 rejected, or a code: NEED, BERN (the series' ``K`` and ``V`` for the ``u``
    proposed), LESS (``A(theta) < A(1) u`` too close to call)."""
    A1 = (2.0 * cell + 1.0) * (_W * _W / 2) if half_normal else _W   # A(1), exact
    while True:  # u, density proportional to exp(-A1 u): uniform, kept w.p. exp(-A1 u)
        if p >= buf.size:
            return -NEED, p, _ZERO, 0, _ZERO
        k = buf[p] >> _SHIFT_THETA
        p += 1
        t = np.float64(k) * 2.0 ** -52
        got, p, K, V = _bernoulli((A1 * t) * (1 - margin), (A1 * (t + 2.0 ** -52)) * (1 + margin),
                                  buf, p, margin)
        if got == -1:
            return -NEED, p, k, K, V
        if got == -2:
            return -BERN, p, k, K, V
        if got == 1:
            break
    a_lo, a_hi = _a_bounds(half_normal, cell, theta_int, margin)
    s_lo, s_hi = (A1 * t) * (1 - margin), (A1 * (t + 2.0 ** -52)) * (1 + margin)
    if a_hi <= s_lo:
        return 1, p, k, K, V
    return (-LESS if a_lo < s_hi else 0), p, k, K, V


@_INLINE
def _one(bounds, guide, n_cells, half_normal, s, u, buf, p, margin, round_tol, st):
    # pragma: no cover (compiled)
    """The full method for one value from its first word ``u``: ``(code, value, p)``.

    A hand-back leaves its state in ``st``: [0] the sign word T, [1] u, [2] K, [3] V, [4] the
    cell, [5] the table lengths passed (exponential restarts), [6] the word of a tie.
    """
    base = 0
    while True:
        seg = _segment(bounds, guide, u)
        if seg > 0 and u == bounds[seg - 1]:  # u equals its segment's lower boundary: a tie
            st[5], st[6] = base, u
            return TIE, 0.0, p
        if seg == 2 * n_cells:  # beyond the table
            if half_normal:
                st[5] = base
                return TAIL, 0.0, p
            base += n_cells  # memoryless: Exp(1) again, one table length on
        else:
            if p >= buf.size:
                return NEED, 0.0, p
            T = buf[p]
            p += 1
            theta_int = T >> _SHIFT_THETA
            cell = seg if seg < n_cells else seg - n_cells
            kept = 1
            if seg >= n_cells:
                kept, p, k, K, V = _cap(half_normal, cell, theta_int, buf, p, margin)
                if kept < 0:
                    st[0], st[1], st[2], st[3], st[4], st[5] = T, k, K, V, cell, base
                    return -kept, 0.0, p
            if kept == 1:
                x = np.float64(base + cell) + np.float64(theta_int) * 2.0 ** -52
                x *= s
                tol = s * 2.0 ** -51 + (x + 1.0) * round_tol
                y = x + 0.5
                r = np.floor(y)
                y -= r
                if y <= tol or y >= 1.0 - tol:
                    st[0], st[4], st[5] = T, cell, base
                    return ROUND, 0.0, p
                return DONE, r * (1.0 - 2.0 * np.float64(T & _ONE)), p
        if p >= buf.size:  # rejected, or restarted at the edge: a fresh word
            return NEED, 0.0, p
        u = buf[p]
        p += 1


@_JIT
def leftovers(bounds, guide, n_cells, half_normal, Sw, idx, U, j, buf, p, margin, round_tol,
              out, st):  # pragma: no cover (compiled)
    """The full method for the values ``idx[j:]`` (first words ``U[j:]``), in order, from the
    words ``buf[p:]``, into ``out``: ``(j, code, p)``, ``code`` DONE, or the hand-back or NEED of
    value ``j`` (for NEED, ``p`` is that value's first buffer word, to replay it on a longer
    buffer)."""
    one_scale = Sw.size == 1
    while j < idx.size:
        i = idx[j]
        code, value, q = _one(bounds, guide, n_cells, half_normal, Sw[0] if one_scale else Sw[i],
                              U[j], buf, p, margin, round_tol, st)
        if code != DONE:
            return j, code, p if code == NEED else q
        out[i] = value
        j += 1
        p = q
    return j, DONE, p


@_JIT
def sample(U, buf, fast, bounds, guide, n_cells, half_normal, Sw, margin, round_tol, out, left,
           unsure, st):  # pragma: no cover (compiled)
    """:func:`fast_path` on all the words ``U``, then :func:`leftovers` on the values it leaves,
    from the fresh words ``buf``, in one call (a release of a thousand values costs a few calls):
    ``(n_left, n_unsure, j, code, p)``, as those two return them."""
    n_left, n_unsure = fast_path(U, fast, Sw, round_tol, out, 0, left, unsure)
    first = np.empty(n_left, dtype=np.uint64)
    for j in range(n_left):
        first[j] = U[left[j]]
    j, code, p = leftovers(bounds, guide, n_cells, half_normal, Sw, left[:n_left], first, 0, buf,
                           0, margin, round_tol, out, st)
    return n_left, n_unsure, j, code, p
