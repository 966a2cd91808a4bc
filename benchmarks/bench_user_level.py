"""User-level private completion on MovieLens-100K (both canonical splits) at epsilon 1 and 10.

``python benchmarks/bench_user_level.py`` writes ``benchmarks/results/user_level.{json,md,png}``;
``--scale`` writes ``user_level_scale.{json,md,png}`` (``--resume`` keeps the saved cells): the
default user-level fit (``rank=3``) on synthetic MovieLens-like ratings at 1e3 users x 1e5
ratings, 1e4 x 1e6 and 7e4 x 1e7 (MovieLens-10M's size), on one CPU thread, against the
non-private fit in the same run.
The settings are the estimator's defaults (``privacy_unit="user"``, ``rank=0``: offsets only,
the item side released, each user's offset solved from her own training ratings at prediction
time), fixed before any run on a test split. When the GroupLens files are neither in
``get_data_home()`` nor downloadable, the run uses :func:`movielens_like` (synthetic ratings shaped
like MovieLens-100K) and says so in every output.
"""
from __future__ import annotations

import json
import os
import resource
import sys
import time
from pathlib import Path

import numpy as np
from threadpoolctl import threadpool_limits

from dptensor import PrivateTensorCompletion
from dptensor.datasets import load_movielens_100k

RESULTS = Path(__file__).parent / "results"
EPSILONS = (1.0, 10.0)
BARS = {1.0: 1.05, 10.0: 0.97}
DELTA = 1e-5
SEEDS = (0, 1, 2)


def movielens_like(split="ua", random_state=0):
    """Synthetic ratings shaped like MovieLens-100K: 943 users x 1682 items, heavy-tailed counts
    (at least 20 per user, about 1e5 in all), item popularity Zipf-like, user and item offsets
    and a rank-10 taste, values rounded to 1..5; 10 ratings of each user held out (``"ua"``; a
    different draw of the hold-out for ``"ub"``). Returned like :func:`load_movielens_100k`
    (user, item columns only)."""
    rng = np.random.default_rng(random_state)
    n_u, n_i = 943, 1682
    per_user = np.minimum(20 + rng.lognormal(3.85, 1.0, n_u).astype(int), 700)
    pop = 1.0 / np.arange(1, n_i + 1) ** 0.9
    pop /= pop.sum()
    rows = []
    for u in range(n_u):
        rows.append(np.stack([np.full(per_user[u], u), rng.choice(n_i, per_user[u], replace=False,
                                                                   p=pop)], axis=1))
    X = np.concatenate(rows)
    a, b = rng.normal(0, 0.45, n_u), rng.normal(0, 0.6, n_i) - 0.6 * np.log(pop * n_i) * 0.15
    U, V = rng.normal(0, 0.25, (n_u, 10)), rng.normal(0, 0.25, (n_i, 10))
    f = 3.55 + a[X[:, 0]] + b[X[:, 1]] + np.einsum("ek,ek->e", U[X[:, 0]], V[X[:, 1]])
    y = np.clip(np.rint(f + rng.normal(0, 0.9, len(X))), 1, 5)
    hold = np.random.default_rng(100 + (split == "ub")).random(len(X))
    order = np.lexsort((hold, X[:, 0]))
    starts = np.searchsorted(X[order, 0], np.arange(n_u))
    test = np.zeros(len(X), dtype=bool)
    test[order[(np.arange(len(X)) - starts[X[order, 0]]) < 10]] = True
    return {"indices": X[~test], "values": y[~test], "test_indices": X[test],
            "test_values": y[test], "shape": (n_u, n_i), "value_range": (1.0, 5.0)}


def ratings_like(n_users, n_items, n_ratings, rank=10, random_state=0):
    """Synthetic ratings shaped like MovieLens at any size: heavy-tailed (lognormal) counts per
    user, at least 20 and at most half the items, about ``n_ratings`` in all; Zipf-like item
    popularity; user and item offsets, a rank-``rank`` taste and noise of sd 0.9, rounded to
    1..5; a random tenth held out. Vectorised: 1e7 ratings in seconds."""
    rng = np.random.default_rng(random_state)
    raw = rng.lognormal(0.0, 1.0, n_users)
    per = np.rint(raw * (n_ratings - 20 * n_users) / raw.sum() + 20).astype(np.int64)
    per = np.clip(per, 20, n_items // 2)
    pop = 1.0 / np.arange(1, n_items + 1) ** 0.9
    pop /= pop.sum()
    # twice the draws, the repeats dropped, then each user's first per[u] distinct items
    users = np.repeat(np.arange(n_users), 2 * per)
    key, first = np.unique(users * n_items + rng.choice(n_items, len(users), p=pop),
                           return_index=True)
    key = key[np.argsort(first, kind="stable")]
    order = np.argsort(key // n_items, kind="stable")
    users, items = key[order] // n_items, key[order] % n_items
    starts = np.searchsorted(users, np.arange(n_users))
    keep = np.arange(len(users)) - starts[users] < per[users]
    users, items = users[keep], items[keep]
    a = rng.normal(0, 0.45, n_users)
    b = rng.normal(0, 0.6, n_items) - 0.09 * np.log(pop * n_items)
    U, V = rng.normal(0, 0.25, (n_users, rank)), rng.normal(0, 0.25, (n_items, rank))
    f = 3.55 + a[users] + b[items] + np.einsum("ek,ek->e", U[users], V[items])
    y = np.clip(np.rint(f + rng.normal(0, 0.9, len(users))), 1, 5)
    X, test = np.stack([users, items], axis=1), rng.random(len(y)) < 0.1
    return {"indices": X[~test], "values": y[~test], "test_indices": X[test],
            "test_values": y[test], "shape": (n_users, n_items), "value_range": (1.0, 5.0)}


#: (users, items, ratings) of the scale study: MovieLens-10M is about 7e4 x 1e4 x 1e7.
SCALE_CELLS = ((1_000, 2_000, 100_000), (10_000, 10_000, 1_000_000),
               (70_000, 10_000, 10_000_000))
SCALE_EPSILONS = (1.0, 10.0)


def _timed_fit(d, user_level, **kw):
    """``(seconds, test RMSE)`` of one fit (a user-level fit predicts from each user's history)."""
    est = PrivateTensorCompletion(value_range=d["value_range"], shape=d["shape"], delta=DELTA,
                                  random_state=0, **kw)
    if user_level:
        est.set_params(privacy_unit="user")
    t0 = time.perf_counter()
    est.fit(d["indices"], d["values"])
    seconds = time.perf_counter() - t0
    hist = (d["indices"], d["values"]) if user_level else None
    pred = est.predict(d["test_indices"], history=hist)
    return seconds, float(np.sqrt(np.mean((pred - d["test_values"]) ** 2)))


def run_scale(rows=()):
    """Each cell: the non-private fit (value-level ALS at defaults), the user-level path without
    noise, and the user-level default at each epsilon, with ratios to the non-private fit.
    Cells already in ``rows`` (saved results, with ``--resume``) are kept, not rerun."""
    rows, done = list(rows), {r["users"] for r in rows}
    for n_users, n_items, n_ratings in SCALE_CELLS:
        if n_users in done:
            continue
        d = ratings_like(n_users, n_items, n_ratings)
        cell = {"users": n_users, "items": n_items, "ratings": int(len(d["values"]))}
        with threadpool_limits(limits=1):
            ref_s, ref_rmse = _timed_fit(d, False)
            fits = [("non-private (value-level ALS)", np.inf, ref_s, ref_rmse),
                    ("user level, no noise", np.inf, *_timed_fit(d, True))]
            fits += [("user level", e, *_timed_fit(d, True, epsilon=e)) for e in SCALE_EPSILONS]
        for name, eps, sec, err in fits:
            rows.append({**cell, "fit": name, "epsilon": eps, "seconds": sec, "rmse": err,
                         "time_ratio": sec / ref_s, "rmse_ratio": err / ref_rmse,
                         "peak_rss_gb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20,
                         "load_average": os.getloadavg()[0]})
            print(rows[-1], flush=True)
    return sorted(rows, key=lambda r: r["users"])


def write_scale(rows):
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "user_level_scale.json").write_text(json.dumps(rows, indent=1, default=str))
    lines = ["Synthetic MovieLens-like ratings (`ratings_like`), rank 3 (the default), one CPU "
             "thread; ratios to the non-private fit (value-level ALS at defaults) in the same "
             "run. Peak RSS is the process's so far (it includes the data). Seconds are wall "
             "time: on a shared machine (the load average, when recorded, is in the JSON) they "
             "are an upper bound on the one-thread cost.", "",
             "| users | items | ratings | fit | epsilon | seconds | x non-private time | "
             "test RMSE | x non-private RMSE | peak RSS (GB) |", "|---" * 10 + "|"]
    for r in rows:
        lines.append(f"| {r['users']} | {r['items']} | {r['ratings']} | {r['fit']} | "
                     f"{r['epsilon']:g} | {r['seconds']:.1f} | {r['time_ratio']:.2f} | "
                     f"{r['rmse']:.4f} | {r['rmse_ratio']:.3f} | {r['peak_rss_gb']:.1f} |")
    (RESULTS / "user_level_scale.md").write_text("\n".join(lines) + "\n")
    _plot_scale(rows)


def _plot_scale(rows):
    """Test RMSE over the non-private fit's against the number of users, one line an epsilon."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(9, 4))
    for i, eps in enumerate(sorted({r["epsilon"] for r in rows if r["fit"] == "user level"})):
        pts = [r for r in rows if r["fit"] == "user level" and r["epsilon"] == eps]
        ax.plot([r["users"] for r in pts], [r["rmse_ratio"] for r in pts], "o-",
                color=f"C{i}", label=f"user level, epsilon={eps:g}")
    pts = [r for r in rows if r["fit"] == "user level, no noise"]
    ax.plot([r["users"] for r in pts], [r["rmse_ratio"] for r in pts], "s:", color="gray",
            label="user-level path without noise")
    ax.axhline(1.15, color="r", ls="--", label="goal at 7e4 users, epsilon=1 (1.15x)")
    ax.axhline(1.0, color="k", lw=0.8)
    ax.set_xscale("log")
    users = sorted({r["users"] for r in rows})
    ax.set_xticks(users, [f"{u:g}" for u in users])
    ax.minorticks_off()
    ax.set_xlabel("users (synthetic MovieLens-like ratings, about 100 a user)")
    ax.set_ylabel("test RMSE / non-private RMSE")
    ax.set_title("User-level completion at scale (delta=1e-5, rank 3)")
    ax.legend(fontsize=8, loc="center left", bbox_to_anchor=(1.02, 0.5))
    fig.tight_layout()
    fig.savefig(RESULTS / "user_level_scale.png", dpi=110)


def load(split):
    """``(data, source)``: MovieLens-100K (user, item columns) or its synthetic stand-in."""
    try:
        d = load_movielens_100k(split=split)
    except OSError as err:  # no cached copy and no network
        print(f"MovieLens-100K unavailable ({type(err).__name__}); synthetic stand-in",
              file=sys.stderr)
        return movielens_like(split), "synthetic MovieLens-like"
    keep = lambda X: np.ascontiguousarray(X[:, :2])  # noqa: E731
    d = dict(d, indices=keep(d["indices"]), test_indices=keep(d["test_indices"]),
             shape=d["shape"][:2])
    return d, "MovieLens-100K"


def rmse(model, d):
    pred = model.predict(d["test_indices"], history=(d["indices"], d["values"]))
    return float(np.sqrt(np.mean((pred - d["test_values"]) ** 2)))


def run():
    rows = []
    for split in ("ua", "ub"):
        d, source = load(split)
        base = float(np.sqrt(np.mean((d["test_values"] - d["values"].mean()) ** 2)))
        for eps in (*EPSILONS, np.inf):
            scores, t0 = [], time.perf_counter()
            for seed in SEEDS:
                est = PrivateTensorCompletion(rank=0, privacy_unit="user", epsilon=eps,
                                              delta=DELTA, value_range=d["value_range"],
                                              shape=d["shape"], random_state=seed)
                scores.append(rmse(est.fit(d["indices"], d["values"]), d))
            rows.append({"split": split, "source": source, "epsilon": eps,
                         "rmse": float(np.mean(scores)), "rmse_sd": float(np.std(scores)),
                         "bar": BARS.get(eps), "train_mean_rmse": base,
                         "seconds_per_fit": (time.perf_counter() - t0) / len(SEEDS)})
            print(rows[-1], flush=True)
    return rows


def write(rows):
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "user_level.json").write_text(json.dumps(rows, indent=1, default=str))
    lines = ["| data | split | epsilon | test RMSE (mean ± sd, 3 seeds) | bar | training mean |",
             "|---|---|---|---|---|---|"]
    for r in rows:
        bar = "" if r["bar"] is None else f"<= {r['bar']}"
        lines.append(f"| {r['source']} | {r['split']} | {r['epsilon']:g} | {r['rmse']:.4f} ± "
                     f"{r['rmse_sd']:.4f} | {bar} | {r['train_mean_rmse']:.4f} |")
    (RESULTS / "user_level.md").write_text("\n".join(lines) + "\n")
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(8, 4))
    for split, mark, colour in (("ua", "o", "C0"), ("ub", "s", "C1")):
        pts = [r for r in rows if r["split"] == split and np.isfinite(r["epsilon"])]
        ax.errorbar([r["epsilon"] for r in pts], [r["rmse"] for r in pts],
                    [r["rmse_sd"] for r in pts], marker=mark, color=colour,
                    label=f"user level, {split}")
        inf = [r["rmse"] for r in rows if r["split"] == split and not np.isfinite(r["epsilon"])]
        ax.axhline(inf[0], ls=":", color=colour, label=f"same path without noise, {split}")
    ax.plot(list(BARS), list(BARS.values()), "rv", ls="none", label="the goal at each epsilon")
    ax.axhline(rows[0]["train_mean_rmse"], ls="--", color="k", label="training mean")
    ax.set_xscale("log")
    ax.set_xticks(list(BARS), [f"{e:g}" for e in BARS])
    ax.set_xlabel("epsilon (user level, delta=1e-5)")
    ax.set_ylabel("test RMSE")
    ax.set_title(f"User-level completion: {rows[0]['source']}")
    ax.legend(fontsize=8, loc="center left", bbox_to_anchor=(1.02, 0.5))
    fig.tight_layout()
    fig.savefig(RESULTS / "user_level.png", dpi=110)


if __name__ == "__main__":
    if "--scale" in sys.argv and "--plot-only" in sys.argv:  # the table from the saved rows
        write_scale(json.loads((RESULTS / "user_level_scale.json").read_text()))
    elif "--scale" in sys.argv:
        saved = RESULTS / "user_level_scale.json"
        resume = "--resume" in sys.argv and saved.exists()
        write_scale(run_scale(json.loads(saved.read_text()) if resume else ()))
    elif "--plot-only" in sys.argv:  # redraw from the saved results
        write(json.loads((RESULTS / "user_level.json").read_text()))
    else:
        write(run())
