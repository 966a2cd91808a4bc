r"""``T(I, U, U)`` of a dense symmetric tensor from its distinct entries, read once for all L.

:class:`~dptensor.algorithms.operators.SymmetricTensor`'s NumPy path multiplies the packed half
``P[a, (b, c)]`` (``b <= c``, ``d^2 (d + 1) / 2`` numbers) by the restarts' pair products: one
thin GEMM that streams ``d^3 / 2`` numbers and does ``d^3 L`` flops. The compiled loop here (numba,
the ``fast`` extra) reads the ``d (d + 1) (d + 2) / 6`` distinct entries ``T[i, j, k]``,
``i <= j <= k``, and gives each its three placements: ``out[i] += t u_j u_k``, ``out[j] += t u_i
u_k``, ``out[k] += t u_i u_j``, with ``t`` the entry times its weight (2 for distinct indices, 1
for two equal, 1/3 for ``i = j = k``, which each placement then counts once). Four columns
``j0 .. j0 + 3`` of one ``k`` are read together, ``i`` running over ``0 .. j0 + 3`` (the entries
past a column's end, or of a column past ``k``, are stored as zeros: about 5-10% more numbers,
no branches). For each ``i`` the first placement is four multiply-adds into ``out[i]`` and the
other two accumulate ``s_j = sum_i t u_i``: about ``2 d^3 L / 3`` flops over a third of the numbers.

The restarts are the vector lanes: the loop is written out with one scalar per restart
(:func:`_pass_source`, for each number of restarts), which LLVM's SLP vectoriser packs into vector
registers, every ``s_j`` and product ``u_j u_k`` of the block held there over the pass over
``i`` (a loop over the restarts would keep them in memory). More than :data:`MAX_LANES`
restarts run in passes of at most that many; a pass of 3, 7, 11 or 15 restarts runs with one
zero restart more (:func:`pass_lanes`).

Rounding (for the allowance of :func:`~dptensor.algorithms.tensor_power.moment_roundings`): each
output coordinate is a sum of ``(d + 1) (d + 2) / 2`` products ``t u u`` (every pair ``b <= c``
of the NumPy path, the ``d + 1`` with a repeated index in two parts), each formed with two
multiplications after its weight's one (a division, exact for the weights 2 and 1); a sum in
any order passes each summand through at most one addition fewer than there are summands, and
the stored zeros add exact zeros. The kernel is compiled with ``reassoc`` (so that numba
vectorises its sums) and ``contract`` (fused multiply-adds, one rounding where there were two):
neither adds an operation to any summand's path. The two paths agree to rounding (about 1e-14
of the largest coordinate in the tests), not bit for bit.
"""
from __future__ import annotations

import functools

import numpy as np

from .compiled import available as compiled_available
from .compiled import compiled, generated

__all__ = ["pack_distinct", "packed_size", "compiled_packing", "contract_distinct",
           "compiled_kernel", "pass_widths", "pass_lanes", "single_pass", "KERNEL_MIN_D",
           "FEW_RESTARTS_MIN_D", "kernel_min_d", "contraction_terms"]

#: Smallest d for which :class:`~dptensor.algorithms.operators.SymmetricTensor` takes the compiled
#: loop: below it the thin GEMM over the packed half is less than 2x slower (one step, L=10, one
#: thread: 1.9x at d=50, 2.8x at d=64 and 3x at d=200; the part ``contraction`` of
#: ``benchmarks/bench_tensor_decomposition.py`` measures d=50, 100, 200).
KERNEL_MIN_D = 64
#: With few restarts the NumPy path's packed half, a few MB, stays in cache and its thin GEMM
#: wins there: for each itemsize, ``(restarts, smallest d)`` from most restarts down (one step,
#: one thread, against the GEMM with the compiled pair products: at d=64 one or two float64
#: restarts took 0.024-0.027 ms compiled against 0.018-0.020, one to six float32 ones
#: 0.025-0.040 against 0.009-0.028; one float32 restart at d=100 0.074 against 0.041).
FEW_RESTARTS_MIN_D = {8: ((3, KERNEL_MIN_D), (1, 80)),
                      4: ((8, KERNEL_MIN_D), (6, 72), (4, 80), (2, 100), (1, 128))}


def kernel_min_d(L: int, dtype) -> int:
    """Smallest d for which :class:`~dptensor.algorithms.operators.SymmetricTensor` takes the
    compiled loop with ``L`` restarts of ``dtype`` (:data:`KERNEL_MIN_D` from 3 float64 or 8
    float32 restarts on; :data:`FEW_RESTARTS_MIN_D`): public shapes only."""
    for restarts, min_d in FEW_RESTARTS_MIN_D.get(np.dtype(dtype).itemsize, ()):
        if L >= restarts:
            return min_d
    return KERNEL_MIN_D


def contraction_terms(d: int) -> int:
    """Floating-point operations behind one coordinate of ``T(I, u, u)`` on either path: the
    weight, two products and the sum of ``(d + 1) (d + 2) / 2`` summands started at zero
    (the NumPy path's GEMM needs fewer: ``d (d + 1) / 2 + 1``)."""
    return 1 + 2 + (d + 1) * (d + 2) // 2


#: Columns ``j`` of one ``k`` read together in one pass over ``i`` (2 and 8 were slower: fewer
#: products per load of ``out[i]``, or vector registers spilled).
BLOCK = 4
#: Restarts one compiled pass carries (one vector lane each); more run in several passes. Up to
#: 16 the time per restart stays flat (measured at d=100 and 200, 8 to 16 lanes).
MAX_LANES = 16


def pack_distinct(T: np.ndarray) -> np.ndarray:
    """The weighted distinct entries ``w T[k, j, i]``, ``i <= j <= k``, in the kernel's blocks:
    for each ``k`` and ``j0 = 0, 4, ..`` (``j0 <= k``), the rows ``i = 0 .. j0 + 3`` of the four
    columns ``j0 .. j0 + 3`` side by side, zeros where ``i > j`` or ``j > k``. Each orbit is read
    from that one copy (a tensor symmetric only up to rounding gives the NumPy path's value up to
    that asymmetry). By a compiled loop where there is one (the same numbers: each a division
    of the same entry by the same divisor), else by index arrays."""
    d = T.shape[0]
    contiguous = T.flags.c_contiguous  # (else the index arrays: no copy of T)
    kernel = compiled_packing(T.dtype) if contiguous and compiled_available() else None
    if kernel is not None:
        out = np.empty(packed_size(d), dtype=T.dtype)
        kernel(T, out)
        return out
    flat, divisors, kept = _block_layout(d)
    out = np.zeros(flat.size, dtype=T.dtype)
    # dividing rounds once (exactly for 1/2 and 1: the weights 2 and 1), where multiplying by
    # the rounded 1/3 would round twice
    out[kept] = T.reshape(-1)[flat[kept]] / divisors[kept].astype(T.dtype)
    return out


def packed_size(d: int) -> int:
    """Numbers in :func:`pack_distinct`'s layout: ``BLOCK (j0 + BLOCK)`` for each block."""
    blocks = np.arange(d) // BLOCK + 1  # blocks of each k, j0 = 0, 4, ..
    return int(BLOCK * BLOCK * np.sum(blocks * (blocks + 1) // 2))


def _pack(T, out):
    """:func:`pack_distinct`'s layout, block by block, from a C-ordered ``T``."""
    d = T.shape[0]
    zero, half, three = T.dtype.type(0), T.dtype.type(0.5), T.dtype.type(3)
    at = 0
    for k in range(d):
        for j0 in range(0, k + 1, BLOCK):
            for i in range(j0 + BLOCK):
                for q in range(BLOCK):
                    j = j0 + q
                    v = zero
                    if i <= j <= k:
                        t = T[k, j, i]
                        v = t / three if i == j == k else t if (i == j or j == k) else t / half
                    out[at + BLOCK * i + q] = v
            at += BLOCK * (j0 + BLOCK)


def compiled_packing(dtype=np.float64):
    """The compiled :func:`_pack` for ``dtype``, or ``None`` without numba (every operation as
    written: no fast-math flags)."""
    dtype = np.dtype(dtype)
    return compiled(f"symmetric_packing_{dtype.name}", _pack,
                    lambda kernel: kernel(np.ones((5, 5, 5), dtype=dtype),
                                          np.empty(packed_size(5), dtype=dtype)))


def _block_layout(d: int):
    """For each place of :func:`pack_distinct`'s layout: the flat index into a C-ordered d x d x d
    array, the divisor of its weight (1/2, 1 and 3 for the weights 2, 1 and 1/3) and whether it
    holds an entry (``i <= j <= k``) or a zero."""
    blocks = np.arange(d) // BLOCK + 1  # blocks of each k
    k = np.repeat(np.arange(d), blocks)
    j0 = BLOCK * (np.arange(k.size) - np.repeat(np.cumsum(blocks) - blocks, blocks))
    size = BLOCK * (j0 + BLOCK)  # (j0 + 4) rows i of four columns
    place = np.arange(size.sum()) - np.repeat(np.cumsum(size) - size, size)
    k, j = np.repeat(k, size), np.repeat(j0, size) + place % BLOCK
    i = place // BLOCK
    kept = (i <= j) & (j <= k)
    divisors = np.where((i == j) | (j == k), 1.0, 0.5)
    divisors[(i == j) & (j == k)] = 3.0
    return np.where(kept, (k * d + j) * d + i, 0), divisors, kept


def _pass_source(lanes: int) -> str:
    """Source of ``pass_(P, U, O)``: ``O[i, m] += T(I, u_m, u_m)[i]`` for the ``lanes`` restarts
    ``m``, ``U`` and ``O`` C-ordered ``(d + 3) x lanes`` (the three rows past ``d`` zeros, for
    the last block's columns past ``k``). Every name ending in ``_m`` is written out for each
    restart: the scalars the SLP vectoriser packs."""
    lane = range(lanes)
    col = range(BLOCK)

    def each(template):  # a line for every restart and column
        return [template.format(m=m, q=q) for m in lane for q in col]

    def per_lane(template):  # a line for every restart
        return [template.format(m=m) for m in lane]

    dots = " + ".join(f"t{q} * p{q}_{{m}}" for q in col)
    ends = " + ".join(f"s{q}_{{m}} * uj{q}[{{m}}]" for q in col)
    lines = [
        "def pass_(P, U, O):",
        f"    d = O.shape[0] - {BLOCK - 1}",
        "    at = 0",
        "    zero = U.dtype.type(0)  # the arrays' dtype: 0.0 would sum float32's s_j in float64",
        "    for k in range(d):",
        f"        for j0 in range(0, k + 1, {BLOCK}):",
        f"            n = j0 + {BLOCK}",
        "            uk = U[k]",
        *[f"            uj{q} = U[j0 + {q}]" for q in col],
        *per_lane("            uk_{m} = uk[{m}]"),  # scalars: O might alias U for numba
        *each("            p{q}_{m} = uj{q}[{m}] * uk_{m}"),
        *each("            s{q}_{m} = zero"),
        "            for i in range(n):",
        f"                b = at + {BLOCK} * i",
        f"                t = P[b:b + {BLOCK}]",
        "                ui = U[i]",
        "                oi = O[i]",
        *[f"                t{q} = t[{q}]" for q in col],
        *per_lane("                u_{m} = ui[{m}]"),
        *per_lane("                o_{m} = oi[{m}]"),  # every load before any store
        *each("                s{q}_{m} += t{q} * u_{m}"),
        *per_lane("                o_{m} += " + dots),
        *per_lane("                oi[{m}] = o_{m}"),
        *[line for q in col for line in
          [f"            oj = O[j0 + {q}]",
           *per_lane(f"            oj[{{m}}] += s{q}_{{m}} * uk_{{m}}")]],
        "            ok = O[k]",
        *per_lane("            ok[{m}] += " + ends),
        f"            at += {BLOCK} * n",
    ]
    return "\n".join(lines) + "\n"


@functools.lru_cache(maxsize=None)
def _pass_function(lanes: int):
    """The Python function of :func:`_pass_source` (:func:`~.compiled.generated`)."""
    return generated(_pass_source(lanes), "pass_", f"_pass_{lanes}_lanes", __name__, __file__)


def _warm_up(kernel, dtype, lanes):
    T = np.ones((5, 5, 5), dtype=dtype)
    kernel(pack_distinct(T), np.ones((8, lanes), dtype=dtype), np.zeros((8, lanes), dtype=dtype))


def compiled_kernel(lanes: int = 1, dtype=np.float64):
    """The compiled pass for ``lanes`` restarts (at most :data:`MAX_LANES`) of ``dtype``, or
    ``None`` without numba (or where it fails to compile: the caller's NumPy path computes the
    same to rounding). Once per process for each, on first use; flags ``reassoc`` and
    ``contract`` only (see the module's notes on rounding)."""
    dtype = np.dtype(dtype)
    return compiled(f"symmetric_contraction_{lanes}_{dtype.name}", _pass_function(lanes),
                    lambda kernel: _warm_up(kernel, dtype, lanes),
                    fastmath={"reassoc", "contract"}, slp=True)


def pass_widths(L: int) -> list[int]:
    """The restarts of each compiled pass: as few passes as :data:`MAX_LANES` allows, all of
    one width but the last (none for no restarts)."""
    if L <= 0:
        return []
    passes = -(-L // MAX_LANES)
    width = -(-L // passes)
    return [min(width, L - start) for start in range(0, L, width)]


def pass_lanes(width: int) -> int:
    """The lanes a pass of ``width`` restarts runs in: one zero restart more where ``width`` is
    one short of a multiple of 4 (3, 7, 11, 15 restarts vectorise worse than 4, 8, 12, 16: one
    step at d=200 took 0.76, 1.36, 1.69, 2.24 ms against 0.65, 0.95, 1.45, 1.87). A zero
    restart's lane computes zeros, apart from the others."""
    return width + 1 if width % 4 == 3 else width


@functools.lru_cache(maxsize=None)
def _passes(L: int, dtype: np.dtype):
    """``(width, kernel)`` of each pass for ``L`` restarts (the kernel of
    :func:`pass_lanes` lanes), or ``None`` where one of the passes does not compile (a lookup
    per step, not a compilation)."""
    passes = [(width, compiled_kernel(pass_lanes(width), dtype)) for width in pass_widths(L)]
    return None if any(kernel is None for _, kernel in passes) else passes


def _compiled_passes(P, U):
    """:func:`_passes` for U's restarts, or ``None`` where one of them is not compiled or ``U``
    is of a wider dtype than ``P`` (the NumPy path then computes in that dtype; the passes would
    round U to P's)."""
    if np.result_type(P.dtype, U.dtype) != P.dtype or not compiled_available():
        return None
    return _passes(U.shape[1], P.dtype)


def single_pass(P, U):
    """The compiled pass that takes all of U's restarts at once in lanes of its own width (its
    rows are then the output's), or ``None``."""
    passes = _compiled_passes(P, U)
    if passes is None or len(passes) != 1 or pass_lanes(U.shape[1]) != U.shape[1]:
        return None
    return passes[0][1]


def contract_distinct(P, U):
    """``T(I, U, U)`` (d x L, ``P``'s dtype) from ``P = pack_distinct(T)`` with the compiled
    passes, or ``None`` where :func:`_compiled_passes` has none."""
    d, L = U.shape
    passes = _compiled_passes(P, U)
    if passes is None:
        return None
    if len(passes) == 1 and pass_lanes(L) == L:  # one pass of every restart: its rows are out
        (_, kernel), = passes
        Ut = np.zeros((d + BLOCK - 1, L), dtype=P.dtype)
        Ut[:d] = U
        out = np.zeros_like(Ut)
        kernel(P, Ut, out)
        return out[:d]
    out, start = np.empty((d, L), dtype=P.dtype), 0
    for width, kernel in passes:
        # U's rows, three zero rows past d: the layout of the pass (d x L, restarts in a row;
        # the lanes past width zero restarts)
        Ut = np.zeros((d + BLOCK - 1, pass_lanes(width)), dtype=P.dtype)
        Ut[:d, :width] = U[:, start:start + width]
        outT = np.zeros_like(Ut)
        kernel(P, Ut, outT)
        out[:, start:start + width] = outT[:d, :width]
        start += width
    return out
