"""Adversarial checks of the user-level search, the completion auto rules and the latent models'
new releases: each test is a neighbour pair (or a spy) that an earlier version got wrong."""
import warnings

import numpy as np
import pytest

from dptensor import PrivacyAccountant, PrivateTensorCompletion

RANGE = (1.0, 5.0)


def _ratings(seed, n_users=40, n_items=20, per_user=8):
    rng = np.random.default_rng(seed)
    X = np.column_stack([np.repeat(np.arange(n_users), per_user),
                         rng.integers(0, n_items, n_users * per_user)])
    return X, rng.integers(1, 6, len(X)).astype(float)


def test_user_level_fit_without_shape_is_refused_before_the_spend():
    """A user-level fit with ``shape=None`` inferred the shape from the private indices and
    released it as ``shape_`` (and ``biases_[1]``'s length): replacing the last user's history by
    one rating item 25 moved ``shape_`` from (40, 20) to (40, 26) with certainty."""
    X, y = _ratings(1)
    neighbour = X.copy()
    neighbour[np.flatnonzero(X[:, 0] == X[:, 0].max())[0], 1] = 25  # one user's history
    for data in (X, neighbour):
        acc = PrivacyAccountant()
        est = PrivateTensorCompletion(value_range=RANGE, privacy_unit="user", rank=0,
                                      epsilon=2.0, delta=1e-6, random_state=0, accountant=acc)
        with pytest.raises(ValueError, match="needs the public shape"):
            est.fit(data, y)
        assert acc.history() == []  # refused before the spend
    # with the public shape set, the released shape is the same on both
    shapes = set()
    for data in (X, neighbour):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)
            est = PrivateTensorCompletion(value_range=RANGE, privacy_unit="user", rank=0,
                                          shape=(40, 26), epsilon=2.0, delta=1e-6,
                                          random_state=0).fit(data, y)
        shapes.add(tuple(est.shape_))
    assert shapes == {(40, 26)}


@pytest.mark.parametrize("preview", ["privacy_cost", "expected_noise"])
def test_user_level_preview_without_shape_is_refused_like_the_fit(preview):
    """The previews of a private user-level fit answered without a shape, for a fit that refuses
    it (the inferred shape is private): they refuse it the same way, before reading their
    arguments (even invalid ones); a non-private preview and one with the shape still answer."""
    est = PrivateTensorCompletion(value_range=RANGE, privacy_unit="user", rank=3, epsilon=1.0,
                                  delta=1e-6)
    for args in ((320, 2), (-1, 0)):
        with pytest.raises(ValueError, match='privacy_unit="user" needs the public shape'):
            getattr(est, preview)(*args)
    est.set_params(shape=(40, 20))
    assert getattr(est, preview)(320, 2) is not None
    if preview == "privacy_cost":
        free = PrivateTensorCompletion(privacy_unit="user", epsilon=np.inf, value_range=RANGE)
        assert free.privacy_cost(320, 2).n_queries == 0  # no release: no shape needed
