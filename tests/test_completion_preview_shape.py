"""A completion's previews refuse a ``shape`` its fit refuses, rather than pricing a fit that
cannot run (and a one-mode shape is a ValueError, not an IndexError from the start's rule)."""
import numpy as np
import pytest

from dptensor import PrivacyAccountant, PrivateTensorCompletion
from tests.expected_warnings import NON_PRIVATE, completion_noise, noise_dominated

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



@NON_PRIVATE
@noise_dominated()
@completion_noise
@pytest.mark.parametrize("perturbation", ["statistics", "input", "gradient", "output", None])
def test_the_preview_is_the_record_the_fit_leaves(perturbation):
    # every field of privacy_cost_, the preview's too: a fit without a guarantee ("output",
    # epsilon=inf however much noise it draws) accounts no query in either
    rng = np.random.default_rng(3)
    X = np.c_[rng.integers(0, 30, 2000), rng.integers(0, 20, 2000), rng.integers(0, 4, 2000)]
    y = rng.uniform(1, 5, 2000)
    est = PrivateTensorCompletion(perturbation=perturbation, rank=2, n_iter=3, shape=(30, 20, 4),
                                  epsilon=np.inf if perturbation is None else 2.0,
                                  value_range=(1, 5), random_state=0)
    preview = est.privacy_cost(len(y), 3)
    record = est.fit(X, y).privacy_cost_
    assert (preview.event, preview.epsilon, preview.delta) == (record.event, record.epsilon,
                                                               record.delta)
    assert preview.n_queries == record.n_queries
    assert preview.noise_multiplier == pytest.approx(record.noise_multiplier)
    assert preview.calibration == record.calibration
