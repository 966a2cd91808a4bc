"""The private mixture's release geometry on a grid of sizes: before and after, against the
non-private fit in the same run.

``PrivateGaussianMixture`` releases its symmetric arrays (Analyze Gauss's d x d matrix, the power
whitening's projection, the whitened k^3 tensor) in the Frobenius geometry (``_frobenius``,
``docs/derivations/latent.rst``): the same sensitivities, the same event, less noise on the
repeated entries. The grid: spherical mixtures of ``make_gaussian_mixture`` (separation 0.5, sigma
1, ``data_norm`` from the generator's parameters), (k, d) in {(5, 30), (10, 100)}, n in {1e4, 1e5,
1e6} (1e6 at (5, 30) only: 1e6 x 100 rows are 800 MB), epsilon in {0.5, 1, 4}, delta 1e-5, two
seeds each. Error: relative Frobenius error of the matched means, as ``bench_latent``.

Run ``python benchmarks/bench_latent_grid.py``: a few minutes, one BLAS thread.
"""
from __future__ import annotations

import sys
import warnings
from pathlib import Path

import numpy as np

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks._common import markdown_table, plot_path, seed_means, write_results  # noqa: E402
from dptensor.datasets import gaussian_mixture_norm_bound, make_gaussian_mixture  # noqa: E402
from dptensor.latent import PrivateGaussianMixture, match_rows  # noqa: E402

NAME = "latent_grid"
SHAPES = ((5, 30), (10, 100))
SIZES = (10_000, 100_000, 1_000_000)
EPSILONS = (0.5, 1.0, 4.0)
SEEDS = (0, 1)


class PlainMixture(PrivateGaussianMixture):
    """The previous release: every symmetric array released on its plain distinct entries."""

    _frobenius = False


def means_error(means, true):
    perm, _ = match_rows(means, true)
    return float(np.linalg.norm(means[perm] - true) / np.linalg.norm(true))


def cells():
    for k, d in SHAPES:
        for n in SIZES:
            if n * d <= 4e7:
                yield k, d, n


def run() -> list[dict]:
    from threadpoolctl import threadpool_limits

    records = []
    with warnings.catch_warnings(), threadpool_limits(1):
        warnings.simplefilter("ignore")
        for k, d, n in cells():
            for seed in SEEDS:
                X, means, _, _ = make_gaussian_mixture(n, d, k, separation=0.5, random_state=seed)
                bound = gaussian_mixture_norm_bound(means, 1.0, d)
                exact = means_error(PrivateGaussianMixture(k, random_state=seed).fit(X).means_,
                                    means)
                for eps in EPSILONS:
                    kw = dict(epsilon=eps, delta=1e-5, data_norm=bound, random_state=seed)
                    before = means_error(PlainMixture(k, **kw).fit(X).means_, means)
                    after = means_error(PrivateGaussianMixture(k, **kw).fit(X).means_, means)
                    records.append({"k": k, "d": d, "n": n, "epsilon": eps, "seed": seed,
                                    "non_private": exact, "before": before, "after": after,
                                    "before_ratio": before / exact, "after_ratio": after / exact})
                    print(records[-1], flush=True)
                X = None
    _plot(records)
    write_report(records)
    return records


def _mean_cells(records):
    return seed_means(records, ("k", "d", "n", "epsilon"),
                      ("non_private", "before", "after", "before_ratio", "after_ratio"))


def _plot(records):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = _mean_cells(records)
    fig, axes = plt.subplots(1, len(SHAPES), figsize=(11, 3.8), constrained_layout=True)
    for ax, (k, d) in zip(axes, SHAPES):
        for eps, color in zip(EPSILONS, ("C0", "C1", "C2")):
            mine = [r for r in rows if (r["k"], r["d"], r["epsilon"]) == (k, d, eps)]
            ns = [r["n"] for r in mine]
            ax.loglog(ns, [r["before_ratio"] for r in mine], "o--", color=color,
                      label=f"epsilon={eps:g}, before")
            ax.loglog(ns, [r["after_ratio"] for r in mine], "s-", color=color,
                      label=f"epsilon={eps:g}, after")
        ax.axhline(3.0, color="grey", lw=1, ls=":")
        ax.set_xlabel("n (rows)")
        ax.set_ylabel("error / non-private error")
        ax.set_title(f"private mixture, k={k}, d={d} (dotted: 3x)", fontsize=9)
    axes[-1].legend(fontsize=7, loc="center left", bbox_to_anchor=(1.02, 0.5))
    fig.savefig(plot_path(NAME), dpi=100)
    plt.close(fig)


def write_report(records):
    rows = _mean_cells(records)
    wins = sum(r["after"] < r["before"] for r in rows)
    summary = (f"Private Gaussian mixture, plain release (before) against the Frobenius geometry "
               f"(after), means of {len(SEEDS)} seeds, error over the non-private fit's in the "
               f"same run: after is smaller in {wins} of {len(rows)} cells.")
    cols = ["k", "d", "n", "epsilon", "non_private", "before", "after", "before_ratio",
            "after_ratio"]
    text = summary + "\n\n" + markdown_table(rows, cols)
    write_results(NAME, records, summary=text, columns=["k", "d"])
    from benchmarks import _common

    (_common.RESULTS / f"{NAME}.md").write_text(f"# {NAME}\n\n{text}\n")


if __name__ == "__main__":
    run()
