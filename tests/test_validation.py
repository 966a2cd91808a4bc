"""Bad input raises a clear ValueError or TypeError that names the parameter."""
import warnings

import numpy as np
import pytest

from dptensor import PrivacyAccountant
from sklearn.base import BaseEstimator
from dptensor._base import NO_PRIVACY_COST, PrivacyCost, PrivateEstimatorMixin
from dptensor._validation import (check_data_norm, check_delta, check_epsilon, check_finite,
                                  check_positive_int, check_privacy, check_random_generator,
                                  check_symmetric_tensor, zero_nonfinite_rows)
from dptensor.accounting import GaussianEvent, LaplaceEvent, epsilon_of
from expected_warnings import NON_PRIVATE


@pytest.mark.parametrize("bad,exc", [(0.0, ValueError), (-1.0, ValueError), (-np.inf, ValueError),
                                     (np.nan, TypeError), ("1", TypeError), (True, TypeError),
                                     (None, TypeError)])
def test_check_epsilon(bad, exc):
    with pytest.raises(exc, match="epsilon"):
        check_epsilon(bad)
    with pytest.raises(exc, match="my_eps"):
        check_epsilon(bad, name="my_eps")


def test_check_epsilon_accepts_positive_numbers():
    assert check_epsilon(1) == 1.0 and check_epsilon(np.float32(0.5)) == 0.5
    assert check_epsilon(np.inf) == np.inf


def test_zero_d_arrays_are_numbers_and_come_back_plain_floats():
    # np.array(1.0) is what NumPy reductions and scikit-learn give; it was refused as no number
    for value, want in ((np.array(1.0), 1.0), (np.array(2), 2.0), (np.array(np.inf), np.inf),
                        (np.array(0.5, dtype=np.float32), 0.5), (np.float32(0.5), 0.5)):
        got = check_epsilon(value)
        assert type(got) is float and got == want
    got = check_delta(np.array(1e-6))
    assert type(got) is float and got == 1e-6
    assert check_privacy(np.array(1.0), np.array(1e-6)) == (1.0, 1e-6)
    for bad in (np.array(True), np.array(1 + 0j), np.array([1.0]), np.array("1.0"),
                np.array(np.nan)):
        with pytest.raises(TypeError, match="epsilon must be a real number"):
            check_epsilon(bad)
        with pytest.raises(TypeError, match="delta must be a real number"):
            check_delta(bad)
    with pytest.raises(ValueError, match="epsilon must be > 0"):
        check_epsilon(np.array(0.0))
    budget = PrivacyAccountant(np.array(2.0), np.array(1e-5))
    assert type(budget.epsilon) is float and type(budget.delta) is float
    assert repr(budget) == "PrivacyAccountant(epsilon=2.0, delta=1e-05)"


def _zero_d_cases():
    from dptensor import (AdaptivePrivatePCA, PrivatePCA, PrivateTensorCompletion,
                          PrivateTensorDecomposition, StreamingTensorPower)
    from dptensor.latent import PrivateGaussianMixture, PrivateLatentDirichletAllocation
    rng = np.random.default_rng(0)
    X = rng.standard_normal((300, 4))
    X /= np.linalg.norm(X, axis=1, keepdims=True)
    idx = np.stack([rng.integers(0, 20, 400), rng.integers(0, 15, 400)], axis=1)
    ratings = (idx, rng.uniform(1, 5, 400))
    docs = (rng.poisson(1.0, (200, 10)).astype(float),)
    shaped = dict(value_range=(1, 5), shape=(20, 15))
    return {
        "pca": (lambda **k: PrivatePCA(1, data_norm=1.0, **k), (X,)),
        "adaptive_pca": (lambda **k: AdaptivePrivatePCA(data_norm=1.0, n_iter=1, **k), (X,)),
        "tensor": (lambda **k: PrivateTensorDecomposition(1, data_norm=1.0, n_restarts=2,
                                                          n_iter=2, **k), (X,)),
        "stream": (lambda **k: StreamingTensorPower(1, data_norm=1.0, n_restarts=2, n_iter=2,
                                                    batch_size=50, **k), (X,)),
        "gmm": (lambda **k: PrivateGaussianMixture(1, data_norm=1.0, **k), (X,)),
        "lda": (lambda **k: PrivateLatentDirichletAllocation(2, **k), docs),
        "completion": (lambda **k: PrivateTensorCompletion(rank=1, **shaped, **k), ratings),
        "completion_input": (lambda **k: PrivateTensorCompletion(perturbation="input", **shaped,
                                                                 **k), ratings),
        "completion_user": (lambda **k: PrivateTensorCompletion(privacy_unit="user", **shaped,
                                                                **k), ratings),
    }


@pytest.mark.filterwarnings("ignore::UserWarning")  # small private fits: noise-dominated
@pytest.mark.parametrize("name", list(_zero_d_cases()))
def test_every_estimator_takes_a_zero_d_epsilon_and_delta_and_records_floats(name):
    make, data = _zero_d_cases()[name]
    budget = PrivacyAccountant(epsilon=np.array(5.0), delta=np.array(1e-5))
    est = make(epsilon=np.array(1.0), delta=np.array(1e-5), accountant=budget,
               random_state=0).fit(*data)
    (entry,) = budget.history()
    assert type(entry.epsilon) is float and type(entry.delta) is float
    assert entry.epsilon == pytest.approx(1.0, rel=1e-4) and entry.delta == 1e-5
    assert type(est.privacy_cost_.epsilon) is float and type(est.privacy_cost_.delta) is float
    assert "epsilon=1," in entry.label
    # epsilon=np.array(np.inf) is the fit without privacy, as epsilon=np.inf is
    budget = PrivacyAccountant()
    est = make(epsilon=np.array(np.inf), accountant=budget, random_state=0).fit(*data)
    assert budget.history()[0].mechanism == "none" and not est.privacy_cost_.private


@pytest.mark.parametrize("bad,exc", [(-1e-9, ValueError), (1.0, ValueError), (2.0, ValueError),
                                     (np.nan, TypeError), ("0.1", TypeError), (np.inf, ValueError)])
def test_check_delta(bad, exc):
    with pytest.raises(exc, match="delta"):
        check_delta(bad)


def test_check_privacy():
    assert check_privacy(1.0, 1e-6) == (1.0, 1e-6)
    assert check_privacy(1.0, None) == (1.0, 1e-5)  # the default delta
    assert check_privacy(1.0, None, PrivacyAccountant(2.0, delta=1e-7)) == (1.0, 1e-7)
    assert check_privacy(np.inf, 0.0) == (np.inf, 0.0)  # no privacy: delta is moot
    assert check_privacy(1.0, 0.0, gaussian=False) == (1.0, 0.0)  # pure mechanisms
    with pytest.raises(ValueError, match="delta must be > 0"):
        check_privacy(1.0, 0.0)
    with pytest.raises(TypeError, match="accountant"):
        check_privacy(1.0, None, accountant="budget")
    with pytest.raises(ValueError, match="epsilon"):
        check_privacy(-1.0, 1e-5)
    with pytest.raises(ValueError, match="delta"):
        check_privacy(1.0, 1.5)


@pytest.mark.parametrize("epsilon,delta,exc,name", [(0.0, 1e-5, ValueError, "epsilon"),
                                                    (-2.0, 1e-5, ValueError, "epsilon"),
                                                    (np.nan, 1e-5, TypeError, "epsilon"),
                                                    (1.0, 1.0, ValueError, "delta"),
                                                    (1.0, -0.1, ValueError, "delta"),
                                                    (1.0, np.nan, TypeError, "delta")])
def test_accountant_rejects_bad_budgets(epsilon, delta, exc, name):
    with pytest.raises(exc, match=name):
        PrivacyAccountant(epsilon, delta)


def test_accountant_with_zero_delta_prices_pure_spends_only():
    acc = PrivacyAccountant(1.0, delta=0.0)
    acc.spend(LaplaceEvent(0.4))
    assert acc.spent() == (pytest.approx(0.4), 0.0)
    # A Gaussian release has no pure-epsilon guarantee: infinitely expensive, so refused.
    from dptensor import BudgetExceededError
    with pytest.raises(BudgetExceededError, match="requested epsilon=inf"):
        acc.spend(GaussianEvent(100.0))


@pytest.mark.parametrize("bad", [0, -3, 0.0])
def test_event_parameters_are_checked(bad):
    with pytest.raises((ValueError, TypeError)):
        GaussianEvent(noise_multiplier=bad)
    with pytest.raises(ValueError, match="epsilon"):
        LaplaceEvent(epsilon=bad)
    with pytest.raises(ValueError, match="count"):
        GaussianEvent(1.0, count=bad)


def test_check_positive_int():
    assert check_positive_int(3, "n_components") == 3
    assert check_positive_int(np.int64(2), "k") == 2
    with pytest.raises(ValueError, match="n_components must be >= 1"):
        check_positive_int(0, "n_components")
    with pytest.raises(TypeError, match="n_iter"):
        check_positive_int(2.0, "n_iter")
    with pytest.raises(TypeError, match="n_iter"):
        check_positive_int(True, "n_iter")
    with pytest.raises(ValueError, match="batch_size must be >= 2"):
        check_positive_int(1, "batch_size", minimum=2)


def test_check_data_norm():
    assert check_data_norm(2, 1.0) == 2.0
    assert check_data_norm(None, np.inf) is None
    with pytest.raises(ValueError, match="data_norm is required"):
        check_data_norm(None, 1.0)
    for bad in (0.0, -1.0, np.inf, np.nan, True, "1"):
        with pytest.raises(ValueError, match="data_norm"):
            check_data_norm(bad, 1.0)


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_check_finite(bad):
    X = np.ones((3, 2))
    X[1, 1] = bad
    with pytest.raises(ValueError, match="X contains NaN or infinity"):
        check_finite(X)
    with pytest.raises(ValueError, match="tensor"):
        check_finite(X, name="tensor")


def test_check_symmetric_tensor(rng):
    A = rng.normal(size=(4, 4, 4))
    S = (A + A.transpose(0, 2, 1) + A.transpose(1, 0, 2) + A.transpose(1, 2, 0) + A.transpose(2, 0, 1)
         + A.transpose(2, 1, 0)) / 6
    assert check_symmetric_tensor(S) is S
    with pytest.raises(ValueError, match="X is not a symmetric tensor"):
        check_symmetric_tensor(A)
    # A single asymmetric entry is caught.
    B = S.copy()
    B[0, 1, 2] += 1e-3
    with pytest.raises(ValueError, match="not a symmetric"):
        check_symmetric_tensor(B, name="T")
    np.testing.assert_allclose(check_symmetric_tensor(A, symmetrize=True), S, atol=1e-14)
    # The error names the first transposition that changes the tensor.
    first_two = A + A.transpose(1, 0, 2)  # symmetric in its first two axes only
    with pytest.raises(ValueError, match=r"axes \(0, 2, 1\)"):
        check_symmetric_tensor(first_two)
    with pytest.raises(ValueError, match=r"axes \(1, 0, 2\)"):
        check_symmetric_tensor(A + A.transpose(0, 2, 1))
    # float32 is kept and checked at float32 precision.
    S32 = S.astype(np.float32)
    assert check_symmetric_tensor(S32).dtype == np.float32
    # Integers are promoted to float64.
    assert check_symmetric_tensor(np.ones((2, 2, 2), dtype=int)).dtype == np.float64


@pytest.mark.parametrize("shape", [(4, 4), (4, 4, 3), (4, 4, 4, 4), (4,)])
def test_check_symmetric_tensor_rejects_wrong_shapes(shape):
    with pytest.raises(ValueError, match=r"X must be a symmetric d x d x d tensor"):
        check_symmetric_tensor(np.zeros(shape))


def test_check_symmetric_tensor_rejects_nan():
    T = np.zeros((3, 3, 3))
    T[0, 0, 0] = np.nan
    with pytest.raises(ValueError, match="NaN"):
        check_symmetric_tensor(T)


def test_check_random_generator():
    assert isinstance(check_random_generator(None), np.random.Generator)
    g = np.random.default_rng(1)
    assert check_random_generator(g) is g
    a = check_random_generator(5).normal(size=3)
    np.testing.assert_array_equal(a, check_random_generator(5).normal(size=3))
    rs = check_random_generator(np.random.RandomState(0))
    assert isinstance(rs, np.random.Generator)
    # OS entropy: two unseeded generators differ.
    assert check_random_generator(None).integers(2**62) != check_random_generator(None).integers(2**62)
    for bad in ("seed", 1.5, True):
        with pytest.raises(TypeError, match="random_state"):
            check_random_generator(bad)


# ---------------------------------------------------------------- the estimator mixin
class _Est(PrivateEstimatorMixin, BaseEstimator):
    def __init__(self, epsilon=1.0, delta=None, accountant=None, random_state=None):
        self.epsilon, self.delta = epsilon, delta
        self.accountant, self.random_state = accountant, random_state


def test_mixin_spend_records_and_returns_the_cost():
    acc = PrivacyAccountant(5.0, delta=1e-6)
    est = _Est(epsilon=1.0, accountant=acc, random_state=0)
    eps, delta = est._privacy_target()
    assert (eps, delta) == (1.0, 1e-6)
    event = GaussianEvent(10.0, 4)
    cost, rng = est._spend(event, entropy=est._entropy(), delta=delta, noise_multiplier=10.0, n_queries=4,
                           calibration="exact", memory=(0, ""))
    assert isinstance(cost, PrivacyCost) and cost.private and isinstance(rng, np.random.Generator)
    assert cost.epsilon == pytest.approx(epsilon_of(event, 1e-6)) and cost.event is event
    assert acc.history()[0].label == "_Est(epsilon=1)"
    # Without an accountant the cost is still priced, nothing recorded anywhere.
    alone, _ = _Est(epsilon=1.0)._spend(event, entropy=0, delta=1e-5, noise_multiplier=10.0, n_queries=4,
                                        calibration="exact", memory=(0, ""))
    assert alone.epsilon == pytest.approx(epsilon_of(event, 1e-5))
    assert not NO_PRIVACY_COST.private

    def draw(est):
        cost, rng = est._spend(event, entropy=est._entropy(), delta=1e-5, memory=(0, ""))
        return rng.normal(size=2)
    # Without an accountant the same seed and public parameters give the same stream; another
    # epsilon (another public description) gives another.
    np.testing.assert_array_equal(draw(_Est(random_state=3)), draw(_Est(random_state=3)))
    assert not np.array_equal(draw(_Est(random_state=3)), draw(_Est(epsilon=2.0, random_state=3)))


def test_mixin_target_names_bad_parameters():
    with pytest.raises(ValueError, match="epsilon"):
        _Est(epsilon=0.0)._privacy_target()
    with pytest.raises(ValueError, match="delta"):
        _Est(delta=1.0)._privacy_target()
    with pytest.raises(ValueError, match="delta must be > 0"):
        _Est(delta=0.0)._privacy_target()


def _estimators_for_bad_input():
    from dptensor import (AdaptivePrivatePCA, PrivatePCA, PrivateTensorCompletion, PrivateTensorDecomposition,
                          StreamingTensorPower)
    from dptensor.latent import PrivateGaussianMixture, PrivateLatentDirichletAllocation

    return [PrivatePCA(1, epsilon=1.0, data_norm=1.0), AdaptivePrivatePCA(1, epsilon=1.0, data_norm=1.0),
            PrivateTensorDecomposition(1, epsilon=1.0, data_norm=1.0),
            StreamingTensorPower(1, epsilon=1.0, data_norm=1.0),
            PrivateGaussianMixture(1, epsilon=1.0, data_norm=1.0),
            PrivateLatentDirichletAllocation(1, epsilon=1.0),
            PrivateTensorCompletion(rank=1, value_range=(0, 1), epsilon=1.0)]


@pytest.mark.parametrize("estimator", _estimators_for_bad_input(), ids=lambda e: type(e).__name__)
def test_no_input_error_quotes_the_data(estimator):
    """An error is released too: scikit-learn's checks print a 1-D array in full, quote a string
    they cannot convert and print complex data. Every estimator refuses these, before any spend,
    in words that name only the shape or dtype."""
    secret = 0.987654321
    text = "the patient's diagnosis"
    bad = [np.full(7, secret), np.array([[secret, 1.0], [text, 2.0]], dtype=object),
           np.array([[text, "b"], ["c", "d"]]), np.full((4, 3), secret + 1j)]
    for X in bad:
        budget = PrivacyAccountant(epsilon=10.0, delta=1e-5)
        estimator.set_params(accountant=budget)
        with pytest.raises((ValueError, TypeError)) as error:
            estimator.fit(X, np.ones(len(X)))
        message = str(error.value)
        assert "98765" not in message and "patient" not in message and "array=" not in message, message
        assert budget.history() == []


def test_the_data_check_reads_no_value_of_an_array_with_a_dtype():
    """check_numeric_array decides from the dtype and the shape: a lazy (Dask) array is not computed
    by it (an estimator that takes Dask rows computes them once, where it needs them)."""
    da = pytest.importorskip("dask.array")
    from dptensor._validation import check_numeric_array

    computed = []

    def spy(block):
        if block.size:  # (dask calls it once on an empty block to learn the result type)
            computed.append(block.shape)
        return block

    X = da.from_array(np.ones((6, 3)), chunks=(2, 3)).map_blocks(spy, dtype=float)
    assert check_numeric_array(X) is X and computed == []
    with pytest.raises(ValueError, match="Complex data not supported"):
        check_numeric_array(X.astype(complex))
    with pytest.raises(ValueError, match="must be 2-D"):
        check_numeric_array(X[:, 0])
    assert computed == []


@NON_PRIVATE
def test_numbers_as_text_or_objects_still_fit_and_text_is_refused_quietly():
    """What scikit-learn accepted before the quiet checks still fits (numbers held as objects or as
    text convert); text that is not a number is refused without being quoted."""
    from dptensor import PrivatePCA

    rows = [["1.5", "2"], ["3", "4"], ["5", "6.5"], ["7", "8"]]
    as_text = PrivatePCA(1, random_state=0).fit(np.array(rows)).components_
    as_objects = PrivatePCA(1, random_state=0).fit(np.array(rows, dtype=object)).components_
    as_floats = PrivatePCA(1, random_state=0).fit(np.array(rows, dtype=float)).components_
    np.testing.assert_allclose(as_text, as_floats)
    np.testing.assert_allclose(as_objects, as_floats)
    with pytest.raises(ValueError, match="must hold real numbers") as error:
        PrivatePCA(1).fit(np.array([["1.5", "secret"], ["3", "4"]]))
    assert "secret" not in str(error.value)


@pytest.mark.parametrize("data_norm", [1e-300, 1e300])
@pytest.mark.parametrize("name", ["PrivatePCA", "AdaptivePrivatePCA", "PrivateTensorDecomposition",
                                  "StreamingTensorPower", "PrivateGaussianMixture"])
def test_data_norm_out_of_float_range_refused_before_the_spend(name, data_norm):
    # Its square or cube over/underflowed after the spend (OverflowError, ZeroDivisionError): the
    # budget was lost for a fit that released nothing. Now refused with the ledger unchanged.
    import dptensor
    accountant = PrivacyAccountant(epsilon=10.0, delta=1e-6)
    est = getattr(dptensor, name)(epsilon=1.0, delta=1e-6, data_norm=data_norm, accountant=accountant,
                                  random_state=0)
    X = np.random.default_rng(0).standard_normal((20, 3))
    with pytest.raises(ValueError, match="data_norm must lie in"):
        est.fit(X)
    assert accountant.spent() == (0.0, 0.0)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_zero_nonfinite_rows_keeps_every_finite_row_whose_sum_overflows(dtype):
    # The map first looks at row sums; a finite row that sums to infinity is still finite and kept.
    # It runs after a stream's spend, so it must be silent under any floating-point settings.
    top = np.finfo(dtype).max
    X = np.array([[top, top], [1, np.nan], [np.inf, -np.inf], [1, 2], [-top, -top], [np.inf, 1]],
                 dtype=dtype)
    with np.errstate(all="raise"), warnings.catch_warnings():
        warnings.simplefilter("error")
        Z = zero_nonfinite_rows(X)
    expected = X.copy()
    expected[[1, 2, 5]] = 0
    assert Z.dtype == dtype and np.array_equal(Z, expected)
    assert np.isnan(X[1, 1])  # a copy: the caller's rows are left as they were
    finite = X[[0, 3, 4]]
    assert zero_nonfinite_rows(finite) is finite  # nothing to map: no copy


@NON_PRIVATE
def test_a_zero_d_infinite_epsilon_is_no_privacy_where_it_is_read_before_validation():
    # A user-level completion's preview reads epsilon before check_epsilon does (no public shape
    # needed without privacy); a PCA's choice to check NaN in its pass no longer reads it (with
    # privacy or without, its first pass checks them), and epsilon=np.array(inf) is still none
    from dptensor import PrivatePCA, PrivateTensorCompletion
    from dptensor.algorithms.pca_fit import finite_in_pass
    assert finite_in_pass(np.zeros((3, 2)), "data")
    for eps in (np.inf, np.array(np.inf)):
        cost = PrivateTensorCompletion(privacy_unit="user", epsilon=eps,
                                       value_range=(1, 5)).privacy_cost(n_samples=100,
                                                                        n_features=2)
        assert not cost.private
        pca = PrivatePCA(1, epsilon=eps).fit(np.arange(6.0).reshape(3, 2))
        assert not pca.privacy_cost_.private


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("d", [1, 2, 5, 17])
def test_the_compiled_symmetry_check_is_the_slabs(d, dtype, monkeypatch):
    """The one-pass compiled check finds the slabs' maxima exactly, refuses every non-finite
    entry (wherever it lies) and a single asymmetric entry; a transposed view takes the slabs."""
    from dptensor.algorithms import compiled
    from dptensor.algorithms.operators import symmetrize_tensor
    from dptensor.algorithms import symmetry
    from dptensor.algorithms.symmetry import symmetry_gaps

    if not compiled.available():
        pytest.skip("numba is not installed")
    monkeypatch.setattr(symmetry, "KERNEL_MIN_D", 1)  # small cubes walk every edge
    rng = np.random.default_rng(d)
    S = symmetrize_tensor(rng.standard_normal((d, d, d))).astype(dtype)
    cases = {"symmetric": S}
    for name, where, value in (("asymmetric", (0, d - 1, 0), 1e-3), ("nan", (d - 1, 0, 0), np.nan),
                               ("inf", (0, 0, d - 1), -np.inf)):
        cases[name] = S.copy()
        cases[name][where] += value
    for name, T in cases.items():
        fast = symmetry_gaps(T)
        monkeypatch.setattr(compiled, "ENABLED", False)
        plain = symmetry_gaps(T)
        monkeypatch.setattr(compiled, "ENABLED", True)
        assert fast[0] == plain[0] == (name in ("symmetric", "asymmetric")), name
        if fast[0]:
            assert fast == plain == symmetry_gaps(np.asfortranarray(T)), name
        if name == "asymmetric" and d > 1:
            assert fast[2] > 0 and fast[3] > 0
    for name in ("nan", "inf"):
        with pytest.raises(ValueError, match="contains NaN or infinity"):
            check_symmetric_tensor(cases[name])
