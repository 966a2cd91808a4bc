"""The values' half of a pass of the order-3 Tucker sweep (:class:`~.tucker.TuckerSweep3`):
``V[p, a, b] = sum_f U[f, p] Y[f, a, b]`` over one mode ``f`` of the C-ordered grid of values
``Y`` (the other two modes ``a < b`` in order), by compiled loops that read each number of ``Y``
once.

As a product (``U^T`` times an unfolding of ``Y``) its narrow side is the factor's ``r`` columns:
at 60^3 and rank 3 (one thread) BLAS took 93 us, three times a plain read of ``Y`` (32 us),
whichever mode it summed. Here each number of ``Y`` is read once for its ``r`` multiply-adds,
into sums held in registers: over the first or middle mode ``r`` sums for each of a run of
:data:`LANES` cells of the last mode, over the last mode ``r`` dot products of each row of
``Y``. At 60^3, rank 3: 45, 44 and 49 us over modes 0, 1 and 2.

The same sums to rounding (compiled with ``contract`` and, for the dot products, ``reassoc``:
the products' order within a sum differs from BLAS's, as BLAS's differs between its kernels).
With numba (the ``fast`` extra) only; the caller's product is the fallback.
"""
from __future__ import annotations

import functools

import numpy as np

from ..compiled import available as compiled_available
from ..compiled import compiled, generated

__all__ = ["value_pass", "MAX_RANK"]

#: The largest rank the loops are written out for (:data:`~.tucker.COMPILED_MAX_RANK`'s).
MAX_RANK = 4
#: Cells of a row of ``V`` summed together in registers by the leading modes' loops.
LANES = 8


def _leading_source(r: int) -> str:
    """Source of ``leading_(Y, U, V, f)``: ``V = sum over mode f`` (0 or 1) of ``U[f, p] Y``,
    ``(r, n_a, n_b)``, ``b`` the last mode. The ``r x LANES`` sums of a run of cells are
    scalars (``s{p}_{c}``) that the SLP vectoriser keeps in vector registers over the summed
    mode; the cells past the last whole run are summed one at a time."""
    lanes, ranks = range(LANES), range(r)

    def each(template):
        return [template.format(p=p, c=c) for p in ranks for c in lanes]

    body = [
        "        for b0 in range(0, n2 - n2 % {L}, {L}):".format(L=LANES),
        *each("            s{p}_{c} = 0.0"),
        "            for i in range(ni):",
        "                row = Y[i, a] if f == 0 else Y[a, i]",
        *[f"                y{c} = row[b0 + {c}]" for c in lanes],
        *[f"                u{p} = U[i, {p}]" for p in ranks],
        *each("                s{p}_{c} += u{p} * y{c}"),
        *each("            V[{p}, a, b0 + {c}] = s{p}_{c}"),
        "        for b in range(n2 - n2 % {L}, n2):".format(L=LANES),
        *[f"            t{p} = 0.0" for p in ranks],
        "            for i in range(ni):",
        "                y = Y[i, a, b] if f == 0 else Y[a, i, b]",
        *[f"                t{p} += U[i, {p}] * y" for p in ranks],
        *[f"            V[{p}, a, b] = t{p}" for p in ranks],
    ]
    return "\n".join([
        "def leading_(Y, U, V, f):",
        "    n0, n1, n2 = Y.shape",
        "    na, ni = (n1, n0) if f == 0 else (n0, n1)",
        "    for a in range(na):",
        *body,
    ]) + "\n"


def _last_kernel(Y, UT, V):  # pragma: no cover (compiled)
    """``V[p, i, j] = sum_k UT[p, k] Y[i, j, k]``: a dot product of each row of ``Y`` with each
    of ``UT``'s (``reassoc``: vectorised over ``k``, in partial sums added up at the row's end;
    partial sums written out as scalars instead took 1.4x as long)."""
    n0, n1, n2 = Y.shape
    for i in range(n0):
        for j in range(n1):
            row = Y[i, j]
            for p in range(UT.shape[0]):
                u = UT[p]
                s = 0.0
                for k in range(n2):
                    s += u[k] * row[k]
                V[p, i, j] = s


@functools.lru_cache(maxsize=None)
def _leading_function(r: int):
    """The Python function of :func:`_leading_source` (:func:`~..compiled.generated`)."""
    return generated(_leading_source(r), "leading_", f"_leading_{r}_ranks", __name__, __file__)


def _warm_leading(r: int):
    def warm(kernel):  # on tiny public arrays, with cells past a whole run
        Y, U = np.ones((3, 4, LANES + 1)), np.ones((4, r))
        kernel(Y, U[:3], np.empty((r, 4, LANES + 1)), 0)
        kernel(Y, U, np.empty((r, 3, LANES + 1)), 1)
    return warm


def _warm_last(kernel):
    kernel(np.ones((3, 4, 5)), np.ones((2, 5)), np.empty((2, 3, 4)))


def value_pass(Y: np.ndarray, U: np.ndarray, f: int):
    """``U^T`` times ``Y`` (C-ordered float64, n0 x n1 x n2) summed over mode ``f``: ``(r, n_a,
    n_b)``, contiguous; ``None`` where the compiled loops do not run (no numba, another
    layout or dtype: the caller's product)."""
    r = U.shape[1]
    if (not compiled_available() or Y.dtype != np.float64 or U.dtype != np.float64
            or not Y.flags.c_contiguous or r > MAX_RANK):
        return None
    kernel = (compiled("value_pass_last", _last_kernel, _warm_last,
                       fastmath={"reassoc", "contract"}) if f == 2 else
              compiled(f"value_pass_leading_{r}", _leading_function(r), _warm_leading(r),
                       fastmath={"contract"}, slp=True))
    if kernel is None:
        return None
    others = [n for k, n in enumerate(Y.shape) if k != f]
    V = np.empty((U.shape[1], *others))
    if f == 2:
        kernel(Y, np.ascontiguousarray(U.T), V)
    else:
        kernel(Y, np.ascontiguousarray(U), V, f)
    return V
