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


@pytest.mark.parametrize("fallback", [0, 1])
@pytest.mark.parametrize("rank", [1, 2, 4])
def test_the_compiled_core_takes_biases_a_numpy_solve_left(fallback, rank):
    """A mode solved by NumPy's path (as ``als`` does after the compiled LU met an exact zero
    pivot) holds its biases as a column of the solutions, a strided view; modes solved by the
    compiled loops hold contiguous ones. The compiled core, given the three in one tuple of two
    layouts, raised numba's TypingError (the fit failed, after the spend for a private mode that
    runs ALS); it gives the NumPy core's numbers."""
    import copy

    pytest.importorskip("numba")
    from test_completion_tucker import _numpy_update, _sweep_setup

    sweep, model = _sweep_setup(np.random.default_rng(30 + rank), rank=rank)
    ref_sweep, ref = copy.deepcopy(sweep), copy.deepcopy(model)
    for m in range(3):
        if m == fallback:
            _numpy_update(sweep, model, m, 0.01, False)
        else:
            assert sweep.solve(model, m, 0.01, True, False) == 0.0
        _numpy_update(ref_sweep, ref, m, 0.01, False)
    assert not model.biases[fallback].flags.c_contiguous  # the layout that broke the core
    ssr = sweep.core_step(model, 0.01)
    assert sweep._raw_core is None  # the compiled core ran
    ref_ssr = ref_sweep.core_step(ref, 0.01)
    np.testing.assert_allclose(model.core, ref.core, rtol=1e-9, atol=1e-10)
    assert ssr == pytest.approx(ref_ssr, rel=1e-9)
