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


def test_searches_over_differently_configured_estimators_do_not_share_noise(monkeypatch):
    # Without an accountant, a spend's noise is keyed by the seed and the fit's public description.
    # The search's estimator used to be described by its class name only: two searches with one
    # seed over PrivatePCA(n_iter=3) and PrivatePCA(n_iter=30) drew the same split, number of runs
    # and score noise, so the difference of their released scores carried no noise at all.
    from dptensor.model_selection import _search

    states, run = [], _search._PrivateSearch._run

    def spy(self, X, y, plan, overrides, rng):
        states.append(rng.bit_generator.state["state"]["state"])
        return run(self, X, y, plan, overrides, rng)

    monkeypatch.setattr(_search._PrivateSearch, "_run", spy)
    X = _rows(n=500)
    for n_iter in (3, 30, 3):
        PrivateGridSearchCV(PrivatePCA(1, data_norm=1.0, method="power", n_iter=n_iter),
                            {"n_components": [1, 2]}, epsilon=2.0, random_state=0).fit(X)
    assert states[0] != states[1]
    assert states[0] == states[2]  # the same search with the same seed still reproduces


def test_randomized_search_distributions_are_part_of_the_description():
    from scipy.stats import uniform

    from dptensor._randomness import fingerprint

    assert fingerprint({"a": uniform(0, 1)}) != fingerprint({"a": uniform(0, 2)})
    assert fingerprint({"a": uniform(0, 1)}) == fingerprint({"a": uniform(0, 1)})


def test_search_refuses_a_function_transformer_that_may_mix_rows():
    """Before: a stateless FunctionTransformer that centres the columns (mixing rows) was accepted,
    so training rows and validation scores lost the per-row bounds the guarantee rests on."""
    import numpy as np
    import pytest
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import FunctionTransformer

    from dptensor import PrivacyAccountant, PrivatePCA
    from dptensor.model_selection import PrivateGridSearchCV

    acc = PrivacyAccountant(5.0)
    pipe = make_pipeline(FunctionTransformer(lambda Z: Z - Z.mean(0)), PrivatePCA(data_norm=1.0))
    search = PrivateGridSearchCV(pipe, {"privatepca__n_components": [1, 2]}, epsilon=1.0, accountant=acc,
                                 random_state=0)
    with pytest.raises(TypeError, match="FunctionTransformer"):
        search.fit(np.random.default_rng(0).normal(size=(200, 4)))
    assert acc.history() == []
