"""Groups of rows as the privacy unit (``fit(X, groups=...)``): one person's rows are one unit.

The issue's case (one person owning many rows must not steer the components), a brute-force check
that replacing a whole group moves every released statistic by at most its one-row sensitivity,
and the refusals, all before any spend.
"""
import math
import warnings

import numpy as np
import pytest

from dptensor import PrivacyAccountant, PrivatePCA
from dptensor._base import SearchTag
from dptensor.algorithms.exact import BITS, gram, grid_rows, grid_vectors, row_sum, sum_of_squares
from dptensor.algorithms.groups import (
    gram_product_split,
    group_average_rows,
    group_power_sensitivity,
    group_scale_rows,
)
from dptensor.algorithms.power import covariance_sensitivity


def _one_owner_data(seed=0):
    """One person owns 1,000 rows along e1; 500 people own one row each along +-e0."""
    rng = np.random.default_rng(seed)
    owner = np.tile([0.0, 1.0, 0.0], (1000, 1))
    others = np.outer(rng.choice([-1.0, 1.0], 500), [1.0, 0.0, 0.0])
    groups = np.r_[np.zeros(1000, dtype=int), 1 + np.arange(500)]
    return np.vstack([owner, others]), groups


@pytest.mark.parametrize("method", ["analyze_gauss", "power"])
@pytest.mark.parametrize("epsilon", [0.5, 1.0, 10.0])
def test_one_person_with_many_rows_does_not_steer_the_components(epsilon, method):
    X, groups = _one_owner_data()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        rows = PrivatePCA(1, epsilon=epsilon, data_norm=1.0, method=method, centered=True,
                          random_state=0).fit(X)
        people = PrivatePCA(1, epsilon=epsilon, data_norm=1.0, method=method, centered=True,
                            random_state=0).fit(X, groups=groups)
        centred = PrivatePCA(1, epsilon=epsilon, data_norm=1.0, method=method,
                             random_state=0).fit(X, groups=groups)  # the mean released too
    assert abs(rows.components_[0, 1]) > 0.9  # per row: the owner's e1 dominates
    assert abs(people.components_[0, 0]) > 0.9  # per person: e0
    assert abs(centred.components_[0, 0]) > 0.9
    assert people.n_samples_ == 501
    assert people.privacy_cost_.unit == "group of rows"
    assert rows.privacy_cost_.unit == "row"


def _grid(X, B):
    return grid_rows(np.asarray(X, dtype=np.float64), B)


def _statistics(X, codes, n_groups, B, V, mean=None):
    """Every statistic a grouped PCA fit releases, as floats, for rows X (raw)."""
    M = _grid(X, B)
    stats = {"mean": row_sum(group_average_rows(M, codes, n_groups), B).value()}
    if mean is not None:
        M = grid_rows(M, B, mean, scale=B / 2.0 ** BITS)
    S = group_scale_rows(M, codes, n_groups)
    stats["total"] = sum_of_squares(S, B ** 2).value()
    stats["gram"] = np.triu(gram(S, B ** 2).value())
    stats["power"] = gram_product_split(S, grid_vectors(V), B ** 2).value()
    return stats


def _replace_group(X, codes, g, rows):
    keep = codes != g
    return np.vstack([X[keep], rows]), np.r_[codes[keep], np.full(len(rows), g)]


@pytest.mark.parametrize("seed", range(6))
def test_replacing_one_whole_group_moves_each_statistic_by_its_sensitivity(seed):
    rng = np.random.default_rng(seed)
    d, B, G = 4, 2.0, 5
    codes = rng.integers(0, G, 30)
    codes[:G] = np.arange(G)  # every group holds a row
    X = rng.standard_normal((30, d)) * rng.uniform(0.1, 3.0, (30, 1))
    V = np.linalg.qr(rng.standard_normal((d, 2)))[0]
    mean = rng.uniform(-0.3, 0.3, d)
    # the neighbour: group 0 replaced by many rows along one axis, of the largest norm
    size = int(rng.integers(1, 40))
    axis = np.eye(d)[int(rng.integers(d))] * B * rng.choice([-1.0, 1.0])
    Y, codes_y = _replace_group(X, codes, 0, np.tile(axis, (size, 1)))
    for centre in (None, mean):
        a = _statistics(X, codes, G, B, V, centre)
        b = _statistics(Y, codes_y, G, B, V, centre)
        assert np.linalg.norm(a["mean"] - b["mean"]) <= 2 * B * (1 + 1e-12)
        assert abs(a["total"] - b["total"]) <= B ** 2 * (1 + 1e-12)
        assert np.linalg.norm(a["gram"] - b["gram"]) <= covariance_sensitivity(B) * (1 + 1e-12)
        assert np.linalg.norm(a["power"] - b["power"]) <= group_power_sensitivity(
            grid_vectors(V), B)


def test_a_group_weighs_at_most_one_row_of_the_bound():
    """A group of many aligned rows adds exactly what one row of norm B adds, no more."""
    B, rows = 1.0, np.tile([0.0, 1.0], (1000, 1))
    S = group_scale_rows(_grid(rows, B), np.zeros(1000, dtype=int), 1)
    total = sum_of_squares(S, B ** 2).value()
    assert total <= B ** 2
    assert total > 0.99 * B ** 2


def test_the_split_power_product_is_exact():
    rng = np.random.default_rng(1)
    M = _grid(rng.standard_normal((300, 5)), 3.0)
    K = grid_vectors(np.linalg.qr(rng.standard_normal((5, 2)))[0])
    exact = M.astype(np.int64).astype(object).T @ (M.astype(np.int64) @ K.astype(np.int64))
    assert (gram_product_split(M, K).ints == exact).all()


def test_refusals_come_before_any_spend():
    X, groups = _one_owner_data()
    budget = PrivacyAccountant(epsilon=10.0, delta=1e-5)
    pca = PrivatePCA(1, epsilon=1.0, data_norm=1.0, accountant=budget)
    bad = {"wrong length": groups[:-1], "NaN": np.r_[groups[:-1], np.nan],
           "None": np.array(list(groups[:-1]) + [None], dtype=object),
           "2-D": groups.reshape(-1, 1)}
    for why, labels in bad.items():
        with pytest.raises(ValueError, match="groups"):
            pca.fit(X, groups=labels)
    with pytest.raises(ValueError, match="groups"):
        PrivatePCA(1, data_norm=1.0).fit(X, groups=groups)  # epsilon=inf bounds nothing
    with pytest.raises(ValueError, match="groups"):
        pca.partial_fit(X, groups=groups)
    with pytest.raises(ValueError, match="groups"):
        PrivatePCA(1, epsilon=1.0, input="precomputed", accountant=budget).fit(
            np.eye(3), groups=[0, 1, 2])
    for labels in (np.array([1, "1"] * 750, dtype=object), [1, "1"] * 750):  # a list too
        with pytest.raises(TypeError, match="mixed types"):
            pca.fit(X, groups=labels)
    assert budget.history() == []
    pca.fit(X, groups=list(groups.astype(str)))  # string labels are labels too, in a list too
    (entry,) = budget.history()
    assert "group of rows" in entry.label
    assert math.isclose(pca.privacy_cost_.epsilon, 1.0, rel_tol=1e-6)


def test_privacy_cost_previews_the_grouped_fit_at_the_number_of_groups():
    X, groups = _one_owner_data()
    pca = PrivatePCA(1, epsilon=1.0, data_norm=1.0, random_state=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        pca.fit(X, groups=groups)
    preview = pca.privacy_cost(501, 3)
    assert preview.noise_multiplier == pca.privacy_cost_.noise_multiplier


class _RowsOnly(PrivatePCA):
    """PrivatePCA telling a search it takes no groups: a search by group must refuse it."""

    _search_tag = SearchTag()


def test_a_search_refuses_groups_for_an_estimator_without_a_group_bound_before_any_spend():
    from dptensor.model_selection import PrivateGridSearchCV

    X = np.abs(np.random.default_rng(0).standard_normal((50, 4)))
    budget = PrivacyAccountant(epsilon=10.0, delta=1e-5)
    search = PrivateGridSearchCV(_RowsOnly(1, data_norm=1.0), {"n_iter": [1, 2]},
                                 epsilon=1.0, accountant=budget)
    with pytest.raises(ValueError, match="cannot be searched by group"):
        search.fit(X, groups=np.arange(50))
    assert budget.history() == []


def test_a_search_of_one_group_says_it_counts_groups_before_any_spend():
    # 600 rows but one person: "n_samples = 1" alone read as a miscount of the rows
    from dptensor.model_selection import PrivateGridSearchCV
    accountant = PrivacyAccountant(epsilon=5.0, delta=1e-5)
    search = PrivateGridSearchCV(PrivatePCA(data_norm=1.0), {"n_components": [1, 2]},
                                 epsilon=1.0, accountant=accountant, random_state=0)
    X = np.random.default_rng(0).standard_normal((600, 4)) / 2
    with pytest.raises(ValueError, match="too few .*groups when searched by group"):
        search.fit(X, groups=np.zeros(600, dtype=int))
    assert accountant.history() == []


def test_a_search_by_group_keeps_groups_whole_and_scores_per_group(monkeypatch):
    """Searched by group, every run trains on whole groups (the candidates get their groups), the
    score averages each validation group once, and the sensitivity counts groups."""
    import dptensor.model_selection._search as search_module
    from dptensor.model_selection import PrivateGridSearchCV

    rng = np.random.default_rng(8)
    labels = np.repeat(np.arange(120), rng.integers(1, 6, 120))  # 120 people, 1-5 rows each
    X = rng.standard_normal((labels.size, 5)) * 0.3
    fits, releases = [], []
    real_fit, real_release = search_module._fit_run, search_module.exact_gaussian_release

    def fit_spy(est, X_, y, rows, codes):
        fits.append((rows, None if codes is None else codes[rows]))
        return real_fit(est, X_, y, rows, codes)

    def release_spy(mean, sensitivity, *args, **kwargs):
        releases.append(sensitivity)
        return real_release(mean, sensitivity, *args, **kwargs)
    monkeypatch.setattr(search_module, "_fit_run", fit_spy)
    monkeypatch.setattr(search_module, "exact_gaussian_release", release_spy)
    search = PrivateGridSearchCV(PrivatePCA(1, data_norm=1.0), {"n_components": [1, 2]},
                                 epsilon=2.0, validation_fraction=0.5, random_state=0)
    search.fit(X, groups=labels)
    codes = np.unique(labels, return_inverse=True)[1]
    for rows, run_codes in fits[:-1]:  # the runs (the last fit is the refit on every row)
        train_groups = set(codes[rows])
        rest = np.setdiff1d(np.arange(labels.size), rows)
        assert train_groups.isdisjoint(codes[rest])  # no group on both sides
        assert len(train_groups) == 60 and np.array_equal(run_codes, codes[rows])
    assert len(fits[-1][0]) == labels.size
    hi_lo = 1.0  # PrivatePCA's per-unit score range, normalised by data_norm
    assert releases and all(s == pytest.approx(hi_lo / 60) for s in releases)
    assert search.best_estimator_.privacy_cost_.unit == "group of rows"


def test_a_group_of_two_to_the_23_rows_of_the_largest_norm_is_still_scaled():
    """Per-group sums of squares are exact at any size: 2**23 grid rows of norm 2**20 sum to
    2**63, which an int64 sum wraps to a negative number (and so left the group unscaled)."""
    from dptensor.algorithms.groups import group_scale_rows, group_sums_of_squares
    n = 2 ** 23 + 1
    M = np.full((n, 1), 2.0 ** 20)
    codes = np.zeros(n, dtype=np.int64)
    codes[-1] = 1  # a second group of one row
    sums = group_sums_of_squares(M, codes, 2)
    assert int(sums[0]) == 2 ** 63 and int(sums[1]) == 4 ** 20
    scaled = group_scale_rows(M, codes, 2)
    first = int(np.sum(scaled[:-1, 0].astype(np.int64) ** 2))
    assert first <= 4 ** 20  # the whole group now adds at most what one row of norm B adds
