"""``perturbation="implicit"``: private offsets and residual scale, then the two-mode interaction
``f(e) = z_i^T Y q_j + p_i^T W z'_j`` learned through the public positions from one Gaussian
release of its sufficient statistic, solved with an empirical-Bayes (Wiener) filter
(:mod:`dptensor.algorithms.completion.implicit`)."""
from __future__ import annotations

import numpy as np

from ....accounting.events import ComposedEvent, GaussianEvent
from ....mechanisms import gaussian_release
from ..implicit import DESIGN_NORM, TOP_DIRECTIONS, implicit_rounding, wiener_filter
from ..model import init_model
from ..model import offsets as offsets_of
from ..fit_noise import implicit_levels
from .base import CompletionMode, gaussian_split, offsets_levels
from .statistics import offsets_and_scale

#: Share of the budget spent on the offsets and the residual scale (the rest: one release of the
#: interaction's sufficient statistic). Large enough that the offsets are Laplace releases at
#: epsilon = 1: on synthetic ratings whose positions follow the taste (500 x 300 x 30, 3.2e4
#: values) test RMSE 0.652 at epsilon = 1 against 0.702 with 0.8 and 0.712 with 0.5, for 0.520
#: against 0.515 at epsilon = 10. On a validation split of MovieLens-100K's training ratings 0.5
#: did a little better at both epsilons (0.982 against 0.988 at epsilon = 1:
#: ``benchmarks/results/movielens_choice.md``): ratings data can afford a smaller share.
IMPLICIT_OFFSET_SHARE = 0.97


def implicit_modes(order, fixed, factor_modes):
    """``(lead, partner)``: the two modes with a factor of ``perturbation="implicit"``."""
    free = [m for m in range(order) if m not in fixed]
    if len(free) != 2:
        raise ValueError('perturbation="implicit" learns a two-mode interaction: pass factor_modes '
                         'with two modes (e.g. (0, 1) for users and items), or fit a matrix (two '
                         'columns of X)')
    if factor_modes is not None:
        free = [int(m) for m in factor_modes]
    return free[0], free[1]


class Implicit(CompletionMode):
    """One release of the implicit interaction's statistic (l2 sensitivity
    ``sqrt(2) min(1, 2 clip)``); ``n_iter`` is 1 (one release, one solve)."""

    name = "implicit"
    solver = "als"
    cp_only = True
    gaussian = True
    offset_share = IMPLICIT_OFFSET_SHARE

    def n_iter(self, requested, solver):
        return 1  # one release, one solve: there are no sweeps to set

    def memory_mode(self, solver):
        return self.name

    def check_modes(self, order, fixed, factor_modes):
        implicit_modes(order, fixed, factor_modes)

    def prepare(self, obs, p):
        lead, partner = implicit_modes(obs.order, p["fixed"], p["factor_modes"])
        # the design and its Gram's leading directions (the filter's, after the spend) depend on
        # the positions alone: built here, before the spend, where a solver's failure costs nothing
        obs.implicit_design(lead, partner, p["rank"]).bulk(TOP_DIRECTIONS)

    def plan(self, p, epsilon, delta, order):
        mu_f, offsets, lead, n_o = gaussian_split(p, epsilon, delta, order, statistics=True)
        z = 1.0 / mu_f  # one release of the interaction's sufficient statistic
        plan = {"event": ComposedEvent(lead + [GaussianEvent(z, 1)]), "z": z, "offsets": offsets,
                "n_queries": n_o + 1}
        return plan, plan["event"]

    def fit(self, obs, ys, p, plan, rng, *, history, progress, private):
        plan = plan or {"z": 0.0}
        lead, partner = implicit_modes(obs.order, p["fixed"], p["factor_modes"])
        # The released CP model has 2 rank columns: [Z Y, P] and [Q, Z' W].
        model = init_model(obs.shape, 2 * p["rank"], "cp", rng, scale=0.1, fixed=p["fixed"])
        _, clip, s2 = offsets_and_scale(obs, ys, model, plan, rng, p["fit_intercept"])
        design = obs.implicit_design(lead, partner, p["rank"])
        # One value moves its clipped residual by at most min(1, 2 clip); each entry's design has
        # norm at most DESIGN_NORM.
        resid = np.clip(ys - offsets_of(model, obs.X), -clip, clip)
        sens = DESIGN_NORM * min(1.0, 2.0 * clip)
        B = design.adjoint(resid)
        if plan["z"] > 0:
            B = gaussian_release(B, sens, plan["z"], rng,
                                 rounding=implicit_rounding(len(ys), clip))
        apply = wiener_filter(design, B, s2=s2, noise_var=(plan["z"] * sens) ** 2)
        theta = np.zeros(design.shape) if apply is None else apply(B)
        model.factors[lead], model.factors[partner] = design.factors(theta)
        if plan["z"] > 0:
            model.noise = implicit_levels(obs, model, design, apply, plan["z"] * sens,
                                          offsets_levels(obs, p, plan, n_global=2))
        if progress is not None:
            progress(0)
        return model
