"""A completion's previews refuse a ``shape`` its fit refuses, rather than pricing a fit that
cannot run (and a one-mode shape is a ValueError, not an IndexError from the start's rule)."""
import numpy as np
import pytest

from dptensor import PrivacyAccountant, PrivateTensorCompletion

BAD = [((50,), ValueError, "at least 2 modes"), ((0, 40), ValueError, "shape must be >= 1"),
       ((50, -1), ValueError, "shape must be >= 1"), ((50, 40.5), TypeError, "integer >= 1"),
       ((50, True), TypeError, "integer >= 1"), ("50x40", TypeError, "tuple of sizes"),
       ((50, 40, 3), ValueError, "has 3 modes, n_features is 2")]


@pytest.mark.parametrize("unit", ["user", "value"])
@pytest.mark.parametrize("shape, error, message", BAD)
def test_previews_refuse_the_shapes_the_fit_refuses(unit, shape, error, message):
    budget = PrivacyAccountant(10.0, 1e-5)
    est = PrivateTensorCompletion(privacy_unit=unit, epsilon=1.0, delta=1e-5, rank=2,
                                  shape=shape, value_range=(1, 5), accountant=budget)
    for preview in (est.privacy_cost, est.expected_noise):
        with pytest.raises(error, match=message):
            preview(2000, 2)
    rng = np.random.default_rng(0)
    X, y = np.c_[rng.integers(0, 50, 500), rng.integers(0, 40, 500)], rng.uniform(1, 5, 500)
    with pytest.raises((ValueError, TypeError)) as refused:  # the fit's own check
        est.fit(X, y)
    if isinstance(shape, str):  # its characters are not sizes: "got '5'" named none of them
        assert "tuple of sizes" in str(refused.value)
    assert budget.history() == []


def test_a_valid_shape_still_previews_as_before():
    est = PrivateTensorCompletion(privacy_unit="user", epsilon=1.0, delta=1e-5, rank=2,
                                  shape=np.array([50, 40]), value_range=(1, 5))
    assert est.privacy_cost(2000, 2).epsilon == pytest.approx(1.0)
    assert est.expected_noise(2000, 2).noise > 0
