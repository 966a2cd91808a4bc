"""A 0-d NumPy array of a number is that number, for every real or integer parameter and the noise.

``epsilon`` and ``delta`` took ``np.array(1.0)`` (scikit-learn and NumPy reductions give such
values) as their float, while ``data_norm`` and every other real parameter refused it; and a
seeded fit keyed its noise by the parameter's description, so ``epsilon=np.array(1.0)`` drew
other noise than ``epsilon=1.0``. Integer parameters refused a 0-d array of an int. Each test
failed before the fix.
"""
from __future__ import annotations

import warnings

import numpy as np
import pytest

from dptensor import (AdaptivePrivatePCA, PrivateGaussianMixture, PrivateLatentDirichletAllocation,
                      PrivatePCA, PrivateTensorCompletion, PrivateTensorDecomposition,
                      StreamingTensorPower)
from dptensor._validation import check_data_norm, check_nonnegative_real, check_positive_real
from dptensor.datasets import make_low_rank_tensor
from dptensor.mechanisms.randomness import _describe, fingerprint
from expected_warnings import COMPLETION_NOISE, noise_dominated

pytestmark = [*COMPLETION_NOISE, noise_dominated()]


def _rows(n=400, d=4, seed=0):
    X = np.random.default_rng(seed).standard_normal((n, d)) * np.r_[1.0, 0.5, 0.3, 0.2][:d]
    return 0.9 * X / np.maximum(1.0, np.linalg.norm(X, axis=1, keepdims=True))


def _counts(n=300, d=12, seed=3):
    rng = np.random.default_rng(seed)
    return rng.poisson(1.0, (n, d)).astype(float) + np.eye(n, d) * 3 + 3 * (np.arange(d) == 0)


def _entries():
    data = make_low_rank_tensor((8, 8, 8), 2, missing_ratio=0.5, random_state=0)
    return data["indices"], data["values"]


# (estimator, data, the real parameters given as numbers: each is then given as a 0-d array)
CASES = {
    "PrivatePCA": (lambda **p: PrivatePCA(2, random_state=0, **p), _rows,
                   {"epsilon": 1.0, "delta": 1e-6, "data_norm": 1.0}),
    "AdaptivePrivatePCA": (lambda **p: AdaptivePrivatePCA(2, random_state=0, **p), _rows,
                           {"epsilon": 1.0, "delta": 1e-6, "data_norm": 1.0, "beta": 0.05,
                            "svt_fraction": 0.1}),
    "StreamingTensorPower": (lambda **p: StreamingTensorPower(1, batch_size=100, n_iter=2,
                                                              random_state=0, **p), _rows,
                             {"epsilon": 1.0, "delta": 1e-6, "data_norm": 1.0}),
    "PrivateGaussianMixture": (lambda **p: PrivateGaussianMixture(2, random_state=0, **p), _rows,
                               {"epsilon": 1.0, "delta": 1e-6, "data_norm": 1.0,
                                "whitened_clip": 2.0}),
    "PrivateLatentDirichletAllocation": (
        lambda **p: PrivateLatentDirichletAllocation(2, n_restarts=2, n_iter=2, random_state=0,
                                                     **p), _counts,
        {"epsilon": 1.0, "delta": 1e-6, "alpha0": 1.0, "topic_threshold": 2.0, "doc_clip": 0.5}),
    "PrivateTensorCompletion": (
        lambda **p: PrivateTensorCompletion(2, value_range=(-1.0, 2.0), n_iter=3,
                                            random_state=0, **p), _entries,
        {"epsilon": 1.0, "delta": 1e-6, "offset_share": 0.3, "tol": 1e-8, "reg_core": 0.1}),
}


def _released(est):
    return {k: v for k, v in vars(est).items() if k.endswith("_") and not k.startswith("_")
            and isinstance(v, np.ndarray)}


@pytest.mark.parametrize("name", list(CASES))
def test_a_real_parameter_as_a_0d_array_or_a_numpy_float_releases_what_the_float_does(name):
    make, data, params = CASES[name]
    args = data() if name == "PrivateTensorCompletion" else (data(),)
    reference = _released(make(**params).fit(*args))
    assert reference
    for key in params:
        for kind in (np.array, np.float64):
            est = make(**{**params, key: kind(params[key])}).fit(*args)
            got = _released(est)
            assert got.keys() == reference.keys(), key
            for attr, value in reference.items():
                np.testing.assert_array_equal(got[attr], value, err_msg=f"{key}: {attr}")


def test_the_checks_read_a_0d_array_as_its_float_and_refuse_the_rest_as_before():
    from dptensor.datasets import _check_positive
    from dptensor.preprocessing import _check_nonnegative

    for check in (lambda v: check_data_norm(v, 1.0), lambda v: check_positive_real(v, "x", 1.0),
                  lambda v: check_nonnegative_real(v, "x"), lambda v: _check_positive(v, "x"),
                  lambda v: _check_nonnegative(v, "x")):
        for value in (np.array(2.0), np.array(2), np.array(2.0, dtype=np.float32)):
            with warnings.catch_warnings():
                warnings.simplefilter("error")  # a float32 data_norm warned of an overflow
                got = check(value)
            assert type(got) is float and got == 2.0
        for bad in (np.array([2.0]), np.array(True), np.array(2.0 + 0j), np.array("2"),
                    np.array(np.nan), np.array(np.inf), True):
            with pytest.raises(ValueError):
                check(bad)


def test_a_0d_array_is_described_as_its_number_and_a_float_as_before():
    assert _describe(np.array(1.0)) == _describe(np.float64(1.0)) == _describe(1.0) == "1.0"
    assert _describe(np.array(3)) == _describe(3) == "3"
    assert _describe(np.array([1.0])) != _describe(1.0)  # a 1-element array is no number
    assert _describe(np.array(True)) != _describe(True)
    assert fingerprint("PrivatePCA", {"epsilon": np.array(0.5)}) == \
        fingerprint("PrivatePCA", {"epsilon": 0.5})
    # a plain float's key, pinned: the noise every seeded test expects is unchanged
    assert fingerprint("PrivatePCA", {"epsilon": 0.5}, (3, 2)) == (
        884292166, 3547555260, 1830210142, 4122503769)


def test_a_search_over_0d_arrays_draws_the_noise_of_their_floats():
    from dptensor.model_selection import PrivateGridSearchCV

    X = _rows(2000)
    fits = []
    for number in (float, np.array):
        search = PrivateGridSearchCV(PrivatePCA(1, data_norm=number(1.0)),
                                     {"n_components": [1, 2]}, epsilon=number(2.0), delta=1e-6,
                                     validation_fraction=number(0.3), n_runs=number(2.0),
                                     random_state=0)
        fits.append(search.fit(X))
    a, b = fits
    assert a.best_params_ == b.best_params_
    np.testing.assert_array_equal(a.best_estimator_.components_, b.best_estimator_.components_)


# (estimator, data, the integer parameters given as ints: each is then given as a 0-d array)
INTEGER_CASES = {
    "PrivatePCA": (lambda **p: PrivatePCA(epsilon=1.0, data_norm=1.0, random_state=0, **p),
                   _rows, {"n_components": 2, "n_iter": 3, "n_oversamples": 2, "verbose": 0}),
    "AdaptivePrivatePCA": (
        lambda **p: AdaptivePrivatePCA(epsilon=1.0, data_norm=1.0, random_state=0, **p), _rows,
        {"n_components": 2, "n_iter": 3}),
    "StreamingTensorPower": (
        lambda **p: StreamingTensorPower(epsilon=1.0, data_norm=1.0, random_state=0, **p), _rows,
        {"n_components": 1, "batch_size": 100, "n_iter": 2, "n_restarts": 2, "max_passes": 1}),
    "PrivateTensorDecomposition": (
        lambda **p: PrivateTensorDecomposition(epsilon=1.0, data_norm=1.0, random_state=0, **p),
        _rows, {"n_components": 2, "n_iter": 3, "n_restarts": 2}),
    "PrivateGaussianMixture": (
        lambda **p: PrivateGaussianMixture(epsilon=1.0, data_norm=1.0, random_state=0, **p),
        _rows, {"n_components": 2, "n_iter": 3, "n_restarts": 2}),
    "PrivateLatentDirichletAllocation": (
        lambda **p: PrivateLatentDirichletAllocation(epsilon=1.0, random_state=0, **p), _counts,
        {"n_components": 2, "n_iter": 2, "n_restarts": 2, "max_transform_iter": 5}),
    "PrivateTensorCompletion": (
        lambda **p: PrivateTensorCompletion(value_range=(-1.0, 2.0), epsilon=1.0,
                                            random_state=0, **p), _entries,
        {"rank": 2, "n_iter": 3}),
}


@pytest.mark.parametrize("name", list(INTEGER_CASES))
def test_an_integer_parameter_as_a_0d_array_releases_what_the_int_does(name):
    """Integer parameters refused ``np.array(2)``, which real ones read as their number."""
    make, data, params = INTEGER_CASES[name]
    args = data() if name == "PrivateTensorCompletion" else (data(),)
    reference = _released(make(**params).fit(*args))
    assert reference
    for key in params:
        got = _released(make(**{**params, key: np.array(params[key])}).fit(*args))
        assert got.keys() == reference.keys(), key
        for attr, value in reference.items():
            np.testing.assert_array_equal(got[attr], value, err_msg=f"{key}: {attr}")


def test_a_0d_integer_array_is_an_int_and_a_0d_float_array_is_refused_as_a_float():
    from dptensor import PrivacyAccountant
    from dptensor._validation import check_positive_int, check_verbose
    from dptensor.model_selection._candidates import check_n_iter

    for check in (lambda v: check_positive_int(v, "n"), check_verbose, check_n_iter):
        for value in (np.array(2), np.array(2, dtype=np.uint8), np.int32(2)):
            got = check(value)
            assert type(got) is int and got == 2
        for bad in (2.0, np.array(2.0), np.array(True), np.array([2]), True):
            with pytest.raises(TypeError):
                check(bad)
    accountant = PrivacyAccountant(10.0)
    for bad in (2.0, np.array(2.0)):  # before any spend, in the same words as a float
        with pytest.raises(TypeError, match="n_components must be an integer"):
            PrivatePCA(bad, epsilon=1.0, data_norm=1.0, accountant=accountant).fit(_rows())
    assert not accountant.history()
    mixture = PrivateGaussianMixture(2, epsilon=1.0, data_norm=1.0, random_state=0).fit(_rows())
    for a, b in zip(mixture.sample(np.array(3)), mixture.sample(3)):
        np.testing.assert_array_equal(a, b)


def test_the_integer_parameters_read_by_value_take_a_0d_array_as_their_int():
    """Two integer parameters are read by value before their check: a user-level completion's
    ``rank=0`` (offsets only) and LDA's ``whitening=m`` (m words). ``np.array(0)`` was refused
    as a rank < 1 and ``np.array(6)`` as no whitening; ``rank=False`` was taken as 0."""
    X, y = _ratings()
    shape = (30, 12)
    kwargs = dict(value_range=(1.0, 5.0), privacy_unit="user", shape=shape, epsilon=2.0,
                  delta=1e-6, random_state=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        reference = _released(PrivateTensorCompletion(rank=0, **kwargs).fit(X, y))
        for rank in (np.array(0), np.int64(0)):
            got = _released(PrivateTensorCompletion(rank=rank, **kwargs).fit(X, y))
            for attr, value in reference.items():
                np.testing.assert_array_equal(got[attr], value, err_msg=attr)
    with pytest.raises(TypeError, match="rank must be an integer"):
        PrivateTensorCompletion(rank=False, **kwargs).fit(X, y)
    counts = _counts()
    make = lambda w: PrivateLatentDirichletAllocation(  # noqa: E731
        2, whitening=w, n_restarts=2, n_iter=2, epsilon=1.0, random_state=0)
    reference = _released(make(6).fit(counts))
    got = _released(make(np.array(6)).fit(counts))
    for attr, value in reference.items():
        np.testing.assert_array_equal(got[attr], value, err_msg=attr)
    with pytest.raises(ValueError, match="whitening=13 words"):
        make(np.array(13)).fit(counts)


def _ratings(n_users=30, n_items=12, per_user=6, seed=0):
    rng = np.random.default_rng(seed)
    X = np.column_stack([np.repeat(np.arange(n_users), per_user),
                         rng.integers(0, n_items, n_users * per_user)])
    return X, rng.integers(1, 6, len(X)).astype(float)
