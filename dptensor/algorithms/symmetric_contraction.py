r"""``T(I, U, U)`` of a dense symmetric tensor from its distinct entries, read once for all L.

:class:`~dptensor.algorithms.operators.SymmetricTensor`'s NumPy path multiplies the packed half
``P[a, (b, c)]`` (``b <= c``, ``d^2 (d + 1) / 2`` numbers) by the restarts' pair products: one
thin GEMM that streams ``d^3 / 2`` numbers and does ``d^3 L`` flops. The compiled loop here (numba,
the ``fast`` extra) reads the ``d (d + 1) (d + 2) / 6`` distinct entries ``T[i, j, k]``,
``i <= j <= k``, and gives each its three placements: ``out[i] += t u_j u_k``, ``out[j] += t u_i
u_k``, ``out[k] += t u_i u_j``, with ``t`` the entry times its weight (2 for distinct indices, 1
for two equal, 1/3 for ``i = j = k``, which each placement then counts once). For a fixed
``(j, k)`` the first is an axpy of the column ``T[0..j, j, k]`` and the other two share its dot
with ``u``, ``s = sum_i t_i u_i``: about ``2 d^3 L / 3`` flops over a third of the numbers.

Rounding (for the allowance of :func:`~dptensor.algorithms.tensor_power.moment_roundings`): each
output coordinate is a sum of ``(d + 1) (d + 2) / 2`` products ``t u u`` (every pair ``b <= c``
of the NumPy path, the ``d + 1`` with a repeated index in two parts), each formed with two
multiplications after its weight's one (a division, exact for the weights 2 and 1); a sum in
any order passes each summand through at most one addition fewer than there are summands. The
kernel is compiled with ``reassoc`` (so that numba vectorises its dot products) and
``contract`` (fused multiply-adds, one rounding where there were two): neither adds an
operation to any summand's path. The two paths agree to rounding (about 1e-14 of the largest
coordinate in the tests), not bit for bit.
"""
from __future__ import annotations

import numpy as np

from .compiled import compiled

__all__ = ["pack_distinct", "contract_distinct", "compiled_kernel", "KERNEL_MIN_D",
           "contraction_terms"]

#: Smallest d for which :class:`~dptensor.algorithms.operators.SymmetricTensor` takes the compiled
#: loop: below it the thin GEMM over the packed half is less than 2x slower (measured in
#: ``benchmarks/bench_tensor_decomposition.py``, part ``contraction``).
KERNEL_MIN_D = 96


def contraction_terms(d: int) -> int:
    """Floating-point operations behind one coordinate of ``T(I, u, u)`` on either path: the
    weight, two products and the sum of ``(d + 1) (d + 2) / 2`` summands started at zero
    (the NumPy path's GEMM needs fewer: ``d (d + 1) / 2 + 1``)."""
    return 1 + 2 + (d + 1) * (d + 2) // 2


def pack_distinct(T: np.ndarray) -> np.ndarray:
    """The weighted distinct entries ``w T[k, j, i]``, ``i <= j <= k``, in the kernel's order
    (``k``, then ``j``, then ``i``: the contiguous rows ``T[k, j, :j + 1]``). Each orbit is read
    from that one copy (a tensor symmetric only up to rounding gives the NumPy path's value up
    to that asymmetry)."""
    flat, divisors = _distinct_layout(T.shape[0])
    # dividing rounds once (exactly for 1/2 and 1: the weights 2 and 1), where multiplying by
    # the rounded 1/3 would round twice
    return T.reshape(-1)[flat] / divisors.astype(T.dtype)


def _distinct_layout(d: int):
    """Flat indices into a C-ordered d x d x d array of the entries :func:`pack_distinct` takes,
    and the divisors of their weights (2 for distinct indices, 1 for two equal, 1/3 for three:
    1/2, 1 and 3)."""
    row_k = np.repeat(np.arange(d), np.arange(1, d + 1))  # the rows (k, j), j <= k, in order
    row_j = np.arange(row_k.size) - np.repeat(np.arange(d) * np.arange(1, d + 1) // 2,
                                              np.arange(1, d + 1))
    k, j = np.repeat(row_k, row_j + 1), np.repeat(row_j, row_j + 1)  # row (k, j) has j + 1
    i = np.arange(k.size) - np.repeat(np.cumsum(row_j + 1) - (row_j + 1), row_j + 1)
    divisors = np.where((i == j) | (j == k), 1.0, 0.5)
    divisors[(i == j) & (j == k)] = 3.0
    return (k * d + j) * d + i, divisors


def _contract_into(P, Ut, outT):  # pragma: no cover (compiled)
    """``outT[m] += T(I, u_m, u_m)`` for the rows ``u_m`` of ``Ut`` (L x d), ``P`` from
    :func:`pack_distinct`. Columns ``j`` of one ``k`` are taken four at a time, so that one pass
    over ``i`` updates ``outT[m, i]`` once for four entries (``outT`` and ``Ut`` stay in cache)."""
    L, d = Ut.shape
    off = 0
    for k in range(d):
        j = 0
        while j + 3 <= k:
            a1 = off + j + 1
            a2 = a1 + j + 2
            a3 = a2 + j + 3
            # slices: indices from a range are known non-negative, so the loads vectorise
            r0, r1, r2, r3 = P[off:a1], P[a1:a2], P[a2:a3], P[a3:a3 + j + 4]
            for m in range(L):
                u, o = Ut[m], outT[m]
                ul = u[k]
                p0, p1, p2, p3 = u[j] * ul, u[j + 1] * ul, u[j + 2] * ul, u[j + 3] * ul
                s0 = s1 = s2 = s3 = 0.0
                for i in range(j + 1):
                    t0, t1, t2, t3, ui = r0[i], r1[i], r2[i], r3[i], u[i]
                    s0 += t0 * ui
                    s1 += t1 * ui
                    s2 += t2 * ui
                    s3 += t3 * ui
                    o[i] += t0 * p0 + t1 * p1 + t2 * p2 + t3 * p3
                # the rows' triangular ends, i = j + 1 .. j + 3
                t1, t2, t3, ui = r1[j + 1], r2[j + 1], r3[j + 1], u[j + 1]
                s1 += t1 * ui
                s2 += t2 * ui
                s3 += t3 * ui
                o[j + 1] += t1 * p1 + t2 * p2 + t3 * p3
                t2, t3, ui = r2[j + 2], r3[j + 2], u[j + 2]
                s2 += t2 * ui
                s3 += t3 * ui
                o[j + 2] += t2 * p2 + t3 * p3
                t3 = r3[j + 3]
                s3 += t3 * u[j + 3]
                o[j + 3] += t3 * p3
                o[j] += s0 * ul
                o[j + 1] += s1 * ul
                o[j + 2] += s2 * ul
                o[j + 3] += s3 * ul
                o[k] += s0 * u[j] + s1 * u[j + 1] + s2 * u[j + 2] + s3 * u[j + 3]
            off = a3 + j + 4
            j += 4
        while j <= k:  # the last columns of this k, one at a time
            row = P[off:off + j + 1]
            for m in range(L):
                u, o = Ut[m], outT[m]
                pm = u[j] * u[k]
                s = 0.0
                for i in range(j + 1):
                    t = row[i]
                    s += t * u[i]
                    o[i] += t * pm
                o[j] += s * u[k]
                o[k] += s * u[j]
            off += j + 1
            j += 1


def _warm_up(kernel):
    for dtype in (np.float64, np.float32):
        T = np.ones((5, 5, 5), dtype=dtype)
        kernel(pack_distinct(T), np.ones((2, 5), dtype=dtype), np.zeros((2, 5), dtype=dtype))


def compiled_kernel():
    """The compiled :func:`_contract_into`, or ``None`` without numba (or where it fails to
    compile: the caller's NumPy path computes the same to rounding). Once per process, on first
    use; flags ``reassoc`` and ``contract`` only (see the module's notes on rounding)."""
    return compiled("symmetric_contraction", _contract_into, _warm_up,
                    fastmath={"reassoc", "contract"})


def contract_distinct(P, U, kernel):
    """``T(I, U, U)`` (d x L, ``P``'s dtype) from ``P = pack_distinct(T)`` with ``kernel``."""
    Ut = np.ascontiguousarray(U.T, dtype=P.dtype)
    outT = np.zeros_like(Ut)
    kernel(P, Ut, outT)
    return outT.T
