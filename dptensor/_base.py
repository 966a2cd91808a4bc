"""What every private estimator shares: the cost record, the fit template and its spend step.

The fit template (:meth:`PrivateEstimatorMixin._fit_private`) runs one fixed order, so that
"everything is validated and priced before the first spend" holds by construction::

    data = self._check_data(*args)       # every input validated; values read only to check them
    plan = self._plan_for(data)           # parameters checked, the spend priced: a FitPlan
    data = self._before_spend(data, plan) # a fit without privacy: its pass, which checks values
    cost, rng = spend(plan, data)         # memory checked, budget charged (or refused), noise keyed
    self._release(data, plan, rng)        # the only step that computes from the data's values
                                          # (a private fit's: the values never move the spend)

``privacy_cost(n_samples, n_features)`` prices the very :meth:`_plan` a fit would spend.
"""
from __future__ import annotations

import functools
import inspect
import math
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import scipy.sparse as sp
from sklearn import get_config

from .accounting import epsilon_of
from .accounting.events import NonPrivateEvent, PrivacyEvent
from ._guards import fixed_floating_point, warn
from .exceptions import PrivacyWarning
from ._memory import check_fits
from .mechanisms.randomness import (AsDense, data_digest, digest_bytes, fingerprint, seed_entropy,
                                    spend_generator)
from ._validation import check_delta_for_n, check_groups, check_positive_int, check_privacy

__all__ = ["PrivacyCost", "PrivacyWarning", "PrivateEstimatorMixin", "NO_PRIVACY_COST", "FitPlan",
           "FitData", "SearchTag", "NoisePreview", "warn_noise_dominated"]


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
    #: The privacy unit the fit protects (``"row"``, ``"document"``, ``"observed value"``,
    #: ``"user"``, ``"group of rows"``, ...), as its ledger label says; ``None``: no guarantee.
    unit: str | None = None

    @property
    def private(self) -> bool:
        return math.isfinite(self.epsilon) and self.event is not None


#: The cost of a non-private fit: nothing is released under a guarantee.
NO_PRIVACY_COST = PrivacyCost(epsilon=math.inf, delta=0.0, noise_multiplier=0.0, n_queries=0,
                              calibration="none", event=None)

@dataclass(frozen=True)
class NoisePreview:
    """What ``expected_noise(n_samples, n_features)`` reports before a fit: its main release's
    noise against the largest signal the bound allows, from public quantities only.

    ``noise`` is the noise level the fit records in its ``attribute`` (the typical size of the
    privacy noise in the released eigenvalues it judges its components by); ``signal_bound`` the
    largest such eigenvalue any data within the public bound can have (``None``: no public
    bound). A component whose eigenvalue is below twice ``noise`` is dominated by the noise, so
    a ``ratio`` of ``noise / signal_bound`` near or above 1/2 means that no data can be learned
    at this epsilon and size: choose a larger epsilon, more data or fewer components first.
    """

    noise: float
    signal_bound: float | None
    attribute: str

    @property
    def ratio(self) -> float | None:
        """``noise / signal_bound`` (``None`` without a bound; 0 without privacy)."""
        if self.signal_bound is None:
            return None
        return self.noise / self.signal_bound if self.signal_bound > 0 else math.inf


def warn_noise_dominated(values, noise, name: str, noise_name: str, advice: str, *,
                         what: str = "component(s)", first: int = 1, times: int = 2,
                         noun: str = "components") -> None:
    """Warn (``UserWarning``) naming the components whose released ``values`` (``name``) are below
    ``times`` (twice, or once) their noise level ``noise`` (``noise_name``).

    Both are released or public (the released eigenvalues, a noise multiplier times a public
    sensitivity), so a fit may warn after its spend: the warning is post-processing of its
    releases. It names component numbers only (``what``, numbered from ``first``), never a
    value; ``noun`` is what the warning says is noise (the components, a mode's offsets).
    """
    weak = np.flatnonzero(np.abs(np.asarray(values)) < times * np.asarray(noise))
    if weak.size:
        below = "twice its noise level" if times == 2 else "its noise level"
        warn(f"the released {name} of {what} {(weak + first).tolist()} is below "
             f"{below} ({noise_name}): those {noun} are dominated by the privacy "
             f"noise. {advice}", UserWarning)


@dataclass(frozen=True)
class FitPlan:
    """What a fit will spend and allocate, decided from public quantities before any spend.

    ``event`` is what the accountant prices (a :class:`~dptensor.accounting.NonPrivateEvent` for
    a fit without a guarantee); ``noise_multiplier``, ``n_queries`` and ``calibration`` go into
    :class:`PrivacyCost`; ``memory`` is ``(bytes, advice)``, the fit's peak allocation and the
    parameter to change when it does not fit; ``settings`` the estimator's validated parameters
    and noise plan, for its release step; ``unit`` the privacy unit the fit protects (a value,
    a row, a document, a user, a group of rows), named in the ledger and the cost.
    """

    event: PrivacyEvent
    delta: float
    noise_multiplier: float = 0.0
    n_queries: int = 0
    calibration: str = "none"
    memory: tuple = (0.0, "")
    settings: Any = field(default_factory=dict)
    unit: str | None = None

    @property
    def private(self) -> bool:
        return not isinstance(self.event, NonPrivateEvent)


@dataclass(frozen=True)
class FitData:
    """The validated inputs of a fit: ``arrays`` (what the fit reads, digested for a seeded fit's
    noise key), ``shape`` (the public shape the plan is made from), ``extra`` (anything else the
    checks derived, such as public positions) and ``public`` (public values the plan reads besides
    the shape, passed to ``_plan`` as keywords: a search's index space, say)."""

    arrays: tuple
    shape: tuple
    extra: Any = None
    public: dict = field(default_factory=dict)


@dataclass(frozen=True)
class SearchTag:
    """What a private search (:mod:`dptensor.model_selection`) needs to know of an estimator it
    fits and scores, declared by the estimator (``_search_tag``) rather than guessed from it.

    ``unit`` is the privacy unit's kind (``"row"``; ``"observed value"`` for completion), the unit
    the search splits into training and validation parts; ``score_bound`` the parameter that bounds
    one unit's score (``"data_norm"``, ``"value_range"``); ``indices``: ``X`` holds index tuples
    into a tensor of the public ``shape`` parameter (``y`` the values there), not feature rows;
    ``groups``: its ``fit`` takes ``groups=`` (a group of rows as its unit), so a search by
    group may fit it. ``users``: its unit is one user, mode 0 of the index tuples (``unit`` is
    ``"user"``), their number the public ``shape[0]``: the search splits users and scores each
    validation user on her own history (``predict(X, history=...)``).
    """

    unit: str = "row"
    score_bound: str = "data_norm"
    indices: bool = False
    groups: bool = False
    users: bool = False


#: Generators a caller may pass as ``random_state``: never pickled or copied with an estimator.
_GENERATORS = (np.random.Generator, np.random.RandomState, np.random.BitGenerator,
               np.random.SeedSequence)

#: Parameters that change neither what a fit releases nor how: left out of a spend's fingerprint
#: (``n_jobs``: a search's runs in parallel release what they release one after another).
_NOT_PUBLIC_DESCRIPTION = ("accountant", "random_state", "verbose", "n_jobs")


#: What the input checks record on the estimator (scikit-learn's validate_data).
_INPUT_ATTRIBUTES = ("n_features_in_", "feature_names_in_")

#: Entry points that may spend: each runs under the library's floating-point settings.
_SPENDING_METHODS = ("fit", "partial_fit", "fit_transform", "fit_predict", "privacy_cost")
#: The methods of a fitted model that compute on its input: under the same fixed settings, so
#: that they too behave alike whatever the caller's (a tiny prediction underflows, say).
_FITTED_METHODS = ("predict", "predict_proba", "transform", "inverse_transform", "score",
                   "score_samples", "sample", "perplexity", "bic", "aic")
_FITTING_METHODS = ("fit", "partial_fit", "fit_transform", "fit_predict")


def _refusing_sample_weight(func):
    """``func`` refusing a ``sample_weight`` in words: Python's own error would only say that
    some ``fit()`` got an unexpected keyword argument, naming perhaps a private base class."""
    @functools.wraps(func)
    def wrapper(self, *args, **kwargs):
        if "sample_weight" in kwargs:
            unit = getattr(self, "_unit", "row")
            raise TypeError(
                f"{type(self).__name__}.{func.__name__} takes no sample_weight: the privacy "
                f"guarantee bounds what one {unit} can change, and its noise is calibrated for "
                f"that; a weight would scale a {unit}'s influence by an amount the noise does not "
                f"cover. Fit on the {unit}s as they are")
        return func(self, *args, **kwargs)
    wrapper.refuses_sample_weight = True
    return wrapper


class PrivateEstimatorMixin:
    """Helpers for the fit prelude of a private estimator.

    Subclasses keep ``epsilon``, ``delta``, ``accountant`` and ``random_state`` as parameters.
    Every entry point that may spend (:data:`_SPENDING_METHODS`) a subclass defines runs under
    floating-point settings the library fixes (:func:`dptensor._guards.fixed_floating_point`):
    under the caller's ``np.errstate(all="raise")`` an underflow that one tiny row causes would
    otherwise raise after the spend where its neighbour fits. So do the fitted model's methods
    (:data:`_FITTED_METHODS`), which behave alike whatever the caller's settings too.
    """

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        for name in _SPENDING_METHODS + _FITTED_METHODS:
            # Inherited ones too (scikit-learn's fit_transform, which a Pipeline calls): the first
            # definition along the MRO, if it is a plain function (a descriptor such as
            # available_if decides itself whether the method exists, and is left alone).
            method = next((k.__dict__[name] for k in cls.__mro__ if name in k.__dict__), None)
            if inspect.isfunction(method) and not getattr(method, "fixed_floating_point", False):
                setattr(cls, name, fixed_floating_point(method))
        for name in _FITTING_METHODS:
            method = next((k.__dict__[name] for k in cls.__mro__ if name in k.__dict__), None)
            if inspect.isfunction(method) and not getattr(method, "refuses_sample_weight", False):
                setattr(cls, name, _refusing_sample_weight(method))

    #: What a private search needs to know of the estimator (:class:`SearchTag`).
    _search_tag = SearchTag()
    #: Whether a fit on sparse rows releases what the fit on the same rows dense does (the PCA
    #: family): its seeded noise is then keyed by the dense rows' digest, so the two agree.
    _sparse_as_dense = False

    # -- the fit template ---------------------------------------------------------------------
    def _fit_private(self, *args):
        """Validate, plan, spend, release: the fixed order every fit runs (see the module doc)."""
        before = {k: self.__dict__[k] for k in _INPUT_ATTRIBUTES if k in self.__dict__}
        try:
            data = self._check_data(*args)
            plan = self._plan_for(data)
            data = self._before_spend(data, plan)
            self.privacy_cost_, rng = self._spend_plan(plan, data)
        except BaseException:
            # a refused fit (bad input, budget, memory) leaves the estimator as it was: the
            # input checks set n_features_in_, which would make it look fitted
            for name in _INPUT_ATTRIBUTES:
                self.__dict__.pop(name, None)
            self.__dict__.update(before)
            raise
        self._release(data, plan, rng)
        return self

    def _before_spend(self, data: FitData, plan: FitPlan) -> FitData:
        """What the fit reads of the data before it spends, so that it can still refuse it (a
        fit without privacy's one pass, which then checks the values itself): by default none."""
        return data

    def _check_data(self, *args) -> FitData:  # pragma: no cover - each estimator supplies it
        raise NotImplementedError

    def _plan(self, shape, **public) -> FitPlan:  # pragma: no cover - each estimator supplies it
        raise NotImplementedError

    def _plan_for(self, data: FitData) -> FitPlan:
        """The :meth:`_plan` of validated data: of its shape, unless the plan also reads other
        public facts of the data (a fit on Dask rows holds no copy of them, a stream's memory is
        its largest chunk's): such an estimator passes them on here, or in ``data.public``."""
        return self._plan(data.shape, **data.public)

    def _release(self, data: FitData, plan: FitPlan, rng) -> None:  # pragma: no cover
        raise NotImplementedError

    def _spend_plan(self, plan: FitPlan, data: FitData):
        """:meth:`_spend` of a plan: the cost record and the fit's noise generator."""
        return self._spend(plan.event, entropy=self._entropy(), delta=plan.delta,
                           memory=plan.memory, noise_multiplier=plan.noise_multiplier,
                           n_queries=plan.n_queries, calibration=plan.calibration,
                           data_shape=data.shape, data=self._digested(data.arrays),
                           unit=plan.unit)

    def _digested(self, arrays) -> tuple:
        """The arrays whose digest keys a seeded fit's noise: sparse ones as their dense rows
        where the fit's releases are those of the dense fit (:attr:`_sparse_as_dense`)."""
        if not self._sparse_as_dense:
            return arrays
        return tuple(AsDense(a) if sp.issparse(a) else a for a in arrays)

    def _public_description(self) -> dict:
        """The public parameters a spend's noise is keyed by (with the name, shape and event)."""
        return {k: v for k, v in self.get_params(deep=False).items()
                if k not in _NOT_PUBLIC_DESCRIPTION}

    def _preview_plan(self, plan: FitPlan) -> PrivacyCost:
        """The :class:`PrivacyCost` the fit of ``plan`` would record (no data, no spend)."""
        cost = self._preview(plan.event, delta=plan.delta, noise_multiplier=plan.noise_multiplier,
                             n_queries=plan.n_queries, calibration=plan.calibration)
        return replace(cost, unit=plan.unit) if cost.private else cost

    def _privacy_target(self, *, gaussian: bool = True) -> tuple[float, float]:
        """Validated ``(epsilon, delta)``; ``delta=None`` means the accountant's delta."""
        accountant = self._charged_accountant()
        return check_privacy(self.epsilon, self.delta, accountant, gaussian=gaussian)

    def _charged_accountant(self):
        """The accountant a fit is priced at and charged to: ``accountant`` (a meta-estimator
        may find it elsewhere, say on the estimator it searches)."""
        return self.accountant

    def _check_delta_for(self, n_samples: int, epsilon: float, delta: float,
                         unit: str = "row") -> None:
        """Warn when ``delta >= 1/n`` for a private fit on ``n`` records (before the spend)."""
        check_delta_for_n(delta, int(n_samples), epsilon, unit)

    def _check_groups_allowed(self, X) -> None:
        """Refuse ``groups`` where it cannot hold, before anything is read or spent: a fit on a
        dask array (the labels must meet the rows in memory) or without privacy (nothing is
        bounded then)."""
        name = type(self).__name__
        if type(X).__module__.startswith("dask"):
            raise TypeError(f"{name}.fit with groups needs the rows in memory (a NumPy array): "
                            "a fit on a dask array cannot take groups")
        self._check_groups_private()

    def _check_groups_private(self) -> None:
        """Refuse ``groups`` without privacy (in a fit, or a preview of one)."""
        name = type(self).__name__
        if not math.isfinite(self._privacy_target()[0]):
            raise ValueError(f"{name}: groups bounds what one group of rows contributes to a "
                             "private fit; with epsilon=inf nothing is bounded: drop groups, or "
                             "set a finite epsilon")

    def _preview_grouped(self, groups) -> bool:
        """``privacy_cost``'s ``groups`` flag, checked: ``True`` previews a fit given groups
        (``n_samples`` the number of groups), refused where that fit would be."""
        if not isinstance(groups, (bool, np.bool_)):
            raise TypeError("privacy_cost's groups is a flag (True: preview a fit given groups; "
                            f"n_samples is then the number of groups), not labels: got "
                            f"{type(groups).__name__}")
        if groups:
            self._check_groups_private()
        return bool(groups)

    def _preview_rows(self, n_samples, n_features, groups=False) -> PrivacyCost:
        """``privacy_cost`` of a fit on ``n_samples`` x ``n_features`` rows (groups, with
        ``groups=True``): the fit's own plan, checked, without data or spend."""
        shape = (check_positive_int(n_samples, "n_samples"),
                 check_positive_int(n_features, "n_features"))
        return self._preview_plan(self._plan(shape, grouped=self._preview_grouped(groups)))

    def _check_groups(self, groups, n_rows: int):
        """``(codes, n_groups)`` of validated ``groups`` (:func:`~dptensor._validation.
        check_groups`), the delta checked against the public number of groups. The number of
        rows is not public under this unit: it sizes memory and keys noise, never a release."""
        codes, n_groups = check_groups(groups, n_rows)
        epsilon, delta = self._privacy_target()
        self._check_delta_for(n_groups, epsilon, delta, unit="group")
        return codes, n_groups

    def __repr__(self, N_CHAR_MAX=700):
        # epsilon is always shown, even at its default: a reader of the repr must see the
        # privacy level.
        text = super().__repr__(N_CHAR_MAX=N_CHAR_MAX)
        default = inspect.signature(type(self).__init__).parameters["epsilon"].default
        if get_config()["print_changed_only"] and repr(self.epsilon) == repr(default):
            name = type(self).__name__
            rest = text[len(name) + 1:-1].strip()
            text = f"{name}(epsilon={self.epsilon!r}" + (f", {rest})" if rest else ")")
        return text

    def _entropy(self) -> int:
        """Validate ``random_state`` and take its entropy; call it before the spend."""
        return seed_entropy(self.random_state)

    def _spend(self, event: PrivacyEvent, *, entropy: int, delta: float, memory: tuple[float, str],
               noise_multiplier: float = 0.0, n_queries: int = 0, calibration: str = "none",
               data_shape=(), data=(), unit=None):
        """Check and record ``event`` with the accountant (if any); return the cost record and the
        fit's noise generator.

        Call this once per fit, after every parameter and the data are validated and before the
        first noisy release: a refused budget raises :class:`~dptensor.BudgetExceededError` here,
        with the ledger unchanged. A :class:`~dptensor.accounting.NonPrivateEvent` costs
        epsilon = infinity: a finite budget refuses it; otherwise it is recorded and warned about.

        The generator is keyed by ``entropy`` (from :meth:`_entropy`), the spend's ledger position
        and the fit's public description, and, for a seeded fit, by a digest of ``data`` (every
        array the fit reads: see :mod:`dptensor.mechanisms.randomness`), so no two spends draw the
        same noise unless they are the same seeded fit of the same data. It is the caller's local:
        never store it on the estimator.

        ``memory`` is ``(bytes, advice)``: the fit's peak allocation, an upper bound from public
        quantities, and the parameter to change when it does not fit. It is checked first
        (:func:`~dptensor._memory.check_fits`): a fit that would run out of memory after its spend
        is refused here, with the ledger unchanged.
        """
        name = type(self).__name__
        # A seeded fit that draws noise keys it by its data (a fit without noise draws only its
        # start, and the same seed then starts it alike on any data)
        seeded = self.random_state is not None and not isinstance(event, NonPrivateEvent)
        check_fits(memory[0] + (digest_bytes(*data) if seeded else 0), f"{name}.fit", memory[1])
        private = not isinstance(event, NonPrivateEvent)
        label = f"{name}(epsilon={self.epsilon:g})"
        if private and unit is not None:  # the ledger says what each entry protects
            label = f"{name}(epsilon={self.epsilon:g}, unit={unit!r})"
        # Before the spend: digesting reads the data (a Dask pass) and must not fail after it.
        digest = data_digest(*data) if seeded else ()
        accountant = self._charged_accountant()
        if accountant is not None:
            entry = accountant.spend(event, label=label)
            own, delta, index = entry.epsilon, entry.delta, entry.index
            if self.delta is not None and float(self.delta) != delta:
                warn(f"{name} targets delta={self.delta:g} but its accountant enforces "
                     f"delta={delta:g}: the fit was charged epsilon={own:.4g} at the "
                     "accountant's delta, as its ledger and privacy_cost_ show",
                     PrivacyWarning)
        else:
            own, index = epsilon_of(event, delta), -1
        if not private:
            warn(f"{name} released its fit without a privacy guarantee ({event.reason}); "
                 "it costs epsilon=inf. Set a finite epsilon for a private fit.",
                 PrivacyWarning)
        params = self._public_description()
        # The event holds every noise multiplier, the delta the accountant's: two fits whose noise
        # differs only in scale (one seed, two accountants' deltas) would cancel it in a ratio.
        # Clones share a seed: their data tells them apart.
        shape = tuple(int(n) for n in data_shape)
        key = fingerprint(name, params, shape, repr(event), delta) + digest
        # a fit without a guarantee accounts no query (as its preview, _preview, reports it)
        cost = PrivacyCost(epsilon=own, delta=delta,
                           noise_multiplier=float(noise_multiplier) if private else 0.0,
                           n_queries=int(n_queries) if private else 0,
                           calibration=calibration if private else "none",
                           event=event, unit=unit if private else None)
        return cost, spend_generator(entropy, spend_index=index, key=key)

    def _preview(self, event, *, delta: float, noise_multiplier: float = 0.0, n_queries: int = 0,
                 calibration: str = "none") -> PrivacyCost:
        """The :class:`PrivacyCost` a fit planning ``event`` would record, without data or spend.

        ``event=None`` is a non-private fit. The cost is reported at the accountant's delta when
        there is one (as a fit's ledger entry is), else at ``delta``.
        """
        event = NonPrivateEvent("epsilon=inf") if event is None else event
        private = not isinstance(event, NonPrivateEvent)
        accountant = self._charged_accountant()
        delta = accountant.delta if accountant is not None else delta
        return PrivacyCost(epsilon=epsilon_of(event, delta), delta=delta,
                           noise_multiplier=float(noise_multiplier) if private else 0.0,
                           n_queries=int(n_queries) if private else 0,
                           calibration=calibration if private else "none", event=event)

    def _mean_score(self, X, y=None) -> float:
        """``score``: the mean of the per-unit scores of :meth:`_score_units`."""
        values, _ = self._score_units(X, y)
        return float(np.mean(values))

    # -- open streams ---------------------------------------------------------------------------
    #: Attributes holding an open stream's working state (its noise generator, the rows of an
    #: unfinished block, unnoised partial sums). They live in memory between ``partial_fit`` calls
    #: and are never pickled or copied: none of them is a release.
    _stream_attributes: tuple = ()

    def __getstate__(self):
        # A copy: on Python >= 3.11 the inherited state *is* the instance's __dict__, and clearing
        # the stream there would close the live stream of the estimator being pickled.
        state = dict(super().__getstate__())
        for name in self._stream_attributes:
            if state.get(name) is not None:
                state[name] = None
                state["_stream_detached"] = True
        cost = state.get("privacy_cost_")
        if isinstance(state.get("random_state"), _GENERATORS) or (
                state.get("random_state") is not None and cost is not None and cost.private):
            # A generator's state gives away its past draws (PCG64 steps back, and its seed
            # sequence holds its entropy), hence the seed entropy of every fit it seeded and
            # their noise; and a fixed seed saved with a private fit regenerates that fit's noise
            # (its ledger position and public description are easy to guess). So neither leaves
            # with the model: a copy or a reloaded model has random_state=None (fresh entropy).
            state["random_state"] = None
        return state

    #: Parameters that may change while a stream is open: they act on nothing it planned.
    _stream_free_params = ("verbose", "accountant")

    def _hold_stream_params(self):
        """Remember the parameters an opening stream was planned with (for
        :meth:`_check_stream_params`); held as the stream's state is, so never pickled (a
        generator seed may be among them)."""
        self._stream_params = {name: value for name, value in self.get_params(deep=False).items()
                               if name not in self._stream_free_params}

    def _check_stream_params(self):
        """Refuse to continue a stream whose parameters changed since it opened: its plan and
        cost were fixed then, and ``get_params`` would show settings it does not run with."""
        held = getattr(self, "_stream_params", None) or {}
        now = self.get_params(deep=False)
        changed = [name for name, value in held.items() if not _same_param(value, now[name])]
        if changed:
            raise ValueError(f"parameters changed during a stream ({', '.join(changed)}): the "
                             "stream's plan and privacy cost were fixed when it started. Set them "
                             "back to continue it, or call fit to start a new stream")

    def _check_stream_attached(self):
        """Refuse to continue a stream whose working state was left behind by a pickle or a copy."""
        if getattr(self, "_stream_detached", False):
            raise RuntimeError(
                f"this {type(self).__name__} was pickled or copied while its stream "
                "was open. A stream's working state (its noise generator, the rows of "
                "its unfinished block and their unnoised sums) is not private, so it "
                "is never saved, and this copy cannot continue the stream. Its fitted "
                "attributes are usable as they are; call fit (or partial_fit on a "
                "fresh estimator) to start a new stream, which records a new cost.")


def _same_param(a, b) -> bool:
    """Whether a parameter still has its value: the same object, or an equal value of its type
    (``True`` is no seed 1, nor ``2.0`` two components, in ``get_params`` or a refit)."""
    if a is b:
        return True
    if type(a) is not type(b):
        return False
    try:
        return bool(a == b)
    except Exception:  # no truth value (arrays): only the same object counts
        return False
