"""The user-level start's steps: the power start at several ``POWER_START_STEPS`` against the
dense items x items release, on ratings shaped like real sets with many items.

Each cell fits ``privacy_unit="user"`` at rank 3 and scores it on a random tenth of the TRAINING
entries held out (never a test split): the number of steps is chosen here, by validation RMSE,
and the time of each fit is beside it. ``python -m benchmarks.bench_user_start`` writes
``benchmarks/results/user_start.{json,md}``.
"""
from __future__ import annotations

import contextlib
import time
import warnings
from unittest import mock

import numpy as np

from benchmarks._common import write_results
from benchmarks.bench_user_level import ratings_like
from dptensor import PrivateTensorCompletion
from dptensor.algorithms.completion import user_level, user_start
from dptensor.algorithms.completion.modes import user as user_mode

#: (users, items, ratings): the 9066-item set's size, and ten times its users.
CELLS = ((671, 9066, 93_000), (6710, 9066, 930_000))
EPSILONS = (3.0, 10.0)
STEPS = (2, 3, 4, 6)
SEEDS = (0, 1)


@contextlib.contextmanager
def start_as(method, steps):
    """The fit and its accounting both run ``method`` with ``steps`` releases."""
    n = steps if method == "power" else 1
    with mock.patch.object(user_level, "start_method", lambda d, k: method), \
            mock.patch.object(user_mode, "start_releases", lambda d, k: n), \
            mock.patch.object(user_start, "POWER_START_STEPS", n):
        yield


def _data(cell, seed):
    d = ratings_like(*cell, random_state=seed)
    X, y = d["indices"], d["values"]
    val = np.random.default_rng(500 + seed).random(len(y)) < 0.1
    return X[~val], y[~val], X[val], y[val], d["shape"]


def _cell(X, y, Xv, yv, shape, eps, seed, method, steps):
    est = PrivateTensorCompletion(privacy_unit="user", rank=3, epsilon=eps, delta=1e-6,
                                  value_range=(1, 5), shape=shape, random_state=seed)
    t0 = time.perf_counter()
    with start_as(method, steps), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        est.fit(X, y)
    seconds = time.perf_counter() - t0
    pred = est.predict(Xv, history=(X, y))
    return seconds, float(np.sqrt(np.mean((pred - yv) ** 2)))


def run():
    rows = []
    for cell in CELLS:
        for seed in SEEDS:
            data = _data(cell, seed)
            for eps in EPSILONS:
                fits = [("dense", 1)] + [("power", s) for s in STEPS]
                for method, steps in fits:
                    seconds, rmse = _cell(*data, eps, seed, method, steps)
                    rows.append({"users": cell[0], "items": cell[1], "epsilon": eps,
                                 "seed": seed, "start": method, "steps": steps,
                                 "seconds": seconds, "val_rmse": rmse})
                    print(rows[-1], flush=True)
    summary = _summary(rows)
    write_results("user_start", summary,
                  summary="User-level rank 3, validation RMSE (a tenth of the training entries) "
                          "and seconds, mean over the seeds: the dense start against the power "
                          "start at each number of steps.",
                  columns=["users", "items", "epsilon", "start", "steps", "seconds", "val_rmse"],
                  extra={"fits": rows})
    return summary


def _summary(rows):
    keys = list(dict.fromkeys((r["users"], r["epsilon"], r["start"], r["steps"]) for r in rows))
    out = []
    for users, eps, start, steps in keys:
        sel = [r for r in rows if (r["users"], r["epsilon"], r["start"], r["steps"])
               == (users, eps, start, steps)]
        out.append({"users": users, "items": sel[0]["items"], "epsilon": eps, "start": start,
                    "steps": steps, "seconds": float(np.mean([r["seconds"] for r in sel])),
                    "val_rmse": float(np.mean([r["val_rmse"] for r in sel]))})
    return out


if __name__ == "__main__":
    run()
