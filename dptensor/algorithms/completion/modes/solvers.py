"""The two fits every mode without noisy statistics runs: ALS and (DP) gradient descent, with
their tuned defaults."""
from __future__ import annotations

from ..als import als
from ..gradient import gradient_descent
from ..model import init_model
from ..offsets import offset_noise, row_offsets

__all__ = ["GD_DEFAULTS", "ALS_ITER", "AUTO_REG_FLOOR", "AUTO_PRIOR_VAR", "DAMPING", "fit_als",
           "fit_gd"]

#: Gradient descent's defaults: its step, its steps, the per-entry gradient's clipping norm and
#: its ridge (``learning_rate=None``, ``n_iter=None``, ``clip_norm=None``, ``reg="auto"``).
GD_DEFAULTS = {"learning_rate": 0.35, "n_iter": 5, "clip_norm": 0.1, "reg": 0.01}

#: The largest gradient step a fit takes. The values lie in a unit range and a row's step is
#: ``lr`` times a gradient clipped to ``clip_norm``, so a step of 1e6 already learns nothing; far
#: beyond it (1e90) the last factor's noise scale, ``2 n_iter clip_norm lr``, overflows the
#: exact sampler after the spend. Refused before it.
MAX_LEARNING_RATE = 1e6

#: ``reg="auto"`` with ALS: after ``warmup`` sweeps at the floor ``AUTO_REG_FLOOR``, each sweep uses
#: the empirical-Bayes ridge ``AUTO_REG_FLOOR + s2 / AUTO_PRIOR_VAR`` (noise variance over the
#: prior variance of one parameter, in scaled units). Chosen on the synthetic completion study
#: (20x20x20, rank 3, SNR 1) and a synthetic ratings tensor, never on a test set: it is exact on
#: noiseless low-rank data (the ridge vanishes with the residual) and shrinks hard on noisy
#: sparse ratings. The non-private fit's ``s2`` is the residual sum of squares over the residual
#: degrees of freedom (``dptensor.algorithms.completion.als.noise_variance``): over every
#: entry, rows with a few entries each (1e5 ratings over 3e4 items) overfitted and their vanishing
#: residuals took the ridge down with them (``benchmarks/results/sparse_reg.md``). After input
#: perturbation (a private mode, left as it was) it is still the mean squared residual.
AUTO_REG_FLOOR = 1e-4
#: Gradient descent's Gauss-Newton damping, in units of the noise variance ``(2 z clip)^2``.
DAMPING = 10.0
AUTO_PRIOR_VAR = 0.02
#: ALS sweeps at most (``n_iter=None``); it stops early at ``tol``.
ALS_ITER = 100


def fit_als(obs, ys, p, rng, *, history, progress, noisy_input):
    """ALS from a small random start; ``noisy_input``: every value carries Laplace noise."""
    model = init_model(obs.shape, p["rank"], p["kind"], rng, scale=0.1, fixed=p["fixed"])
    if p["fit_intercept"]:
        # After input perturbation every value carries Laplace noise: the row effects are
        # estimated once with empirical-Bayes shrinkage (post-processing) and kept fixed,
        # since a ridge chosen for the factors under-shrinks noisy row means.
        model.intercept, model.biases = row_offsets(obs, ys, shrink=max(p["reg"], 1e-3),
                                                    empirical_bayes=noisy_input)
    return als(obs, ys, model, reg=p["reg"], reg_core=p["reg_core"], n_iter=p["n_iter"],
               tol=p["tol"], fit_biases=p["fit_intercept"] and not noisy_input,
               prior_var=p["prior_var"], warmup=0 if noisy_input else 5, dof=not noisy_input,
               history=history,
               callback=progress)


def fit_gd(obs, ys, p, plan, rng, *, z, history, progress):
    """Gradient descent: data-independent start, private offsets (by ``plan["offsets"]``), then
    steps with noise multiplier ``z`` (0: none)."""
    model = init_model(obs.shape, p["rank"], p["kind"], rng, scale=0.1, offset_like=True,
                       fixed=p["fixed"])
    if p["fit_intercept"]:
        offsets = plan.get("offsets") if plan else None
        noise = offset_noise(obs, *offsets) if offsets else None
        model.intercept, model.biases = row_offsets(obs, ys, shrink=1.0, noise=noise, rng=rng)
    gradient_descent(obs, ys, model, learning_rate=p["lr"], n_iter=p["n_iter"], reg=p["reg"],
                     reg_core=p["reg_core"], clip_norm=p["clip"], noise_multiplier=z,
                     damping=DAMPING * (2.0 * z * p["clip"])**2, rng=rng, history=history,
                     callback=progress)
    return model
