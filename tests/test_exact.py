"""Exact sums (dptensor.algorithms.exact): the released statistics are sum_i f(x_i) exactly, in any order.

Derivation: docs/derivations/exact_sums.rst.
"""
import warnings
from fractions import Fraction

import numpy as np
import pytest

import dptensor.algorithms.exact as ex
from dptensor import PrivacyAccountant, PrivatePCA
from dptensor.mechanisms import Rounding, clip_rows, gaussian_release, grid_step
from dptensor.algorithms.power import private_mean
from expected_warnings import NON_PRIVATE

ONE = 2 ** ex.BITS


def _adversarial_rows(rng, d=6):
    """Rows of every awkward kind: huge, tiny, on and just past the sphere, non-finite, zeros."""
    rows = [rng.standard_normal(d) * s for s in (1e-300, 1e-8, 0.3, 1.0, 7.0, 1e30, 1e300)]
    unit = rng.standard_normal(d)
    unit /= np.linalg.norm(unit)
    rows += [unit, unit * (1 + 1e-16), unit * (1 - 1e-16), unit * np.nextafter(1.0, 2.0),
             np.eye(d)[0], np.full(d, 1 / np.sqrt(d)), np.full(d, np.nextafter(d ** -0.5, 1.0)),
             np.zeros(d), -np.zeros(d), np.r_[np.inf, np.zeros(d - 1)],
             np.r_[np.nan, np.ones(d - 1)],
             np.full(d, 1e308), np.r_[1.0, np.full(d - 1, 2.0 ** -21)]]
    return np.array(rows)


def test_grid_rows_lie_in_the_ball_exactly_and_are_a_per_row_map(rng):
    X = np.vstack([_adversarial_rows(rng),
                   rng.standard_normal((2000, 6)) * rng.uniform(0, 3, (2000, 1))])
    for B in (1.0, 0.37, 3e5):
        with np.errstate(over="ignore"):  # the 1e300 rows times 3e5 overflow to inf, on purpose
            XB = X * B
        M = ex.grid_rows(XB, B)
        ints = M.astype(np.int64)
        assert np.array_equal(ints, M) and np.abs(ints).max() <= ONE
        assert max(sum(int(v) ** 2 for v in row) for row in ints) <= 4 ** ex.BITS  # Python integers
        # one row at a time, in any position: the same integers
        assert all(np.array_equal(ex.grid_rows(XB[i:i + 1], B)[0], M[i])
                   for i in range(0, len(X), 97))
        perm = rng.permutation(len(X))
        assert np.array_equal(ex.grid_rows(XB[perm], B), M[perm])
    # a row inside the ball moves by at most half a grid step per coordinate, a clipped one
    # (one large entry or not) by at most two from the float clip
    finite = X[np.isfinite(X).all(axis=1) & (np.abs(X).max(axis=1) < 1e250)]
    inside = clip_rows(finite, 1.0) * (1 - 1e-5)
    assert np.abs(ex.grid_rows(inside, 1.0) / ONE - inside).max() <= 0.5 / ONE
    assert np.abs(ex.grid_rows(finite, 1.0) / ONE - clip_rows(finite, 1.0)).max() <= 2.0 / ONE


def test_float32_rows_give_the_same_grid_as_float64(rng):
    X = (rng.standard_normal((500, 7)) * 2).astype(np.float32)
    M32 = ex.grid_rows(X, 1.5)
    assert M32.dtype == np.float32 and np.array_equal(M32, ex.grid_rows(X.astype(np.float64), 1.5))


def _python_ints(M):
    return [[int(v) for v in row] for row in M]


def test_statistics_are_the_sums_of_per_row_integers_brute_force(rng):
    M = ex.grid_rows(rng.standard_normal((37, 4)), 1.0)
    rows = _python_ints(M)
    V = np.linalg.qr(rng.standard_normal((4, 2)))[0]
    K = ex.grid_vectors(V)
    k = _python_ints(K)
    gram = [[sum(r[a] * r[b] for r in rows) for b in range(4)] for a in range(4)]
    assert ex.gram(M).ints.tolist() == gram
    assert ex.row_sum(M).ints.tolist() == [sum(r[a] for r in rows) for a in range(4)]
    assert int(ex.sum_of_squares(M).ints) == sum(v * v for r in rows for v in r)

    def w(r):  # rint(m^T K / 2**BITS), half to even, one row alone
        return [round(Fraction(sum(r[j] * k[j][c] for j in range(4)), ONE)) for c in range(2)]
    product = [[sum(r[a] * w(r)[c] for r in rows) for c in range(2)] for a in range(4)]
    assert ex.gram_product(M, K).ints.tolist() == product


def test_on_grid_rounds_the_exact_value(rng):
    ints = np.array([3 * 2 ** 70 + 12345, -(2 ** 80) - 1, 0, 7], dtype=object)
    stat = ex.Exact(ints, 0.1 / 2 ** 40)
    gamma = np.array([2.0 ** -10, 2.0 ** 20, 1.0, 2.0 ** -40])
    got = stat.on_grid(gamma)
    for v, g, out in zip(stat.ints, gamma, got):
        exact = Fraction(v) * Fraction(stat.unit) / Fraction(g)
        assert abs(Fraction(out) / Fraction(g) - exact) <= Fraction(1, 2)
        assert Fraction(out) / Fraction(g) == int(Fraction(out) / Fraction(g))  # on the grid


def test_power_sensitivity_bounds_every_pair_brute_force(rng):
    """||f(a) - f(b)||_F <= power_sensitivity for f(x) = q w^T, on extremal and random pairs."""
    for p in (1, 2, 3):
        d = 5
        V = np.linalg.qr(rng.standard_normal((d, p)))[0]
        K = ex.grid_vectors(V)
        bound = ex.power_sensitivity(K, 1.0)
        assert bound >= np.sqrt(min(p, 2))
        other = np.linalg.qr(np.c_[V, rng.standard_normal(d)])[0][:, p]  # orthogonal to span(V)
        pairs = [(V[:, 0], V[:, 1] if p > 1 else other)]
        pairs += [tuple(rng.standard_normal((2, d))) for _ in range(300)]
        for a, b in pairs:
            Ma, Mb = ex.grid_rows(np.array([a, b]), 1.0)[:, None, :]
            change = ex.gram_product(Ma, K).value() - ex.gram_product(Mb, K).value()
            assert np.linalg.norm(change) <= bound


# ---------------------------------------------------------------------------------------------
# The adversarial construction: plain float64 sums break the sensitivity, exact sums do not
# ---------------------------------------------------------------------------------------------

def _neighbours_of_ten_million():
    """Two neighbouring data sets of 10**7 rows (d = 2, norms <= 1), differing in row 0 only.

    Row 0 is (1, 0) or (-1, 0); then 2**23 rows (1, 0) bring a running sum just above 2**23 in one
    set and just below it in the other; then rows (2**-30 + 2**-40, 0). Added one at a time (as
    NumPy sums along axis 0), above 2**23 each such term rounds up to a whole ulp (2**-29),
    below it to 2**-30 (its own size): the computed sums differ by 2 + n 2**-30, not 2.
    """
    n, head = 10 ** 7, 2 ** 23
    X = np.zeros((n, 2))
    X[1:head + 1, 0] = 1.0
    X[head + 1:, 0] = 2.0 ** -30 + 2.0 ** -40
    X[0, 0] = 1.0
    Y = X.copy()
    Y[0, 0] = -1.0
    return X, Y


def test_plain_float_sums_break_the_sensitivity_and_exact_sums_do_not():
    X, Y = _neighbours_of_ten_million()
    n, B = X.shape[0], 1.0
    sensitivity = 2.0 * B  # of the sum of rows clipped to B (the mean's, times n)
    rng = np.random.default_rng(0)
    plain = [private_mean(Z, B, 0.0, rng) * n for Z in (X, Y)]  # the unnoised float64 path
    assert np.linalg.norm(plain[0] - plain[1]) > sensitivity * (1 + 1e-4)  # far past 2**-40
    exact = [ex.row_sum(ex.grid_rows(Z, B), B) for Z in (X, Y)]
    change = [Fraction(int(a - b)) * Fraction(exact[0].unit)
              for a, b in zip(exact[0].ints, exact[1].ints)]
    assert sum(c * c for c in change) <= Fraction(sensitivity) ** 2  # exactly, in rationals
    # and what the release rounds: the neighbours' grid integers differ by at most Delta/gamma + 1
    gamma = float(grid_step(sensitivity * 0.5))
    steps = [e.on_grid(gamma) / gamma for e in exact]
    assert np.abs(steps[0] - steps[1]).max() <= sensitivity / gamma + 1


def test_the_rounding_allowance_covers_what_plain_float_sums_lose():
    """Where a statistic is a float sum, the release adds :class:`Rounding`'s allowance to the
    sensitivity: on the same construction, the gap is past the sensitivity and within it."""
    X, Y = _neighbours_of_ten_million()
    n, B = X.shape[0], 1.0
    sums = [np.sum(Z, axis=0) for Z in (X, Y)]
    gap = np.linalg.norm(sums[0] - sums[1])
    allowance = Rounding(total=n * B, terms=n).allowance()
    assert 2.0 * B < gap <= 2.0 * B + allowance
    assert gap - 2.0 * B > allowance / 20  # the allowance is not loose by orders of magnitude


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_rounding_bounds_float_sums_in_any_order_brute_force(dtype):
    """``|fl(sum) - sum| <= gamma_m sum |t|`` (half the allowance), checked in rationals over
    sums along rows, BLAS products, pairwise and running sums, on cancelling and random terms."""
    rng = np.random.default_rng(7)
    for trial in range(60):
        n = int(rng.integers(2, 3000))
        t = rng.standard_normal(n) * np.exp(rng.uniform(-30, 30, n))  # wide, cancelling magnitudes
        t = t.astype(dtype)
        exact = sum(Fraction(float(v)) for v in t)
        bound = Fraction(Rounding(float(np.sum(np.abs(t.astype(np.float64)))), n, dtype).allowance()) / 2
        order = rng.permutation(n)
        computed = [np.sum(t), np.sum(t[order]), np.cumsum(t[order])[-1],
                    (t[None, :] @ np.ones((n, 1), dtype=dtype))[0, 0],
                    np.add.reduce(t.reshape(1, -1), axis=1)[0]]
        for c in computed:
            assert abs(Fraction(float(c)) - exact) <= bound, (trial, n)


def test_rounding_refuses_sums_it_cannot_bound():
    with pytest.raises(ValueError, match="wider type"):
        Rounding(1.0, 2 ** 24, np.float32).allowance()
    assert Rounding(1.0, 0).allowance() == 0.0


def test_a_release_with_rounding_adds_noise_for_the_allowance_only_where_there_is_a_query():
    value = np.zeros(4)
    plain = gaussian_release(value, np.array([1.0, 1.0, 0.0, 0.0]), 1.0, np.random.default_rng(3))
    rounded = gaussian_release(value, np.array([1.0, 1.0, 0.0, 0.0]), 1.0, np.random.default_rng(3),
                               rounding=Rounding(1e6, 10 ** 6))
    assert np.all(rounded[2:] == 0) and np.all(plain[2:] == 0)
    assert np.all(rounded[:2] != plain[:2])  # a wider scale: another noise


# ---------------------------------------------------------------------------------------------
# Estimators: order, chunks, Dask and float32 change nothing
# ---------------------------------------------------------------------------------------------

def _data(n=200_000, d=20, seed=0):
    rng = np.random.default_rng(seed)
    return rng.standard_normal((n, d)) * np.linspace(2.0, 0.2, d) + 0.3


def _absorbing(n, d, head, seed=0):
    """Data whose float64 column sums depend on the grouping: ``head`` rows (3.96, noise), then
    ``head`` rows whose first entry is below half an ulp of the running sum (a sum along axis 0
    drops them; a chunk of them alone keeps them), then ordinary rows."""
    X = _data(n, d, seed) * 0.5
    X[:head, 0] = 3.96
    X[head:2 * head, 0] = 0.45 * np.spacing(3.96 * head)
    return X


def _fitted(est):
    return [est.components_, est.explained_variance_, est.mean_,
            getattr(est, "explained_variance_ratio_", np.zeros(1))]


@pytest.mark.parametrize("method", ["analyze_gauss", "power"])
def test_private_pca_is_bit_identical_under_row_permutation(method, same_noise):
    X = _absorbing(200_000, 20, head=50_000)
    params = dict(n_components=3, epsilon=1.0, delta=1e-12, data_norm=4.0, method=method,
                  random_state=0)
    a = PrivatePCA(**params).fit(X)
    for perm in (np.random.default_rng(1).permutation(len(X)), np.arange(len(X))[::-1]):
        b = PrivatePCA(**params).fit(X[perm])
        assert all(np.array_equal(u, v) for u, v in zip(_fitted(a), _fitted(b)))


def test_private_pca_float32_releases_the_float64_statistics(same_noise):
    X = _data(d=12).astype(np.float32)
    params = dict(n_components=2, epsilon=1.0, delta=1e-12, data_norm=4.0, random_state=0)
    a, b = PrivatePCA(**params).fit(X), PrivatePCA(**params).fit(X.astype(np.float64))
    assert a.components_.dtype == np.float32
    assert all(np.array_equal(u, v.astype(np.float32))
               for u, v in zip(_fitted(a)[::2], _fitted(b)[::2]))
    # the same released eigenvalues, scaled in float64 and then cast (post-processing)
    assert np.array_equal(a.explained_variance_, b.explained_variance_.astype(np.float32))


@pytest.mark.parametrize("method", ["analyze_gauss", "power", "auto"])
def test_private_pca_float32_rows_whose_sums_pass_float32s_range(method, same_noise):
    # rows of norm 1.5e17: the Gram matrix's sums over 20 000 rows reach 4.5e38, past float32's
    # 3.4e38, where the released products were cast to float32 (inf, and a warning after the
    # spend); they are released in float64, as the float64 rows' are
    rng = np.random.default_rng(3)
    Z = rng.standard_normal((20_000, 8)) * np.linspace(3.0, 0.5, 8)
    B = 1.5e17
    X = Z / np.linalg.norm(Z, axis=1, keepdims=True) * B
    params = dict(n_components=2, epsilon=1.0, delta=1e-12, data_norm=B, method=method,
                  random_state=0)
    a = PrivatePCA(**params).fit(X.astype(np.float32))
    b = PrivatePCA(**params).fit(X.astype(np.float32).astype(np.float64))
    assert a.explained_variance_.dtype == np.float32 and np.all(np.isfinite(a.singular_values_))
    assert np.array_equal(a.explained_variance_, b.explained_variance_.astype(np.float32))
    np.testing.assert_allclose(a.singular_values_, b.singular_values_, rtol=1e-6)
    assert np.array_equal(a.components_, b.components_.astype(np.float32))


@NON_PRIVATE
@pytest.mark.parametrize("method, data_norm", [("auto", 1e18), ("power", 1e18), ("power", None)])
def test_nonprivate_float32_sums_past_its_range_are_refused_before_the_spend(method, data_norm):
    # the Gram's sums (or the power method's products) of 2 000 rows of norm about 1e18 pass
    # float32's range: refused before the spend, where they failed after it
    X = np.random.default_rng(4).standard_normal((2_000, 20)).astype(np.float32) * 2e17
    accountant = PrivacyAccountant(epsilon=np.inf)
    params = dict(n_components=3, data_norm=data_norm, method=method, random_state=0)
    with pytest.raises(ValueError, match="pass them as float64"):
        PrivatePCA(accountant=accountant, **params).fit(X)
    assert accountant.history() == []
    fit = PrivatePCA(**params).fit(X.astype(np.float64))  # float64 holds them
    assert np.all(np.isfinite(fit.explained_variance_))


def test_private_stream_does_not_depend_on_the_batches(same_noise):
    X = _absorbing(120_000, 10, head=20_000)  # the mean block: 20 000 big rows, 20 000 tiny ones
    params = dict(n_components=2, epsilon=1.0, data_norm=4.0, block_size=40_000, random_state=0)
    one = PrivatePCA(**params).partial_fit(X)
    many = PrivatePCA(**params)
    for piece in np.array_split(X, 37):
        many.partial_fit(piece)
    assert all(np.array_equal(u, v) for u, v in zip(_fitted(one)[:3], _fitted(many)[:3]))


@pytest.mark.parametrize("method", ["analyze_gauss", "power"])
def test_private_pca_on_dask_equals_numpy_bit_for_bit(method, same_noise):
    da = pytest.importorskip("dask.array")
    X = _absorbing(100_000, 16, head=50_000)
    params = dict(n_components=2, epsilon=1.0, delta=1e-12, data_norm=4.0, method=method, n_iter=3,
                  random_state=0)
    a = PrivatePCA(**params).fit(X)
    for chunks in (7_001, 33_333):
        b = PrivatePCA(**params).fit(da.from_array(X, chunks=(chunks, 16)))
        assert all(np.array_equal(u, v) for u, v in zip(_fitted(a), _fitted(b)))


def _near_the_sphere(rng, n, d, B, dtype):
    """Rows of every kind a fit's two passes must map alike: inside, on, just off and past the
    sphere (before and after centring), zero, huge."""
    X = rng.standard_normal((n, d)) * rng.uniform(0.05, 2.0) + rng.uniform(-2, 2, d)
    on = rng.random(n) < 0.4
    X[on] *= (B * rng.choice([1.0, 1 - 1e-7, 1 + 1e-7, 0.999, 1.5], size=(on.sum(), 1))
              / np.linalg.norm(X[on], axis=1, keepdims=True))
    X[0], X[1] = 0.0, X[1] * 1e30
    return X.astype(dtype)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_the_compiled_grid_map_is_numpys_bit_for_bit(rng, dtype):
    from dptensor.algorithms import grid_kernel

    pytest.importorskip("numba")
    assert grid_kernel.compiled_grid_map() is not None  # numba installed: the fast path runs
    grid, limit = float(ONE), float(ONE) ** 2
    ties = (np.arange(-40, 40) + 0.5) / grid  # x 2**b lands on a half-integer: rint's tie rule
    X = np.vstack([_adversarial_rows(rng, 80), ties.reshape(1, -1),
                   rng.standard_normal((3000, 80)) * rng.uniform(0, 0.2, (3000, 1))])
    with np.errstate(over="ignore"):  # 1e308 overflows float32: an infinite row, as meant
        X = X.astype(dtype)
    for B in (1.0, 0.37, 3e5):
        outs = []
        for use_kernel in (True, False):
            out, norms = np.full((len(X), 81), 7.0), np.empty(len(X))
            count = grid_kernel.grid_map(X, grid / B, out, norms, limit, use_kernel)
            outs.append((out, norms, count))
        (a, na, ca), (b, nb, cb) = outs
        assert ca == cb and np.array_equal(a, b, equal_nan=True)
        assert np.all(a[:, -1] == 7.0)  # the column past the rows' is left as it was
        assert np.array_equal(na < limit, nb < limit)
        below = nb < limit  # exact sums of integer squares there, in any order
        assert np.array_equal(na[below], nb[below]) and ca == np.count_nonzero(~below)


@pytest.mark.parametrize("use_kernel", [True, False])
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_one_pass_statistics_are_the_held_rows_integers(rng, dtype, use_kernel):
    from dptensor.algorithms import exact_pass

    grid = 2.0 ** ex.BITS
    for trial in range(12):
        n, d, B = int(rng.integers(2, 5000)), int(rng.integers(1, 90)), float(rng.uniform(0.5, 9))
        X = _near_the_sphere(rng, n, d, B, dtype)
        mean = rng.uniform(-1, 1, d) * B * [0.0, 0.1, 1.0, 1.9][trial % 4]
        if trial % 3 == 0:  # centres on a half-integer of the grid: the plain second pass
            mean = (np.round(mean * grid / B) + 0.5) * B / grid
        M = ex.grid_rows(X, B)
        sums = exact_pass.grid_sums(X, B, use_kernel=use_kernel)
        assert np.array_equal(sums.mean_stat(1.0).ints, ex.row_sum(M).ints)
        assert np.allclose(sums.norms, np.einsum("ij,ij->i", M, M, dtype=np.float64),
                           rtol=2.0 ** -24, atol=0)
        for centre in (mean, None):
            Mc = M if centre is None else ex.grid_rows(M, B, centre, scale=B / grid)
            total, C = exact_pass.centred_stats(X, sums, B, centre, 1.0)
            assert np.array_equal(C.ints, ex.gram(Mc).ints)
            assert total.ints == ex.sum_of_squares(Mc).ints


def test_the_one_pass_fit_releases_what_the_held_rows_fit_releases(monkeypatch):
    from dptensor.algorithms.pca_methods import AnalyzeGauss

    rng = np.random.default_rng(7)
    for n, d, dtype in ((6000, 30, np.float64), (3001, 9, np.float32)):
        X = _near_the_sphere(rng, n, d, 2.0, dtype)
        params = dict(n_components=2, epsilon=1.0, delta=1e-9, data_norm=2.0, random_state=3)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the second component is noise at this size
            one = PrivatePCA(**params).fit(X)
            with monkeypatch.context() as m:
                m.setattr(AnalyzeGauss, "takes_gram", False)  # the grid rows held whole
                held = PrivatePCA(**params).fit(X)
        assert all(np.array_equal(u, v) for u, v in zip(_fitted(one), _fitted(held)))
        assert one.noise_variance_ == held.noise_variance_


def test_the_one_pass_fit_releases_the_same_without_the_compiled_map(monkeypatch):
    from dptensor.algorithms import compiled

    rng = np.random.default_rng(11)
    X = _near_the_sphere(rng, 7000, 40, 2.0, np.float64)
    params = dict(n_components=2, epsilon=1.0, delta=1e-9, data_norm=2.0, random_state=5)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        fast = PrivatePCA(**params).fit(X)
        monkeypatch.setattr(compiled, "ENABLED", False)  # NumPy's map, the fallback
        plain = PrivatePCA(**params).fit(X)
    assert all(np.array_equal(u, v) for u, v in zip(_fitted(fast), _fitted(plain)))
    assert fast.noise_variance_ == plain.noise_variance_


# ---------------------------------------------------------------------------------------------
# The third moment's power queries (PrivateTensorDecomposition's implicit private path)
# ---------------------------------------------------------------------------------------------

def test_moment_product_is_the_sum_of_per_row_terms_brute_force(rng):
    M = ex.grid_rows(rng.standard_normal((29, 4)), 1.0)
    K = ex.grid_vectors(np.linalg.qr(rng.standard_normal((4, 3)))[0])
    stat = ex.moment_product(M, K)
    expected = np.zeros((5, 3), dtype=object)
    for row in M:
        t = (row @ K) / ONE ** 2  # exact
        w, c = np.rint(t * t * ONE), np.rint(t * t * t * ONE)  # per-row, correctly rounded
        expected[:4] += np.outer([int(v) for v in row], [int(v) for v in w]).astype(object)
        expected[4] += np.array([int(v) * ONE for v in c], dtype=object)
    assert stat.ints.tolist() == expected.tolist()


def test_moment_sensitivities_bound_every_pair_brute_force(rng):
    d, L, n = 5, 3, 7
    U = np.linalg.qr(rng.standard_normal((d, L)))[0]
    K = ex.grid_vectors(U)
    s_vec, s_val = ex.moment_sensitivities(K, 1.0, n)
    pairs = [(U[:, 0], -U[:, 0]), (U[:, 1], -U[:, 1])]
    pairs += [tuple(rng.standard_normal((2, d))) for _ in range(300)]
    for a, b in pairs:
        Ma, Mb = ex.grid_rows(np.array([a, b]), 1.0)[:, None, :]
        change = (ex.moment_product(Ma, K, 1.0 / n).value()
                  - ex.moment_product(Mb, K, 1.0 / n).value())
        assert np.all(np.linalg.norm(change[:d], axis=0) <= s_vec)
        assert np.all(np.abs(change[d]) <= s_val)


def _tensor_fit(X):
    from dptensor import PrivateTensorDecomposition

    return PrivateTensorDecomposition(2, epsilon=1.0, delta=1e-12, data_norm=4.0, n_restarts=3,
                                      n_iter=4, moment="implicit", random_state=0).fit(X)


def test_private_tensor_decomposition_is_bit_identical_under_permutation_and_dask(same_noise):
    # rows B e_1, then rows whose first entries (1e-14 .. 1e-8) feed T(I,u,u)'s first coordinate
    # terms that the running sum rounds one way in one order and another in the other
    X = np.random.default_rng(0).standard_normal((100_000, 8)) * 0.5
    X[:25_000] = 0.0
    X[:25_000, 0] = 3.99
    X[25_000:50_000, 0], X[25_000:50_000, 1] = np.geomspace(1e-14, 1e-8, 25_000), 3.9
    a = _tensor_fit(X)
    fits = [_tensor_fit(X[::-1])]
    da = pytest.importorskip("dask.array")
    fits.append(_tensor_fit(da.from_array(X, chunks=(9_999, 8))))
    for b in fits:
        assert np.array_equal(a.components_, b.components_)
        assert np.array_equal(a.eigenvalues_, b.eigenvalues_)


def _spiky_block(rng, n, d):
    """Rows B e_1, then rows whose tiny first entries round differently by order, then noise."""
    X = rng.standard_normal((n, d)) * 0.5
    q = n // 4
    X[:q] = 0.0
    X[:q, 0] = 3.99
    X[q:2 * q, 0], X[q:2 * q, 1] = np.geomspace(1e-14, 1e-8, q), 3.9
    return X


def test_private_streaming_tensor_power_is_bit_identical_when_a_block_is_reordered(same_noise):
    from dptensor import StreamingTensorPower

    rng = np.random.default_rng(0)
    blocks = [_spiky_block(rng, 40_000, 6) for _ in range(2)]
    params = dict(n_components=1, epsilon=1.0, delta=1e-12, data_norm=4.0, batch_size=40_000,
                  n_restarts=3, n_iter=2, random_state=0)
    a = StreamingTensorPower(**params).fit(np.vstack(blocks))
    b = StreamingTensorPower(**params).fit(np.vstack([block[::-1] for block in blocks]))
    assert np.array_equal(a.components_, b.components_)
    assert np.array_equal(a.eigenvalues_, b.eigenvalues_)


def test_private_stream_releases_its_blocks_statistics(monkeypatch):
    """What a private StreamingTensorPower block puts on its grid is the block's deflated moment
    queries (block_statistics of the clipped rows) to within the grid, at their true scale."""
    import dptensor.algorithms.streaming_tensor as stp
    from dptensor import StreamingTensorPower

    states, parts = [], []
    real_release, real_joint = stp.TensorPowerStream._release_exact, stp.joint_gaussian_release

    def spy_release(self, *args):
        deflation = (self.eigenvalues[:self.i].copy(), self.components[:self.i].copy())
        states.append((self.U.copy(), *deflation))
        return real_release(self, *args)

    def spy_joint(values, *args, **kwargs):
        parts.append(values)
        assert kwargs == {"rounding": None}  # exact sums: nothing to allow for
        return real_joint(values, *args, **kwargs)
    monkeypatch.setattr(stp.TensorPowerStream, "_release_exact", spy_release)
    monkeypatch.setattr(stp, "joint_gaussian_release", spy_joint)
    X = np.random.default_rng(3).standard_normal((2000, 5))
    StreamingTensorPower(2, epsilon=1.0, data_norm=1.5, batch_size=500, n_restarts=3, n_iter=2,
                         random_state=0).fit(X)
    assert len(parts) == 4
    for (U, lam, V), (TU, tu), block in zip(states, parts, np.split(X, 4)):
        exact_u, exact_l = stp.block_statistics(clip_rows(block, 1.5), U, lam, V)
        np.testing.assert_allclose(TU, exact_u, atol=1e-5)
        np.testing.assert_allclose(tu, exact_l, atol=1e-5)


def test_a_search_scores_mean_is_an_exact_sum_of_per_unit_grid_values():
    """The private search's released score: the mean of per-unit scores clipped into [lo, hi] was
    a float64 mean; now each unit is put alone on a grid of the range and summed in integers, so
    one unit moves the exact mean by at most (hi - lo) / n, whatever the order."""
    from fractions import Fraction

    from dptensor.algorithms.exact import range_mean

    g = np.random.default_rng(4)
    lo, hi = -1.5, 2.0
    values = np.r_[g.uniform(lo - 1, hi + 1, 999), np.nan]
    stat = range_mean(values, lo, hi)
    top, bottom = stat._rational()
    m = [round(min(max((0.0 if np.isnan(v) else v - lo) / (hi - lo), 0.0), 1.0) * 2**20)
         for v in values]
    unit = Fraction((hi - lo) / (len(values) * 2**20))
    assert Fraction(int(top), bottom) == Fraction(lo) + unit * sum(m)
    assert range_mean(values[::-1], lo, hi).ints == stat.ints  # order does not matter
    bound = Fraction(hi - lo) / len(values) * (1 + Fraction(1, 2**52))
    for k in (0, 500, 999):
        for new in (lo - 5, hi + 5, np.nan):
            moved = values.copy()
            moved[k] = new
            t2, b2 = range_mean(moved, lo, hi)._rational()
            assert abs(Fraction(int(t2), b2) - Fraction(int(top), bottom)) <= bound


# ---------------------------------------------------------------------------------------------
# Entry-level products: exact whatever the entries' sizes
# ---------------------------------------------------------------------------------------------

def _wide_symmetric(rng, d):
    A = rng.standard_normal((d, d)) * np.exp(rng.uniform(-30, 35, (d, d)))  # within the cap
    return (A + A.T) / 2


def test_entry_products_are_exact_sums_of_the_grid_entries():
    """``g A_q X_q`` in rationals, for entries across 28 orders of magnitude (a float product
    loses the small ones entirely), and the same integers for the permuted problem."""
    from dptensor.algorithms.exact_entries import ExactEntryMatrix
    rng = np.random.default_rng(11)
    d, p, B = 150, 3, 0.7
    A = _wide_symmetric(rng, d)
    V = np.linalg.qr(rng.standard_normal((d, p)))[0]
    op = ExactEntryMatrix(A, B)
    assert B * 2.0 ** -(ex.BITS + 1) < op.step <= B * 2.0 ** -ex.BITS
    got = op.matmat(V)
    Aq = np.rint(A / op.step)
    K = ex.grid_vectors(V)
    for i in range(0, d, 13):
        for j in range(p):
            exact = sum(int(Aq[i, k]) * int(K[k, j]) for k in range(d))
            assert got.ints[i, j] == exact
    perm = rng.permutation(d)
    moved = ExactEntryMatrix(A[np.ix_(perm, perm)], B).matmat(V[perm])
    assert np.array_equal(moved.ints, got.ints[perm])


def test_entry_neighbours_move_the_exact_product_by_at_most_the_sensitivity():
    """One pair of entries moved by the bound (on top of entries of any size): the change of the
    exact statistic, in rationals, is within ``entry_power_sensitivity(X_q, B + g)``."""
    from dptensor.algorithms.exact_entries import ExactEntryMatrix
    from dptensor.algorithms.power import entry_power_sensitivity
    rng = np.random.default_rng(12)
    d, p, B = 40, 2, 1.0
    for trial in range(20):
        A = _wide_symmetric(rng, d)
        i, j = rng.integers(d, size=2)
        A2 = A.copy()
        change = B * rng.uniform(-1, 1)
        A2[i, j] += change
        A2[j, i] = A2[i, j]
        V = np.linalg.qr(rng.standard_normal((d, p)))[0]
        op, op2 = ExactEntryMatrix(A, B), ExactEntryMatrix(A2, B)
        delta = [Fraction(int(a - b)) * Fraction(op.matmat(V).unit)
                 for a, b in zip(op.matmat(V).ints.ravel(), op2.matmat(V).ints.ravel())]
        bound = Fraction(entry_power_sensitivity(op.grid_iterate(V), op.bound))
        assert sum(c * c for c in delta) <= bound ** 2 * (1 + Fraction(1, 10 ** 12)), trial


def test_private_precomputed_power_method_releases_exact_products(monkeypatch):
    """The entry-level PPM of a precomputed matrix releases exact products on their grid (no float
    sum over entries, whose rounding no public bound limits)."""
    import dptensor.algorithms.power as power
    released = []
    real = power.exact_gaussian_release

    def spy(stat, *args, **kwargs):
        released.append(stat)
        return real(stat, *args, **kwargs)
    monkeypatch.setattr(power, "exact_gaussian_release", spy)
    rng = np.random.default_rng(13)
    A = _wide_symmetric(rng, 30)
    PrivatePCA(2, epsilon=2.0, input="precomputed", method="power", n_iter=4,
               random_state=0).fit(A)
    assert len(released) == 4 and all(isinstance(s, ex.Exact) for s in released)


def test_tensor_entry_queries_are_exact_and_the_private_power_method_releases_them(monkeypatch):
    """A 3-way tensor's power queries on the entry grid: exact in integers (two contractions),
    and what a private fit on a tensor releases."""
    import itertools

    import dptensor.algorithms.tensor_power as tp
    from dptensor import PrivateTensorDecomposition
    from dptensor.algorithms.exact_entries import ExactEntryTensor
    rng = np.random.default_rng(14)
    d, L = 6, 2
    T = rng.standard_normal((d, d, d)) * np.exp(rng.uniform(-20, 30, (d, d, d)))
    T = sum(np.transpose(T, p) for p in itertools.permutations(range(3))) / 6
    op = ExactEntryTensor(T, 1.0)
    U = np.linalg.qr(rng.standard_normal((d, L)))[0]
    vector, scalar = op.apply_evaluate(U)
    Tq, K = np.rint(T / op.step), ex.grid_vectors(U)
    for col in range(L):
        ref = [sum(int(Tq[i, j, k]) * int(K[j, col]) * int(K[k, col])
                   for j in range(d) for k in range(d)) for i in range(d)]
        assert list(vector.ints[:, col]) == ref
        assert scalar.ints[col] == sum(r * int(K[i, col]) for i, r in enumerate(ref))
    released = []
    real = tp.exact_gaussian_release
    monkeypatch.setattr(tp, "exact_gaussian_release",
                        lambda stat, *a, **k: released.append(stat) or real(stat, *a, **k))
    PrivateTensorDecomposition(1, epsilon=2.0, n_restarts=2, n_iter=2, random_state=0).fit(T)
    assert released and all(isinstance(s, ex.Exact) for s in released)


def test_entry_digits_are_at_most_the_counted_three_at_the_cap():
    """The memory check counts DIGITS copies of the entries: the clip keeps every entry, of
    either sign and of any size (infinite included), within three signed digits."""
    from dptensor.algorithms.exact_entries import DIGITS, ExactEntryMatrix
    step = ExactEntryMatrix(np.zeros((1, 1)), 1.0).step
    for value in (2.0 ** 77 * step, -(2.0 ** 77) * step, -(2.0 ** 77 - 2.0 ** 26) * step,
                  1e308, -1e308, np.inf, -np.inf):
        A = np.array([[value, 1.0], [1.0, -value]])
        assert len(ExactEntryMatrix(A, 1.0)._digits) <= DIGITS, value
