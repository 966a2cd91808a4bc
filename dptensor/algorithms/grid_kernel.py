r"""The first pass's map of a block of rows to the grid, ``rint(x 2**b / B)``, with each row's
``||m||^2``: one compiled loop when numba is installed (the ``fast`` extra), else NumPy.

Both paths write the same integers (one float64 product and one ``rint`` per entry, as written:
the kernel's one fastmath flag is ``reassoc``, no contraction) and give each row the same answer
to ``||m||^2 < 4**b``:
a float64 sum of integer squares is exact in any order while it stays below ``2**53``, and once
a partial sum reaches ``2**53`` (a power of two, so a float) every later one stays at or above
it (the terms are >= 0 and rounding is monotone), so the test fails on either path; a NaN or an
infinity fails it on both. So the compiled loop may add the squares in any order (that sum is
the kernel's one chain of operations, the only one ``reassoc`` can touch, and reassociating it
lets it use vector registers: 3x NumPy's three passes, the multiply, the ``rint`` and
``einsum``'s norms, against 2x without it). The norms themselves are exact where the test
passes, the only rows where they are kept as they are.
"""
from __future__ import annotations

import numpy as np

from .compiled import compiled

__all__ = ["grid_map", "compiled_grid_map"]


def _map_kernel(block, scale, out, norms, limit):  # pragma: no cover (compiled)
    """``out[i, j] = rint(block[i, j] * scale)`` for ``j < d`` (``out`` may have more columns),
    ``norms[i] = sum_j out[i, j]**2``; returns the number of rows without ``norms < limit``."""
    n, d = block.shape
    count = 0
    for i in range(n):
        q = 0.0
        for j in range(d):
            v = np.rint(block[i, j] * scale)
            out[i, j] = v
            q += v * v
        norms[i] = q
        if not q < limit:
            count += 1
    return count


def _warm_up(kernel):
    for dtype in (np.float64, np.float32):
        kernel(np.ones((1, 1), dtype=dtype), 1.0, np.ones((1, 2)), np.ones(1), 4.0)


def compiled_grid_map():
    """The compiled :func:`_map_kernel`, or ``None`` without numba (the NumPy path gives the same
    integers and answers, slower). Reassociation allowed: its one chain of operations is the sum
    of squares (no contraction, so each product and ``rint`` is as written)."""
    return compiled("grid_map", _map_kernel, _warm_up, fastmath={"reassoc"})


def _numpy_map(block, scale, out, norms, limit):
    """:func:`_map_kernel` in NumPy: the same integers, the same answers to ``norms < limit``."""
    out = out[:, :block.shape[1]]
    with np.errstate(all="ignore"):
        np.multiply(block, scale, out=out, dtype=np.float64)
        np.rint(out, out=out)
        # In float64: a sum of integer squares below 4**b is exact, and a non-finite one
        # (an overflowed row) fails the test as it should (an int64 cast would not).
        np.einsum("ij,ij->i", out, out, out=norms)
        return int(np.count_nonzero(~(norms < limit)))


def grid_map(block, scale: float, out, norms, limit: float, use_kernel: bool = True) -> int:
    """Write ``rint(block * scale)`` into ``out``'s first columns (float64, ``block``'s rows)
    and each row's sum of squares into ``norms`` (float64); return how many rows fail ``norms <
    limit``."""
    kernel = compiled_grid_map() if use_kernel else None
    if kernel is not None and block.dtype in (np.float64, np.float32) and block.shape[0]:
        try:  # (a new layout compiles on first use, silently: numba's warnings are its own)
            return int(kernel(block, float(scale), out, norms, float(limit)))
        except Exception:  # a layout the compiled kernel cannot take: NumPy's
            pass
    return _numpy_map(block, scale, out, norms, limit)
