"""AdaptivePrivatePCA against the non-adaptive row-level power method, Analyze Gauss and diffprivlib.

Error is ``sin^2`` between the released first component and the population top direction, mean over
seeds, every method at its default settings and the same ``(epsilon, delta=1e-5)`` (diffprivlib's
PCA is pure epsilon-DP, a stronger guarantee at the same epsilon).

Data: Gaussian rows in d = 50 with covariance proportional to ``I + 5 v v^T`` (``v`` Haar-random:
low coherence), trace 1 (typical row norm 1), clipped to a public bound ``data_norm``:

* ``a``: ``data_norm = 3``, a bound fixed before seeing the data (clips nothing in practice);
* ``a_tight``: ``data_norm`` = the sample's longest row (about 1.6), the most favourable bound a
  non-adaptive method could be given (not itself private: a best case for the baselines);
* ``b``: as ``a`` plus ``m`` planted coherent rows ``+-3 v`` (norm ``data_norm``, along the top
  direction): 1% of the rows in the n and epsilon sweeps, and ``m`` swept at n = 1e5.

Sweeps: error against n (epsilon = 1), against epsilon (n = 1e5) and against m (n = 1e5, epsilon =
1). diffprivlib's PCA samples its eigenvectors with a rejection sampler whose run time grows with
``n * epsilon`` times the eigengap (measured here: 0.7 s at n = 1000, 40 s at n = 3000, over 3 min
at n = 10^4 on data a), so it runs only in the small ``peer`` cells (n <= 2000, one seed), beside
the other methods on the same data. It needs scikit-learn < 1.9; when it cannot be imported here,
it runs in ``.venv-peers`` (a worker process that regenerates the same seeded data), or is
skipped with a message when that environment is missing.

Run ``python -m benchmarks.bench_adaptive_pca [--quick]``; results go to
``benchmarks/results/adaptive_pca.{json,md,png}``.
"""
from __future__ import annotations

import json
import subprocess
import sys
import time
import warnings
from pathlib import Path

import numpy as np

from benchmarks._common import markdown_table, plot_path, write_results
from dptensor import AdaptivePrivatePCA, PrivatePCA
from dptensor.mechanisms import clip_rows
from dptensor.metrics import sin_theta_distance

NAME = "adaptive_pca"
D_FEATURES, SPIKE, DELTA = 50, 5.0, 1e-5
PEERS = Path(__file__).resolve().parent.parent / ".venv-peers" / "bin" / "python"
METHODS = ("adaptive", "power", "analyze_gauss", "diffprivlib")
DPL_MAX_N = 2000  # diffprivlib's sampler is too slow beyond (see the module docstring)


def make_rows(n: int, kind: str, seed: int, coherent: int | None = None):
    """``(X, v, data_norm)`` for data kind ``a``, ``a_tight`` or ``b`` (see the module docstring)."""
    rng = np.random.default_rng(seed)
    d = D_FEATURES
    Q = np.linalg.qr(rng.standard_normal((d, d)))[0]
    v = Q[:, 0]
    scale = np.ones(d)
    scale[0] += SPIKE
    X = (rng.standard_normal((n, d)) * np.sqrt(scale / scale.sum())) @ Q.T
    data_norm = 3.0
    if kind == "a_tight":
        data_norm = float(np.linalg.norm(X, axis=1).max())
    elif kind == "b":
        m = n // 100 if coherent is None else coherent
        X[:m] = data_norm * np.where(rng.random(m) < 0.5, -1.0, 1.0)[:, None] * v
    return clip_rows(X, data_norm), v[None, :], data_norm


def fit_ours(X, data_norm, epsilon, seed) -> dict:
    common = dict(epsilon=epsilon, delta=DELTA, data_norm=data_norm, random_state=seed)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return {"adaptive": AdaptivePrivatePCA(**common).fit(X).components_,
                "power": PrivatePCA(1, method="power", centered=True, **common).fit(X).components_,
                "analyze_gauss": PrivatePCA(1, method="analyze_gauss", centered=True,
                                            **common).fit(X).components_}


def fit_diffprivlib(X, data_norm, epsilon, seed):
    from diffprivlib.models import PCA

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return PCA(n_components=1, epsilon=epsilon, data_norm=data_norm, centered=True,
                   random_state=seed).fit(X).components_


def _diffprivlib_runner():
    """A function ``jobs -> {job index: sin^2}`` for diffprivlib, or ``None`` with a message."""
    try:
        import diffprivlib  # noqa: F401

        return lambda jobs: {i: _dpl_job(job) for i, job in enumerate(jobs)}
    except ImportError:
        pass
    if not PEERS.exists():
        print(f"[{NAME}] diffprivlib skipped: not importable here and no .venv-peers "
              "(pip install 'scikit-learn<1.9' diffprivlib there)")
        return None

    def in_peers(jobs):
        out = subprocess.run([str(PEERS), "-m", "benchmarks.bench_adaptive_pca", "--diffprivlib-worker"],
                             input=json.dumps(jobs), capture_output=True, text=True,
                             cwd=Path(__file__).resolve().parent.parent, check=False)
        if out.returncode != 0:
            print(f"[{NAME}] diffprivlib worker failed, skipped:\n{out.stderr[-2000:]}")
            return {}
        return {int(k): v for k, v in json.loads(out.stdout.splitlines()[-1]).items()}

    return in_peers


def _dpl_job(job):
    X, v, data_norm = make_rows(job["n"], job["kind"], job["seed"], job.get("coherent"))
    return sin_theta_distance(fit_diffprivlib(X, data_norm, job["epsilon"], job["seed"]), v)


def run(quick: bool = False) -> list[dict]:
    seeds = range(1) if quick else range(4)
    ns = [10_000, 30_000] if quick else [10_000, 30_000, 100_000, 300_000]
    n_fixed = 10_000 if quick else 100_000
    epsilons = [0.5, 2.0] if quick else [0.25, 0.5, 1.0, 2.0, 4.0]
    coherents = [0, 100, 1000] if quick else [0, 30, 100, 300, 1000, 3000]
    peer_ns = [1000] if quick else [1000, 2000]
    cells = ([("peer", "a", n, 1.0, None) for n in peer_ns]
             + [("n", kind, n, 1.0, None) for kind in ("a", "a_tight", "b") for n in ns]
             + [("epsilon", kind, n_fixed, e, None) for kind in ("a", "b") for e in epsilons]
             + [("coherent", "b", n_fixed, 1.0, m) for m in coherents])

    records, jobs, done = [], [], {}
    t0 = time.perf_counter()
    for sweep, kind, n, eps, m in cells:
        # The sweeps share some cells (epsilon = 1 at n = 1e5, ...): fit each data set once.
        m_eff = (n // 100 if m is None else m) if kind == "b" else 0
        key = ("a" if (kind == "b" and m_eff == 0) else kind, n, eps, m_eff)
        if key not in done:
            errs = {k: [] for k in METHODS[:3]}
            for seed in seeds:
                X, v, data_norm = make_rows(n, kind, seed, m)
                for method, comp in fit_ours(X, data_norm, eps, seed).items():
                    errs[method].append(sin_theta_distance(comp, v))
            done[key] = errs
        errs = done[key]
        if n <= DPL_MAX_N:
            jobs.append({"cell": len(records), "n": n, "kind": kind, "seed": seeds[0], "epsilon": eps,
                         "coherent": m})
        records.append({"sweep": sweep, "data": kind, "n": n, "epsilon": eps, "coherent_rows": m_eff,
                        **{k: float(np.mean(e)) for k, e in errs.items()}})
    runner = _diffprivlib_runner()
    if runner is not None:
        dpl = runner(jobs)
        for r_i, rec in enumerate(records):
            vals = [dpl[i] for i, job in enumerate(jobs) if job["cell"] == r_i and i in dpl]
            if vals:
                rec["diffprivlib"] = float(np.mean(vals))
    for rec in records:
        rec["power/adaptive"] = rec["power"] / rec["adaptive"]
    elapsed = time.perf_counter() - t0

    columns = ["sweep", "data", "n", "epsilon", "coherent_rows", *METHODS, "power/adaptive"]
    summary = (f"sin^2 to the population top direction, mean over {len(seeds)} seeds (diffprivlib: one "
               f"seed, peer cells only); d = {D_FEATURES}, "
               f"delta = {DELTA}; every method at its default settings. Data: see the module docstring "
               f"(a: public bound 3, typical row norm 1; a_tight: bound = longest row; b: a plus planted "
               f"coherent rows). power/adaptive > 1: the adaptive method wins. Findings are discussed in "
               f"docs/derivations/adaptive_pca.rst. Wall time {elapsed:.0f} s.")
    write_results(NAME, records, summary=summary, columns=columns,
                  extra={"quick": quick, "seeds": len(seeds), "wall_s": elapsed})
    _plot(records)
    return records


def _plot(records):
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return
    styles = {"adaptive": ("C3", "o"), "power": ("C0", "s"), "analyze_gauss": ("C2", "^"),
              "diffprivlib": ("C7", "v")}
    panels = [("n", "a", "n", "(a) low coherence, bound 3: error vs n"),
              ("n", "a_tight", "n", "(a) bound = longest row: error vs n"),
              ("epsilon", "a", "epsilon", "(a) low coherence: error vs epsilon (n=1e5)"),
              ("n", "b", "n", "(b) 1% coherent rows: error vs n"),
              ("epsilon", "b", "epsilon", "(b) 1% coherent rows: error vs epsilon"),
              ("coherent", "b", "coherent_rows", "(b) error vs planted coherent rows (n=1e5)")]
    fig, axes = plt.subplots(2, 3, figsize=(15, 8.5))
    for ax, (sweep, kind, x, title) in zip(axes.ravel(), panels):
        rows = [r for r in records if r["sweep"] == sweep and r["data"] == kind]
        if not rows:
            ax.set_visible(False)
            continue
        xs = np.array([max(r[x], 0.5 if x == "coherent_rows" else r[x]) for r in rows], dtype=float)
        for method, (color, marker) in styles.items():
            if all(method in r for r in rows):
                ax.plot(xs, [r[method] for r in rows], marker=marker, color=color, label=method)
        ax.set_xscale("log")
        ax.set_yscale("log")
        if x == "epsilon":
            ax.set_xticks(xs, [f"{e:g}" for e in xs])
            ax.minorticks_off()
        ax.set_xlabel("planted coherent rows (0 drawn at 0.5)" if x == "coherent_rows" else x)
        ax.set_ylabel("sin^2 to top direction")
        ax.set_title(title, fontsize=10)
        ax.grid(True, which="both", alpha=0.3)
    axes[0, 0].legend()
    fig.tight_layout()
    fig.savefig(plot_path(NAME), dpi=110)
    plt.close(fig)


if __name__ == "__main__":
    if "--diffprivlib-worker" in sys.argv[1:]:
        jobs = json.loads(sys.stdin.read())
        print(json.dumps({i: _dpl_job(job) for i, job in enumerate(jobs)}))
        sys.exit(0)
    recs = run(quick="--quick" in sys.argv[1:])
    print(markdown_table(recs, ["sweep", "data", "n", "epsilon", "coherent_rows", *METHODS, "power/adaptive"]))
