"""Dask input: time per power step and peak client memory on a LocalCluster, against in-memory NumPy.

One tensor power step is ``X^T (X U)^2`` with ``sum (X U)^3`` (L = 10 candidates); one PCA power
step is ``X^T (X Q)`` (p = 10); the fit row is a whole private ``PrivateTensorDecomposition``
(validation, which on Dask is one extra pass to refuse NaN, then 5 queries on clipped rows). On
the cluster each is one reduction over the row chunks (the chunks were generated on the workers
and persisted there, and a private fit clips them inside each step's tasks); in memory each is
the NumPy operator on an array the client holds (clipped once per fit). The stream row pulls
every chunk to the client in turn, as ``StreamingTensorPower`` and the streaming PCA do. Peak
client memory is tracemalloc's peak in the client process during the steps; for a LocalCluster
that process also runs the scheduler, so the number includes its bookkeeping. For the NumPy path
the client also holds X itself (``X MB``).

Run ``python -m benchmarks.bench_dask [--quick]``; results go to ``benchmarks/results/dask.{json,md}``.
"""
from __future__ import annotations

import functools

import os
import sys
import time
import tracemalloc

import numpy as np

from benchmarks._common import write_results
from dptensor import PrivateTensorDecomposition  # imported here, not inside a timed fit

NAME = "dask"
L = 10          # candidates per tensor power step / PCA block size
REPEAT = 5      # timed steps per configuration (the median is reported)
WORKERS = 2     # one single-threaded worker process per core of the reference machine


FIT_LABEL = "private fit (k=1, L=10, R=4)"


def _fit(X):
    """A whole private tensor decomposition: validation, 4 power steps and the eigenvalue query."""
    return PrivateTensorDecomposition(1, n_restarts=L, n_iter=4, epsilon=1.0, data_norm=20.0,
                                      moment="implicit", random_state=0).fit(X)


def _steps(fn, repeat, warm_up=True):
    """(median wall seconds per call, peak traced client bytes) over ``repeat`` calls after a warm-up."""
    if warm_up:
        fn()
    times = []
    tracemalloc.start()
    try:
        for _ in range(repeat):
            t0 = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t0)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    return float(np.median(times)), peak


def _record(path, n, d, chunk, op, seconds, peak, x_bytes, **extra):
    return {"path": path, "n": n, "d": d, "chunk_rows": chunk, "step": op,
            "seconds_per_step": round(seconds, 4), "peak_client_MB": round(peak / 2**20, 2),
            "X_MB": round(x_bytes / 2**20, 1), **extra}


def bench_numpy(n, d, threads):
    """In-memory operators on an X the client holds."""
    from threadpoolctl import threadpool_limits

    from dptensor.algorithms.operators import GramMatrix, ThirdMoment
    from dptensor.mechanisms import clip_rows

    rng = np.random.default_rng(0)
    X = rng.standard_normal((n, d))
    U = np.linalg.qr(rng.standard_normal((d, L)))[0]
    rows = []
    with threadpool_limits(threads):
        t, peak = _steps(lambda: ThirdMoment(X).apply_evaluate(U), REPEAT)
        rows.append(_record(f"numpy ({threads} BLAS thr.)", n, d, n, "tensor", t, peak, X.nbytes))
        t, peak = _steps(lambda: GramMatrix(X).matmat(U), REPEAT)
        rows.append(_record(f"numpy ({threads} BLAS thr.)", n, d, n, "gram", t, peak, X.nbytes))
        if threads == 1:
            t, peak = _steps(lambda: clip_rows(X, 20.0), REPEAT)
            rows.append(_record(f"numpy ({threads} BLAS thr.)", n, d, n, "clip_rows (once per fit)", t, peak,
                                X.nbytes))
            t, peak = _steps(lambda: _fit(X), 1, warm_up=False)
            rows.append(_record(f"numpy ({threads} BLAS thr.)", n, d, n, FIT_LABEL, t, peak, X.nbytes))
    return rows


def bench_dask(n, d, chunk):
    """The Dask operators and the chunk stream on a LocalCluster of single-threaded worker processes."""
    import dask.array as da
    from distributed import Client, LocalCluster, wait

    from dptensor.algorithms.dask import DaskGramMatrix, DaskThirdMoment, RowChunks
    from dptensor.mechanisms import clip_rows

    rows = []
    with LocalCluster(n_workers=WORKERS, processes=True, threads_per_worker=1, host="127.0.0.1",
                      dashboard_address=None) as cluster, Client(cluster):
        t0 = time.perf_counter()
        X = da.random.default_rng(0).standard_normal((n, d), chunks=(chunk, d)).persist()
        wait(X)
        seconds = time.perf_counter() - t0
        print(f"  generated {X.nbytes / 2**20:.0f} MB on {WORKERS} workers in {seconds:.1f} s")
        U = np.linalg.qr(np.random.default_rng(1).standard_normal((d, L)))[0]
        path = f"dask ({WORKERS} workers x 1 thr.)"
        t, peak = _steps(lambda: DaskThirdMoment(X).apply_evaluate(U), REPEAT)
        rows.append(_record(path, n, d, chunk, "tensor", t, peak, X.nbytes))
        t, peak = _steps(lambda: DaskGramMatrix(X).matmat(U), REPEAT)
        rows.append(_record(path, n, d, chunk, "gram", t, peak, X.nbytes))
        # What a private fit runs: the same step with each chunk clipped to data_norm inside the task.
        clip = functools.partial(clip_rows, data_norm=20.0)
        t, peak = _steps(lambda: DaskThirdMoment(X, prepare=clip).apply_evaluate(U), REPEAT)
        rows.append(_record(path, n, d, chunk, "tensor, clipped per chunk", t, peak, X.nbytes))
        t, peak = _steps(lambda: _fit(X), 1, warm_up=False)
        rows.append(_record(path, n, d, chunk, FIT_LABEL, t, peak, X.nbytes))
        # The stream: every chunk to the client once, as partial_fit consumes it.
        t, peak = _steps(lambda: sum(c.shape[0] for c in RowChunks(X)), 1)
        rows.append(_record(path, n, d, chunk, "stream (all chunks)", t, peak, X.nbytes,
                            MB_per_s=round(X.nbytes / 2**20 / t, 1)))
    return rows


def run(quick: bool = False) -> list[dict]:
    n, d, chunk = (20_000, 20, 5_000) if quick else (1_000_000, 200, 100_000)
    load_before = os.getloadavg()[0]
    records = []
    print(f"[dask] numpy in memory, n={n}, d={d}")
    for threads in (1, WORKERS):
        records += bench_numpy(n, d, threads)
    print(f"[dask] LocalCluster, n={n}, d={d}, chunks of {chunk} rows")
    try:
        records += bench_dask(n, d, chunk)
    except ImportError as exc:  # pragma: no cover - optional extra
        print(f"dask or distributed not installed ({exc}): skipping the cluster rows")
    load = (load_before, os.getloadavg()[0])
    summary = (f"Time per power step (median of {REPEAT}) and peak client memory (tracemalloc), "
               f"n={n} rows, d={d}, L=p={L}; Dask: {WORKERS} single-threaded worker processes on this "
               f"machine, X persisted on the workers in chunks of {chunk} rows. NumPy: the in-memory "
               f"operator on the same size (X fits here: {n * d * 8 / 2**20:.0f} MB), whose client also "
               f"holds X. Load average before/after: {load[0]:.1f}/{load[1]:.1f} (a shared machine).")
    path = write_results(NAME, records, summary=summary,
                         columns=["path", "step", "n", "d", "chunk_rows", "seconds_per_step",
                                  "peak_client_MB", "X_MB", "MB_per_s"],
                         extra={"quick": quick, "load_average": load})
    print(path.read_text())
    return records


if __name__ == "__main__":
    run(quick="--quick" in sys.argv)
