"""Every warning the library gives points at the caller's line, not at the library's."""
import os
import warnings

import numpy as np
import pytest
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import Normalizer

import dptensor
from dptensor import PrivatePCA, PrivateTensorCompletion

pytestmark = pytest.mark.filterwarnings("ignore::dptensor.PrivacyWarning")
PACKAGE = os.path.dirname(os.path.abspath(dptensor.__file__)) + os.sep


def _caught(fit):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        fit()
    return caught


def test_noise_warnings_point_at_the_callers_line():
    X = np.random.default_rng(0).standard_normal((200, 8)) / 3
    caught = _caught(lambda: PrivatePCA(4, epsilon=0.1, data_norm=1.0, random_state=0).fit(X))
    assert [w for w in caught if "dominated by the privacy noise" in str(w.message)]
    assert {w.filename for w in caught} == {__file__}
    pipe = make_pipeline(Normalizer(), PrivatePCA(4, epsilon=0.1, data_norm=1.0, random_state=0))
    caught = _caught(lambda: pipe.fit(X))  # scikit-learn's line that called the fit
    assert caught and not any(w.filename.startswith(PACKAGE) for w in caught)


def test_a_stray_index_that_inflates_the_inferred_shape_is_reported():
    rng = np.random.default_rng(1)
    X = np.c_[rng.integers(0, 100, 2000), rng.integers(0, 40, 2000)]
    y = rng.random(2000)
    est = PrivateTensorCompletion(rank=1, n_iter=2)
    stray = X.copy()
    stray[7, 0] = 50_000
    caught = _caught(lambda: est.fit(stray, y))
    found = [w for w in caught if "stray index" in str(w.message)]
    assert len(found) == 1 and found[0].filename == __file__
    assert "(50001, 40)" in str(found[0].message) and "mode 0" in str(found[0].message)
    fitted = est.fit(X, y)  # a prediction for a new row far out is a cold start, not a stray
    assert not [w for w in _caught(lambda: fitted.predict(np.array([[90_000, 3]])))]
    for fit in (lambda: est.fit(X, y),  # every index held
                lambda: PrivateTensorCompletion(rank=1, n_iter=2, shape=(50_001, 40)).fit(stray, y)):
        assert not [w for w in _caught(fit) if "stray index" in str(w.message)]


@pytest.mark.parametrize("n_rows", [500, 1999, 6000])
def test_sparse_but_plausible_modes_are_not_reported(n_rows):
    # at most nine in ten indices empty, or fewer than STRAY_INDEX_ROWS: no warning
    rng = np.random.default_rng(2)
    X = np.c_[rng.integers(0, n_rows, 1000), rng.integers(0, 30, 1000)]
    caught = _caught(lambda: PrivateTensorCompletion(rank=1, n_iter=2).fit(X, rng.random(1000)))
    assert not [w for w in caught if "stray index" in str(w.message)]
