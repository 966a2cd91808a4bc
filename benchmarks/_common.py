"""Shared plumbing for benchmarks: timing, peak memory, machine info, and writing results.

Every benchmark writes ``benchmarks/results/<name>.json`` (records plus machine info) and
``<name>.md`` (a short table), and a ``<name>.png`` where a curve says more.
"""
from __future__ import annotations

import json
import os
import platform
import time
import tracemalloc
from contextlib import nullcontext
from pathlib import Path

import numpy as np

RESULTS = Path(__file__).resolve().parent / "results"


def machine_info() -> dict:
    """Versions, CPU count and BLAS thread settings, recorded beside every result."""
    import scipy
    import sklearn

    import dptensor

    info = {"python": platform.python_version(), "machine": platform.machine(), "cpus": os.cpu_count(),
            "numpy": np.__version__, "scipy": scipy.__version__, "sklearn": sklearn.__version__,
            "dptensor": dptensor.__version__, "date": time.strftime("%Y-%m-%d")}
    try:
        from threadpoolctl import threadpool_info

        info["blas"] = [{k: p.get(k) for k in ("internal_api", "version", "num_threads", "architecture")}
                        for p in threadpool_info()]
    except ImportError:
        info["blas"] = "threadpoolctl not installed"
    for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_CORETYPE"):
        if var in os.environ:
            info[var] = os.environ[var]
    return info


def one_thread():
    """One BLAS thread for the block inside (ratios on shared machines), where threadpoolctl is
    installed; else nothing changes."""
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:
        return nullcontext()
    return threadpool_limits(limits=1)


def warm_allocator():
    """Put the allocator in one state for every contender, whatever ran before: glibc hands blocks
    above its mmap threshold (128 KiB until the first large block is freed) back to the system
    when freed, so until then every temporary of a few MB page-faults afresh. A peer's masked
    Tucker at 60^3 (1.7 MB temporaries) ran 3x slower before a larger block had been freed than
    after. One 30 MiB block (below glibc's largest threshold, 32 MiB) freed raises it for all."""
    np.ones(30 * 2**20 // 8)


def timed(fn, *args, repeat: int = 1, **kwargs):
    """(best wall time in seconds over ``repeat`` runs, result of the last run)."""
    best, out = np.inf, None
    for _ in range(repeat):
        t0 = time.perf_counter()
        out = fn(*args, **kwargs)
        best = min(best, time.perf_counter() - t0)
    return best, out


def peak_memory(fn, *args, **kwargs):
    """(peak bytes allocated through Python/NumPy while ``fn`` ran, result)."""
    tracemalloc.start()
    try:
        out = fn(*args, **kwargs)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    return peak, out


def gemm_gflops(n: int = 2000, repeat: int = 3) -> float:
    """This machine's float64 GEMM rate (GFLOP/s), the yardstick for 'fraction of peak'."""
    rng = np.random.default_rng(0)
    A, B = rng.standard_normal((n, n)), rng.standard_normal((n, n))
    A @ B
    t, _ = timed(lambda: A @ B, repeat=repeat)
    return 2 * n**3 / t / 1e9


def markdown_table(rows: list[dict], columns: list[str] | None = None, floatfmt: str = ".4g") -> str:
    columns = columns or list(rows[0])
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    for row in rows:
        cells = [format(row.get(c, ""), floatfmt) if isinstance(row.get(c), float) else str(row.get(c, ""))
                 for c in columns]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def write_results(name: str, records: list[dict], *, summary: str = "", columns=None, extra=None) -> Path:
    """Write ``<name>.json`` and ``<name>.md`` under benchmarks/results/; return the markdown path."""
    RESULTS.mkdir(parents=True, exist_ok=True)
    payload = {"benchmark": name, "machine": machine_info(), "records": records, **(extra or {})}
    (RESULTS / f"{name}.json").write_text(json.dumps(payload, indent=2, default=_jsonable))
    md = f"# {name}\n\n{summary}\n\n{markdown_table(records, columns) if records else '(no records)'}\n"
    path = RESULTS / f"{name}.md"
    path.write_text(md)
    return path


def load_results(name: str) -> dict:
    """The payload a benchmark wrote to ``<name>.json``: redraw its picture without rerunning it."""
    return json.loads((RESULTS / f"{name}.json").read_text())


def plot_path(name: str) -> Path:
    RESULTS.mkdir(parents=True, exist_ok=True)
    return RESULTS / f"{name}.png"


def _jsonable(x):
    if isinstance(x, (np.floating, np.integer)):
        return x.item()
    if isinstance(x, np.ndarray):
        return x.tolist()
    return str(x)


def seed_means(records: list[dict], keys: tuple, means: tuple, first: tuple = ()) -> list[dict]:
    """One row per cell (the records sharing ``keys``, in sorted order): the keys, the number of
    seeds, the first record's ``first`` fields and the mean of each of ``means``."""
    cells: dict = {}
    for r in records:
        cells.setdefault(tuple(r[k] for k in keys), []).append(r)
    return [{**dict(zip(keys, cell)), "seeds": len(rs), **{f: rs[0][f] for f in first},
             **{m: float(np.mean([r[m] for r in rs])) for m in means}}
            for cell, rs in sorted(cells.items())]
