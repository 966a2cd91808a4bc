"""The noise layer: releases of a value at a sensitivity, their exact samplers, and the keyed
randomness every fit draws from.

* :mod:`~dptensor.mechanisms.releases`: Gaussian, Laplace, symmetric and joint releases,
  AboveThreshold, row clipping, and :class:`Rounding` (a float sum's allowance);
* :mod:`~dptensor.mechanisms.samplers`: exact rounded Gaussian and Laplace samplers;
* :mod:`~dptensor.mechanisms.randomness`: seeds, data digests and the spend-keyed generators.

Mechanisms never see a budget: the caller records the matching :mod:`dptensor.accounting` event
before it calls them.
"""
from .releases import (GRID_BITS, Rounding, above_threshold, clip_factors, clip_rows,
                       gaussian_release, grid_step, joint_gaussian_release, laplace_release,
                       symmetric_gaussian_release)

__all__ = ["above_threshold", "clip_factors", "clip_rows", "gaussian_release",
           "joint_gaussian_release", "laplace_release", "symmetric_gaussian_release", "grid_step",
           "GRID_BITS", "Rounding"]
