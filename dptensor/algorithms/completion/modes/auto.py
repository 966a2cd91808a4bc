"""``perturbation="auto"`` and ``rank="auto"``: what a private completion fit runs when the user
names neither, from public quantities only.

The rule was fitted on a grid of studies (``benchmarks/bench_completion_auto.py``, results in
``benchmarks/results/completion_auto.{md,png}``: every mode at its documented recipe, on
MovieLens-like ratings at several sizes and on low-rank tensors, epsilon 0.5 to 10, validation
RMSE on a held-out part of the training entries, never a test split).

Its inputs, and why each is public:

* value unit (one observed value; the positions are public): the tensor's ``shape``, the number
  of entries ``n_obs`` and the decomposition; for ratings-like data at ``epsilon >=
  IMPLICIT_EPSILON``, the positions' ratio (:mod:`~dptensor.algorithms.completion.positions`;
  the positions study, ``benchmarks/bench_completion_positions.py``). Below it ``epsilon`` does
  not move the choice: the grid's best candidate was the same at every epsilon in each regime.
* user unit (one user and her history; the positions are private): the ``shape``, the public
  bound ``max_ratings_per_user``, ``epsilon`` and ``delta``; never the number of entries, nor
  anything else read from the positions.
"""
from __future__ import annotations

import math

from ....accounting.composition import gdp_mu
from ..user_level import start_signal_bound
from ..user_start import start_level, start_releases
from .user import USER_CLIP, USER_OFFSET_SHARE, user_noise

__all__ = ["auto_choice", "ratings_like", "reads_positions", "user_start_ratio", "RATINGS_DENSITY",
           "IMPLICIT_EPSILON", "IMPLICIT_POSITION_RATIO", "IMPLICIT_RECIPE",
           "RATINGS_OFFSET_SHARE", "DEFAULT_RANK", "USER_START_RATIO"]

#: Value unit, CP: a tensor observed at a density (entries over positions) below this, by order
#: (2: a matrix; 3 and more), is fitted like ratings: DP gradient descent with most of the budget
#: on the offsets. On the grid every ratings regime (matrices at density 0.03 to 0.17, a
#: user x item x day tensor at 0.0013) did best so, within 2% of the best candidate at every
#: epsilon; the denser low-rank studies without row effects (a 200^2 matrix at 0.45, the 20^3
#: and 100^3 tensors at 0.45, 0.09 and 0.018) did best, or as well, with DP-ALS, which learns
#: their factors at large epsilon. Sizes alone cannot say whether the row effects carry the
#: signal; sparse data is taken to be ratings-like.
RATINGS_DENSITY = {2: 0.25, 3: 0.005}
#: The offsets' share of the budget there (the completion guide's gradient recipe).
RATINGS_OFFSET_SHARE = 0.97
#: Value unit, ratings-like: the implicit recipe (``IMPLICIT_RECIPE``, users x items) where
#: epsilon is at least ``IMPLICIT_EPSILON`` and the positions follow a structure of their own,
#: their :func:`~dptensor.algorithms.completion.positions.position_ratio` at least
#: ``IMPLICIT_POSITION_RATIO``. On the positions study (``bench_completion_positions``, validation
#: RMSE) the implicit recipe beat the gradient one at epsilon 3 and 10 where the ratio was 1.82
#: (MovieLens-100K's training ratings: by 3.1% and 4.4%) or 2.18 (synthetic ratings whose
#: positions follow the taste: 0.6% and 1.8%); at epsilon 1 it lost by 2-5% on every synthetic
#: regime (it won by 1.7% on MovieLens). On random positions (ratios 1.07-1.12 there, 0.91-1.42
#: on the grid's ratings) it lost by 0.4-4.7%. A weak taste (ratio 1.10) it cannot tell from
#: none, and forgoes a 2.5-4.5% gain there.
IMPLICIT_EPSILON = 3.0
IMPLICIT_POSITION_RATIO = 1.6
IMPLICIT_RECIPE = {"perturbation": "implicit", "rank": 20, "offset_share": 0.5}
#: ``rank="auto"`` at value level, and at user level where the start can learn: today's rank.
DEFAULT_RANK = 3
#: User unit: ``rank="auto"`` is 0 (offsets only) when the item-item start's preview noise
#: (:meth:`~dptensor.PrivateTensorCompletion.expected_noise`, at rank ``DEFAULT_RANK``) is above
#: this share of its signal bound (at 1/2 no factor can be told from the noise). On the grid (300
#: to 1000 users) every cell above it (ratios 0.34 to 1.9: epsilon <= 1) had rank 0 within 0.5%
#: of the best rank, at a fraction of the cost and without a noise-dominated start; below it
#: (0.05 to 0.29) rank 3 was within 1.1% of the best, and up to 3.7% better than rank 0.
USER_START_RATIO = 0.3


def auto_choice(*, decomposition, epsilon, delta, shape, n_obs, unit, max_ratings_per_user,
                offset_share=None, position_ratio=None):
    """What ``"auto"`` means for one fit: a dict with ``"perturbation"`` (the mode's name, or
    ``None`` for the non-private fit), ``"offset_share"`` (``None``: the mode's default) and
    ``"rank"`` (for ``rank="auto"``).

    ``epsilon``/``delta``: the validated target (``None`` when it is not yet known to be valid:
    the estimator then refuses it). ``shape``: every mode's size, or ``None`` when unknown (then
    the choice of the unsized rule: DP-ALS, rank 3). ``n_obs``: the number of entries, value
    unit only (``None`` at user level, where it is private). ``offset_share``: the user's
    (``None``: the mode's default). ``position_ratio``: the positions' (value unit; ``None``: not
    read, as where the implicit mode cannot run; see :func:`reads_positions`)."""
    out = {"perturbation": None, "offset_share": None, "rank": DEFAULT_RANK}
    if epsilon is None or not math.isfinite(epsilon):
        return out
    if unit == "user":
        out["perturbation"] = "statistics"
        out["rank"] = _user_rank(epsilon, delta, shape, max_ratings_per_user,
                                 USER_OFFSET_SHARE if offset_share is None else offset_share)
        return out
    if decomposition != "cp":
        out["perturbation"] = "gradient"
        return out
    out["perturbation"] = "statistics"
    if shape is not None and n_obs is not None and ratings_like(shape, n_obs):
        out.update(perturbation="gradient", offset_share=RATINGS_OFFSET_SHARE)
        if reads_positions(out, epsilon) and position_ratio is not None and \
                position_ratio >= IMPLICIT_POSITION_RATIO:
            out.update(IMPLICIT_RECIPE)
    return out


def reads_positions(choice, epsilon) -> bool:
    """Whether the choice so far (value unit) turns on the positions' ratio: ratings-like data at
    an epsilon where the implicit recipe can win."""
    return choice["perturbation"] == "gradient" and epsilon >= IMPLICIT_EPSILON and \
        choice["offset_share"] == RATINGS_OFFSET_SHARE


def ratings_like(shape, n_obs) -> bool:
    """Whether ``n_obs`` entries of a tensor of ``shape`` are sparse enough to be fitted like
    ratings (:data:`RATINGS_DENSITY`)."""
    density = n_obs / math.prod(shape)
    return density < RATINGS_DENSITY[min(len(shape), 3)]


def user_start_ratio(epsilon, delta, shape, m, offset_share=USER_OFFSET_SHARE):
    """The user-level start's preview noise over its signal bound at rank ``DEFAULT_RANK`` (public:
    the shape, ``m``, ``epsilon``, ``delta``, the offsets' share)."""
    z, _ = user_noise(gdp_mu(epsilon, delta), len(shape), DEFAULT_RANK, 1, offset_share,
                      start_releases(shape[1], DEFAULT_RANK))
    level = start_level(shape[1], DEFAULT_RANK, m, z["start"], USER_CLIP) / USER_CLIP**2
    return level / start_signal_bound(shape[0], m)


def _user_rank(epsilon, delta, shape, m, offset_share):
    """``rank="auto"`` at user level: 0 where the start's noise would bury its factors."""
    if shape is None or delta is None:
        return DEFAULT_RANK
    ratio = user_start_ratio(epsilon, delta, shape, m, offset_share)
    return 0 if ratio > USER_START_RATIO else DEFAULT_RANK
