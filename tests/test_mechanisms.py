"""Goodness-of-fit of every sampler against its target distribution, and AboveThreshold's behaviour."""
import itertools
import warnings

import numpy as np
import pytest
from scipy import integrate, stats

from dptensor import PrivatePCA
from dptensor.mechanisms import (GRID_BITS, above_threshold, clip_rows, gaussian_release,
                                 joint_gaussian_release, laplace_release, symmetric_gaussian_release)
from dptensor.algorithms.power import center_and_clip
from expected_warnings import noise_dominated

# A private fit on a small fixture, for its accounting, plumbing or what it keeps (not its
# accuracy): at that size its weaker components are noise, as the fit says.
_SMALL_PRIVATE = noise_dominated()


P_MIN = 1e-3  # seeded draws: a fixed p-value; below this the sampler is wrong, not unlucky


# ---------------------------------------------------------------- Gaussian
# The releases of a zero value are the noise itself (the grid is far finer than the scale).
def test_gaussian_release_noise_fits_its_normal(rng):
    x = gaussian_release(np.zeros(20_000), sensitivity=0.3, noise_multiplier=2.0, rng=rng)
    assert x.shape == (20_000,) and x.dtype == np.float64
    assert stats.kstest(x, stats.norm(scale=0.6).cdf).pvalue > P_MIN
    # The test has power: a 10% wrong scale is rejected.
    assert stats.kstest(x, stats.norm(scale=0.66).cdf).pvalue < 1e-6


def test_gaussian_release_per_column_sensitivity(rng):
    sens = np.array([0.1, 1.0, 2.0, 5.0])
    x = gaussian_release(np.zeros((5000, 4)), sens, 1.5, rng, dtype=np.float32)
    assert x.shape == (5000, 4) and x.dtype == np.float32
    for j, s in enumerate(sens):
        assert stats.kstest(x[:, j], stats.norm(scale=1.5 * s).cdf).pvalue > P_MIN
    # Columns are independent.
    corr = np.corrcoef(x.T.astype(float))
    assert np.max(np.abs(corr - np.eye(4))) < 0.05


def test_gaussian_release_rejects_negative_scales(rng):
    with pytest.raises(ValueError, match="sensitivity"):
        gaussian_release(np.zeros(3), -1.0, 1.0, rng)


def test_joint_release_is_one_release_of_all_parts(rng, monkeypatch):
    """Parts keep their shapes and get the law of one release whose grid allowance counts ALL
    coordinates: one call of the sampler, at ``(1 + z sqrt(N) 2**-30)`` times the scale, N the total."""
    import dptensor.mechanisms.releases as mech
    a, b = np.full((300, 4), 5.0), np.full(7, -2.0)
    out_a, out_b = joint_gaussian_release((a, b), 0.5, 2.0, rng)
    assert out_a.shape == a.shape and out_b.shape == b.shape
    assert stats.kstest((out_a - a).ravel(), stats.norm(scale=1.0).cdf).pvalue > P_MIN
    calls = []
    real = mech.rounded_gaussian

    def recording(S, rng, size=None):
        calls.append((float(np.max(S)), size))
        return real(S, rng, size=size)
    monkeypatch.setattr(mech, "rounded_gaussian", recording)
    joint_gaussian_release((a, b), 0.5, 2.0, rng)
    ((S, size),) = calls
    gamma = mech.grid_step(1.0)
    assert size == (a.size + b.size,)
    assert S * gamma >= 1.0 * (1 + 2.0 * np.sqrt(a.size + b.size) * 2.0**-GRID_BITS)


# ---------------------------------------------------------------- Laplace
def test_laplace_release_noise_fits_its_laplace(rng):
    x = laplace_release(np.zeros(20_000), sensitivity=2.0, epsilon=0.5, rng=rng)
    assert stats.kstest(x, stats.laplace(scale=4.0).cdf).pvalue > P_MIN
    # power: a 15% wrong scale is rejected (at 10% the KS p-value of 20 000 draws passes 1e-6 for
    # about one seed in six, even for NumPy's continuous Laplace)
    assert stats.kstest(x, stats.laplace(scale=4.6).cdf).pvalue < 1e-6
    assert laplace_release(np.zeros((3, 2)), 1.0, 1.0, rng, dtype=np.float32).dtype == np.float32
    with pytest.raises(ValueError, match="epsilon"):
        laplace_release(np.zeros(3), 1.0, 0.0, rng)


# ---------------------------------------------------------------- symmetric Gaussian tensor
def _multiplicity(i, j, k):
    return len(set(itertools.permutations((i, j, k))))


def test_symmetric_gaussian_tensor_release_is_symmetric_with_iid_distinct_entries(rng):
    d, sens, z = 9, 0.5, 3.0
    sigma = sens * z
    draws = np.stack([symmetric_gaussian_release(np.zeros((d, d, d)), sens, z, rng) for _ in range(40)])
    E = draws[0]
    assert E.shape == (d, d, d) and E.dtype == np.float64
    for axes in itertools.permutations(range(3)):
        np.testing.assert_array_equal(E, E.transpose(axes))
    idx = [(i, j, k) for i in range(d) for j in range(i, d) for k in range(j, d)]
    a, b, c = np.array(idx).T
    distinct = draws[:, a, b, c]  # (draws, number of distinct entries)
    # Every distinct entry, whatever its multiplicity (i=j=k, two equal, all different), is N(0, sigma^2).
    mult = np.array([_multiplicity(*t) for t in idx])
    for m in (1, 3, 6):
        values = distinct[:, mult == m].ravel()
        assert stats.kstest(values, stats.norm(scale=sigma).cdf).pvalue > P_MIN, m
    # ... and independent: no correlation between distinct entries across draws beyond chance.
    corr = np.corrcoef(distinct[:, :30].T)
    off = corr[~np.eye(30, dtype=bool)]
    assert np.sqrt(np.mean(off**2)) < 2.5 / np.sqrt(40)


def test_symmetric_gaussian_tensor_release_float32(rng):
    E = symmetric_gaussian_release(np.zeros((4, 4, 4), dtype=np.float32), 1.0, 1.0, rng)
    assert E.dtype == np.float32
    np.testing.assert_array_equal(E, E.transpose(2, 0, 1))


@pytest.mark.parametrize("order", [2, 3])
def test_frobenius_symmetric_release_is_one_release_of_an_isometric_query(rng, monkeypatch, order):
    """``frobenius=True``: the query handed to the Gaussian release is each distinct entry times
    sqrt(its number of positions), whose l2 norm is the Frobenius norm of the whole array (so a
    Frobenius sensitivity is that query's l2 sensitivity); each distinct entry then carries noise
    of std z s / sqrt(m), and the result is exactly symmetric."""
    import dptensor.mechanisms.releases as mech
    d, sens, z = 7, 0.5, 3.0
    A = rng.standard_normal((d,) * order)
    A = sum(A.transpose(p) for p in itertools.permutations(range(order)))  # symmetric
    queries = []
    original = mech.gaussian_release
    monkeypatch.setattr(mech, "gaussian_release",
                        lambda q, *a, **k: queries.append(q) or original(q, *a, **k))
    mech.symmetric_gaussian_release(A, sens, z, rng, frobenius=True)
    assert np.linalg.norm(queries[0]) == pytest.approx(np.linalg.norm(A))
    monkeypatch.undo()
    draws = np.stack([symmetric_gaussian_release(np.zeros((d,) * order), sens, z, rng, frobenius=True)
                      for _ in range(60)])
    for axes in itertools.permutations(range(order)):
        np.testing.assert_array_equal(draws[0], draws[0].transpose(axes))
    idx = list(itertools.combinations_with_replacement(range(d), order))
    mult = np.array([len(set(itertools.permutations(t))) for t in idx])
    distinct = draws[(slice(None), *np.array(idx).T)]
    for m in set(mult.tolist()):
        values = distinct[:, mult == m].ravel()
        assert stats.kstest(values, stats.norm(scale=sens * z / np.sqrt(m)).cdf).pvalue > P_MIN, m


# ---------------------------------------------------------------- AboveThreshold
@pytest.mark.parametrize("epsilon,sensitivity", [(1.0, 1.0), (0.25, 3.0)])
def test_above_threshold_noise_scales(rng, monkeypatch, epsilon, sensitivity):
    import dptensor.mechanisms.releases as mech
    scales = []

    def recording(S, rng, size=None):
        scales.append(np.asarray(S))
        return np.zeros(np.shape(S) if size is None else size)

    monkeypatch.setattr(mech, "rounded_laplace", recording)
    above_threshold(np.zeros(7), 1.0, epsilon, rng, sensitivity=sensitivity)
    # Dwork & Roth Alg. 1 on the grid: Lap(2 D/eps) once on the threshold, Lap(4 D/eps) on every
    # query, D = floor(s/gamma) + 1 the sensitivity of the rounded queries, in grid steps.
    gamma = mech.grid_step(sensitivity / epsilon)
    D = np.floor(sensitivity / gamma) + 1
    (S,) = scales
    assert S.shape == (8,)
    assert np.isclose(S[0], 2 * D / epsilon, rtol=1e-9) and S[0] >= 2 * D / epsilon
    assert np.allclose(S[1:], 4 * D / epsilon, rtol=1e-9) and np.all(S[1:] >= 4 * D / epsilon)
    # ... which is the textbook scale up to one grid step in 2**30.
    assert abs(S[0] * gamma / (2 * sensitivity / epsilon) - 1) < 2.0 ** -28


def test_above_threshold_stops_at_the_first_clearly_high_query(rng):
    queries = np.r_[np.zeros(20), np.full(10, 100.0)]
    hits = [above_threshold(queries, 50.0, 10.0, rng) for _ in range(200)]
    assert hits == [20] * 200


def test_above_threshold_returns_none_when_all_are_far_below(rng):
    queries = np.zeros(50)
    assert all(above_threshold(queries, 100.0, 10.0, rng) is None for _ in range(200))


def _exact_above_threshold_law(queries, threshold, epsilon, sensitivity=1.0):
    """P(output = i) for each i and P(None), by integrating over the threshold noise."""
    rho = stats.laplace(scale=2 * sensitivity / epsilon)
    nu = stats.laplace(scale=4 * sensitivity / epsilon)
    queries = np.asarray(queries, dtype=float)

    def density(r, i):
        below = nu.cdf(threshold + r - queries)  # P(query j stays under the noisy threshold)
        p = np.prod(below[:i]) * (1 - below[i]) if i is not None else np.prod(below)
        return rho.pdf(r) * p

    outcomes = list(range(len(queries))) + [None]
    return np.array([integrate.quad(density, -60, 60, args=(i,), points=[0.0], limit=200)[0]
                     for i in outcomes])


def test_above_threshold_output_law_matches_the_exact_one(rng):
    queries, threshold, epsilon = [0.0, 1.0, 2.0, 0.5], 1.5, 2.0
    law = _exact_above_threshold_law(queries, threshold, epsilon)
    assert law.sum() == pytest.approx(1.0, abs=1e-6)
    n = 8_000
    hits = [above_threshold(queries, threshold, epsilon, rng) for _ in range(n)]
    counts = np.array([hits.count(i) for i in range(len(queries))] + [hits.count(None)])
    assert stats.chisquare(counts, law / law.sum() * n).pvalue > P_MIN
    # Power: the law of a run with twice the noise (half the epsilon) is rejected.
    wrong = _exact_above_threshold_law(queries, threshold, epsilon / 2)
    assert stats.chisquare(counts, wrong / wrong.sum() * n).pvalue < 1e-6


def test_above_threshold_rejects_bad_input(rng):
    with pytest.raises(ValueError, match="epsilon"):
        above_threshold([1.0], 0.0, 0.0, rng)
    with pytest.raises(ValueError, match="1-D"):
        above_threshold(np.zeros((2, 2)), 0.0, 1.0, rng)


# ---------------------------------------------------------------- clipping
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_clip_rows(rng, dtype):
    X = (rng.normal(size=(200, 6)) * rng.uniform(0.1, 3.0, size=(200, 1))).astype(dtype)
    X_orig = X.copy()
    data_norm = 2.0
    C = clip_rows(X, data_norm)
    assert C.dtype == dtype and C.shape == X.shape
    np.testing.assert_array_equal(X, X_orig)  # the caller's array is untouched
    norms = np.linalg.norm(X.astype(float), axis=1)
    out = np.linalg.norm(C.astype(float), axis=1)
    tol = 10 * np.finfo(dtype).eps
    assert np.all(out <= data_norm * (1 + tol))
    inside = norms <= data_norm
    assert inside.any() and (~inside).any()
    np.testing.assert_array_equal(C[inside], X[inside])  # rows inside the ball are unchanged
    # Rows outside are scaled onto the sphere, keeping their direction.
    np.testing.assert_allclose(out[~inside], data_norm, rtol=tol)
    np.testing.assert_allclose(C[~inside] * (norms[~inside] / data_norm)[:, None], X[~inside],
                               rtol=100 * np.finfo(dtype).eps, atol=100 * np.finfo(dtype).eps)
    assert clip_rows(X, None) is X


def test_clip_rows_keeps_zero_rows(rng):
    X = np.zeros((3, 4))
    np.testing.assert_array_equal(clip_rows(X, 1.0), X)



@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_clip_rows_silent_and_exact_on_extreme_rows(dtype):
    # Clipping runs after the spend: a warning for a zero row (data_norm / 0 overflowing) or a huge
    # one (its square overflowing) would tell that such a row exists, so neither may warn, and a
    # huge row is clipped along its direction (it was zeroed by its infinite norm).
    big = np.finfo(dtype).max / 4
    X = np.array([[0.0, 0.0], [big, big], [3.0, 4.0], [1e-30, 0.0]], dtype=dtype)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        out = clip_rows(X, 100.0)
        inplace = center_and_clip(X.copy(), np.zeros(2, dtype=dtype), 100.0, copy=False)
        tiny = clip_rows(np.array([[1e-200, 1e-200]]), 1e-300)  # squares underflow: still clipped
    expected = np.array([[0.0, 0.0], [100 / np.sqrt(2)] * 2, [3.0, 4.0], [1e-30, 0.0]])
    np.testing.assert_allclose(out, expected, rtol=1e-6)
    np.testing.assert_allclose(inplace, expected, rtol=1e-6)
    assert out.dtype == dtype
    np.testing.assert_allclose(tiny, [[1e-300 / np.sqrt(2)] * 2], rtol=1e-12)


@_SMALL_PRIVATE
def test_private_pca_fit_silent_whether_or_not_a_row_is_zero_or_huge():
    # Neighbouring data sets (one row replaced by 0 or by 1e200): the fit after the spend is silent
    # for both, not only for one.
    X = np.random.default_rng(0).standard_normal((50, 3))
    for row in (0.0, 1e200):
        Y = X.copy()
        Y[0] = row
        with warnings.catch_warnings():
            warnings.simplefilter("error", RuntimeWarning)
            PrivatePCA(1, epsilon=1.0, delta=1e-6, data_norm=100.0, random_state=0).fit(Y)


@pytest.mark.parametrize("scale", [1e8, 1e12])
def test_releases_at_a_large_noise_scale_stay_silent(scale):
    """The grid's 2**1000-step limit of a large noise scale is past the doubles: it is taken as
    the largest one, with no overflow warning after the spend (a bound of 1e8 reached it)."""
    X = np.random.default_rng(0).standard_normal((3000, 6)) * scale
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        out = gaussian_release(np.ones(5) * scale, scale, 1.0, np.random.default_rng(1))
        PrivatePCA(2, epsilon=1.0, delta=1e-6, data_norm=scale, method="power",
                   random_state=0).fit(X)
    assert np.all(np.isfinite(out))
