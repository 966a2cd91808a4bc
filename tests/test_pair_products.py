"""The restarts' pair products of the packed tensor contraction
(dptensor.algorithms.pair_products): the compiled loop writes the same bits as NumPy's gathers,
and a seeded tensor power fit is the same bit for bit on either path."""
import warnings

import numpy as np
import pytest

from dptensor import PrivateTensorDecomposition
from dptensor.algorithms import pair_products as pp
from dptensor.algorithms.operators import DeflatedTensor, SymmetricTensor, symmetrize_tensor
from dptensor.datasets import make_orthogonal_tensor


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("use_kernel", [True, False])
def test_pair_products_are_the_gathered_products_bit_for_bit(dtype, use_kernel):
    rng = np.random.default_rng(0)
    d, L = 37, 6
    # wide magnitudes and signs, so that any other rounding or order would show
    Ut = (rng.standard_normal((L, d)) * 10.0 ** rng.integers(-6, 6, (L, d))).astype(dtype)
    rows, cols = np.triu_indices(d)
    ref = Ut[:, rows] * Ut[:, cols]
    K = pp.pair_products(Ut, rows, cols, use_kernel=use_kernel)
    assert K.dtype == dtype and K.shape == (L, d * (d + 1) // 2)
    assert np.array_equal(K, ref)
    out = np.empty_like(ref)
    assert pp.pair_products(Ut, rows, cols, out=out, use_kernel=use_kernel) is out
    assert np.array_equal(out, ref)


def test_the_compiled_loop_exists_with_numba():
    pytest.importorskip("numba")
    assert pp.compiled_kernel() is not None


def test_the_contraction_is_the_same_on_both_paths(monkeypatch):
    rng = np.random.default_rng(1)
    T = symmetrize_tensor(rng.standard_normal((15, 15, 15)))
    U = rng.standard_normal((15, 7))
    fast = SymmetricTensor(T).apply(U)
    monkeypatch.setattr(SymmetricTensor, "use_kernel", False)
    assert np.array_equal(fast, SymmetricTensor(T).apply(U))
    np.testing.assert_allclose(fast, np.einsum("abc,bl,cl->al", T, U, U), rtol=1e-12,
                               atol=1e-12)


def test_a_deflated_power_step_is_the_first_part_of_apply_evaluate():
    rng = np.random.default_rng(2)
    T = symmetrize_tensor(rng.standard_normal((9, 9, 9)))
    V = np.linalg.qr(rng.standard_normal((9, 3)))[0].T
    op = DeflatedTensor(SymmetricTensor(T), [2.0, -1.0, 0.5], V)
    U = rng.standard_normal((9, 5))
    assert np.array_equal(op.apply(U), op.apply_evaluate(U)[0])


def _fit(T, **params):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = PrivateTensorDecomposition(3, n_restarts=6, n_iter=12, random_state=3,
                                           **params).fit(T)
    return model.components_, model.eigenvalues_


@pytest.mark.parametrize("epsilon", [None, 3.0])
def test_a_seeded_fit_is_the_same_bit_for_bit_without_the_kernel(monkeypatch, epsilon):
    T, _, _ = make_orthogonal_tensor(20, 3, noise=0.01, random_state=0)
    params = {} if epsilon is None else {"epsilon": epsilon}
    fast = _fit(T, **params)
    monkeypatch.setattr(SymmetricTensor, "use_kernel", False)
    slow = _fit(T, **params)
    for a, b in zip(fast, slow):
        assert np.array_equal(a, b)
