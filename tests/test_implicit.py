"""Implicit-feedback completion (``perturbation="implicit"``): the design, the Wiener solve, the
privacy plan, and recovery on data whose observed positions depend on the values' structure."""
import math
import warnings

import numpy as np
import pytest

from dptensor import PrivacyAccountant, PrivacyWarning
from dptensor.algorithms.completion.observations import Observations
from dptensor.algorithms.completion.implicit import ImplicitDesign, wiener_fit
from dptensor.accounting import ComposedEvent, GaussianEvent, epsilon_of
from dptensor.completion import PrivateTensorCompletion
from expected_warnings import NON_PRIVATE, completion_noise


def _informative(seed, users=150, items=120, days=4, per_user=60, rank=2, noise=0.3):
    """Ratings whose positions carry their structure (missing not at random): a user rates the
    items close to their taste more often, as on real ratings. Returns train and test splits."""
    rng = np.random.default_rng(seed)
    U, V = rng.normal(size=(users, rank)), rng.normal(size=(items, rank))
    affinity = U @ V.T
    X, y = [], []
    for u in range(users):
        p = np.exp(1.5 * affinity[u] / np.sqrt(rank))
        chosen = rng.choice(items, per_user, replace=False, p=p / p.sum())
        for i in chosen:
            X.append((u, i, rng.integers(days)))
            y.append(3.0 + 0.3 * rng.normal() + 0.6 * affinity[u, i] / np.sqrt(rank))
    X, y = np.array(X), np.clip(np.array(y) + noise * rng.normal(size=len(y)), 1, 5)
    test = np.zeros(len(y), bool)
    test[rng.choice(len(y), len(y) // 5, replace=False)] = True
    return X[~test], y[~test], X[test], y[test]


def _rmse(a, b):
    return float(np.sqrt(np.mean((np.asarray(a) - np.asarray(b)) ** 2)))


def test_design_is_public_and_its_adjoint_is_exact(rng):
    from dptensor.algorithms.completion.implicit import DESIGN_NORM

    X = np.stack([rng.integers(0, 30, 400), rng.integers(0, 25, 400), rng.integers(0, 3, 400)], axis=1)
    obs = Observations(X, (32, 25, 3))  # two users without entries
    design = ImplicitDesign(obs, 0, 1, 4)
    for Z, mode, n in ((design.lead_z, 0, 32), (design.partner_z, 1, 25)):
        norms = np.sqrt(np.asarray(Z.multiply(Z).sum(axis=1)).ravel())
        seen = np.bincount(X[:, mode], minlength=n) > 0
        assert np.allclose(norms[seen], 1.0) and np.all(norms[~seen] == 0)
    for E in (design.P, design.Q):
        assert np.all(np.linalg.norm(E, axis=1) <= 1 + 1e-12) and np.linalg.matrix_rank(E) == 4
    theta, w = rng.normal(size=design.shape), rng.normal(size=len(X))
    assert np.vdot(design.apply(theta), w) == pytest.approx(np.vdot(theta, design.adjoint(w)), rel=1e-10)
    # the design at entry e has norm sqrt(|q_j|^2 + |p_i|^2) <= DESIGN_NORM: the adjoint's sensitivity
    for e in range(len(X)):
        one = np.zeros(len(X))
        one[e] = 1.0
        norm = np.linalg.norm(design.adjoint(one))
        assert norm == pytest.approx(math.hypot(np.linalg.norm(design.Q[X[e, 1]]), np.linalg.norm(design.P[X[e, 0]])),
                                     rel=1e-10)
        assert norm <= DESIGN_NORM + 1e-12
    # Omega alone: the same positions give the same design (no values enter)
    again = ImplicitDesign(Observations(X.copy(), (32, 25, 3)), 0, 1, 4)
    assert np.array_equal(again.Q, design.Q) and np.array_equal(again.P, design.P)
    dense = np.stack([design.gram(E) for E in np.eye(design.shape[0])])
    A = np.stack([design.adjoint(E) for E in np.eye(len(X))])  # the design, entry by entry
    assert np.allclose(dense, A.T @ A, atol=1e-10)  # the fast Gram is the design's
    V, g, tr1, tr2 = design.bulk(5)  # the five leading directions, and the traces of the rest
    assert np.allclose(dense @ V, V * g, atol=1e-8 * g.max()) and np.allclose(V.T @ V, np.eye(5), atol=1e-10)
    exact = np.sort(np.linalg.eigvalsh(dense))[::-1]
    assert np.allclose(np.sort(g)[::-1], exact[:5], rtol=1e-8)
    assert tr1 == pytest.approx(exact[5:].sum(), rel=1e-8)
    assert tr2 == pytest.approx(np.sum(exact[5:] ** 2), rel=0.3)  # a Hutchinson estimate


def test_wiener_fit_is_the_ridge_without_noise_and_zero_under_pure_noise(rng):
    X = np.stack([rng.integers(0, 40, 800), rng.integers(0, 30, 800)], axis=1)
    design = ImplicitDesign(Observations(X, (40, 30)), 0, 1, 3)
    truth = rng.normal(size=design.shape)
    t = design.apply(truth) + 0.1 * rng.normal(size=len(X))
    Y = wiener_fit(design, design.adjoint(t), s2=0.01, noise_var=0.0)
    assert _rmse(design.apply(Y), design.apply(truth)) < 0.1 * np.std(design.apply(truth))
    # a release that is all noise falls back to the offsets
    noise = rng.normal(0, 30.0, design.shape)
    assert np.all(wiener_fit(design, noise, s2=0.01, noise_var=900.0) == 0)


@completion_noise  # a tiny tensor: its weaker components and offsets are noise
def test_implicit_learns_from_informative_positions_and_privately():
    """Positions that depend on the taste let the implicit term learn the interaction: the
    non-private fit beats offsets alone clearly (ALS with a factor per user reaches 0.46 here,
    offsets 0.58, the implicit term 0.52), and the private fit at epsilon = 10, with a fifth of the
    budget on the interaction, keeps most of that gain (its shrinkage even helps)."""
    X, y, Xt, yt = _informative(0)
    shape = (150, 120, 4)
    params = {"factor_modes": (0, 1), "value_range": (1, 5), "shape": shape, "rank": 4}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", PrivacyWarning)
        offsets_only = PrivateTensorCompletion(perturbation="gradient", n_iter=1, learning_rate=1e-9,
                                               **params).fit(X, y)
        exact = PrivateTensorCompletion(perturbation="implicit", **params).fit(X, y)
    base, best = _rmse(offsets_only.predict(Xt), yt), _rmse(exact.predict(Xt), yt)
    assert best < 0.93 * base
    private = [_rmse(PrivateTensorCompletion(perturbation="implicit", epsilon=10.0, offset_share=0.8, random_state=s,
                                             **params)
                     .fit(X, y).predict(Xt), yt) for s in range(3)]
    assert np.mean(private) < base - 0.7 * (base - best)


@completion_noise  # a tiny tensor: its weaker components and offsets are noise
def test_implicit_plan_records_exact_target_and_one_release(monkeypatch):
    # The implicit mode's own releases: the interaction's statistic (the offsets release elsewhere).
    import dptensor.algorithms.completion.modes.implicit as implicit_mode

    calls = []
    real = implicit_mode.gaussian_release

    def spy(value, sensitivity, z, rng, dtype=None, *, rounding):
        calls.append((np.shape(value), float(sensitivity), z))
        return real(value, sensitivity, z, rng, dtype, rounding=rounding)

    monkeypatch.setattr(implicit_mode, "gaussian_release", spy)
    X, y, _, _ = _informative(1)
    acc = PrivacyAccountant(epsilon=5.0, delta=1e-6)
    model = PrivateTensorCompletion(perturbation="implicit", factor_modes=(0, 1), rank=3, epsilon=2.0,
                                    value_range=(1, 5), accountant=acc, random_state=0).fit(X, y)
    cost = model.privacy_cost_
    assert cost.epsilon == pytest.approx(2.0, rel=1e-9) and acc.spent()[0] == pytest.approx(2.0, rel=1e-9)
    leaves = list(cost.event.leaves())
    assert leaves[-1] == GaussianEvent(cost.noise_multiplier, 1)
    assert epsilon_of(ComposedEvent(leaves), 1e-6) == pytest.approx(2.0, rel=1e-9)
    # one release of the (items + users) x rank statistic, at sensitivity sqrt(2) min(1, 2 clip)
    assert len(calls) == 1 and calls[0][0] == ((120 + 150) * 3,) and 0 < calls[0][1] <= math.sqrt(2)
    assert calls[0][2] == pytest.approx(cost.noise_multiplier)
    assert model.privacy_cost(len(y), 3) == cost
    # the released model is a CP model of 2 rank columns: [Z Y, P] and [Q, Z' W]
    assert model.factors_[2].tolist() == np.ones((4, 6)).tolist() and model.factors_[0].shape == (150, 6)
    assert np.all(np.isfinite(model.predict(X)))


@NON_PRIVATE
def test_implicit_needs_two_factor_modes_and_cp():
    X, y, _, _ = _informative(2)
    with pytest.raises(ValueError, match="two-mode"):  # every mode named: three
        PrivateTensorCompletion(perturbation="implicit", factor_modes=None).fit(X, y)
    with pytest.raises(ValueError, match="two-mode"):
        PrivateTensorCompletion(perturbation="implicit", factor_modes=None).privacy_cost(len(y), 3)
    # factor_modes="auto" (the default) gives it users and items
    assert PrivateTensorCompletion(perturbation="implicit", rank=2).fit(X, y).factor_modes_ == (0, 1)
    with pytest.raises(ValueError, match="CP"):
        PrivateTensorCompletion(perturbation="implicit", decomposition="tucker").fit(X, y)
    # a matrix needs no factor_modes
    M = PrivateTensorCompletion(perturbation="implicit", rank=2).fit(X[:, :2], y)
    assert math.isfinite(M.intercept_)


def test_implicit_ignores_n_iter():
    # one release and one solve: n_iter has nothing to set, and n_iter_ says so. Compared without
    # noise: a private fit's noise stream is keyed by every parameter, n_iter included.
    X, y, X_test, _ = _informative(3, users=60, items=50, per_user=20)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", PrivacyWarning)
        fits = [PrivateTensorCompletion(perturbation="implicit", factor_modes=(0, 1), rank=3, n_iter=n,
                                        value_range=(1, 5), random_state=0).fit(X, y)
                for n in (None, 7)]
    assert [f.n_iter_ for f in fits] == [1, 1]
    assert np.array_equal(fits[0].predict(X_test), fits[1].predict(X_test))


@pytest.mark.parametrize("rank", [40, 3])  # full rank, and a Krylov space exhausted after 4 steps
def test_lanczos_function_matches_the_eigendecomposition(rank, rng):
    from dptensor.algorithms.completion.implicit import lanczos_function

    F = rng.normal(size=(40, rank)) * np.geomspace(1, 30, rank)
    A = F @ F.T
    b = rng.normal(size=40)
    g, V = np.linalg.eigh(A)
    g = np.maximum(g, 0.0)
    for h in (lambda e: 1.0 / (e + 0.5), lambda e: 2.0 * e / (2.0 * e**2 + 0.3 * e + 4.0)):
        exact = V @ (h(g) * (V.T @ b))
        approx = lanczos_function(lambda v: A @ v, b, h, rtol=1e-10)
        np.testing.assert_allclose(approx, exact, rtol=0, atol=1e-8 * np.linalg.norm(exact))
    assert np.all(lanczos_function(lambda v: A @ v, np.zeros(40), np.exp) == 0)


@pytest.mark.parametrize("shape", [(60_000, 5), (5, 60_000)])
def test_spectral_embeddings_of_a_thin_incidence_never_form_it_densely(shape):
    """One side too small for ARPACK and too many cells for a dense SVD: the small side's Gram gives
    the same embeddings (up to each column's sign) as the dense SVD."""
    import scipy.sparse as sp

    from dptensor.algorithms.completion.implicit import spectral_embeddings

    M = sp.random(*shape, density=0.3, random_state=1, format="csr")
    P, Q = spectral_embeddings(M, 2)
    u, s, vt = np.linalg.svd(M.toarray(), full_matrices=False)
    order = np.argsort(-s)[1:3]
    for E, vectors in ((P, u[:, order]), (Q, vt[order].T)):
        ref = vectors * math.sqrt(len(vectors))
        ref /= np.maximum(np.linalg.norm(ref, axis=1, keepdims=True), 1.0)
        np.testing.assert_allclose(np.abs(E), np.abs(ref), atol=1e-9)


def test_a_solver_failing_on_the_positions_fails_the_fit_before_its_spend(monkeypatch):
    """The filter's leading directions of the design's Gram (Lanczos, a function of Omega) were
    found after the spend: ARPACK failing there failed a fit whose budget was gone. They are now
    found with the design, before it, so the shared accountant is charged nothing."""
    import scipy.sparse.linalg

    from dptensor.algorithms.completion import implicit

    X, y, _, _ = _informative(1)
    accountant = PrivacyAccountant(epsilon=10.0, delta=1e-5)

    def refuse(*args, **kwargs):
        raise scipy.sparse.linalg.ArpackNoConvergence("no convergence", np.empty(0),
                                                      np.empty((0, 0)))
    monkeypatch.setattr(implicit.sla, "eigsh", refuse)
    model = PrivateTensorCompletion(perturbation="implicit", factor_modes=(0, 1), epsilon=1.0,
                                    value_range=(1, 5), shape=(150, 120, 4), rank=4,
                                    accountant=accountant, random_state=0)
    with pytest.raises(scipy.sparse.linalg.ArpackNoConvergence):
        model.fit(X, y)
    assert accountant.spent() == (0.0, 0.0) and not accountant.history()
