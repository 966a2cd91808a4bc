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

    The smaller of the address-space limit (``RLIMIT_AS``) less the current virtual size, and the
    physical memory available.
    """
    bounds = []
    soft, _ = resource.getrlimit(resource.RLIMIT_AS) if resource else (None, None)
    if resource and soft != resource.RLIM_INFINITY:
        used = _virtual_size()
        if used is not None:
            bounds.append(soft - used)
    physical = _meminfo_available()
    if physical is not None:
        bounds.append(physical)
    return max(min(bounds), 0) if bounds else None


def check_fits(nbytes, what: str, advice: str) -> None:
    """Refuse (:class:`MemoryRefusedError`) a fit whose peak estimate ``nbytes`` does not fit.

    Call it before the spend. ``what`` names the fit, ``advice`` says which parameter to change.
    """
    nbytes = int(math.ceil(nbytes))
    room = available_bytes()
    if room is not None and nbytes + HEADROOM > room:
        raise MemoryRefusedError(what, nbytes, max(room - HEADROOM, 0), advice)
