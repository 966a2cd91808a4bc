"""``perturbation="gradient"``: private offsets, then full-batch DP gradient descent over every
factor (and the core), each step one Gaussian release of the clipped gradients' sum."""
from __future__ import annotations

import math

from ....accounting.events import ComposedEvent, GaussianEvent
from ..fit_noise import gradient_levels
from .base import CompletionMode, gaussian_split, offsets_levels
from .solvers import DAMPING, fit_gd


class Gradient(CompletionMode):
    """DP gradient descent: ``n_iter`` releases of l2 sensitivity ``2 clip_norm``."""

    name = "gradient"
    solver = "gd"
    gaussian = True

    def plan(self, p, epsilon, delta, order):
        mu_f, offsets, lead, _ = gaussian_split(p, epsilon, delta, order, statistics=False)
        z = math.sqrt(p["n_iter"]) / mu_f
        plan = {"event": ComposedEvent(lead + [GaussianEvent(z, p["n_iter"])]), "z": z,
                "offsets": offsets, "n_queries": p["n_iter"]}
        return plan, plan["event"]

    def fit(self, obs, ys, p, plan, rng, *, history, progress, private):
        z = plan["z"] if plan else 0.0
        model = fit_gd(obs, ys, p, plan, rng, z=z, history=history, progress=progress)
        if plan:  # the released factors' noise levels (post-processing: public and released)
            damping = DAMPING * (2.0 * z * p["clip"]) ** 2
            model.noise = gradient_levels(obs, model, p, z, damping,
                                          offsets_levels(obs, p, plan, n_global=1))
        return model
