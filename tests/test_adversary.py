"""Attacks on what dptensor releases, each kept as a regression test once fixed."""
import numpy as np
import pytest

from dptensor import PrivacyAccountant, PrivatePCA, PrivateTensorCompletion
from dptensor.model_selection import PrivateGridSearchCV


def _rows(n=400, d=4, seed=0):
    X = np.random.default_rng(seed).normal(size=(n, d))
    return X / np.maximum(1.0, np.linalg.norm(X, axis=1, keepdims=True))


@pytest.mark.parametrize("corrupt", ["nan", "inf", "text"])
def test_search_refused_for_its_data_spends_nothing(corrupt):
    # A private search used to record its whole cost, then fail in the first candidate's fit on
    # data that every candidate refuses: a refused search must leave the ledger unchanged.
    X = _rows()
    if corrupt == "text":
        X = X.astype(str)
    else:
        X[7, 1] = np.nan if corrupt == "nan" else np.inf
    acc = PrivacyAccountant(10.0)
    search = PrivateGridSearchCV(PrivatePCA(1, data_norm=1.0), {"n_components": [1, 2]}, epsilon=2.0,
                                 accountant=acc, random_state=0)
    with pytest.raises(ValueError):
        search.fit(X)
    assert acc.spent()[0] == 0.0 and len(acc.history()) == 0


@pytest.mark.parametrize("bad", ["negative_index", "nan_value"])
def test_completion_search_refused_for_its_data_spends_nothing(bad):
    rng = np.random.default_rng(1)
    X = np.stack([rng.integers(0, 8, 600), rng.integers(0, 8, 600), rng.integers(0, 8, 600)], axis=1)
    y = rng.uniform(1, 5, 600)
    if bad == "negative_index":
        X[3, 0] = -1
    else:
        y[3] = np.nan
    acc = PrivacyAccountant(10.0)
    search = PrivateGridSearchCV(PrivateTensorCompletion(value_range=(1, 5)), {"rank": [1, 2]},
                                 epsilon=2.0, accountant=acc, random_state=0)
    with pytest.raises(ValueError):
        search.fit(X, y)
    assert len(acc.history()) == 0
