"""Implicit-feedback completion (``perturbation="implicit"``): the design, the Wiener solve, the
privacy plan, and recovery on data whose observed positions depend on the values' structure."""
import math
import warnings

import numpy as np
import pytest

from dptensor import PrivacyAccountant, PrivacyWarning
from dptensor._completion_models import Observations
from dptensor._implicit import ImplicitDesign, wiener_fit
from dptensor.accounting import ComposedEvent, GaussianEvent, epsilon_of
from dptensor.completion import PrivateTensorCompletion


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
    X = np.stack([rng.integers(0, 30, 400), rng.integers(0, 25, 400), rng.integers(0, 3, 400)], axis=1)
    obs = Observations(X, (32, 25, 3))  # two users without entries
    design = ImplicitDesign(obs, 0, 1, 4)
    norms = np.sqrt(np.asarray(design.Z.multiply(design.Z).sum(axis=1)).ravel())
    seen = np.bincount(X[:, 0], minlength=32) > 0
    assert np.allclose(norms[seen], 1.0) and np.all(norms[~seen] == 0)
    assert np.all(np.linalg.norm(design.Q, axis=1) <= 1 + 1e-12) and np.linalg.matrix_rank(design.Q) == 4
    Y, w = rng.normal(size=design.shape), rng.normal(size=len(X))
    assert np.vdot(design.apply(Y), w) == pytest.approx(np.vdot(Y, design.adjoint(w)), rel=1e-10)
    # the design at entry e is z_i q_j^T, of norm |q_j| <= 1: the sensitivity of the adjoint
    e = 7
    one = np.zeros(len(X))
    one[e] = 1.0
    assert np.linalg.norm(design.adjoint(one)) == pytest.approx(np.linalg.norm(design.Q[X[e, 1]]), rel=1e-10)
    # Omega alone: the same positions give the same design (no values enter)
    again = ImplicitDesign(Observations(X.copy(), (32, 25, 3)), 0, 1, 4)
    assert np.array_equal(again.Q, design.Q) and (again.Z != design.Z).nnz == 0
    dense = np.stack([design.gram(E.reshape(design.shape)).ravel() for E in np.eye(design.Q.size)])
    V, g, tr1, tr2 = design.bulk(5)  # the five leading directions, and the traces of the rest
    assert np.allclose(dense @ V, V * g, atol=1e-8 * g.max()) and np.allclose(V.T @ V, np.eye(5), atol=1e-10)
    exact = np.sort(np.linalg.eigvalsh(dense))[::-1]
    assert np.allclose(np.sort(g)[::-1], exact[:5], rtol=1e-8)
    assert tr1 == pytest.approx(exact[5:].sum(), rel=1e-8)
    assert tr2 == pytest.approx(np.sum(exact[5:] ** 2), rel=0.3)  # a Hutchinson estimate


@pytest.mark.parametrize("n_entries", [400, 60])  # with and without the per-row Gram blocks
def test_gram_is_the_adjoint_of_the_design_applied(rng, n_entries):
    X = np.stack([rng.integers(0, 30, n_entries), rng.integers(0, 25, n_entries),
                  rng.integers(0, 3, n_entries)], axis=1)
    X = np.vstack([X, X[:20]])  # a position observed twice counts twice in the Gram
    design = ImplicitDesign(Observations(X, (32, 25, 3)), 0, 1, 4)
    assert (design._M is not None) == (32 * 4 < len(X))
    Y = rng.normal(size=design.shape)
    # the reference: the design's rows z_i q_j^T, formed densely one entry at a time
    Z = design.Z.toarray()
    rows = np.stack([np.outer(Z[i], design.Q[j]).ravel() for i, j in X[:, :2]])
    assert np.allclose(design.gram(Y).ravel(), rows.T @ (rows @ Y.ravel()), rtol=1e-10, atol=1e-12)


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


def test_implicit_plan_records_exact_target_and_one_release(monkeypatch):
    import dptensor.completion as completion_module

    calls = []
    real = completion_module.gaussian_release

    def spy(value, sensitivity, z, rng, dtype=None):
        calls.append((np.shape(value), float(sensitivity), z))
        return real(value, sensitivity, z, rng, dtype)

    monkeypatch.setattr(completion_module, "gaussian_release", spy)
    X, y, _, _ = _informative(1)
    acc = PrivacyAccountant(epsilon=5.0, delta=1e-6)
    model = PrivateTensorCompletion(perturbation="implicit", factor_modes=(0, 1), rank=3, epsilon=2.0,
                                    value_range=(1, 5), accountant=acc, random_state=0).fit(X, y)
    cost = model.privacy_cost_
    assert cost.epsilon == pytest.approx(2.0, rel=1e-9) and acc.spent()[0] == pytest.approx(2.0, rel=1e-9)
    leaves = list(cost.event.leaves())
    assert leaves[-1] == GaussianEvent(cost.noise_multiplier, 1)
    assert epsilon_of(ComposedEvent(leaves), 1e-6) == pytest.approx(2.0, rel=1e-9)
    # one release of the (items x rank) statistic, at sensitivity min(1, 2 clip)
    assert len(calls) == 1 and calls[0][0] == (120, 3) and 0 < calls[0][1] <= 1.0
    assert calls[0][2] == pytest.approx(cost.noise_multiplier)
    assert model.privacy_cost(len(y), 3) == cost
    # the released model is a CP model: a user's factor is Z Y, the items' the public embedding
    assert model.factors_[2].tolist() == np.ones((4, 3)).tolist()
    assert np.all(np.isfinite(model.predict(X)))


def test_implicit_needs_two_factor_modes_and_cp():
    X, y, _, _ = _informative(2)
    with pytest.raises(ValueError, match="two-mode"):
        PrivateTensorCompletion(perturbation="implicit").fit(X, y)
    with pytest.raises(ValueError, match="two-mode"):
        PrivateTensorCompletion(perturbation="implicit").privacy_cost(len(y), 3)
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
