"""``perturbation="output"``: the paper's bolt-on Laplace noise on the last factor, for
comparison only. Its bound assumes a convex, Lipschitz, smooth loss, which CP and Tucker losses
are not: the fit is recorded as not private (epsilon = infinity)."""
from __future__ import annotations

from ....accounting.events import ComposedEvent, LaplaceEvent, NonPrivateEvent
from ....mechanisms import laplace_release
from ..fit_noise import output_levels
from .base import CompletionMode, offsets_levels
from .solvers import fit_gd

OUTPUT_NOT_PRIVATE = ("perturbation='output' adds the paper's bolt-on noise, whose bound assumes "
                      "a convex, Lipschitz, smooth loss; CP and Tucker losses are not convex and "
                      "the other factors are released unnoised")


class Output(CompletionMode):
    """Gradient descent, then Laplace noise of the paper's sensitivity on the last factor."""

    name = "output"
    solver = "gd"

    def plan(self, p, epsilon, delta, order):
        # the paper's Laplace on the last factor, after Laplace offsets
        eps_o = p["offset_share"] * epsilon if p["fit_intercept"] else 0.0
        lead = [LaplaceEvent(eps_o)] if eps_o > 0 else []
        plan = {"event": ComposedEvent(lead + [LaplaceEvent(epsilon - eps_o)]), "z": 0.0,
                "n_queries": 1, "offsets": ("laplace", eps_o) if eps_o > 0 else None,
                "laplace_eps": epsilon - eps_o}
        return plan, NonPrivateEvent(OUTPUT_NOT_PRIVATE)

    def fit(self, obs, ys, p, plan, rng, *, history, progress, private):
        model = fit_gd(obs, ys, p, plan, rng, z=0.0, history=history, progress=progress)
        if private:
            # The paper's bolt-on bound: Delta = 2 * iterations * Lipschitz constant * learning
            # rate. On the last mode with a factor: a mode without one keeps its public all-ones
            # factor.
            sens = 2.0 * p["n_iter"] * p["clip"] * p["lr"]
            last = model.free_modes()[-1]
            # No allowance: the bound is the paper's, with no proof here (the fit is recorded as
            # not private), so there is no proven sensitivity for a rounding allowance to extend.
            model.factors[last] = laplace_release(model.factors[last], sens, plan["laplace_eps"],
                                                  rng, rounding=None)
            model.noise = output_levels(model, last, sens / plan["laplace_eps"], obs.shape,
                                        offsets_levels(obs, p, plan, n_global=1))
        return model
