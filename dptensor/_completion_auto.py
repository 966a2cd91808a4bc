"""What ``PrivateTensorCompletion(perturbation="auto", rank="auto")`` runs, from public quantities
only (the rule: :func:`~dptensor.algorithms.completion.modes.auto.auto_choice`), and the check of
``factor_modes`` against the mode it resolves to (``"auto"``: chosen on held-out entries, only by
a fit without privacy); the privacy unit and a private user-level fit's public shape."""
from __future__ import annotations

import math
import numbers
import operator

from ._validation import check_positive_int
from .exceptions import real_scalar
from .algorithms.completion.modes import AUTO, MODES
from .algorithms.completion.modes.auto import auto_choice, reads_positions
from .algorithms.completion.positions import position_ratio
from .algorithms.completion.modes.user import MAX_RATINGS_PER_USER
from .algorithms.completion.modes.base import fixed_modes

__all__ = ["AutoChoice"]


class AutoChoice:
    """The estimator's resolution of ``"auto"``: a mixin of
    :class:`~dptensor.PrivateTensorCompletion` (it reads the estimator's parameters)."""

    def _check_factor_modes(self, order, mode=None):
        """The fixed modes (sorted tuple) from ``factor_modes`` and the tensor's order, checked
        against ``mode`` (``None``: the mode of the unsized rule, as at prediction)."""
        fixed = fixed_modes(self._factor_modes(mode), order, self.decomposition)
        if mode is None:
            unit, _ = self._check_unit()
            mode = MODES[("statistics", "user")] if unit == "user" else MODES[
                self._resolved_perturbation()]
        mode.check_modes(order, fixed, self._factor_modes(mode))
        return fixed

    def _factor_modes(self, mode=None):
        """``factor_modes`` as ``mode`` reads it: ``"auto"`` is every mode (``None``), users and
        items ``(0, 1)`` for the implicit mode (it learns a two-mode interaction)."""
        if not _is_auto(self.factor_modes):
            return self.factor_modes
        return (0, 1) if getattr(mode, "name", None) == "implicit" else None

    def _position_ratio(self, X, shape):
        """The positions' :func:`~dptensor.algorithms.completion.positions.position_ratio` where
        ``"auto"`` turns on it (value unit, ratings-like data, a large enough epsilon, a
        ``factor_modes`` the implicit mode can fit; not a private search's run, which spends the
        plan the search priced from the sizes), else ``None``: the positions are public at value
        level, and read here only then (an SVD of the users x items incidence)."""
        try:  # a factor_modes that is no pair of modes is refused later, by its own check
            modes = tuple(operator.index(m) for m in self._factor_modes(MODES["implicit"]))
        except TypeError:
            return None
        if self.perturbation != "auto" or self.privacy_unit != "value" or len(modes) != 2 or \
                not all(0 <= m < len(shape) for m in modes) or self.__dict__.get(
                    "_priced_by_sizes", False):  # a search's run: the plan it priced
            return None
        try:
            epsilon, _ = self._privacy_target(gaussian=True)
        except (ValueError, TypeError):  # refused later, by the checks that own them
            return None
        choice = self._auto("value", None, (len(X), shape))
        if not reads_positions(choice, epsilon):
            return None
        return position_ratio(X, shape, modes=modes)

    def _chooses_modes(self, perturbation, unit) -> bool:
        """Whether the fit chooses its modes on held-out entries (``factor_modes="auto"``,
        :func:`~dptensor.algorithms.completion.modes.nonprivate.choose_fixed_modes`): a CP fit
        without privacy at value level. A private fit cannot ask its data: every mode."""
        return (_is_auto(self.factor_modes) and perturbation is None and unit == "value"
                and self.decomposition == "cp")

    def _check_unit(self):
        """``(unit, m)``: the validated privacy unit and, at user level, the bound on each user's
        entries. A user-level fit runs user-level DP-ALS: another perturbation is refused."""
        if self.privacy_unit not in ("value", "user"):
            raise ValueError(f'privacy_unit must be "value" or "user", got {self.privacy_unit!r}')
        m = self.max_ratings_per_user
        if self.privacy_unit == "value" and m is not None:
            raise ValueError('max_ratings_per_user bounds a user\'s entries: privacy_unit="user"')
        if self.privacy_unit == "value":
            return "value", None
        if self.perturbation not in ("auto", "statistics") or self.decomposition != "cp":
            why = (" (its factors are a function of who rated what, which a user-level guarantee "
                   "hides)" if self.perturbation == "implicit" else "")
            raise ValueError('privacy_unit="user" runs user-level DP-ALS on a CP model: use '
                             f'perturbation="auto" or "statistics", not {self.perturbation!r}{why}')
        if not self.fit_intercept:
            # its releases rest on values centred on the range's midpoint, in [-1/2, 1/2] of its
            # width: uncentred ones (up to max(|lo|, |hi|) / width) move the total by more
            raise ValueError('privacy_unit="user" centres the values on value_range\'s midpoint '
                             "(its sensitivities rest on centred values) and releases an "
                             "intercept: fit_intercept must be True")
        if m is None:
            return "user", MAX_RATINGS_PER_USER
        return "user", check_positive_int(m, "max_ratings_per_user")

    def _check_public_shape(self):
        """A private user-level fit's shape must be the one the user sets: one inferred from the
        indices is the largest private positions, and one user's history would move the released
        ``shape_`` (and the number of users counted). Refused before the spend."""
        if self.shape is None:
            raise ValueError('a private fit with privacy_unit="user" needs the public shape: set '
                             "shape (users, items, ...), not the one inferred from X's indices")

    def _check_preview_shape(self, needed, order=None):
        """A preview refuses what the fit would: a private user-level one without the public
        shape (:meth:`_check_public_shape`, the same message), first; ``needed``: any without;
        a set shape whose sizes the fit refuses, or (``order``) whose modes it does not match,
        rather than answering for a fit that cannot run."""
        eps = real_scalar(self.epsilon)
        if self.privacy_unit == "user" and not (isinstance(eps, numbers.Real) and eps == math.inf):
            self._check_public_shape()
        if needed and self.shape is None:
            raise ValueError("the noise preview needs the tensor's shape: set shape")
        if self.shape is not None:
            shape = checked_shape(self.shape)
            if isinstance(order, numbers.Integral) and not isinstance(order, bool) and \
                    len(shape) != order:
                raise ValueError(f"shape {shape} has {len(shape)} modes, n_features is {order}")

    def _resolved_perturbation(self, choice=None):
        """``perturbation="auto"``: non-private at ``epsilon=inf``, else the rule's choice
        (:meth:`_auto`; without it, the unsized rule: DP-ALS for CP, DP gradient descent for
        Tucker)."""
        if self.perturbation != "auto":
            return self.perturbation
        eps = real_scalar(self.epsilon)
        if isinstance(eps, numbers.Real) and math.isinf(eps) and eps > 0:
            return None
        return AUTO[self.decomposition] if choice is None else choice["perturbation"]

    def _auto(self, unit, m, sizes):
        """What ``perturbation="auto"`` and ``rank="auto"`` pick
        (:func:`~dptensor.algorithms.completion.modes.auto.auto_choice`), from public quantities
        only: the shape and, at value level (positions public), the number of entries; at user
        level the shape, ``max_ratings_per_user``, ``epsilon`` and ``delta``, never the number of
        entries. An invalid target gets the unsized rule (it is refused later, by its checks)."""
        n_obs, shape, ratio = (tuple(sizes) + (None,))[:3] if sizes is not None else (None,) * 3
        if unit == "user" or shape is None or None in tuple(shape):
            # a preview without the data's sizes: the public shape, when set, is the fit's. At
            # user level only the shape the user sets is public: one inferred from the indices
            # would read the private positions.
            shape = self.shape
        try:
            epsilon, delta = self._privacy_target(gaussian=True)
            shape = None if shape is None else checked_shape(shape)
        except (ValueError, TypeError):  # refused later, by the checks that own them
            epsilon, delta, shape = 1.0, None, None
        choice = auto_choice(decomposition=self.decomposition, epsilon=epsilon, delta=delta,
                             shape=shape, n_obs=None if unit == "user" else n_obs, unit=unit,
                             max_ratings_per_user=m, offset_share=_valid_share(self.offset_share),
                             position_ratio=ratio)
        if choice["perturbation"] is None:  # epsilon=inf: the rule has no mode to pick
            choice["perturbation"] = AUTO[self.decomposition]
        return choice


def checked_shape(shape) -> tuple:
    """A set ``shape``: at least two modes (users and items, or rows and columns), each a size
    >= 1, with the messages the fit's own checks give."""
    if isinstance(shape, str) or not hasattr(shape, "__len__"):
        raise TypeError(f"shape must be a tuple of sizes (users, items, ...), got {shape!r}")
    if len(shape) < 2:
        raise ValueError(f"shape must have at least 2 modes, got {tuple(shape)!r}")
    return tuple(check_positive_int(v, "shape") for v in shape)


def _valid_share(share):
    """``offset_share`` when it is valid, else ``None`` (refused later, by its own check)."""
    share = real_scalar(share)
    ok = isinstance(share, numbers.Real) and not isinstance(share, bool) and 0.0 < share < 1.0
    return float(share) if ok else None


def _is_auto(value) -> bool:
    return isinstance(value, str) and value == "auto"
