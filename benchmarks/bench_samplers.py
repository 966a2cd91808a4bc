"""Exact (floating-point safe) releases against the continuous NumPy noise they replace.

First the goal rows: a Gaussian and a Laplace release of ``n`` values against NumPy's continuous
sampler of the same size (``rng.standard_normal(n)``), at ``n = 1e3`` and ``1e6``, the
contenders (the two releases, and each again on the samplers' NumPy path, the fallback without
numba) interleaved call by call and the median of each taken, so a burst of load on the shared
machine hits all of them alike.

For each of the library's largest releases, the time of ``value + continuous noise`` (today's
path: NumPy's ziggurat normals or inverse-CDF Laplace) and of the exact release on a grid
(:func:`dptensor.mechanisms.gaussian_release` and friends), side by side in one process, best of
``repeat`` runs, and their ratio. Timings on a shared machine are noisy: compare the ratios.
"""
from __future__ import annotations

import json
import os
import time

import numpy as np

from benchmarks._common import RESULTS, machine_info, markdown_table, timed
from dptensor.algorithms.operators import symmetrize_tensor
from dptensor.mechanisms import (above_threshold, gaussian_release, laplace_release,
                                  samplers, symmetric_gaussian_release)


# The library's continuous noise helpers before the exact releases replaced them, kept here verbatim
# as the baseline: NumPy's ziggurat normals and inverse-CDF Laplace draws on doubles.
def gaussian_noise(shape, sensitivity, noise_multiplier, rng, dtype=np.float64):
    scale = np.asarray(sensitivity, dtype=float) * float(noise_multiplier)
    return (rng.standard_normal(shape) * scale).astype(dtype, copy=False)


def laplace_noise(shape, sensitivity, epsilon, rng, dtype=np.float64):
    noise = rng.laplace(0.0, float(sensitivity) / float(epsilon), size=shape)
    return noise.astype(dtype, copy=False)


def symmetric_gaussian_tensor(d, sensitivity, noise_multiplier, rng, dtype=np.float64):
    G = np.triu(np.ones((d, d), dtype=bool))
    upper = G[:, :, None] & G[None, :, :]  # i <= j and j <= k
    E = np.zeros((d, d, d), dtype=dtype)
    E[upper] = gaussian_noise(int(upper.sum()), sensitivity, noise_multiplier, rng, dtype)
    sym = symmetrize_tensor(E) * 6.0
    counts = symmetrize_tensor(upper.astype(dtype)) * 6.0
    return (sym / counts).astype(dtype, copy=False)


def _old_above_threshold(queries, threshold, epsilon, rng, sensitivity=1.0):
    """Today's AboveThreshold before this change: continuous Laplace noise on doubles."""
    noisy_threshold = threshold + rng.laplace(0.0, 2.0 * sensitivity / epsilon)
    noisy = queries + rng.laplace(0.0, 4.0 * sensitivity / epsilon, size=queries.shape)
    hits = np.flatnonzero(noisy >= noisy_threshold)
    return int(hits[0]) if hits.size else None


def _old_symmetric_matrix(C, s, z, rng):
    """``C + E`` with E symmetric: the path of ``pca.analyze_gauss`` before this change."""
    d = C.shape[0]
    iu = np.triu_indices(d)
    E = np.zeros((d, d))
    E[iu] = gaussian_noise(iu[0].size, s, z, rng)
    return C + (E + np.triu(E, 1).T)


def cases(quick: bool):
    d_mat = 500 if quick else 2000
    n_lap = 100_000 if quick else 1_000_000
    d_step, L = (1000, 32) if quick else (5000, 100)
    d_ten = 40 if quick else 100
    rng = np.random.default_rng(0)
    C = rng.standard_normal((d_mat, d_mat))
    C = C + C.T
    ys = rng.uniform(0, 1, n_lap)
    Y = rng.standard_normal((d_step, L))
    s_cols = rng.uniform(0.5, 2.0, L)
    T = rng.standard_normal((d_ten,) * 3)
    q = np.sort(rng.uniform(0, 100, 50))
    return [
        (f"symmetric Gaussian matrix, d={d_mat}", d_mat * (d_mat + 1) // 2,
         lambda r: _old_symmetric_matrix(C, 1.0, 5.0, r),
         lambda r: symmetric_gaussian_release(C, 1.0, 5.0, r)),
        (f"Laplace input perturbation, {n_lap} values", n_lap,
         lambda r: ys + laplace_noise(ys.shape, 1.0, 1.0, r),
         lambda r: laplace_release(ys, 1.0, 1.0, r)),
        (f"power step noise, d x L = {d_step} x {L}, per-column sensitivity", d_step * L,
         lambda r: Y + gaussian_noise(Y.shape, s_cols, 3.0, r),
         lambda r: gaussian_release(Y, s_cols, 3.0, r)),
        (f"symmetric Gaussian tensor, d={d_ten}", d_ten * (d_ten + 1) * (d_ten + 2) // 6,
         lambda r: T + symmetric_gaussian_tensor(d_ten, 1.0, 5.0, r),
         lambda r: symmetric_gaussian_release(T, 1.0, 5.0, r)),
        ("AboveThreshold, 50 queries (one call)", 51,
         lambda r: _old_above_threshold(q, 60.0, 1.0, r),
         lambda r: above_threshold(q, 60.0, 1.0, r)),
        ("Gaussian release, 10 values (one call)", 10,
         lambda r: q[:10] + gaussian_noise(10, 1.0, 3.0, r),
         lambda r: gaussian_release(q[:10], 1.0, 3.0, r)),
    ]


SMALL_REPEAT = 200  # a call of microseconds needs many tries for its best time to settle
#: Calls of each contender in the goal rows, by size (interleaved; medians).
GOAL_REPEAT = {1_000: 2_001, 1_000_000: 21}


def _one(fn, rng) -> float:
    t0 = time.perf_counter()
    fn(rng)
    return time.perf_counter() - t0


def _numpy_path(release, *args):
    """A release on the samplers' NumPy path (the fallback without the compiled loops)."""
    kernel, samplers._KERNEL[:] = samplers._KERNEL[:], [None]
    try:
        return release(*args)
    finally:
        samplers._KERNEL[:] = kernel


def goal_rows(quick: bool) -> list[dict]:
    """A release of n values against ``rng.standard_normal(n)``: ratios of medians, interleaved."""
    rows = []
    for n, repeat in GOAL_REPEAT.items():
        repeat = max(11, repeat // 10) if quick else repeat
        value = np.random.default_rng(0).standard_normal(n)
        contenders = {"numpy": lambda r: r.standard_normal(n),
                      "gaussian": lambda r: gaussian_release(value, 1.0, 3.0, r),
                      "laplace": lambda r: laplace_release(value, 1.0, 1.0, r),
                      "gaussian_numpy_path": lambda r: _numpy_path(
                          gaussian_release, value, 1.0, 3.0, r),
                      "laplace_numpy_path": lambda r: _numpy_path(
                          laplace_release, value, 1.0, 1.0, r)}
        rng = np.random.default_rng(1)
        times = {name: [] for name in contenders}
        samplers.compiled_kernel()  # compiled (or loaded from the cache) before the clock
        for name, fn in contenders.items():  # warm-up
            fn(rng)
        names = list(contenders)
        for k in range(repeat):  # each round in a rotated order: no contender always runs first
            for name in names[k % len(names):] + names[:k % len(names)]:
                times[name].append(_one(contenders[name], rng))
        med = {name: float(np.median(t)) for name, t in times.items()}
        for kind in ("gaussian", "laplace"):
            rows.append({"release": f"{kind} release", "values": n, "repeats": repeat,
                         "numpy_standard_normal_s": med["numpy"], "release_s": med[kind],
                         "ratio": med[kind] / med["numpy"],
                         "goal": 5.0 if n <= 1_000 else 1.3,
                         "numpy_path_ratio": med[f"{kind}_numpy_path"] / med["numpy"]})
            print(f"{kind} release of {n}: {med[kind]:.3g}s, standard_normal {med['numpy']:.3g}s, "
                  f"ratio {med[kind] / med['numpy']:.2f}")
    return rows


def run(quick: bool = False) -> list[dict]:
    repeat = 3 if quick else 7
    load_before = os.getloadavg()[0]
    goals = goal_rows(quick)
    load_mid = os.getloadavg()[0]
    rows = []
    for name, n_draws, old, new in cases(quick):
        rng = np.random.default_rng(1)
        tries = repeat if n_draws > 1000 else SMALL_REPEAT
        # Alternated rounds, the best of all: a burst of load on the shared machine then hits both.
        t_old = t_new = np.inf
        for _ in range(2):
            t_old = min(t_old, timed(old, rng, repeat=tries)[0])
            t_new = min(t_new, timed(new, rng, repeat=tries)[0])
        rows.append({"release": name, "noise draws": n_draws, "continuous_s": t_old,
                     "exact_s": t_new, "ratio": t_new / t_old,
                     "exact_ns_per_draw": 1e9 * t_new / n_draws})
        print(f"{name}: continuous {t_old:.4f}s, exact {t_new:.4f}s, ratio {t_new / t_old:.2f}")
    load_after = os.getloadavg()[0]
    RESULTS.mkdir(parents=True, exist_ok=True)
    info = machine_info()
    (RESULTS / "samplers.json").write_text(json.dumps(
        {"machine": info, "load": [load_before, load_mid, load_after], "rounds": 2, "repeat": repeat,
         "small_repeat": SMALL_REPEAT, "goals": goals, "records": rows}, indent=2))
    md = ["# samplers", "",
          "## Releases against NumPy's continuous sampler of the same size", "",
          "A Gaussian (`gaussian_release(value, 1, 3, rng)`) and a Laplace release "
          "(`laplace_release(value, 1, 1, rng)`) of n values against `rng.standard_normal(n)`, "
          "the contenders interleaved call by call, medians of `repeats` calls each; `goal` is "
          "the ratio aimed at. The releases run the samplers' compiled loops (numba, the `fast` "
          "extra); `numpy_path_ratio` is the same release on the NumPy path, the fallback "
          "without numba. "
          f"Load average before/after: {load_before:.1f}/{load_mid:.1f}.", "",
          markdown_table(goals, ["release", "values", "repeats", "numpy_standard_normal_s",
                                 "release_s", "ratio", "goal", "numpy_path_ratio"]), "",
          "## The library's largest releases against the continuous noise they replace", "",
          f"Best of 2 x {repeat} runs of each release ({SMALL_REPEAT} for the one-call rows), "
          "alternating continuous NumPy noise (the path before the exact releases, "
          "`value + noise`) and the exact release on a grid, in one process. "
          f"Load average before/after: {load_before:.1f}/{load_after:.1f} on {info['cpus']} "
          "CPUs (a shared machine: timings are noisy, compare the ratios).", "",
          markdown_table(rows, ["release", "noise draws", "continuous_s", "exact_s", "ratio",
                                "exact_ns_per_draw"])]
    (RESULTS / "samplers.md").write_text("\n".join(md) + "\n")
    return rows


if __name__ == "__main__":
    import sys

    run(quick="--quick" in sys.argv)
