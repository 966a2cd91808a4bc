"""scikit-learn's estimator checks for every estimator at its defaults, and for the searches.

Each estimator is checked as a user first meets it, constructed with no argument, and in one
private configuration (cheap settings where the defaults are slow); the private searches are
checked as scikit-learn checks its own searches. A check that cannot pass for a real reason is
listed with the reason by ``_expected_failures``.
"""
import warnings

import numpy as np
from sklearn.utils.estimator_checks import parametrize_with_checks

from dptensor import (AdaptivePrivatePCA, PrivacyWarning, PrivatePCA, PrivateTensorCompletion,
                      PrivateTensorDecomposition, StreamingTensorPower)
from dptensor.latent import PrivateGaussianMixture, PrivateLatentDirichletAllocation
from dptensor.model_selection import PrivateGridSearchCV, PrivateRandomizedSearchCV
from expected_warnings import COMPLETION_NOISE, noise_dominated

# scikit-learn's checks fit completions on a few values: their noise warnings are expected
pytestmark = COMPLETION_NOISE

_DEFAULTS = [PrivatePCA(), AdaptivePrivatePCA(), PrivateTensorDecomposition(),
             StreamingTensorPower(), PrivateTensorCompletion(), PrivateGaussianMixture(),
             PrivateLatentDirichletAllocation()]

_PRIVATE = [
    PrivatePCA(epsilon=1.0, data_norm=5.0, random_state=0),
    AdaptivePrivatePCA(epsilon=1.0, data_norm=5.0, random_state=0),
    PrivateTensorDecomposition(n_restarts=3, n_iter=5, epsilon=1.0, data_norm=5.0, random_state=0),
    StreamingTensorPower(n_restarts=2, n_iter=2, epsilon=1.0, data_norm=5.0, random_state=0),
    PrivateTensorCompletion(n_iter=5, epsilon=1.0, value_range=(-5.0, 5.0), random_state=0),
    PrivateGaussianMixture(2, n_restarts=3, n_iter=5, epsilon=1.0, data_norm=5.0, random_state=0),
    PrivateLatentDirichletAllocation(2, epsilon=1.0, random_state=0),
    PrivateLatentDirichletAllocation(2),  # the default's checks, on as many topics as words
]

# A large budget: the checks' data sets have 10 to 100 rows, and a search refuses to score on a
# validation part whose score noise would exceed MAX_SCORE_NOISE of one unit's score range.
_SEARCHES = [
    PrivateGridSearchCV(PrivatePCA(n_components=1, data_norm=5.0),
                        {"method": ["power", "analyze_gauss"]}, epsilon=200.0, random_state=0),
    PrivateRandomizedSearchCV(PrivatePCA(n_components=1, data_norm=5.0),
                              {"method": ["power", "analyze_gauss"]}, n_iter=2, epsilon=200.0,
                              random_state=0),
]

# The spectral LDA recovers k topics from a k-dimensional whitening of the word pairs, so it
# needs n_components <= n_features; the default (10 topics, as scikit-learn's) exceeds the 2 to 5
# words of these checks' data, which every fit below refuses with a message saying so.
_LDA_NEEDS_WORDS = "the checks' data has fewer words (n_features) than the default 10 topics"
_LDA_FITS = ("check_fit_score_takes_y", "check_estimators_overwrite_params",
             "check_estimators_fit_returns_self", "check_readonly_memmap_input",
             "check_n_features_in_after_fitting", "check_estimators_dtypes",
             "check_pipeline_consistency", "check_estimators_nan_inf", "check_estimator_sparse_tag",
             "check_estimator_sparse_array", "check_estimator_sparse_matrix",
             "check_estimators_pickle", "check_f_contiguous_array_estimator",
             "check_transformer_data_not_an_array", "check_transformer_general",
             "check_transformer_preserve_dtypes", "check_dict_unchanged", "check_fit_idempotent",
             "check_fit_check_is_fitted", "check_n_features_in")


def _expected_failures(estimator):
    name = type(estimator).__name__
    if name == "PrivateLatentDirichletAllocation":
        expected = dict.fromkeys(_LDA_FITS, _LDA_NEEDS_WORDS) if estimator.n_components > 2 else {}
        if not np.isfinite(estimator.epsilon):
            # one word, counted 0 or 1 per document: no document has the 3 words the third moment
            # needs, which a fit without privacy says (a private one releases noise)
            expected["check_fit2d_1feature"] = "no document of 3 words in the check's data"
        return expected
    if name == "StreamingTensorPower" and np.isfinite(estimator.epsilon):
        # the check calls partial_fit on the rows fit just used: a private stream closed by fit
        # refuses more rows, since a row may enter one block only
        return {"check_fit_score_takes_y": "a private stream closed by fit refuses a second pass"}
    return {}


@noise_dominated()  # the checks fit private estimators on their few rows
@parametrize_with_checks(_DEFAULTS + _PRIVATE + _SEARCHES,
                         expected_failed_checks=_expected_failures)
def test_sklearn_compatible(estimator, check):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", PrivacyWarning)
        check(estimator)
