"""PrivatePCA's methods at high dimension: Analyze Gauss, the power method and the clipped power
method, against scikit-learn's non-private PCA.

Spiked covariance (k = 5 spikes of 5 over the identity, Haar-random components), rows clipped by
the fit to ``data_norm = sqrt(d)`` (about their typical norm ``sqrt(d + 25)``, so most rows are
clipped a little), for d in {500, 1000}, n in {2e4, 1e5}, epsilon in {0.5, 1, 4}, the default
delta; ``n_components = 5``, ``n_oversamples = 5``; one seed per cell. The error is sin^2 of the
largest principal angle to the true top-5 subspace. This is the grid behind
``method="auto"``'s choice of the clipped power method for ``d >= 500``
(:data:`~dptensor.algorithms.pca_methods.MIN_CLIPPED_FEATURES`).

Run: ``python benchmarks/bench_pca_high_d.py`` (``--quick``: d = 500 and n = 2e4 only).
"""
from __future__ import annotations

import math
import sys
import time
import warnings
from pathlib import Path

from sklearn.decomposition import PCA

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks._common import load_results, plot_path, write_results  # noqa: E402
from dptensor import PrivatePCA  # noqa: E402
from dptensor.datasets import make_spiked_covariance  # noqa: E402
from dptensor.metrics import sin_theta_distance  # noqa: E402

NAME = "pca_high_d"
K, OVER, SPIKE = 5, 5, 5.0
METHODS = ("analyze_gauss", "power", "clipped_power")
EPSILONS = (0.5, 1.0, 4.0)


def cell(X, V, d, n, eps, method):
    """One private fit: its sin^2 and seconds."""
    start = time.perf_counter()
    with warnings.catch_warnings():  # delta vs 1/n and noise-dominated components: expected
        warnings.simplefilter("ignore")
        pca = PrivatePCA(K, epsilon=eps, data_norm=math.sqrt(d), method=method,
                         n_oversamples=OVER, random_state=0).fit(X)
    return sin_theta_distance(pca.components_, V), time.perf_counter() - start


def run(quick=False):
    dims, sizes = ((500,), (20000,)) if quick else ((500, 1000), (20000, 100000))
    records = []
    for d in dims:
        for n in sizes:
            X, V, _ = make_spiked_covariance(n, d, K, spike=SPIKE, random_state=0)
            exact = sin_theta_distance(PCA(K, svd_solver="full").fit(X).components_, V)
            for eps in EPSILONS:
                row = dict(d=d, n=n, epsilon=eps, non_private=exact)
                for method in METHODS:
                    row[method], row[method + "_s"] = cell(X, V, d, n, eps, method)
                row["best"] = min(METHODS, key=lambda m: row[m])
                print(row, flush=True)
                records.append(row)
    return records


def plot(records):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cells = sorted({(r["d"], r["n"]) for r in records})
    fig, axes = plt.subplots(1, len(cells), figsize=(4 * len(cells), 3.6), squeeze=False)
    for ax, (d, n) in zip(axes[0], cells):
        rows = [r for r in records if (r["d"], r["n"]) == (d, n)]
        eps = [r["epsilon"] for r in rows]
        for method in METHODS + ("non_private",):
            ax.plot(eps, [r[method] for r in rows], marker="o", label=method)
        ax.set(xscale="log", yscale="log", xlabel="epsilon", title=f"d={d}, n={n:.0e}")
        ax.set_xticks(EPSILONS, [f"{e:g}" for e in EPSILONS])
        ax.minorticks_off()
        ax.set_ylim(1e-3, 1.5)
    axes[0][0].set_ylabel("sin^2 to the true top-5 subspace")
    axes[0][-1].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(plot_path(NAME), dpi=110)


def main(argv=()):
    if "--plot" in argv:  # redraw from the committed numbers
        return plot(load_results(NAME)["records"])
    records = run(quick="--quick" in argv)
    summary = ("sin^2 of the largest principal angle (lower is better), one seed per cell; "
               "`_s` columns: seconds per fit. Rows clipped to data_norm = sqrt(d), k = 5, "
               "n_oversamples = 5, default delta.")
    write_results(NAME, records, summary=summary)
    plot(records)


if __name__ == "__main__":
    main(sys.argv[1:])
