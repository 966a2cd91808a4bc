"""The units a search splits: checked before its spend, as each candidate's fit would check them."""
from __future__ import annotations

import numpy as np
import scipy.sparse as sp
from sklearn.utils import get_tags
from sklearn.utils.validation import check_array

from .._base import SearchTag
from .._validation import check_numeric_array
from ..algorithms.completion.observations import check_indices
from ..algorithms.exact import range_mean

__all__ = ["as_units", "search_tag", "check_units", "check_sparse_units", "units_nbytes",
           "public_overrides", "split_units", "unit_scores", "target_rows", "user_scores",
           "user_codes", "score_statistic", "check_target"]


def as_units(X, y, *, alone: bool):
    """``(X, y)`` checked before the search spends: a failure in a candidate's fit would come after.

    X must be 2-D (rows, or completion's index tuples). An estimator searched ``alone`` gets its
    data as given, so X must also be numeric and finite, as its fit requires (a pipeline's
    stateless steps may transform X first, so only the shape is checked there); ``y``, when
    given, must be finite numbers.
    """
    if sp.issparse(X):  # rows of a CSR matrix split as dense rows do (each unit one row)
        if alone:
            X = check_array(check_numeric_array(X), accept_sparse="csr", dtype="numeric",
                            ensure_min_samples=0)
        return X.tocsr(), _checked_y(y, alone)
    X = np.asarray(X)
    if X.ndim != 2:
        raise ValueError(f"a private search splits units (rows of X); X must be 2-D, got {X.ndim} "
                         f"dimension(s): reshape a single feature with X.reshape(-1, 1)")
    if alone:  # refuses strings, complex numbers (in words that quote none of X), NaN, inf
        X = check_array(check_numeric_array(X), dtype="numeric", ensure_min_samples=0)
    return X, _checked_y(y, alone)


def _checked_y(y, alone: bool):
    if y is not None:
        y = np.asarray(y)
        if alone and y.dtype.kind == "O":  # numbers held as objects, as the estimator takes them
            try:
                y = y.astype(np.float64)
            except (TypeError, ValueError):
                raise ValueError("y must hold finite numbers, and some entry is no number"
                                 ) from None
        # kind, not np.number: complex numbers are numbers, and scikit-learn's check prints them
        if alone and not (y.dtype.kind in "biuf" and np.all(np.isfinite(y))):
            raise ValueError("y must hold finite numbers (no NaN or "
                             "infinity): pass only the observed entries")
    return y


def check_sparse_units(estimator, learner, X, groups) -> None:
    """Refuse sparse ``X`` before the spend where a candidate's fit would refuse it after: an
    estimator (or a pipeline step) that takes dense rows only, index tuples, or groups (the
    PCA family bounds a group on dense rows only)."""
    if not sp.issparse(X):
        return
    if search_tag(learner).indices:
        raise TypeError("a completion's X holds index tuples, dense: pass X.toarray()")
    if groups is not None:
        raise TypeError("a private search with groups needs dense rows, as its candidates' fits "
                        "with groups do: pass X.toarray()")
    if not get_tags(estimator).input_tags.sparse:
        raise TypeError(f"{type(estimator).__name__} takes dense rows only: a search of it "
                        "needs dense X; pass X.toarray()")


def units_nbytes(X) -> int:
    """The bytes of the units (a CSR matrix: its three arrays)."""
    if sp.issparse(X):
        return int(X.data.nbytes + X.indices.nbytes + X.indptr.nbytes)
    return int(X.nbytes)


def search_tag(learner) -> SearchTag:
    """What the estimator tells the search about itself (:class:`~dptensor._base.SearchTag`)."""
    return getattr(learner, "_search_tag", None) or SearchTag()


def check_units(learner, X, y):
    """The data checks every candidate's fit would make, made once before the spend: a search
    refused for its data (NaN, infinity, text, bad indices, no y where the fit needs one)
    leaves the ledger unchanged."""
    check_target(learner, y)
    if search_tag(learner).indices:
        check_indices(X, learner.shape)  # X holds index tuples
    else:
        # check_numeric_array first: scikit-learn's check quotes a string and prints complex data
        check_array(check_numeric_array(X), dtype="numeric", ensure_all_finite=True,
                    ensure_2d=False, input_name="X", accept_sparse="csr")
    if y is not None:
        check_array(check_numeric_array(y, "y", ensure_2d=False), dtype="numeric",
                    ensure_all_finite=True, ensure_2d=False, input_name="y")


def check_target(learner, y) -> None:
    """Refuse a search without ``y`` of a learner whose fit needs one (a completion: the values
    at the index tuples), before the spend: every candidate's fit would fail after it."""
    if y is None and (search_tag(learner).indices or get_tags(learner).target_tags.required):
        what = ("the observed values at the index tuples X" if search_tag(learner).indices
                else "the target")
        raise ValueError(f"{type(learner).__name__}'s fit needs y ({what}), and the search was "
                         "given none: pass search.fit(X, y)")


def public_overrides(prefix, learner, X) -> dict:
    """Public settings a candidate trained on part of the units needs to cover all of them."""
    if search_tag(learner).indices and learner.shape is None:
        # index tuples: the tensor's shape from all observed positions (public), so that candidates
        # trained on the training entries can predict the validation ones
        return {prefix + "shape": tuple(int(v) + 1 for v in np.max(X, axis=0))}
    return {}


def split_units(rng, n_units: int, n_train: int, codes=None):
    """``(train rows, validation rows, validation codes)``: a random split of the units, drawn
    from the search's generator. Without ``codes`` a unit is a row; with them (each row's group,
    ``0 .. n_units - 1``) a unit is a group, and all of a group's rows fall on one side."""
    order = rng.permutation(n_units)
    if codes is None:
        return order[:n_train], order[n_train:], None
    side = np.empty(n_units, dtype=np.int64)
    side[order] = np.arange(n_units)  # a group's place in the permutation
    place = side[codes]
    train, val = np.flatnonzero(place < n_train), np.flatnonzero(place >= n_train)
    return train, val, place[val] - n_train  # validation groups renumbered 0 .. n_val - 1


def unit_scores(values, lo: float, hi: float, codes, n_units: int) -> np.ndarray:
    """One score per validation unit: a row's own, or a group's mean of its rows' scores, each
    clipped into ``[lo, hi]`` first (NaN counted as ``lo``): a group adds one value in the range,
    as a row does, so the released mean's sensitivity is ``(hi - lo) / n_units`` either way. A
    unit with no scored row (a user without targets, or without ratings) gets the fixed ``lo``:
    whether she has any is her own data, so her value must stay in the range either way."""
    values = np.asarray(values, dtype=np.float64)
    if codes is None:
        return values
    clipped = np.clip(np.where(np.isnan(values), lo, values), lo, hi)
    sums = np.bincount(codes, weights=clipped, minlength=n_units)
    counts = np.bincount(codes, minlength=n_units)
    return np.clip(np.where(counts > 0, sums / np.maximum(counts, 1), lo), lo, hi)


_MIX = (np.uint64(0x9E3779B97F4A7C15), np.uint64(0xBF58476D1CE4E5B9),
        np.uint64(0x94D049BB133111EB))


def target_rows(X, seed: int) -> np.ndarray:
    """Which of the index tuples ``X`` a search by user scores (the others are the user's
    history): the top bit of a keyed hash (splitmix64 steps) of each tuple. A rating's side is a
    function of its own position and the public ``seed`` alone, never of another row, so
    replacing one user's ratings moves no other user's split."""
    h = np.full(len(X), np.uint64(seed % 2**64), dtype=np.uint64)
    with np.errstate(over="ignore"):  # the hash wraps modulo 2^64 by design
        for column in np.asarray(X, dtype=np.int64).T:
            h = (h ^ column.astype(np.uint64)) + _MIX[0]
            h = (h ^ (h >> np.uint64(30))) * _MIX[1]
            h = (h ^ (h >> np.uint64(27))) * _MIX[2]
            h ^= h >> np.uint64(31)
    return (h >> np.uint64(63)) == 1


def user_scores(learner, X, y, codes, n_units: int, seed: int):
    """``(scores, (lo, hi))``: one score per validation user (``codes`` her number, ``0 ..
    n_units - 1``, on each of her rows ``X``, ``y``). Her ratings split by :func:`target_rows`
    into a history and targets; the targets are predicted from her own history (joint DP:
    ``predict(X, history=...)`` solves each user's factor from her rows alone), and her score is
    the mean of her targets' per-rating scores (:func:`unit_scores`): one value in the range."""
    X = np.asarray(X, dtype=np.int64)
    lo_v, hi_v = learner.value_range_
    y = np.clip(np.asarray(y, dtype=np.float64), lo_v, hi_v)  # as the fit clips them
    target = target_rows(X, seed)
    if not target.any():  # no target at all: the range from one public placeholder rating
        X, y, target = np.zeros((1, X.shape[1]), np.int64), np.full(1, lo_v), np.ones(1, bool)
        codes = np.full(1, n_units)  # counted for no user
    history = (X[~target], y[~target])
    values, bounds = learner._score_units(X[target], y[target], history=history)
    lo, hi = bounds
    return unit_scores(values, lo, hi, codes[target], n_units)[:n_units], bounds


def user_codes(learner, X, groups, in_pipeline: bool):
    """``(codes, n_users)`` of a search by user: each row's user (mode 0 of the index tuples) and
    the public number of users ``shape[0]``, never the number seen; refused before the spend
    where a search by user cannot hold."""
    if groups is not None:
        raise ValueError("a user-level completion is searched by user (mode 0 of the index "
                         "tuples): groups would be a second unit; drop groups")
    if in_pipeline:
        raise TypeError("a user-level completion is searched alone, not in a pipeline: each "
                        "validation user's history must reach its predict unchanged")
    if learner.shape is None:
        raise ValueError("a search by user needs the public number of users: set the "
                         "estimator's shape (its first side), not the number seen in X")
    return np.asarray(X[:, 0], dtype=np.int64), int(learner.shape[0])


def score_statistic(learner, Xv, yv, val_codes, n_val: int, target_seed=None):
    """``(statistic, sensitivity)``: the exact mean over the ``n_val`` validation units of each
    unit's score, and how far one unit moves it. By user (``target_seed``): each user's mean
    score on her targets, predicted from her own history (:func:`user_scores`)."""
    if target_seed is not None:  # by user: one mean score a validation user, in the range
        values, bounds = user_scores(learner, Xv, yv, val_codes, n_val, target_seed)
        val_codes = None  # the values are the users' own already
    else:
        values, bounds = learner._score_units(Xv, yv)
    if bounds is None:
        raise ValueError(f"{type(learner).__name__}'s score has no per-unit bound (set "
                         "data_norm or value_range): it cannot be released privately")
    lo, hi = bounds
    # a unit's score clipped into [lo, hi], NaN counted as lo, on a grid of the range: a
    # per-unit map, summed exactly, so the sensitivity holds at any size, and a NaN cannot
    # make the release refuse a non-finite value
    mean = range_mean(unit_scores(values, lo, hi, val_codes, n_val), lo, hi)
    return mean, (hi - lo) / n_val * (1.0 + 2.0 ** -52)
