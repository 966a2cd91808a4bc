"""The main job: every estimator on embedded synthetic data, one shared budget, one table."""
from __future__ import annotations

import numpy as np

from .accounting import GaussianEvent, PrivacyAccountant, calibrate_gaussian


def run_demo(quick: bool = False, plot: str | None = "dptensor_demo.png") -> int:
    budget = PrivacyAccountant(epsilon=4.0, delta=1e-5)
    for eps in (0.5, 1.0):
        z = calibrate_gaussian(eps, 1e-5, 100)
        budget.spend(GaussianEvent(z, 100), label=f"100 Gaussian queries at epsilon={eps}")
    print(budget)
    return 0
