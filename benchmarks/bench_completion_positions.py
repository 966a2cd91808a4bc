"""The positions study ``perturbation="auto"``'s choice of the implicit mode is fitted on.

The implicit recipe learns the users x items interaction from who rated what; it pays where the
positions follow the taste (people rate what they expect to like) and epsilon is large enough for
its one release. Regimes: synthetic ratings of MovieLens-100K's size (943 x 1682, 1e5 ratings,
Zipf-like popularity, heavy-tailed activity) whose positions follow a rank-2 taste with strength
0 (popularity alone), 0.5 and 1, and the same at strength 1 with 671 users and 9066 items (93k
ratings: about 10 per item); :func:`benchmarks.bench_user_level.ratings_like` (random
positions); and MovieLens-100K's ``ua`` training ratings where the files are there. Each cell:
the positions' :func:`~dptensor.algorithms.completion.positions.position_ratio` (public), and the
validation RMSE (a random tenth of the TRAINING ratings held out; no test split is read) of the
gradient recipe, the implicit recipe and what ``"auto"`` runs, at epsilon 1, 3 and 10.

``python -m benchmarks.bench_completion_positions [--redraw]`` writes
``benchmarks/results/completion_positions.{json,md,png}`` (``--redraw``: the picture from the saved
JSON).
"""
from __future__ import annotations

import time
import warnings

import numpy as np

from benchmarks._common import load_results, plot_path, write_results
from benchmarks.bench_user_level import ratings_like
from dptensor.algorithms.completion.modes.auto import (IMPLICIT_EPSILON, IMPLICIT_POSITION_RATIO,
                                                       IMPLICIT_RECIPE)
from dptensor.algorithms.completion.positions import position_ratio
from dptensor.completion import PrivateTensorCompletion
from dptensor.datasets import load_movielens_100k

EPSILONS = (1.0, 3.0, 10.0)
RECIPES = {"gradient recipe": dict(perturbation="gradient", offset_share=0.97, rank=2),
           "implicit recipe": dict(IMPLICIT_RECIPE),
           "auto": {}}


def taste_ratings(strength, users=943, items=1682, n=100_000, seed=0):
    """Ratings 1..5 whose positions are drawn with weight ``activity x popularity x
    exp(strength x taste)`` and whose values hold offsets, half the taste and noise of sd 0.9."""
    rng = np.random.default_rng(seed)
    tu, ti = rng.normal(size=(users, 2)), rng.normal(size=(items, 2))
    affinity = tu @ ti.T / np.sqrt(2)
    pop = 1.0 / np.arange(1, items + 1) ** 0.9
    weight = (rng.lognormal(0, 1, users)[:, None] * pop[None, :] * np.exp(strength * affinity))
    flat = rng.choice(users * items, n, replace=False, p=(weight / weight.sum()).ravel())
    X = np.stack([flat // items, flat % items], axis=1)
    a, b = rng.normal(0, 0.45, users), rng.normal(0, 0.6, items)
    y = np.clip(np.rint(3.5 + a[X[:, 0]] + b[X[:, 1]] + 0.5 * affinity.ravel()[flat]
                        + rng.normal(0, 0.9, n)), 1, 5)
    return X, y, (users, items)


def _regimes():
    yield "taste 0 (popularity alone)", taste_ratings(0.0)
    yield "taste 0.5", taste_ratings(0.5)
    yield "taste 1", taste_ratings(1.0)
    # few ratings per item (about 10, as in larger catalogues): the taste's pull on who rated
    # what is spread thin, and a held-out check of the rule where it is weakest
    yield "taste 1, 9066 items", taste_ratings(1.0, users=671, items=9066, n=93_000, seed=1)
    d = ratings_like(943, 1682, 100_000, random_state=0)
    yield "ratings_like (random positions)", (d["indices"], d["values"], d["shape"])
    try:
        m = load_movielens_100k(split="ua", download=False)
        yield "MovieLens-100K ua (training ratings)", (m["indices"], m["values"], m["shape"])
    except FileNotFoundError:
        print("MovieLens-100K files not found: its row is left out")


def run() -> list[dict]:
    records = []
    for name, (X, y, shape) in _regimes():
        val = np.random.default_rng(500).random(len(y)) < 0.1
        ratio = position_ratio(X[~val], shape)
        for eps in EPSILONS:
            row = {"regime": name, "position_ratio": ratio, "epsilon": eps}
            for recipe, params in RECIPES.items():
                if X.shape[1] > 2 and recipe != "auto":
                    params = dict(params, factor_modes=(0, 1))
                est = PrivateTensorCompletion(epsilon=eps, value_range=(1.0, 5.0), shape=shape,
                                              random_state=0, **params)
                t0 = time.perf_counter()
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")  # the noise warnings are the point here
                    est.fit(X[~val], y[~val])
                row[recipe] = float(np.sqrt(np.mean((est.predict(X[val]) - y[val]) ** 2)))
                row[f"{recipe} s"] = time.perf_counter() - t0
                if recipe == "auto":
                    row["auto picks"] = est.perturbation_
            best = min(row["gradient recipe"], row["implicit recipe"])
            row["auto / best"] = row["auto"] / best
            records.append(row)
            print(row, flush=True)
    write_results("completion_positions", records, summary=(
        "Validation RMSE (a random tenth of the training ratings held out), seed 0. `auto` takes "
        f"the implicit recipe ({IMPLICIT_RECIPE}) at epsilon >= {IMPLICIT_EPSILON:g} where the "
        f"position ratio is >= {IMPLICIT_POSITION_RATIO:g}, else the gradient recipe's mode with "
        "every mode factored (on a matrix: the gradient recipe at rank 3). The ratio: the second "
        "singular value of the normalised users x items incidence over that of the same entries "
        "with the items shuffled (about 1 for random positions)."),
        columns=["regime", "position_ratio", "epsilon", "gradient recipe", "implicit recipe",
                 "auto", "auto picks", "auto / best", "gradient recipe s", "implicit recipe s"])
    _plot(records)
    return records


def _plot(records):
    """Implicit recipe over gradient recipe against epsilon, one line per regime (its position
    ratio in the legend): below 1 the implicit recipe wins; filled where ``auto`` takes it."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.4, 4.8))
    for regime in dict.fromkeys(r["regime"] for r in records):
        rows = [r for r in records if r["regime"] == regime]
        eps = [r["epsilon"] for r in rows]
        ratio = [r["implicit recipe"] / r["gradient recipe"] for r in rows]
        line, = ax.plot(eps, ratio, "-", label=f"{regime} (ratio {rows[0]['position_ratio']:.2f})")
        picked = [r["auto picks"] == "implicit" for r in rows]
        ax.plot([e for e, p in zip(eps, picked) if p], [q for q, p in zip(ratio, picked) if p],
                "o", color=line.get_color())
        ax.plot([e for e, p in zip(eps, picked) if not p],
                [q for q, p in zip(ratio, picked) if not p], "o", mfc="white",
                color=line.get_color())
    ax.axhline(1.0, color="k", lw=0.8)
    ax.axvline(IMPLICIT_EPSILON, color="gray", ls=":", lw=0.8)
    ax.set_xscale("log")
    ax.set_xticks(EPSILONS, [f"{e:g}" for e in EPSILONS])
    ax.minorticks_off()
    ax.set_xlabel("epsilon")
    ax.set_ylabel("validation RMSE, implicit / gradient recipe")
    ax.set_title("below 1: implicit wins; filled: auto takes it", fontsize=9)
    ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.16), ncol=2)
    fig.tight_layout()
    fig.savefig(plot_path("completion_positions"), dpi=120)
    plt.close(fig)


if __name__ == "__main__":
    import sys

    _plot(load_results("completion_positions")["records"]) if "--redraw" in sys.argv else run()
