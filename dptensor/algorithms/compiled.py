"""numba kernels where numba is installed (the ``fast`` extra), each beside a NumPy fallback that
gives the same numbers: compiled once per process on first use, on tiny public arrays."""
from __future__ import annotations

import warnings

__all__ = ["compiled"]

_KERNELS: dict = {}  # name -> compiled function, or None where numba is missing or fails
#: False: every caller takes its NumPy path (the tests of the fallbacks set it).
ENABLED = True


def _compile(fn, warm_up, fastmath):
    import numba

    for cache in (True, False):  # caching needs a writable place; without it, compile anyway
        try:
            kernel = numba.njit(cache=cache, nogil=True, fastmath=fastmath)(fn)
            warm_up(kernel)  # compiled here on tiny public arrays, never on the data
            return kernel
        except Exception:
            if not cache:
                raise
    return None


def compiled(name: str, fn, warm_up, fastmath=False):
    """numba's ``fn`` (compiled by ``warm_up(kernel)``), or ``None`` without numba (or where it
    fails to compile: the caller's NumPy path computes the same, slower). ``fastmath``: the
    flags the kernel's own notes justify (none by default: every operation as written)."""
    if not ENABLED:
        return None
    if name not in _KERNELS:
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                kernel = _compile(fn, warm_up, fastmath)
        except Exception:  # ImportError, or a numba that cannot compile on this machine
            kernel = None
        _KERNELS[name] = kernel
    return _KERNELS[name]
