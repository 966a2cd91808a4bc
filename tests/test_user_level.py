"""User-level completion (``privacy_unit="user"``): each released statistic's sensitivity under
replace-one-user neighbours, checked by brute force; no user's factor on the fitted object; the
item side is no noise-free function of the positions; the unit named; bad input refused."""
import itertools
import warnings
import pickle

import numpy as np
import pytest

from dptensor import PrivacyAccountant, PrivateTensorCompletion
from dptensor.algorithms.completion import user_level as ul
from dptensor.algorithms.completion.modes.user import UnitEvent
from expected_warnings import NON_PRIVATE, noise_dominated

# A private fit on a small fixture, for its accounting, plumbing or what it keeps (not its
# accuracy): at that size its weaker components are noise, as the fit says.
_SMALL_PRIVATE = noise_dominated()


M, N_USERS, N_ITEMS, CLIP, C = 3, 4, 5, 0.3, 0.7


def _histories(rng, n=60):
    """Histories of one user: every item set of size 0..M (distinct items), values at the
    extremes and at random in [-1/2, 1/2], residuals in [-CLIP, CLIP], factors of norm <= C."""
    out = []
    for k in range(M + 1):
        for items in itertools.combinations(range(N_ITEMS), k):
            for _ in range(2):
                y = rng.choice([-0.5, 0.5, rng.uniform(-0.5, 0.5)], size=k)
                t = rng.choice([-CLIP, CLIP, rng.uniform(-CLIP, CLIP)], size=k)
                u = rng.standard_normal(2)
                u = u / np.linalg.norm(u) * (C if rng.random() < 0.7 else rng.random() * C)
                out.append((np.array(items, dtype=int), y, t, u))
    return out


def _statistics(others, hist):
    """Every released statistic with user 0's history ``hist`` and the others' fixed."""
    items, y, t, u = hist
    users = np.concatenate([np.zeros(len(items), dtype=int), others["users"]])
    its = np.concatenate([items, others["items"]])
    ys, ts = np.concatenate([y, others["y"]]), np.concatenate([t, others["t"]])
    U = np.vstack([u, others["U"]])
    G, r = ul.normal_equations(users, its, ts, U, N_ITEMS)
    return {"global": np.array([ys.sum(), float(len(ys))]),
            "counts": np.bincount(its, minlength=N_ITEMS).astype(float),
            "sums": ul.row_sums(its, ts, N_ITEMS),
            "cooccurrence": ul.cooccurrence(users, its, ts, N_USERS, N_ITEMS),
            "gram": G, "rhs": r}


SENSITIVITY = {"global": ul.global_sensitivity(M), "counts": ul.count_sensitivity(M),
               "sums": ul.sum_sensitivity(M, CLIP),
               "cooccurrence": ul.cooccurrence_sensitivity(M, CLIP),
               "gram": ul.gram_sensitivity(M, C), "rhs": ul.rhs_sensitivity(M, CLIP, C)}


def test_every_statistic_moves_within_its_sensitivity_when_a_whole_user_is_replaced():
    rng = np.random.default_rng(0)
    users = np.repeat(np.arange(1, N_USERS), M)
    others = {"users": users, "items": np.tile(np.arange(M), N_USERS - 1),
              "y": rng.uniform(-0.5, 0.5, len(users)), "t": rng.uniform(-CLIP, CLIP, len(users)),
              "U": ul.clip_rows(rng.standard_normal((N_USERS - 1, 2)), C)}
    hists = _histories(rng)
    stats = [_statistics(others, h) for h in hists]
    worst = dict.fromkeys(SENSITIVITY, 0.0)
    for a, b in itertools.combinations(range(len(hists)), 2):
        for name in SENSITIVITY:
            worst[name] = max(worst[name], float(np.linalg.norm(stats[a][name] - stats[b][name])))
    for name, sens in SENSITIVITY.items():
        assert worst[name] <= sens * (1 + 1e-12), (name, worst[name], sens)
        # and the bound is not loose by more than a factor of two: the worst case is reached
        assert worst[name] >= sens / 2, (name, worst[name], sens)


def test_a_repeated_row_needs_the_larger_bounds():
    """Days repeat among a user's entries: a user's counts then move by sqrt(2) m, not sqrt(2m)."""
    a = np.bincount(np.zeros(M, dtype=int), minlength=3).astype(float)
    b = np.bincount(np.ones(M, dtype=int), minlength=3).astype(float)
    assert np.linalg.norm(a - b) > ul.count_sensitivity(M, distinct=True)
    assert np.linalg.norm(a - b) <= ul.count_sensitivity(M, distinct=False) * (1 + 1e-12)
    assert np.linalg.norm(CLIP * a + CLIP * b) <= ul.sum_sensitivity(M, CLIP, distinct=False)


def test_bounding_keeps_at_most_m_distinct_items_per_user_at_random():
    rng = np.random.default_rng(1)
    users = np.repeat(np.arange(5), [1, 10, 3, 40, 0 + 2])
    items = rng.integers(0, 6, len(users))
    picks = []
    for seed in range(2):
        keep = ul.bound_contributions(users, items, 5, 4, np.random.default_rng(seed))
        pairs = set(zip(users[keep], items[keep]))
        assert len(pairs) == len(keep)  # one entry per (user, item)
        assert np.bincount(users[keep], minlength=5).max() <= 4
        assert np.all(np.bincount(users[keep], minlength=5) == [
            min(4, len(set(items[users == u]))) for u in range(5)])
        picks.append(tuple(keep))
    assert picks[0] != picks[1]


def test_bounding_orders_by_user_and_item_without_overflow():
    # The cell key user * (items.max() + 1) + item wrapped around int64 once users x items passed
    # 2**63: the bounding then kept duplicates and broke its per-user count. Which entries are
    # kept depends only on the order of the item labels, so a monotone relabelling to labels
    # near 2**62 must keep the very same entries, at the same seed.
    rng = np.random.default_rng(3)
    users = np.repeat(np.arange(5), [7, 12, 3, 30, 9])
    items = rng.integers(0, 8, len(users))
    huge = items * 2**59 + 11  # up to 7 * 2**59 + 11 < 2**63; the cell key of user 4 is ~2**64
    assert 4 * (int(huge.max()) + 1) > 2**63
    for seed in range(3):
        small = ul.bound_contributions(users, items, 5, 4, np.random.default_rng(seed))
        large = ul.bound_contributions(users, huge, 5, 4, np.random.default_rng(seed))
        np.testing.assert_array_equal(large, small)
        assert len(set(zip(users[large], huge[large]))) == len(large)
        assert np.bincount(users[large], minlength=5).max() <= 4


def _ratings(seed=0, n_users=60, n_items=25):
    rng = np.random.default_rng(seed)
    X = np.array([(u, i) for u in range(n_users) for i in range(n_items) if rng.random() < 0.4])
    a, b = rng.normal(0, 0.5, n_users), rng.normal(0, 0.7, n_items)
    y = np.clip(np.rint(3.5 + a[X[:, 0]] + b[X[:, 1]] + rng.normal(0, 0.5, len(X))), 1, 5)
    return X, y


def _fit(X, y, **kw):
    params = dict(rank=2, privacy_unit="user", epsilon=4.0, delta=1e-5, value_range=(1, 5),
                  shape=(60, 25), random_state=0)
    return PrivateTensorCompletion(**{**params, **kw}).fit(X, y)


@_SMALL_PRIVATE
def test_no_user_factor_or_offset_is_stored_or_pickled():
    X, y = _ratings()
    est = _fit(X, y)
    loaded = pickle.loads(pickle.dumps(est))
    for obj in (est, loaded):
        for name, value in vars(obj).items():
            arrays = value if isinstance(value, list) else [value]
            for arr in arrays:
                if isinstance(arr, np.ndarray):
                    assert 60 not in arr.shape, name  # nothing indexed by user
    assert est.factors_[0].shape == (0, 2) and est.biases_[0].shape == (0,)
    assert est.privacy_unit_ == "user"


def test_fresh_entropy_releases_different_item_sides():
    """No released value is a noise-free function of the positions: two fits on the same data
    with fresh entropy differ in every item-side release (offsets and factors)."""
    rng = np.random.default_rng(0)
    X = np.array([(u, i) for u in range(300) for i in range(40) if rng.random() < 0.5])
    p, q = rng.normal(0, 1, 300), rng.normal(0, 1, 40)
    y = np.clip(np.rint(3 + 0.6 * p[X[:, 0]] * q[X[:, 1]] + rng.normal(0, 0.3, len(X))), 1, 5)
    kw = dict(rank=1, epsilon=50.0, shape=(300, 40), random_state=None, max_ratings_per_user=40)
    a, b = _fit(X, y, **kw), _fit(X, y, **kw)
    assert np.abs(a.factors_[1]).max() > 0  # the interaction is learned, and noisy
    assert np.all(a.biases_[1] != b.biases_[1])
    assert a.intercept_ != b.intercept_
    assert not np.allclose(a.factors_[1], b.factors_[1])


def test_history_personalises_and_no_history_is_cold_start():
    X, y = _ratings(1)
    est = _fit(X, y, epsilon=50.0, rank=0)
    test = np.array([[u, 3] for u in range(60)])
    cold = est.predict(test)
    assert np.ptp(cold) == 0  # the item side alone: one value for every user
    warm = est.predict(test, history=(X, y))
    assert np.ptp(warm) > 0.3
    truth_mean = np.array([y[X[:, 0] == u].mean() for u in range(60)])
    assert np.corrcoef(warm, truth_mean)[0, 1] > 0.8
    assert est.score(X, y, history=(X, y)) > est.score(X, y)


@_SMALL_PRIVATE
def test_one_event_at_user_level_previewed_and_named():
    X, y = _ratings()
    acc = PrivacyAccountant(epsilon=10.0, delta=1e-5)
    est = PrivateTensorCompletion(rank=2, privacy_unit="user", epsilon=4.0, value_range=(1, 5),
                                  shape=(60, 25), accountant=acc)
    preview = est.privacy_cost(len(y), 2)
    est.fit(X, y)
    assert len(acc.history()) == 1
    assert isinstance(est.privacy_cost_.event, UnitEvent) and est.privacy_cost_.event.unit == "user"
    assert acc.history()[0].event.to_dict()["unit"] == "user"
    assert preview.epsilon == pytest.approx(est.privacy_cost_.epsilon) == pytest.approx(4.0)
    assert preview.event == est.privacy_cost_.event


@NON_PRIVATE
@_SMALL_PRIVATE
def test_bad_input_is_refused_with_a_reason():
    X, y = _ratings()
    with pytest.raises(ValueError, match="implicit.*who rated what"):
        _fit(X, y, perturbation="implicit")
    with pytest.raises(ValueError, match="privacy_unit"):
        _fit(X, y, privacy_unit="person")
    with pytest.raises(ValueError, match="max_ratings_per_user"):
        PrivateTensorCompletion(max_ratings_per_user=5, epsilon=1.0, value_range=(1, 5)).fit(X, y)
    est = _fit(X, y)
    with pytest.raises(ValueError, match="outside the fitted shape"):
        est.predict(X[:3], history=(X + [0, 30], y))
    with pytest.raises(ValueError, match="outside value_range"):
        est.predict(X[:3], history=(X, y + 10))
    with pytest.raises(ValueError, match="history is for user-level"):
        PrivateTensorCompletion(rank=2, value_range=(1, 5)).fit(X, y).predict(X, history=(X, y))


@_SMALL_PRIVATE
def test_a_user_over_the_bound_is_subsampled_not_refused():
    X, y = _ratings()
    est = _fit(X, y, max_ratings_per_user=2)
    assert np.all(np.isfinite(est.biases_[1]))


def test_the_ledger_and_the_cost_name_the_user_unit():

    rng = np.random.default_rng(5)
    X = np.column_stack([rng.integers(0, 40, 600), rng.integers(0, 30, 600)])
    y = rng.uniform(1, 5, 600)
    acc = PrivacyAccountant(epsilon=10.0, delta=1e-5)
    est = PrivateTensorCompletion(rank=0, epsilon=1.0, value_range=(1, 5), privacy_unit="user",
                                  shape=(40, 30), accountant=acc, random_state=0).fit(X, y)
    assert est.privacy_cost_.unit == "user"
    assert "unit='user'" in acc.history()[-1].label


def _taste(seed, n_users=300, n_items=30, strength=1.5):
    """Ratings with a strong rank-1 taste: at a large epsilon its direction rises above the
    start's noise."""
    rng = np.random.default_rng(seed)
    X = np.array([(u, i) for u in range(n_users) for i in range(n_items) if rng.random() < 0.6])
    p, q = rng.choice([-1.0, 1.0], n_users), rng.choice([-1.0, 1.0], n_items)
    y = np.clip(np.rint(3 + strength * p[X[:, 0]] * q[X[:, 1]] + rng.normal(0, 0.3, len(X))),
                1, 5)
    return X, y


def _fit_caught(X, y, **kw):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        est = _fit(X, y, **kw)
    noisy = [w for w in caught if "start_eigenvalues_noise_" in str(w.message)]
    return est, noisy


def test_noise_dominated_factors_warn_from_released_values_only():
    """The warning is a function of the released eigenvalues and of the public noise level: it
    fires exactly when some eigenvalue is below twice the level, the level is the preview's
    (shape, epsilon, the bound) whatever the data, and a fit that learns does not warn."""
    outcomes = set()
    for seed, eps in itertools.product((0, 1, 2), (0.1, 2.0, 1e4)):
        X, y = _taste(seed)
        est, noisy = _fit_caught(X, y, rank=1, epsilon=eps, shape=(300, 30), random_state=seed)
        weak = bool(np.any(est.start_eigenvalues_ < 2 * est.start_eigenvalues_noise_))
        assert bool(noisy) == weak
        preview = PrivateTensorCompletion(
            rank=1, privacy_unit="user", epsilon=eps, delta=1e-5, value_range=(1, 5),
            shape=(300, 30)).expected_noise(len(y), 2)
        np.testing.assert_array_equal(est.start_eigenvalues_noise_, preview.noise)
        outcomes.add((eps, weak))
    # learning at 1e4 on every seed; at 0.1 the eigenvalue is mostly noise's, and the top one of
    # a noise matrix lies near its edge, above it on some draws (so not every seed warns there);
    # both branches were checked above
    assert {(0.1, True), (1e4, False)} <= outcomes
    assert (1e4, True) not in outcomes


def test_a_fit_that_learns_does_not_warn_and_the_noise_free_path_has_no_noise():
    X, y = _taste(3)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        est = _fit(X, y, rank=1, epsilon=1e4, shape=(300, 30))
    assert est.start_eigenvalues_[0] > 2 * est.start_eigenvalues_noise_[0] > 0
    free, noisy = _fit_caught(X, y, rank=1, epsilon=np.inf, shape=(300, 30))
    assert not noisy and np.all(free.start_eigenvalues_noise_ == 0)
    offsets, noisy = _fit_caught(X, y, rank=0, epsilon=0.1, shape=(300, 30))
    assert not noisy and offsets.start_eigenvalues_.shape == (0,)


def test_the_noise_preview_is_public_and_scales_as_the_derivation_says():
    """``noise / signal_bound = z sqrt(n_items) / n_users`` (the start's multiplier ``z``)."""
    est = PrivateTensorCompletion(rank=3, privacy_unit="user", epsilon=1.0, delta=1e-5,
                                  value_range=(1, 5), shape=(7000, 900))
    preview = est.expected_noise(10**5, 2)
    z = est._plan((10**5, 7000, 900)).settings.noise["zs"]["start"]
    assert preview.ratio == pytest.approx(z * np.sqrt(900) / 7000)
    assert preview.attribute == "start_eigenvalues_noise_"
    more = est.set_params(shape=(70000, 900)).expected_noise(10**6, 2)
    assert more.ratio == pytest.approx(preview.ratio / 10)
    assert est.set_params(rank=0).expected_noise(10**6, 2).noise == 0.0
    other = PrivateTensorCompletion(perturbation="input", epsilon=1.0, value_range=(1, 5),
                                    shape=(10, 10)).expected_noise(50, 2)
    assert other.attribute == "component_rms_noise_"  # a mode without a start: its components
    with pytest.raises(ValueError, match="shape"):
        PrivateTensorCompletion(privacy_unit="user", epsilon=1.0,
                                value_range=(1, 5)).expected_noise(50, 2)


def test_the_sparse_item_item_matrix_is_the_dense_product(monkeypatch):
    """The item-item matrix formed from sparse rows, a block of columns at a time, is ``P^T P``
    of the dense residual rows (repeated entries summed), across block edges."""
    rng = np.random.default_rng(3)
    users, items = rng.integers(0, 50, 400), rng.integers(0, 23, 400)
    resid = rng.uniform(-CLIP, CLIP, 400)
    P = np.zeros((50, 23))
    np.add.at(P, (users, items), resid)
    monkeypatch.setattr(ul, "COOCCURRENCE_BLOCK", 5)
    np.testing.assert_allclose(ul.cooccurrence(users, items, resid, 50, 23), P.T @ P,
                               rtol=1e-12, atol=1e-12)


def test_the_kept_entries_are_those_of_the_three_key_sort():
    """The bounding's two stable sorts keep exactly the entries that sorting by (user, item,
    random key) keeps, so a seeded fit keeps the same entries as before."""
    rng = np.random.default_rng(9)
    users, items = rng.integers(0, 30, 2000), rng.integers(0, 50, 2000)
    keep = ul.bound_contributions(users, items, 30, 7, np.random.default_rng(4))
    draw = np.random.default_rng(4)
    order = np.lexsort((draw.random(len(users)), items, users))
    u, i = users[order], items[order]
    first = np.r_[True, (u[1:] != u[:-1]) | (i[1:] != i[:-1])]
    order = order[first]
    order = order[np.lexsort((draw.random(len(order)), users[order]))]
    rank = np.arange(len(order)) - np.searchsorted(users[order], users[order])
    np.testing.assert_array_equal(keep, np.sort(order[rank < 7]))


@NON_PRIVATE
def test_a_user_level_fit_without_privacy_needs_a_value_range_before_the_spend():
    # It fitted, then every predict raised TypeError (no value_range_ to scale a user's solve by)
    X, y = _ratings(seed=4)
    budget = PrivacyAccountant()
    est = PrivateTensorCompletion(privacy_unit="user", accountant=budget, random_state=0)
    with pytest.raises(ValueError, match=r'privacy_unit="user" needs value_range even without '
                                         r"privacy: .* Give the values' public \(lo, hi\)"):
        est.fit(X, y)
    with pytest.raises(ValueError, match="needs value_range even without privacy"):
        est.privacy_cost(len(y), 2)
    assert budget.history() == []
    est.set_params(value_range=(1, 5)).fit(X, y)
    assert np.all(np.isfinite(est.predict(X[:5], history=(X[:5], y[:5]))))
