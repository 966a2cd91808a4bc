"""Groups of rows for the tensor estimators (``fit(X, groups=...)``): one person's rows, one unit.

The exact third-order products (checked against Python integers), the cube scaling of a group, a
brute force that replacing a whole group (of any size) moves every query by at most its stated
sensitivity, the refusals before any spend, recovery, and the streaming blocks of whole groups.
"""
import math
import warnings

import numpy as np
import pytest

from dptensor import PrivacyAccountant, PrivateTensorDecomposition, StreamingTensorPower
from dptensor.algorithms.exact import BITS, grid_rows, grid_vectors
from dptensor.algorithms.grouped_tensor import (
    ExactGroupMoment,
    group_blocks,
    group_cube_bounds,
    group_moment_sensitivities,
    group_scale_cubes,
    moment_product_split,
    moment_tensor_split,
)
from dptensor.algorithms.tensor_power import row_sensitivity

_PARAMS = dict(n_restarts=4, n_iter=6)


def _ints(A):
    return np.asarray(A).astype(np.int64).astype(object)


def _exact_cubes(M, codes, n_groups):
    """Each group's ``sum_{i in g} ||q_i||^3`` in floats (the test's own, independent count)."""
    sq = [int(v) for v in (_ints(M) * _ints(M)).sum(axis=1)]
    sums = [0.0] * n_groups
    for s, g in zip(sq, codes):
        sums[g] += math.sqrt(s) ** 3
    return np.array(sums) / 2.0 ** (3 * BITS)


def _unit_columns(rng, d, L):
    U = rng.standard_normal((d, L))
    return U / np.linalg.norm(U, axis=0)


def test_the_split_moment_product_is_exact():
    """Against Python integers, rows of the largest grid norm included: no rounding at all."""
    rng = np.random.default_rng(0)
    X = np.vstack([rng.standard_normal((200, 5)) * 4, np.eye(5) * 3.0, -np.ones((3, 5))])
    M = grid_rows(X, 3.0)
    K = grid_vectors(np.hstack([_unit_columns(rng, 5, 3), np.eye(5)[:, :1]]))
    t = _ints(M).dot(_ints(K))
    stat = moment_product_split(M, K)
    assert (stat.ints[:-1] == _ints(M).T.dot(t * t) * 2 ** BITS).all()
    assert (stat.ints[-1] == (t * t * t).sum(axis=0)).all()
    assert stat.unit == 2.0 ** (-6 * BITS)
    with pytest.raises(ValueError, match="norm at most 2"):
        moment_product_split(M, grid_vectors(np.ones((5, 1))))  # not a unit column


def test_cube_sums_are_exact_where_an_int64_sum_would_wrap():
    """16 grid rows of norm 2**20 have cubes summing to 2**64: an int64 sum wraps to 0."""
    M = np.zeros((17, 2))
    M[:, 0] = 2.0 ** 20
    codes = np.r_[np.zeros(16, dtype=int), 1]
    bounds = group_cube_bounds(M, codes, 2)
    assert int(bounds[0]) == 2 ** 64 and int(bounds[1]) == 2 ** 60
    scaled = group_scale_cubes(M, codes, 2)
    assert _exact_cubes(scaled, codes, 2)[0] <= 1.0
    assert np.array_equal(scaled[-1], M[-1])  # a group within the bound is left as it is


@pytest.mark.parametrize("seed", range(4))
def test_scaled_groups_are_within_the_cube_bound_and_small_ones_untouched(seed):
    rng = np.random.default_rng(seed)
    sizes = rng.integers(1, 60, 8)
    codes = np.repeat(np.arange(8), sizes)
    X = rng.standard_normal((codes.size, 4)) * rng.choice([0.01, 0.3, 3.0], codes.size)[:, None]
    M = grid_rows(X, 1.0)
    before = _exact_cubes(M, codes, 8)
    S = group_scale_cubes(M, codes, 8)
    after = _exact_cubes(S, codes, 8)
    assert np.all(after <= 1.0)
    assert np.all(np.abs(S) <= np.abs(M))  # scaling only shrinks
    under = before <= 1.0
    assert np.array_equal(S[under[codes]], M[under[codes]])
    assert np.all(after[~under] > 0.99)  # scaled onto the bound, not far below it


def _queries(X, codes, n_groups, B, U):
    """Both released queries of a grouped fit, as exact Python integers with their unit."""
    M = group_scale_cubes(grid_rows(np.asarray(X, dtype=np.float64), B), codes, n_groups)
    vector, scalar = ExactGroupMoment(M, B, n_groups).apply_evaluate(U)
    return vector.ints, scalar.ints, vector.unit


def _replace_group(X, codes, g, rows):
    keep = codes != g
    return np.vstack([X[keep], rows]), np.r_[codes[keep], np.full(len(rows), g)]


@pytest.mark.parametrize("seed", range(6))
def test_replacing_one_whole_group_moves_each_query_by_at_most_its_sensitivity(seed):
    """Every group (of 1 to 40 rows) replaced by groups of other sizes, up to 40 rows of the
    largest norm along one axis: the change of each query stays within its sensitivity, and
    the largest change reaches most of it (the bound is not loose)."""
    rng = np.random.default_rng(seed)
    d, B, G = 4, 2.0, 5
    codes = np.r_[np.arange(G), rng.integers(0, G, 25)]
    X = rng.standard_normal((codes.size, d))
    U = _unit_columns(rng, d, 3)
    K = grid_vectors(U)
    s_vec, s_val = group_moment_sensitivities(K, B, G)
    base = _queries(X, codes, G, B, U)
    worst = 0.0
    for g in range(G):
        for rows in (B * np.outer(rng.choice([-1, 1], 40), U[:, 0]),
                     -B * np.tile(U[:, 0], (1, 1)), rng.standard_normal((7, d)) * 5,
                     np.zeros((1, d)), 3 * B * np.tile(np.eye(d)[0], (13, 1))):
            vec, val, unit = _queries(*_replace_group(X, codes, g, rows), G, B, U)
            moved = np.array([math.sqrt(float(sum(v * v for v in col))) for col in
                              (vec - base[0]).T]) * unit
            moved_val = np.abs((val - base[1]).astype(np.float64)) * unit
            assert np.all(moved <= s_vec) and np.all(moved_val <= s_val)
            worst = max(worst, float(np.max(moved / s_vec)))
    assert worst > 0.4


def test_a_group_adds_at_most_what_one_row_of_the_bound_adds():
    """A group of 1,000 copies of ``B u`` adds (after scaling) no more to ``T(u,u,u)`` than
    one row ``B u``: ``B^3 / G`` for unit ``u``."""
    u = np.array([0.6, 0.8, 0.0])
    B = 2.0
    one = _queries(B * u[None, :], np.zeros(1, dtype=int), 1, B, u[:, None])
    many = _queries(np.tile(B * u, (1000, 1)), np.zeros(1000, dtype=int), 1, B, u[:, None])
    one_val, many_val = (float(q[1][0]) * q[2] for q in (one, many))
    assert many_val <= one_val * (1 + 1e-9) and many_val > 0.99 * one_val


def _skewed(n_people, d=6, seed=0, rows_each=4):
    """People with ``rows_each`` rows each, drawn from a skewed two-component model."""
    rng = np.random.default_rng(seed)
    V = np.linalg.qr(rng.standard_normal((d, 2)))[0].T
    H = rng.exponential(size=(n_people * rows_each, 2)) - 1.0
    return 0.5 * H @ V, np.repeat(np.arange(n_people), rows_each), V


def _match(components, V):
    return np.max(np.abs(components @ V.T), axis=1)


def test_the_split_dense_moment_is_exact():
    rng = np.random.default_rng(2)
    M = grid_rows(np.vstack([rng.standard_normal((150, 4)) * 3, np.eye(4), -np.eye(4)]), 2.0)
    ints = _ints(M)
    assert (moment_tensor_split(M).ints == np.einsum("ia,ib,ic->abc", ints, ints, ints)).all()


@pytest.mark.parametrize("seed", range(3))
def test_replacing_one_group_moves_the_dense_moments_distinct_entries_within_bound(seed):
    """Input perturbation's release: the distinct entries ``i <= j <= k`` of the grouped dense
    moment move (in l2) by at most ``2 B^3 / G`` when a whole group is replaced."""
    rng = np.random.default_rng(seed)
    d, B, G = 3, 2.0, 4
    codes = np.r_[np.arange(G), rng.integers(0, G, 12)]
    X = rng.standard_normal((codes.size, d))
    upper = np.triu(np.ones((d, d), dtype=bool))
    idx = np.nonzero(upper[:, :, None] & upper[None, :, :])

    def entries(X_, codes_):
        M = group_scale_cubes(grid_rows(X_, B), codes_, G)
        stat = moment_tensor_split(M, B ** 3 / G)
        return stat.ints[idx], stat.unit
    base, unit = entries(X, codes)
    bound, worst = row_sensitivity(B, G), 0.0
    for g in range(G):
        for rows in (np.full((30, d), B), -B * np.eye(d)[:1], rng.standard_normal((9, d)) * 4):
            moved = math.sqrt(float(sum(v * v for v in entries(*_replace_group(
                X, codes, g, rows))[0] - base))) * unit
            assert moved <= bound * (1 + 2.0 ** -50)  # the margin the release adds
            worst = max(worst, moved / bound)
    assert worst > 0.4


@pytest.mark.parametrize("cls,extra", [(PrivateTensorDecomposition, {}),
                                       (PrivateTensorDecomposition,
                                        {"method": "input_perturbation"}),
                                       (PrivateTensorDecomposition, {"moment": "dense"}),
                                       (StreamingTensorPower, {})])
def test_a_grouped_fit_recovers_the_components_at_large_epsilon(cls, extra):
    X, groups, V = _skewed(10000)
    est = cls(2, epsilon=1e4, data_norm=4.0, random_state=0, **_PARAMS, **extra)
    est.fit(X, groups=groups)
    assert np.all(_match(est.components_, V) > 0.99)
    assert est.privacy_cost_.unit == "group of rows"
    # a person's four rows are summed (within the bound): the eigenvalues are per person
    assert np.all(np.abs(est.eigenvalues_ - 4 * 0.25) < 0.2)


def test_dense_grouped_queries_carry_an_allowance_of_public_terms(monkeypatch):
    """A dense grouped fit rounds the exact moment once: its queries' allowance counts
    ``d (d + 1) / 2 + d + 9`` terms whatever the number of rows (which is private)."""
    import dptensor.algorithms.tensor_power as power_module

    seen = []
    real = power_module.gaussian_release

    def spy(value, sensitivity, *args, rounding=None, **kwargs):
        seen.append(rounding)
        return real(value, sensitivity, *args, rounding=rounding, **kwargs)
    monkeypatch.setattr(power_module, "gaussian_release", spy)
    for rows_each in (1, 5):
        X, groups, _ = _skewed(300, d=4, rows_each=rows_each)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            PrivateTensorDecomposition(1, epsilon=1.0, data_norm=2.0, moment="dense",
                                       random_state=0, **_PARAMS).fit(X, groups=groups)
    assert seen and {r.terms for r in seen} == {4 * 5 // 2 + 4 + 9, 4 * 5 // 2 + 4 + 9 + 5}
    assert {r.total for r in seen} == {8.0}  # B^3, no deflation for the first component


def _one_owner_data():
    """One person owns 1,000 rows along e1; 500 people own one row each along e0."""
    X = np.vstack([np.tile([0.0, 1.0, 0.0], (1000, 1)), np.tile([1.0, 0.0, 0.0], (500, 1))])
    return X, np.r_[np.zeros(1000, dtype=int), 1 + np.arange(500)]


def test_one_person_with_many_rows_does_not_steer_the_decomposition():
    X, groups = _one_owner_data()
    fit = dict(epsilon=50.0, data_norm=1.0, random_state=0, **_PARAMS)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        rows = PrivateTensorDecomposition(1, **fit).fit(X)
        people = PrivateTensorDecomposition(1, **fit).fit(X, groups=groups)
    assert abs(rows.components_[0, 1]) > 0.9  # per row: the owner's e1 dominates
    assert abs(people.components_[0, 0]) > 0.9  # per person: e0
    assert people.eigenvalues_[0] == pytest.approx(500 / 501, abs=0.1)


def test_the_stream_cuts_whole_groups_into_blocks_by_a_permutation_of_the_groups():
    rng = np.random.default_rng(3)
    codes = np.repeat(np.arange(30), rng.integers(1, 5, 30))
    rng_codes = rng.permutation(codes.size)
    codes = codes[rng_codes]
    blocks = group_blocks(codes, 30, 7, 4, np.random.default_rng(0))
    seen = [set(codes[rows]) for rows in blocks]
    assert [len(s) for s in seen] == [7] * 4  # 7 whole groups a block, 2 groups unread
    assert all(a.isdisjoint(b) for i, a in enumerate(seen) for b in seen[i + 1:])
    for rows, groups in zip(blocks, seen):  # every row of a block's groups, and no other
        assert np.array_equal(np.sort(rows), np.flatnonzero(np.isin(codes, list(groups))))
    again = group_blocks(codes, 30, 7, 4, np.random.default_rng(0))
    assert all(np.array_equal(a, b) for a, b in zip(blocks, again))  # from G and the seed only


def test_the_stream_releases_one_block_per_step_at_the_group_sensitivity(monkeypatch):
    """Each block's joint release is at the grouped sensitivity over the batch's group count."""
    import dptensor.algorithms.streaming_tensor as stream_module

    X, groups, _ = _skewed(600, d=4)
    calls = []
    real = stream_module.joint_gaussian_release

    def spy(values, sensitivity, *args, **kwargs):
        calls.append(sensitivity)
        return real(values, sensitivity, *args, **kwargs)
    monkeypatch.setattr(stream_module, "joint_gaussian_release", spy)
    est = StreamingTensorPower(2, n_restarts=3, n_iter=4, epsilon=1.0, data_norm=2.0,
                               random_state=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        est.fit(X, groups=groups)
    assert est.batch_size_ == 600 // 8 and est.n_samples_seen_ == 8 * 75
    assert len(calls) == 8
    row_bound = 2 * 2.0 ** 3 * math.sqrt(2 * 3) / 75  # block_sensitivity at n = 75 groups
    assert all(row_bound <= s <= row_bound * 1.001 for s in calls)


def test_refusals_come_before_any_spend():
    X, groups, _ = _skewed(100, d=3)
    budget = PrivacyAccountant(epsilon=10.0, delta=1e-5)
    kw = dict(epsilon=1.0, data_norm=1.0, accountant=budget)
    bad = {"wrong length": groups[:-1], "NaN": np.r_[groups[:-1], np.nan],
           "None": np.array(list(groups[:-1]) + [None], dtype=object),
           "2-D": groups.reshape(-1, 1)}
    for cls in (PrivateTensorDecomposition, StreamingTensorPower):
        for labels in bad.values():
            with pytest.raises(ValueError, match="groups"):
                cls(1, **kw).fit(X, groups=labels)
        with pytest.raises(ValueError, match="groups"):
            cls(1, data_norm=1.0).fit(X, groups=groups)  # epsilon=inf bounds nothing
    T = np.zeros((3, 3, 3))
    with pytest.raises(ValueError, match="tensor, whose unit is one entry"):
        PrivateTensorDecomposition(1, epsilon=1.0, accountant=budget).fit(T, groups=[0, 1, 2])
    stream = StreamingTensorPower(1, n_iter=5, batch_size=30, **kw)
    with pytest.raises(ValueError, match="the number of groups = 100 is too few"):
        stream.fit(X, groups=groups)
    with pytest.raises(TypeError, match="one array"):
        StreamingTensorPower(1, **kw).fit(iter([X]), groups=groups)
    with pytest.raises(ValueError, match="partial_fit takes no groups"):
        StreamingTensorPower(1, **kw).partial_fit(X, groups=groups)
    assert budget.history() == []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        PrivateTensorDecomposition(1, **kw, **_PARAMS).fit(X, groups=groups.astype(str))
    (entry,) = budget.history()
    assert "group of rows" in entry.label


def test_a_grouped_fit_refuses_dask_before_any_spend():
    da = pytest.importorskip("dask.array")
    X, groups, _ = _skewed(100, d=3)
    budget = PrivacyAccountant(epsilon=10.0, delta=1e-5)
    for cls in (PrivateTensorDecomposition, StreamingTensorPower):
        with pytest.raises(TypeError, match="dask"):
            cls(1, epsilon=1.0, data_norm=1.0, accountant=budget).fit(
                da.from_array(X, chunks=50), groups=groups)
    assert budget.history() == []


def test_privacy_cost_previews_the_grouped_fit_at_the_number_of_groups():
    X, groups, _ = _skewed(500, d=3)
    for cls in (PrivateTensorDecomposition, StreamingTensorPower):
        est = cls(1, epsilon=1.0, data_norm=1.0, random_state=0, **_PARAMS)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            est.fit(X, groups=groups)
        preview = est.privacy_cost(500, 3)
        assert preview.noise_multiplier == est.privacy_cost_.noise_multiplier
        assert est.privacy_cost_.epsilon == pytest.approx(1.0, rel=1e-6)


@pytest.mark.parametrize("cls", [PrivateTensorDecomposition, StreamingTensorPower])
def test_a_search_by_group_keeps_groups_whole(cls, monkeypatch):
    import dptensor.model_selection._search as search_module
    from dptensor.model_selection import PrivateGridSearchCV

    X, labels, _ = _skewed(800, d=3, rows_each=3)
    fits = []
    real_fit = search_module._fit_run

    def fit_spy(est, X_, y, rows, codes):
        fits.append(rows)
        return real_fit(est, X_, y, rows, codes)
    monkeypatch.setattr(search_module, "_fit_run", fit_spy)
    search = PrivateGridSearchCV(cls(1, data_norm=2.0, n_restarts=3), {"n_iter": [2, 4]},
                                 epsilon=2.0, validation_fraction=0.5, random_state=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        search.fit(X, groups=labels)
    for rows in fits[:-1]:  # the runs (the last fit is the refit on every row)
        rest = np.setdiff1d(np.arange(labels.size), rows)
        assert set(labels[rows]).isdisjoint(labels[rest]) and len(set(labels[rows])) == 400
    assert search.best_estimator_.privacy_cost_.unit == "group of rows"
