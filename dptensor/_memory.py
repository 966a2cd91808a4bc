"""What a fit may allocate, checked before its spend.

A fit that runs out of memory after its spend has released something no noise covers (whether it
failed can depend on the data) and has lost its budget. So every estimator works out, from public
quantities only (shapes, the number of units, its parameters; for completion the observed
positions), an upper bound of the memory its fit allocates at its peak, and :func:`check_fits`
refuses the fit before the spend when that bound exceeds what this process can still allocate
(:func:`available_bytes`). The refusal quotes the estimate, the limit and the parameter to change,
never a data value.
"""
from __future__ import annotations

import contextlib
import contextvars
import math
import os

try:
    import resource
except ImportError:  # pragma: no cover - not on Windows: no address-space limit to read
    resource = None

__all__ = ["MemoryRefusedError", "available_bytes", "check_fits", "FLOAT", "HEADROOM"]

#: Bytes of one float64 (or int64): the unit of every estimate.
FLOAT = 8
#: Room kept beside an estimate for what no estimate counts: the allocator's slack, the thread
#: arenas and stacks a BLAS call may start, small Python objects.
HEADROOM = 64 << 20


class MemoryRefusedError(MemoryError):
    """A fit would allocate more than this process can: refused before its spend, nothing
    recorded."""

    def __init__(self, what: str, estimate: int, limit: int, advice: str):
        self.what, self.estimate, self.limit, self.advice = what, int(estimate), int(limit), advice
        super().__init__(
            f"{what} would allocate up to {_gib(estimate)} at its peak (an upper bound from its "
            f"shapes and parameters), but this process can allocate about {_gib(limit)} more (its "
            f"address-space limit or the free memory, less {_gib(HEADROOM)} of headroom); the fit "
            f"was refused before touching the data and nothing was recorded. {advice}")

    def __reduce__(self):  # survives the trip back from a process worker
        return (type(self), (self.what, self.estimate, self.limit, self.advice))


def _gib(nbytes) -> str:
    return f"{nbytes / 2**30:.3g} GiB"


def _meminfo_available():
    """Physical memory available (``MemAvailable`` of ``/proc/meminfo``, else free pages), or
    None."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (AttributeError, OSError, ValueError):
        return None


def _read_int(path):
    try:
        with open(path) as f:
            return int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def _stat(path, key):
    try:
        with open(path) as f:
            for line in f:
                name, _, value = line.partition(" ")
                if name == key:
                    return int(value)
    except (OSError, ValueError):
        pass
    return 0


def _cgroup_available():
    """Room left under this process's cgroup memory limit (a container's), or None: the limit
    less the usage, the inactive file cache counted as free (the kernel reclaims it first)."""
    for limit, usage, stat, cache in (
            ("memory.max", "memory.current", "memory.stat", "inactive_file"),  # cgroup v2
            ("memory/memory.limit_in_bytes", "memory/memory.usage_in_bytes", "memory/memory.stat",
             "total_inactive_file")):  # cgroup v1
        cap = _read_int("/sys/fs/cgroup/" + limit)  # v2 writes "max" when there is none
        used = _read_int("/sys/fs/cgroup/" + usage)
        if cap is not None and used is not None and cap < 1 << 60:
            return cap - used + _stat("/sys/fs/cgroup/" + stat, cache)
    return None


def _virtual_size():
    """This process's virtual size (``VmSize`` of ``/proc/self/status``), or None."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmSize:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def available_bytes():
    """Bytes this process can still allocate, or ``None`` where nothing says (no limit, no
    ``/proc``).

    The smallest of the address-space limit (``RLIMIT_AS``) less the current virtual size, the
    physical memory available, and the room under a cgroup (container) memory limit.
    """
    bounds = []
    soft, _ = resource.getrlimit(resource.RLIMIT_AS) if resource else (None, None)
    if resource and soft != resource.RLIM_INFINITY:
        used = _virtual_size()
        if used is not None:
            bounds.append(soft - used)
    for room in (_meminfo_available(), _cgroup_available()):
        if room is not None:
            bounds.append(room)
    return max(min(bounds), 0) if bounds else None


_PRECHECKED = contextvars.ContextVar("dptensor_memory_prechecked", default=False)


@contextlib.contextmanager
def prechecked():
    """Fits inside skip their own memory check: the caller checked their worst case before its
    spend (a private search's runs and refit), and a refusal now would come after it."""
    token = _PRECHECKED.set(True)
    try:
        yield
    finally:
        _PRECHECKED.reset(token)


def check_fits(nbytes, what: str, advice: str) -> None:
    """Refuse (:class:`MemoryRefusedError`) a fit whose peak estimate ``nbytes`` does not fit.

    Call it before the spend. ``what`` names the fit, ``advice`` says which parameter to change.
    """
    if _PRECHECKED.get():  # inside a block whose worst case was checked before its spend
        return
    nbytes = int(math.ceil(nbytes))
    room = available_bytes()
    if room is not None and nbytes + HEADROOM > room:
        raise MemoryRefusedError(what, nbytes, max(room - HEADROOM, 0), advice)
