"""Operators against np.einsum references on random inputs, in float64 and float32."""
import numpy as np
import pytest

from dptensor.algorithms.operators import (DeflatedTensor, DenseMatrix, GramMatrix, SymmetricTensor, ThirdMoment,
                                 moment_tensor, symmetrize_tensor)

DTYPES = [np.float64, np.float32]
RTOL = {np.float64: 1e-10, np.float32: 2e-4}


def _close(actual, expected, dtype):
    scale = np.max(np.abs(expected))
    np.testing.assert_allclose(actual, expected, rtol=0, atol=RTOL[dtype] * scale)


def _sym(rng, d, dtype):
    return symmetrize_tensor(rng.normal(size=(d, d, d))).astype(dtype)


def _refs(T, U):
    """T(I,U,U) and T(U,U,U) computed in float64 by einsum."""
    T, U = T.astype(float), U.astype(float)
    return np.einsum("abc,bl,cl->al", T, U, U), np.einsum("abc,al,bl,cl->l", T, U, U, U)


def test_symmetrize_tensor_is_symmetric_projection(rng):
    A = rng.normal(size=(5, 5, 5))
    S = symmetrize_tensor(A)
    for axes in [(1, 0, 2), (0, 2, 1), (2, 0, 1)]:
        np.testing.assert_allclose(S, S.transpose(axes), atol=1e-14)
    np.testing.assert_allclose(symmetrize_tensor(S), S, atol=1e-14)
    # The symmetric part agrees with A on any u (x) u (x) u.
    u = rng.normal(size=5)
    assert np.einsum("abc,a,b,c", S, u, u, u) == pytest.approx(np.einsum("abc,a,b,c", A, u, u, u))


@pytest.mark.parametrize("dtype", DTYPES)
def test_symmetric_tensor(rng, dtype):
    d, L = 11, 7
    T = _sym(rng, d, dtype)
    U = rng.normal(size=(d, L)).astype(dtype)
    op = SymmetricTensor(T)
    ref_apply, ref_eval = _refs(T, U)
    assert op.shape == (d, d, d) and op.d == d
    _close(op.apply(U), ref_apply, dtype)
    _close(op.evaluate(U), ref_eval, dtype)
    TU, tu = op.apply_evaluate(U)
    _close(TU, ref_apply, dtype)
    _close(tu, ref_eval, dtype)
    assert op.apply(U).dtype == dtype
    # A single column gives the same as the batch.
    _close(op.apply(U[:, :1])[:, 0], ref_apply[:, 0], dtype)


@pytest.mark.parametrize("dtype", DTYPES)
def test_moment_tensor(rng, dtype):
    n, d = 60, 6
    X = rng.normal(size=(n, d)).astype(dtype)
    M = moment_tensor(X)
    ref = np.einsum("ia,ib,ic->abc", X.astype(float), X, X) / n
    assert M.shape == (d, d, d) and M.dtype == dtype
    _close(M, ref, dtype)


@pytest.mark.parametrize("dtype", DTYPES)
def test_moment_tensor_is_the_same_on_the_compiled_and_numpy_paths(rng, dtype, monkeypatch):
    """The compiled Khatri-Rao products are NumPy's broadcast, bit for bit, so the one GEMM per
    chunk, and the tensor, are too; and both are the chunked sum as it was written before."""
    from dptensor.algorithms import compiled, operators

    pytest.importorskip("numba")
    for n, d in ((3000, 10), (700, 33), (1, 1)):
        X = (rng.normal(size=(n, d)) * rng.uniform(0, 4, (n, 1))).astype(dtype)
        ref = np.zeros((d * d, d), dtype=np.float64)  # the broadcast, chunk by chunk
        step = operators.moment_chunk_rows(d)
        for start in range(0, n, step):
            Xc = X[start:start + step].astype(np.float64)
            ref += (Xc[:, :, None] * Xc[:, None, :]).reshape(len(Xc), d * d).T @ Xc
        fast = moment_tensor(X, np.float64)
        assert compiled._KERNELS.get("khatri_rao") is not None  # the compiled path ran
        monkeypatch.setattr(compiled, "ENABLED", False)
        plain = moment_tensor(X, np.float64)
        monkeypatch.setattr(compiled, "ENABLED", True)
        assert np.array_equal(fast, plain) and np.array_equal(fast, (ref / n).reshape(d, d, d))
        assert np.array_equal(moment_tensor(X), _numpy_moment(X, monkeypatch))


def test_moment_sum_over_blocks_of_any_lengths_is_moment_tensor_bit_for_bit(rng):
    from dptensor.algorithms.operators import MomentSum, moment_chunk_rows

    d = 7
    step = moment_chunk_rows(d)
    X = rng.normal(size=(5 * step + 17, d)) * rng.uniform(0, 3, (5 * step + 17, 1))
    cuts = [0, 1, step - 3, step + 2, 3 * step, 3 * step, 4 * step + 5, len(X)]
    acc = MomentSum(d)
    for lo, hi in zip(cuts[:-1], cuts[1:]):  # straddling chunks, empty and whole-chunk blocks
        acc.add(X[lo:hi])
    assert np.array_equal(acc.mean(), moment_tensor(X))
    one = MomentSum(d)
    one.add(X.astype(np.float32))  # widened as moment_tensor(X32, float64) widens
    assert np.array_equal(one.mean(), moment_tensor(X.astype(np.float32), np.float64))


def _numpy_moment(X, monkeypatch):
    from dptensor.algorithms import compiled

    with monkeypatch.context() as m:
        m.setattr(compiled, "ENABLED", False)
        return moment_tensor(X)


@pytest.mark.parametrize("dtype", DTYPES)
def test_third_moment_is_the_implicit_moment_tensor(rng, dtype):
    n, d, L = 80, 9, 5
    X = rng.normal(size=(n, d)).astype(dtype)
    U = rng.normal(size=(d, L)).astype(dtype)
    op = ThirdMoment(X)
    dense = np.einsum("ia,ib,ic->abc", X.astype(float), X, X) / n
    ref_apply, ref_eval = _refs(dense, U)
    assert op.shape == (d, d, d) and op.n == n
    _close(op.apply(U), ref_apply, dtype)
    _close(op.evaluate(U), ref_eval, dtype)
    TU, tu = op.apply_evaluate(U)
    _close(TU, ref_apply, dtype)
    _close(tu, ref_eval, dtype)
    assert TU.dtype == dtype and tu.dtype == dtype


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("base_kind", ["dense", "moment"])
def test_deflated_tensor_matches_the_dense_deflated_tensor(rng, dtype, base_kind):
    n, d, L, k = 70, 8, 6, 3
    X = rng.normal(size=(n, d)).astype(dtype)
    T = moment_tensor(X) if base_kind == "dense" else None
    base = SymmetricTensor(T) if base_kind == "dense" else ThirdMoment(X)
    dense = np.einsum("ia,ib,ic->abc", X.astype(float), X, X) / n
    V = np.linalg.qr(rng.normal(size=(d, k)))[0].T  # (k, d) orthonormal components
    lam = rng.uniform(0.5, 2.0, size=k)
    deflated = dense - np.einsum("j,ja,jb,jc->abc", lam, V, V, V)
    U = rng.normal(size=(d, L)).astype(dtype)
    op = DeflatedTensor(base, lam, V)
    ref_apply, ref_eval = _refs(deflated, U)
    _close(op.apply(U), ref_apply, dtype)
    _close(op.evaluate(U), ref_eval, dtype)
    TU, tu = op.apply_evaluate(U)
    _close(TU, ref_apply, dtype)
    _close(tu, ref_eval, dtype)
    assert TU.dtype == dtype


def test_deflated_tensor_with_nothing_deflated_is_the_base(rng):
    T = _sym(rng, 5, np.float64)
    U = rng.normal(size=(5, 3))
    op = DeflatedTensor(SymmetricTensor(T), [], np.zeros((0, 5)))
    np.testing.assert_array_equal(op.apply(U), SymmetricTensor(T).apply(U))


def test_deflating_an_orthogonal_tensor_removes_its_components(rng):
    # T = sum_i lambda_i v_i^(x)3; deflating all k components leaves the zero operator.
    d, k = 7, 3
    V = np.linalg.qr(rng.normal(size=(d, k)))[0].T
    lam = np.array([3.0, 2.0, 1.0])
    T = np.einsum("j,ja,jb,jc->abc", lam, V, V, V)
    U = rng.normal(size=(d, 4))
    np.testing.assert_allclose(DeflatedTensor(SymmetricTensor(T), lam, V).apply(U), 0, atol=1e-12)
    # Power-step fixed points: T(I, v, v) = lambda v.
    np.testing.assert_allclose(SymmetricTensor(T).apply(V.T), V.T * lam, atol=1e-12)


@pytest.mark.parametrize("dtype", DTYPES)
def test_gram_matrix(rng, dtype):
    X = rng.normal(size=(50, 8)).astype(dtype)
    Q = rng.normal(size=(8, 3)).astype(dtype)
    op = GramMatrix(X)
    assert op.shape == (8, 8)
    ref = np.einsum("ia,ib,bl->al", X.astype(float), X, Q)
    out = op.matmat(Q)
    assert out.dtype == dtype
    _close(out, ref, dtype)


@pytest.mark.parametrize("dtype", DTYPES)
def test_dense_matrix(rng, dtype):
    A = rng.normal(size=(8, 8)).astype(dtype)
    Q = rng.normal(size=(8, 3)).astype(dtype)
    op = DenseMatrix(A)
    assert op.shape == (8, 8)
    out = op.matmat(Q)
    assert out.dtype == dtype
    _close(out, np.einsum("ab,bl->al", A.astype(float), Q), dtype)
