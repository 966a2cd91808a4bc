"""A component's compiled power steps against the step-by-step NumPy loop they replace."""
import numpy as np
import pytest

from dptensor import PrivateTensorDecomposition
from dptensor.algorithms import compiled
from dptensor.algorithms.operators import DeflatedTensor, SymmetricTensor, symmetrize_tensor
from dptensor.algorithms.power import normalize_columns
from dptensor.algorithms.power_steps import deflated_power_steps
from dptensor.algorithms.symmetric_contraction import pack_distinct
from dptensor.datasets import make_orthogonal_tensor
from dptensor.metrics import recovery_error

pytest.importorskip("numba")
pytestmark = pytest.mark.filterwarnings("ignore::dptensor.PrivacyWarning")
RTOL = {np.float64: 1e-12, np.float32: 1e-4}


def _stepwise(op, U, n_steps):
    for _ in range(n_steps):
        U = normalize_columns(op.apply(U))
    return U


def _case(rng, d, k, L, dtype):
    T = symmetrize_tensor(rng.normal(size=(d, d, d))).astype(dtype)
    V = np.linalg.qr(rng.normal(size=(d, max(k, 1))))[0].T[:k]
    lam = rng.uniform(0.5, 2.0, size=k)
    return T, V, lam, normalize_columns(rng.normal(size=(d, L))).astype(dtype)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("k", [0, 3])
def test_compiled_steps_are_the_numpy_steps(dtype, k):
    rng = np.random.default_rng(3)
    T, V, lam, U = _case(rng, 70, k, 10, dtype)
    op = DeflatedTensor(SymmetricTensor(T), lam, V)
    fast = op.compiled_power_steps(U, 3)
    assert fast is not None and fast.dtype == dtype and fast.shape == U.shape
    slow = _stepwise(op, U, 3)
    np.testing.assert_allclose(fast, slow, rtol=0, atol=RTOL[dtype])
    np.testing.assert_allclose(np.linalg.norm(fast, axis=0), 1.0, rtol=RTOL[dtype])


def test_a_zero_column_stays_zero_and_no_step_leaves_u_as_it_was():
    rng = np.random.default_rng(4)
    T, V, lam, U = _case(rng, 64, 2, 8, np.float64)
    U[:, 3] = 0.0
    P = pack_distinct(T)
    out = deflated_power_steps(P, U, lam, V, 2)
    assert np.all(out[:, 3] == 0) and np.all(np.isfinite(out))
    np.testing.assert_array_equal(deflated_power_steps(P, U, lam, V, 0), U)


@pytest.mark.parametrize("L", [7, 20])
def test_restarts_that_take_padded_lanes_or_several_passes_are_left_to_the_caller(L):
    rng = np.random.default_rng(5)
    T, V, lam, U = _case(rng, 64, 1, L, np.float64)
    assert deflated_power_steps(pack_distinct(T), U, lam, V, 1) is None
    assert DeflatedTensor(SymmetricTensor(T), lam, V).compiled_power_steps(U, 1) is None


def test_without_numba_or_below_the_kernel_size_the_caller_steps(monkeypatch):
    rng = np.random.default_rng(6)
    T, V, lam, U = _case(rng, 20, 1, 10, np.float64)
    assert DeflatedTensor(SymmetricTensor(T), lam, V).compiled_power_steps(U, 1) is None
    T, V, lam, U = _case(rng, 64, 1, 10, np.float64)
    monkeypatch.setattr(compiled, "ENABLED", False)
    assert DeflatedTensor(SymmetricTensor(T), lam, V).compiled_power_steps(U, 1) is None


def test_a_fit_through_the_compiled_steps_recovers_what_the_stepwise_fit_does(monkeypatch):
    T, lam, V = make_orthogonal_tensor(80, 4, noise=0.01, random_state=0)
    kwargs = dict(n_restarts=10, n_iter=15, random_state=0)
    fast = PrivateTensorDecomposition(4, **kwargs).fit(T)
    calls = []
    monkeypatch.setattr(SymmetricTensor, "deflated_power_steps",
                        lambda self, *a: calls.append(1))  # None: the caller's steps
    slow = PrivateTensorDecomposition(4, **kwargs).fit(T)
    assert len(calls) == 4  # once per component, then the stepwise loop ran
    np.testing.assert_allclose(fast.components_, slow.components_, rtol=0, atol=1e-10)
    np.testing.assert_allclose(fast.eigenvalues_, slow.eigenvalues_, rtol=1e-10)
    assert np.max(recovery_error(fast.components_, V)) < 0.05


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("scale", [1e160, 1e-170, 1e30, 1e-30, 1.0])
def test_column_norms_neither_overflow_nor_underflow(dtype, scale):
    """Columns far above or below the squares' range have their norms from the column scaled by
    its largest magnitude (no warning, under errstate raise); within it, np.linalg.norm's."""
    from dptensor.algorithms.norms import column_norms

    if not float(np.finfo(dtype).tiny) < scale < float(np.finfo(dtype).max):
        pytest.skip("the scale is not a number of this dtype")
    rng = np.random.default_rng(7)
    Y = rng.normal(size=(40, 5)).astype(dtype)
    Y[:, 1] = 0.0
    with np.errstate(all="raise"):
        norms = column_norms(Y * dtype(scale))
    want = np.linalg.norm(Y.astype(float), axis=0) * scale
    rtol = 1e-5 if dtype == np.float32 else 1e-14
    np.testing.assert_allclose(norms, want.astype(dtype), rtol=rtol)
    if scale == 1.0:
        np.testing.assert_array_equal(norms, np.sqrt(np.add.reduce(Y * Y, axis=0)))


@pytest.mark.parametrize("scale", [1e160, 1e-170])
def test_a_tensor_far_from_unit_scale_is_decomposed_not_zeroed(scale):
    """At 1e160 the power steps' squares overflowed and at 1e-170 they underflowed: every column
    normalised to zero and the fit returned zero components and eigenvalues, saying nothing.
    Both the compiled steps (d >= 64) and the stepwise loop (d < 64) recover the components."""
    for d in (80, 30):
        T, lam, V = make_orthogonal_tensor(d, 3, noise=0.0, random_state=0)
        fit = PrivateTensorDecomposition(3, n_restarts=10, n_iter=15, random_state=0).fit(
            T * scale)
        assert np.max(recovery_error(fit.components_, V)) < 1e-6
        np.testing.assert_allclose(np.sort(fit.eigenvalues_), np.sort(lam) * scale, rtol=1e-8)
