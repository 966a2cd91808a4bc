"""``privacy_unit="user"`` (with ``perturbation="statistics"`` or ``"auto"``): user-level DP-ALS.
The unit is one user (mode 0) and her whole history; the positions are private. The fit releases
only the item side (:mod:`dptensor.algorithms.completion.user_level`): a noisy total, noisy
counts and offset sums, and at ``rank > 0`` a noisy item-item matrix and noisy item normal
equations; each user's side is solved again from her own rows at prediction time."""
from __future__ import annotations

import math
from dataclasses import dataclass

from ....accounting.composition import gdp_mu
from ....accounting.events import ComposedEvent, GaussianEvent
from ..user_level import fit_user_level
from ..releases import entry_rounding
from ..user_start import start_releases
from .base import CompletionMode

#: ``max_ratings_per_user=None``: at most this many entries of each user are used (a random
#: subset of a user with more). Chosen on synthetic ratings shaped like MovieLens-100K (943
#: users, heavy-tailed counts, at least 20 each; ``benchmarks/bench_user_level.py``), not on the
#: benchmark's test split: the noise grows as ``sqrt(m)``, the data kept saturates.
MAX_RATINGS_PER_USER = 64
#: Residuals (scaled units: the value range has width 1) are clipped to this before any sum.
USER_CLIP = 0.3
#: A user's solved factor is clipped to this l2 norm before it enters the item statistics.
FACTOR_CLIP = 0.3
#: Backfitting rounds of the offsets (each user's offset solved locally before each): on the
#: synthetic MovieLens-like ratings one round (all of the sums' budget in it) beat two and three.
OFFSET_ROUNDS = 1
#: Shares of the offsets' ``mu^2``: the total and count, the per-row counts, the offset sums.
GLOBAL_SHARE, COUNT_SHARE = 0.02, 0.18
#: Share of the factors' ``mu^2`` spent on the private start (the rest: the sweeps).
START_SHARE = 0.4
#: ``offset_share=None`` at ``rank > 0``: the offsets' share of ``mu^2``.
USER_OFFSET_SHARE = 0.7


@dataclass(frozen=True)
class UnitEvent(ComposedEvent):
    """A fit's composed releases with the privacy unit they are priced for."""

    unit: str = "user"

    def to_dict(self) -> dict:
        return {**super().to_dict(), "unit": self.unit}


def user_noise(mu, order, rank, n_iter, offset_share, start_steps=1):
    """The noise multipliers of every release (GDP: ``sum 1/z^2 = mu^2`` exactly);
    ``start_steps``: the start's releases
    (:func:`~dptensor.algorithms.completion.user_start.start_releases`), one share split evenly."""
    n_rows = order - 1  # item-side modes: one count release each, and one sum per round
    mu_o2 = mu**2 * (offset_share if rank else 1.0)
    z = {"global": 1.0 / math.sqrt(GLOBAL_SHARE * mu_o2),
         "counts": math.sqrt(n_rows / (COUNT_SHARE * mu_o2)),
         "sums": math.sqrt(OFFSET_ROUNDS * n_rows / ((1 - GLOBAL_SHARE - COUNT_SHARE) * mu_o2))}
    counts = {"global": 1, "counts": n_rows, "sums": OFFSET_ROUNDS * n_rows}
    if rank:
        mu_f2 = mu**2 * (1.0 - offset_share)
        z["start"] = math.sqrt(start_steps / (START_SHARE * mu_f2))
        z["factors"] = math.sqrt(2 * n_iter / ((1 - START_SHARE) * mu_f2))
        counts.update(start=start_steps, factors=2 * n_iter)
    return z, counts


def check_sum_lengths(shape, m):
    """Refuse, before the spend, a bound ``m`` whose sums over the ``shape[0] m`` kept entries
    float64 cannot bound the rounding of (every release would refuse it after the spend)."""
    try:
        n_users = int(shape[0])
    except (TypeError, ValueError, IndexError):
        return  # no public shape: refused by the checks that own it (a preview without it)
    try:
        entry_rounding(n_users, 1.5 * m, n_users * m).allowance()
    except (ValueError, OverflowError):
        raise ValueError(f"max_ratings_per_user={m} over shape[0]={n_users} users bounds the kept "
                         "entries at more than float64 sums can round safely (2**52 terms): "
                         "lower max_ratings_per_user (a user keeps at most one entry per item, "
                         "so shape[1] is enough)") from None


def public_items(shape):
    """The number of items of a public ``shape`` (``None`` when it is not set or not valid:
    refused later, by the checks that own it)."""
    try:
        n = int(shape[1])
    except (TypeError, ValueError, IndexError):
        return None
    return n if n > 0 else None


def start_steps(p):
    """The start's releases of a fit's validated parameters ``p``: from the public shape and the
    rank only."""
    return start_releases(public_items(p.get("shape")), p["rank"])


class UserLevel(CompletionMode):
    """User-level DP-ALS: the item side from noisy sums over users; one event at user level."""

    name = "statistics"
    solver = "als"
    cp_only = True
    gaussian = True
    offset_share = USER_OFFSET_SHARE
    unit = "user"

    def n_iter(self, requested, solver):
        return 1 if requested is None else requested

    def memory_mode(self, solver):
        return "user"

    def check_modes(self, order, fixed, factor_modes):
        if factor_modes is not None and tuple(int(m) for m in factor_modes) != (0, 1):
            raise ValueError('privacy_unit="user" fits a user x item interaction: factor_modes '
                             'must be "auto", None or (0, 1); the other modes get offsets only')

    def plan(self, p, epsilon, delta, order):
        z, counts = user_noise(gdp_mu(epsilon, delta), order, p["rank"], p["n_iter"],
                               p["offset_share"], start_steps(p))
        event = UnitEvent(tuple(GaussianEvent(z[k], counts[k]) for k in z), unit="user")
        main = z["factors"] if p["rank"] else z["sums"]
        return self._plan_of(p, z, main, sum(counts.values()), event), event

    def noise_free_plan(self, p, order):
        """The plan of a fit at ``epsilon=inf``: the same path, every noise multiplier 0."""
        z, _ = user_noise(1.0, order, p["rank"], p["n_iter"], p["offset_share"], start_steps(p))
        return self._plan_of(p, dict.fromkeys(z, 0.0), 0.0, 0, None)

    @staticmethod
    def _plan_of(p, zs, main, n_queries, event):
        check_sum_lengths(p.get("shape"), p["max_ratings_per_user"])
        return {"event": event, "zs": zs, "z": main, "m": p["max_ratings_per_user"],
                "clip": USER_CLIP, "factor_clip": FACTOR_CLIP, "rounds": OFFSET_ROUNDS,
                "n_iter": p["n_iter"], "n_queries": n_queries}

    def fit(self, obs, ys, p, plan, rng, *, history, progress, private):
        """The released item side (an :class:`ItemSide`), not a full model."""
        side = fit_user_level(obs.X, ys, obs.shape, p["rank"], plan, rng)
        if progress is not None:
            progress(0)
        return side
