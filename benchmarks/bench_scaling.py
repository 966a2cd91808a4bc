"""Cost that grows with the data: private fits against their non-private ones, in the same run.

* Completion at defaults (only ``epsilon``, ``value_range`` and ``shape`` set): ratings-like data
  (users x items x periods on a 1-5 scale, a rank-3 model plus offsets, uniform positions) at
  fixed 1e5 ratings, items 1e3 .. 3e4 at 1000 users and users 1e3 .. 1e5 at 3000 items. The
  private default at epsilon = 1 against the non-private default fit: time ratio, and both test
  RMSEs on a held-out tenth.
* Completion on a case shaped like a real ratings set (671 users x 9066 items x 22 periods, 93k
  ratings; :func:`benchmarks.bench_user_level.ratings_like`: heavy-tailed counts per user,
  Zipf-like item popularity), two seeds: the defaults (non-private, private at epsilon = 1) against
  the completion guide's recipes (``docs/choosing.rst``: gradient and implicit) at epsilon = 1,
  and the user-level fit at rank 3 (epsilon = 10), with each start (``user_start``).
* PCA: ``PrivatePCA(method="analyze_gauss")`` at epsilon = 1, d = 100 .. 3000, n = 5000, k = 5,
  against scikit-learn's PCA on the same data; top-k path and dense path forced.

The ratio private / non-private is the number to read: the noise a private fit draws is its own
cost; the solving after it should not be.

Run ``python -m benchmarks.bench_scaling [--quick] [--keep-pca] [--items 1000,3000]``
(``--keep-pca``: the PCA rows of the saved results are kept, not rerun; ``--redraw``: the
picture from the saved results).
"""
from __future__ import annotations

import contextlib
import math
import sys
import time
import warnings
from unittest import mock

import numpy as np

from benchmarks._common import load_results, plot_path, timed, write_results
from benchmarks.bench_user_level import ratings_like as realistic_ratings
from dptensor import PrivatePCA
from dptensor.algorithms import power
from dptensor.algorithms.completion import spectral, user_level, user_start
from dptensor.algorithms.completion.modes import user as user_mode
from dptensor.completion import PrivateTensorCompletion
from dptensor.datasets import make_spiked_covariance

N_RATINGS = 100_000
N_USERS = 1000
N_ITEMS = 3000
N_PERIODS = 10
PCA_N, PCA_K = 5000, 5
#: The issue's ratings set: users, items, periods, ratings.
REAL_SHAPE, REAL_RATINGS = (671, 9066, 22), 93_000
_RECIPE = {"factor_modes": (0, 1)}
#: The completion guide's recipes (docs/choosing.rst) beside the defaults, at epsilon = 1 unless
#: named; the user-level fits at epsilon = 10, where rank 3 can learn (at 1 the start is noise).
REAL_FITS = {
    "non-private default": {"epsilon": np.inf},
    "private default": {"epsilon": 1.0},
    "gradient recipe": {**_RECIPE, "epsilon": 1.0, "perturbation": "gradient",
                        "offset_share": 0.97, "rank": 2},
    "implicit recipe": {**_RECIPE, "epsilon": 1.0, "perturbation": "implicit", "rank": 20,
                        "offset_share": 0.5},
    "user level rank 3, eps 10": {"epsilon": 10.0, "privacy_unit": "user", "rank": 3},
}


@contextlib.contextmanager
def dense_forced():
    """The dense eigendecomposition at every replaced site (the code before the top-k path)."""
    with contextlib.ExitStack() as stack:
        for module in (spectral, user_level, power):
            stack.enter_context(mock.patch.object(module, "use_top_k", lambda d, k: False))
        yield


@contextlib.contextmanager
def start_forced(start):
    """The user-level start ``start`` ("dense" or "power") whatever the public rule says, in the
    fit and in its accounting (``None``: the rule's)."""
    if start is None:
        yield
        return
    steps = user_start.POWER_START_STEPS if start == "power" else 1
    with mock.patch.object(user_level, "start_method", lambda n, k: start), \
            mock.patch.object(user_mode, "start_releases", lambda n, k: steps):
        yield


def ratings(n_items, n_users=N_USERS, seed=0):
    """1e5 distinct (user, item, period) positions; 1-5 ratings from offsets and a rank-3 model;
    a random tenth held out: ``(X, y, X_test, y_test, shape)``."""
    rng = np.random.default_rng(seed)
    shape = (n_users, n_items, N_PERIODS)
    flat = rng.choice(math.prod(shape), size=N_RATINGS, replace=False)
    X = np.stack(np.unravel_index(flat, shape), axis=1)
    U, V = rng.standard_normal((n_users, 3)), rng.standard_normal((n_items, 3))
    signal = (0.4 * rng.standard_normal(n_users)[X[:, 0]] + 0.5 * rng.standard_normal(n_items)[X[:, 1]]
              + 0.3 * np.einsum("ek,ek->e", U[X[:, 0]], V[X[:, 1]]))
    y = np.clip(np.round(3.5 + signal + 0.8 * rng.standard_normal(N_RATINGS)), 1, 5)
    test = rng.random(N_RATINGS) < 0.1
    return X[~test], y[~test], X[test], y[test], shape


def _fit_completion(X, y, shape, epsilon, **params):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return PrivateTensorCompletion(epsilon=epsilon, value_range=(1, 5), shape=shape,
                                       random_state=0, **params).fit(X, y)


def _rmse(model, X, y, history=None):
    pred = model.predict(X) if history is None else model.predict(X, history=history)
    return float(np.sqrt(np.mean((pred - y) ** 2)))


def completion_row(n_items, n_users):
    """The non-private and the private default fit on one size, one after the other."""
    X, y, Xt, yt, shape = ratings(n_items, n_users)
    t_np, free = timed(_fit_completion, X, y, shape, np.inf)
    t_priv, priv = timed(_fit_completion, X, y, shape, 1.0)
    row = {"users": n_users, "items": n_items, "nonprivate_s": t_np, "private_s": t_priv,
           "ratio": t_priv / t_np, "mode": getattr(priv, "perturbation_", "?"),
           "nonprivate_rmse": _rmse(free, Xt, yt), "private_rmse": _rmse(priv, Xt, yt),
           "mean_rmse": float(np.sqrt(np.mean((yt - y.mean()) ** 2)))}
    print(row, flush=True)
    return row


def completion_rows(items, users):
    """The items axis (``N_USERS`` users), then the users axis (``N_ITEMS`` items)."""
    rows = [dict(completion_row(n, N_USERS), axis="items") for n in items]
    rows += [dict(completion_row(N_ITEMS, n), axis="users") for n in users]
    return rows


def real_case(seed):
    """The issue's shape: ``realistic_ratings`` on users x items, a uniform period per rating."""
    users, items, periods = REAL_SHAPE
    d = realistic_ratings(users, items, REAL_RATINGS, random_state=seed)
    rng = np.random.default_rng(1000 + seed)
    X = np.column_stack([d["indices"], rng.integers(0, periods, len(d["values"]))])
    Xt = np.column_stack([d["test_indices"], rng.integers(0, periods, len(d["test_values"]))])
    return X, d["values"], Xt, d["test_values"]


def real_rows(seeds, fits=REAL_FITS, starts=("dense", "power")):
    """Every fit of ``fits`` on the issue-shaped case, per seed, in one run; the user-level fit
    once with each start (``user_start``)."""
    rows = []
    for seed in seeds:
        X, y, Xt, yt = real_case(seed)
        for name, params in fits.items():
            for start in (starts if params.get("privacy_unit") == "user" else (None,)):
                t0 = time.perf_counter()
                with start_forced(start):
                    model = _fit_completion(X, y, REAL_SHAPE, **params)
                seconds = time.perf_counter() - t0
                hist = (X, y) if params.get("privacy_unit") == "user" else None
                label = name if start is None else f"{name}, {start} start"
                rows.append({"seed": seed, "fit": label, "seconds": seconds,
                             "rmse": _rmse(model, Xt, yt, hist), "n_train": len(y),
                             "mode": getattr(model, "perturbation_", None)})
                print(rows[-1], flush=True)
        rows.append({"seed": seed, "fit": "training mean", "seconds": 0.0,
                     "rmse": float(np.sqrt(np.mean((yt - y.mean()) ** 2)))})
    return rows


def real_summary(rows):
    """Mean seconds and RMSE over the seeds per fit, and the time over the non-private fit's."""
    names = list(dict.fromkeys(r["fit"] for r in rows))
    base = np.mean([r["seconds"] for r in rows if r["fit"] == "non-private default"])
    out = []
    for name in names:
        sel = [r for r in rows if r["fit"] == name]
        secs = float(np.mean([r["seconds"] for r in sel]))
        out.append({"fit": name, "seconds": secs, "time_over_nonprivate": secs / base,
                    "rmse": float(np.mean([r["rmse"] for r in sel]))})
    return out


def _fit_pca(X, **params):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return PrivatePCA(PCA_K, random_state=0, **params).fit(X)


def pca_rows(ds):
    from sklearn.decomposition import PCA

    rows = []
    for d in ds:
        X, _, _ = make_spiked_covariance(PCA_N, d, PCA_K, spike=5.0, random_state=0)
        norm = 2.0 * math.sqrt(d + 4)
        t_np, _ = timed(lambda: PCA(PCA_K, random_state=0).fit(X))
        params = dict(epsilon=1.0, delta=1e-6, method="analyze_gauss", data_norm=norm)
        t_fast, fast = timed(_fit_pca, X, **params)
        with dense_forced():
            t_dense, dense = timed(_fit_pca, X, **params)
        # the same release (same seed), read by two solvers: the same components, to the top-k
        # solver's tolerance (1e-3 of the noise's norm in residual, not rounding)
        agree = float(np.max(np.abs(fast.components_ - dense.components_)))
        row = {"d": d, "nonprivate_s": t_np, "private_topk_s": t_fast, "private_dense_s": t_dense,
               "ratio_topk": t_fast / t_np, "ratio_dense": t_dense / t_np,
               "max_component_diff": agree}
        rows.append(row)
        print(row, flush=True)
    return rows


def _ratio_panel(ax, rows, key, title):
    import matplotlib.ticker

    x = [r[key] for r in rows]
    ax.loglog(x, [r["ratio"] for r in rows], "o-", color="C0",
              label="private default / non-private")
    for r in rows:
        ax.annotate(r["mode"], (r[key], r["ratio"]), textcoords="offset points", xytext=(0, 6),
                    ha="center", fontsize=7)
    ax.axhline(3.0, color="C3", ls="--", lw=0.8, label="goal: at most 3x")
    ax.axhline(1.0, color="grey", lw=0.8)
    ax.set_ylim(min(0.03, 0.5 * min(r["ratio"] for r in rows)), 10)  # every point in view
    ax.yaxis.set_major_formatter(matplotlib.ticker.FormatStrFormatter("%g"))
    ax.set(xlabel=key, ylabel="time private / non-private", title=title)
    ax.legend(fontsize=8, loc="upper right")


def _real_panel(ax, summary):
    names = [r["fit"] for r in summary]
    ax.barh(range(len(names)), [r["rmse"] for r in summary], color="C0")
    for i, r in enumerate(summary):
        timing = "" if r["fit"] == "training mean" else (
            f", {r['seconds']:.2g} s = {r['time_over_nonprivate']:.2g}x")
        ax.text(r["rmse"], i, f" {r['rmse']:.3f}{timing}", va="center", fontsize=8)
    ax.set_yticks(range(len(names)), names, fontsize=7)
    ax.invert_yaxis()
    lo = min(r["rmse"] for r in summary)
    ax.set_xlim(0.97 * lo, 1.15 * max(r["rmse"] for r in summary))
    ax.set(xlabel="test RMSE (mean of the seeds), seconds, and time over the non-private fit's",
           title="671 users x 9066 items x 22 periods, 93k ratings")


def plot(comp, real, pca):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, 2, figsize=(12, 8.5))
    items = [r for r in comp if r.get("axis") == "items"]
    users = [r for r in comp if r.get("axis") == "users"]
    _ratio_panel(axes[0, 0], items, "items", f"completion: {N_USERS} users, 1e5 ratings, epsilon 1")
    _ratio_panel(axes[0, 1], users, "users", f"completion: {N_ITEMS} items, 1e5 ratings, epsilon 1")
    _real_panel(axes[1, 0], real_summary(real))
    ax = axes[1, 1]
    x = [r["d"] for r in pca]
    ax.loglog(x, [r["ratio_topk"] for r in pca], "o-", label="top-k (Lanczos to the noise)")
    ax.loglog(x, [r["ratio_dense"] for r in pca], "s--", label="dense eigh (before)")
    ax.axhline(1.0, color="grey", lw=0.8)
    ax.set(xlabel="d", ylabel="time private / non-private",
           title=f"PrivatePCA analyze_gauss (n {PCA_N}, k {PCA_K}, epsilon 1)")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(plot_path("scaling"), dpi=100)
    plt.close(fig)


COLUMNS = ["axis", "users", "items", "nonprivate_s", "private_s", "ratio", "mode",
           "nonprivate_rmse", "private_rmse", "mean_rmse"]


def run(quick=False, items=None, keep_pca=False):
    items = items or ((1000, 3000) if quick else (1000, 3000, 10000, 30000))
    users = (1000, 10000) if quick else (1000, 10000, 100000)
    comp = completion_rows(items, users)
    real = real_rows((0,) if quick else (0, 1),
                     starts=("power",) if quick else ("dense", "power"))
    if keep_pca:
        pca = load_results("scaling")["pca"]
    else:
        pca = pca_rows((100, 300, 1000) if quick else (100, 300, 1000, 3000))
    plot(comp, real, pca)
    summary = ("Completion at defaults (only epsilon, value_range, shape set): the private default "
               "at epsilon 1 over the non-private default fit, in the same run, with both test "
               "RMSEs (`axis`: which size varies at 1e5 ratings). Then the issue-shaped case "
               "(mean over the seeds; the user-level fit at epsilon 10 with each start), then "
               "PCA (time of the private fit over scikit-learn's; top-k against dense).")
    real_sum = real_summary(real)
    body = [*comp, {}, *real_sum]
    write_results("scaling", body, summary=summary, columns=COLUMNS + ["fit", "seconds",
                  "time_over_nonprivate", "rmse"],
                  extra={"completion": comp, "real": real, "real_summary": real_sum, "pca": pca})
    _append_pca_table(pca)
    return comp, real, pca


def _append_pca_table(pca):
    from benchmarks._common import RESULTS, markdown_table

    path = RESULTS / "scaling.md"
    cols = ["d", "nonprivate_s", "private_topk_s", "private_dense_s", "ratio_topk", "ratio_dense",
            "max_component_diff"]
    path.write_text(path.read_text() + "\nPCA\n\n" + markdown_table(pca, cols) + "\n")


def _items_arg(argv):
    for i, a in enumerate(argv):
        if a == "--items" and i + 1 < len(argv):
            return tuple(int(float(v)) for v in argv[i + 1].split(","))
    return None


def redraw():
    """The picture from the saved results, without rerunning them."""
    saved = load_results("scaling")
    plot(saved["completion"], saved["real"], saved["pca"])


if __name__ == "__main__":
    if "--redraw" in sys.argv:
        redraw()
        sys.exit(0)
    run(quick="--quick" in sys.argv, items=_items_arg(sys.argv), keep_pca="--keep-pca" in sys.argv)
