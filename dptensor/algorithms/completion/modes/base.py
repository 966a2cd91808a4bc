"""The protocol every completion mode follows, and the budget split the Gaussian modes share.

A mode is one way to make a completion fit private (or not). It has two steps:

* :meth:`CompletionMode.plan`: public parameters in, ``(plan, event)`` out: the noise plan (a
  dict with the event, the main multiplier ``"z"``, ``"n_queries"`` and what the fit needs) and
  the event the accountant prices;
* :meth:`CompletionMode.fit`: the scaled values, the plan and the fit's noise generator in, the
  fitted :class:`~dptensor.algorithms.completion.model.Model` out.

The parameters ``p`` are the estimator's validated parameters (a dict: ``rank``, ``kind``,
``solver``, ``n_iter``, ``fit_intercept``, ``offset_share``, ``fixed``, ...). The rest of the
attributes say what the estimator's checks need to know of the mode, so that it compares no
mode's name.
"""
from __future__ import annotations

import math
import operator
from dataclasses import dataclass

import numpy as np

from ....accounting.composition import gdp_mu
from ..fit_noise import offset_levels
from ..offsets import offsets_plan
from .solvers import ALS_ITER, GD_DEFAULTS

__all__ = ["CompletionMode", "FitSettings", "OFFSET_SHARE", "fixed_modes",
           "gaussian_split"]

#: Share of the budget spent on the private offsets when ``fit_intercept=True`` (gradient and output
#: perturbation): the gradient steps get ``(1 - OFFSET_SHARE) mu^2`` in Gaussian DP, the offsets
#: the rest; ``OFFSET_SHARE eps`` against the Laplace factor noise for ``"output"``. The default of
#: every mode that does not tune its own (unused by those without offsets).
OFFSET_SHARE = 0.5


@dataclass(frozen=True)
class FitSettings:
    """What a completion release reads from a fit's plan: the validated parameters, the mode's
    noise plan (``None`` for a non-private fit at value level), the public value range, whether
    the fit is private."""

    params: dict
    noise: dict | None
    value_range: tuple[float, float] | None
    private: bool


class CompletionMode:
    """One completion mode: a plan from public parameters, a fit from the data and the plan."""

    #: The ``perturbation`` value that selects it.
    name: str | None = None
    #: The solver the mode requires (``"als"`` or ``"gd"``), or ``None`` for the caller's choice
    #: (``solver="auto"`` is then ALS).
    solver: str | None = None
    #: Whether the mode fits only CP models.
    cp_only = False
    #: Whether its event composes Gaussian releases (a delta is then required).
    gaussian = False
    #: ``offset_share=None`` means this share.
    offset_share = OFFSET_SHARE

    def n_iter(self, requested, solver) -> int:
        """The sweeps or steps of a fit: ``requested`` (``None``: the solver's default)."""
        if requested is not None:
            return requested
        return GD_DEFAULTS["n_iter"] if solver == "gd" else ALS_ITER

    def memory_mode(self, solver) -> str:
        """What :func:`~dptensor.algorithms.completion.memory.fit_floats` prices the fit as."""
        return solver

    def check_modes(self, order, fixed, factor_modes) -> None:
        """Refuse ``factor_modes`` the mode cannot fit (before any spend)."""

    def prepare(self, obs, p) -> None:
        """Public work from the positions alone, done before the spend (so that a shape too
        large for memory fails there, not after the budget is gone)."""

    def plan(self, p, epsilon, delta, order):
        """``(plan, event)`` of a private fit at ``(epsilon, delta)`` on an order-``order``
        tensor (public parameters only)."""
        raise NotImplementedError

    def fit(self, obs, ys, p, plan, rng, *, history, progress, private):
        """The fitted model on the scaled values ``ys``; ``plan`` is ``None`` without privacy."""
        raise NotImplementedError


def gaussian_split(p, epsilon, delta, order, statistics):
    """``(mu_f, offsets, lead, n_o)``: the factors' Gaussian DP share ``mu_f`` of the fit's
    ``mu`` (``(1 - offset_share)`` of ``mu^2``), the offsets' mechanism and budget, their events
    and their number of releases (``order + 1`` with ``fit_intercept``, and the residual scale for
    the statistics modes): :func:`~dptensor.algorithms.completion.offsets.offsets_plan`."""
    n_o = (order + 1 if p["fit_intercept"] else 0) + statistics  # + the residual scale
    mu = gdp_mu(epsilon, delta)
    mu_f = mu * math.sqrt(1.0 - p["offset_share"]) if n_o else mu
    offsets, lead = offsets_plan(n_o, mu, mu_f, epsilon, delta)
    return mu_f, offsets, lead, n_o


def offsets_levels(obs, p, plan, n_global):
    """The released offsets' noise levels per mode (zeros when none are released)."""
    if not (p["fit_intercept"] and plan.get("offsets")):
        return np.zeros(obs.order)
    return offset_levels(obs, plan["offsets"], n_global)


def fixed_modes(factor_modes, order, decomposition):
    """The modes without a factor (a sorted tuple) from the estimator's ``factor_modes`` (``None``:
    every mode has one) and the tensor's order; refuses what names no set of modes to fit."""
    if factor_modes is None:
        return ()
    try:
        modes = [operator.index(m) for m in factor_modes]
    except TypeError:
        modes = None
    # a bool is an int to Python, but (True, False) is no list of modes
    if modes is None or any(isinstance(m, (bool, np.bool_)) for m in factor_modes):
        raise TypeError('factor_modes must be "auto", None or a sequence of integer mode '
                        f"indices, got {factor_modes!r}")
    if len(set(modes)) != len(modes) or len(modes) < 2 or not all(0 <= m < order for m in modes):
        raise ValueError(f"factor_modes must hold at least two distinct modes in [0, {order}), "
                         f"got {factor_modes!r}")
    if decomposition != "cp" and len(modes) < order:
        raise ValueError('factor_modes is for decomposition="cp": '
                         'a Tucker model has a factor on every mode')
    return tuple(m for m in range(order) if m not in modes)
