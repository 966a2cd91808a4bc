"""Adversary review of the user-level guarantee (``privacy_unit="user"``): every release of a
whole fit, checked end to end by brute force when one user's whole history is replaced.

The harness runs a fit on ``D`` with every Gaussian release returning its statistic exactly
(recorded), then a fit on a neighbour ``D'`` (the last user's history replaced) whose releases
return ``D``'s values: each statistic of ``D'`` is then computed from the same released past, and
its distance to ``D``'s must stay within the sensitivity the release was calibrated to. The
bounding's generator is fixed and the replaced user's rows come last, so the other users keep
the same entries (as they do in distribution)."""
import warnings

import numpy as np
import pytest

from dptensor import PrivacyAccountant, PrivateTensorCompletion
from dptensor.algorithms.completion import user_level as ul
from dptensor.algorithms.completion import user_start as us


def _releases(monkeypatch, X, y, replay=None, **kw):
    """The statistics (with their sensitivities) of every release of a fit on ``(X, y)``."""
    seen = []

    def release(value, sens, z, rng, *a, **k):
        value = np.array(value, dtype=float)
        seen.append((value.copy(), float(sens)))
        return value if replay is None else replay[len(seen) - 1][0]

    def own_release(value, sens, z, rng, n_users, bound, longest):
        return release(value, sens, z, rng)

    bound = ul.bound_contributions

    def fixed_bound(u, i, n, m, rng):
        """The last user's entries and the others' bounded apart, each from a fixed stream: the
        others keep the same entries whatever the last user holds (as they do in distribution:
        their keys are draws of their own)."""
        keep = []
        for rows in (np.flatnonzero(u != n - 1), np.flatnonzero(u == n - 1)):
            keep.append(rows[bound(u[rows], i[rows], n, m, np.random.default_rng(0))])
        return np.sort(np.concatenate(keep))

    monkeypatch.setattr(ul, "_release", own_release)
    monkeypatch.setattr(us, "gaussian_release", release)
    monkeypatch.setattr(ul, "bound_contributions", fixed_bound)
    params = dict(rank=2, privacy_unit="user", epsilon=2.0, delta=1e-5, value_range=(1, 5),
                  random_state=0, n_iter=2, max_ratings_per_user=3)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        PrivateTensorCompletion(**{**params, **kw}).fit(X, y)
    return seen


def _others(rng, n_users, shape):
    rows = [(u, *(rng.integers(0, n) for n in shape[1:])) for u in range(n_users - 1)
            for _ in range(rng.integers(1, 6))]
    X = np.array(rows, dtype=np.int64)
    return X, rng.integers(1, 6, len(X)).astype(float)


def _adversaries(rng, last, shape, m):
    """Whole histories of the user ``last``: none, the bound exactly, far over it, all at one
    item (duplicates), all at one position of every other mode, extreme values."""
    n_items = shape[1]
    out = [np.zeros((0, len(shape)), dtype=np.int64)]
    out.append(np.array([(last, i, *([0] * (len(shape) - 2))) for i in range(m)]))
    out.append(np.array([(last, i % n_items, *(rng.integers(0, n) for n in shape[2:]))
                         for i in range(12 * m)]))
    out.append(np.array([(last, 0, *([0] * (len(shape) - 2)))] * (5 * m)))
    out.append(np.array([(last, i, *(rng.integers(0, n) for n in shape[2:]))
                         for i in range(n_items)]))
    hists = []
    for H in out:
        for v in (1.0, 5.0, None):
            vals = rng.choice([1.0, 5.0], len(H)) if v is None else np.full(len(H), v)
            hists.append((H.astype(np.int64), vals))
    return hists


CASES = [dict(shape=(5, 6)), dict(shape=(5, 6), rank=0), dict(shape=(5, 6, 3)),
         dict(shape=(5, 6, 3), rank=0), dict(shape=(5, 6), rank=1, value_range=(-3.0, 10.0)),
         dict(shape=(4, 4000), rank=1, n_iter=1)]


@pytest.mark.parametrize("case", CASES, ids=[str(c) for c in CASES])
def test_every_release_of_a_fit_moves_within_its_sensitivity_when_one_user_is_replaced(
        monkeypatch, case):
    rng = np.random.default_rng(5)
    kw = dict(case)
    shape = kw["shape"]
    last, m = shape[0] - 1, kw.get("max_ratings_per_user", 3)
    Xo, yo = _others(rng, shape[0], shape)
    hists = _adversaries(rng, last, shape, m)
    ref = _releases(monkeypatch, np.vstack([Xo, hists[0][0]]), np.r_[yo, hists[0][1]], **kw)
    worst = 0.0
    for H, v in hists[1:]:
        got = _releases(monkeypatch, np.vstack([Xo, H]), np.r_[yo, v], replay=ref, **kw)
        assert len(got) == len(ref)
        for (a, sens), (b, _) in zip(ref, got):
            moved = float(np.linalg.norm(a - b))
            worst = max(worst, moved / sens)
            assert moved <= sens * (1 + 1e-9), (a, b, moved, sens)
    assert worst > 0.3  # the adversaries move some release near its bound


def test_uncentred_values_are_refused_before_the_spend():
    """``fit_intercept=False`` left the values uncentred (``y / width``, up to 1.25 for
    ``value_range=(1, 5)``), while the total's sensitivity ``m sqrt(5) / 2`` rests on values in
    ``[-1/2, 1/2]``: one user's ``m`` ratings of 5 moved ``(sum, n)`` by ``m sqrt(1.25^2 + 1)``
    (the harness above measured 4.80 against 3.35 at ``m = 3``)."""
    rng = np.random.default_rng(5)
    X, y = _others(rng, 5, (5, 6))
    acc = PrivacyAccountant(epsilon=100.0, delta=1e-3)
    est = PrivateTensorCompletion(rank=0, privacy_unit="user", epsilon=2.0, delta=1e-5,
                                  value_range=(1, 5), shape=(5, 6), fit_intercept=False,
                                  accountant=acc, random_state=0)
    with pytest.raises(ValueError, match="fit_intercept must be True"):
        est.fit(X, y)
    assert acc.history() == []
    with pytest.raises(ValueError, match="fit_intercept must be True"):
        est.privacy_cost(10, 2)


def _user_fit(shape, rank, n, seed=0):
    rng = np.random.default_rng(seed)
    X = np.c_[rng.integers(0, shape[0], n), rng.integers(0, shape[1], n)]
    y = rng.integers(1, 6, n).astype(float)
    est = PrivateTensorCompletion(rank=rank, privacy_unit="user", epsilon=2.0, delta=1e-5,
                                  value_range=(1, 5), shape=shape, random_state=seed)
    return est, X, y


def test_the_power_start_is_not_priced_as_the_items_x_items_matrix_it_never_forms():
    """The memory bound of a user-level fit was the value-level statistics mode's, with
    ``7 n_items^2`` floats for a spectral start: at 40000 items 83.5 GiB, so the fit was refused
    (before the spend) on most machines although its power start holds a few megabytes."""
    est, _, _ = _user_fit((50, 40000), 2, 2000)
    need, _ = est._memory_estimate(2000, 2)
    assert need < 1 << 30


@pytest.mark.parametrize("shape, rank", [((300, 1500), 3), ((50, 5000), 3), ((200, 300), 0)])
def test_a_user_level_fit_allocates_within_its_memory_bound(shape, rank):
    import tracemalloc
    est, X, y = _user_fit(shape, rank, 20000)
    need, _ = est._memory_estimate(len(y), 2)
    tracemalloc.start()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            est.fit(X, y)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak <= need


def test_a_bound_too_large_for_float64_sums_is_refused_before_the_spend():
    """``max_ratings_per_user=2**62`` passed every check, was charged, then every release's
    rounding bound refused it after the spend (``shape[0] m`` terms past 2**52)."""
    from dptensor.model_selection import PrivateGridSearchCV
    X, y = _others(np.random.default_rng(5), 60, (60, 20))
    for m in (2**62, 10**30):
        acc = PrivacyAccountant(epsilon=100.0, delta=1e-3)
        est = PrivateTensorCompletion(rank=1, privacy_unit="user", epsilon=2.0, delta=1e-5,
                                      value_range=(1, 5), shape=(60, 20), accountant=acc,
                                      max_ratings_per_user=m, random_state=0)
        with pytest.raises(ValueError, match="max_ratings_per_user"):
            est.fit(X, y)
        with pytest.raises(ValueError, match="max_ratings_per_user"):
            est.privacy_cost(10, 2)
        search = PrivateGridSearchCV(est.set_params(max_ratings_per_user=3),
                                     {"max_ratings_per_user": [3, m]}, epsilon=8.0, delta=1e-5,
                                     accountant=acc, random_state=0)
        with pytest.raises(ValueError, match="max_ratings_per_user"):
            search.fit(X, y)
        assert acc.history() == []
    est.set_params(max_ratings_per_user=10**6).fit(X, y)  # a large bound that sums can round
    assert len(acc.history()) == 1
