"""The grid ``perturbation="auto"`` of :class:`~dptensor.PrivateTensorCompletion` is fitted on.

Method x regime -> validation RMSE. Regimes: synthetic MovieLens-like ratings
(:func:`benchmarks.bench_user_level.ratings_like`) at several users x items x ratings-per-user
sizes, one of them with a third (day) mode that carries no effect, and the low-rank tensor
studies of ``bench_completion`` (20^3 at half observed, CP and Tucker; 100^3 at a tenth); epsilon
in {0.5, 1, 4, 10}; the value unit (every mode with its documented recipe settings) and, for the
ratings matrices, the user unit (``rank`` 0 to 3). Every error is on a random tenth of the
TRAINING entries held out for validation (the generators' test splits are never read), the mean
over two seeds; the non-private fit and the training mean are beside each cell.

``python -m benchmarks.bench_completion_auto [--redraw | --resume]`` writes
``benchmarks/results/completion_auto.{json,md,png}`` (``--redraw``: the picture and the table
from the saved JSON; ``--resume``: an interrupted run continued from the fits it appended to
``completion_auto.jsonl``). The rule this grid supports is
:func:`dptensor.algorithms.completion.modes.auto.auto_choice`; the table says, per cell, what it
picks and how far that is from the cell's best.
"""
from __future__ import annotations

import functools
import json
import sys
import time
import warnings
from multiprocessing import Pool

import numpy as np

from benchmarks._common import RESULTS, machine_info, plot_path
from benchmarks.bench_user_level import ratings_like
from dptensor.algorithms.completion.modes.auto import auto_choice, user_start_ratio
from dptensor.completion import PrivateTensorCompletion
from dptensor.datasets import make_low_rank_tensor

EPSILONS = (0.5, 1.0, 4.0, 10.0)
#: Seed 0 everywhere (the grid's cost on two cores); the smallest regime also ran seed 1.
SEEDS = (0,)
DELTA = 1e-5
#: (name, kind, sizes): ratings (users, items, ratings, days or 0) or a low-rank tensor
#: (shape, observed fraction, decomposition).
REGIMES = [
    ("ratings 300x600, 60/user", "ratings", (300, 600, 18_000, 0)),
    ("ratings 1000x2000, 100/user", "ratings", (1_000, 2_000, 100_000, 0)),
    ("ratings 600x3000, 100/user", "ratings", (600, 3_000, 60_000, 0)),
    ("ratings 1000x1000, 300/user", "ratings", (1_000, 1_000, 300_000, 0)),
    ("ratings 1000x2000x30 days", "ratings", (1_000, 2_000, 100_000, 30)),
    ("tensor 20^3 CP, 50% observed", "tensor", ((20, 20, 20), 0.5, "cp")),
    ("tensor 20^3 Tucker, 50% observed", "tensor", ((20, 20, 20), 0.5, "tucker")),
    ("tensor 100^3 CP, 10% observed", "tensor", ((100, 100, 100), 0.1, "cp")),
    ("tensor 100^3 CP, 2% observed", "tensor", ((100, 100, 100), 0.02, "cp")),
    ("matrix 200^2 rank 3, 50% observed", "tensor", ((200, 200), 0.5, "cp")),
]
_RECIPE = {"factor_modes": (0, 1)}
#: Value-unit candidates: every mode, at its defaults and with the completion guide's recipes.
VALUE = {
    "statistics": {"perturbation": "statistics"},
    "statistics recipe": {**_RECIPE, "perturbation": "statistics", "offset_share": 0.97},
    "gradient": {"perturbation": "gradient"},
    "gradient recipe": {**_RECIPE, "perturbation": "gradient", "offset_share": 0.97, "rank": 2},
    "gradient recipe rank 3": {**_RECIPE, "perturbation": "gradient", "offset_share": 0.97},
    # what "auto" runs on sparse tensors of order 3: it leaves factor_modes to the user
    "gradient offsets 0.97": {"perturbation": "gradient", "offset_share": 0.97},
    "implicit recipe": {**_RECIPE, "perturbation": "implicit", "rank": 20, "offset_share": 0.5},
    "input": {"perturbation": "input"},
}
#: User-unit candidates (ratings matrices only): the rank of the released item side.
USER = {f"user rank {r}": {"privacy_unit": "user", "rank": r} for r in (0, 1, 2, 3)}


def _candidates(kind, sizes):
    """The candidates a regime runs: Tucker has only the gradient and input modes; the implicit
    mode learns a two-mode interaction (ratings); the user unit is for the ratings matrices."""
    if kind == "tensor":
        names = (["gradient", "input"] if sizes[2] == "tucker"
                 else ["statistics", "gradient", "gradient recipe", "input"])
        return {n: VALUE[n] for n in names}
    out = dict(VALUE)
    if sizes[3] == 0:
        del out["gradient offsets 0.97"]  # a matrix: the same fit as "gradient recipe rank 3"
        out.update(USER)
    return out


@functools.lru_cache(maxsize=4)
def _data(kind, sizes, seed):
    """``(X, y, X_val, y_val, shape, value_range)``: a tenth of the training entries held out."""
    if kind == "ratings":
        users, items, ratings, days = sizes
        d = ratings_like(users, items, ratings, random_state=seed)
        X, y, shape, vr = d["indices"], d["values"], d["shape"], d["value_range"]
        if days:
            day = np.random.default_rng(1000 + seed).integers(0, days, len(y))
            X, shape = np.column_stack([X, day]), (*shape, days)
    else:
        shape, frac, _ = sizes
        d = make_low_rank_tensor(shape, 3, missing_ratio=1 - frac, snr=1.0, random_state=seed)
        X, y = d["indices"], d["values"]
        pad = 3 * d["noise_std"]  # bench_completion's public range for the study
        vr = (-pad, 1 + pad)
    val = np.random.default_rng(500 + seed).random(len(y)) < 0.1
    return X[~val], y[~val], X[val], y[val], tuple(int(s) for s in shape), vr


def _fit(task):
    """One cell: ``(regime, candidate, epsilon, seed) -> record`` with the validation RMSE."""
    regime, kind, sizes, name, params, eps, seed = task
    X, y, X_val, y_val, shape, vr = _data(kind, sizes, seed)
    decomposition = sizes[2] if kind == "tensor" else "cp"
    rec = {"regime": regime, "candidate": name, "epsilon": eps, "seed": seed,
           "n_obs": len(y), "shape": shape}
    if name == "training mean":
        rec.update(rmse=float(np.sqrt(np.mean((y_val - y.mean()) ** 2))), seconds=0.0)
        return rec
    kw = dict(params, decomposition=decomposition, shape=shape, random_state=seed)
    if np.isfinite(eps):
        kw.update(epsilon=eps, delta=DELTA, value_range=vr)
    est = PrivateTensorCompletion(**kw)
    t0 = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the noise warnings are the point of some cells
        est.fit(X, y)
    seconds = time.perf_counter() - t0
    hist = (X, y) if params.get("privacy_unit") == "user" else None
    pred = est.predict(X_val, history=hist) if hist else est.predict(X_val)
    rec.update(rmse=float(np.sqrt(np.mean((pred - y_val) ** 2))), seconds=seconds)
    return rec


def tasks(done=frozenset()):
    """Every fit of the grid not in ``done`` (keys ``(regime, candidate, epsilon, seed)``)."""
    out = []
    for regime, kind, sizes in REGIMES:
        for seed in SEEDS:
            out.append((regime, kind, sizes, "training mean", {}, np.inf, seed))
            out.append((regime, kind, sizes, "non-private", {}, np.inf, seed))
            for name, params in _candidates(kind, sizes).items():
                out += [(regime, kind, sizes, name, params, e, seed) for e in EPSILONS]
    return [t for t in out if (t[0], t[3], t[5], t[6]) not in done]


def run(processes=2, records=()):
    """The grid's records: ``records`` (saved ones, kept) and every fit they lack, each appended
    to ``completion_auto.jsonl`` as it ends (a stopped run resumes with ``--resume``)."""
    records = list(records)
    done = {(r["regime"], r["candidate"], r["epsilon"], r["seed"]) for r in records}
    log = RESULTS / "completion_auto.jsonl"
    with Pool(processes) as pool, log.open("a") as out:
        for rec in pool.imap_unordered(_fit, tasks(done)):
            records.append(rec)
            out.write(json.dumps(rec) + "\n")
            out.flush()
            print(f"{rec['regime']:34s} {rec['candidate']:24s} eps={rec['epsilon']:<5g} "
                  f"seed={rec['seed']} rmse={rec['rmse']:.4f} {rec['seconds']:.1f}s", flush=True)
    return records


def cells(records):
    """Per (regime, epsilon): each candidate's mean RMSE over the seeds, the best, and what the
    rule picks (from the cell's public quantities: shape, entries, epsilon, the unit)."""
    mean = {}
    for r in records:
        mean.setdefault((r["regime"], r["candidate"], r["epsilon"]), []).append(r)
    by = {k: (float(np.mean([r["rmse"] for r in v])), float(np.mean([r["seconds"] for r in v])),
              v[0]) for k, v in mean.items()}
    out = []
    for regime, kind, sizes in REGIMES:
        ref = {c: by[(regime, c, np.inf)][0] for c in ("training mean", "non-private")}
        for eps in EPSILONS:
            for unit, pool in (("value", VALUE), ("user", USER)):
                got = {c: by[(regime, c, eps)][:2] for c in pool if (regime, c, eps) in by}
                if not got:
                    continue
                r0 = by[(regime, next(iter(got)), eps)][2]
                best = min(got, key=lambda c: got[c][0])
                pick, today = _rule_name(unit, kind, sizes, r0, eps), _today(unit, kind, sizes)
                shape = tuple(r0["shape"])
                feature = (r0["n_obs"] / np.prod(shape) if unit == "value"
                           else user_start_ratio(eps, DELTA, shape, 64))
                out.append({"regime": regime, "unit": unit, "epsilon": eps, **ref,
                            "feature": feature,
                            "errors": {c: v[0] for c, v in got.items()},
                            "seconds": {c: v[1] for c, v in got.items()},
                            "best": best, "auto": pick, "today": today,
                            "auto_over_best": got[pick][0] / got[best][0],
                            "today_over_best": got[today][0] / got[best][0]})
    return out


def _today(unit, kind, sizes):
    """What ``perturbation="auto"`` chose before the rule: DP-ALS for CP, DP gradient descent
    for Tucker; rank 3 at user level."""
    if unit == "user":
        return "user rank 3"
    return "gradient" if kind == "tensor" and sizes[2] == "tucker" else "statistics"


def _rule_name(unit, kind, sizes, rec, eps):
    """The candidate the library's rule picks for a cell, from its public quantities."""
    decomposition = sizes[2] if kind == "tensor" else "cp"
    choice = auto_choice(decomposition=decomposition, epsilon=eps, delta=DELTA,
                         shape=tuple(rec["shape"]),
                         n_obs=None if unit == "user" else rec["n_obs"], unit=unit,
                         max_ratings_per_user=64 if unit == "user" else None)
    if unit == "user":
        return f"user rank {choice['rank']}"
    if choice["perturbation"] == "statistics":
        return "statistics"
    if choice.get("offset_share") is None:
        return "gradient"
    return "gradient recipe rank 3" if len(rec["shape"]) == 2 else "gradient offsets 0.97"


def write(records):
    summary = cells(records)
    payload = {"benchmark": "completion_auto", "machine": machine_info(),
               "epsilons": EPSILONS, "seeds": SEEDS, "delta": DELTA,
               "regimes": [{"name": n, "kind": k, "sizes": s} for n, k, s in REGIMES],
               "records": records, "cells": summary}
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "completion_auto.json").write_text(json.dumps(payload, indent=1, default=str))
    (RESULTS / "completion_auto.md").write_text(markdown(summary))
    plot(summary)


def markdown(summary):
    lines = ["# completion_auto", "",
             "Validation RMSE (a random tenth of the training entries held out; the generators' "
             "test splits are never read), seed 0 (the 300x600 regime: the mean over seeds 0 "
             "and 1), "
             "delta = 1e-5. Ratings: "
             "`ratings_like` (values 1..5; the day mode carries no effect); tensors: "
             "`make_low_rank_tensor` rank 3, SNR 1. `best` is the cell's lowest error; `auto` "
             "what `perturbation=\"auto\"` picks from the cell's public quantities, `today` "
             "what it picked before (DP-ALS for CP, DP gradient descent for Tucker; user level: "
             "rank 3), with their errors over the "
             "best. Recipes: `factor_modes=(0, 1)`; gradient `offset_share=0.97` (rank 2, or 3 "
             "as given); statistics `offset_share=0.97`; implicit `rank=20, offset_share=0.5`. "
             "The rule's inputs: `density` (entries over positions; value unit) and `start "
             "ratio` (the user-level start's preview noise over its signal bound at rank 3).",
             ""]
    for unit in ("value", "user"):
        rows = [c for c in summary if c["unit"] == unit]
        names = list(dict.fromkeys(n for c in rows for n in c["errors"]))
        lines += [f"## {unit} unit", "",
                  "| regime | epsilon | " + ("density" if unit == "value" else "start ratio")
                  + " | mean | non-private | " + " | ".join(names)
                  + " | best | auto | auto / best | today / best |",
                  "|---" * (len(names) + 9) + "|"]
        for c in rows:
            errs = " | ".join(f"{c['errors'][n]:.4f}" if n in c["errors"] else "-"
                              for n in names)
            lines.append(f"| {c['regime']} | {c['epsilon']:g} | {c['feature']:.3g} | "
                         f"{c['training mean']:.4f} | "
                         f"{c['non-private']:.4f} | {errs} | {c['best']} | {c['auto']} | "
                         f"{c['auto_over_best']:.3f} | {c['today_over_best']:.3f} |")
        worst = max(c["auto_over_best"] for c in rows)
        lines += ["", f"Worst auto / best over the {unit}-unit cells: {worst:.3f}; today's "
                  f"worst: {max(c['today_over_best'] for c in rows):.3f}.", ""]
    return "\n".join(lines)


def plot(summary):
    """One panel a regime: validation RMSE over the non-private fit's against epsilon, one line
    a candidate; the rule's pick circled."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    regimes = [n for n, _, _ in REGIMES]
    fig, axes = plt.subplots(3, 4, figsize=(20, 12))
    names = list(dict.fromkeys(n for c in summary for n in c["errors"]))
    colors = {n: f"C{i % 10}" for i, n in enumerate(names)}
    for ax, regime in zip(axes.flat, regimes):
        rows = [c for c in summary if c["regime"] == regime]
        ref = rows[0]["non-private"]
        for n in names:
            pts = [(c["epsilon"], c["errors"][n] / ref) for c in rows if n in c["errors"]]
            if pts:
                ls = ":" if n.startswith("user") else "-"
                ax.plot(*zip(*pts), ls, marker=".", color=colors[n], label=n)
        for c in rows:
            ax.plot(c["epsilon"], c["errors"][c["auto"]] / ref, "o", mfc="none", mec="k", ms=10)
        ax.axhline(rows[0]["training mean"] / ref, color="gray", ls="--", lw=1)
        ax.set_xscale("log")
        ax.set_title(regime, fontsize=10)
        ax.set_xlabel("epsilon")
        ax.set_ylabel("validation RMSE / non-private")
    for ax in axes.flat[len(regimes):]:
        ax.axis("off")
    handles, labels = axes.flat[0].get_legend_handles_labels()
    handles += [plt.Line2D([], [], color="gray", ls="--"),
                plt.Line2D([], [], marker="o", mfc="none", mec="k", ls="none", ms=10)]
    labels += ["training mean", 'the "auto" rule picks']
    axes.flat[-1].legend(handles, labels, loc="center", fontsize=10)
    fig.suptitle("Completion: every mode at its recipe, validation RMSE over the non-private "
                 "fit's (delta=1e-5)")
    fig.tight_layout()
    fig.savefig(plot_path("completion_auto"), dpi=90)


if __name__ == "__main__":
    if "--redraw" in sys.argv:
        write(json.loads((RESULTS / "completion_auto.json").read_text())["records"])
    elif "--resume" in sys.argv:
        saved = (RESULTS / "completion_auto.jsonl").read_text().splitlines()
        write(run(records=[json.loads(line) for line in saved]))
    else:
        (RESULTS / "completion_auto.jsonl").unlink(missing_ok=True)
        write(run())
