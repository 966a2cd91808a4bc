"""PrivatePCA's methods from d = 100 to 3000: the grid behind ``method="auto"``.

Two data families, so that the rule is not fitted on one: **spiked** (k = 5 spikes of 5 over the
identity, Haar-random components, ``data_norm = sqrt(d)``, about the rows' typical norm) and
**decaying** (covariance eigenvalues ``1/j``, j = 1..d, no flat bulk, ``data_norm`` the root of
their sum, so most energy sits in few directions). d in {100, 300, 500, 1000, 2000, 3000},
n in {2e4, 1e5}, epsilon in {0.5, 1, 4}, the default delta, k = 5, ``n_oversamples = 5``, three
seeds per cell (the seed draws the data and the noise). The error is sin^2 of the largest
principal angle to the true top-5 subspace, averaged over the seeds; ``auto / best`` divides
``"auto"``'s mean by the best method's.

Each private fit here is a **replica** of PrivatePCA's: the estimator's own plan
(``PrivatePCA._plan``: method, multipliers, steps) and its method's own spectral step
(:meth:`~dptensor.algorithms.pca_methods.PCAMethod.spectrum`, constants included), fed by float
statistics of the clipped rows (their Gram matrix computed once per data set, centred on the
noisy mean by algebra, without the second clip, which the near-zero mean makes a no-op) instead
of the exact grid sums. The grid of 216 x 3 fits at up to 1e5 x 3000 would take hours through the
grid sums on a small machine; the replica takes minutes. ``check`` compares it with the estimator
itself (mean sin^2 over the same seeds) at d in {100, 1000}, n = 2e4, epsilon = 1
(``--check``, its own run and file, ``pca_high_d_check``).

The ``constants`` part (d <= 1000, epsilon = 1) reruns the clipped route with one constant
changed at a time
(start share 0.5 against 0.3, 1 / 3 steps against 2, tau factor 0.25 / 1 against 0.5).

Run: ``python benchmarks/bench_pca_high_d.py`` (``--quick``: d in {100, 500}, n = 2e4, epsilon 1,
two seeds; ``--plot``: redraw from the committed numbers; ``--rule``: the committed fits
under today's ``auto`` rule).
"""
from __future__ import annotations

import contextlib
import math
import sys
import time
import warnings
from pathlib import Path

import numpy as np

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks._common import RESULTS, load_results, plot_path, write_results  # noqa: E402
from dptensor import PrivatePCA  # noqa: E402
from dptensor.algorithms import pca_methods  # noqa: E402
from dptensor.algorithms.operators import DenseMatrix  # noqa: E402
from dptensor.algorithms.pca_methods import Source  # noqa: E402
from dptensor.algorithms.power import (analyze_gauss, covariance_sensitivity,  # noqa: E402
                                       row_power_sensitivity)
from dptensor.datasets import make_spiked_covariance  # noqa: E402
from dptensor.mechanisms import clip_rows  # noqa: E402
from dptensor.metrics import sin_theta_distance  # noqa: E402

NAME = "pca_high_d"
K, OVER, SPIKE = 5, 5, 5.0
METHODS = ("analyze_gauss", "power", "clipped_power")
FAMILIES = ("spiked", "decaying")
FULL = dict(dims=(100, 300, 500, 1000, 2000, 3000), sizes=(20000, 100000),
            epsilons=(0.5, 1.0, 4.0), seeds=(0, 1, 2))
QUICK = dict(dims=(100, 500), sizes=(20000,), epsilons=(1.0,), seeds=(0, 1))
#: The clipped route with one constant changed at a time (the module's names), at epsilon = 1.
ALWAYS = dict(MAX_CLIP_SHARE=math.inf)
VARIANTS = {"start 0.5": dict(ALWAYS, START_SHARE=0.5), "1 step": dict(ALWAYS, CLIPPED_STEPS=1),
            "3 steps": dict(ALWAYS, CLIPPED_STEPS=3), "tau 0.25": dict(ALWAYS, CLIP_FACTOR=0.25),
            "tau 1": dict(ALWAYS, CLIP_FACTOR=1.0)}
VARIANT_DIMS = 1000  # the variants' largest d (time)


# ------------------------------------------------------------------------------------ the data
def make_data(family, n, d, seed, dtype=np.float32):
    """``(X, V, data_norm)``: rows, the true top-k components, the bound.

    Every step of a fit is equivariant under rotations (row norms, Gaussian noise, spans), so the
    eigenvectors are the first coordinate axes without loss (the estimator check draws
    Haar-random spikes through :func:`~dptensor.datasets.make_spiked_covariance`); float32 halves
    the Gram matrix's time, far below the privacy noise."""
    rng = np.random.default_rng(seed)
    if family == "spiked":
        scale = np.ones(d, dtype=dtype)
        scale[:K] = math.sqrt(1.0 + SPIKE)
        bound = math.sqrt(d)
    else:
        scale = (1.0 / np.sqrt(np.arange(1, d + 1))).astype(dtype)
        bound = float(np.sqrt(np.sum(scale.astype(float) ** 2)))
    X = rng.standard_normal((n, d), dtype=dtype)
    X *= scale
    return X, np.eye(d)[:K], bound


def estimator_data(family, n, d, seed):
    """:func:`make_data` in float64 with Haar-random components for the spiked family."""
    if family == "spiked":
        X, V, _ = make_spiked_covariance(n, d, K, spike=SPIKE, random_state=seed)
        return X, V, math.sqrt(d)
    return make_data(family, n, d, seed, dtype=np.float64)


class Rows:
    """The clipped rows and their float sums, computed once per data set."""

    def __init__(self, X, bound):
        self.X, self.bound = clip_rows(X, bound), bound
        self.n, self.d = self.X.shape
        self.S = (self.X.T @ self.X).astype(np.float64)
        self.total = self.X.sum(axis=0, dtype=np.float64)

    def gram(self, c):
        """``sum_i (x_i - c)(x_i - c)^T`` by algebra."""
        cross = np.outer(self.total, c)
        return self.S - cross - cross.T + self.n * np.outer(c, c)

    def non_private(self):
        """The top-k eigenvectors of the clipped rows' covariance (non-private PCA)."""
        return analyze_gauss(self.gram(self.total / self.n), K, None).components


class FloatClipped:
    """``sum_i (x_i - c) clip_tau(V^T (x_i - c))^T`` in floats: the clipped step's product."""

    def __init__(self, rows, c, tau):
        self.rows, self.c, self.tau = rows, c, min(float(tau), rows.bound)
        self.shape = (rows.d, rows.d)
        self.sensitivity = 2.0 * rows.bound * self.tau

    def matmat(self, V):
        V = V.astype(self.rows.X.dtype)
        P = self.rows.X @ V - (self.c @ V).astype(V.dtype)
        norms = np.linalg.norm(P, axis=1, keepdims=True)
        P *= np.minimum(1.0, self.tau / np.maximum(norms, 1e-300))
        return (self.rows.X.T @ P).astype(np.float64) - np.outer(self.c, P.sum(axis=0))


@contextlib.contextmanager
def constants(**values):
    """The clipped power method's module constants set to ``values`` inside the block."""
    old = {name: getattr(pca_methods, name) for name in values}
    for name, value in values.items():
        setattr(pca_methods, name, value)
    try:
        yield
    finally:
        for name, value in old.items():
            setattr(pca_methods, name, value)


def replica(rows, method, eps, seed):
    """``(method run, components, tau / B)`` of a private fit's replica (module docstring;
    ``tau / B``: the clipped method's radius over the bound, else None)."""
    B, n = rows.bound, rows.n
    pca = PrivatePCA(K, epsilon=eps, data_norm=B, method=method, n_oversamples=OVER)
    s = pca._plan((n, rows.d)).settings
    rng = np.random.default_rng(10_000 + seed)
    mean = rows.total / n + rng.standard_normal(rows.d) * (s.mean_noise * 2.0 * B / n)
    C = rows.gram(mean)
    source = Source(gram=lambda z: (C, covariance_sensitivity(B)),
                    operator=lambda: (DenseMatrix(C), row_power_sensitivity(B, s.p)),
                    gauss=dict(rounding=None), power=dict(rounding=None),
                    clipped=lambda tau: FloatClipped(rows, mean, tau), n_rows=n, bound=B)
    seen, rule = [], pca_methods.clipping_pays

    def recorded(tau, bound):  # the radius the method's rule sees
        seen.append(tau / bound)
        return rule(tau, bound)
    with constants(clipping_pays=recorded):
        result = s.method.spectrum(source, rng, k=K, p=s.p, n_iter=s.n_iter, noise=s.noise)
    return s.method.name, result.components[:K], (seen[0] if seen else None)


# ------------------------------------------------------------------------------------ the grid
def grid(cfg, families=FAMILIES):
    records, variants, seeds = [], [], []
    for family in families:
        for d in cfg["dims"]:
            for n in cfg["sizes"]:
                runs = [data_set(family, n, d, seed, cfg["epsilons"]) for seed in cfg["seeds"]]
                seeds += [dict(family=family, d=d, n=n, epsilon=eps, seed=seed, **r[0][i])
                          for seed, r in zip(cfg["seeds"], runs)
                          for i, eps in enumerate(cfg["epsilons"])]
                for i, eps in enumerate(cfg["epsilons"]):
                    records.append(_mean_row(family, d, n, eps, [r[0][i] for r in runs]))
                    if eps == 1.0 and d <= VARIANT_DIMS:
                        variants.append(_mean_row(family, d, n, eps, [r[1][i] for r in runs]))
                    print(records[-1], flush=True)
    return records, variants, seeds


def data_set(family, n, d, seed, epsilons):
    """Per epsilon: the methods' sin^2 (and auto's choice), and the constants' variants'."""
    X, V, B = make_data(family, n, d, seed)
    start = time.perf_counter()
    rows = Rows(X, B)
    del X
    exact = sin_theta_distance(rows.non_private(), V)
    errors, variants = [], []
    for eps in epsilons:
        row = dict(non_private=exact, data_norm=B)
        for method in METHODS:
            _, components, share = replica(rows, method, eps, seed)
            row[method] = sin_theta_distance(components, V)
        row["tau/B"] = share
        row["always_clip"] = row["clipped_power"]  # the same draws where the rule clips
        if not pca_methods.clipping_pays(share * B, B):
            with constants(**ALWAYS):  # the clipped route where the rule pools
                row["always_clip"] = sin_theta_distance(replica(rows, "clipped_power", eps,
                                                                seed)[1], V)
        errors.append(row)
        var = dict(always_clip=row["always_clip"])
        for label, values in VARIANTS.items() if eps == 1.0 and d <= VARIANT_DIMS else ():
            with constants(**values):
                var[label] = sin_theta_distance(replica(rows, "clipped_power", eps, seed)[1], V)
        variants.append(var)
    print(f"  {family} d={d} n={n} seed={seed}: {time.perf_counter() - start:.0f} s", flush=True)
    return errors, variants


def replica_choice(n, d, bound, eps):
    """The method ``method="auto"`` runs on this cell (its plan: public quantities only)."""
    pca = PrivatePCA(K, epsilon=eps, data_norm=bound, n_oversamples=OVER)
    return pca._plan((n, d)).settings.method.name


def with_auto(records):
    """``auto_method`` (what ``method="auto"`` runs on each cell today), ``best`` and
    ``auto/best``: recomputed from the rule, so a changed rule needs no rerun of the fits."""
    for row in records:
        row["auto_method"] = replica_choice(row["n"], row["d"], row["data_norm"], row["epsilon"])
        row["auto"] = row[row["auto_method"]]
        row["best"] = min(METHODS, key=lambda m: row[m])
        row["auto/best"] = row["auto"] / row[row["best"]]
    return records


def _mean_row(family, d, n, eps, runs):
    row = dict(family=family, d=d, n=n, epsilon=eps)
    for key in runs[0]:
        row[key] = float(np.mean([r[key] for r in runs]))
    return row


# ------------------------------------------------------------------------------ the estimator
def check(cfg):
    """The estimator itself against its replica: mean sin^2 over the seeds (module docstring)."""
    records = []
    for family in FAMILIES:
        for d in [d for d in cfg["dims"] if d in (100, 1000)]:
            n = 20000
            for eps in (1.0,):
                row = dict(family=family, d=d, n=n, epsilon=eps)
                for method in METHODS:
                    real, copy = [], []
                    for seed in cfg["seeds"]:
                        X, V, B = estimator_data(family, n, d, seed)
                        with warnings.catch_warnings():  # noise-dominated components: expected
                            warnings.simplefilter("ignore")
                            pca = PrivatePCA(K, epsilon=eps, data_norm=B, method=method,
                                             n_oversamples=OVER, random_state=seed).fit(X)
                        real.append(sin_theta_distance(pca.components_, V))
                        copy.append(sin_theta_distance(replica(Rows(X, B), method, eps,
                                                               seed)[1], V))
                        del X
                    row[method] = float(np.mean(real))
                    row[method + " replica"] = float(np.mean(copy))
                print(row, flush=True)
                records.append(row)
    return records


# ---------------------------------------------------------------------------------- the picture
STYLE = {"analyze_gauss": ("tab:blue", "o", "-"), "power": ("tab:orange", "s", "-"),
         "clipped_power": ("tab:green", "^", "-"), "auto": ("black", "x", "--"),
         "non_private": ("tab:gray", "", ":")}


def plot(records):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = sorted({(r["family"], r["n"]) for r in records}, key=lambda p: (p[0] != "spiked", p))
    epsilons = sorted({r["epsilon"] for r in records})
    fig, axes = plt.subplots(len(panels), len(epsilons), figsize=(3.6 * len(epsilons) + 0.6,
                             2.9 * len(panels) + 0.8), squeeze=False, sharex=True, sharey=True)
    for i, (family, n) in enumerate(panels):
        for j, eps in enumerate(epsilons):
            ax = axes[i][j]
            rows = sorted((r for r in records if (r["family"], r["n"], r["epsilon"])
                           == (family, n, eps)), key=lambda r: r["d"])
            dims = [r["d"] for r in rows]
            for key, (color, marker, line) in STYLE.items():
                ax.plot(dims, [r[key] for r in rows], color=color, marker=marker, ls=line,
                        lw=2.2 if key == "auto" else 1.4, ms=5, label=key.replace("_", " "))
            ax.set(xscale="log", yscale="log", ylim=(5e-4, 2.0))
            ax.set_title(f"{family}, n={n:.0e}, eps={eps:g}", fontsize=10)
            ax.set_xticks(dims, [str(d) for d in dims], fontsize=8)
            ax.minorticks_off()
            ax.grid(alpha=0.3)
        axes[i][0].set_ylabel("mean sin^2")
    for ax in axes[-1]:
        ax.set_xlabel("d (features)")
    handles, labels = axes[0][0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=len(labels), frameon=False)
    fig.tight_layout(rect=(0, 0.04, 1, 1))
    fig.savefig(plot_path(NAME), dpi=100)


def main(argv=()):
    if "--plot" in argv:  # redraw from the committed numbers
        return plot(load_results(NAME)["records"])
    cfg = QUICK if "--quick" in argv else FULL
    if "--check" in argv:
        records = check(cfg)
        return write_results(NAME + "_check", records, summary="PrivatePCA itself against its "
                             "replica: mean sin^2 over the seeds (bench_pca_high_d.py).")
    if "--rule" in argv:  # the committed fits under today's rule
        old = load_results(NAME)
        return report(with_auto(old["records"]), old["variants"], old["config"], old["seeds"])
    if "--part" in argv:  # a part of the grid, for runs in parallel; --merge reports them all
        families, dims = _option(argv, "--family", FAMILIES), _option(argv, "--dims", cfg["dims"])
        records, variants, seeds = grid(dict(cfg, dims=tuple(map(int, dims))), families)
        return write_results(f"{NAME}_part_{_option(argv, '--part')[0]}", records,
                             summary="A part of pca_high_d (--merge).",
                             extra=dict(variants=variants, config=cfg, seeds=seeds))
    if "--merge" in argv:
        parts = [load_results(path.stem) for path in sorted(RESULTS.glob(f"{NAME}_part_*.json"))]
        key = lambda r: (FAMILIES.index(r["family"]), r["d"], r["n"], r["epsilon"])  # noqa: E731
        return report(with_auto(sorted((r for p in parts for r in p["records"]), key=key)),
                      sorted((v for p in parts for v in p["variants"]), key=key), cfg,
                      sorted((s for p in parts for s in p["seeds"]), key=key))
    records, variants, seeds = grid(cfg)
    report(with_auto(records), variants, cfg, seeds)


def report(records, variants, cfg, seeds):
    try:
        checked = load_results(NAME + "_check")["records"]
    except FileNotFoundError:
        checked = []
    worst = max(r["auto/best"] for r in records)
    summary = (f"Mean sin^2 of the largest principal angle over {len(cfg['seeds'])} seeds (lower "
               "is better), replicas of PrivatePCA's fits (see the module docstring); k = 5, "
               "n_oversamples = 5, default delta. `auto_method`: what method='auto' runs there; "
               f"`auto/best`: its mean over the best method's (worst cell: {worst:.3g}).")
    columns = ["family", "d", "n", "epsilon", "non_private", *METHODS, "always_clip", "tau/B",
               "auto_method", "best", "auto/best"]
    path = write_results(NAME, records, summary=summary, columns=columns,
                         extra=dict(variants=variants, config=cfg, seeds=seeds))
    with path.open("a") as md:
        md.write("\n## The clipped power method's constants, one changed at a time\n\n"
                 + _table(variants) + "\n\n## The estimator against its replica (mean sin^2)\n\n"
                 + _table(checked) + "\n")
    plot(records)


def _option(argv, name, default=None):
    """The comma-separated values after ``name`` in ``argv``, else ``default``."""
    argv = list(argv)
    return argv[argv.index(name) + 1].split(",") if name in argv else default


def _table(rows):
    from benchmarks._common import markdown_table
    return markdown_table(rows) if rows else "(none)"


if __name__ == "__main__":
    main(sys.argv[1:])
