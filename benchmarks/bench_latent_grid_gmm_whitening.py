"""The private mixture's whitening on a grid of sizes: Analyze Gauss's d x d release
(``whitening="dense"``) against the private power method (``"power"``) and ``"auto"``, with the
non-private fit in the same run.

Spherical mixtures of ``make_gaussian_mixture`` (separation 0.5, sigma 1, ``data_norm`` from the
generator's parameters, as ``bench_latent_grid``), (k, d) in {(5, 30), (10, 100), (5, 300)}, n
in {1e4, 1e5}, epsilon in {0.5, 1, 4}, delta 1e-5, two seeds each. Error: relative Frobenius
error of the matched means.

Run ``python benchmarks/bench_latent_grid_gmm_whitening.py``: a few minutes, one BLAS thread.
"""
from __future__ import annotations

import sys
import warnings
from pathlib import Path

import numpy as np

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks._common import markdown_table, one_thread, plot_path, seed_means, write_results  # noqa: E402
from dptensor.datasets import gaussian_mixture_norm_bound, make_gaussian_mixture  # noqa: E402
from dptensor.latent import PrivateGaussianMixture, match_rows  # noqa: E402

NAME = "latent_grid_gmm_whitening"
SHAPES = ((5, 30), (10, 100), (5, 300))
SIZES = (10_000, 100_000)
EPSILONS = (0.5, 1.0, 4.0)
SEEDS = (0, 1)
METHODS = ("dense", "power", "auto")
STYLES = {"dense": ("k", "o-"), "power": ("C0", "o--"), "auto": ("C3", "s:")}


def means_error(means, true):
    perm, _ = match_rows(means, true)
    return float(np.linalg.norm(means[perm] - true) / np.linalg.norm(true))


def run() -> list[dict]:
    records = []
    with warnings.catch_warnings(), one_thread():
        warnings.simplefilter("ignore")
        for k, d in SHAPES:
            for n in SIZES:
                for seed in SEEDS:
                    X, means, _, _ = make_gaussian_mixture(n, d, k, separation=0.5,
                                                           random_state=seed)
                    bound = gaussian_mixture_norm_bound(means, 1.0, d)
                    exact = means_error(PrivateGaussianMixture(k, random_state=seed).fit(
                        X).means_, means)
                    for eps in EPSILONS:
                        for method in METHODS:
                            model = PrivateGaussianMixture(
                                k, epsilon=eps, delta=1e-5, data_norm=bound, whitening=method,
                                random_state=seed).fit(X)
                            records.append({
                                "k": k, "d": d, "n": n, "epsilon": eps, "seed": seed,
                                "whitening": method, "resolved": model.whitening_,
                                "error": means_error(model.means_, means), "non_private": exact})
                            print(records[-1], flush=True)
                    X = None
    _plot(records)
    write_report(records)
    return records


def _means(records):
    rows = seed_means(records, ("k", "d", "n", "epsilon", "whitening"), ("error", "non_private"),
                      first=("resolved",))
    return [{**row, "ratio": row["error"] / row["non_private"]} for row in rows]


def _plot(records):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = _means(records)
    cells = [(k, d, n) for k, d in SHAPES for n in SIZES]
    fig, axes = plt.subplots(1, len(cells), figsize=(3.0 * len(cells), 3.4),
                             constrained_layout=True)
    for ax, (k, d, n) in zip(axes, cells):
        for method in METHODS:
            mine = [r for r in rows if (r["k"], r["d"], r["n"], r["whitening"]) == (k, d, n,
                                                                                  method)]
            colour, style = STYLES[method]
            ax.semilogx([r["epsilon"] for r in mine], [r["ratio"] for r in mine], style,
                        color=colour, label=method, ms=4)
        ax.set_xticks(EPSILONS, [f"{e:g}" for e in EPSILONS])
        ax.minorticks_off()
        ax.set_yscale("log")
        ax.set_xlabel("epsilon")
        ax.set_title(f"k={k}, d={d}, n={n:.0e}", fontsize=8)
    axes[0].set_ylabel("means error / non-private")
    axes[0].legend(fontsize=7)
    fig.savefig(plot_path(NAME), dpi=100)
    plt.close(fig)


def write_report(records):
    rows = _means(records)
    summary = ("Private Gaussian mixture, the whitening of each method (mean over the seeds) "
               "against the non-private fit (ratio), same run; auto resolves to the method in "
               "'resolved'.")
    text = summary + "\n\n" + markdown_table(rows, list(rows[0]))
    write_results(NAME, records, summary=text)
    from benchmarks import _common

    (_common.RESULTS / f"{NAME}.md").write_text(f"# {NAME}\n\n{text}\n")


if __name__ == "__main__":
    if "--plot" in sys.argv:
        from benchmarks._common import load_results

        _plot(load_results(NAME)["records"])
    else:
        run()
