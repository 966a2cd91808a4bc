"""How a completion fit runs and reports, beside what it computes: one controller of the BLAS
thread pools, and the per-sweep progress lines of ``verbose``."""
from __future__ import annotations

import functools

from threadpoolctl import ThreadpoolController

__all__ = ["blas_controller", "progress_printer"]


@functools.lru_cache(maxsize=1)
def blas_controller():
    """One controller of the BLAS thread pools, found once (finding them costs about 1 ms a fit)."""
    return ThreadpoolController()


def progress_printer(name, verbose, private, scale):
    """Per-sweep/step progress for ``verbose`` (``None`` when 0): the training RMSE (times
    ``scale``, the caller's units) only when the fit is not private."""
    if not verbose:
        return None

    def report(step, rmse=None):
        if private or rmse is None:
            print(f"[{name}] sweep/step {step + 1} done", flush=True)
        else:
            print(f"[{name}] sweep/step {step + 1}: training RMSE {rmse * scale:.6g}", flush=True)
    return report
