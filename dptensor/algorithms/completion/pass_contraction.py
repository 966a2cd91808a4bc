"""The second half of an order-3 Tucker update's sums (:class:`~.tucker.TuckerSweep3`): a pass's
half (``P``, ``F x n_x x n_y``, summed over one mode already) contracted with the features or
factor ``W`` of one of the two modes left, by compiled loops.

:meth:`~.tucker.TuckerSweep3._contractions` sums over the pass's last axis (``Q[f, m, g] =
sum_o P[f, m, o] W[o, g]``) or its middle one (``Q[f, g, b] = sum_a W[a, g] P[f, a, b]``), with
:func:`contract`. As products these are thin (``W`` has the ``2 r + r (r + 1) / 2`` feature
columns, 12 at rank 3, or the factor's ``r``) and BLAS ran the features' at about 40 GFLOP/s at
60^3 (26 and 29 us). Here the sums of :data:`ROWS` rows of ``P`` (over the last axis) or of a run
of :data:`LANES` cells (over the middle one) are scalars that the SLP vectoriser keeps in vector
registers over the summed axis, each number of ``P`` read once for its ``G`` multiply-adds: 13
and 13 us (the factor's: 4.7 and 2.9 against 6.4 and 5.1).

The same sums to rounding (``contract``: fused multiply-adds; the products in the summed axis's
order). With numba (the ``fast`` extra) only; NumPy's products are the fallback.
"""
from __future__ import annotations

import functools

import numpy as np

from ..compiled import available as compiled_available
from ..compiled import compiled, generated
from .mask_pass import MAX_FEATURES

__all__ = ["contract", "LANES", "ROWS"]

#: Cells of the last axis summed together in registers by :func:`contract_middle`'s loops.
LANES = 8
#: Rows of ``P`` summed together by :func:`contract_last`'s loops.
ROWS = 4


def _last_source(G: int) -> str:
    """Source of ``last_(P, W, Q)``: ``Q[f, m, g] = sum_o P[f, m, o] W[o, g]``, :data:`ROWS`
    rows of P at a time (their ``ROWS x G`` sums held as scalars over ``o``: independent chains
    of multiply-adds), then the rows past the last whole run one at a time."""
    cols, rows = range(G), range(ROWS)

    def each(template):
        return [template.format(g=g, q=q) for q in rows for g in cols]

    return "\n".join([
        "def last_(P, W, Q):",
        "    n_f, n_m, n_o = P.shape",
        "    R = P.reshape(n_f * n_m, n_o)",
        "    S = Q.reshape(n_f * n_m, Q.shape[2])",
        "    n = n_f * n_m",
        f"    for m0 in range(0, n - n % {ROWS}, {ROWS}):",
        *each("        s{q}_{g} = 0.0"),
        "        for o in range(n_o):",
        "            w = W[o]",
        *[f"            w{g} = w[{g}]" for g in cols],
        *[f"            p{q} = R[m0 + {q}, o]" for q in rows],
        *each("            s{q}_{g} += p{q} * w{g}"),
        *each("        S[m0 + {q}, {g}] = s{q}_{g}"),
        f"    for m in range(n - n % {ROWS}, n):",
        *[f"        t{g} = 0.0" for g in cols],
        "        for o in range(n_o):",
        "            p = R[m, o]",
        *[f"            t{g} += p * W[o, {g}]" for g in cols],
        *[f"        S[m, {g}] = t{g}" for g in cols],
    ]) + "\n"


def _middle_source(G: int) -> str:
    """Source of ``middle_(P, W, Q)``: ``Q[f, g, b] = sum_a W[a, g] P[f, a, b]``, the ``G x
    LANES`` sums of a run of cells held as scalars over ``a``; the cells past the last whole
    run one at a time."""
    cols, lanes = range(G), range(LANES)

    def each(template):
        return [template.format(g=g, c=c) for g in cols for c in lanes]

    cut = f"n_b - n_b % {LANES}"
    return "\n".join([
        "def middle_(P, W, Q):",
        "    n_f, n_a, n_b = P.shape",
        "    for f in range(n_f):",
        f"        for b0 in range(0, {cut}, {LANES}):",
        *each("            s{g}_{c} = 0.0"),
        "            for a in range(n_a):",
        "                row = P[f, a]",
        "                w = W[a]",
        *[f"                y{c} = row[b0 + {c}]" for c in lanes],
        *[f"                w{g} = w[{g}]" for g in cols],
        *each("                s{g}_{c} += w{g} * y{c}"),
        *each("            Q[f, {g}, b0 + {c}] = s{g}_{c}"),
        f"        for b in range({cut}, n_b):",
        *[f"            t{g} = 0.0" for g in cols],
        "            for a in range(n_a):",
        "                y = P[f, a, b]",
        *[f"                t{g} += W[a, {g}] * y" for g in cols],
        *[f"            Q[f, {g}, b] = t{g}" for g in cols],
    ]) + "\n"


@functools.lru_cache(maxsize=None)
def _function(kind: str, G: int):
    """The Python function of :func:`_last_source` or :func:`_middle_source` for ``G``
    columns (:func:`~..compiled.generated`)."""
    source = (_last_source if kind == "last" else _middle_source)(G)
    return generated(source, f"{kind}_", f"_{kind}_{G}_columns", __name__, __file__)


def _warm_up(kind: str, G: int):
    def warm(kernel):  # on tiny public arrays, with cells past a whole run
        P, W = np.ones((3, 3, LANES + 1)), np.ones((LANES + 1 if kind == "last" else 3, G))
        out = (3, 3, G) if kind == "last" else (3, G, LANES + 1)
        kernel(P, W, np.empty(out))
    return warm


def _kernel(kind: str, P, W):
    G = W.shape[1]
    if (not compiled_available() or G > MAX_FEATURES or P.dtype != np.float64
            or W.dtype != np.float64 or not P.flags.c_contiguous):
        return None
    return compiled(f"pass_contraction_{kind}_{G}", _function(kind, G), _warm_up(kind, G),
                    fastmath={"contract"}, slp=True)


def contract(P: np.ndarray, W: np.ndarray, axis: int) -> np.ndarray:
    """``P`` (``F x n_x x n_y``) contracted with ``W`` (rows: that axis's) over its ``axis`` 2
    (``(F, n_x, G)``) or 1 (``(F, G, n_y)``, NumPy's ``matmul(W.T, P)``), contiguous: by the
    compiled loops where they run, else by NumPy's products (no numba, more than
    :data:`~.mask_pass.MAX_FEATURES` columns, another dtype or layout)."""
    kind = "last" if axis == 2 else "middle"
    kernel = _kernel(kind, P, W)
    if kernel is None:
        if axis == 2:
            return (P.reshape(-1, P.shape[2]) @ W).reshape(P.shape[0], P.shape[1], -1)
        return np.matmul(W.T, P)
    shape = (P.shape[0], P.shape[1], W.shape[1]) if axis == 2 else (P.shape[0], W.shape[1],
                                                                    P.shape[2])
    Q = np.empty(shape)
    kernel(P, np.ascontiguousarray(W), Q)
    return Q
