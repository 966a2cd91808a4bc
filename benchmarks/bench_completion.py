"""Private tensor completion: the seed's synthetic study, speed against TensorLy, MovieLens-100K.

* RMSE against epsilon (0.1 .. 10^0.5) for input, gradient and output perturbation and the
  non-private fit, CP and Tucker, 20x20x20 rank 3, SNR 1, 50% missing; RMSE measured against the
  noiseless tensor on the missing entries (mean over seeds), beside TensorLy's masked parafac and
  the observed-mean predictor.
* RMSE against the missing ratio (0.1 .. 0.9) at epsilon = 1.
* Speed: one epoch (ALS sweep, DP gradient step) at 943 x 1682 x 212 with 1e5 entries, rank 3,
  and peak memory; TensorLy's masked parafac / tucker per iteration at sizes it can hold densely.
* MovieLens-100K ua/ub when the files are present locally (skipped with a message otherwise).

Run ``python benchmarks/bench_completion.py [--quick]``.
"""
from __future__ import annotations

import sys
import time
import warnings

import numpy as np

from benchmarks._common import peak_memory, plot_path, timed, write_results
from dptensor import PrivacyWarning
from dptensor._completion_models import Observations, als, gradient_descent, init_model
from dptensor.completion import PrivateTensorCompletion
from dptensor.datasets import load_movielens_100k, make_low_rank_tensor

MODES = [None, "input", "gradient", "output"]


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
            for mode in MODES[1:]:
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
                for mode in MODES:
                    params = dict(decomposition=kind, random_state=seed)
                    if mode is not None:
                        params.update(perturbation=mode, epsilon=epsilon, value_range=vr)
                    records.append({"study": "missing", "seed": seed, "decomposition": kind,
                                    "mode": mode or "non-private", "missing_ratio": float(ratio),
                                    "epsilon": epsilon if mode else np.inf, "rmse": _fit_rmse(data, **params)})
    return records


def speed(quick):
    """One epoch at the MovieLens shape, 1e5 entries (2e4 quick), rank 3; TensorLy at sizes it can hold."""
    rng = np.random.default_rng(0)
    shape, n = (943, 1682, 212), (20_000 if quick else 100_000)
    flat = rng.choice(int(np.prod(shape)), n, replace=False)
    X = np.stack(np.unravel_index(flat, shape), axis=1)
    y = rng.uniform(-0.5, 0.5, n)
    records = []
    for kind in ("cp", "tucker"):
        obs = Observations(X, shape)
        model = init_model(shape, 3, kind, rng)
        repeat = 1 if quick else 3
        t_als, _ = timed(lambda: als(obs, y, model, reg=0.01, reg_core=0.01, n_iter=1), repeat=repeat)
        mem_als, _ = peak_memory(lambda: als(obs, y, model, reg=0.01, reg_core=0.01, n_iter=1))
        gd_model = init_model(shape, 3, kind, rng, offset_like=True)
        step = lambda: gradient_descent(obs, y, gd_model, learning_rate=0.35, n_iter=1, reg=0.01, reg_core=0.01,  # noqa
                                        clip_norm=0.1, noise_std=1.0, damping=10.0, rng=rng)
        t_gd, _ = timed(step, repeat=repeat)
        mem_gd, _ = peak_memory(step)
        records.append({"study": "speed", "tool": "dptensor", "decomposition": kind, "shape": str(shape),
                        "n_obs": n, "als_sweep_s": t_als, "dp_gd_step_s": t_gd,
                        "peak_mb": max(mem_als, mem_gd) / 2**20})
    try:
        import tensorly as tl
        from tensorly.decomposition import parafac, tucker
    except ImportError:
        print("tensorly not installed: skipping the TensorLy speed comparison")
        return records
    sizes = [(60, 60, 60)] if quick else [(60, 60, 60), (943, 1682, 10)]
    for size in sizes:
        n_obs = min(100_000, int(np.prod(size)) // 2)
        flat = rng.choice(int(np.prod(size)), n_obs, replace=False)
        Xs = np.stack(np.unravel_index(flat, size), axis=1)
        ys = rng.uniform(-0.5, 0.5, n_obs)
        dense = np.zeros(size)
        mask = np.zeros(size, dtype=bool)
        dense[tuple(Xs.T)] = ys
        mask[tuple(Xs.T)] = True
        iters = 5
        for kind in ("cp", "tucker"):
            if kind == "cp":
                run = lambda: parafac(tl.tensor(dense), 3, mask=tl.tensor(mask), n_iter_max=iters,  # noqa
                                      init="random", tol=0, random_state=0)
            else:
                run = lambda: tucker(tl.tensor(dense), [3, 3, 3], mask=tl.tensor(mask), n_iter_max=iters,  # noqa
                                     init="random", tol=0, random_state=0)
            t_tl, _ = timed(run)
            obs = Observations(Xs, size)
            model = init_model(size, 3, kind, rng)
            t_us, _ = timed(lambda: als(obs, ys, model, reg=0.01, reg_core=0.01, n_iter=iters))
            records.append({"study": "speed", "tool": "tensorly masked vs dptensor ALS", "decomposition": kind,
                            "shape": str(size), "n_obs": n_obs, "tensorly_s_per_iter": t_tl / iters,
                            "dptensor_s_per_iter": t_us / iters})
    return records


def movielens(quick):
    records = []
    for split in ("ua",) if quick else ("ua", "ub"):
        try:
            data = load_movielens_100k(download=False, split=split)
        except FileNotFoundError as err:
            print(f"MovieLens-100K not found locally, skipping: {err}")
            return records
        trivial = _rmse(np.full(len(data["test_values"]), data["values"].mean()), data["test_values"])
        records.append({"study": "movielens", "split": split, "mode": "training mean", "epsilon": np.inf,
                        "decomposition": "-", "rmse": trivial})
        for kind in ("cp", "tucker"):
            records.append({"study": "movielens", "split": split, "mode": "non-private", "epsilon": np.inf,
                            "decomposition": kind, "rmse": _fit_rmse(data, decomposition=kind, random_state=0)})
            for mode in MODES[1:]:
                for eps in (0.1, 1.0, 3.0):
                    records.append({"study": "movielens", "split": split, "mode": mode, "epsilon": eps,
                                    "decomposition": kind,
                                    "rmse": _fit_rmse(data, decomposition=kind, perturbation=mode, epsilon=eps,
                                                      value_range=(1.0, 5.0), random_state=0)})
    return records


def _mean_by(records, keys):
    groups = {}
    for r in records:
        groups.setdefault(tuple(r.get(k) for k in keys), []).append(r["rmse"])
    return {k: float(np.mean(v)) for k, v in groups.items()}


def _plot(eps_records, miss_records, epsilons, ratios):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, 2, figsize=(11, 8), sharey="row")
    eps_mean = _mean_by(eps_records, ["decomposition", "mode", "epsilon"])
    miss_mean = _mean_by(miss_records, ["decomposition", "mode", "missing_ratio"])
    observed_mean = np.mean([r["rmse"] for r in eps_records if r["mode"] == "observed mean"])
    for col, kind in enumerate(("cp", "tucker")):
        ax = axes[0, col]
        for mode in MODES[1:]:
            ax.plot(epsilons, [eps_mean[(kind, mode, float(e))] for e in epsilons], "o-", label=mode)
        ax.axhline(eps_mean[(kind, "non-private", np.inf)], color="k", label="non-private")
        if (kind, "tensorly masked", np.inf) in eps_mean:
            ax.axhline(eps_mean[(kind, "tensorly masked", np.inf)], color="k", ls=":", label="TensorLy masked")
        ax.axhline(observed_mean, color="gray", ls="--", label="observed mean")
        ax.set(xscale="log", yscale="log", xlabel="epsilon", ylabel="RMSE (missing entries)",
               title=f"{kind.upper()}: 20x20x20 rank 3, SNR 1, 50% missing")
        ax = axes[1, col]
        for mode in ["non-private", *MODES[1:]]:
            ax.plot(ratios, [miss_mean[(kind, mode, float(r))] for r in ratios], "o-", label=mode)
        ax.set(yscale="log", xlabel="missing ratio", ylabel="RMSE (missing entries)",
               title=f"{kind.upper()}: epsilon = 1")
    axes[0, 0].legend(fontsize=8)
    axes[1, 0].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(plot_path("completion"), dpi=110)


def run(quick: bool = False) -> list[dict]:
    seeds = range(1) if quick else range(5)
    epsilons = np.logspace(-1, 0.5, 3 if quick else 7)
    ratios = np.linspace(0.1, 0.9, 2 if quick else 9)
    t0 = time.perf_counter()
    eps_records = study_epsilon(seeds, epsilons)
    miss_records = study_missing(range(1) if quick else range(3), ratios)
    speed_records = speed(quick)
    ml_records = movielens(quick)
    records = eps_records + miss_records + speed_records + ml_records
    try:
        _plot(eps_records, miss_records, epsilons, ratios)
    except ImportError:
        print("matplotlib not installed: no plot")

    eps_mean = _mean_by(eps_records, ["decomposition", "mode", "epsilon"])
    table = [{"decomposition": k[0], "mode": k[1], "epsilon": k[2], "mean_rmse": v}
             for k, v in sorted(eps_mean.items(), key=lambda kv: (kv[0][0], str(kv[0][1]), kv[0][2]))]
    summary = ("One BLAS thread. RMSE on the missing entries against the noiseless tensor, mean over seeds "
               f"({len(list(seeds))}); value_range = [-3 sigma, 1 + 3 sigma] (public). Speed rows: "
               + "; ".join(f"{r['decomposition']} {r['shape']}: ALS sweep {r.get('als_sweep_s', float('nan')):.3f} s, "
                           f"DP-GD step {r.get('dp_gd_step_s', float('nan')):.3f} s, peak {r.get('peak_mb', 0):.0f} MB"
                           for r in speed_records if r["tool"] == "dptensor")
               + "; TensorLy (s/iter) vs dptensor ALS (s/iter): "
               + "; ".join(f"{r['decomposition']} {r['shape']}: {r['tensorly_s_per_iter']:.3f} vs "
                           f"{r['dptensor_s_per_iter']:.4f}" for r in speed_records if "tensorly_s_per_iter" in r)
               + ("; MovieLens: " + "; ".join(f"{r['split']} {r['decomposition']} {r['mode']} eps={r['epsilon']:g}: "
                                                f"{r['rmse']:.3f}" for r in ml_records)
                  if ml_records else "; MovieLens-100K not present locally: skipped")
               + f". Total {time.perf_counter() - t0:.0f} s.")
    write_results("completion", records, summary=summary + "\n\n" + _md(table),
                  columns=["study", "decomposition", "mode", "epsilon", "missing_ratio", "seed", "rmse"])
    return records


def _md(rows):
    from benchmarks._common import markdown_table

    return markdown_table(rows, ["decomposition", "mode", "epsilon", "mean_rmse"])


if __name__ == "__main__":
    # One BLAS thread: the machine these numbers come from is shared, and oversubscribed threaded
    # BLAS on small (n_obs x rank) products was measured 10x slower than one thread.
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:
        run(quick="--quick" in sys.argv)
    else:
        with threadpool_limits(1):
            run(quick="--quick" in sys.argv)
