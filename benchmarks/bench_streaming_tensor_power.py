"""StreamingTensorPower: memory and time against n and d, error against samples seen, private streaming
against private batch.

* ``scale_n`` / ``scale_d``: peak traced memory and wall time of the stream, of the batch method
  on the implicit moment (:class:`~dptensor.PrivateTensorDecomposition`, which must also hold X),
  and of forming the dense d x d x d moment, where it fits.
* ``error``: recovery error against the number of samples seen, for several d, beside the rate of
  Theorem 3.1 (error ~ C d / (lambda sqrt(n)) per block of n rows) and the O(k d^2) sample count of
  Corollary 3.1.
* ``private``: private streaming against private batch (Alg. 3, exact calibration) at equal
  epsilon, on the same rows.

Run ``python -m benchmarks.bench_streaming_tensor_power [--quick]``; results go to
``benchmarks/results/streaming_tensor_power.{json,md,png}``.
"""
from __future__ import annotations

import math
import sys
import time
import tracemalloc

import numpy as np

from benchmarks._common import markdown_table, plot_path, write_results
from dptensor import PrivateTensorDecomposition, StreamingTensorPower
from dptensor.algorithms.operators import moment_tensor
from dptensor.datasets import make_orthogonal_moment_data
from dptensor.metrics import recovery_error

NAME = "streaming_tensor_power"
K, L, R = 5, 10, 10          # scaling runs: k components, L restarts, R batch power steps
BLOCK = 2000                 # scaling runs: the stream's block size (its R is n / (k BLOCK))
CHUNK = 10_000               # rows per chunk handed to the stream
DENSE_LIMIT = 200            # form the dense moment only up to this d (d^3 doubles) ...
DENSE_MAX_N = 300_000        # ... and this n (it costs O(n d^3))


def _measure(fn):
    """(wall seconds, peak bytes traced while fn ran, result). Inputs allocated before are not counted."""
    tracemalloc.start()
    try:
        t0 = time.perf_counter()
        out = fn()
        seconds = time.perf_counter() - t0
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    return seconds, peak, out


def _chunks(X, n_rows, chunk=CHUNK):
    """``n_rows`` rows of X as views, cycling X if needed: a stream that allocates nothing itself."""
    done = 0
    while done < n_rows:
        start = done % len(X)
        step = min(chunk, n_rows - done, len(X) - start)
        yield X[start:start + step]
        done += step


def _scaling_row(part, X, n, d):
    """One size: the stream (fixed block, R = n / (k block)) against batch and dense on the same rows."""
    R_stream = max(1, n // (K * BLOCK))
    stream = StreamingTensorPower(K, n_restarts=L, n_iter=R_stream, batch_size=BLOCK, random_state=0)
    t_s, m_s, _ = _measure(lambda: stream.fit(_chunks(X, K * R_stream * BLOCK)))
    row = {"part": part, "case": f"n={n} d={d}", "n": n, "d": d, "stream_R": R_stream,
           "stream_s": t_s, "stream_peak_MB": m_s / 2**20, "data_MB": n * d * 8 / 2**20}
    batch = PrivateTensorDecomposition(K, n_restarts=L, n_iter=R, moment="implicit", random_state=0)
    t_b, m_b, _ = _measure(lambda: batch.fit(X[:n]))
    row.update(batch_s=t_b, batch_peak_MB=m_b / 2**20)
    if d <= DENSE_LIMIT and n <= DENSE_MAX_N:
        t_d, m_d, _ = _measure(lambda: moment_tensor(X[:n]))
        row.update(dense_form_s=t_d, dense_peak_MB=m_d / 2**20)
    print(row, flush=True)
    return row


def bench_scale_n(quick):
    """Memory flat in n: at a fixed block size the stream's peak is the same for 10^4 and 10^6 rows."""
    d = 50
    sizes = [10_000, 30_000] if quick else [10_000, 100_000, 300_000, 1_000_000]
    X, _, _ = make_orthogonal_moment_data(max(sizes), d, K, noise=0.5, random_state=0)
    return [_scaling_row("scale_n", X, n, d) for n in sizes]


def bench_scale_d(quick):
    """Linear in d: the stream holds O(d (k + L)) numbers plus a micro-block of at most ~4 MB."""
    n = 5_000 if quick else 20_000
    rows = []
    for d in ([50, 200] if quick else [50, 200, 500, 1000, 2000]):
        X, _, _ = make_orthogonal_moment_data(n, d, K, noise=0.5, random_state=0)
        rows.append(_scaling_row("scale_d", X, n, d))
        del X
    return rows


def bench_error(quick):
    """Error against samples seen, for several d (k=5, L=10, R=4, noise 0.5)."""
    k, L_, R_ = 5, 10, 4
    blocks = [250, 1000] if quick else [250, 500, 1000, 2000, 4000, 8000, 16000]
    rows = []
    for d in ([25] if quick else [25, 50, 100]):
        X, lam, V = make_orthogonal_moment_data(k * R_ * max(blocks), d, k, noise=0.5, random_state=1)
        for block in blocks:
            n_seen = k * R_ * block
            errs = []
            for seed in (0, 1):
                est = StreamingTensorPower(k, n_restarts=L_, n_iter=R_, batch_size=block, random_state=seed)
                est.fit(_chunks(X, n_seen))
                errs.append(recovery_error(est.components_, V))
            errs = np.array(errs)
            rows.append({"part": "error", "case": f"d={d} N={n_seen}", "d": d, "block": block,
                         "n_seen": n_seen, "err_max": float(errs.max(axis=1).mean()),
                         "err_mean": float(errs.mean()),
                         # Theorem 3.1's constant: err_i * lambda_i * sqrt(block) / d (sigma = 1 here)
                         "C_observed": float(np.max(errs * lam * math.sqrt(block) / d)),
                         "corollary_samples_kd2": k * d * d})
            print(rows[-1], flush=True)
    return rows


def bench_private(quick):
    """Private streaming against private batch (Alg. 3, exact calibration) at equal epsilon, same rows."""
    d, k, L_, R_, B = 20, 3, 5, 5, 4.0
    sizes = [10_000, 30_000] if quick else [10_000, 30_000, 100_000, 300_000, 1_000_000]
    X, _, V = make_orthogonal_moment_data(max(sizes), d, k, eigenvalues=[2.0, 1.5, 1.0], noise=0.1,
                                          random_state=2)
    rows = []
    for eps in ([4.0] if quick else [1.0, 4.0]):
        for n in sizes:
            block = n // (k * R_)
            stream = StreamingTensorPower(k, n_restarts=L_, n_iter=R_, batch_size=block, epsilon=eps,
                                          data_norm=B, random_state=0)
            t_s, _, _ = _measure(lambda: stream.fit(X[:k * R_ * block]))
            batch = PrivateTensorDecomposition(k, n_restarts=L_, n_iter=R_, epsilon=eps, data_norm=B,
                                               random_state=0)
            t_b, _, _ = _measure(lambda: batch.fit(X[:n]))
            rows.append({"part": "private", "case": f"eps={eps:g} n={n}", "epsilon": eps, "n": n,
                         "block": block, "stream_err": float(recovery_error(stream.components_, V).max()),
                         "batch_err": float(recovery_error(batch.components_, V).max()),
                         "stream_z": stream.privacy_cost_.noise_multiplier,
                         "batch_z": batch.privacy_cost_.noise_multiplier,
                         "stream_s": t_s, "batch_s": t_b})
            print(rows[-1], flush=True)
    return rows


def _plot(records):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import matplotlib.ticker

    fig, axes = plt.subplots(2, 3, figsize=(16, 9))
    for col, (part, key) in enumerate((("scale_n", "n"), ("scale_d", "d"))):
        rows = [r for r in records if r["part"] == part]
        x = [r[key] for r in rows]
        ax_m, ax_t = axes[0, col], axes[1, col]
        ax_m.plot(x, [r["stream_peak_MB"] for r in rows], "o-", label="stream (working)")
        ax_m.plot(x, [r["batch_peak_MB"] for r in rows], "s-", label="batch implicit (working)")
        ax_m.plot(x, [r["batch_peak_MB"] + r["data_MB"] for r in rows], "s--",
                  label="batch implicit + X held")
        dense = [(r[key], r["dense_peak_MB"]) for r in rows if "dense_peak_MB" in r]
        if dense:
            ax_m.plot(*zip(*dense), "^-", label="forming dense moment")
        ax_t.plot(x, [r["stream_s"] for r in rows], "o-", label="stream")
        ax_t.plot(x, [r["batch_s"] for r in rows], "s-", label="batch implicit")
        dt = [(r[key], r["dense_form_s"]) for r in rows if "dense_form_s" in r]
        if dt:
            ax_t.plot(*zip(*dt), "^-", label="forming dense moment")
        for ax, what in ((ax_m, "peak traced memory (MB)"), (ax_t, "wall time (s)")):
            ax.set_xscale("log")
            ax.set_yscale("log")
            ax.set_xlabel(key + (" (samples)" if key == "n" else " (features)"))
            ax.set_ylabel(what)
            ax.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
            ax.legend(fontsize=8)
        ax_m.set_title(f"memory against {key}" + (" (d=50)" if key == "n" else ""))
        ax_t.set_title(f"time against {key}")

    ax = axes[0, 2]
    err = [r for r in records if r["part"] == "error"]
    good = [r["C_observed"] for r in err if r["err_max"] < 0.5]
    C = float(np.median(good)) if good else 0.2
    for d in sorted({r["d"] for r in err}):
        rows = [r for r in err if r["d"] == d]
        N = np.array([r["n_seen"] for r in rows], dtype=float)
        line, = ax.plot(N, [r["err_max"] for r in rows], "o-", label=f"d={d}")
        # Theorem 3.1 shape: C d / (lambda_min sqrt(block)), block = N / (k R) = N / 20, lambda_min = 0.5.
        ax.plot(N, C * d / (0.5 * np.sqrt(N / 20.0)), ":", color=line.get_color())
        ax.axvline(5 * d * d, color=line.get_color(), ls="--", lw=0.8)
    ax.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("samples seen N = k R n")
    ax.set_ylabel("max recovery error")
    ax.set_title(f"error vs samples\n(dotted: {C:.2f} d / (lambda_min sqrt(block)); dashed: N = k d^2)",
                 fontsize=10)
    ax.legend(fontsize=8)

    ax = axes[1, 2]
    priv = [r for r in records if r["part"] == "private"]
    for eps in sorted({r["epsilon"] for r in priv}):
        rows = [r for r in priv if r["epsilon"] == eps]
        n = [r["n"] for r in rows]
        line, = ax.plot(n, [r["stream_err"] for r in rows], "o-", label=f"stream eps={eps:g}")
        ax.plot(n, [r["batch_err"] for r in rows], "s--", color=line.get_color(), label=f"batch eps={eps:g}")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("n (samples)")
    ax.set_ylabel("max recovery error")
    ax.set_title("private streaming vs private batch (d=20, k=3)")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(plot_path(NAME), dpi=110)
    plt.close(fig)


def _summary(records, quick):
    lines = ["Peak traced memory (tracemalloc) and wall time; the data X is allocated before each "
             "measurement and is not counted (the batch method must hold it: `data_MB`). "
             f"Scaling runs: k={K}, L={L}, chunks of {CHUNK} rows; the stream reads the n rows once, "
             f"in blocks of {BLOCK} (so its R is n / (k {BLOCK})); the batch method runs R={R} steps on "
             "all n rows; "
             "`dense` forms the d^3 moment (the foundation's moment_tensor). Wall times come from a "
             "shared machine (see `machine` in the JSON): compare methods within a row more than rows "
             "with each other." + (" Quick mode: small sizes." if quick else "")]
    sn = [r for r in records if r["part"] == "scale_n"]
    if sn:
        lines.append(f"\nStream peak memory from n={sn[0]['n']} to n={sn[-1]['n']}: "
                     f"{sn[0]['stream_peak_MB']:.2f} MB -> {sn[-1]['stream_peak_MB']:.2f} MB "
                     "(same block size, so the same state and micro-block); "
                     f"X itself is {sn[-1]['data_MB']:.0f} MB at the largest n.")
    sd = [r for r in records if r["part"] == "scale_d"]
    if sd:
        lines.append(f"Stream peak memory from d={sd[0]['d']} to d={sd[-1]['d']}: "
                     f"{sd[0]['stream_peak_MB']:.2f} -> {sd[-1]['stream_peak_MB']:.2f} MB; the dense moment "
                     f"would need {sd[-1]['d'] ** 3 * 8 / 2**30:.0f} GiB at d={sd[-1]['d']}.")
    err = [r for r in records if r["part"] == "error"]
    if err:
        good = [r["C_observed"] for r in err if r["err_max"] < 0.5]
        if good:
            lines.append("\nTheorem 3.1 constant C = err * lambda * sqrt(block) / d where the error is "
                         f"below 0.5: {min(good):.3f} .. {max(good):.3f}.")
        for d in sorted({r["d"] for r in err}):
            rows = [r for r in err if r["d"] == d and r["err_max"] < 0.5]
            if len(rows) >= 2:
                x, y = np.log([r["block"] for r in rows]), np.log([r["err_max"] for r in rows])
                slope = np.polyfit(x, y, 1)[0]
                lines.append(f"d={d}: error ~ block^{slope:.2f} where below 0.5 (theory: -0.5).")
        reach = []
        for d in sorted({r["d"] for r in err}):
            rows = [r for r in err if r["d"] == d and r["err_max"] <= 0.25]
            if rows:
                reach.append((d, min(r["n_seen"] for r in rows)))
        if len(reach) >= 2:
            slope = np.polyfit(np.log([p[0] for p in reach]), np.log([p[1] for p in reach]), 1)[0]
            lines.append("Samples needed for max error <= 0.25: "
                         + ", ".join(f"d={d}: {n}" for d, n in reach)
                         + f" (growth exponent in d: {slope:.2f}; Corollary 3.1 bounds it by 2).")
    priv = [r for r in records if r["part"] == "private"]
    if priv:
        lines.append("\nPrivate (d=20, k=3, L=5, R=5, B=4): the stream pays one Gaussian release "
                     "(z = stream_z) for all its k R blocks but each block sees n/(k R) rows; the batch "
                     "method divides the budget over k L (R+1) queries on all n rows (z = batch_z).")
    return "\n".join(lines)


def run(quick: bool = False) -> list[dict]:
    records = bench_scale_n(quick) + bench_scale_d(quick) + bench_error(quick) + bench_private(quick)
    columns = ["part", "case", "stream_s", "stream_peak_MB", "batch_s", "batch_peak_MB", "data_MB",
               "dense_form_s", "dense_peak_MB", "stream_err", "batch_err", "err_max", "C_observed",
               "stream_z", "batch_z"]
    write_results(NAME, records, summary=_summary(records, quick), columns=columns)
    _plot(records)
    return records


if __name__ == "__main__":
    recs = run(quick="--quick" in sys.argv[1:])
    print(markdown_table(recs, ["part", "case", "stream_s", "stream_peak_MB", "batch_s", "batch_peak_MB",
                                "stream_err", "batch_err", "err_max"]))
