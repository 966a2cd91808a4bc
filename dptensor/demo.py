"""The main job: every estimator on embedded synthetic data, one shared budget, one table.

``python -m dptensor demo`` fits each of the seven estimators at a few epsilons (and once without
privacy), all spending from one :class:`~dptensor.PrivacyAccountant`, then prints a
privacy-utility table, the accountant's ledger, and writes a PNG of the curves when matplotlib is
installed. The data are generated here with fixed seeds, so no download is needed; the noise
uses a fixed ``random_state`` too, so the table is reproducible (a real release would leave
``random_state=None``). Every spend draws its own noise stream from that seed *and* its place in
the ledger (see :mod:`dptensor.mechanisms.randomness`), so the fits share no noise and the ledger's total is
what the table's releases cost together. The non-private references are fitted outside the
budget, which would refuse them (they cost epsilon = infinity).
"""
from __future__ import annotations

import sys
import time
import warnings
from dataclasses import dataclass
from typing import Callable

import numpy as np

from .exceptions import PrivacyWarning
from .accounting import PrivacyAccountant

#: Epsilons each estimator is fitted at (``np.inf`` is the non-private reference).
EPSILONS = (0.5, 1.0, 2.0, 4.0)


@dataclass
class Study:
    """One estimator on one synthetic problem: how to fit it at an epsilon and how to score it."""

    name: str
    metric: str
    fit_and_score: Callable[[float, PrivacyAccountant, int], float]
    #: A trivial predictor's error on the same problem, when that is the natural yardstick.
    baseline: tuple[str, float] | None = None


def _tensor_studies(quick: bool) -> list[Study]:
    from . import PrivateTensorDecomposition, StreamingTensorPower
    from .datasets import make_orthogonal_moment_data, moment_data_norm_bound
    from .metrics import recovery_error

    # Row-level privacy of a third moment needs many rows: the sensitivity is 2 B^3 / n.
    n = 60_000 if quick else 300_000
    X, lam, V = make_orthogonal_moment_data(n, 20, 3, eigenvalues=[2.0, 1.5, 1.0], random_state=1)
    bound = moment_data_norm_bound(lam)  # from the generator's parameters, never read off the data

    def batch(eps, budget, seed):
        model = PrivateTensorDecomposition(3, epsilon=eps, data_norm=bound, n_restarts=5, n_iter=8,
                                           accountant=budget, random_state=seed).fit(X)
        return float(np.mean(recovery_error(model.components_, V)))

    def stream(eps, budget, seed):
        model = StreamingTensorPower(3, n_restarts=5, n_iter=4, batch_size=n // 12, epsilon=eps,
                                     data_norm=bound, accountant=budget, random_state=seed).fit(X)
        return float(np.mean(recovery_error(model.components_, V)))

    return [Study("PrivateTensorDecomposition", "component error", batch),
            Study("StreamingTensorPower", "component error", stream)]


def _pca_studies(quick: bool) -> list[Study]:
    from . import AdaptivePrivatePCA, PrivatePCA
    from .datasets import make_spiked_covariance
    from .metrics import sin_theta_distance

    n = 20_000 if quick else 50_000
    X, V, _ = make_spiked_covariance(n, 50, 3, spike=10.0, random_state=2)
    X = X / np.sqrt(50 + 30)  # rows of norm about 1: a public rescaling, then clipping to 1
    x1, v1, _ = make_spiked_covariance(n, 50, 1, spike=10.0, random_state=3)
    x1 = x1 / np.sqrt(50 + 10)

    def pca(eps, budget, seed):
        model = PrivatePCA(3, epsilon=eps, data_norm=1.0, centered=True, accountant=budget,
                           random_state=seed).fit(X)
        return float(sin_theta_distance(model.components_, V))

    def adaptive(eps, budget, seed):
        if np.isinf(eps):  # the adaptive method exists for privacy; its reference is plain power
            from .pca import PrivatePCA as Reference

            model = Reference(1, method="power", centered=True, random_state=seed).fit(x1)
        else:
            model = AdaptivePrivatePCA(1, epsilon=eps, data_norm=1.0, accountant=budget,
                                       random_state=seed).fit(x1)
        return float(sin_theta_distance(model.components_, v1))

    return [Study("PrivatePCA", "sin^2 angle", pca), Study("AdaptivePrivatePCA", "sin^2 angle", adaptive)]


def _completion_study(quick: bool) -> Study:
    from . import PrivateTensorCompletion
    from .datasets import make_low_rank_tensor
    from .metrics import rmse

    # Enough data to learn from: 100^3 rank 3, 10% observed (1e5 values), SNR 1, in [0, 1]. The
    # public value range pads [0, 1] by three noise standard deviations (a generator parameter).
    data = make_low_rank_tensor((100, 100, 100), 3, missing_ratio=0.9, snr=1.0, random_state=0)
    pad = 3 * data["noise_std"]
    test = slice(0, 100_000 if quick else None)

    def completion(eps, budget, seed):
        # perturbation="auto": non-private at epsilon=inf, DP-ALS ("statistics") otherwise.
        model = PrivateTensorCompletion(rank=3, epsilon=eps, value_range=(-pad, 1.0 + pad),
                                        accountant=budget, random_state=seed)
        model.fit(data["indices"], data["values"])
        return rmse(data["test_values"][test], model.predict(data["test_indices"][test]))

    mean_rmse = rmse(data["test_values"][test], np.full(len(data["test_values"][test]), data["values"].mean()))
    return Study("PrivateTensorCompletion", "held-out RMSE", completion,
                 baseline=("the observed-mean predictor (100^3 study, 1e5 values: at epsilon <= 1 private "
                           "completion gains nothing over it, privacy costs all the utility there; from "
                           "epsilon = 2 it keeps half to three quarters of the non-private gain)", mean_rmse))


def _latent_studies(quick: bool) -> list[Study]:
    from .datasets import gaussian_mixture_norm_bound, make_gaussian_mixture, make_lda_corpus
    from .latent import PrivateGaussianMixture, PrivateLatentDirichletAllocation, match_rows

    X, means, _, _ = make_gaussian_mixture(20_000 if quick else 50_000, 20, 4, separation=1.0, random_state=6)
    bound = gaussian_mixture_norm_bound(means, 1.0, 20)  # from the generator's parameters
    C, topics, _ = make_lda_corpus(8_000 if quick else 20_000, 50, 3, doc_length=(20, 60), random_state=5)

    def mixture(eps, budget, seed):
        model = PrivateGaussianMixture(4, epsilon=eps, data_norm=bound, accountant=budget, random_state=seed)
        dist = match_rows(model.fit(X).means_, means)[1]
        return float(dist.mean() / np.linalg.norm(means, axis=1).mean())

    def topics_l1(eps, budget, seed):
        model = PrivateLatentDirichletAllocation(3, epsilon=eps, accountant=budget, random_state=seed).fit(C)
        perm, _ = match_rows(model.components_, topics)
        return float(np.abs(model.components_[perm] - topics).sum(axis=1).mean())

    return [Study("PrivateGaussianMixture", "rel. mean error", mixture),
            Study("PrivateLatentDirichletAllocation", "topic l1 error", topics_l1)]


def studies(quick: bool = False) -> list[Study]:
    return [*_tensor_studies(quick), *_pca_studies(quick), _completion_study(quick), *_latent_studies(quick)]


def run_demo(quick: bool = False, plot: str | None = "dptensor_demo.png", epsilons=EPSILONS) -> int:
    # delta well below 1/n for the largest study (300,000 rows): see the privacy guide.
    budget = PrivacyAccountant(epsilon=100.0, delta=1e-7)
    print("dptensor demo: seven estimators on synthetic data with known ground truth, one shared budget "
          f"{budget!r}.\nNoise uses a fixed seed, keyed by each spend's place in the ledger, so the table is "
          "reproducible and no two fits share noise.\nThe non-private references are fitted outside "
          "the budget.\n")
    rows = []
    all_studies = studies(quick)
    jobs = [(s, eps) for s in all_studies for eps in (np.inf, *epsilons)]
    reference = {}
    for study, eps in _progress(jobs):
        t0 = time.perf_counter()
        if np.isinf(eps):  # not private: it costs epsilon = inf, so it runs without the budget
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", PrivacyWarning)
                err = study.fit_and_score(eps, None, 0)
        else:
            err = study.fit_and_score(eps, budget, 0)
        seconds = time.perf_counter() - t0
        if np.isinf(eps):
            reference[study.name] = err
            continue
        rows.append({"estimator": study.name, "epsilon": eps, "metric": study.metric, "error": err,
                     "non_private": reference[study.name], "seconds": seconds, "baseline": study.baseline})
    print(format_table(rows))
    for study in all_studies:
        if study.baseline:
            print(f"{study.name}: {study.baseline[0]} (non-private) has {study.metric} "
                  f"{study.baseline[1]:.4g}")
    print()
    print(budget)
    if plot:
        path = plot_curves(rows, plot)
        print(f"\nplot: {path}" if path else "\n(matplotlib not installed: no plot; "
              "pip install 'dptensor[plot]')")
    return 0


def format_table(rows) -> str:
    w = max([len("estimator"), *(len(r["estimator"]) for r in rows)])
    head = f"{'estimator':<{w}s} {'epsilon':>7s} {'metric':<16s} {'error':>10s} {'non-private':>12s} {'fit s':>7s}"
    lines = [head, "-" * len(head)]
    for r in rows:
        lines.append(f"{r['estimator']:<{w}s} {r['epsilon']:>7g} {r['metric']:<16s} {r['error']:>10.4g} "
                     f"{r['non_private']:>12.4g} {r['seconds']:>7.2f}")
    return "\n".join(lines)


def plot_curves(rows, path):
    """Error against epsilon per estimator (log-log), with the non-private error dashed."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    names = list(dict.fromkeys(r["estimator"] for r in rows))
    fig, axes = plt.subplots(1, len(names), figsize=(3.2 * len(names), 3.0), constrained_layout=True)
    for ax, name in zip(np.atleast_1d(axes), names):
        mine = [r for r in rows if r["estimator"] == name]
        ax.loglog([r["epsilon"] for r in mine], [r["error"] for r in mine], "o-", label="private")
        ax.axhline(mine[0]["non_private"], ls="--", color="gray", label="non-private")
        if mine[0]["baseline"]:
            ax.axhline(mine[0]["baseline"][1], ls=":", color="black", label=mine[0]["baseline"][0])
            ax.legend(fontsize=7)
        ax.set_title(name, fontsize=9)
        ax.set_xticks([r["epsilon"] for r in mine], [f"{r['epsilon']:g}" for r in mine])
        ax.xaxis.set_minor_locator(matplotlib.ticker.NullLocator())
        ax.set_xlabel("epsilon")
        ax.set_ylabel(mine[0]["metric"])
    np.atleast_1d(axes)[0].legend(fontsize=8)
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def _progress(items):
    """A one-line progress bar on stderr when it is a terminal."""
    total = len(items)
    for i, item in enumerate(items, 1):
        if sys.stderr.isatty():
            done = int(30 * i / total)
            print(f"\r[{'#' * done}{'.' * (30 - done)}] {i}/{total} {item[0].name:<28s}", end="",
                  file=sys.stderr, flush=True)
        yield item
    if sys.stderr.isatty():
        print(file=sys.stderr)
