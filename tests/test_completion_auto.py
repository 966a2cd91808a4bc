"""``perturbation="auto"`` and ``rank="auto"`` of PrivateTensorCompletion: the rule fitted on
``benchmarks/bench_completion_auto.py`` reads public quantities only, keeps today's choice where
it keeps the mode, and runs exactly the recipe it names where it changes it."""
from __future__ import annotations

import warnings

import numpy as np
import pytest

import dptensor._completion_auto as completion_module
from dptensor.algorithms.completion.modes import auto as auto_module
from dptensor.algorithms.completion.modes.auto import (RATINGS_OFFSET_SHARE, USER_START_RATIO,
                                                       user_start_ratio)
from dptensor.completion import PrivateTensorCompletion
from dptensor.datasets import make_low_rank_tensor
from expected_warnings import NON_PRIVATE, noise_dominated


def _ratings(seed, users=200, items=300, n=4000):
    """Sparse ratings on 1..5 (density 0.067): user and item offsets, random positions."""
    rng = np.random.default_rng(seed)
    cells = rng.choice(users * items, n, replace=False)
    X = np.stack([cells // items, cells % items], axis=1)
    a, b = rng.normal(0, 0.5, users), rng.normal(0, 0.6, items)
    y = np.clip(np.rint(3.5 + a[X[:, 0]] + b[X[:, 1]] + rng.normal(0, 0.9, n)), 1, 5)
    return X, y


def _spy(monkeypatch):
    """Every call of the rule, with its arguments."""
    calls, real = [], completion_module.auto_choice

    def spy(**kw):
        calls.append(kw)
        return real(**kw)

    monkeypatch.setattr(completion_module, "auto_choice", spy)
    return calls


def _settings(est, X, y):
    """What a fit of ``est`` on ``(X, y)`` runs: its resolved parameters (the mode by name) and
    its event. The noise draws differ between spellings by design: they are keyed by the
    estimator's parameters."""
    plan = est._plan_for(est._check_data(X, y))
    p = dict(plan.settings.params, mode=type(plan.settings.params["mode"]).__name__)
    return p, plan.event


def _fit(X, y, **kw):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # noise-dominated starts are not the point
        return PrivateTensorCompletion(value_range=(1, 5), random_state=0, **kw).fit(X, y)


def _est(**kw):
    return PrivateTensorCompletion(value_range=(1, 5), random_state=0, **kw)


def test_sparse_ratings_get_the_gradient_recipe_exactly():
    """On sparse ratings auto runs DP gradient descent with the offsets' recipe share: every
    resolved setting and the event are those of the recipe spelled out."""
    X, y = _ratings(0)
    auto = _fit(X, y, epsilon=1.0)
    assert auto.perturbation_ == "gradient"
    recipe = dict(epsilon=1.0, perturbation="gradient", offset_share=RATINGS_OFFSET_SHARE, rank=3)
    assert _settings(_est(epsilon=1.0), X, y) == _settings(_est(**recipe), X, y)
    assert auto.privacy_cost_.event == _fit(X, y, **recipe).privacy_cost_.event
    # and a share the user sets is kept
    assert _fit(X, y, epsilon=1.0, offset_share=0.5).privacy_cost_.event == _fit(
        X, y, epsilon=1.0, perturbation="gradient", offset_share=0.5).privacy_cost_.event


def test_dense_low_rank_study_keeps_todays_choice_bit_for_bit():
    data = make_low_rank_tensor(random_state=0)  # 20^3 at half observed: density 0.5
    X, y = data["indices"], data["values"]
    kw = dict(epsilon=2.0, value_range=(-0.5, 1.5), random_state=0)
    for decomposition, today in (("cp", "statistics"), ("tucker", "gradient")):
        auto = PrivateTensorCompletion(decomposition=decomposition, **kw)
        spelled = PrivateTensorCompletion(decomposition=decomposition, perturbation=today, rank=3,
                                          **kw)
        assert _settings(auto, X, y) == _settings(spelled, X, y)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)
            assert auto.fit(X, y).perturbation_ == today


def test_value_rule_reads_the_public_shape_and_count_only(monkeypatch):
    """Two data sets with the same shape and number of entries (positions and values differ)
    get the same choice and the same event; the preview with the shape set prices it."""
    calls = _spy(monkeypatch)
    (X1, y1), (X2, y2) = _ratings(1), _ratings(2)
    a = _fit(X1, y1, epsilon=1.0, shape=(200, 300))
    b = _fit(X2, y2, epsilon=1.0, shape=(200, 300))
    assert not np.array_equal(X1, X2) and a.perturbation_ == b.perturbation_ == "gradient"
    assert a.privacy_cost_.event == b.privacy_cost_.event
    sized = [c for c in calls if c["n_obs"] is not None]
    assert sized and all(c == sized[0] for c in sized)
    assert set(sized[0]) == {"decomposition", "epsilon", "delta", "shape", "n_obs", "unit",
                             "max_ratings_per_user", "offset_share", "position_ratio"}
    assert sized[0]["position_ratio"] is None  # epsilon 1: the implicit mode is not in question
    preview = PrivateTensorCompletion(epsilon=1.0, value_range=(1, 5), shape=(200, 300))
    assert preview.privacy_cost(len(y1), 2).event == a.privacy_cost_.event


def test_user_rule_never_reads_the_number_of_ratings_or_the_positions(monkeypatch):
    """At user level the positions are private: the rule gets no count, and a shape only when the
    user sets one (an inferred shape would read the largest indices)."""
    calls = _spy(monkeypatch)
    X1, y1 = _ratings(3, n=3000)
    X2, y2 = _ratings(4, n=5000)
    kw = dict(epsilon=1.0, privacy_unit="user", shape=(200, 300))
    a, b = _fit(X1, y1, **kw), _fit(X2, y2, **kw)
    assert all(c["n_obs"] is None for c in calls if c["unit"] == "user")
    assert a.privacy_cost_.event == b.privacy_cost_.event
    assert a.factors_[1].shape[1] == b.factors_[1].shape[1]
    calls.clear()
    with pytest.raises(ValueError, match="needs the public shape"):  # refused, before the spend
        _fit(X1[X1[:, 1] < 150], y1[X1[:, 1] < 150], epsilon=1.0, privacy_unit="user")
    assert calls and all(c["shape"] is None for c in calls)


def test_user_rank_auto_follows_the_start_preview():
    """rank="auto" at user level: offsets only where the start's preview noise buries the
    factors (about 1e3 users at epsilon <= 1), rank 3 where it can learn; a set rank is kept."""
    small, large = (300, 600), (70_000, 10_000)
    assert user_start_ratio(1.0, 1e-5, small, 64) > USER_START_RATIO
    assert user_start_ratio(1.0, 1e-5, large, 64) < USER_START_RATIO

    def leaves(shape, **kw):
        est = PrivateTensorCompletion(epsilon=1.0, delta=1e-5, value_range=(1, 5),
                                      privacy_unit="user", shape=shape, **kw)
        return len(list(est.privacy_cost(10 * shape[0], 2).event.leaves()))

    offsets_only = leaves(small, rank=0)
    assert leaves(small) == offsets_only
    assert leaves(large) == leaves(large, rank=3) > offsets_only
    assert leaves(small, rank=3) == leaves(large, rank=3)
    X, y = _ratings(5)
    fit = _fit(X, y, epsilon=1.0, delta=1e-5, privacy_unit="user", shape=(200, 300))
    assert fit.factors_[1].shape[1] == 0 and fit.start_eigenvalues_.size == 0
    # the value level keeps rank 3
    assert _fit(X, y, epsilon=1.0).factors_[0].shape[1] == 3


def test_rule_thresholds_are_the_documented_ones():
    """The docstring and the guide quote these numbers."""
    assert auto_module.RATINGS_DENSITY == {2: 0.25, 3: 0.005}
    assert RATINGS_OFFSET_SHARE == 0.97 and USER_START_RATIO == 0.3
    doc = PrivateTensorCompletion.__doc__
    assert "0.25" in doc and "0.005" in doc and "0.3" in doc


@pytest.mark.parametrize("bad", [{"rank": "three"}, {"rank": 0}, {"shape": ("a", 3)}])
def test_bad_rank_or_shape_is_still_refused_by_its_own_check(bad):
    X, y = _ratings(6)
    with pytest.raises((ValueError, TypeError), match="rank|shape"):
        PrivateTensorCompletion(epsilon=1.0, value_range=(1, 5), **bad).fit(X, y)


# ---------------------------------------------------------------- factor_modes="auto"
def _cp_with_context(seed, context_interaction, shape=(40, 40, 40), n=20_000):
    """Rank-2 CP entries plus noise of sd 0.3 at random positions: with ``context_interaction``
    the third mode has a factor of its own, else the interaction does not vary along it."""
    rng = np.random.default_rng(seed)
    U, V, W = (rng.normal(0, 1, (s, 2)) for s in shape)
    W = W if context_interaction else np.ones_like(W)
    X = np.stack([rng.integers(0, s, 2 * n) for s in shape], axis=1)
    y = np.einsum("er,er,er->e", U[X[:, 0]], V[X[:, 1]], W[X[:, 2]])
    y = y + rng.normal(0, 0.3, len(y))
    return X[:n], y[:n], X[n:], y[n:]


def _test_rmse(est, X, y):
    return float(np.sqrt(np.mean((est.predict(X) - y) ** 2)))


@NON_PRIVATE
@pytest.mark.parametrize("interaction, chosen", [(True, (0, 1, 2)), (False, (0, 1))])
def test_nonprivate_auto_factor_modes_finds_the_structure_and_refits_it(interaction, chosen):
    X, y, X_test, y_test = _cp_with_context(3, interaction)
    params = dict(rank=2, shape=(40, 40, 40), random_state=0)
    auto = PrivateTensorCompletion(**params).fit(X, y)
    assert auto.factor_modes_ == chosen
    # the chosen structure, refitted on every entry: the fit that names it (another random start,
    # as the parameters key the generator; the same optimum)
    named = PrivateTensorCompletion(factor_modes=chosen, **params).fit(X, y)
    np.testing.assert_allclose(auto.predict(X_test), named.predict(X_test), rtol=5e-3,
                               atol=1e-2)
    # and it is the better one on fresh entries of the same tensor
    other = (0, 1) if chosen == (0, 1, 2) else None
    rival = PrivateTensorCompletion(factor_modes=other, **params).fit(X, y)
    assert _test_rmse(auto, X_test, y_test) < _test_rmse(rival, X_test, y_test)


@NON_PRIVATE
@noise_dominated()
@pytest.mark.filterwarnings(r"ignore:the released offsets_rms_ of mode\(s\)")  # no offsets here
def test_auto_factor_modes_fits_every_mode_where_it_cannot_ask_the_data(monkeypatch):
    import dptensor.algorithms.completion.modes.nonprivate as nonprivate
    X, y, _, _ = _cp_with_context(4, False)
    calls = []
    real = nonprivate.choose_fixed_modes
    monkeypatch.setattr(nonprivate, "choose_fixed_modes",
                        lambda *a: calls.append(1) or real(*a))
    shape = (40, 40, 40)
    # a private fit (the choice would read the values), too few entries, Tucker, a matrix
    fits = [PrivateTensorCompletion(epsilon=1.0, value_range=(-6, 6), shape=shape,
                                    random_state=0).fit(X, y),
            PrivateTensorCompletion(shape=shape, random_state=0).fit(X[:5_000], y[:5_000]),
            PrivateTensorCompletion(decomposition="tucker", shape=shape, n_iter=3,
                                    random_state=0).fit(X, y),
            PrivateTensorCompletion(random_state=0).fit(X[:, :2], y)]
    assert [f.factor_modes_ for f in fits] == [(0, 1, 2)] * 3 + [(0, 1)]
    assert len(calls) == 2  # asked, and answered every mode, below 10 000 entries and for a matrix


# ---------------------------------------------------------------- the implicit mode's choice
def _taste_ratings(seed, strength, users=300, items=500, n=20_000):
    """Ratings whose positions follow a rank-2 taste with ``strength`` (0: popularity alone)."""
    rng = np.random.default_rng(seed)
    tu, ti = rng.normal(size=(users, 2)), rng.normal(size=(items, 2))
    affinity = tu @ ti.T / np.sqrt(2)
    pop = 1.0 / np.arange(1, items + 1) ** 0.9
    pick = (pop[None, :] * np.exp(strength * affinity)).ravel()
    flat = rng.choice(users * items, n, replace=False, p=pick / pick.sum())
    X = np.stack([flat // items, flat % items, rng.integers(0, 50, n)], axis=1)
    y = np.clip(np.rint(3.5 + 0.5 * affinity.ravel()[flat] + rng.normal(0, 0.9, n)), 1, 5)
    return X, y, (users, items, 50)  # density 0.0027: ratings-like


def test_position_ratio_is_one_on_random_positions_and_large_where_they_follow_a_taste():
    from dptensor.algorithms.completion.positions import position_ratio
    plain = [position_ratio(*_taste_ratings(s, 0.0)[::2]) for s in (0, 1)]
    taste = [position_ratio(*_taste_ratings(s, 1.5)[::2]) for s in (0, 1)]
    assert all(0.8 < r < 1.3 for r in plain)
    assert all(r > 1.6 for r in taste)


@pytest.mark.filterwarnings("ignore::UserWarning")
def test_auto_takes_the_implicit_recipe_only_where_positions_and_epsilon_allow(monkeypatch):
    import dptensor._completion_auto as completion_auto
    X, y, shape = _taste_ratings(2, 1.5)
    base = dict(value_range=(1, 5), shape=shape, random_state=0)
    fit = PrivateTensorCompletion(epsilon=10.0, **base).fit(X, y)
    assert (fit.perturbation_, fit.factor_modes_) == ("implicit", (0, 1))
    assert fit.factors_[0].shape[1] == 2 * auto_module.IMPLICIT_RECIPE["rank"]
    # the positions decide, never the values: other values at the same positions, same choice
    other = PrivateTensorCompletion(epsilon=10.0, **base).fit(X, 6.0 - y)
    assert other.perturbation_ == "implicit"
    calls = []
    monkeypatch.setattr(completion_auto, "position_ratio",
                        lambda *a, **k: calls.append(1) or 10.0)
    refused = [PrivateTensorCompletion(epsilon=1.0, **base),  # epsilon below IMPLICIT_EPSILON
               PrivateTensorCompletion(epsilon=10.0, factor_modes=None, **base),  # three modes
               PrivateTensorCompletion(epsilon=10.0, perturbation="gradient", **base)]
    assert [m.fit(X, y).perturbation_ for m in refused] == ["gradient"] * 3
    assert calls == []  # not even read
    Xr, yr, shape_r = _taste_ratings(2, 0.0)
    plain = PrivateTensorCompletion(epsilon=10.0, value_range=(1, 5), shape=shape_r,
                                    random_state=0).fit(Xr, yr)
    assert calls == [1] and plain.perturbation_ == "implicit"  # the ratio alone decides


@pytest.mark.filterwarnings("ignore::UserWarning")
def test_the_positions_rule_refuses_bad_factor_modes_by_name_and_fits_one_user():
    from dptensor import PrivacyAccountant
    X, y, shape = _taste_ratings(5, 1.5)
    for bad, error in [(0, TypeError), ("ab", TypeError), ((0, 7), ValueError)]:
        budget = PrivacyAccountant(epsilon=10.0)
        est = PrivateTensorCompletion(factor_modes=bad, epsilon=3.0, value_range=(1, 5),
                                      accountant=budget)
        with pytest.raises(error, match="factor_modes"):
            est.fit(X, y)
        assert budget.history() == []
    rng = np.random.default_rng(6)  # one user: no second direction in who rated what
    one = np.c_[np.zeros(60, int), rng.integers(0, 400, 60), rng.integers(0, 50, 60)]
    fit = PrivateTensorCompletion(epsilon=3.0, value_range=(1, 5), random_state=0).fit(
        one, rng.integers(1, 6, 60).astype(float))
    assert fit.perturbation_ == "gradient"


@pytest.mark.filterwarnings("ignore::UserWarning")
def test_a_private_search_runs_the_plans_it_priced_never_the_positions_choice(monkeypatch):
    # The search prices each run with privacy_cost, which sees no positions: its runs (and the
    # refit) must spend those plans, so the positions rule is off inside it.
    import dptensor._completion_auto as completion_auto
    from dptensor.model_selection import PrivateGridSearchCV
    X, y, shape = _taste_ratings(2, 1.5)
    est = PrivateTensorCompletion(value_range=(1, 5), shape=shape, random_state=0)
    assert est.set_params(epsilon=10.0).fit(X, y).perturbation_ == "implicit"  # alone: it would
    monkeypatch.setattr(completion_auto, "position_ratio",
                        lambda *a, **k: pytest.fail("a search's run read the positions"))
    search = PrivateGridSearchCV(PrivateTensorCompletion(value_range=(1, 5), shape=shape),
                                 {"n_iter": [3, 5]}, epsilon=60.0, random_state=0).fit(X, y)
    assert search.best_estimator_.perturbation_ == "gradient"
    priced = search.best_estimator_.privacy_cost(len(y), 3)
    assert search.best_estimator_.privacy_cost_.event == priced.event
