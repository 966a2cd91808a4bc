"""Attacks on the whole-group unit (``fit(X, groups=...)``): each test is a concrete way an
adversary could make a group count for more than one unit, or make two releases share noise."""
import sys
import warnings
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


# ------------------------------------------------------------------ whole groups, replayed
def _replayed_releases(monkeypatch, make, X, groups, replay=None):
    """``[(statistic, sensitivity, noise multiplier)]`` of every Gaussian release of a grouped
    fit, noise off; with ``replay`` each release answers the replayed fit's, so every later query
    (a power step's vectors, the whitening, the centring mean) is that fit's."""
    import dptensor._base as base
    from dptensor.mechanisms import releases

    log, original = [], releases.gaussian_release

    def spy(value, sensitivity, noise_multiplier, rng, dtype=None, *, rounding=None):
        value = np.array(value, dtype=np.float64)
        log.append((value, np.asarray(releases._with_rounding(sensitivity, rounding), float),
                    float(noise_multiplier)))
        out = value if replay is None else replay[len(log) - 1][0]
        out = out.copy() if out.ndim else out[()]
        return out if dtype is None else np.asarray(out).astype(dtype)

    for name, module in list(sys.modules.items()):
        if name.startswith("dptensor") and getattr(module, "gaussian_release", None) is original:
            monkeypatch.setattr(module, "gaussian_release", spy)
    # the same coins for both fits (a fit's stream is keyed by its rows' count, among others)
    monkeypatch.setattr(base, "spend_generator", lambda *a, **k: np.random.default_rng(5))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # noise-dominated components: expected at this size
        make().fit(X, groups=groups)
    return log


def _moved(change, sensitivity):
    """How far a release moved, in units of its sensitivity: one l2 query, or one query a
    column (the tensor power steps), or a sensitivity per value."""
    if sensitivity.ndim == 0:
        return float(np.linalg.norm(change) / sensitivity)
    if change.ndim == 2 and sensitivity.shape == change.shape[1:]:
        return float(np.max(np.linalg.norm(change, axis=0) / sensitivity))
    return float(np.max(np.abs(change) / sensitivity))


def _grouped_estimators():
    from dptensor import PrivateTensorDecomposition
    from dptensor.latent import PrivateGaussianMixture, PrivateLatentDirichletAllocation
    private = dict(epsilon=1.0, delta=1e-5)
    return {
        "pca": lambda: PrivatePCA(2, data_norm=1.0, method="power", **private),
        "tensor": lambda: PrivateTensorDecomposition(2, data_norm=1.0, n_iter=3, n_restarts=2,
                                                     **private),
        "mixture": lambda: PrivateGaussianMixture(2, data_norm=1.0, whitening="power", **private),
        "topics": lambda: PrivateLatentDirichletAllocation(2, whitening="power", **private),
    }


@pytest.mark.parametrize("kind", ["pca", "tensor", "mixture", "topics"])
def test_a_grouped_fit_replayed_against_whole_group_neighbours_stays_within_its_sensitivity(
        kind, monkeypatch):
    """The estimators' own grouped fit, not its helpers: group 0 of 40 holds one extreme row,
    then 1000 rows along another axis (or the opposite one), or 1000 rows then one. Replayed on
    the first fit's releases, every release moves by at most its stated sensitivity (rounding
    allowance included), and both fits make the same releases at the same sensitivities."""
    make, topics = _grouped_estimators()[kind], kind == "topics"
    rng = np.random.default_rng(1)
    codes = np.r_[1 + np.arange(39), rng.integers(1, 40, 60)]
    others = (rng.poisson(1.0, (len(codes), 5)).astype(float) if topics
              else rng.standard_normal((len(codes), 5)) * 0.3)

    def extreme(size, axis, sign=1.0):
        rows = np.zeros((size, 5))
        rows[:, axis] = 50.0 if topics else sign
        return rows

    def data(rows):
        return np.vstack([others, rows]), np.r_[codes, np.zeros(len(rows), int)]

    worst = 0.0
    for first, second in [(extreme(1, 0), extreme(1000, 1)), (extreme(1000, 0), extreme(1, 1)),
                          (extreme(1, 0), extreme(1000, 0, -1.0))]:
        log = _replayed_releases(monkeypatch, make, *data(first))
        log2 = _replayed_releases(monkeypatch, make, *data(second), replay=log)
        assert [(a[0].shape, a[1].tolist(), a[2]) for a in log2] == \
            [(a[0].shape, a[1].tolist(), a[2]) for a in log]
        for a, b in zip(log, log2):
            worst = max(worst, _moved(b[0] - a[0], a[1]))
    assert worst <= 1.0, worst
    assert worst > 0.5  # not vacuous: a whole group moves some release near its bound
