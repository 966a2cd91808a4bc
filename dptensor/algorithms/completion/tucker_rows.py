"""One mode's rows of the order-3 Tucker sweep (:class:`~.tucker.TuckerSweep3`) by compiled
loops: from the mask's and the values' contractions ``Q`` and ``V`` (summed against the other two
modes' features), every row's Gram and right-hand side with its bias (:func:`_systems_kernel`),
their ridge solutions and the traces of the ridged Grams' inverses (:func:`_solve_kernel`, for the
effective degrees of freedom), the solved mode's features (:func:`_features_kernel`); and the
core's system with the offsets' sum of squares (:func:`_core_kernel`, solved by the same loop).

At rank 3 a row's system is 4 x 4: NumPy's stacked products, fancy indexing, ``solve`` and ``inv``
spent about 0.3 ms per mode at 60^3 on their calls, the loops about 20 microseconds. With numba
installed (the ``fast`` extra) and a row bias (the non-private fit). Without them, or where an LU
meets an exact zero pivot (where ``np.linalg.solve`` raises and the NumPy path falls back on the
pseudo-inverse), the caller takes :meth:`~.tucker.TuckerSweep3.normal_equations` and the stacked
solve: the same sums and solutions to rounding (each sum has the same terms, added in another
order; the LU pivots as LAPACK's), the same features bit for bit (the same products).
"""
from __future__ import annotations

import functools

import numpy as np

from ..compiled import compiled

__all__ = ["RowKernels", "row_kernels", "pair_table"]


def _systems_kernel(qb, qs, vb, vs, Gm, where, mu, counts, row_sums, Ca, ba, Cb, bb, G,
                    B):  # pragma: no cover (compiled)
    """Row ``i``'s Gram ``G[i]`` and right-hand side ``B[i]`` (:meth:`~.tucker.TuckerSweep3.
    normal_equations` with the bias): ``Q[i, f, g] = qb[i qs0 + f qs1 + g qs2]`` (``V`` alike:
    the contiguous products seen through their strides), the offsets of the other two modes
    through their pair counts with this one (``Ca``, ``Cb``: rows of this mode) and biases.

    The Kronecker Gram ``K[(a, b), (c, d)] = Q[pair(a, c), pair(b, d)]`` enters the sandwich
    ``Gm K Gm^T`` through its distinct entries, the pairs' block ``P`` of ``Q``: ``G[s, t] =
    sum_(alpha, beta) P[alpha, beta] W[s, t, alpha, beta]``, ``W`` summing ``Gm[s, (a, b)]
    Gm[t, (c, d)]`` over the ``(a, c, b, d)`` of each pair of pairs (once per call); ``where``
    from :func:`pair_table`."""
    r, rr = Gm.shape
    n_pairs = r * (r + 1) // 2
    W = np.zeros((r, r, n_pairs * n_pairs))
    at = np.empty(n_pairs * n_pairs, dtype=np.int64)  # P's entries' places in qb, less i qs0
    for a in range(r):
        for c in range(r):
            for b in range(r):
                for d in range(r):
                    pq = where[a, c] * n_pairs + where[b, d]
                    at[pq] = (2 * r + where[a, c]) * qs[1] + (2 * r + where[b, d]) * qs[2]
                    for s in range(r):
                        for t in range(r):
                            W[s, t, pq] += Gm[s, a * r + b] * Gm[t, c * r + d]
    z, w = np.empty(rr), np.empty(rr)
    P = np.empty(n_pairs * n_pairs)
    for i in range(G.shape[0]):
        o = i * qs[0]
        for a in range(r):
            for b in range(r):
                q = qb[o + a * qs[1] + b * qs[2]]
                off = qb[o + (r + a) * qs[1] + b * qs[2]] + qb[o + a * qs[1] + (r + b) * qs[2]]
                z[a * r + b] = q
                w[a * r + b] = vb[i * vs[0] + a * vs[1] + b * vs[2]] - mu * q - off
        for pq in range(n_pairs * n_pairs):
            P[pq] = qb[o + at[pq]]
        for s in range(r):
            for t in range(r):
                acc = 0.0
                for pq in range(n_pairs * n_pairs):
                    acc += P[pq] * W[s, t, pq]
                G[i, s, t] = acc
            zs = rs = 0.0
            for u in range(rr):
                zs += z[u] * Gm[s, u]
                rs += w[u] * Gm[s, u]
            G[i, s, r] = G[i, r, s] = zs
            B[i, s] = rs
        G[i, r, r] = counts[i]
        sa = sb = 0.0
        for j in range(Ca.shape[1]):
            sa += Ca[i, j] * ba[j]
        for j in range(Cb.shape[1]):
            sb += Cb[i, j] * bb[j]
        B[i, r] = row_sums[i] - (mu * counts[i] + sa + sb)


def _solve_kernel(G, B, lam, traces):  # pragma: no cover (compiled)
    """Every row's ``(G[i] + lam I) x = B[i]`` in place (``G[i]`` left ridged, ``B[i]`` the
    solution), by LU with partial pivoting on the first largest entry (as LAPACK's ``getrf``);
    with ``traces`` (one per row, else empty) the trace of each inverse. Returns the number of
    rows whose ridge may be lost in the Gram's rounding (``lam <= 1e-14 |trace G|``), or -1
    (the outputs partly written) at an exact zero pivot, where LAPACK reports it singular, and
    the effective degrees of freedom ``sum_i (p - lam trace_i)`` (0 without ``traces``)."""
    p = G.shape[1]
    inverse = len(traces) > 0
    cols = p + 1 if inverse else 1
    LU, X = np.empty((p, p)), np.empty((p, cols))  # X: the right-hand side (then the identity)
    lost, dof = 0, 0.0
    for i in range(G.shape[0]):
        trace = 0.0
        for j in range(p):
            G[i, j, j] += lam
            trace += G[i, j, j]
            X[j, 0] = B[i, j]
            for c in range(p):
                LU[j, c] = G[i, j, c]
                if inverse:
                    X[j, c + 1] = 1.0 if c == j else 0.0
        if lam <= 1e-14 * abs(trace):
            lost += 1
        for c in range(p):  # the row swaps applied to X as they are made
            piv = c
            for j in range(c + 1, p):
                if abs(LU[j, c]) > abs(LU[piv, c]):
                    piv = j
            if LU[piv, c] == 0.0:
                return -1, 0.0
            for j in range(p):
                LU[c, j], LU[piv, j] = LU[piv, j], LU[c, j]
            for j in range(cols):
                X[c, j], X[piv, j] = X[piv, j], X[c, j]
            inv = 1.0 / LU[c, c]
            for j in range(c + 1, p):
                LU[j, c] *= inv
                for k in range(c + 1, p):
                    LU[j, k] -= LU[j, c] * LU[c, k]
        for j in range(p):  # forward, then back substitution, every column at once
            for c in range(j):
                for col in range(cols):
                    X[j, col] -= LU[j, c] * X[c, col]
        for j in range(p - 1, -1, -1):
            for c in range(j + 1, p):
                for col in range(cols):
                    X[j, col] -= LU[j, c] * X[c, col]
            for col in range(cols):
                X[j, col] /= LU[j, j]
        tr = 0.0
        for j in range(p):
            B[i, j] = X[j, 0]
            if inverse:
                tr += X[j, j + 1]
        if inverse:
            traces[i] = tr
            dof += p - lam * tr
    return lost, dof


def _features_kernel(S, r, F):  # pragma: no cover (compiled)
    """``F[i] = [u, b u, u_a u_b (a <= b)]`` from the solutions ``S[i] = [u, b]``: the products
    :meth:`~.tucker.TuckerSweep3._features` forms, in its order."""
    for i in range(S.shape[0]):
        b = S[i, r]
        k = 2 * r
        for a in range(r):
            F[i, a] = S[i, a]
            F[i, r + a] = b * S[i, a]
            for c in range(a, r):
                F[i, k] = S[i, a] * S[i, c]
                k += 1


def _core_kernel(C, value, mu, yy, b, counts, sums, C01, C02, C12, where, G,
                 B) -> float:  # pragma: no cover (compiled)
    """The core's Gram ``G[0]`` and right-hand side ``B[0]`` (:meth:`~.tucker.TuckerSweep3.
    core_step`) from ``C[f0, f1, f2]``, the mask against the three modes' features, and
    ``value[p0, p1, p2]``; returns ``sum mask (Y - o)^2`` with ``o`` the offsets (``b``: the
    three modes' biases, ``counts`` and ``sums`` their rows' counts and values' sums, ``Cjk``
    the pair counts, ``where`` from :func:`pair_table`), as
    :meth:`~.tucker.TuckerSweep3._offset_squares`."""
    r = value.shape[0]
    for x in range(r ** 3):
        a, b1, c = x // (r * r), (x // r) % r, x % r
        B[0, x] = (value[a, b1, c] - mu * C[a, b1, c]
                   - (C[r + a, b1, c] + C[a, r + b1, c] + C[a, b1, r + c]))
        for y in range(r ** 3):
            a2, b2, c2 = y // (r * r), (y // r) % r, y % r
            G[0, x, y] = C[2 * r + where[a, a2], 2 * r + where[b1, b2], 2 * r + where[c, c2]]
    total = yo = oo = 0.0
    for m in range(3):
        s1 = s2 = s3 = s4 = 0.0
        for i in range(len(b[m])):
            s1 += b[m][i] * sums[m][i]
            s2 += b[m][i] * counts[m][i]
            s3 += b[m][i] ** 2 * counts[m][i]
            if m == 0:
                s4 += sums[0][i]
                total += counts[0][i]
        yo += s1 + (mu * s4 if m == 0 else 0.0)
        oo += 2.0 * mu * s2 + s3
    oo += mu * mu * total
    for pair in range(3):  # the pairs (0, 1), (0, 2), (1, 2)
        P = C01 if pair == 0 else (C02 if pair == 1 else C12)
        j, k = (0, 1) if pair == 0 else ((0, 2) if pair == 1 else (1, 2))
        acc = 0.0
        for i in range(P.shape[0]):
            row = 0.0
            for c in range(P.shape[1]):
                row += P[i, c] * b[k][c]
            acc += b[j][i] * row
        oo += 2.0 * acc
    return yy - 2.0 * yo + oo


@functools.lru_cache(maxsize=None)
def pair_table(r: int) -> np.ndarray:
    """``where[a, b]``: the place of the pair ``(min(a, b), max(a, b))`` among the pairs ``a <=
    b`` in row order (the features' order), for the compiled loops (once for each rank: the
    loops only read it)."""
    ia, ib = np.triu_indices(r)
    where = np.empty((r, r), dtype=np.int64)
    where[ia, ib] = where[ib, ia] = np.arange(len(ia))
    return where


def _warm_systems(kernel):
    one = np.ones(1)
    kernel(np.zeros(25), (1, 5, 1), np.zeros(1), (1, 1, 1), np.ones((1, 1)), pair_table(1), 0.0,
           one, one, np.ones((1, 1)), one, np.ones((1, 1)), one, np.empty((1, 2, 2)),
           np.empty((1, 2)))


def _warm_solve(kernel):
    for traces in (np.empty(1), np.empty(0)):
        kernel(np.eye(2)[None].copy(), np.ones((1, 2)), 1.0, traces)


def _warm_core(kernel):
    v, one = np.ones(1), np.ones((1, 1))
    kernel(np.ones((3, 3, 3)), np.ones((1, 1, 1)), 0.0, 0.0, (v, v, v), (v, v, v), (v, v, v),
           one, one, one, pair_table(1), np.empty((1, 1, 1)), np.empty((1, 1)))


def _warm_features(kernel):
    kernel(np.ones((1, 2)), 1, np.empty((1, 3)))


class RowKernels:
    """The compiled loops: the rows' systems (``reassoc``: its sums may be added in any order,
    so that they run in vector registers), their solve, the features, the core's system."""

    def __init__(self, systems, solve, features, core):
        self.systems, self.solve, self.features, self.core = systems, solve, features, core


def row_kernels():
    """:class:`RowKernels`, or ``None`` without numba (or where one fails to compile)."""
    kernels = (compiled("tucker_systems", _systems_kernel, _warm_systems, fastmath={"reassoc"}),
               compiled("ridge_solve", _solve_kernel, _warm_solve),
               compiled("tucker_features", _features_kernel, _warm_features),
               compiled("tucker_core", _core_kernel, _warm_core))
    return None if None in kernels else RowKernels(*kernels)
