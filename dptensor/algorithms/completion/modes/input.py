"""``perturbation="input"``: every observed value clipped to the range and released with
``Lap((hi - lo) / eps)`` noise (pure ``eps``-DP by parallel composition), then the non-private
fit on the noisy values (post-processing)."""
from __future__ import annotations

from ....accounting.events import LaplaceEvent
from ....mechanisms import laplace_release
from ..fit_noise import input_levels
from .base import CompletionMode
from .solvers import fit_als, fit_gd


#: The smallest epsilon ``perturbation="input"`` takes. Its noise, ``Lap(1 / epsilon)`` in units
#: of the range's width, grows as ``n 2**-30 / epsilon**2`` on the exact sampler's grid
#: (:func:`~dptensor.mechanisms.laplace_release`): from about 1e-42 the noisy values' squares
#: overflowed float64 in the fit after the spend (NumPy's overflow warning, or an error under
#: warnings as errors). At 1e-12 and 1e9 entries it is about 1e30: far from overflowing.
MIN_EPSILON = 1e-12


class Input(CompletionMode):
    """Laplace noise on every value, then ALS or gradient descent."""

    name = "input"

    def plan(self, p, epsilon, delta, order):
        if epsilon < MIN_EPSILON:  # before the spend: what the fit would compute on overflows
            raise ValueError(f'perturbation="input" needs epsilon >= {MIN_EPSILON:g}: its Laplace '
                             f"noise on every value, of scale 1/epsilon and more, would overflow "
                             f"the fit's sums of squares; got epsilon={epsilon!r}")
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
