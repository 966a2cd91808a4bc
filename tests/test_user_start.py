"""The user-level power start (``dptensor.algorithms.completion.user_start``): its released
product's sensitivity under whole-user replacement, by brute force; the contraction that the
bound needs; the rule; recovery of the item Gram's top subspace; and a fit with many items that
never forms the items x items matrix, accounted as previewed."""
import itertools
import warnings

import numpy as np
import pytest

from dptensor import PrivateTensorCompletion
from dptensor.algorithms.completion import user_level as ul
from dptensor.algorithms.completion import user_start as us
from expected_warnings import noise_dominated

M, N_USERS, N_ITEMS, CLIP = 3, 4, 5, 0.3


def _histories(rng):
    """Every item set of one user of size 0..M (distinct items), residuals at the clip's ends and
    inside it, twice each."""
    out = []
    for k in range(M + 1):
        for items in itertools.combinations(range(N_ITEMS), k):
            for _ in range(2):
                t = rng.choice([-CLIP, CLIP, rng.uniform(-CLIP, CLIP)], size=k)
                out.append((np.array(items, dtype=int), t))
    return out


def _product(others, hist, V):
    items, t = hist
    users = np.concatenate([np.zeros(len(items), dtype=int), others[0]])
    return us.item_gram_product(users, np.concatenate([items, others[1]]),
                                np.concatenate([t, others[2]]), N_USERS, N_ITEMS, V)


@pytest.mark.parametrize("block", [1, 2, 5])
def test_released_product_moves_within_its_sensitivity_when_a_whole_user_is_replaced(block):
    """``S V`` with user 0's whole history (which items, how many, the residuals) replaced by
    every other, for contracted near-orthonormal ``V`` of several widths (the full width too)."""
    rng = np.random.default_rng(block)
    users = np.repeat(np.arange(1, N_USERS), M)
    others = (users, np.tile(np.arange(M), N_USERS - 1), rng.uniform(-CLIP, CLIP, len(users)))
    hists = _histories(rng)
    sens = us.product_sensitivity(M, CLIP)
    worst = 0.0
    for trial in range(3):
        V = us.contract(np.linalg.qr(rng.standard_normal((N_ITEMS, block)))[0])
        stats = [_product(others, h, V) for h in hists]
        for a, b in itertools.combinations(range(len(stats)), 2):
            worst = max(worst, float(np.linalg.norm(stats[a] - stats[b])))
    assert worst <= sens * (1 + 1e-12)
    # not loose by more than a factor of two: one user's whole history against none reaches
    # m clip^2 ||V^T p|| / ||p||, near the bound when V holds her direction
    assert worst >= sens / 2


def test_contract_bounds_the_spectral_norm_by_one():
    rng = np.random.default_rng(0)
    for n, b in ((5, 5), (300, 10), (2000, 3)):
        Q = np.linalg.qr(rng.standard_normal((n, b)))[0]
        for V, loss in ((Q, 1e-12), (Q * (1 + 1e-9), 1e-8),
                        (Q + 1e-7 * rng.standard_normal((n, b)), 1e-4)):
            C = us.contract(V)
            assert np.linalg.norm(C, 2) <= 1.0
            assert np.linalg.norm(C, 2) > 1 - loss  # and it is no crude shrinkage


def test_the_rule_reads_the_items_and_the_rank_only():
    assert us.start_method(us.POWER_START_MIN_ITEMS, 3) == "power"
    assert us.start_method(us.POWER_START_MIN_ITEMS - 1, 3) == "dense"
    assert us.start_method(9066, 1000) == "dense"  # a rank near the items: the dense path
    assert us.start_method(None, 3) == "dense"
    assert us.start_releases(9066, 3) == us.POWER_START_STEPS
    assert us.start_releases(1682, 3) == 1
    # the dense start's level is the one the item-item release always recorded
    assert us.start_level(1682, 3, 64, 2.0, 0.3) == ul.start_noise_level(1682, 64, 2.0, 0.3)


def _low_rank_residuals(seed, n_users=3000, n_items=400, per_user=100, rank=3):
    rng = np.random.default_rng(seed)
    A, B = rng.standard_normal((n_users, rank)), rng.standard_normal((n_items, rank))
    B[:, 0] *= 2.0  # distinct strengths: a clear gap inside the top subspace too
    users = np.repeat(np.arange(n_users), per_user)
    items = np.concatenate([rng.choice(n_items, per_user, replace=False)
                            for _ in range(n_users)])
    resid = np.clip(0.1 * np.einsum("ek,ek->e", A[users], B[items]), -0.5, 0.5)
    return np.stack([users, items], axis=1), resid, (n_users, n_items), per_user


def _distance(A, B):
    Qa, Qb = np.linalg.qr(A)[0], np.linalg.qr(B)[0]
    return float(np.linalg.norm(Qa - Qb @ (Qb.T @ Qa), 2))


@pytest.mark.parametrize("z", [0.0, 0.02])
def test_power_start_recovers_the_top_subspace_of_the_item_gram(z):
    """Without noise and with a little, the start's factors span the exact item Gram's top three
    eigenvectors; every direction is kept (above the noise's edge) and scaled to sqrt(items)."""
    X, resid, shape, m = _low_rank_residuals(1)
    V, values, noise = us.power_start(X, resid, shape, m, 3, z, np.random.default_rng(2), 0.5)
    S = ul.cooccurrence(X[:, 0], X[:, 1], resid, *shape)
    top = np.linalg.eigh(S)[1][:, -3:]
    # sin of the largest angle: a few steps from a random block, not to tolerance
    assert _distance(V, top) < (0.01 if z == 0 else 0.1)
    np.testing.assert_allclose(np.linalg.norm(V, axis=0), np.sqrt(shape[1]))
    assert np.all(values > 2 * noise)
    np.testing.assert_allclose(values, np.linalg.eigvalsh(S)[::-1][:3], rtol=0.05)


def test_power_start_drops_what_the_noise_buries():
    X, resid, shape, m = _low_rank_residuals(3, n_users=50)
    V, values, noise = us.power_start(X, resid, shape, m, 3, 50.0, np.random.default_rng(4), 0.5)
    assert noise > 0 and np.all(np.linalg.norm(V, axis=0) == 0) and np.all(values <= 2 * noise)


def _wide_ratings(seed, n_users=300, n_items=us.POWER_START_MIN_ITEMS, per_user=20):
    rng = np.random.default_rng(seed)
    X = np.column_stack([np.repeat(np.arange(n_users), per_user),
                         rng.integers(0, n_items, n_users * per_user)])
    return X, rng.integers(1, 6, len(X)).astype(float), (n_users, n_items)


@noise_dominated()
def test_a_fit_with_many_items_never_forms_the_item_item_matrix(monkeypatch):
    """At ``POWER_START_MIN_ITEMS`` items the user-level fit runs the power start: the dense
    item-item matrix is never built, the fit records the steps its preview priced, and its
    level is the power start's."""
    def refuse(*args, **kwargs):
        raise AssertionError("the items x items matrix was formed")
    monkeypatch.setattr(ul, "cooccurrence", refuse)
    X, y, shape = _wide_ratings(0)
    est = PrivateTensorCompletion(value_range=(1, 5), privacy_unit="user", rank=3, shape=shape,
                                  epsilon=20.0, delta=1e-6, max_ratings_per_user=20,
                                  random_state=0)
    preview, level = est.privacy_cost(len(y), 2), est.expected_noise(len(y), 2)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        est.fit(X, y)
    assert est.privacy_cost_.event == preview.event
    starts = [e for e in est.privacy_cost_.event.events if e.count == us.POWER_START_STEPS]
    assert starts, est.privacy_cost_.event
    assert est.start_eigenvalues_noise_[0] == pytest.approx(level.noise)
    assert est.factors_[1].shape == (shape[1], 3)


def test_the_power_start_spends_what_the_dense_one_did():
    """Its steps split the start's share: the fit's total privacy is the target either way."""
    from dptensor.accounting.composition import gdp_mu
    from dptensor.algorithms.completion.modes.user import user_noise

    mu = gdp_mu(1.0, 1e-6)
    for steps in (1, us.POWER_START_STEPS):
        z, counts = user_noise(mu, 3, 3, 1, 0.7, steps)
        assert sum(counts[k] / z[k] ** 2 for k in z) == pytest.approx(mu**2, rel=1e-12)
        assert counts["start"] == steps
