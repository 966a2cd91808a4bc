"""Private tensor completion: the privacy-utility curve, speed against TensorLy, the seed's study.

* Privacy-utility on a study with enough data: 100x100x100 rank 3, SNR 1, truth in [0, 1], with
  5%, 10% and 20% observed, epsilon 0.5 .. 16, the default private mode (``perturbation="auto"``,
  DP-ALS): held-out RMSE against the noiseless truth and the share of the non-private improvement
  over the observed-mean predictor that the private fit keeps (where it is <= 0, privacy costs
  all the utility).
* RMSE against epsilon (0.1 .. 10^0.5) for every mode, CP and Tucker, on the seed's 20x20x20 rank 3
  study (SNR 1, 50% missing), beside TensorLy's masked parafac and the observed-mean predictor;
  RMSE against the missing ratio at epsilon = 1.
* Speed: one ALS sweep (in the layout chosen, and in the sorted sparse layout beside it), one
  DP-ALS sweep and one DP gradient step at 100^3 with 5e5 entries,
  rank 3 (and at the MovieLens shape with 1e5 entries), and TensorLy's masked parafac against
  dptensor's ALS at equal iterations, with both held-out RMSEs, at every size.
* MovieLens-100K ua/ub when the files are present locally (skipped with a message otherwise).

Run ``python benchmarks/bench_completion.py [--quick]``; ``--tensorly-only`` reruns the TensorLy
comparison alone and keeps every other saved record.
"""
from __future__ import annotations

import os
import sys
import time
import warnings

import numpy as np

from benchmarks._common import (load_results, peak_memory, plot_path, timed, warm_allocator,
                               write_results)
from dptensor import PrivacyWarning
from dptensor.algorithms.completion.observations import Observations
from dptensor.algorithms.completion.als import als
from dptensor.algorithms.completion.dp_als import dp_als
from dptensor.algorithms.completion.gradient import gradient_descent
from dptensor.algorithms.completion.model import init_model
from dptensor.completion import PrivateTensorCompletion
from dptensor.datasets import make_low_rank_tensor

MODES = [None, "input", "gradient", "output", "statistics"]


def _modes(kind):
    """DP-ALS ("statistics") fits CP models only."""
    return MODES if kind == "cp" else MODES[:-1]


def _rmse(a, b):
    return float(np.sqrt(np.mean((a - b) ** 2)))


def _fit_rmse(data, **params):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", PrivacyWarning)
        model = PrivateTensorCompletion(**params).fit(data["indices"], data["values"])
    return _rmse(model.predict(data["test_indices"]), data["test_values"])


def _value_range(data):
    # Public range for the study: the noiseless tensor is min-max scaled to [0, 1]; with SNR 1 the
    # noise std is about the tensor's std, so three of them either side cover the noisy values.
    pad = 3 * data["noise_std"]
    return (-pad, 1 + pad)


def _tensorly_parafac(data, rank=3, n_iter=100, kind="cp"):
    import tensorly as tl
    from tensorly.decomposition import parafac, tucker

    dense = np.zeros(data["shape"])
    mask = np.zeros(data["shape"], dtype=bool)
    dense[tuple(data["indices"].T)] = data["values"]
    mask[tuple(data["indices"].T)] = True
    if kind == "cp":
        cp = parafac(tl.tensor(dense), rank, mask=tl.tensor(mask), n_iter_max=n_iter, init="random",
                     random_state=0)
        full = tl.cp_to_tensor(cp)
    else:
        tk = tucker(tl.tensor(dense), [rank] * dense.ndim, mask=tl.tensor(mask), n_iter_max=n_iter,
                    init="random", random_state=0)
        full = tl.tucker_to_tensor(tk)
    return _rmse(full[tuple(data["test_indices"].T)], data["test_values"])


def study_epsilon(seeds, epsilons):
    records = []
    for seed in seeds:
        data = make_low_rank_tensor(snr=1.0, random_state=seed)
        vr = _value_range(data)
        mean = _rmse(np.full(len(data["test_values"]), data["values"].mean()), data["test_values"])
        records.append({"study": "epsilon", "seed": seed, "decomposition": "-", "mode": "observed mean",
                        "epsilon": np.inf, "rmse": mean})
        for kind in ("cp", "tucker"):
            try:
                records.append({"study": "epsilon", "seed": seed, "decomposition": kind,
                                "mode": "tensorly masked", "epsilon": np.inf,
                                "rmse": _tensorly_parafac(data, kind=kind)})
            except ImportError:
                pass
            records.append({"study": "epsilon", "seed": seed, "decomposition": kind, "mode": "non-private",
                            "epsilon": np.inf, "rmse": _fit_rmse(data, decomposition=kind, random_state=seed)})
            for mode in _modes(kind)[1:]:
                for eps in epsilons:
                    records.append({"study": "epsilon", "seed": seed, "decomposition": kind, "mode": mode,
                                    "epsilon": float(eps),
                                    "rmse": _fit_rmse(data, decomposition=kind, perturbation=mode, epsilon=eps,
                                                      value_range=vr, random_state=seed)})
    return records


def study_missing(seeds, ratios, epsilon=1.0):
    records = []
    for seed in seeds:
        for ratio in ratios:
            data = make_low_rank_tensor(snr=1.0, missing_ratio=ratio, random_state=seed)
            vr = _value_range(data)
            for kind in ("cp", "tucker"):
                for mode in _modes(kind):
                    params = dict(decomposition=kind, random_state=seed)
                    if mode is not None:
                        params.update(perturbation=mode, epsilon=epsilon, value_range=vr)
                    records.append({"study": "missing", "seed": seed, "decomposition": kind,
                                    "mode": mode or "non-private", "missing_ratio": float(ratio),
                                    "epsilon": epsilon if mode else np.inf, "rmse": _fit_rmse(data, **params)})
    return records


def study_size_epsilon(seeds, fractions, epsilons):
    """The privacy-utility curve: 100^3 rank 3, SNR 1, observed fraction x epsilon, default mode."""
    records = []
    for seed in seeds:
        for frac in fractions:
            data = make_low_rank_tensor((100, 100, 100), 3, missing_ratio=1 - frac, snr=1.0, random_state=seed)
            test = {"test_indices": data["test_indices"][:200_000], "test_values": data["test_values"][:200_000]}
            data = {**data, **test}
            vr = _value_range(data)
            mean = _rmse(np.full(len(data["test_values"]), data["values"].mean()), data["test_values"])
            best = _fit_rmse(data, random_state=seed)
            base = {"study": "size x epsilon", "seed": seed, "observed": frac, "n_obs": len(data["values"]),
                    "observed_mean_rmse": mean, "non_private_rmse": best}
            for eps in epsilons:
                err = _fit_rmse(data, epsilon=float(eps), value_range=vr, random_state=seed)
                records.append({**base, "epsilon": float(eps), "rmse": err,
                                "kept": (mean - err) / (mean - best)})
    return records


def _random_problem(rng, shape, n):
    flat = rng.choice(int(np.prod(shape)), n, replace=False)
    return np.stack(np.unravel_index(flat, shape), axis=1), rng.uniform(-0.5, 0.5, n)


def speed(quick):
    """Per-sweep cost at 100^3 with 5e5 entries (and the MovieLens shape), rank 3; TensorLy beside."""
    rng = np.random.default_rng(0)
    records = []
    # The MovieLens shape first: benchmarks/headline.py quotes the first CP record as "1e5 entries".
    sizes = [((943, 1682, 212), 20_000)] if quick else [((943, 1682, 212), 100_000), ((100, 100, 100), 500_000)]
    for shape, n in sizes:
        X, y = _random_problem(rng, shape, n)
        obs = Observations(X, shape)
        sparse_obs = Observations(X, shape, layout="sparse")
        for kind in ("cp", "tucker"):
            model = init_model(shape, 3, kind, rng)
            als(obs, y, model, reg=0.01, reg_core=0.01, n_iter=1)  # builds the layout once
            repeat = 1 if quick else 5
            t_als, _ = timed(lambda: als(obs, y, model, reg=0.01, reg_core=0.01, n_iter=1, tol=0), repeat=repeat)
            mem_als, _ = peak_memory(lambda: als(obs, y, model, reg=0.01, reg_core=0.01, n_iter=1))
            layout = "sparse" if obs.grid(model) is None else "dense"
            if layout == "dense":  # the sorted sparse layout beside it, for the record
                als(sparse_obs, y, model, reg=0.01, reg_core=0.01, n_iter=1)
                t_sparse, _ = timed(lambda: als(sparse_obs, y, model, reg=0.01, reg_core=0.01, n_iter=1, tol=0),
                                    repeat=repeat)
            else:
                t_sparse = t_als
            gd_model = init_model(shape, 3, kind, rng, offset_like=True)
            step = lambda: gradient_descent(obs, y, gd_model, learning_rate=0.35, n_iter=1, reg=0.01,  # noqa
                                            reg_core=0.01, clip_norm=0.1, noise_multiplier=5.0, damping=10.0,
                                            rng=rng)
            t_gd, _ = timed(step, repeat=repeat)
            rec = {"study": "speed", "tool": "dptensor", "decomposition": kind, "shape": str(shape), "n_obs": n,
                   "layout": layout, "als_sweep_s": t_als, "als_sweep_sparse_layout_s": t_sparse,
                   "dp_gd_step_s": t_gd, "peak_mb": mem_als / 2**20}
            if kind == "cp":
                dp_model = init_model(shape, 3, kind, rng)
                sweep = lambda: dp_als(obs, y, dp_model, n_iter=1, noise_multiplier=1.0, rng=rng,  # noqa
                                       s2=0.01, clip=0.1)
                rec["dp_als_sweep_s"], _ = timed(sweep, repeat=repeat)
            records.append(rec)
    return records + speed_tensorly(quick)


def speed_tensorly(quick):
    """TensorLy's masked CP and Tucker against dptensor's ALS at equal iterations, interleaved."""
    try:
        import tensorly as tl
        from tensorly.decomposition import parafac, tucker
    except ImportError:
        print("tensorly not installed: skipping the TensorLy speed comparison")
        return []
    records = []
    warm_allocator()  # no contender's speed depends on which fits ran before it
    # Equal iterations, held-out RMSE of both (low-rank studies), at sizes TensorLy holds densely.
    iters = 20
    sizes = ([((60, 60, 60), 0.5)] if quick
             else [((60, 60, 60), 0.5), ((100, 100, 100), 0.9), ((943, 1682, 10), 0.99)])
    for size, missing in sizes:
        data = make_low_rank_tensor(size, 3, missing_ratio=missing, snr=1.0, random_state=0)
        Xs, ys = data["indices"], data["values"]
        Xt, yt = data["test_indices"][:200_000], data["test_values"][:200_000]
        dense = np.zeros(size)
        mask = np.zeros(size, dtype=bool)
        dense[tuple(Xs.T)] = ys
        mask[tuple(Xs.T)] = True
        for kind in ("cp", "tucker"):
            if kind == "cp":
                run = lambda: tl.cp_to_tensor(parafac(tl.tensor(dense), 3, mask=tl.tensor(mask),  # noqa
                                                      n_iter_max=iters, init="random", tol=0, random_state=0))
            else:
                run = lambda: tl.tucker_to_tensor(tucker(tl.tensor(dense), [3, 3, 3], mask=tl.tensor(mask),  # noqa
                                                         n_iter_max=iters, init="random", tol=0, random_state=0))
            # Equal work: the model TensorLy fits, a factor on every mode (the default CP fit
            # without noise also chooses between that and (0, 1) on held-out entries: ~3 fits).
            ours = PrivateTensorCompletion(decomposition=kind, n_iter=iters, tol=0, random_state=0,
                                           factor_modes=None)
            # Best of five (two at the largest size), the two interleaved: the load of a shared
            # machine moves both alike.
            # Wall and CPU (this process's) seconds: with one BLAS thread the CPU time is what the
            # fit took on its core, which an oversubscribed machine's wall time overstates.
            t_tl = t_us = c_tl = c_us = np.inf
            for _ in range(1 if quick else 2 if size == sizes[-1][0] else 5):
                c0 = time.process_time()
                t, full = timed(run)
                t_tl, c_tl = min(t_tl, t), min(c_tl, time.process_time() - c0)
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore", PrivacyWarning)
                    c0 = time.process_time()
                    t, _ = timed(lambda: ours.fit(Xs, ys))
                t_us, c_us = min(t_us, t), min(c_us, time.process_time() - c0)
            tl_rmse = _rmse(full[tuple(Xt.T)], yt)
            # Time for dptensor to reach TensorLy's accuracy after its ``iters`` iterations.
            t_match = np.nan
            for k in range(1, iters + 1):
                fast = PrivateTensorCompletion(decomposition=kind, n_iter=k, tol=0, random_state=0,
                                               factor_modes=None)
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore", PrivacyWarning)
                    t_k, _ = timed(lambda: fast.fit(Xs, ys))
                if _rmse(fast.predict(Xt), yt) <= tl_rmse:
                    t_match = t_k
                    break
            records.append({"study": "speed", "tool": "tensorly masked vs dptensor ALS", "decomposition": kind,
                            "shape": str(size), "n_obs": len(ys), "iterations": iters,
                            "tensorly_s_per_iter": t_tl / iters, "dptensor_s_per_iter": t_us / iters,
                            "speedup": t_tl / t_us, "tensorly_cpu_s_per_iter": c_tl / iters,
                            "dptensor_cpu_s_per_iter": c_us / iters, "speedup_cpu": c_tl / c_us,
                            "tensorly_rmse": tl_rmse,
                            "dptensor_rmse": _rmse(ours.predict(Xt), yt),
                            "dptensor_s_to_tensorly_rmse": t_match, "dptensor_sweeps_to_tensorly_rmse": k,
                            "speedup_at_tensorly_rmse": t_tl / t_match})
    return records


def _mean_by(records, keys):
    groups = {}
    for r in records:
        groups.setdefault(tuple(r.get(k) for k in keys), []).append(r["rmse"])
    return {k: float(np.mean(v)) for k, v in groups.items()}


def _plot(eps_records, miss_records, size_records, epsilons, ratios):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from matplotlib.ticker import NullFormatter

    fig, axes = plt.subplots(3, 2, figsize=(11, 11.5))
    # one colour a mode in every panel; the non-private fit is black everywhere
    colors = {"non-private": "k", **{mode: f"C{i + 1}" for i, mode in enumerate(MODES[1:])}}
    eps_mean = _mean_by(eps_records, ["decomposition", "mode", "epsilon"])
    miss_mean = _mean_by(miss_records, ["decomposition", "mode", "missing_ratio"])
    observed_mean = np.mean([r["rmse"] for r in eps_records if r["mode"] == "observed mean"])
    ticks = [0.1, 0.3, 1.0, 3.0]
    for col, kind in enumerate(("cp", "tucker")):
        ax = axes[1, col]
        for mode in MODES[1:]:
            if (kind, mode, float(epsilons[0])) in eps_mean:
                ax.plot(epsilons, [eps_mean[(kind, mode, float(e))] for e in epsilons], "o-", label=mode,
                        color=colors[mode])
        ax.axhline(eps_mean[(kind, "non-private", np.inf)], color="k", label="non-private")
        if (kind, "tensorly masked", np.inf) in eps_mean:
            ax.axhline(eps_mean[(kind, "tensorly masked", np.inf)], color="k", ls=":", label="TensorLy masked")
        ax.axhline(observed_mean, color="gray", ls="--", label="observed mean")
        ax.set(xscale="log", yscale="log", xlabel="epsilon", ylabel="RMSE (missing entries)",
               title=f"{kind.upper()}: 20x20x20 rank 3, SNR 1, 50% missing")
        ax.set_xticks(ticks, [f"{t:g}" for t in ticks])
        ax.minorticks_off()
        ax = axes[2, col]
        for mode in ["non-private", *MODES[1:]]:
            if (kind, mode, float(ratios[0])) in miss_mean:
                ax.plot(ratios, [miss_mean[(kind, mode, float(r))] for r in ratios], "o-", label=mode,
                        color=colors[mode])
        ax.set(yscale="log", xlabel="missing ratio", ylabel="RMSE (missing entries)",
               title=f"{kind.upper()}: epsilon = 1")
        ax.yaxis.set_minor_formatter(NullFormatter())  # minor labels overlap on a short log axis
    for ax in axes[1:].ravel():  # each panel names its own lines (Tucker has fewer modes)
        ax.legend(fontsize=8)
    # Privacy-utility on the 100^3 study: the share of the non-private gain kept, and the RMSE.
    kept = _mean_by([{**r, "rmse": r["kept"]} for r in size_records], ["observed", "epsilon"])
    err = _mean_by(size_records, ["observed", "epsilon"])
    size_eps = sorted({r["epsilon"] for r in size_records})
    for frac in sorted({r["observed"] for r in size_records}):
        n = next(r["n_obs"] for r in size_records if r["observed"] == frac)
        axes[0, 0].plot(size_eps, [kept[(frac, e)] for e in size_eps], "o-", label=f"{n:.0e} observed")
        line, = axes[0, 1].plot(size_eps, [err[(frac, e)] for e in size_eps], "o-", label=f"{n:.0e} observed")
        ref = [r for r in size_records if r["observed"] == frac]
        axes[0, 1].axhline(np.mean([r["non_private_rmse"] for r in ref]), color=line.get_color(), lw=0.8)
        axes[0, 1].axhline(np.mean([r["observed_mean_rmse"] for r in ref]), color=line.get_color(), lw=0.8, ls="--")
    axes[0, 0].axhline(0.0, color="gray", ls="--")
    axes[0, 0].axhline(0.5, color="gray", ls=":")
    axes[0, 0].set(xscale="log", xlabel="epsilon", ylabel="share of non-private gain kept",
                   title="100^3 rank 3, SNR 1: default private mode (DP-ALS)")
    axes[0, 1].set(xscale="log", yscale="log", xlabel="epsilon", ylabel="RMSE (noiseless truth)",
                   title="solid: non-private, dashed: observed mean")
    for ax in axes[0]:
        ax.set_xticks(size_eps, [f"{e:g}" for e in size_eps])
        ax.minorticks_off()
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(plot_path("completion"), dpi=110)


def run(quick: bool = False) -> list[dict]:
    seeds = range(1) if quick else range(5)
    epsilons = np.logspace(-1, 0.5, 4 if quick else 7)
    ratios = np.linspace(0.1, 0.9, 5 if quick else 9)
    t0 = time.perf_counter()
    size_records = study_size_epsilon(range(1) if quick else range(3), [0.1] if quick else [0.05, 0.1, 0.2],
                                      [1.0, 4.0] if quick else [0.5, 1.0, 2.0, 4.0, 8.0, 16.0])
    eps_records = study_epsilon(seeds, epsilons)
    miss_records = study_missing(range(1) if quick else range(3), ratios)
    speed_records = speed(quick)
    records = size_records + eps_records + miss_records + speed_records
    try:
        _plot(eps_records, miss_records, size_records, epsilons, ratios)
    except ImportError:
        print("matplotlib not installed: no plot")
    _write(records, quick, time.perf_counter() - t0)
    return records


def run_tensorly_only() -> list[dict]:
    """Rerun the TensorLy comparison alone (full sizes); every other record is kept from the saved
    results, and the summary is rewritten from them."""
    saved = load_results("completion")
    t0 = time.perf_counter()
    fresh = speed_tensorly(False)
    keep = [r for r in saved["records"] if "tensorly_s_per_iter" not in r]
    records = keep + fresh
    _write(records, False, saved.get("total_seconds", _saved_total()),
           tensorly_rerun_seconds=time.perf_counter() - t0,
           load_average_1min=os.getloadavg()[0])
    return records


def _saved_total():
    """The full run's total seconds, from the saved summary (results written before it was kept)."""
    import re

    from benchmarks._common import RESULTS

    found = re.search(r"Total (\d+) s", (RESULTS / "completion.md").read_text())
    return float(found.group(1)) if found else float("nan")


def _write(records, quick, total_seconds, **extra):
    """The results' JSON and markdown from every record."""
    size_records = [r for r in records if r["study"] == "size x epsilon"]
    eps_records = [r for r in records if r["study"] == "epsilon"]
    speed_records = [r for r in records if r["study"] == "speed"]

    kept = _mean_by([{**r, "rmse": r["kept"]} for r in size_records], ["n_obs", "epsilon"])
    kept_table = [{"observed entries": k[0], "epsilon": k[1], "share of non-private gain kept": v}
                  for k, v in sorted(kept.items())]
    eps_mean = _mean_by(eps_records, ["decomposition", "mode", "epsilon"])
    table = [{"decomposition": k[0], "mode": k[1], "epsilon": k[2], "mean_rmse": v}
             for k, v in sorted(eps_mean.items(), key=lambda kv: (kv[0][0], str(kv[0][1]), kv[0][2]))]
    from benchmarks._common import markdown_table

    speed_table = markdown_table([r for r in speed_records if r["tool"] == "dptensor"],
                                 ["decomposition", "shape", "n_obs", "layout", "als_sweep_s",
                                  "als_sweep_sparse_layout_s", "dp_als_sweep_s", "dp_gd_step_s", "peak_mb"])
    tl_rows = [r for r in speed_records if "tensorly_s_per_iter" in r]
    tl_table = markdown_table(tl_rows, ["decomposition", "shape", "n_obs", "iterations", "tensorly_s_per_iter",
                                        "dptensor_s_per_iter", "speedup", "tensorly_cpu_s_per_iter",
                                        "dptensor_cpu_s_per_iter", "speedup_cpu", "tensorly_rmse", "dptensor_rmse",
                                        "dptensor_sweeps_to_tensorly_rmse", "speedup_at_tensorly_rmse"]) \
        if tl_rows else "(tensorly not installed)"
    summary = ("One BLAS thread; timings on a shared 2-core machine are noisy (best of five runs, two for "
               "TensorLy at its largest size; TensorLy and dptensor interleaved; the TensorLy comparison in "
               "wall and in CPU seconds of this process, which starts it with the allocator warm: no contender "
               "page-faults on temporaries that another's earlier fits spared it). RMSE on held-out entries against "
               "the noiseless tensor. Public value range = [-3 sigma, 1 + 3 sigma] (sigma: the generator's noise "
               "level).\n\n## Privacy-utility, 100^3 rank 3, SNR 1, default private mode (DP-ALS)\n\n"
               "Share of the non-private improvement over the observed-mean predictor kept by the private fit "
               f"(mean over {1 if quick else 3} seeds; <= 0: privacy costs all the utility).\n\n"
               + markdown_table(kept_table)
               + "\n\n## Speed (seconds per sweep / step)\n\n" + speed_table
               + "\n\n## TensorLy masked decomposition against dptensor ALS, equal iterations\n\n"
               + "Equal work: both fit a factor on every mode (``factor_modes=None``; the default "
               "CP fit without noise also fits ``(0, 1)`` to choose between the two on held-out "
               "entries, about three fits).\n\n" + tl_table
               + "\n\nMovieLens-100K: see movielens.md (bench_movielens)."
               + f" Total {total_seconds:.0f} s"
               + (f" (the TensorLy comparison rerun alone: {extra['tensorly_rerun_seconds']:.0f} s, "
                  f"1-minute load average {extra['load_average_1min']:.1f})" if extra else "")
               + ".\n\n## 20x20x20 study (mean RMSE over seeds)")
    write_results("completion", records, summary=summary + "\n\n" + _md(table),
                  columns=["study", "decomposition", "mode", "epsilon", "missing_ratio", "observed", "seed", "rmse"],
                  extra={"total_seconds": total_seconds, **extra})


def _md(rows):
    from benchmarks._common import markdown_table

    return markdown_table(rows, ["decomposition", "mode", "epsilon", "mean_rmse"])


def replot() -> None:
    """Redraw the picture from the saved results (``--plot-only``), without rerunning."""
    records = load_results("completion")["records"]
    by = {study: [r for r in records if r["study"] == study]
          for study in ("epsilon", "missing", "size x epsilon")}
    epsilons = sorted({r["epsilon"] for r in by["epsilon"] if np.isfinite(r["epsilon"])})
    ratios = sorted({r["missing_ratio"] for r in by["missing"]})
    _plot(by["epsilon"], by["missing"], by["size x epsilon"], epsilons, ratios)


if __name__ == "__main__" and "--plot-only" in sys.argv:
    replot()
elif __name__ == "__main__":
    # One BLAS thread: the machine these numbers come from is shared, and oversubscribed threaded
    # BLAS on small (n_obs x rank) products was measured 10x slower than one thread.
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:
        run(quick="--quick" in sys.argv)
    else:
        with threadpool_limits(1):
            if "--tensorly-only" in sys.argv:  # the TensorLy comparison alone, the rest kept
                run_tensorly_only()
            else:
                run(quick="--quick" in sys.argv)
