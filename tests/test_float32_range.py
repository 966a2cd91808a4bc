"""Fits at the edge of float32's range and without noise: each case failed or warned after the
spend, or was refused though it fits (an adversarial review's; all fixed).

False refusals of the power method without privacy (its bound is now the rows' float64 sum of
squares); a private float32 stream's and a precomputed matrix's releases cast to float32; the
float32 score past data_norm 1.8e19; the implicit mode without noise (its weights' 1 / v^2
overflowed); singular_values_ from the float64 variances.
"""
import warnings

import numpy as np
import pytest

from dptensor import PrivacyAccountant, PrivatePCA, PrivateTensorCompletion
from expected_warnings import NON_PRIVATE, noise_dominated


@NON_PRIVATE
@pytest.mark.parametrize("case", ["spike", "loose_data_norm"])
def test_power_method_without_privacy_fits_float32_rows_whose_sums_are_small(case):
    rng = np.random.default_rng(0)
    if case == "spike":  # true sum of squares ~1e27, float32 holds 3.4e38
        X = rng.normal(size=(2000, 2000)).astype(np.float32)
        X[0, 0] = 3e13
        kw = {}
    else:  # rows of norm ~10 with a loose public bound: the refusal bounds with data_norm
        X, kw = rng.normal(size=(20000, 100)).astype(np.float32), dict(data_norm=1e16)
    a = PrivatePCA(2, method="analyze_gauss", random_state=0, **kw).fit(X)
    b = PrivatePCA(2, method="power", random_state=0, **kw).fit(X)  # was refused: ValueError
    np.testing.assert_allclose(b.explained_variance_, a.explained_variance_, rtol=1e-3)


@noise_dominated()
def test_private_float32_stream_never_warns_after_the_spend():
    rng = np.random.default_rng(0)
    X = ((rng.normal(size=(2000, 10)) + 3) * 1e19).astype(np.float32)
    est = PrivatePCA(2, epsilon=1.0, delta=1e-7, data_norm=1e20, centered=True, random_state=0)
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        for chunk in np.array_split(X, 3):
            est.partial_fit(chunk)  # was: RuntimeWarning: overflow encountered in cast


@noise_dominated()
def test_float32_score_at_a_large_data_norm_is_finite():
    rng = np.random.default_rng(0)
    Z = rng.normal(size=(4000, 10)) * 2e19
    est32 = PrivatePCA(2, data_norm=1e20, epsilon=1.0, delta=1e-8, random_state=0)
    est32.fit(Z.astype(np.float32))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        score = est32.score(Z.astype(np.float32))
    assert np.isfinite(score)  # nan: B**2 = 1e40 and P * P overflow float32


@NON_PRIVATE
def test_implicit_without_privacy_never_warns_after_the_spend():
    rng = np.random.default_rng(0)
    n = 12000
    X = np.column_stack([rng.integers(0, d, n) for d in (40, 30, 8)])
    y = rng.normal(size=n)
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        PrivateTensorCompletion(perturbation="implicit", rank=2, n_iter=3, factor_modes=(0, 1),
                                random_state=0).fit(X, y)  # divide by zero in _prior_variance


@noise_dominated()
def test_private_float32_precomputed_matrix_never_warns_after_the_spend():
    """entry_matrix_fit still runs the power method in float32 (b3c0041 moved the rows' fits)."""
    rng = np.random.default_rng(0)
    G = rng.normal(size=(50, 8))
    A = (G.T @ G / 50 * 1e36).astype(np.float32)
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        PrivatePCA(2, input="precomputed", epsilon=1.0, data_norm=1e37, method="power",
                   accountant=PrivacyAccountant(epsilon=np.inf, delta=1e-5),
                   random_state=0).fit(A)  # overflow encountered in cast (QR's R in float32)


@noise_dominated()
def test_float32_singular_values_stay_finite_when_the_variance_passes_float32():
    """_set_model takes the root of the float32-cast explained_variance_ (inf), not of the
    float64 one its comment promises: sqrt(ev (n - 1)) ~ 5e21 fits float32."""
    rng = np.random.default_rng(0)
    X = ((rng.normal(size=(2000, 10)) + 3) * 1e19).astype(np.float32)
    est = PrivatePCA(2, epsilon=1.0, delta=1e-7, data_norm=1e20, centered=True,
                     random_state=0).fit(X)
    assert not np.all(np.isfinite(est.explained_variance_))  # past float32: inf, as documented
    assert np.all(np.isfinite(est.singular_values_))
