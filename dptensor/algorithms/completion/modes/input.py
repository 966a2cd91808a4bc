"""``perturbation="input"``: every observed value clipped to the range and released with
``Lap((hi - lo) / eps)`` noise (pure ``eps``-DP by parallel composition), then the non-private
fit on the noisy values (post-processing)."""
from __future__ import annotations

from ....accounting.events import LaplaceEvent
from ....mechanisms import laplace_release
from ..fit_noise import input_levels
from .base import CompletionMode
from .solvers import fit_als, fit_gd


class Input(CompletionMode):
    """Laplace noise on every value, then ALS or gradient descent."""

    name = "input"

    def plan(self, p, epsilon, delta, order):
        plan = {"event": LaplaceEvent(epsilon), "z": 0.0, "n_queries": 1, "laplace_eps": epsilon}
        return plan, plan["event"]

    def fit(self, obs, ys, p, plan, rng, *, history, progress, private):
        if private:
            # Sensitivity of each value: hi - lo, which is 1 in scaled units.
            # Not clamped back into the range afterwards: that would bias every mean toward the
            # range's centre; the empirical-Bayes ridge of ALS sees the noise and shrinks instead.
            # No sum: each coordinate is one entry's own value, with nothing to round.
            ys = laplace_release(ys, 1.0, plan["laplace_eps"], rng, rounding=None)
        if p["solver"] == "als":
            model = fit_als(obs, ys, p, rng, history=history, progress=progress,
                            noisy_input=private)
        else:
            model = fit_gd(obs, ys, p, plan, rng, z=0.0, history=history, progress=progress)
        if private:
            model.noise = input_levels(obs, model, plan["laplace_eps"], p["fit_intercept"])
        return model
