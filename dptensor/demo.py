"""The main job: every estimator on embedded synthetic data, one shared budget, one table.

``python -m dptensor demo`` fits each of the seven estimators at a few epsilons, a few seeded draws
at each (and once without privacy), all spending from one :class:`~dptensor.PrivacyAccountant`, then
prints a privacy-utility table (the median of the draws and their range), notes on what it shows,
the accountant's total, and writes a PNG of the curves when matplotlib is installed. The data are
generated here with fixed seeds, so no download is needed; the noise uses fixed ``random_state``
values too, so the table is reproducible (a real release would leave ``random_state=None``). Every
spend draws its own noise stream from that seed *and* its place in the ledger (see
:mod:`dptensor.mechanisms.randomness`), so the fits share no noise and the ledger's total is what
the table's releases cost together. The non-private references are fitted outside the budget, which
would refuse them (they cost epsilon = infinity).
"""
from __future__ import annotations

import os
import sys
import time
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np

from .accounting import PrivacyAccountant
from .exceptions import PrivacyWarning

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
    #: What the curve shows that the numbers alone do not say (printed in the notes).
    note: str = ""


def _tensor_studies(quick: bool) -> list[Study]:
    from . import PrivateTensorDecomposition, StreamingTensorPower
    from .datasets import make_orthogonal_moment_data, moment_data_norm_bound
    from .metrics import recovery_error

    # Row-level privacy of a third moment needs many rows: the sensitivity is 2 B^3 / n.
    n = 60_000 if quick else 300_000
    X, lam, V = make_orthogonal_moment_data(n, 20, 3, eigenvalues=[2.0, 1.5, 1.0], random_state=1)
    bound = moment_data_norm_bound(lam)  # from the generator's parameters, never read off the data

    def batch(eps, budget, seed):
        # n_iter=5: each power iteration adds noise, and 5 already converge on this problem
        model = PrivateTensorDecomposition(3, epsilon=eps, data_norm=bound, n_restarts=5, n_iter=5,
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

    return [Study("PrivatePCA", "sin^2 angle", pca),
            Study("AdaptivePrivatePCA", "sin^2 angle", adaptive)]


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

    mean_rmse = rmse(data["test_values"][test],
                     np.full(len(data["test_values"][test]), data["values"].mean()))
    return Study("PrivateTensorCompletion", "held-out RMSE", completion,
                 baseline=("the observed-mean predictor (on this 100^3 study with 1e5 values, "
                           "private completion at epsilon <= 1 gains little over it: privacy "
                           "costs most of the utility there)", mean_rmse))


def _latent_studies(quick: bool) -> list[Study]:
    from .datasets import gaussian_mixture_norm_bound, make_gaussian_mixture, make_lda_corpus
    from .latent import PrivateGaussianMixture, PrivateLatentDirichletAllocation, match_rows

    X, means, _, _ = make_gaussian_mixture(20_000 if quick else 50_000, 20, 4, separation=1.0,
                                           random_state=6)
    bound = gaussian_mixture_norm_bound(means, 1.0, 20)  # from the generator's parameters
    C, topics, _ = make_lda_corpus(8_000 if quick else 20_000, 50, 3, doc_length=(20, 60),
                                   random_state=5)

    def mixture(eps, budget, seed):
        model = PrivateGaussianMixture(4, epsilon=eps, data_norm=bound, accountant=budget,
                                       random_state=seed)
        dist = match_rows(model.fit(X).means_, means)[1]
        return float(dist.mean() / np.linalg.norm(means, axis=1).mean())

    def topics_l1(eps, budget, seed):
        model = PrivateLatentDirichletAllocation(3, epsilon=eps, accountant=budget,
                                                 random_state=seed).fit(C)
        perm, _ = match_rows(model.components_, topics)
        return float(np.abs(model.components_[perm] - topics).sum(axis=1).mean())

    return [Study("PrivateGaussianMixture", "rel. mean error", mixture),
            Study("PrivateLatentDirichletAllocation", "topic l1 error", topics_l1,
                  # measured on this corpus: at epsilon=1e6 the clipped fit's error is 0.035, the
                  # unclipped one's 0.0088 (the non-private line)
                  note="most of its private error is the bias of clipping each document's terms "
                       "(doc_clip), not noise: it stays as epsilon grows, so the curve levels off "
                       "above the non-private line; at epsilon <= 1 its draws spread more than "
                       "the medians differ (the band)")]


def studies(quick: bool = False) -> list[Study]:
    return [*_tensor_studies(quick), *_pca_studies(quick), _completion_study(quick),
            *_latent_studies(quick)]


#: Seeded draws per epsilon: the table and the plot show their median and their range, so that a
#: curve is not one noisy draw (each draw is a fit of its own, recorded with the budget).
N_DRAWS = 3


def check_plot_path(plot) -> None:
    """Refuse, before any fit, a plot path the demo could not write: a missing or unwritable
    directory, or a file type matplotlib does not know."""
    if not plot:
        return
    path = Path(plot).expanduser()
    folder = path.parent if str(path.parent) else Path(".")
    if not folder.is_dir():
        raise ValueError(f"cannot write the plot to {str(path)!r}: the directory {str(folder)!r} "
                         "does not exist (create it, or pass --plot '' for no plot)")
    if not os.access(folder, os.W_OK):
        raise ValueError(f"cannot write the plot to {str(path)!r}: the directory {str(folder)!r} "
                         "is not writable")
    if path.is_dir():
        raise ValueError(f"cannot write the plot to {str(path)!r}: it is a directory; give a file "
                         "name such as dptensor_demo.png")
    try:
        from matplotlib.figure import Figure
    except ImportError:
        return  # no plot will be drawn; run_demo says so at the end
    kinds = Figure().canvas.get_supported_filetypes()
    if path.suffix.lstrip(".").lower() not in kinds:
        raise ValueError(f"cannot write the plot to {str(path)!r}: the file type "
                         f"{path.suffix or '(none)'!r} is not one matplotlib writes; use .png, "
                         ".pdf or .svg")


def run_demo(quick: bool = False, plot: str | None = "dptensor_demo.png", epsilons=EPSILONS,
             n_draws: int = N_DRAWS) -> int:
    check_plot_path(plot)
    # delta well below 1/n for the largest study (300,000 rows): see the privacy guide.
    budget = PrivacyAccountant(epsilon=100.0, delta=1e-7)
    print(f"dptensor demo: seven estimators on synthetic data with known ground truth, {n_draws} "
          f"seeded draws at each epsilon, one shared budget {budget!r}.\nNoise uses fixed seeds, "
          "keyed by each spend's place in the ledger, so the table is reproducible and no two fits "
          "share noise.\nThe non-private references are fitted outside the budget.\n")
    rows, noisy = [], []
    all_studies = studies(quick)
    jobs = [(s, eps) for s in all_studies for eps in (np.inf, *epsilons)]
    reference = {}
    for study, eps in _progress(jobs):
        if np.isinf(eps):  # not private: it costs epsilon = inf, so it runs without the budget
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", PrivacyWarning)
                reference[study.name] = study.fit_and_score(eps, None, 0)
            continue
        t0 = time.perf_counter()
        errors, warned = [], 0
        for seed in range(n_draws):
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                errors.append(study.fit_and_score(eps, budget, seed))
            warned += _noise_dominated(caught)
        seconds = (time.perf_counter() - t0) / n_draws
        if warned:
            noisy.append(f"{study.name} at epsilon={eps:g} ({warned} of {n_draws} draws)")
        rows.append({"estimator": study.name, "epsilon": eps, "metric": study.metric,
                     "errors": errors, "error": float(np.median(errors)),
                     "non_private": reference[study.name], "seconds": seconds,
                     "baseline": study.baseline})
    print(format_table(rows))
    print()
    print("\n".join(notes(all_studies, n_draws)))
    if noisy:  # the estimators' own warnings, read off released values: expected at small epsilon
        print("Some components were below twice their noise level, as their estimators warned "
              "(expected at small epsilon; see each estimator's *_noise_ attribute): "
              + "; ".join(noisy) + ".")
    print()
    print(str(budget).splitlines()[0] + " (print(budget) lists each spend)")
    if plot:
        path = plot_curves(rows, plot)
        print(f"\nplot: {path}" if path else "\n(matplotlib not installed: no plot; "
              "pip install 'dptensor[plot]')")
    return 0


def _noise_dominated(caught) -> int:
    """1 if a fit warned that some of its components are noise-dominated (counted for the notes),
    else 0; any other warning is shown as it came."""
    hit = 0
    for w in caught:
        if issubclass(w.category, UserWarning) and "dominated by the privacy noise" in str(
                w.message):
            hit = 1
        else:
            warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
    return hit


def notes(all_studies, n_draws) -> list[str]:
    """What the table and the plot show, in words (the plot's legend stays short)."""
    lines = [f"Each private point is the median of {n_draws} seeded draws; the range is their "
             "smallest and largest error (the band in the plot).",
             "non-private: the same estimator with epsilon=inf (the dashed line), the error that "
             "remains without privacy."]
    for study in all_studies:
        if study.baseline:
            lines.append(f"{study.name}: the dotted line is {study.baseline[0]}, with "
                         f"{study.metric} {study.baseline[1]:.4g}.")
        if study.note:
            lines.append(f"{study.name}: {study.note}.")
    return lines


def format_table(rows) -> str:
    w = max([len("estimator"), *(len(r["estimator"]) for r in rows)])
    head = (f"{'estimator':<{w}s} {'epsilon':>7s} {'metric':<16s} {'median':>10s} "
            f"{'range of draws':>21s} {'non-private':>12s} {'fit s':>6s}")
    lines = [head, "-" * len(head)]
    for r in rows:
        spread = f"{min(r['errors']):.4g}..{max(r['errors']):.4g}"
        lines.append(f"{r['estimator']:<{w}s} {r['epsilon']:>7g} {r['metric']:<16s} "
                     f"{r['error']:>10.4g} {spread:>21s} {r['non_private']:>12.4g} "
                     f"{r['seconds']:>6.2f}")
    return "\n".join(lines)


def plot_curves(rows, path):
    """Error against epsilon per estimator (log-log): the median of the draws, their range as a
    band, each draw as a dot, the non-private error dashed and a trivial baseline dotted. One
    short legend in a panel of its own, so that none covers data."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    names = list(dict.fromkeys(r["estimator"] for r in rows))
    n_cols = 4
    n_rows = -(-(len(names) + 1) // n_cols)  # one cell more, for the legend
    fig, axes = plt.subplots(n_rows, n_cols, figsize=(3.3 * n_cols, 2.9 * n_rows),
                             constrained_layout=True)
    axes = np.atleast_1d(axes).ravel()
    handles = {}
    for ax, name in zip(axes, names):
        mine = [r for r in rows if r["estimator"] == name]
        eps = np.array([r["epsilon"] for r in mine])
        draws = np.array([r["errors"] for r in mine])
        band = ax.fill_between(eps, draws.min(axis=1), draws.max(axis=1), color="C0", alpha=0.2,
                               lw=0)
        dots = ax.plot(np.repeat(eps, draws.shape[1]), draws.ravel(), ".", color="C0", ms=3,
                       alpha=0.6)[0]
        line = ax.plot(eps, np.median(draws, axis=1), "o-", color="C0", ms=4)[0]
        ref = ax.axhline(mine[0]["non_private"], ls="--", color="gray")
        handles.update({"private (median)": line, "range of draws": band, "one draw": dots,
                        "non-private": ref})
        if mine[0]["baseline"]:
            handles["mean predictor"] = ax.axhline(mine[0]["baseline"][1], ls=":", color="black")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_title(name, fontsize=9)
        ax.set_xticks(eps, [f"{e:g}" for e in eps])
        ax.xaxis.set_minor_locator(matplotlib.ticker.NullLocator())
        ax.tick_params(which="both", labelsize=8)
        ax.set_xlabel("epsilon", fontsize=8)
        ax.set_ylabel(mine[0]["metric"], fontsize=8)
    for ax in axes[len(names):]:
        ax.axis("off")
    axes[len(names)].legend(list(handles.values()), list(handles.keys()), loc="center",
                            fontsize=9, frameon=False, title="error against epsilon",
                            title_fontsize=9)
    fig.savefig(path, dpi=110)
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
