"""Cost that grows with the data: private fits against their non-private ones, in the same run.

* Completion: ratings-like data (users x items x periods, 1e5 ratings on a 1-5 scale, a rank-3
  model plus offsets) at 1e3 .. 1e4 items (``--items`` for more). The private default at
  epsilon = 1 (whose spectral start releases an items x items Gram and keeps 3 of its
  eigenvectors) against the non-private default fit; the private fit once on its top-k path
  (Lanczos) and once with the dense ``O(items^3)`` eigendecomposition forced, as before.
* PCA: ``PrivatePCA(method="analyze_gauss")`` at epsilon = 1, d = 100 .. 3000, n = 5000, k = 5,
  against scikit-learn's PCA on the same data; top-k path and dense path forced.

The ratio private / non-private is the number to read: the noise a private fit draws (d^2 / 2
values for a d x d release) is its own cost; the eigendecomposition after it should not be.

Run ``python -m benchmarks.bench_scaling [--quick] [--items 1000,3000,10000]``.
"""
from __future__ import annotations

import contextlib
import math
import sys
import warnings
from unittest import mock

import numpy as np

from benchmarks._common import plot_path, timed, write_results
from dptensor import PrivatePCA
from dptensor.algorithms import power
from dptensor.algorithms.completion import spectral, user_level
from dptensor.completion import PrivateTensorCompletion
from dptensor.datasets import make_spiked_covariance

N_RATINGS = 100_000
N_USERS = 1000
N_PERIODS = 10
PCA_N, PCA_K = 5000, 5


@contextlib.contextmanager
def dense_forced():
    """The dense eigendecomposition at every replaced site (the code before the top-k path)."""
    with contextlib.ExitStack() as stack:
        for module in (spectral, user_level, power):
            stack.enter_context(mock.patch.object(module, "use_top_k", lambda d, k: False))
        yield


def ratings(n_items, seed=0):
    """1e5 distinct (user, item, period) positions; 1-5 ratings from offsets and a rank-3 model."""
    rng = np.random.default_rng(seed)
    shape = (N_USERS, n_items, N_PERIODS)
    flat = rng.choice(math.prod(shape), size=N_RATINGS, replace=False)
    X = np.stack(np.unravel_index(flat, shape), axis=1)
    U, V = rng.standard_normal((N_USERS, 3)), rng.standard_normal((n_items, 3))
    signal = (0.4 * rng.standard_normal(N_USERS)[X[:, 0]] + 0.5 * rng.standard_normal(n_items)[X[:, 1]]
              + 0.3 * np.einsum("ek,ek->e", U[X[:, 0]], V[X[:, 1]]))
    y = np.clip(np.round(3.5 + signal + 0.8 * rng.standard_normal(N_RATINGS)), 1, 5)
    return X, y, shape


def _fit_completion(X, y, shape, epsilon):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return PrivateTensorCompletion(epsilon=epsilon, value_range=(1, 5), shape=shape,
                                       random_state=0).fit(X, y)


def completion_rows(items, dense_up_to):
    rows = []
    for n_items in items:
        X, y, shape = ratings(n_items)
        t_np, _ = timed(_fit_completion, X, y, shape, np.inf)
        t_fast, fast = timed(_fit_completion, X, y, shape, 1.0)
        row = {"items": n_items, "nonprivate_s": t_np, "private_topk_s": t_fast,
               "ratio_topk": t_fast / t_np, "mode": getattr(fast, "perturbation_", "?")}
        if n_items <= dense_up_to:
            with dense_forced():
                t_dense, _ = timed(_fit_completion, X, y, shape, 1.0)
            row.update(private_dense_s=t_dense, ratio_dense=t_dense / t_np)
        rows.append(row)
        print(row, flush=True)
    return rows


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
        # the same release (same seed), read by two solvers: the same components
        agree = float(np.max(np.abs(fast.components_ - dense.components_)))
        row = {"d": d, "nonprivate_s": t_np, "private_topk_s": t_fast, "private_dense_s": t_dense,
               "ratio_topk": t_fast / t_np, "ratio_dense": t_dense / t_np,
               "max_component_diff": agree}
        rows.append(row)
        print(row, flush=True)
    return rows


def plot(comp, pca):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2))
    panels = [(axes[0], comp, "items", "completion (1e5 ratings, epsilon 1)"),
              (axes[1], pca, "d", f"PrivatePCA analyze_gauss (n {PCA_N}, k {PCA_K}, epsilon 1)")]
    for ax, rows, key, title in panels:
        x = [r[key] for r in rows]
        ax.loglog(x, [r["ratio_topk"] for r in rows], "o-", label="top-k (Lanczos)")
        dense = [(r[key], r["ratio_dense"]) for r in rows if "ratio_dense" in r]
        if dense:
            ax.loglog(*zip(*dense), "s--", label="dense eigh (before)")
        ax.axhline(1.0, color="grey", lw=0.8)
        ax.set(xlabel=key, ylabel="time private / non-private", title=title)
        ax.legend()
    fig.tight_layout()
    fig.savefig(plot_path("scaling"), dpi=110)
    plt.close(fig)


def run(quick=False, items=None):
    items = items or ((1000, 3000) if quick else (1000, 3000, 10000))
    ds = (100, 300, 1000) if quick else (100, 300, 1000, 3000)
    comp = completion_rows(items, dense_up_to=10000)
    pca = pca_rows(ds)
    plot(comp, pca)
    summary = ("Time of the private fit over the non-private one, in the same run: top-k "
               "eigensolver on the released matrix against the dense eigendecomposition (forced). "
               "Completion rows first (key `items`), then PCA rows (key `d`).")
    write_results("scaling", comp + pca, summary=summary,
                  columns=["items", "d", "nonprivate_s", "private_topk_s", "private_dense_s",
                           "ratio_topk", "ratio_dense", "max_component_diff", "mode"],
                  extra={"completion": comp, "pca": pca})
    return comp + pca


def _items_arg(argv):
    for i, a in enumerate(argv):
        if a == "--items" and i + 1 < len(argv):
            return tuple(int(float(v)) for v in argv[i + 1].split(","))
    return None


if __name__ == "__main__":
    run(quick="--quick" in sys.argv, items=_items_arg(sys.argv))
