"""The mask's half of a pass of the order-3 Tucker sweep (:class:`~.tucker.TuckerSweep3`) by
subset sums: ``P = F^T M`` for a 0/1 mask ``M`` (rows: the summed mode, ``n`` of them; columns:
the grid's cells of the other two modes) and a mode's features ``F`` (``n x f``).

The mask does not change during a fit, the features do at every update. The mask is packed once
into bits (:func:`pack_mask`: a byte for each 8 rows of each cell, 64 times fewer bytes than the
float64 mask); each pass then sums, for every 8 rows of ``F``, the 256 subsets of those rows
(:func:`_tables`: ``256 f`` additions each), and a cell's column of ``P`` is the sum of one table
row per byte: ``n / 8`` row reads where the product with the mask reads ``n`` numbers of the mask
and does ``n f`` multiply-adds. At 60^3 half observed, rank 3 (``f = 12``, one thread) a pass
took 0.08 ms against the product's 0.15 in a fit (where the 1.7 MB mask is read from beyond the
core's cache); the values' half (``U^T Y``, real numbers) stays a product.

The same sums to rounding: each entry of ``P`` adds the same rows of ``F`` (those the mask
holds), in another order (within a byte from its last row to its first, then the bytes in order).
With numba (the ``fast`` extra) only; the caller's product is the fallback.
"""
from __future__ import annotations

import functools

import numpy as np

from ..compiled import available as compiled_available
from ..compiled import compiled, generated

__all__ = ["pack_mask", "MaskPass", "MAX_FEATURES", "MAX_ROWS"]

#: The most features (columns of ``F``) a compiled pass is written out for: ``2 r + r (r + 1) / 2``
#: at rank 4, :data:`~.tucker.COMPILED_MAX_RANK`.
MAX_FEATURES = 18
#: The most rows of the summed mode: the tables (``n / 8 x 256 x f`` numbers) stay within about a
#: megabyte, in the core's cache, up to here (60 rows, f = 12: 196 KB).
MAX_ROWS = 320


def pack_mask(M: np.ndarray) -> np.ndarray:
    """A 0/1 mask ``(n, cells)`` (or ``(n, a, b)``: cells ``(a, b)`` in C order) as bytes
    ``(ceil(n / 8), cells)``: bit ``b`` of byte ``q`` of a cell is its row ``8 q + b``
    (NumPy's ``packbits`` along rows, little-endian bits)."""
    M = M.reshape(len(M), -1)
    return np.ascontiguousarray(np.packbits(M != 0, axis=0, bitorder="little"))


def _pack(M, B):
    """:func:`pack_mask` of ``M`` ``(n, a, b)`` into ``B`` (zeros), in the order ``M`` lies in
    memory, without branches on the mask (half its cells are set, in no order a predictor
    could learn)."""
    n, na, nb = M.shape
    if M.strides[0] <= min(M.strides[1], M.strides[2]):  # each cell's rows side by side
        for x in range(na):
            for y in range(nb):
                for q in range(B.shape[0]):
                    byte = 0
                    for b in range(min(8, n - 8 * q)):
                        byte |= int(M[8 * q + b, x, y] != 0) << b
                    B[q, x * nb + y] = byte
    else:
        for r in range(n):
            bit = np.uint8(r % 8)
            for x in range(na):
                for y in range(nb):
                    B[r // 8, x * nb + y] |= np.uint8(M[r, x, y] != 0) << bit


def _tables(F, tables):
    """``tables[q, s] = sum of F[8 q + b]`` over the bits ``b`` of ``s`` (rows past F's end:
    zero), each subset from the one without its lowest bit."""
    n, f = F.shape
    for q in range(tables.shape[0]):
        for g in range(f):
            tables[q, 0, g] = 0.0
        for s in range(1, 256):
            low = s & -s
            b = 0
            while (1 << b) != low:
                b += 1
            row, rest = 8 * q + b, s ^ low
            for g in range(f):
                tables[q, s, g] = tables[q, rest, g] + (F[row, g] if row < n else 0.0)


def _sums_source(f: int) -> str:
    """Source of ``sums_(tables, B, P)``: ``P[g, c] = sum_q tables[q, B[q, c], g]``, one scalar
    per feature ``g`` (packed into vector registers by the SLP vectoriser)."""
    each = range(f)
    return "\n".join([
        "def sums_(tables, B, P):",
        "    for c in range(B.shape[1]):",
        "        t = tables[0, B[0, c]]",
        *[f"        a{g} = t[{g}]" for g in each],
        "        for q in range(1, B.shape[0]):",
        "            t = tables[q, B[q, c]]",
        *[f"            a{g} += t[{g}]" for g in each],
        *[f"        P[{g}, c] = a{g}" for g in each],
    ]) + "\n"


@functools.lru_cache(maxsize=None)
def _sums_function(f: int):
    return generated(_sums_source(f), "sums_", f"_sums_{f}_features", __name__, __file__)


def _kernels(f: int):
    """The compiled packing, table builder and sums for ``f`` features, or ``None`` (no numba,
    or a failed compilation)."""
    def warm_tables(kernel):
        kernel(np.ones((9, f)), np.empty((2, 256, f)))

    def warm_sums(kernel):
        kernel(np.ones((2, 256, f)), np.zeros((2, 3), dtype=np.uint8), np.empty((f, 3)))

    def warm_pack(kernel):
        M = np.ones((9, 2, 3))
        for view in (M, M.transpose(2, 0, 1), M.transpose(1, 0, 2)):  # the grid's three sides
            kernel(view, np.zeros((2, view.shape[1] * view.shape[2]), dtype=np.uint8))

    pack = compiled("mask_pass_pack", _pack, warm_pack)
    tables = compiled("mask_pass_tables", _tables, warm_tables)
    sums = compiled(f"mask_pass_sums_{f}", _sums_function(f), warm_sums, slp=True)
    kernels = (pack, tables, sums)
    return None if any(kernel is None for kernel in kernels) else kernels


class MaskPass:
    """``F^T M`` for one 0/1 mask ``M`` (``n x cells``, or ``n x a x b``: any view of the grid's
    mask, cells ``(a, b)`` in C order) and the features of each update: by the compiled loops
    where they run (the mask packed on first use), else ``None`` (:meth:`__call__`), for the
    caller's product."""

    def __init__(self, M: np.ndarray):
        self.mask, self._bits = (M[:, :, None] if M.ndim == 2 else M), None

    def __call__(self, F: np.ndarray):
        """``F^T M`` (``f x cells``), or ``None`` where the compiled loops do not run (no numba,
        more than :data:`MAX_FEATURES` features or :data:`MAX_ROWS` rows, not float64)."""
        n, f = F.shape
        if (not compiled_available() or f > MAX_FEATURES or n > MAX_ROWS
                or F.dtype != np.float64 or n != self.mask.shape[0]):
            return None
        kernels = _kernels(f)
        if kernels is None:
            return None
        pack, build, sums = kernels
        if self._bits is None:
            cells = self.mask.shape[1] * self.mask.shape[2]
            self._bits = np.zeros((-(-n // 8), cells), dtype=np.uint8)
            pack(self.mask, self._bits)
        tables = np.empty((self._bits.shape[0], 256, f))
        build(np.ascontiguousarray(F), tables)
        P = np.empty((f, self._bits.shape[1]))
        sums(tables, self._bits, P)
        return P
