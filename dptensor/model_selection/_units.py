"""The units a search splits: checked before its spend, as each candidate's fit would check them."""
from __future__ import annotations

import numpy as np
import scipy.sparse as sp
from sklearn.utils.validation import check_array

from .._base import SearchTag
from .._validation import check_numeric_array
from ..algorithms.completion.observations import check_indices

__all__ = ["as_units", "search_tag", "check_units", "public_overrides", "split_units",
           "unit_scores"]


def as_units(X, y, *, alone: bool):
    """``(X, y)`` checked before the search spends: a failure in a candidate's fit would come after.

    X must be 2-D (rows, or completion's index tuples). An estimator searched ``alone`` gets its
    data as given, so X must also be numeric and finite, as its fit requires (a pipeline's
    stateless steps may transform X first, so only the shape is checked there); ``y``, when
    given, must be finite numbers.
    """
    if sp.issparse(X):
        raise TypeError("a private search takes dense X: sparse input is not supported (the split "
                        "and the checks before the spend work on dense rows); pass X.toarray()")
    X = np.asarray(X)
    if X.ndim != 2:
        raise ValueError(f"a private search splits units (rows of X); X must be 2-D, got {X.ndim} "
                         f"dimension(s): reshape a single feature with X.reshape(-1, 1)")
    if alone:  # refuses strings, complex numbers (in words that quote none of X), NaN, inf
        X = check_array(check_numeric_array(X), dtype="numeric", ensure_min_samples=0)
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
    return X, y


def search_tag(learner) -> SearchTag:
    """What the estimator tells the search about itself (:class:`~dptensor._base.SearchTag`)."""
    return getattr(learner, "_search_tag", None) or SearchTag()


def check_units(learner, X, y):
    """The data checks every candidate's fit would make, made once before the spend: a search
    refused for its data (NaN, infinity, text, bad indices) leaves the ledger unchanged."""
    if search_tag(learner).indices:
        check_indices(X, learner.shape)  # X holds index tuples
    else:
        # check_numeric_array first: scikit-learn's check quotes a string and prints complex data
        check_array(check_numeric_array(X), dtype="numeric", ensure_all_finite=True,
                    ensure_2d=False, input_name="X")
    if y is not None:
        check_array(check_numeric_array(y, "y", ensure_2d=False), dtype="numeric",
                    ensure_all_finite=True, ensure_2d=False, input_name="y")


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
    as a row does, so the released mean's sensitivity is ``(hi - lo) / n_units`` either way."""
    values = np.asarray(values, dtype=np.float64)
    if codes is None:
        return values
    clipped = np.clip(np.where(np.isnan(values), lo, values), lo, hi)
    sums = np.bincount(codes, weights=clipped, minlength=n_units)
    counts = np.bincount(codes, minlength=n_units)
    return np.clip(sums / np.maximum(counts, 1), lo, hi)
