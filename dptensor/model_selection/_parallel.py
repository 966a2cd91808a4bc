"""A private search's runs on threads: the same runs, in the same order of results.

Each run is a function of what the search drew for it before any run started (its candidate,
its fit's seed, its score's noise generator), so running them ``n_jobs`` at a time changes
nothing that is released. Threads, not processes: the search's silence (file descriptors 1 and 2,
``sys.stdout``, ``warnings``, ``logging``) is the process's and covers them, and no worker started
earlier holds descriptors it could write to. Each thread runs in a copy of the caller's context
(so the memory precheck, a context variable, holds in it), under the caller's scikit-learn
configuration (thread-local) and with joblib kept sequential (its settings are per thread too).
"""
from __future__ import annotations

import contextvars
from concurrent.futures import ThreadPoolExecutor

import joblib
from sklearn import config_context, get_config

__all__ = ["in_parallel"]


def in_parallel(fn, items, n_workers: int) -> list:
    """``[fn(item) for item in items]``, on ``n_workers`` threads when more than one.

    The first error (in the items' order) is raised once every started call has ended."""
    items = list(items)
    if n_workers <= 1 or len(items) <= 1:
        return [fn(item) for item in items]
    config = get_config()

    def call(item, context):
        def inside():
            with config_context(**config), joblib.parallel_config(backend="sequential"):
                return fn(item)
        return context.run(inside)

    with ThreadPoolExecutor(max_workers=n_workers) as pool:
        futures = [pool.submit(call, item, contextvars.copy_context()) for item in items]
        return [future.result() for future in futures]
