"""What a scikit-learn user reaches for first gets an answer in dptensor's words: sample_weight,
a NaN in X, and a pure-DP (delta=0) budget."""
import warnings

import numpy as np
import pytest

from dptensor import (AdaptivePrivatePCA, BudgetExceededError, PrivacyAccountant, PrivacyWarning,
                      PrivatePCA, PrivateTensorCompletion, PrivateTensorDecomposition,
                      StreamingTensorPower)
from dptensor.latent import PrivateGaussianMixture, PrivateLatentDirichletAllocation
from dptensor.model_selection import PrivateGridSearchCV
from expected_warnings import completion_noise


def _estimators():
    return [PrivatePCA(1, epsilon=1.0, data_norm=1.0),
            AdaptivePrivatePCA(1, epsilon=1.0, data_norm=1.0),
            PrivateTensorDecomposition(1, epsilon=1.0, data_norm=1.0),
            StreamingTensorPower(1, epsilon=1.0, data_norm=1.0),
            PrivateTensorCompletion(epsilon=1.0, value_range=(0.0, 1.0)),
            PrivateGaussianMixture(2, epsilon=1.0, data_norm=1.0),
            PrivateLatentDirichletAllocation(2, epsilon=1.0),
            PrivateGridSearchCV(PrivatePCA(1, data_norm=1.0), {"method": ["power"]}, epsilon=1.0)]


@pytest.mark.parametrize("est", _estimators(), ids=lambda e: type(e).__name__)
def test_sample_weight_refused_in_words_before_any_spend(est):
    budget = PrivacyAccountant(10.0)
    est.set_params(accountant=budget)
    X = np.ones((50, 3))
    y = np.zeros(50) if isinstance(est, PrivateTensorCompletion) else None
    methods = [m for m in ("fit", "partial_fit", "fit_transform") if hasattr(est, m)]
    for method in methods:
        with pytest.raises(TypeError) as err:
            getattr(est, method)(X.astype(int), y, sample_weight=np.ones(50))
        message = str(err.value)
        # (fit_transform may pass it on to fit, which refuses it)
        assert message.startswith((f"{type(est).__name__}.{method} ",
                                   f"{type(est).__name__}.fit ")), message
        assert "takes no sample_weight" in message, message
        assert "privacy guarantee" in message and "unexpected keyword" not in message
    assert budget.history() == []


def test_sample_weight_kept_out_of_the_signature():
    # scikit-learn decides from fit's signature whether an estimator takes weights: it must
    # still say no, or its checks would pass weights and expect them used
    from sklearn.utils.validation import has_fit_parameter

    for est in _estimators():
        assert not has_fit_parameter(est, "sample_weight"), type(est).__name__


@pytest.mark.parametrize("est", _estimators()[:4] + _estimators()[5:6],
                         ids=lambda e: type(e).__name__)
def test_nan_message_is_dptensor_advice(est):
    X = np.ones((50, 3))
    X[3, 1] = np.nan
    est.set_params(epsilon=np.inf)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", PrivacyWarning)
        with pytest.raises(ValueError) as err:
            est.fit(X)
    message = str(err.value)
    assert message.startswith("Input X contains NaN."), message
    assert "HistGradientBoosting" not in message and "supervised" not in message
    assert f"{type(est).__name__} does not accept missing values" in message
    assert "public knowledge" in message


@completion_noise  # the served pure-DP fit is on four positions: its offsets are noise
def test_zero_delta_budget_says_what_it_serves():
    X = np.random.default_rng(0).standard_normal((500, 4))
    budget = PrivacyAccountant(1.0, delta=0)
    # an estimator taking the accountant's delta: refused before any spend, naming the cause
    with pytest.raises(ValueError, match="the accountant's delta: it is 0.*perturbation='input'"):
        PrivatePCA(2, epsilon=0.5, data_norm=3.0, accountant=budget).fit(X)
    # an estimator with a delta of its own: the budget (at delta=0) refuses it, saying why
    with pytest.raises(BudgetExceededError, match="this accountant's delta is 0 \\(pure DP\\)"):
        PrivatePCA(2, epsilon=0.5, delta=1e-5, data_norm=3.0, accountant=budget).fit(X)
    assert budget.history() == []
    # a pure (Laplace) mechanism is served
    idx = np.array([[0, 0], [1, 1], [0, 1], [1, 0]] * 40)
    PrivateTensorCompletion(perturbation="input", epsilon=0.5, value_range=(0, 1),
                            accountant=budget, random_state=0).fit(idx, np.full(len(idx), 0.5))
    assert budget.spent() == (pytest.approx(0.5), 0.0)


def test_estimator_count_agrees(capsys):
    import pathlib

    import dptensor
    from dptensor.__main__ import main

    root = pathlib.Path(__file__).resolve().parent.parent
    assert len(dptensor._ESTIMATORS) == 7
    assert "seven estimators" in (root / "README.md").read_text()
    assert "seven estimators" in (root / "dptensor" / "demo.py").read_text()
    with pytest.raises(SystemExit):
        main(["--help"])
    assert "the seven estimators" in capsys.readouterr().out
