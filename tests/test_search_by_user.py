"""A private search of a user-level completion: its unit is the user (mode 0), counted by the
public ``shape[0]``; users stay whole across the split, each validation user is scored once on
her own history, and one user's whole history moves the released statistic within its
sensitivity."""
import numpy as np
import pytest

from dptensor import PrivacyAccountant, PrivateTensorCompletion
from dptensor.model_selection import PrivateGridSearchCV
from dptensor.model_selection._units import score_statistic, target_rows

RANGE = (1.0, 5.0)


def ratings(n_users, n_items, per_user, seed, rated=None):
    """Synthetic ratings: user and item offsets, values rounded to 1..5; only the first
    ``rated`` users rate (the others are counted by the shape but have no ratings)."""
    rng = np.random.default_rng(seed)
    rated = n_users if rated is None else rated
    a, b = rng.normal(0, 0.6, n_users), rng.normal(0, 0.6, n_items)
    X = np.column_stack([np.repeat(np.arange(rated), per_user),
                         rng.integers(0, n_items, rated * per_user)])
    y = np.clip(np.rint(3.5 + a[X[:, 0]] + b[X[:, 1]] + rng.normal(0, 0.4, len(X))), *RANGE)
    return X, y


def user_level(shape, **kw):
    kw = {"rank": 0, "epsilon": 2.0, "delta": 1e-6, "random_state": 0, **kw}
    return PrivateTensorCompletion(value_range=RANGE, shape=shape, privacy_unit="user", **kw)


class Recording(PrivateTensorCompletion):
    """Records which users each fit trains on and which each score reads (history and
    targets), to check that the search keeps users whole."""

    log = []

    def fit(self, X, y):
        Recording.log.append(("fit", np.asarray(X).copy()))
        return super().fit(X, y)

    def _score_units(self, X, y=None, history=None):
        Recording.log.append(("score", np.vstack([np.asarray(X), np.asarray(history[0])])))
        return super()._score_units(X, y, history=history)


def test_users_stay_whole_across_the_split_and_are_counted_by_the_shape():
    X, y = ratings(80, 30, 12, seed=1, rated=60)  # 20 users of the shape never rated
    Recording.log = []
    est = Recording(rank=0, value_range=RANGE, shape=(80, 30), privacy_unit="user",
                    epsilon=2.0, delta=1e-6)
    search = PrivateGridSearchCV(est, {"reg": [1.0, "auto"]}, epsilon=20.0, delta=1e-6,
                                 validation_fraction=0.5, refit=False, random_state=3).fit(X, y)
    assert search.privacy_cost_.unit == "user"
    fits = [rows for kind, rows in Recording.log if kind == "fit"]
    scores = [rows for kind, rows in Recording.log if kind == "score"]
    assert fits and len(fits) == len(scores)
    own = {u: np.sort(X[X[:, 0] == u, 1]) for u in np.unique(X[:, 0])}
    for trained, scored in zip(fits, scores):
        train_users, scored_users = set(trained[:, 0]), set(scored[:, 0])
        assert not train_users & scored_users
        assert train_users | scored_users <= set(own) and scored_users
        for u in scored_users:  # all of a validation user's ratings, split into two parts
            np.testing.assert_array_equal(np.sort(scored[scored[:, 0] == u, 1]), own[u])
        for u in train_users:
            assert np.sum(trained[:, 0] == u) == len(own[u])
    # the parts are sized by the shape's 80 users (40 to score), not the 60 seen
    assert search.privacy_cost(80, 2) == search.privacy_cost_


def test_the_history_target_rule_keys_each_rating_by_its_own_position():
    X, _ = ratings(50, 40, 10, seed=2)
    side = target_rows(X, seed=7)
    assert 0.4 < side.mean() < 0.6
    moved = np.vstack([X[X[:, 0] != 0], [[0, 1], [0, 2]]])  # user 0's history replaced
    np.testing.assert_array_equal(target_rows(moved, seed=7)[:np.sum(X[:, 0] != 0)],
                                  side[X[:, 0] != 0])


def neighbours(X, y, user, n_items, rng):
    """User ``user``'s whole history replaced: no ratings, one, many (other items), extremes."""
    rest = X[:, 0] != user
    out = [(X[rest], y[rest])]
    for count, values in ((1, [5.0]), (40, np.full(40, 1.0)), (25, rng.uniform(1, 5, 25)),
                          (3, [1.0, 5.0, 1.0])):
        mine = np.column_stack([np.full(count, user), rng.integers(0, n_items, count)])
        out.append((np.vstack([X[rest], mine]), np.concatenate([y[rest], values])))
    return out


@pytest.mark.filterwarnings("ignore:the released start_eigenvalues_")  # rank 2, few users
@pytest.mark.parametrize("rank", [0, 2])
def test_one_users_whole_history_moves_the_statistic_within_its_sensitivity(rank):
    X, y = ratings(120, 25, 15, seed=4)
    train = X[:, 0] < 80
    model = user_level((120, 25), rank=rank).fit(X[train], y[train])
    Xv, yv = X[~train], y[~train]
    codes = Xv[:, 0] - 80  # validation users renumbered 0 .. 39
    base, sens = score_statistic(model, Xv, yv, codes, 40, target_seed=11)
    assert sens == pytest.approx(1.0 / 40)  # the score's range (-1, 0) over 40 users
    rng = np.random.default_rng(5)
    moves = []
    for user in (80, 95, 119):
        for Xn, yn in neighbours(Xv, yv, user, 25, rng):
            stat, _ = score_statistic(model, Xn, yn, Xn[:, 0] - 80, 40, target_seed=11)
            moves.append(abs(float(stat.value()) - float(base.value())))
    assert max(moves) <= sens
    assert max(moves) > 0.2 * sens  # the bound is reached in part, not vacuous


def test_the_search_picks_a_sensible_candidate_on_synthetic_ratings():
    # 5,000 validation users: the score's noise std (under 0.001 of its range) is a fraction of
    # the gap between one rating a user and 32 (-0.024 against -0.019 unnoised); a Poisson law of
    # 20 expected runs leaves the good candidate unrun with probability about e^-10
    X, y = ratings(10_000, 60, 20, seed=6)
    picks = []
    for seed in range(3):
        search = PrivateGridSearchCV(user_level((10_000, 60)),
                                     {"max_ratings_per_user": [1, 32]}, epsilon=4.0, delta=1e-6,
                                     n_runs=20, distribution="poisson", validation_fraction=0.5,
                                     refit=False, random_state=seed).fit(X, y)
        picks.append(search.best_params_["max_ratings_per_user"])
    assert picks == [32] * 3


def test_a_search_by_user_is_refused_before_any_spend_where_it_cannot_hold():
    X, y = ratings(60, 20, 10, seed=7)
    accountant = PrivacyAccountant(epsilon=10.0, delta=1e-5)

    def search(est, grid=None):
        return PrivateGridSearchCV(est, grid or {"reg": [1.0, "auto"]}, epsilon=1.0,
                                   delta=1e-6, accountant=accountant, random_state=0)
    with pytest.raises(ValueError, match="public number of users: set the estimator's shape"):
        search(user_level(None)).fit(X, y)
    with pytest.raises(ValueError, match="groups would be a second unit"):
        search(user_level((60, 20))).fit(X, y, groups=X[:, 0])
    with pytest.raises(ValueError, match="the grid sets 'shape'"):
        search(user_level((60, 20)), {"shape": [(50, 20)]}).fit(X, y)
    value = PrivateTensorCompletion(rank=1, value_range=RANGE, shape=(60, 20))
    with pytest.raises(ValueError, match="protects one user, but the search splits and scores "
                                         "by observed value"):
        search(value, {"privacy_unit": ["user"]}).fit(X, y)
    assert accountant.history() == []
