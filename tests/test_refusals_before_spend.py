"""Bad input refused with an error that names it and says what to do, before any spend.

Each case was once taken, or refused only after the accountant had recorded the spend: a
randomized search's ``n_iter`` of the wrong type, a search's preview sizes truncated to ints, a
completion searched without ``y``, a value range or clipping norm so wide that the noise and the
released sums overflow float64, non-finite projections mapped back, a NaN target scored, a
history of text or complex values, a DataFrame's ``pd.NA``.
"""

import numpy as np
import pytest

from dptensor import (PrivacyAccountant, PrivatePCA, PrivateTensorCompletion)
from dptensor.model_selection import PrivateGridSearchCV, PrivateRandomizedSearchCV


def _rows(seed=0, n=200, d=4):
    X = np.random.default_rng(seed).standard_normal((n, d))
    return X / np.linalg.norm(X, axis=1, keepdims=True)


def _entries(seed=0, n=400, shape=(20, 15)):
    rng = np.random.default_rng(seed)
    X = np.stack([rng.integers(0, s, n) for s in shape], axis=1)
    return X, rng.uniform(size=n)


def _budget():
    return PrivacyAccountant(epsilon=50.0, delta=1e-5)


# ---------------------------------------------------------------- the searches' counts
@pytest.mark.parametrize("n_iter, error", [(-1, ValueError), (0, ValueError), (1.5, TypeError),
                                           (True, TypeError), ("3", TypeError),
                                           (np.float64(2.0), TypeError), (None, TypeError)])
def test_randomized_search_refuses_an_n_iter_that_is_no_count_before_the_spend(n_iter, error):
    budget = _budget()
    search = PrivateRandomizedSearchCV(PrivatePCA(1, data_norm=1.0), {"n_components": [1, 2]},
                                       n_iter=n_iter, epsilon=1.0, accountant=budget,
                                       random_state=0)
    with pytest.raises(error, match="n_iter"):
        search.fit(_rows())
    with pytest.raises(error, match="n_iter"):
        search.privacy_cost(200, 4)
    assert budget.history() == []


def test_randomized_search_takes_a_numpy_integer_n_iter():
    search = PrivateRandomizedSearchCV(PrivatePCA(1, data_norm=1.0), {"n_components": [1, 2]},
                                       n_iter=np.int64(2), epsilon=1.0, random_state=0)
    assert search.privacy_cost(2000, 4).private


@pytest.mark.parametrize("sizes, error, name", [
    ((1.5, 4), TypeError, "n_samples"), ((True, 4), TypeError, "n_samples"),
    ((2000, 4.0), TypeError, "n_features"), ((2000, False), TypeError, "n_features"),
    (("2000", 4), TypeError, "n_samples"), ((0, 4), ValueError, "n_samples"),
    ((2000, 0), ValueError, "n_features")])
def test_search_preview_refuses_sizes_that_are_no_counts(sizes, error, name):
    search = PrivateGridSearchCV(PrivatePCA(1, data_norm=1.0), {"n_components": [1, 2]},
                                 epsilon=1.0)
    with pytest.raises(error, match=name):
        search.privacy_cost(*sizes)


def test_search_preview_takes_numpy_integers():
    search = PrivateGridSearchCV(PrivatePCA(1, data_norm=1.0), {"n_components": [1, 2]},
                                 epsilon=1.0)
    assert search.privacy_cost(np.int64(2000), np.int32(4)) == search.privacy_cost(2000, 4)


# ---------------------------------------------------------------- a search without its target
@pytest.mark.parametrize("unit", ["value", "user"])
def test_search_of_a_completion_without_y_is_refused_before_the_spend(unit):
    X, _ = _entries()
    est = PrivateTensorCompletion(value_range=(0, 1), privacy_unit=unit,
                                  shape=(20, 15) if unit == "user" else None)
    budget = _budget()
    search = PrivateGridSearchCV(est, {"rank": [1]}, epsilon=1.0, accountant=budget)
    with pytest.raises(ValueError, match=r"needs y .* pass search.fit\(X, y\)"):
        search.fit(X)
    assert budget.history() == []
