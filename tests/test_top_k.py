"""Top-k eigensolvers on released matrices: the same subspace as the dense path, no d^3 solve.

Each replaced site is run twice on the same seed, once on its top-k path and once with the
dense path forced (the public rule patched to say no): the released noise is the same draw
(the solver reads no generator), so the two must agree to the solver's tolerance. On a noisy
release that tolerance is a share of the noise's norm (``NOISE_FRACTION``), not rounding: the
two then agree to well within the error the noise itself makes (measured against the truth),
not bit for bit. A second check per site makes every dense LAPACK eigendecomposition raise: the
top-k path must not need one.
"""

import numpy as np
import pytest
import scipy.linalg

from dptensor.algorithms import power
from dptensor.algorithms.completion import spectral, user_level
from dptensor.algorithms.eigen import NOISE_FRACTION, top_k_eigh, use_top_k


def subspace_distance(A, B):
    """``sin`` of the largest principal angle between the column spans of ``A`` and ``B``."""
    Qa, Qb = np.linalg.qr(A)[0], np.linalg.qr(B)[0]
    return float(np.linalg.norm(Qa - Qb @ (Qb.T @ Qa), 2))


def released_like(d, k, seed, *, negative=False, top=8.0, bottom=5.0):
    """A spiked symmetric matrix plus a symmetric Gaussian release's noise (off-diagonal std 1:
    norm about ``2 sqrt(d)``); spikes from ``top`` to ``bottom`` times ``sqrt(d)``."""
    rng = np.random.default_rng(seed)
    U = np.linalg.qr(rng.standard_normal((d, k)))[0]
    spikes = np.linspace(top, bottom, k) * np.sqrt(d)
    if negative:  # an indefinite matrix whose largest-magnitude eigenvalue is negative
        spikes[0] = -spikes[0]
    G = rng.standard_normal((d, d))
    return (U * spikes) @ U.T + (G + G.T) / np.sqrt(2.0), U


def no_dense(monkeypatch, d):
    """Every dense eigendecomposition of a d x d matrix the sites could call raises (the small
    projected matrix of a Krylov method's Rayleigh-Ritz step is solved densely, and may be)."""
    def refusing(dense):
        def refuse(a, *args, **kwargs):
            if np.shape(a)[0] >= d:
                raise AssertionError("a dense d x d eigendecomposition on the top-k path")
            return dense(a, *args, **kwargs)
        return refuse
    monkeypatch.setattr(np.linalg, "eigh", refusing(np.linalg.eigh))
    monkeypatch.setattr(scipy.linalg, "eigh", refusing(scipy.linalg.eigh))


def test_rule_is_public_and_keeps_small_or_wide_problems_dense():
    assert use_top_k(9066, 3) and use_top_k(500, 50)
    assert not use_top_k(499, 3) and not use_top_k(1000, 101) and not use_top_k(1000, 0)


@pytest.mark.parametrize("order", ["algebraic", "magnitude"])
def test_solver_matches_lapack_in_the_same_order(order):
    A, _ = released_like(700, 4, 0, negative=True)
    w, V = top_k_eigh(A, 4, order=order)
    full_w, full_V = np.linalg.eigh(A)
    key = -full_w if order == "algebraic" else -np.abs(full_w)
    idx = np.argsort(key, kind="stable")[:4]
    np.testing.assert_allclose(w, full_w[idx], rtol=1e-9)
    assert subspace_distance(V, full_V[:, idx]) < 1e-6
    if order == "algebraic":  # the negative spike is no algebraic top eigenvalue
        assert np.all(w > 0)
    else:
        assert w[0] < 0


def test_solver_is_deterministic_and_reads_no_generator():
    A, _ = released_like(600, 3, 1)
    w1, V1 = top_k_eigh(A, 3)
    w2, V2 = top_k_eigh(A, 3)
    np.testing.assert_array_equal(w1, w2)
    np.testing.assert_array_equal(V1, V2)


def test_spectral_start_basis_agrees_with_dense(monkeypatch):
    M, U = released_like(800, 3, 2)
    fast = spectral._top_vectors(M, 3)[1]
    monkeypatch.setattr(spectral, "use_top_k", lambda d, k: False)
    dense = spectral._top_vectors(M, 3)[1]
    assert fast.shape == dense.shape == (800, 3)
    assert subspace_distance(fast, dense) < 1e-6
    assert subspace_distance(fast, U) < 0.3  # and it is the signal's subspace


def test_spectral_start_basis_needs_no_dense_solve(monkeypatch):
    M, _ = released_like(800, 3, 3)
    no_dense(monkeypatch, 800)
    assert spectral._top_vectors(M, 3)[1].shape == (800, 3)


def _user_level_data(seed, n_users=400, n_items=600, per_user=60, rank=3):
    """Ratings-like residuals of a rank-3 model: each user rates ``per_user`` items."""
    rng = np.random.default_rng(seed)
    A = rng.standard_normal((n_users, rank))
    B = rng.standard_normal((n_items, rank))
    users = np.repeat(np.arange(n_users), per_user)
    items = np.concatenate([rng.choice(n_items, per_user, replace=False)
                            for _ in range(n_users)])
    resid = np.clip(0.15 * np.einsum("ek,ek->e", A[users], B[items]), -0.5, 0.5)
    return np.stack([users, items], axis=1), resid, (n_users, n_items), per_user


def _private_start(data, seed, rank=3, z=0.05):
    X, resid, shape, m = data
    return user_level.private_start(X, resid, shape, m, rank, z, np.random.default_rng(seed),
                                    0.5)[0]


def test_user_level_start_agrees_with_dense(monkeypatch):
    data = _user_level_data(4)
    fast = _private_start(data, 5)
    monkeypatch.setattr(user_level, "use_top_k", lambda d, k: False)
    dense = _private_start(data, 5)
    kept = np.linalg.norm(dense, axis=0) > 0
    assert kept.sum() == 3  # every direction above the noise's edge, on both paths
    np.testing.assert_array_equal(np.linalg.norm(fast, axis=0) > 0, kept)
    # resolved to a share of the released noise's norm, not to rounding: the two start bases
    # differ by far less than either's distance to the noiseless matrix's (the noise's own error)
    exact = _private_start(data, 5, z=0.0)
    noise_error = subspace_distance(dense, exact)
    assert subspace_distance(fast, dense) < 0.01 * noise_error
    assert abs(subspace_distance(fast, exact) - noise_error) < 0.01 * noise_error
    np.testing.assert_allclose(np.linalg.norm(fast, axis=0), np.linalg.norm(dense, axis=0))


def test_user_level_start_needs_no_dense_solve(monkeypatch):
    data = _user_level_data(6)
    no_dense(monkeypatch, 600)
    assert _private_start(data, 7).shape == (600, 3)


@pytest.mark.parametrize("order", ["algebraic", "magnitude"])
def test_analyze_gauss_agrees_with_dense(monkeypatch, order):
    C, U = released_like(700, 5, 8, negative=order == "magnitude")
    C = (C + C.T) / 2.0
    kwargs = dict(noise_multiplier=1.0, sensitivity=1.0, order=order)
    fast = power.analyze_gauss(C, 5, np.random.default_rng(9), **kwargs)
    monkeypatch.setattr(power, "use_top_k", lambda d, k: False)
    dense = power.analyze_gauss(C, 5, np.random.default_rng(9), **kwargs)
    # resolved to a share of the release's noise norm (2 sqrt(d) sigma), not to rounding
    noise_norm = power.eigenvalue_noise_level(1.0, 700, "analyze_gauss")
    np.testing.assert_allclose(fast.eigenvalues, dense.eigenvalues,
                               atol=NOISE_FRACTION * noise_norm)
    # components carry deterministic signs: they agree entry by entry, not only as a span, to
    # far less than the noise's own error (each component's distance to the truth)
    noise_error = min(subspace_distance(c[:, None], U) for c in dense.components)
    assert np.abs(fast.components - dense.components).max() < 0.01 * noise_error
    assert fast.total == dense.total and fast.noise_std == dense.noise_std


def test_analyze_gauss_needs_no_dense_solve(monkeypatch):
    C, _ = released_like(700, 5, 10)
    no_dense(monkeypatch, 700)
    result = power.analyze_gauss((C + C.T) / 2.0, 5, np.random.default_rng(11),
                                 noise_multiplier=1.0)
    assert result.components.shape == (5, 700)


def sin2(V, U):
    """Squared ``sin`` of the principal angles between two spans, summed (``k - ||U^T V||_F^2``
    for orthonormal bases): the error of an estimated subspace."""
    Qv, Qu = np.linalg.qr(V)[0], np.linalg.qr(U)[0]
    return float(Qv.shape[1] - np.linalg.norm(Qu.T @ Qv) ** 2)


def dense_top(A, k):
    w, V = np.linalg.eigh(A)
    idx = np.argsort(-w, kind="stable")[:k]
    return w[idx], V[:, idx]


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_noisy_release_is_resolved_to_a_share_of_its_noise(seed):
    # a release whose spikes sit near the noise's edge (2 sqrt(d)): the top of the spectrum is
    # clustered, what Lanczos to rounding needs hundreds of products for; its eigenvectors are
    # only as good as the noise lets them be, and the solver must not make them worse
    d, k = 900, 4
    A, U = released_like(d, k, seed, top=3.0, bottom=1.5)
    noise_norm = 2.0 * np.sqrt(d)
    w, V = top_k_eigh(A, k, noise_norm=noise_norm)
    w_dense, V_dense = dense_top(A, k)
    residual = np.linalg.norm(A @ V - V * w, axis=0)
    assert residual.max() <= NOISE_FRACTION * noise_norm
    assert np.abs(w - w_dense).max() <= NOISE_FRACTION * noise_norm
    noise_error = sin2(V_dense, U)
    assert noise_error > 0.1  # the noise's error is real here
    assert abs(sin2(V, U) - noise_error) <= 0.01 * noise_error
    assert sin2(V, V_dense) <= 0.01 * noise_error


def test_noisy_release_takes_fewer_products_and_a_clean_one_keeps_its_precision():
    from scipy.sparse.linalg import LinearOperator

    d, k = 900, 4
    A, _ = released_like(d, k, 3, top=3.0, bottom=1.5)
    products = [0]

    def matmat(X):
        products[0] += 1 if X.ndim == 1 else X.shape[1]
        return A @ X

    op = LinearOperator(A.shape, matvec=matmat, matmat=matmat, dtype=float)
    top_k_eigh(op, k, noise_norm=2.0 * np.sqrt(d))
    to_noise = products[0]  # the residuals' check included
    products[0] = 0
    w_exact, V_exact = top_k_eigh(op, k)  # no noise named: resolved to rounding, as before
    assert products[0] > 1.5 * to_noise  # 75 products against 46 here
    w_dense, V_dense = dense_top(A, k)
    np.testing.assert_allclose(w_exact, w_dense, rtol=1e-9)
    assert subspace_distance(V_exact, V_dense) < 1e-6


def failing_arpack(monkeypatch):
    """ARPACK raising as on a matrix it cannot resolve (no convergence), at every call."""
    import scipy.sparse.linalg

    def refuse(*args, **kwargs):
        raise scipy.sparse.linalg.ArpackNoConvergence("no convergence", np.empty(0),
                                                      np.empty((0, 0)))
    monkeypatch.setattr(scipy.sparse.linalg, "eigsh", refuse)


def test_a_failing_lanczos_falls_back_to_lapack_on_arrays_and_operators(monkeypatch):
    """Both solvers run past a fit's spend, on released matrices: ARPACK failing there must not
    fail the fit (its budget spent) but give LAPACK's pairs (an operator formed from products)."""
    from dptensor.algorithms.eigen import top_eigenpairs
    from dptensor.algorithms.moments import ImplicitMatrix

    A, _ = released_like(700, 3, 2)
    full_w, full_V = np.linalg.eigh(A)
    failing_arpack(monkeypatch)
    found = [top_k_eigh(A, 3), top_k_eigh(A, 3, noise_norm=2 * np.sqrt(700)),
             top_eigenpairs(A, 3, np.random.default_rng(0)),
             top_eigenpairs(ImplicitMatrix(700, lambda Q: A @ Q), 3, np.random.default_rng(0))]
    for w, V in found:
        np.testing.assert_allclose(w, full_w[::-1][:3], rtol=1e-9)
        assert subspace_distance(V, full_V[:, ::-1][:, :3]) < 1e-6


def test_a_private_topic_model_completes_its_fit_when_lanczos_fails(monkeypatch):
    """The whitening's eigenpairs of a released 700 x 700 pair moment are taken by Lanczos: with
    ARPACK failing the fit still ends and learns the topics as well (the pairs are LAPACK's, of
    other signs: the private tensor steps then draw their noise in a flipped basis, so the topics
    agree in law, not bit for bit)."""
    from dptensor.datasets import make_lda_corpus
    from dptensor.latent import PrivateLatentDirichletAllocation, match_rows

    C, topics, _ = make_lda_corpus(3000, 700, 3, doc_length=(50, 80), random_state=0)

    def error():  # a budget at which the topics stand above the noise
        fitted = PrivateLatentDirichletAllocation(3, epsilon=50.0, delta=1e-5,
                                                  random_state=0).fit(C).components_
        return np.abs(fitted - topics[match_rows(fitted, topics)[0]]).sum(axis=1).max()
    reference = error()
    failing_arpack(monkeypatch)
    assert reference < 0.2 and abs(error() - reference) < 0.02
