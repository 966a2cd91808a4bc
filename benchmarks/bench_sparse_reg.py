"""The non-private default's ridge on sparse data: the noise variance of ``reg="auto"`` over the
residual degrees of freedom, against the old rule (over every entry).

The non-private default (``PrivateTensorCompletion(value_range=..., shape=...)``: ALS, rank 3,
``reg="auto"``) sets its ridge by empirical Bayes, noise variance over ``AUTO_PRIOR_VAR``. The old
rule estimated the noise variance by the training mean squared residual: where rows have few
entries each (1e5 ratings over 3e4 items: about 3 per item) the fit has nearly as many parameters
as entries, the residuals vanish with its overfitting, the ridge falls with them and the fit
overfits more (test RMSE 1.43 against the training mean's 1.09 in ``bench_scaling``). The new
rule divides the residual sum of squares by ``n - df``, ``df`` the ridge fits' effective degrees
of freedom (:func:`dptensor.algorithms.completion.als.noise_variance`).

Grid: the ratings-like tensors of ``bench_scaling`` (users x items x 10 periods, 1e5 ratings,
offsets plus a rank-3 model plus noise 0.8, 1-5 scale; items 1e3 .. 3e4 at 1000 users, users
1e3 .. 1e5 at 3000 items), MovieLens-shaped ratings matrices
(:func:`benchmarks.bench_user_level.ratings_like`, heavy-tailed counts, 1e3 .. 3e4 items) and
rank-3 CP tensors (:func:`dptensor.datasets.make_low_rank_tensor`, 20^3 to 60^3 and a
300 x 3000 matrix, densities 0.01 to 0.5, noiseless to SNR 1). Two seeds. Every error is on a
random tenth of the TRAINING entries held out for validation (no generator's test split is
read), beside the training mean and the offsets alone (global mean and shrunk row effects). Then
the MovieLens-100K-like synthetic matrix (:func:`benchmarks.bench_user_level.movielens_like`),
both splits, test RMSE of the default under each rule.

``python -m benchmarks.bench_sparse_reg [--quick | --redraw]`` writes
``benchmarks/results/sparse_reg.{json,md,png}``.
"""
from __future__ import annotations

import functools
import sys
import warnings
from unittest import mock

import numpy as np

from benchmarks._common import load_results, plot_path, timed, write_results
from benchmarks.bench_scaling import ratings
from benchmarks.bench_user_level import movielens_like, ratings_like
from dptensor.algorithms.completion import als as als_module
from dptensor.algorithms.completion.modes import solvers
from dptensor.algorithms.completion.observations import Observations
from dptensor.algorithms.completion.offsets import row_offsets
from dptensor.completion import PrivateTensorCompletion
from dptensor.datasets import make_low_rank_tensor

SEEDS = (0, 1)
#: (name, kind, arguments)
CELLS = [
    ("ratings 1000u x 1e3i", "ratings", (1000, 1000)),
    ("ratings 1000u x 3e3i", "ratings", (1000, 3000)),
    ("ratings 1000u x 1e4i", "ratings", (1000, 10_000)),
    ("ratings 1000u x 3e4i", "ratings", (1000, 30_000)),
    ("ratings 1e4u x 3e3i", "ratings", (10_000, 3000)),
    ("ratings 1e5u x 3e3i", "ratings", (100_000, 3000)),
    ("ML-like 943 x 1682", "mllike", (943, 1682, 100_000)),
    ("ML-like 1000 x 1e4", "mllike", (1000, 10_000, 100_000)),
    ("ML-like 1000 x 3e4", "mllike", (1000, 30_000, 100_000)),
    ("CP 20^3, half, SNR 1", "tensor", ((20, 20, 20), 0.5, 1.0)),
    ("CP 40^3, 0.1, SNR 4", "tensor", ((40, 40, 40), 0.9, 4.0)),
    ("CP 40^3, 0.02, SNR 4", "tensor", ((40, 40, 40), 0.98, 4.0)),
    ("CP 60^3, 0.1, noiseless", "tensor", ((60, 60, 60), 0.9, None)),
    ("CP 300 x 3000, 0.01, SNR 4", "tensor", ((300, 3000), 0.99, 4.0)),
]
RULES = ("old", "new")


def cell_data(kind, args, seed):
    """``(X, y, shape, value_range)``: the cell's training entries only."""
    if kind == "ratings":
        n_users, n_items = args
        X, y, _, _, shape = ratings(n_items, n_users, seed=seed)
        return X, y, shape, (1, 5)
    if kind == "mllike":
        n_users, n_items, n = args
        data = ratings_like(n_users, n_items, n, random_state=seed)
        return data["indices"], data["values"], data["shape"], (1, 5)
    shape, missing, snr = args
    data = make_low_rank_tensor(shape, 3, missing_ratio=missing, snr=snr, random_state=seed)
    return data["indices"], data["values"], tuple(shape), None


def fit_default(X, y, shape, value_range, rule):
    """The non-private default; ``rule="old"``: the noise variance over every entry."""
    patched = functools.partial(als_module.als, dof=rule == "new")
    with mock.patch.object(solvers, "als", lambda *a, dof=None, **k: patched(*a, **k)), \
            warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return PrivateTensorCompletion(value_range=value_range, shape=shape,
                                       random_state=0).fit(X, y)


def offsets_only(X, y, shape, Xv):
    """Predictions at ``Xv`` of the global mean and row effects, shrunk by empirical Bayes."""
    intercept, biases = row_offsets(Observations(X, shape), y, empirical_bayes=True)
    return intercept + sum(b[Xv[:, m]] for m, b in enumerate(biases))


def _rmse(pred, y):
    return float(np.sqrt(np.mean((pred - y) ** 2)))


def grid_row(name, kind, args, seed):
    X, y, shape, vr = cell_data(kind, args, seed)
    hold = np.random.default_rng(1000 + seed).random(len(y)) < 0.1
    Xf, yf, Xv, yv = X[~hold], y[~hold], X[hold], y[hold]
    row = {"cell": name, "seed": seed, "n_train": int(len(yf)),
           "per_row_min_mode": float(len(yf) / max(shape)),
           "mean": _rmse(np.full(len(yv), yf.mean()), yv),
           "offsets": _rmse(offsets_only(Xf, yf, shape, Xv), yv)}
    for rule in RULES:  # interleaved in one run: timings under the same load
        t, model = timed(fit_default, Xf, yf, shape, vr, rule)
        row[rule] = _rmse(model.predict(Xv), yv)
        row[f"{rule}_train"] = _rmse(model.predict(Xf), yf)
        row[f"{rule}_s"] = t
    print(row, flush=True)
    return row


def movielens_rows():
    rows = []
    for split in ("ua", "ub"):
        data = movielens_like(split)
        X, y, Xt, yt = data["indices"], data["values"], data["test_indices"], data["test_values"]
        row = {"cell": f"ML-100K-like {split} (test)", "seed": 0, "n_train": int(len(y)),
               "mean": _rmse(np.full(len(yt), y.mean()), yt),
               "offsets": _rmse(offsets_only(X, y, data["shape"], Xt), yt)}
        for rule in RULES:
            t, model = timed(fit_default, X, y, data["shape"], (1, 5), rule)
            row[rule], row[f"{rule}_s"] = _rmse(model.predict(Xt), yt), t
        print(row, flush=True)
        rows.append(row)
    return rows


def plot(records):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cells = list(dict.fromkeys(r["cell"] for r in records))
    fig, ax = plt.subplots(figsize=(12, 5.5))
    width = 0.27
    for j, (key, label) in enumerate([("offsets", "offsets only"), ("old", "old rule (over n)"),
                                      ("new", "new rule (over n - df)")]):
        ratio = [np.mean([r[key] / r["mean"] for r in records if r["cell"] == c]) for c in cells]
        ax.bar(np.arange(len(cells)) + (j - 1) * width, ratio, width, label=label)
    ax.axhline(1.0, color="k", lw=1, ls="--", label="training mean")
    ax.set_xticks(np.arange(len(cells)))
    ax.set_xticklabels(cells, rotation=40, ha="right", fontsize=8)
    ax.set_ylabel("validation RMSE / training mean's (seed mean)")
    ax.set_title('Non-private default, reg="auto": noise variance over n - df against over n')
    ax.set_ylim(0, 1.5)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(plot_path("sparse_reg"), dpi=110)
    plt.close(fig)


SUMMARY = (
    "Validation RMSE (a random tenth of the training entries held out; no test split read except "
    "the MovieLens-like rows' own test sets) of the non-private default, `reg=\"auto\"` with the "
    "noise variance over every entry (old) and over the residual degrees of freedom (new), beside "
    "the training mean and the offsets alone. `per_row_min_mode`: entries per row of the largest "
    "mode. Times in seconds under shared load.")


def run(quick=False):
    """The grid (``quick``: its first two cells, one seed) and the MovieLens-like rows."""
    cells, seeds = (CELLS[:2], SEEDS[:1]) if quick else (CELLS, SEEDS)
    records = [grid_row(name, kind, args, seed) for name, kind, args in cells for seed in seeds]
    records += movielens_rows()
    write_results("sparse_reg", records, summary=SUMMARY)
    plot(records)
    return records


def main(argv):
    if "--redraw" in argv:
        plot(load_results("sparse_reg")["records"])
        return
    run(quick="--quick" in argv)


if __name__ == "__main__":
    main(sys.argv[1:])
