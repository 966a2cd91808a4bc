"""PrivatePCA against IBM diffprivlib's PCA and scikit-learn's PCA, and entry-level PPM vs Analyze Gauss.

Four parts, one run:

1. **Row-level grid**: spiked covariance (k = 3, spike 5, Haar-random components), rows clipped
   to ``data_norm = 2 sqrt(d + 4)``, for d in {50, 200, 1000}, n in {5000, 50000}, epsilon in
   {0.1, 1, 10}, delta = 1e-5. sin^2 of the largest principal angle to the true top-3 subspace and
   fit time for PrivatePCA's default method, Analyze Gauss, the row-level power method,
   diffprivlib's PCA (pure epsilon-DP, same data_norm and coordinate bounds +-data_norm for its
   mean) and scikit-learn's non-private PCA.
2. **Large d**: the power method at d = 10^4, where a d x d covariance would take 800 MB and an
   O(d^3) eigensolver (or diffprivlib's sampler) is out of reach.
3. **Coherence**: a precomputed symmetric matrix ``A = V diag(400, 300, 200) V^T + 5 I`` under the
   symmetric entry unit, with V from incoherent (Hadamard) to fully coherent (1-sparse) columns:
   entry-level PPM against entry-level Analyze Gauss at epsilon = 1.
4. A plot of part 1 (n = 50000) and part 3.

``--scaling`` (its own run, ``pca_scaling.{json,md}``): the cost of one fit from d = 100 to 3000
(spiked covariance, k = 5 spikes, ``n_oversamples = 5``, n = 5000, epsilon = 1, ``data_norm =
sqrt(d)``, one seed): seconds and sin^2 of every batch method, ``"auto"`` and scikit-learn's PCA,
each private fit's time over scikit-learn's in the same run (timings on a shared machine are
noisy; the ratios are the comparison). The accuracy grid behind ``"auto"`` is
``bench_pca_high_d.py``.

diffprivlib needs scikit-learn < 1.9, so it runs in a separate virtual environment
(``.venv-peers``, see the install docs) in a subprocess killed after ``DPL_TIMEOUT`` seconds
("timeout"; a (d, epsilon) cell that timed out at n = 5000 is not rerun at n = 50000: the
Bingham distribution it samples has a parameter proportional to the covariance, so more rows make
it more concentrated, which a rejection sampler does not find easier).
When that environment is missing the diffprivlib column says so and the rest still runs.
"""
from __future__ import annotations

import json
import math
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import numpy as np
from sklearn.decomposition import PCA

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks._common import (load_results, peak_memory, plot_path, timed,  # noqa: E402
                                write_results)
from dptensor import PrivatePCA  # noqa: E402
from dptensor.datasets import make_spiked_covariance  # noqa: E402
from dptensor.metrics import sin_theta_distance  # noqa: E402

NAME = "pca"
K = 3
DELTA = 1e-5
DPL_TIMEOUT = {False: 30.0, True: 10.0}  # seconds per diffprivlib cell: full, quick
PEERS = Path(__file__).resolve().parents[1] / ".venv-peers" / "bin" / "python"

_DPL_SCRIPT = textwrap.dedent("""
    import json, sys, time, warnings
    import numpy as np
    from diffprivlib.models import PCA
    X = np.load(sys.argv[1])
    k, eps, norm, seed = int(sys.argv[2]), float(sys.argv[3]), float(sys.argv[4]), int(sys.argv[5])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        t0 = time.perf_counter()
        model = PCA(n_components=k, epsilon=eps, data_norm=norm, bounds=(-norm, norm),
                    random_state=seed).fit(X)
        elapsed = time.perf_counter() - t0
    np.save(sys.argv[6], model.components_)
    print(json.dumps({"seconds": elapsed}))
""")


def spiked(n, d, seed=0):
    X, V, _ = make_spiked_covariance(n, d, K, spike=5.0, random_state=seed)
    return X, V, 2.0 * math.sqrt(d + 4)


def diffprivlib_cell(X, eps, data_norm, timeout, seed=0):
    """(sin^2-ready components or None, seconds or None, status) from diffprivlib in its own venv."""
    if not PEERS.exists():
        return None, None, "unavailable (no .venv-peers)"
    with tempfile.TemporaryDirectory() as tmp:
        data, out = Path(tmp) / "X.npy", Path(tmp) / "components.npy"
        np.save(data, X)
        try:
            proc = subprocess.run([str(PEERS), "-c", _DPL_SCRIPT, str(data), str(K), str(eps), str(data_norm),
                                   str(seed), str(out)], capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            return None, None, "timeout"
        if proc.returncode != 0:
            last = (proc.stderr.strip().splitlines() or ["?"])[-1]
            return None, None, f"error: {last[:80]}"
        return np.load(out), json.loads(proc.stdout.strip().splitlines()[-1])["seconds"], "ok"


def _fit(X, V, **kwargs):
    t, est = timed(lambda: PrivatePCA(K, **kwargs).fit(X))
    return sin_theta_distance(est.components_, V), t, est


def grid(quick):
    ds = (50,) if quick else (50, 200, 1000)
    ns = (5000,) if quick else (5000, 50000)
    epss = (1.0,) if quick else (0.1, 1.0, 10.0)
    records, dpl_timeouts, timeout = [], {}, DPL_TIMEOUT[quick]
    for d in ds:
        for n in ns:
            X, V, B = spiked(n, d)
            t_sk, sk = timed(lambda: PCA(K).fit(X))  # the non-private reference
            for eps in epss:
                common = dict(epsilon=eps, delta=DELTA, data_norm=B, random_state=0)
                row = {"d": d, "n": n, "epsilon": eps}
                s, t, est = _fit(X, V, **common)
                row.update(default_method=est.method_, default_sin2=s, default_s=t)
                if row["default_method"] != "analyze_gauss":
                    s, t, _ = _fit(X, V, method="analyze_gauss", **common)
                # else: the default *is* Analyze Gauss with the same seed, hence the same output
                row.update(analyze_gauss_sin2=s, analyze_gauss_s=t)
                s, t, est = _fit(X, V, method="power", **common)
                row.update(power_sin2=s, power_s=t, power_n_iter=est.n_iter_)
                fewer = [m for m in dpl_timeouts.get((d, eps), []) if m <= n]
                if fewer:  # more rows concentrate its Bingham target further: not easier to sample
                    row.update(diffprivlib_sin2=None, diffprivlib_s=None,
                               diffprivlib_status=f"timeout (>{timeout:g} s at n={fewer[0]}; not rerun)")
                else:
                    comps, t, status = diffprivlib_cell(X, eps, B, timeout)
                    if status == "timeout":
                        dpl_timeouts.setdefault((d, eps), []).append(n)
                    row.update(diffprivlib_sin2=None if comps is None else sin_theta_distance(comps, V),
                               diffprivlib_s=t, diffprivlib_status=status)
                row.update(sklearn_sin2=sin_theta_distance(sk.components_, V), sklearn_s=t_sk)
                better = min(v for v in (row["analyze_gauss_sin2"], row["diffprivlib_sin2"]) if v is not None)
                row["default_beats_peers"] = bool(row["default_sin2"] <= better * (1 + 1e-9))
                records.append(row)
                print(_line(row), flush=True)
    return records


def _line(row):
    dpl = row["diffprivlib_status"] if row["diffprivlib_sin2"] is None else f"{row['diffprivlib_sin2']:.3g}"
    return (f"d={row['d']:5d} n={row['n']:6d} eps={row['epsilon']:<4g} default({row['default_method']})="
            f"{row['default_sin2']:.3g} AG={row['analyze_gauss_sin2']:.3g} power={row['power_sin2']:.3g} "
            f"diffprivlib={dpl} sklearn={row['sklearn_sin2']:.3g}")


def large_d(quick):
    """The power method where a d x d matrix does not fit comfortably.

    Row-level noise grows like ``B^2 sqrt(d)`` and ``B^2 ~ tr(covariance)``, so with spike 5 no
    feasible n gets a private signal at d = 10^4; a strong spike (``spike = d``, most of the
    variance in the top 3 directions) shows what the method recovers there. A noisy power method
    escapes its random start only if the noise projected on the top subspace is below
    ``gap * cos(angle of the start) ~ gap sqrt(k/d)`` (Hardt–Price), which here needs n in the
    ten thousands at epsilon = 10.
    """
    d, n = (300, 1000) if quick else (10000, 16000)
    X, V, _ = make_spiked_covariance(n, d, K, spike=float(d), random_state=1)
    B = 2.0 * math.sqrt(d + K * d)
    records = []
    for eps in (1.0, 10.0, math.inf):
        kwargs = dict(epsilon=eps, data_norm=B if math.isfinite(eps) else None, method="power",
                      n_iter="auto" if math.isfinite(eps) else 20, random_state=0)
        t0 = time.perf_counter()
        peak, est = peak_memory(lambda: PrivatePCA(K, **kwargs).fit(X))
        records.append({"d": d, "n": n, "epsilon": eps, "method": "power", "n_iter": est.n_iter_,
                        "sin2": sin_theta_distance(est.components_, V), "seconds": time.perf_counter() - t0,
                        "peak_MB": peak / 2**20, "data_MB": X.nbytes / 2**20,
                        "dense_covariance_MB": d * d * 8 / 2**20})
        print(records[-1], flush=True)
    records.append(_streaming_large_d(d, 1000 if quick else 4000, 10.0, B))
    print(records[-1], flush=True)
    return records


def _streaming_large_d(d, block, eps, B, n_blocks=9, batch=1000):
    """SPM at large d: rows generated batch by batch and streamed, never held together."""
    _, V, _ = make_spiked_covariance(2, d, K, spike=float(d), random_state=1)
    rng = np.random.default_rng(7)
    est = PrivatePCA(K, epsilon=eps, data_norm=B, block_size=block, random_state=0)

    def stream():
        for _ in range(n_blocks * block // batch):
            X = (rng.standard_normal((batch, K)) * math.sqrt(d)) @ V + rng.standard_normal((batch, d))
            est.partial_fit(X)
        return est
    t0 = time.perf_counter()
    peak, est = peak_memory(stream)
    n = n_blocks * block
    return {"d": d, "n": n, "epsilon": eps, "method": f"streaming (block {block}, batches of {batch})",
            "n_iter": est.n_iter_, "sin2": sin_theta_distance(est.components_, V),
            "seconds": time.perf_counter() - t0, "peak_MB": peak / 2**20, "data_MB": n * d * 8 / 2**20,
            "dense_covariance_MB": d * d * 8 / 2**20}


def coherence(quick):
    d = 128 if quick else 512
    seeds = (0,) if quick else (0, 1, 2)
    records = []
    for kind in ("incoherent", "random", 32, 8, 1):
        _, V, _ = make_spiked_covariance(2, d, K, coherence=kind, random_state=3)
        A = (V.T * np.array([400.0, 300.0, 200.0])) @ V + 5.0 * np.eye(d)
        mu0 = d / K * float(np.max(np.sum(V**2, axis=0)))
        row = {"coherence": str(kind), "d": d, "mu0": mu0, "max_abs_entry": float(np.abs(V).max())}
        for method in ("power", "analyze_gauss"):
            vals = [sin_theta_distance(PrivatePCA(K, epsilon=1.0, delta=DELTA, input="precomputed",
                                                  method=method, random_state=s).fit(A).components_, V)
                    for s in seeds]
            row[f"{method}_sin2"] = float(np.mean(vals))
        records.append(row)
        print(row, flush=True)
    return records


# Fixed colours: a method keeps its colour in every panel, bars included.
_GRID_LINES = (("analyze_gauss_sin2", "Analyze Gauss", dict(marker="s", ls="--", color="C1")),
               ("power_sin2", "power method", dict(marker="^", ls="-.", color="C2")),
               ("diffprivlib_sin2", "diffprivlib", dict(marker="x", ls=":", color="C4")),
               ("sklearn_sin2", "scikit-learn PCA (non-private)", dict(color="k", ls="-")))


def plot(records, coh):
    """Part 1 at the largest n (one panel per d) and part 3; redraws from the saved JSON too."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    n_max = max(r["n"] for r in records)
    ds = sorted({r["d"] for r in records})
    fig, axes = plt.subplots(1, len(ds) + 1, figsize=(4.2 * (len(ds) + 1), 4.0))
    label = _default_label([r for r in records if r["n"] == n_max])  # one legend for all panels
    for ax, d in zip(axes, ds):
        rows = sorted((r for r in records if r["d"] == d and r["n"] == n_max),
                      key=lambda r: r["epsilon"])
        _grid_panel(ax, rows, label)
        ax.set_title(f"row-level, d={d}, n={n_max}")
    _coherence_panel(axes[-1], coh)
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", bbox_to_anchor=(0.5, 0.05), ncol=len(labels),
               fontsize=8, frameon=False)
    fig.text(0.5, 0.01, _missing_note(records), fontsize=8, color="0.3", ha="center")
    fig.tight_layout(rect=(0, 0.12, 1, 1))
    path = plot_path(NAME)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def _grid_panel(ax, rows, default_label):
    eps = [r["epsilon"] for r in rows]
    for key, label, style in _GRID_LINES:
        ys = [np.nan if r[key] is None else r[key] for r in rows]
        if not np.all(np.isnan(ys)):  # a peer that finished no cell gets a note, not a legend entry
            ax.plot(eps, ys, label=label, **style)
    # Large hollow circles: the default stays visible where it is the same fit as a method above.
    ax.plot(eps, [r["default_sin2"] for r in rows], "o", ms=11, mfc="none", mew=1.5, color="C3",
            label=default_label, zorder=3)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xticks(eps, [f"{e:g}" for e in eps])
    ax.minorticks_off()
    ax.set_xlabel("epsilon")
    ax.set_ylabel("sin^2 to the true top-3 subspace")


_METHOD_NAMES = {"analyze_gauss": "Analyze Gauss", "power": "power method"}


def _default_label(rows):
    """Name the method the default resolved to when it is the same in every plotted cell."""
    picked = {r["default_method"] for r in rows}
    if len(picked) != 1:
        return "PrivatePCA default"
    method = picked.pop()
    return f"PrivatePCA default (= {_METHOD_NAMES.get(method, method)})"


def _missing_note(records):
    finished = sum(r["diffprivlib_sin2"] is not None for r in records)
    if finished:
        return "diffprivlib: gaps are cells that timed out (see pca.md)"
    statuses = {r["diffprivlib_status"].split(" (")[0].split(":")[0] for r in records}
    return (f"diffprivlib finished none of the {len(records)} cells "
            f"({' / '.join(sorted(statuses))}; see pca.md), so it has no line.")


def _coherence_panel(ax, coh):
    x = np.arange(len(coh))
    ax.bar(x - 0.2, [r["power_sin2"] for r in coh], 0.4, label="entry-level PPM", color="C2")
    ax.bar(x + 0.2, [r["analyze_gauss_sin2"] for r in coh], 0.4, label="entry-level Analyze Gauss",
           color="C1")
    ax.set_xticks(x, [f"{_coherence_name(r['coherence'])}\nmu0 = {r['mu0']:.0f}" for r in coh],
                  fontsize=8)
    ax.set_yscale("log")
    ax.set_xlabel("top eigenvectors (coherence mu0: 1 = spread out)")
    ax.set_ylabel("sin^2 to the true top-3 subspace")
    ax.set_title(f"entry level, precomputed, d={coh[0]['d']}, eps=1")
    ax.legend(fontsize=7, loc="upper left")


def _coherence_name(kind):
    return {"incoherent": "Hadamard", "random": "random"}.get(kind, f"{kind}-sparse")


def replot():
    """Redraw ``pca.png`` from ``pca.json`` (no benchmark rerun)."""
    saved = load_results(NAME)
    return plot(saved["records"], saved["coherence"])


def run(quick: bool = False) -> list[dict]:
    t0 = time.perf_counter()
    records = grid(quick)
    big = large_d(quick)
    coh = coherence(quick)
    plot(records, coh)
    wins = sum(r["default_beats_peers"] for r in records)
    finished = [r for r in records if r["diffprivlib_sin2"] is not None]
    summary = (
        f"Spiked covariance (k={K}, spike 5), rows clipped to 2 sqrt(d+4), delta={DELTA:g}; sin^2 to the "
        f"true top-{K} subspace (one noise seed per cell). PrivatePCA's default method is at least as "
        f"accurate as the better of diffprivlib and Analyze Gauss in {wins} of {len(records)} cells (where "
        f"the default resolves to Analyze Gauss, the two columns are the same fit). diffprivlib finished "
        f"{len(finished)} of {len(records)} cells within {DPL_TIMEOUT[quick]:g} s each (a (d, epsilon) "
        f"that timed out at n=5000 was not rerun at n=50000).\n\n"
        "Power method at large d (strong spike = d; the d x d covariance alone would need "
        "dense_covariance_MB; peak_MB is what the fit allocates: one centred copy of the data plus "
        "O(dp), and for the streaming row the batches being generated, never the stream):\n\n"
        + _table(big) + "\n\n"
        "Entry-level PPM vs Analyze Gauss on a precomputed matrix, by coherence of its top eigenvectors "
        "(mu0 = (d/k) max_i ||V^T e_i||^2, 1 = incoherent, d/k = coherent):\n\n" + _table(coh) +
        f"\n\nTotal run time {time.perf_counter() - t0:.0f} s.\n\nRow-level grid:")
    columns = ["d", "n", "epsilon", "default_method", "default_sin2", "analyze_gauss_sin2", "power_sin2",
               "power_n_iter", "diffprivlib_sin2", "diffprivlib_status", "sklearn_sin2", "default_s",
               "analyze_gauss_s", "power_s", "diffprivlib_s"]
    write_results(NAME, records, summary=summary, columns=columns,
                  extra={"large_d": big, "coherence": coh, "quick": quick})
    return records


def _table(rows):
    from benchmarks._common import markdown_table
    return markdown_table(rows)


SCALING_DIMS = (100, 300, 500, 1000, 2000, 3000)
SCALING_METHODS = ("auto", "analyze_gauss", "power", "clipped_power")


def scaling(quick=False):
    """The fit's cost against d (module docstring, ``--scaling``); one row per d."""
    import warnings

    from sklearn.decomposition import PCA as SkPCA
    n, k, records = (1000 if quick else 5000), 5, []
    for d in SCALING_DIMS[:2] if quick else SCALING_DIMS:
        X, V, _ = make_spiked_covariance(n, d, k, spike=5.0, random_state=0)
        t, est = timed(lambda: SkPCA(k).fit(X))
        row = dict(d=d, n=n, sklearn_s=t, sklearn_sin2=sin_theta_distance(est.components_, V))
        for method in SCALING_METHODS:
            with warnings.catch_warnings():  # noise-dominated components: expected at small n
                warnings.simplefilter("ignore")
                t, est = timed(lambda: PrivatePCA(k, epsilon=1.0, data_norm=math.sqrt(d),
                                                  method=method, n_oversamples=5,
                                                  random_state=0).fit(X))
            row[f"{method}_s"], row[f"{method}_sin2"] = t, sin_theta_distance(est.components_, V)
            row[f"{method}_x"] = t / row["sklearn_s"]
            if method == "auto":
                row["auto_method"] = est.method_
        print(row, flush=True)
        records.append(row)
        _write_scaling(records)  # after every d: a long run that is stopped keeps what it did
    return records


def _write_scaling(records):
    columns = ["d", "n", "auto_method", "sklearn_s"] + [f"{m}_{c}" for m in SCALING_METHODS
                                                        for c in ("s", "x", "sin2")]
    write_results("pca_scaling", records, columns=columns, summary=(
        "One fit's cost against d (bench_pca.py --scaling): spiked covariance, k = 5, "
        "n_oversamples = 5, epsilon = 1, data_norm = sqrt(d), one seed. `_s`: seconds, `_x`: "
        "over scikit-learn's PCA in the same run, `_sin2`: sin^2 to the true subspace."))


if __name__ == "__main__":
    if "--scaling" in sys.argv:
        scaling(quick="--quick" in sys.argv)
    elif "--plot-only" in sys.argv:  # redraw the picture from the saved JSON
        replot()
    else:
        run(quick="--quick" in sys.argv)
