"""PrivatePCA's methods from d = 100 to 3000: the grid behind ``method="auto"``.

Two data families, so that the rule is not fitted on one: **spiked** (k = 5 spikes of 5 over the
identity, ``data_norm = sqrt(d)``, about the rows' typical norm) and
**decaying** (covariance eigenvalues ``1/j``, j = 1..d, no flat bulk, ``data_norm`` the root of
their sum, so most energy sits in few directions). d in {100, 300, 500, 1000, 2000, 3000},
n in {2e4, 1e5}, epsilon in {0.5, 1, 4}, the default delta, k = 5, ``n_oversamples = 5``, three
noise seeds per cell on one data set per (family, d, n) (:func:`make_data`). The error is sin^2 of the largest
principal angle to the true top-5 subspace, averaged over the seeds; ``auto / best`` divides
``"auto"``'s mean by the best method's.

Each private fit here is a **replica** of PrivatePCA's: the estimator's own plan
(``PrivatePCA._plan``: method, multipliers, steps) and its method's own spectral step
(:meth:`~dptensor.algorithms.pca_methods.PCAMethod.spectrum`, constants included), fed by float
statistics of the clipped rows (their Gram matrix computed once per data set, centred on the
noisy mean by algebra, without the second clip, which the near-zero mean makes a no-op) instead
of the exact grid sums. Through the grid sums the grid's fits at up to 1e5 x 3000 would take many
hours on a small machine; the replica skips the exact arithmetic and shares one Gram matrix
between a data set's fits. ``check`` compares it with the estimator
itself (mean sin^2 over the same seeds) at d in {100, 1000}, n = 2e4, epsilon = 1
(``--check``, its own run and file, ``pca_high_d_check``).

The ``constants`` part (d <= 1000, epsilon = 1) reruns the clipped route with one constant
changed at a time
(start share 0.5 against 0.3, 1 / 3 steps against 2, tau factor 0.25 / 1 against 0.5).

Run: ``python benchmarks/bench_pca_high_d.py`` (``--quick``: d in {100, 500}, n = 2e4, epsilon 1,
two seeds). The fits are appended to ``pca_high_d_large.jsonl`` as they end, so parts can run in
parallel and a stopped run keeps what it did: ``--large --family spiked --dims 1000 --sizes
100000`` runs one part, ``--merge`` writes the tables and the picture from what the file holds
(under today's ``MAX_CLIP_SHARE``), ``--plot`` redraws the picture, ``--check`` compares the
estimator with its replica.
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
#: ``MAX_CLIP_SHARE`` when the committed fits ran; ``--merge`` applies today's rule to them (a
#: seed whose start's ``tau / B`` the rule now clips takes its ``always_clip`` run: same draws).
RUN_CLIP_SHARE = 0.2


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
def data_set(family, n, d, seed, epsilons, shared=None):
    """Per epsilon: the methods' sin^2 (and auto's choice), and the constants' variants'.
    ``shared``: ``(rows, V, non-private sin^2)`` of one data set for every seed (d >= 2000)."""
    start = time.perf_counter()
    rows, V, exact = shared or _rows_of(family, n, d, seed)
    B = rows.bound
    errors, variants = [], []
    for eps in epsilons:
        row = dict(non_private=exact, data_norm=B)
        for method in METHODS:
            _, components, share = replica(rows, method, eps, seed)
            row[method] = sin_theta_distance(components, V)
        row["tau/B"] = share
        row["always_clip"] = row["clipped_power"]  # the same draws where the rule clips
        if d <= VARIANT_DIMS and not pca_methods.clipping_pays(share * B, B):
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


def _rows_of(family, n, d, seed):
    X, V, B = make_data(family, n, d, seed)
    rows = Rows(X, B)
    del X
    return rows, V, sin_theta_distance(rows.non_private(), V)


def large(cfg, families, dims, path):
    """The grid at d > VARIANT_DIMS: one data set per (family, d, n), the seeds drawing the
    noise; every (seed, epsilon) appended to ``path`` (JSON lines) as it ends."""
    import json
    for family in families:
        for d in dims:
            for n in cfg["sizes"]:
                shared = _rows_of(family, n, d, 0)
                for seed in cfg["seeds"]:
                    errors, variants = data_set(family, n, d, seed, cfg["epsilons"], shared)
                    with open(path, "a") as out:
                        for eps, row, var in zip(cfg["epsilons"], errors, variants):
                            key = dict(family=family, d=d, n=n, epsilon=eps, seed=seed)
                            out.write(json.dumps(dict(key, **row)) + "\n")
                            if len(var) > 1:  # the constants' variants (epsilon 1, d <= 1000)
                                out.write(json.dumps(dict(key, variant=var)) + "\n")
                del shared


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
        # where the clipped method pooled in every seed it is Analyze Gauss in law (a second
        # sample of the same estimator), not another method to beat
        same = row.get("pooled") == 1.0
        row["best"] = min((m for m in METHODS if not (same and m == "clipped_power")),
                          key=lambda m: row[m])
        row["auto/best"] = row["auto"] / row[row["best"]]
    return records


SEED_KEYS = ("family", "d", "n", "epsilon", "seed")


def _large_seeds():
    import json
    path = RESULTS / f"{NAME}_large.jsonl"
    lines = [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []
    seen = {}  # a cell run twice (parts that overlap): its first run
    for row in lines:
        seen.setdefault((tuple(row[k] for k in SEED_KEYS), "variant" in row), row)
    lines = list(seen.values())
    seeds = [row for row in lines if "variant" not in row]
    for row in seeds:
        row["pooled"] = float(not pca_methods.clipping_pays(row["tau/B"], 1.0))
        ran_pooled = row["tau/B"] > RUN_CLIP_SHARE
        if ran_pooled and not row["pooled"] and row["always_clip"] is not None:
            # today's rule clips where the run's pooled: the clipped route's own run (the same
            # start, the same draws) is what the method does now
            row["clipped_power"] = row["always_clip"]
        if row["d"] > VARIANT_DIMS and ran_pooled:  # the clipped route is not run there
            row["always_clip"] = None
    return seeds, [dict(row, **row.pop("variant")) for row in lines if "variant" in row]


def _mean_row(family, d, n, eps, runs):
    row = dict(family=family, d=d, n=n, epsilon=eps)
    for key in runs[0]:
        values = [r[key] for r in runs if r.get(key) is not None]
        row[key] = float(np.mean(values)) if values else None
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
    every_d = sorted({r["d"] for r in records})
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
            ax.set(xscale="log", yscale="log", ylim=(1e-4, 2.0))
            ax.set_title(f"{family}, n={n:.0e}, eps={eps:g}", fontsize=10)
            ax.set_xticks(every_d, [str(d) for d in every_d], fontsize=8)
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
    if "--large" in argv:  # d > VARIANT_DIMS, appended as it goes; --merge reads it
        families, dims = _option(argv, "--family", FAMILIES), _option(argv, "--dims", ())
        sizes = tuple(map(int, _option(argv, "--sizes", cfg["sizes"])))
        seeds = tuple(map(int, _option(argv, "--seeds", cfg["seeds"])))
        return large(dict(cfg, sizes=sizes, seeds=seeds), families, tuple(map(int, dims)),
                     RESULTS / f"{NAME}_large.jsonl")
    if "--merge" in argv:  # the fits appended so far, under today's rule
        seeds, variants = _large_seeds()
        records = [_mean_row(f, d, n, e, [{k: v for k, v in s.items() if k not in SEED_KEYS}
                                          for s in seeds if (s["family"], s["d"], s["n"],
                                                             s["epsilon"]) == (f, d, n, e)])
                   for f, d, n, e in sorted({tuple(s[k] for k in SEED_KEYS[:4]) for s in seeds},
                                            key=lambda c: (FAMILIES.index(c[0]),) + c[1:])]
        for row in records:
            row["seeds"] = sum(1 for s in seeds if all(s[k] == row[k] for k in SEED_KEYS[:4]))
        cells = sorted({tuple(v[k] for k in SEED_KEYS[:4]) for v in variants},
                       key=lambda c: (FAMILIES.index(c[0]),) + c[1:])
        variants = [_mean_row(*c, [{k: x for k, x in v.items() if k not in SEED_KEYS}
                                   for v in variants if tuple(v[k] for k in SEED_KEYS[:4]) == c])
                    for c in cells]
        return report(with_auto(records), variants, cfg, seeds)
    path = RESULTS / f"{NAME}_large.jsonl"
    path.unlink(missing_ok=True)  # a fresh run
    large(cfg, FAMILIES, cfg["dims"], path)
    return main(["--merge"] + list(argv))

def report(records, variants, cfg, seeds):
    try:
        checked = load_results(NAME + "_check")["records"]
    except FileNotFoundError:
        checked = []
    worst = max(r["auto/best"] for r in records)
    most = max(r["seeds"] for r in records)
    summary = (f"Mean sin^2 of the largest principal angle over up to {most} noise "
               "seeds (`seeds`; lower is better), replicas of PrivatePCA's fits (see the module docstring); k = 5, "
               "n_oversamples = 5, default delta. `always_clip`: the clipped route even where "
               "the rule pools (run at d <= 1000); `tau/B`: the start's radius over the bound; "
               "`pooled`: the share of seeds where clipped_power pooled into Analyze Gauss "
               "(where 1, it is Analyze Gauss in law and `best` leaves it out); `auto_method`: "
               "what method='auto' runs there; `auto/best`: its mean over the best method's "
               f"(worst cell: {worst:.3g}). Seeds: the noise, on one data set per (family, d, "
               "n).")
    columns = ["family", "d", "n", "epsilon", "seeds", "non_private", *METHODS, "always_clip",
               "tau/B", "pooled", "auto_method", "best", "auto/best"]
    path = write_results(NAME, records, summary=summary, columns=columns,
                         extra=dict(variants=variants, config=cfg, seeds=seeds))
    with path.open("a") as md:
        md.write("\n## auto / best by cell (rows: d; columns: family, n, epsilon)\n\n"
                 + pivot(records, "auto/best") + "\n\n## Mean sin^2 of auto by cell\n\n"
                 + pivot(records, "auto") + "\n")
        md.write("\n## The clipped power method's constants, one changed at a time\n\n"
                 + _table(variants) + "\n\n## The estimator against its replica (mean sin^2)\n\n"
                 + _table(checked) + "\n")
    plot(records)


def pivot(records, key):
    """A markdown table of ``key``: one row per d, one column per (family, n, epsilon)."""
    cols = sorted({(r["family"], r["n"], r["epsilon"]) for r in records},
                  key=lambda c: (FAMILIES.index(c[0]), c[1], c[2]))
    value = {(r["family"], r["n"], r["epsilon"], r["d"]): r[key] for r in records}
    head = ["d"] + [f"{f[:5]} {n:.0e} e{e:g}" for f, n, e in cols]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for d in sorted({r["d"] for r in records}):
        cells = [format(value[c + (d,)], ".3g") if c + (d,) in value else "" for c in cols]
        lines.append(f"| {d} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _option(argv, name, default=None):
    """The comma-separated values after ``name`` in ``argv``, else ``default``."""
    argv = list(argv)
    return argv[argv.index(name) + 1].split(",") if name in argv else default


def _table(rows):
    from benchmarks._common import markdown_table
    return markdown_table(rows) if rows else "(none)"


if __name__ == "__main__":
    main(sys.argv[1:])
