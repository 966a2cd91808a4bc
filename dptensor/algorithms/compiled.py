"""numba kernels where numba is installed (the ``fast`` extra), each beside a NumPy fallback that
gives the same numbers: compiled once per process on first use, on tiny public arrays."""
from __future__ import annotations

import contextlib
import functools
import importlib.util
import threading
import warnings

__all__ = ["compiled", "available", "generated"]

_KERNELS: dict = {}  # name -> compiled function, or None where numba is missing or fails
_LOCK = threading.RLock()
#: False: every caller takes its NumPy path (the tests of the fallbacks set it).
ENABLED = True


@contextlib.contextmanager
def _slp_vectorized(on: bool):
    """numba's LLVM passes with the SLP vectoriser (which packs independent scalar operations
    into vector registers; numba leaves it off by default) while ``on``. The pass builder reads
    the setting each time it is built, so the change reaches this compilation only; where a
    numba version reads it elsewhere, the kernel compiles unvectorised (slower, the same to
    rounding). numba's compiler lock is held throughout: no other thread's numba compilation
    sees the change, and the settings are reloaded from the environment first, as the
    compilation then does (that reload would otherwise undo the change)."""
    from numba.core import config
    from numba.core.compiler_lock import global_compiler_lock

    with global_compiler_lock:
        # numba's compiler reloads its settings where a NUMBA_ variable changed since the last
        # reload (one set at run time): done here, that reload keeps the change
        config.reload_config()
        before = config.SLP_VECTORIZE
        if on:
            config.SLP_VECTORIZE = 1
        try:
            yield
        finally:
            config.SLP_VECTORIZE = before


def _compile(fn, warm_up, fastmath, slp):
    import numba

    for cache in (True, False):  # caching needs a writable place; without it, compile anyway
        try:
            kernel = numba.njit(cache=cache, nogil=True, fastmath=fastmath)(fn)
            with _slp_vectorized(slp):
                warm_up(kernel)  # compiled here on tiny public arrays, never on the data
            return kernel
        except Exception:
            if not cache:
                raise
    return None


def available() -> bool:
    """Whether kernels may compile here (numba installed and :data:`ENABLED`): a check that
    compiles nothing; :func:`compiled` may still return ``None``."""
    return ENABLED and _numba_installed()


@functools.lru_cache(maxsize=None)
def _numba_installed() -> bool:
    # once per process: a kernel's caller asks at every step (a power step takes ~0.1 ms)
    return importlib.util.find_spec("numba") is not None


def compiled(name: str, fn, warm_up, fastmath=False, slp=False):
    """numba's ``fn`` (compiled by ``warm_up(kernel)``), or ``None`` without numba (or where it
    fails to compile: the caller's NumPy path computes the same, slower). ``fastmath``: the
    flags the kernel's own notes justify (none by default: every operation as written);
    ``slp``: vectorise independent scalar operations too (a kernel written lane by lane)."""
    if not ENABLED:
        return None
    if name not in _KERNELS:
        with _LOCK:  # one at a time: the warnings filter and numba's setting are process-wide
            if name not in _KERNELS:
                _KERNELS[name] = _compile_quietly(fn, warm_up, fastmath, slp)
    return _KERNELS[name]


def _compile_quietly(fn, warm_up, fastmath, slp):
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return _compile(fn, warm_up, fastmath, slp)
    except Exception:  # ImportError, or a numba that cannot compile on this machine
        return None


def generated(source: str, entry: str, name: str, module: str, file: str):
    """The function ``entry`` that ``source`` (a kernel written out for one size) defines,
    renamed ``name``, with the generating module's ``__name__`` and ``__file__`` as its own:
    numba caches compiled code by a function's file and name, so each size is cached apart and
    anew when that module changes."""
    namespace: dict = {"__name__": module}
    exec(compile(source, file, "exec"), namespace)
    fn = namespace[entry]
    fn.__name__ = fn.__qualname__ = name
    return fn
