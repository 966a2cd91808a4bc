"""One pass over a cubical array for :func:`~dptensor._validation.check_symmetric_tensor`: whether
every entry is finite, the largest absolute entry, and how far the array moves under the two
adjacent transpositions (axes ``(1, 0, 2)`` and ``(0, 2, 1)``, which generate all six
permutations). The compiled loop reads each entry with its two transposes once, in the array's
dtype, where the NumPy path takes d slabs with several temporaries each: the same maxima (each
difference is one rounded subtraction in either path, and a maximum does not depend on the
order)."""
from __future__ import annotations

import numpy as np

from .compiled import available as compiled_available
from .compiled import compiled

__all__ = ["symmetry_gaps", "KERNEL_MIN_D"]

#: Smallest d for which the compiled loop runs (that of the contraction kernel, with which it
#: compiles in the same fits): below it the slabs take under 0.5 ms and a process's first check
#: would wait ~0.4 s for a compilation (d=100, one thread: 0.9 ms compiled against 2.5).
KERNEL_MIN_D = 64


def _gaps(T):
    d = T.shape[0]
    finite = True
    scale = T.dtype.type(0)
    swap01 = swap12 = T.dtype.type(0)
    for a in range(d):
        for b in range(d):
            for c in range(d):
                t = T[a, b, c]
                finite &= np.isfinite(t)
                scale = max(scale, abs(t))
                swap01 = max(swap01, abs(t - T[b, a, c]))
                swap12 = max(swap12, abs(t - T[a, c, b]))
    return finite, scale, swap01, swap12


def symmetry_gaps(T):
    """``(all finite, max |T|, max |T - T^(1,0,2)|, max |T - T^(0,2,1)|)`` of a float32 or
    float64 cube: by a compiled loop where there is one (a C-ordered cube from d =
    :data:`KERNEL_MIN_D`), else slab by slab (d^2 numbers at a time, in cache, not d^3
    temporaries). Where some entry is not finite the maxima mean nothing: the caller refuses
    such an array first."""
    kernel = None
    if len(T) >= KERNEL_MIN_D and T.flags.c_contiguous and compiled_available():  # (no copy)
        kernel = compiled(f"symmetry_gaps_{T.dtype.name}", _gaps,
                          lambda kernel: kernel(np.ones((2, 2, 2), dtype=T.dtype)))
    if kernel is not None:
        finite, scale, swap01, swap12 = kernel(T)
        return bool(finite), float(scale), float(swap01), float(swap12)
    if not np.all(np.isfinite(T)):
        return False, np.nan, np.nan, np.nan
    worst = np.zeros(2)
    for a in range(T.shape[0]):
        worst = np.maximum(worst, (np.max(np.abs(T[a] - T[:, a])), np.max(np.abs(T[a] - T[a].T))))
    return True, float(np.max(np.abs(T))), float(worst[0]), float(worst[1])
