"""``perturbation=None``: the non-private fit (ALS, or gradient descent with ``solver="gd"``),
which costs epsilon = infinity."""
from __future__ import annotations

from .base import CompletionMode
from .solvers import fit_als, fit_gd


class NonPrivate(CompletionMode):
    """No noise: ALS or gradient descent on the values themselves."""

    name = None

    def plan(self, p, epsilon, delta, order):  # pragma: no cover - the estimator never asks
        raise ValueError("perturbation=None is the non-private fit: it has no noise plan")

    def fit(self, obs, ys, p, plan, rng, *, history, progress, private):
        if p["solver"] == "als":
            return fit_als(obs, ys, p, rng, history=history, progress=progress, noisy_input=False)
        return fit_gd(obs, ys, p, plan, rng, z=0.0, history=history, progress=progress)
