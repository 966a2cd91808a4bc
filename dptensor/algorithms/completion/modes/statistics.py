"""``perturbation="statistics"`` (DP-ALS, the default private mode for CP): private offsets, a
released residual scale, a private spectral start, then ALS sweeps whose per-row right-hand sides
are released with Gaussian noise and solved with empirical-Bayes shrinkage."""
from __future__ import annotations

import math

import numpy as np

from ....accounting.events import ComposedEvent, GaussianEvent
from ..dp_als import dp_als
from ..model import init_model
from ..offsets import OffsetNoise, offset_noise, residual_scale, row_offsets
from ..spectral import spectral_start
from ..fit_noise import ReleaseNoise
from .base import CompletionMode, gaussian_split, offsets_levels

#: DP-ALS sweeps after the spectral start. Every sweep costs ``order`` releases; on the 100^3
#: study (rank 3, 1e5 entries, SNR 1) two kept more of the non-private gain than one at
#: epsilon = 4, and the noise-free path gains nothing after two.
DP_ALS_SWEEPS = 2
#: Residuals are clipped to ``CLIP_RMS`` times their released root-mean-square (``residual_scale``)
#: before DP-ALS: the noise scales with the clipping level, and values near the range's ends are
#: rare once the offsets are removed.
CLIP_RMS = 1.5
#: Share of ``mu^2`` (Gaussian DP) spent on the offsets and the residual scale, sums over many
#: entries that need far less of the budget than the factors.
STATS_OFFSET_SHARE = 0.1
#: The spectral start's unfolding Grams: values clipped to ``GRAM_CLIP_RMS`` released rms (their
#: noise grows with the square of the clipping level, so a tighter clip than the sweeps' pays),
#: and at most ``COLUMN_CAP`` times the mean number of entries kept per unfolding column (the
#: noise grows with the fullest column). Both chosen on the 100^3 study: they moved the epsilon at
#: which DP-ALS starts to learn from about 4 down to about 2.
GRAM_CLIP_RMS = 1.0
COLUMN_CAP = 1.2
#: Share of the factor releases' ``mu^2`` spent on the spectral start's ``order - 1`` unfolding
#: Grams (the rest: its projected step and the sweeps). The first release that must align with the
#: truth is the one that decides whether the fit learns at all; on the 100^3 study 0.4 (against
#: 2/9 for equal multipliers) kept about 0.6 of the non-private gain at epsilon = 2 instead of 0.35.
GRAM_SHARE = 0.4


def offsets_and_scale(obs, ys, model, plan, rng, fit_intercept):
    """Private offsets (into ``model``) and the released residual scale after them: one budget
    (the two sums over every entry a small share each, the rows the rest by public counts);
    without intercept the scale is all of it. Returns ``(rms, clip, s2)``: the released scale,
    the residuals' clipping level and the per-entry variance that stands for them in the
    empirical-Bayes solves (an upper bound: the scale still holds the interactions)."""
    offsets, noise = plan.get("offsets"), None
    if fit_intercept:
        noise = offset_noise(obs, *offsets, n_global=2) if offsets else None
        model.intercept, model.biases = row_offsets(obs, ys, shrink=1.0, rng=rng, noise=noise)
    elif offsets:
        noise = OffsetNoise(offsets[0], np.array([offsets[1]]))
    rms = residual_scale(obs, ys, model, noise=noise, rng=rng)
    clip = min(0.5, max(CLIP_RMS * rms, 1e-3))
    return rms, clip, min(rms, clip) ** 2


class Statistics(CompletionMode):
    """DP-ALS; ``epsilon=inf`` runs the same path without noise (for comparison)."""

    name = "statistics"
    solver = "als"
    cp_only = True
    gaussian = True
    offset_share = STATS_OFFSET_SHARE

    def n_iter(self, requested, solver):
        return DP_ALS_SWEEPS if requested is None else requested

    def memory_mode(self, solver):
        return self.name

    def plan(self, p, epsilon, delta, order):
        mu_f, offsets, lead, n_o = gaussian_split(p, epsilon, delta, order, statistics=True)
        n_free = order - len(p["fixed"])  # modes with a factor: each is one release per sweep
        # GRAM_SHARE of mu_f^2 goes to the spectral start's n_free - 1 Grams (z_g), the rest to
        # its projected step and the sweeps (1 + n_iter n_free releases at z).
        n_g, n_f = n_free - 1, 1 + p["n_iter"] * n_free
        z_g = math.sqrt(n_g) / (mu_f * math.sqrt(GRAM_SHARE))
        z = math.sqrt(n_f) / (mu_f * math.sqrt(1.0 - GRAM_SHARE))
        event = ComposedEvent(lead + [GaussianEvent(z_g, n_g), GaussianEvent(z, n_f)])
        plan = {"event": event, "z": z, "z_gram": z_g, "offsets": offsets,
                "n_queries": n_o + n_g + n_f}
        return plan, event

    def fit(self, obs, ys, p, plan, rng, *, history, progress, private):
        """Private offsets, a released residual scale, then noisy-statistics sweeps."""
        plan = plan or {"z": 0.0}
        z = plan["z"]
        model = init_model(obs.shape, p["rank"], "cp", rng, scale=0.1, fixed=p["fixed"])
        rms, clip, s2 = offsets_and_scale(obs, ys, model, plan, rng, p["fit_intercept"])
        spectral_start(obs, ys, model, noise_multiplier=z, rng=rng, clip=clip, s2=s2,
                       gram_clip=min(0.5, max(GRAM_CLIP_RMS * rms, 1e-3)), column_cap=COLUMN_CAP,
                       gram_noise_multiplier=plan.get("z_gram", z))
        model = dp_als(obs, ys, model, n_iter=p["n_iter"], noise_multiplier=z, rng=rng,
                       clip=clip, s2=s2, callback=progress)
        if z > 0:  # the factors are judged by the start (model.start); the offsets here
            model.noise = ReleaseNoise(np.zeros(model.rank),
                                       offsets_levels(obs, p, plan, n_global=2))
        return model
