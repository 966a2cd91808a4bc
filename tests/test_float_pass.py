"""The non-private fit's pass over rows in blocks: the same clipped, centred rows as the in-memory
maps, its sums accurate where the mean is far out, and never on a private fit's path."""
import tracemalloc
import warnings

import numpy as np
import pytest
from expected_warnings import NON_PRIVATE
from sklearn.decomposition import PCA

from dptensor import PrivatePCA
from dptensor.algorithms import float_pass
from dptensor.algorithms.float_pass import centred_gram, float_pass_bytes
from dptensor.algorithms.power import center_and_clip
from dptensor.mechanisms import clip_rows


def _reference(X, bound, center):
    """The in-memory path's rows (clip, centre on the mean, clip again) and their sums."""
    Xc = clip_rows(X, bound)
    mean = (Xc.sum(axis=0, dtype=np.float64) / len(X)).astype(X.dtype) if center else None
    C = center_and_clip(Xc, mean, bound, copy=Xc is X).astype(np.float64)
    return mean, C.T @ C, float(np.einsum("ij,ij->", C, C))


def _rows(n, d, offset, dtype, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, d)) * 0.8 + offset
    X[::97] *= 10.0  # clipped to a tenth or less: their block is scaled into a buffer
    X[5::13] *= 1.6  # clipped mildly: corrected by their own products
    return X.astype(dtype)


@pytest.fixture
def small_blocks(monkeypatch):
    monkeypatch.setattr(float_pass, "_rows", lambda d: 64)  # many blocks, a short last one


@pytest.mark.parametrize("dtype, rtol", [(np.float64, 1e-13), (np.float32, 2e-6)])
@pytest.mark.parametrize("bound", [None, 1e9, 4.0, 2.0, 0.5])
@pytest.mark.parametrize("center", [True, False])
@pytest.mark.parametrize("offset", [0.0, 1.5, 1e3])
def test_one_pass_sums_the_in_memory_rows(small_blocks, dtype, rtol, bound, center, offset):
    X = _rows(3001, 7, offset, dtype)
    mean, C, total = centred_gram(X, bound, center)
    ref_mean, ref_C, ref_total = _reference(X, bound, center)
    assert C.dtype == X.dtype
    np.testing.assert_allclose(C, ref_C, rtol=0, atol=rtol * np.abs(ref_C).max())
    assert total == pytest.approx(ref_total, rel=rtol)
    if center:
        assert mean.dtype == X.dtype
        # float sums in another order: the same mean up to their rounding
        scale = np.abs(clip_rows(X, bound)).max()
        np.testing.assert_allclose(mean, ref_mean, rtol=0, atol=64 * np.finfo(dtype).eps * scale)
    else:
        assert mean is None


def test_rows_pushed_out_by_the_centring_are_clipped_again(small_blocks):
    # a mean of norm 3 against a bound of 4: many rows inside the bound land past it
    X = np.random.default_rng(1).standard_normal((2000, 5)) * 2.0 + 3.0 / np.sqrt(5)
    mean, C, total = centred_gram(X, 4.0)
    ref = _reference(X, 4.0, True)
    d = clip_rows(X, 4.0) - mean
    assert np.sum(np.einsum("ij,ij->i", d, d) > 16.0) > 100
    np.testing.assert_allclose(C, ref[1], rtol=1e-13, atol=1e-12)
    assert total == pytest.approx(ref[2], rel=1e-13)


@pytest.mark.parametrize("offset, late, shifted, passes", [
    (0.5, 0.0, False, 1),   # centred: the sums about the origin, one pass
    (1e6, 0.0, True, 1),    # far out: about the first block's mean, one pass
    (0.0, 1e3, False, 2),   # a first block unlike the rest: again, centred on the mean
])
def test_the_sums_are_taken_about_a_near_shift(monkeypatch, small_blocks, offset, late, shifted,
                                               passes):
    shifts = []
    sums = float_pass._sums
    monkeypatch.setattr(float_pass, "_sums", lambda *a: shifts.append(a[2]) or sums(*a))
    X = np.random.default_rng(0).standard_normal((5000, 4)) + offset
    X[64:] += late  # past the first block
    mean, C, _ = centred_gram(X, None)
    assert len(shifts) == passes and (shifts[0] is not None) == shifted
    Xc = X - X.mean(axis=0)
    np.testing.assert_allclose(C, Xc.T @ Xc, rtol=1e-11, atol=1e-9 * np.trace(C))


@NON_PRIVATE
@pytest.mark.parametrize("mean, smallest", [(6.0, 1e-5), (3.0, 1e-4), (0.0, 1e-5)])
def test_nonprivate_matches_sklearn_on_small_components(mean, smallest):
    """The uncentred sums' rounding lands on every eigenvalue: the small ones stay exact."""
    X = np.random.default_rng(1).standard_normal((100_000, 6)) * np.geomspace(1.0, smallest, 6)
    X += mean
    ours = PrivatePCA(6, method="analyze_gauss").fit(X)
    ref = PCA(6, svd_solver="full").fit(X)
    np.testing.assert_allclose(ours.explained_variance_, ref.explained_variance_, rtol=1e-9)
    signs = np.sign(np.sum(ours.components_ * ref.components_, axis=1))
    np.testing.assert_allclose(ours.components_ * signs[:, None], ref.components_, atol=1e-9)


def test_a_huge_row_leaves_no_warning():
    X = np.random.default_rng(2).standard_normal((3000, 5))
    X[10] = 1e200
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        mean, C, _ = centred_gram(X, 10.0)
    assert np.all(np.isfinite(C)) and np.all(np.isfinite(mean))


@NON_PRIVATE
def test_nonprivate_matches_sklearn_at_a_large_mean():
    rng = np.random.default_rng(0)
    n, d = 20_000, 6
    X = rng.standard_normal((n, d)) * np.geomspace(3.0, 0.3, d) + 1e6
    ours = PrivatePCA(3, method="analyze_gauss").fit(X)
    ref = PCA(3, svd_solver="full").fit(X)
    signs = np.sign(np.sum(ours.components_ * ref.components_, axis=1))
    np.testing.assert_allclose(ours.components_ * signs[:, None], ref.components_, atol=1e-10)
    np.testing.assert_allclose(ours.explained_variance_, ref.explained_variance_, rtol=1e-10)
    np.testing.assert_allclose(ours.mean_, ref.mean_, rtol=1e-13)
    # the uncentred formula X^T X - n mu mu^T misses that tolerance by far at this mean
    mu = X.mean(axis=0)
    naive = (X.T @ X - n * np.outer(mu, mu)) / (n - 1)
    top = np.linalg.eigvalsh(naive)[::-1][:3]
    assert np.max(np.abs(top / ref.explained_variance_ - 1)) > 1e-6


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_the_pass_allocates_within_its_estimate(dtype):
    X = _rows(40_000, 30, 1.0, dtype)  # clipped rows in every block, rows clipped again
    centred_gram(X[:100], 3.0)  # warm up
    tracemalloc.start()
    centred_gram(X, 3.0)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert peak <= float_pass_bytes(*X.shape), (peak, float_pass_bytes(*X.shape))


def test_a_private_fit_never_takes_the_float_pass(monkeypatch):
    def refuse(*args):
        raise AssertionError("a private fit summed float rows")
    monkeypatch.setattr("dptensor.algorithms.pca_fit.centred_gram", refuse)
    X = np.random.default_rng(0).standard_normal((3000, 8))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        PrivatePCA(2, epsilon=1.0, delta=1e-6, data_norm=4.0, method="analyze_gauss",
                   random_state=0).fit(X)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("bound", [None, 4.0, 2.0])
@pytest.mark.parametrize("d", [1, 7])
def test_the_same_sums_with_numba_or_without(monkeypatch, small_blocks, dtype, bound, d):
    from dptensor.algorithms import compiled

    X = _rows(3001, d, 1.5, dtype)
    X[7] *= 4.0 / np.linalg.norm(X[7])  # a row on the bound: the exact measurement decides
    fast = centred_gram(X, bound)
    monkeypatch.setattr(compiled, "ENABLED", False)
    assert float_pass._kernels() is None
    slow = centred_gram(X, bound)
    for a, b in zip(fast, slow):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("bound, scale", [(1e200, 1.0), (1e-200, 0.4e-200)])
def test_bounds_whose_square_leaves_the_float_range(bound, scale):
    X = np.random.default_rng(3).standard_normal((500, 4)) * scale
    X[0] *= 1e3  # clipped by the tiny bound
    mean, C, total = centred_gram(X, bound)
    ref = _reference(X, bound, True)
    np.testing.assert_allclose(C, ref[1], rtol=1e-12)
    assert total == pytest.approx(ref[2], rel=1e-12)


def test_fortran_ordered_rows():
    X = _rows(3001, 7, 1.5, np.float64)
    for a, b in zip(centred_gram(np.asfortranarray(X), 2.0), centred_gram(X, 2.0)):
        np.testing.assert_allclose(a, b, rtol=1e-13, atol=1e-13)


def test_unclipped_only_where_every_factor_is_one():
    from dptensor.mechanisms.releases import clip_factors, row_squares, unclipped

    rng = np.random.default_rng(5)
    for bound in (1.0, 3.7, 1e-150, 1e150):
        for _ in range(200):
            X = rng.standard_normal((4, 9))
            X *= bound * (1.0 + rng.uniform(-1e-14, 1e-14, 4) * 10 ** rng.uniform(0, 2))[:, None] \
                / np.linalg.norm(X, axis=1)[:, None]
            sq = row_squares(X)
            if unclipped(sq, bound):
                assert np.all(clip_factors(X, bound) == 1.0)
            if unclipped(sq * (1.0 + 1e-15), bound, error=1e-14):  # a rougher measurement
                assert np.all(clip_factors(X, bound) == 1.0)
    assert not unclipped(np.array([0.0, 1.0]), 2.0)  # a zero row is measured rescaled


@pytest.mark.parametrize("method, value, data_norm, match", [
    (m, v, b, text) for m in ("analyze_gauss", "power")
    for v, b, text in ((np.nan, None, "Input X contains NaN"),
                       (np.inf, 3.0, "Input X contains infinity"))
] + [("analyze_gauss", 1e200, None, "overflow")])  # finite: refused where its products are taken
def test_a_fit_without_privacy_refuses_bad_values_before_the_spend(method, value, data_norm,
                                                                   match):
    """Its validation leaves NaN and infinity to the pass (one read of X fewer), which runs
    before the spend: the same error as validation's, and the accountant charged nothing."""
    from dptensor import PrivacyAccountant

    X = np.random.default_rng(4).standard_normal((3000, 5))
    X[2000, 3] = value
    accountant = PrivacyAccountant()
    est = PrivatePCA(2, method=method, data_norm=data_norm, accountant=accountant)
    with pytest.raises(ValueError, match=match):
        est.fit(X)
    assert accountant.history() == [] and not hasattr(est, "components_")


def test_a_fit_without_privacy_is_refused_for_memory_before_its_pass(monkeypatch):
    """The pass runs before the spend: the memory check, which the spend also makes, comes first."""
    import dptensor._memory as memory
    from dptensor._memory import MemoryRefusedError

    passes = []
    monkeypatch.setattr(memory, "available_bytes", lambda: memory.HEADROOM + 1024)
    monkeypatch.setattr(float_pass, "_sums", lambda *a: passes.append(1))
    with pytest.raises(MemoryRefusedError):
        PrivatePCA(2, method="analyze_gauss").fit(np.ones((3000, 5)))
    assert passes == []


@pytest.mark.parametrize("method", ["analyze_gauss", "power"])
@pytest.mark.parametrize("value, row, match", [
    (np.nan, 0, "Input X contains NaN"), (np.inf, 2999, "Input X contains infinity"),
    (-np.inf, 1500, "Input X contains infinity")])
def test_a_private_fit_refuses_nan_and_infinity_before_the_spend(method, value, row, match,
                                                                 monkeypatch):
    """With privacy too, validation leaves NaN and infinity to the first pass (the exact grid
    sums' map meets them, one read of X fewer; the power method's rows are checked by
    validation's own check): the same error wherever the entry lies, nothing charged; on
    finite rows scikit-learn's check of the whole array is not taken (only to word a refusal)."""
    import sklearn.utils.validation as validation

    from dptensor import PrivacyAccountant

    checks = []
    real = validation._assert_all_finite
    monkeypatch.setattr(validation, "_assert_all_finite",
                        lambda X, *a, **k: checks.append(X.shape) or real(X, *a, **k))
    X = np.random.default_rng(4).standard_normal((3000, 5))
    X[row, 3] = value
    accountant = PrivacyAccountant(epsilon=10.0, delta=1e-6)
    est = PrivatePCA(2, method=method, epsilon=1.0, data_norm=3.0, accountant=accountant)
    with pytest.raises(ValueError, match=match):
        est.fit(X)
    assert accountant.history() == [] and not hasattr(est, "components_")
    checks.clear()
    X[row, 3] = 0.0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        est.fit(X)
    assert len(accountant.history()) == 1
    assert checks == ([] if method == "analyze_gauss" else [X.shape])


def test_a_private_fit_takes_its_first_pass_before_the_spend_and_releases_the_same(monkeypatch):
    """The exact grid sums taken before the spend are the ones the releases read: a seeded fit
    gives what the same releases give from sums taken after it (bit for bit), and rows far
    beyond the bound (finite) are clipped, not refused."""
    import dptensor.pca as pca_module

    X = np.random.default_rng(8).standard_normal((4000, 6))
    X[7] *= 1e250  # finite: clipped to the bound by the grid map's scaling
    kwargs = dict(n_components=2, method="analyze_gauss", epsilon=1.0, delta=1e-6, data_norm=2.0,
                  random_state=3)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        before = PrivatePCA(**kwargs).fit(X)
        real = pca_module.exact_rows_fit  # the releases from sums taken after the spend
        monkeypatch.setattr(pca_module, "exact_rows_fit",
                            lambda *a, sums=None, **k: real(*a, **k))
        after = PrivatePCA(**kwargs).fit(X)
    for name in ("components_", "explained_variance_", "mean_", "noise_variance_"):
        assert np.array_equal(getattr(before, name), getattr(after, name)), name


def test_a_private_fit_refuses_what_its_first_pass_meets_even_where_validation_would_not(
        monkeypatch):
    """The grid sums' map met a NaN: the fit refuses before the spend even if validation's own
    check (which words the refusal) let it through, never fitting on after the spend."""
    import dptensor.pca as pca_module
    from dptensor import PrivacyAccountant

    monkeypatch.setattr(pca_module, "check_finite_rows", lambda est, X: None)
    X = np.random.default_rng(2).standard_normal((500, 4))
    X[100, 1] = np.nan
    accountant = PrivacyAccountant(epsilon=10.0, delta=1e-6)
    est = PrivatePCA(2, method="analyze_gauss", epsilon=1.0, data_norm=3.0, accountant=accountant)
    with pytest.raises(ValueError, match="NaN or infinity"):
        est.fit(X)
    assert accountant.history() == []
