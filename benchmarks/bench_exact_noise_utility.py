"""Utility of every estimator with the noise it releases: one small study each, several seeds.

Run once on a checkout that draws continuous NumPy noise and once on one that releases through the
exact grid samplers (``--label continuous`` / ``--label exact``), then ``--compare`` writes the
side-by-side table. The noise laws agree (the exact release is the continuous one rounded to a
grid 2**-30 of its scale, its scale raised by about ``z sqrt(N) 2**-30``), so the two columns
should differ by no more than their seed-to-seed spread.
"""
from __future__ import annotations

import json
import sys
import warnings

import numpy as np

from benchmarks._common import RESULTS, markdown_table

SEEDS = range(8)


def _studies():
    from dptensor import (AdaptivePrivatePCA, PrivatePCA, PrivateTensorCompletion, PrivateTensorDecomposition,
                          StreamingTensorPower)
    from dptensor.datasets import (make_gaussian_mixture, make_low_rank_tensor, make_orthogonal_moment_data,
                                   make_spiked_covariance)
    from dptensor.latent import PrivateGaussianMixture, match_rows
    from dptensor.metrics import recovery_error, sin_theta_distance

    X_pca, V_pca, _ = make_spiked_covariance(5000, 40, 2, spike=4.0, data_norm=1.0, random_state=11)
    X_ad, V_ad, _ = make_spiked_covariance(20000, 10, 2, spike=4.0, data_norm=1.0, random_state=12)
    X_td, _, V_td = make_orthogonal_moment_data(50000, 8, 2, noise=0.1, random_state=13)
    B_td = float(np.quantile(np.linalg.norm(X_td, axis=1), 0.99))
    tc = make_low_rank_tensor(random_state=14)
    X_gm, means, _, _ = make_gaussian_mixture(20000, 3, 3, separation=3.0, sigma=0.5, random_state=15)

    def pca(method):
        return lambda s: sin_theta_distance(PrivatePCA(2, epsilon=1.0, data_norm=1.0, method=method,
                                                       random_state=s).fit(X_pca).components_, V_pca)

    def completion(pert):
        def run(s):
            m = PrivateTensorCompletion(perturbation=pert, epsilon=1.0, value_range=(0, 1), random_state=s)
            m.fit(tc["indices"], tc["values"])
            return float(np.sqrt(np.mean((m.predict(tc["test_indices"]) - tc["test_values"]) ** 2)))
        return run

    def tensor(method):
        return lambda s: float(recovery_error(PrivateTensorDecomposition(
            2, epsilon=2.0, data_norm=B_td, method=method, n_restarts=5, n_iter=10,
            random_state=s).fit(X_td).components_, V_td).max())

    return {
        "PrivatePCA power, sin^2 (eps=1)": pca("power"),
        "PrivatePCA analyze_gauss, sin^2 (eps=1)": pca("analyze_gauss"),
        "AdaptivePrivatePCA, sin^2 (eps=2)": lambda s: sin_theta_distance(AdaptivePrivatePCA(
            n_components=2, epsilon=2.0, data_norm=1.0, random_state=s).fit(X_ad).components_, V_ad),
        "PrivateTensorDecomposition power, max recovery error (eps=2)": tensor("power"),
        "StreamingTensorPower, max recovery error (eps=2)": lambda s: float(recovery_error(
            StreamingTensorPower(2, n_restarts=5, n_iter=4, batch_size=5000, epsilon=2.0, data_norm=B_td,
                                 random_state=s).fit(X_td).components_, V_td).max()),
        "PrivateTensorCompletion statistics, test RMSE (eps=1)": completion("statistics"),
        "PrivateTensorCompletion input (Laplace), test RMSE (eps=1)": completion("input"),
        "PrivateTensorCompletion gradient, test RMSE (eps=1)": completion("gradient"),
        "PrivateGaussianMixture, mean distance of means (eps=2)": lambda s: float(np.mean(match_rows(
            PrivateGaussianMixture(3, epsilon=2.0, data_norm=float(np.linalg.norm(X_gm, axis=1).max()),
                                   random_state=s).fit(X_gm).means_, means)[1])),
    }


def run(label: str) -> dict:
    out = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for name, study in _studies().items():
            values = [float(study(s)) for s in SEEDS]
            out[name] = values
            print(f"{name}: median {np.median(values):.4g}, mean {np.mean(values):.4g}", flush=True)
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / f"exact_noise_utility_{label}.json").write_text(json.dumps(out, indent=2))
    return out


def compare() -> None:
    a = json.loads((RESULTS / "exact_noise_utility_continuous.json").read_text())
    b = json.loads((RESULTS / "exact_noise_utility_exact.json").read_text())
    rows = []
    for name in a:
        x, y = np.array(a[name]), np.array(b[name])
        rows.append({"study": name, "continuous median": float(np.median(x)),
                     "exact median": float(np.median(y)),
                     "continuous mean ± sd": f"{x.mean():.4g} ± {x.std(ddof=1):.2g}",
                     "exact mean ± sd": f"{y.mean():.4g} ± {y.std(ddof=1):.2g}"})
    md = ["# exact_noise_utility", "",
          f"Each study over seeds {SEEDS.start}..{SEEDS.stop - 1}: the same estimator and data, its noise "
          "drawn by NumPy's continuous samplers (before) or released exactly on a grid (after). The seeds "
          "draw different noise in the two runs, so compare the columns against the spread.", "",
          markdown_table(rows, ["study", "continuous median", "exact median", "continuous mean ± sd",
                                "exact mean ± sd"])]
    (RESULTS / "exact_noise_utility.md").write_text("\n".join(md) + "\n")
    print("\n".join(md))


if __name__ == "__main__":
    if "--compare" in sys.argv:
        compare()
    else:
        run(sys.argv[sys.argv.index("--label") + 1])
