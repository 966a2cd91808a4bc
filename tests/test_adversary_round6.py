"""Adversary review, round 6 (adv7): the private PCA pass before the spend, the Tucker sweep's
mask pass, the compiled symmetry check."""
import warnings

import numpy as np
import pytest
import sklearn

import dptensor as dpt
from dptensor import PrivacyAccountant
from dptensor.model_selection import PrivateGridSearchCV


def _rows_with_nan(seed=0):
    X = np.random.default_rng(seed).standard_normal((400, 6))
    X[3, 2] = np.nan
    return X


_ASSUME_FINITE = {
    "pca-analyze_gauss": lambda a: dpt.PrivatePCA(2, method="analyze_gauss", epsilon=1.0,
                                                  delta=1e-6, data_norm=3.0, accountant=a),
    "pca-power": lambda a: dpt.PrivatePCA(2, method="power", epsilon=1.0, delta=1e-6,
                                          data_norm=3.0, accountant=a),
    "adaptive": lambda a: dpt.AdaptivePrivatePCA(epsilon=1.0, delta=1e-6, data_norm=3.0,
                                                 accountant=a),
    "mixture": lambda a: dpt.PrivateGaussianMixture(2, epsilon=1.0, delta=1e-6, data_norm=3.0,
                                                    accountant=a),
    "search": lambda a: PrivateGridSearchCV(
        dpt.PrivatePCA(2, method="analyze_gauss", data_norm=3.0, delta=1e-6, accountant=a),
        {"n_components": [1, 2]}, epsilon=1.0),
}


@pytest.mark.parametrize("name", sorted(_ASSUME_FINITE))
def test_a_nan_is_refused_before_the_spend_under_assume_finite(name):
    """Under scikit-learn's ``assume_finite=True`` its check skips NaN: the private PCA's pass
    before the spend met the NaN, its refusal (scikit-learn's check) did not raise, and the fit
    spent, then raised AttributeError on the missing sums (a search over it too); the adaptive
    PCA and the mixture spent and raised on a NaN statistic. Every fit checks them itself."""
    accountant = PrivacyAccountant(epsilon=100.0, delta=1e-3)
    est = _ASSUME_FINITE[name](accountant)
    with warnings.catch_warnings(), sklearn.config_context(assume_finite=True):
        warnings.simplefilter("ignore")
        with pytest.raises(ValueError, match="contains NaN"):
            est.fit(_rows_with_nan())
    assert accountant.history() == []
    assert sklearn.get_config()["assume_finite"] is False
