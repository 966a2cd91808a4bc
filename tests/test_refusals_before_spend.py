"""Bad input refused with an error that names it and says what to do, before any spend.

Each case was once taken, or refused only after the accountant had recorded the spend: a
randomized search's ``n_iter`` of the wrong type, a search's preview sizes truncated to ints, a
completion searched without ``y``, a value range or clipping norm so wide that the noise and the
released sums overflow float64, non-finite projections mapped back, a NaN target scored, a
history of text or complex values, a DataFrame's ``pd.NA``.
"""
import warnings

import numpy as np
import pytest

from dptensor import (AdaptivePrivatePCA, PrivacyAccountant, PrivatePCA, PrivateTensorCompletion,
                      PrivateTensorDecomposition, StreamingTensorPower)
from dptensor._validation import SCALE_RANGE, check_scale
from dptensor.model_selection import PrivateGridSearchCV, PrivateRandomizedSearchCV
from expected_warnings import NON_PRIVATE


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


# ---------------------------------------------------------------- after the fit
def _quietly(fit):
    """A fixture's fits on data small for their epsilon, on purpose (their refusals are under
    test): the released values below their noise level, and a delta not below 1/n, say so."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # PrivacyWarning is one
        return fit()


@pytest.fixture(scope="module")
def pcas():
    X = _rows(1, n=300)
    return _quietly(lambda: (
        PrivatePCA(2, data_norm=1.0, epsilon=5.0, random_state=0).fit(X),
        AdaptivePrivatePCA(2, data_norm=1.0, epsilon=5.0, random_state=0).fit(X)))


@pytest.mark.parametrize("which", [0, 1])
@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_inverse_transform_refuses_non_finite_projections(pcas, which, bad):
    Z = np.zeros((2, 2))
    Z[1, 0] = bad
    with pytest.raises(ValueError, match="NaN or infinity: inverse_transform maps finite"):
        pcas[which].inverse_transform(Z)


@pytest.mark.parametrize("which", [0, 1])
def test_inverse_transform_refuses_text_without_quoting_it(pcas, which):
    with pytest.raises((TypeError, ValueError)) as info:
        pcas[which].inverse_transform(np.array([["secret", "1.0"]]))
    assert "secret" not in str(info.value)


@pytest.mark.parametrize("which", [0, 1])
def test_inverse_transform_keeps_its_shape_check_and_float32(pcas, which):
    with pytest.raises(ValueError, match=r"shape \(n_samples, 2\)"):
        pcas[which].inverse_transform(np.zeros((2, 3)))
    est = pcas[which]
    Z = est.transform(_rows(2, n=5)).astype(np.float32)
    out = est.inverse_transform(Z)
    assert out.shape == (5, 4) and np.all(np.isfinite(out))


@pytest.fixture(scope="module")
def completions():
    X, y = _entries(3)
    value = _quietly(lambda: PrivateTensorCompletion(value_range=(0, 1), epsilon=2.0,
                                                     random_state=0).fit(X, y))
    user = _quietly(lambda: PrivateTensorCompletion(
        privacy_unit="user", value_range=(0, 1), shape=(20, 15), max_ratings_per_user=40,
        epsilon=2.0, random_state=0).fit(X, y))
    return X, y, value, user


@pytest.mark.parametrize("bad", [np.nan, np.inf])
def test_completion_score_refuses_a_non_finite_target(completions, bad):
    X, y, value, user = completions
    y = y[:5].copy()
    y[2] = bad
    with pytest.raises(ValueError, match="y contains NaN or infinity"):
        value.score(X[:5], y)
    with pytest.raises(ValueError, match="y contains NaN or infinity"):
        user.score(X[:5], y, history=(X[5:15], completions[1][5:15]))


def test_completion_score_refuses_text_without_quoting_it(completions):
    X, _, value, _ = completions
    with pytest.raises(TypeError, match="y must be real numbers") as info:
        value.score(X[:2], np.array(["secret", "0.5"]))
    assert "secret" not in str(info.value)


@pytest.mark.parametrize("values, error, match", [
    (np.array(["secret"] * 10), TypeError, "history's values must be real numbers"),
    (np.full(10, 0.5) + 1j, TypeError, "history's values must be real numbers"),
    (np.array([object()] * 10), TypeError, "history's values must be real numbers"),
    (np.full(9, 0.5), ValueError, "10 index tuples and 9 values"),
    (np.r_[np.nan, np.full(9, 0.5)], ValueError, "outside value_range .* NaN"),
])
def test_user_level_predict_refuses_a_bad_history(completions, values, error, match):
    X, _, _, user = completions
    with pytest.raises(error, match=match) as info:
        user.predict(X[:3], history=(X[:10], values))
    assert "secret" not in str(info.value)


# ---------------------------------------------------------------- scales that overflow
@pytest.mark.parametrize("value_range", [(0, 1e300), (-1e308, 1e308), (1e200, 1.00001e200),
                                         (0, 1e-300)])
def test_completion_refuses_a_value_range_whose_width_overflows_before_the_spend(value_range):
    X, y = _entries()
    budget = _budget()
    est = PrivateTensorCompletion(value_range=value_range, epsilon=1.0, accountant=budget,
                                  random_state=0)
    with pytest.raises(ValueError, match=r"value_range's width hi - lo must lie in"):
        est.fit(X, y)  # clipped into the range: the refusal comes first
    with pytest.raises(ValueError, match=r"value_range's width"):
        est.privacy_cost(len(y), 2)
    assert budget.history() == []


def test_completion_takes_the_widest_value_range_allowed():
    est = PrivateTensorCompletion(value_range=(0.0, SCALE_RANGE[1]), epsilon=1.0)
    assert est.privacy_cost(400, 2).private


@NON_PRIVATE
@pytest.mark.parametrize("params", [{}, {"decomposition": "tucker"}, {"fit_intercept": False},
                                    {"factor_modes": (0, 1)}])
def test_a_completion_without_value_range_refuses_values_its_squares_overflow_at(params):
    # Without value_range a fit scales by the data: at 1e300 its offsets_rms_ and score were inf,
    # with overflow warnings (the suite's errors), after its (non-private) spend was recorded
    X, y = _entries()
    budget = PrivacyAccountant()
    est = PrivateTensorCompletion(shape=(20, 15), accountant=budget, random_state=0, **params)
    for scale in (1e300, -1e300, 1e91):
        with pytest.raises(ValueError, match=r"y holds values beyond \+-1e\+90: without "
                                             r"value_range .* Rescale the values .* give value_"):
            est.fit(X, y * scale)
    assert budget.history() == []
    for scale in (SCALE_RANGE[1], -SCALE_RANGE[1]):  # the largest it takes fit, overflowing nowhere
        with warnings.catch_warnings():
            warnings.simplefilter("error", RuntimeWarning)
            est.fit(X, y * scale)
            assert np.isfinite(est.score(X, y * scale))
        assert np.all(np.isfinite(est.offsets_rms_)) and np.all(np.isfinite(est.component_rms_))
    est.set_params(value_range=(0.0, 1.0)).fit(X, y * 1e300)  # a range clips the values first
    assert np.all(np.isfinite(est.predict(X)))


@pytest.mark.parametrize("clip_norm", [1e300, 1e-300])
def test_completion_refuses_a_clip_norm_whose_noise_overflows_before_the_spend(clip_norm):
    X, y = _entries()
    budget = _budget()
    est = PrivateTensorCompletion(value_range=(0, 1), perturbation="gradient",
                                  clip_norm=clip_norm, epsilon=1.0, accountant=budget,
                                  random_state=0)
    with pytest.raises(ValueError, match="clip_norm must lie in"):
        est.fit(X, y)
    assert budget.history() == []


@pytest.mark.parametrize("make", [
    lambda b: PrivatePCA(1, data_norm=1e300, epsilon=1.0, accountant=b),
    lambda b: AdaptivePrivatePCA(1, data_norm=1e300, epsilon=1.0, accountant=b),
    lambda b: PrivateTensorDecomposition(1, data_norm=1e300, epsilon=1.0, accountant=b),
    lambda b: StreamingTensorPower(1, data_norm=1e300, epsilon=1.0, accountant=b),
])
def test_row_estimators_refuse_a_data_norm_whose_powers_overflow_before_the_spend(make):
    budget = _budget()
    with pytest.raises(ValueError, match="data_norm must lie in"):
        make(budget).fit(_rows())
    assert budget.history() == []


def test_one_scale_check_for_every_noise_scale():
    assert check_scale(SCALE_RANGE[1], "s") == SCALE_RANGE[1]
    for bad in (SCALE_RANGE[1] * 10, SCALE_RANGE[0] / 10, np.inf, np.nan):
        with pytest.raises(ValueError, match="s must lie in"):
            check_scale(bad, "s")


# ---------------------------------------------------------------- a DataFrame's missing values
@pytest.mark.parametrize("dtype", ["Float64", "object"])
def test_a_dataframe_with_pd_na_is_refused_in_words_before_the_spend(dtype):
    pd = pytest.importorskip("pandas")
    frame = pd.DataFrame(_rows()).astype(dtype)
    frame.iloc[3, 1] = pd.NA
    budget = _budget()
    est = PrivatePCA(1, data_norm=1.0, epsilon=1.0, accountant=budget)
    with pytest.raises(ValueError, match=r"missing value \(pd.NA, None or NaT\): drop the rows"):
        est.fit(frame)
    search = PrivateGridSearchCV(est, {"n_components": [1, 2]}, epsilon=1.0)
    with pytest.raises(ValueError, match=r"missing value"):
        search.fit(frame)
    assert budget.history() == []


def test_an_object_array_holding_none_is_refused_as_missing():
    X = _rows().astype(object)
    X[0, 0] = None
    with pytest.raises(ValueError, match="missing value"):
        PrivatePCA(1, data_norm=1.0, epsilon=1.0).fit(X)


def test_a_learning_rate_beyond_its_maximum_is_refused_before_the_spend():
    # at 1e90 the last factor's noise scale overflowed the exact sampler after the spend
    from dptensor.algorithms.completion.modes.solvers import MAX_LEARNING_RATE
    from dptensor.datasets import make_low_rank_tensor

    data = make_low_rank_tensor((8, 8, 8), 2, missing_ratio=0.5, random_state=0)
    acc = PrivacyAccountant(epsilon=10.0)
    for lr in (1e90, 10 * MAX_LEARNING_RATE):
        est = PrivateTensorCompletion(rank=2, epsilon=1.0, value_range=(-3, 4), accountant=acc,
                                      perturbation="gradient", learning_rate=lr, random_state=0)
        with pytest.raises(ValueError, match="learning_rate must be at most"):
            est.fit(data["indices"], data["values"])
    assert acc.history() == []
    est.set_params(learning_rate=MAX_LEARNING_RATE).fit(data["indices"], data["values"])
    assert len(acc.history()) == 1 and np.all(np.isfinite(est.factors_[0]))
