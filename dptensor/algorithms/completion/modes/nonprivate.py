"""``perturbation=None``: the non-private fit (ALS, or gradient descent with ``solver="gd"``),
which costs epsilon = infinity; with ``factor_modes="auto"`` it chooses its modes on held-out
entries (:func:`choose_fixed_modes`), which only a fit without privacy may do."""
from __future__ import annotations

import numpy as np

from ..model import predict
from ..observations import Observations
from .base import CompletionMode
from .solvers import fit_als, fit_gd

__all__ = ["NonPrivate", "choose_fixed_modes", "CHOICE_MIN_ENTRIES", "CHOICE_HELD_OUT"]

#: ``factor_modes="auto"`` chooses only from this many entries on (fewer: every mode), holding
#: out ``CHOICE_HELD_OUT`` of them, as scikit-learn's ``HistGradientBoosting*`` does for its
#: ``early_stopping="auto"`` (10 000 samples, a tenth held out).
CHOICE_MIN_ENTRIES = 10_000
CHOICE_HELD_OUT = 0.1


class NonPrivate(CompletionMode):
    """No noise: ALS or gradient descent on the values themselves."""

    name = None

    def plan(self, p, epsilon, delta, order):  # pragma: no cover - the estimator never asks
        raise ValueError("perturbation=None is the non-private fit: it has no noise plan")

    def fit(self, obs, ys, p, plan, rng, *, history, progress, private):
        if p.get("choose_modes"):
            p = dict(p, fixed=choose_fixed_modes(obs, ys, p, rng.spawn(1)[0]))
        return _fit(obs, ys, p, plan, rng, history=history, progress=progress)


def _fit(obs, ys, p, plan, rng, *, history=None, progress=None):
    if p["solver"] == "als":
        return fit_als(obs, ys, p, rng, history=history, progress=progress, noisy_input=False)
    return fit_gd(obs, ys, p, plan, rng, z=0.0, history=history, progress=progress)


def choose_fixed_modes(obs, ys, p, rng) -> tuple:
    """The modes without a factor of a CP fit of order >= 3: none (every mode), or every mode
    after the first two (a users x items interaction with offsets along the rest, the ratings
    recipe), whichever fits a random tenth of the entries better when fitted on the others.

    On MovieLens-100K the second held out 0.913 against 0.941 (ua's training ratings); on
    synthetic ratings whose day carries no effect, the first (0.898 against 0.914): neither
    structure is right for every data set, and a fit without privacy can ask its data."""
    candidates = [(), tuple(range(2, obs.order))]
    n = len(ys)
    if obs.order < 3 or p["kind"] != "cp" or n < CHOICE_MIN_ENTRIES:
        return candidates[0]
    held = rng.permutation(n) < round(CHOICE_HELD_OUT * n)
    train = Observations(obs.X[~held], obs.shape)
    errors = []
    for fixed, child in zip(candidates, rng.spawn(len(candidates))):
        model = _fit(train, ys[~held], dict(p, fixed=fixed), None, child)
        errors.append(float(np.mean((predict(model, obs.X[held]) - ys[held]) ** 2)))
    return candidates[int(np.argmin(errors))]
