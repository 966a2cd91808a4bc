"""Attacks on the whole-group unit (``fit(X, groups=...)``): each test is a concrete way an
adversary could make a group count for more than one unit, or make two releases share noise."""
from decimal import Decimal

import numpy as np
import pytest

import dptensor.algorithms.streaming_tensor as streaming
import dptensor.model_selection._search as search_module
from dptensor import PrivacyAccountant, PrivatePCA, StreamingTensorPower
from dptensor._validation import check_groups
from dptensor.model_selection import PrivateGridSearchCV


def _block_releases(monkeypatch, X, groups):
    """``(generator state, statistic)`` of each block a seeded grouped stream releases."""
    seen, release = [], streaming.joint_gaussian_release

    def spy(parts, sensitivity, noise_multiplier, rng, **kw):
        seen.append((repr(rng.bit_generator.state), repr(parts)))
        return release(parts, sensitivity, noise_multiplier, rng, **kw)

    monkeypatch.setattr(streaming, "joint_gaussian_release", spy)
    StreamingTensorPower(1, n_restarts=2, n_iter=2, batch_size=1, epsilon=1.0, delta=1e-3,
                         data_norm=1.0, random_state=0).fit(X, groups=np.asarray(groups))
    return seen


def test_grouped_stream_blocks_of_other_lengths_never_share_noise(monkeypatch):
    # Blocks of whole groups have no fixed length: rows "a b | c" and "a | b c" read the same
    # rows in the same order, so a digest of the rows alone keyed both fits' second blocks alike,
    # and two seeded fits of one X under two groupings (no accountant) released different
    # statistics with the same noise: their difference was exact.
    X = np.array([[0.3, 0.1, 0.0], [0.0, 0.3, 0.1], [0.1, 0.0, 0.3]])
    releases = [r for g in ([0, 0, 1], [0, 1, 1], [1, 1, 0], [1, 0, 0])
                for r in _block_releases(monkeypatch, X, g)]
    noise_of = {}
    for state, statistic in releases:
        assert noise_of.setdefault(state, statistic) == statistic


def _score_releases(monkeypatch, X, labels):
    """``(generator state, score)`` of each score a seeded search by group releases."""
    seen, release = [], search_module.exact_gaussian_release

    def spy(mean, sensitivity, noise_multiplier, rng, **kw):
        seen.append((repr(rng.bit_generator.state), repr(mean)))
        return release(mean, sensitivity, noise_multiplier, rng, **kw)

    monkeypatch.setattr(search_module, "exact_gaussian_release", spy)
    PrivateGridSearchCV(PrivatePCA(1, data_norm=1.0), {"n_components": [1, 2]}, epsilon=2.0,
                        validation_fraction=0.5, random_state=0).fit(X, groups=labels)
    return seen


def test_search_by_group_keys_its_noise_by_the_grouping(monkeypatch):
    # A seeded search digested X and y but not the groups: two searches of one X under two
    # groupings of as many groups (no accountant) drew the same scores' noise on different
    # scores, so the difference of their released best_score_ was exact.
    X = np.random.default_rng(0).standard_normal((240, 5)) * 0.3
    releases = [r for labels in (np.repeat(np.arange(120), 2), np.tile(np.arange(120), 2))
                for r in _score_releases(monkeypatch, X, labels)]
    noise_of = {}
    for state, score in releases:
        assert noise_of.setdefault(state, score) == score


@pytest.mark.parametrize("missing", [np.float32("nan"), np.float16("nan"), Decimal("NaN")])
def test_a_nan_label_of_any_type_is_refused(missing):
    # A float32 NaN in an object array is no Python float: it passed the missing-label check,
    # and np.unique made each such row a group of its own, so one person whose labels were
    # missing counted as that many people (a float64 NaN is refused).
    labels = np.array([np.float32(1.0)] + [missing] * 3, dtype=object)
    with pytest.raises(ValueError, match="missing label"):
        check_groups(labels, 4)


def _tuple_labels():
    # (site, id) pairs whose id is a NaN: each float('nan') is its own object, so no tuple
    # equals another, yet each equals itself (the missing-label check compares v != v)
    labels = np.empty(12, dtype=object)
    labels[:] = [("a", float("nan")), ("a", 1.0), ("a", float("nan"))] * 4
    return labels


@pytest.mark.parametrize("labels", [
    np.array([frozenset({0, 1}), frozenset({0}), frozenset({1}), frozenset({2})] * 5,
             dtype=object),
    _tuple_labels()])
def test_labels_without_a_total_order_are_refused_not_split(labels):
    # np.unique sorts and merges equal neighbours; under a partial order equal labels were not
    # side by side: 4 people's 20 rows (sets) counted as 16 groups, and the 4 rows of ("a", 1.0)
    # among tuples holding a NaN as 4 groups: one person as several units
    with pytest.raises(TypeError, match="cannot be compared"):
        check_groups(labels, len(labels))


@pytest.mark.parametrize("dtype", ["datetime64[D]", "timedelta64[s]"])
def test_a_nat_label_is_refused_before_any_spend(dtype):
    # NaT, the missing value of dates, was taken as a label (all such rows one group) where
    # the same labels as objects, or a float NaN, are refused
    labels = np.array([1] * 7 + ["NaT"], dtype=dtype)
    accountant = PrivacyAccountant(epsilon=10.0, delta=1e-3)
    X = np.random.default_rng(0).standard_normal((8, 3)) * 0.3
    with pytest.raises(ValueError, match="missing label"):
        PrivatePCA(1, data_norm=1.0, epsilon=1.0, delta=1e-4,
                   accountant=accountant).fit(X, groups=labels)
    assert accountant.history() == []
