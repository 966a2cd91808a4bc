"""What every private estimator shares: the cost record, the spend step, and the warning class."""
from __future__ import annotations

import math
from dataclasses import dataclass

from .accounting import epsilon_of
from .accounting.events import PrivacyEvent
from ._validation import check_privacy, check_random_generator

__all__ = ["PrivacyCost", "PrivacyWarning", "PrivateEstimatorMixin", "NO_PRIVACY_COST"]


class PrivacyWarning(UserWarning):
    """A mode whose privacy guarantee rests on an assumption the library cannot check, or is absent."""


@dataclass(frozen=True)
class PrivacyCost:
    """What one fit spent, the same record for every estimator (its ``privacy_cost_``).

    ``epsilon`` and ``delta`` are the fit's own cost (epsilon at the fit's delta, by the
    accountant's composition); ``noise_multiplier`` is the Gaussian multiplier of the main queries
    (std = multiplier x sensitivity), ``n_queries`` their number, ``calibration`` how the multiplier
    was chosen, and ``event`` the full record the accountant priced.
    """

    epsilon: float
    delta: float
    noise_multiplier: float
    n_queries: int
    calibration: str
    event: PrivacyEvent | None = None

    @property
    def private(self) -> bool:
        return math.isfinite(self.epsilon) and self.event is not None


#: The cost of a non-private fit: nothing is released under a guarantee, so nothing is recorded.
NO_PRIVACY_COST = PrivacyCost(epsilon=math.inf, delta=0.0, noise_multiplier=0.0, n_queries=0,
                              calibration="none", event=None)


class PrivateEstimatorMixin:
    """Helpers for the fit prelude of a private estimator.

    Subclasses keep ``epsilon``, ``delta``, ``accountant`` and ``random_state`` as parameters.
    """

    def _privacy_target(self, *, gaussian: bool = True) -> tuple[float, float]:
        """Validated ``(epsilon, delta)``; ``delta=None`` means the accountant's delta."""
        return check_privacy(self.epsilon, self.delta, self.accountant, gaussian=gaussian)

    def _generator(self):
        return check_random_generator(self.random_state)

    def _spend(self, event: PrivacyEvent, *, delta: float, noise_multiplier: float, n_queries: int,
               calibration: str) -> PrivacyCost:
        """Check and record ``event`` with the accountant (if any) and return the fit's cost record.

        Call this before the first noisy release: a refused budget raises
        :class:`~dptensor.BudgetExceededError` here, with the ledger unchanged.
        """
        label = f"{type(self).__name__}(epsilon={self.epsilon:g})"
        if self.accountant is not None:
            own = self.accountant.spend(event, label=label, delta=delta).epsilon
        else:
            own = epsilon_of(event, delta)
        return PrivacyCost(epsilon=own, delta=delta, noise_multiplier=float(noise_multiplier),
                           n_queries=int(n_queries), calibration=calibration, event=event)
