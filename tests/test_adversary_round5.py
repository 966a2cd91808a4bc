"""Adversary review, round 5 (adv4): today's calibration and noise-key changes."""
import math

import mpmath
import pytest

from dptensor.accounting import GaussianEvent, calibrate_gaussian, epsilon_of, gdp_epsilon


def _true_delta(eps, mu):
    with mpmath.workdps(60):
        eps, mu = mpmath.mpf(eps), mpmath.mpf(mu)
        return (mpmath.ncdf(-eps / mu + mu / 2)
                - mpmath.e**eps * mpmath.ncdf(-eps / mu - mu / 2))


@pytest.mark.parametrize("eps", [1e-6, 1e-4, 1.0, 1e3])
@pytest.mark.parametrize("delta", [1e-300, 1e-100, 1e-12, 1e-5, 0.999])
@pytest.mark.parametrize("n", [1, 10**7])
def test_calibrated_gaussian_costs_at_most_its_target(eps, delta, n):
    """The noise calibrate_gaussian returns costs, at 60 digits, at most (eps, delta). At
    eps=1e-6, delta=1e-300 the profile's two terms cancel to 1e-5 of their size and the
    float profile lay below the true one by more than the 1e-10 margin (true delta 1.00003x)."""
    z = calibrate_gaussian(eps, delta, n)
    assert _true_delta(eps, math.sqrt(n) / z) <= delta
    # and the accountant's price of that event is no lower than its true cost
    mu = math.sqrt(n) / z
    assert _true_delta(gdp_epsilon(mu, delta), mu) <= delta
    assert epsilon_of(GaussianEvent(z, n), delta) <= eps

