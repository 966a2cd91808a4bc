"""A warning from a fit is shown at the user's line, not inside dptensor.

Each warning site used a fixed ``stacklevel``, which named a frame of dptensor's own (``_base.py``,
``latent/_base.py``...) because the depth of the library's calls differs from one estimator to
the next: the user saw a line of the library, and ``warnings.filterwarnings(module=...)`` on
their own module matched nothing.
"""
import warnings

import numpy as np
import pytest

from dptensor import (AdaptivePrivatePCA, PrivatePCA, PrivateTensorCompletion,
                      PrivateTensorDecomposition, StreamingTensorPower)
from dptensor.datasets import make_lda_corpus, make_low_rank_tensor
from dptensor.latent import PrivateGaussianMixture, PrivateLatentDirichletAllocation


def _rows():
    X = np.random.default_rng(0).standard_normal((200, 6))
    return X / np.linalg.norm(X, axis=1, keepdims=True)


def _fits():
    X = _rows()
    counts = make_lda_corpus(300, 20, 3, random_state=0)[0]
    study = make_low_rank_tensor((10, 10, 10), rank=2, missing_ratio=0.5, random_state=0)
    return {
        "pca below noise": lambda: PrivatePCA(3, epsilon=0.01, data_norm=1.0,
                                              random_state=0).fit(X),
        "pca not private": lambda: PrivatePCA(3, random_state=0).fit(X),
        "pca delta above 1/n": lambda: PrivatePCA(3, epsilon=1.0, delta=0.1, data_norm=1.0,
                                                  random_state=0).fit(X),
        "adaptive": lambda: AdaptivePrivatePCA(1, epsilon=0.01, data_norm=1.0,
                                               random_state=0).fit(X),
        "tensor": lambda: PrivateTensorDecomposition(2, epsilon=0.01, data_norm=1.0,
                                                     random_state=0).fit(X),
        "stream too short": lambda: StreamingTensorPower(
            2, batch_size=1000, epsilon=1.0, data_norm=1.0, random_state=0).fit(iter([X])),
        "mixture": lambda: PrivateGaussianMixture(2, epsilon=0.01, data_norm=1.0,
                                                  random_state=0).fit(X),
        "topics": lambda: PrivateLatentDirichletAllocation(3, epsilon=0.01,
                                                           random_state=0).fit(counts),
        "completion": lambda: PrivateTensorCompletion(
            rank=2, epsilon=0.1, value_range=(0, 1), random_state=0).fit(study["indices"],
                                                                         study["values"]),
    }


@pytest.mark.parametrize("case", list(_fits()))
def test_fit_warnings_point_at_the_callers_line(case):
    fit = _fits()[case]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        fit()
    assert caught, f"{case}: the fit was expected to warn"
    for w in caught:
        assert w.filename == __file__, (case, w.filename, str(w.message)[:80])


def test_a_fit_in_a_pipeline_or_a_cross_validation_warns_at_the_callers_line():
    # the first frame outside dptensor was scikit-learn's (pipeline.py), not the user's call
    from sklearn.model_selection import cross_validate
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import Normalizer

    X = _rows()
    pipe = make_pipeline(Normalizer(), PrivateTensorDecomposition(2, epsilon=0.01, data_norm=1.0,
                                                                  random_state=0))
    for run in (lambda: pipe.fit(X), lambda: cross_validate(pipe, X, cv=2)):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            run()
        ours = [w for w in caught if "below twice its noise level" in str(w.message)]
        assert ours and all(w.filename == __file__ for w in ours), [w.filename for w in ours]


def _caught(fit):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        fit()
    return caught


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
