"""Privacy events: small immutable records of what a fit released.

An event says which mechanism ran and with what noise, nothing about data. The accountant prices
events (see :mod:`dptensor.accounting.composition`) and composes them across fits; mechanisms and
algorithms never price anything themselves.
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field

import numpy as np

__all__ = ["PrivacyEvent", "GaussianEvent", "LaplaceEvent", "AboveThresholdEvent",
           "NonPrivateEvent", "ComposedEvent", "PrivateSelectionEvent", "event_from_dict"]


class PrivacyEvent:
    """Base class of the events the accountant knows how to price."""

    mechanism = "abstract"

    def to_dict(self) -> dict:
        """A JSON-ready description: ``{"mechanism": ..., **parameters}``."""
        return {"mechanism": self.mechanism, **asdict(self)}

    def leaves(self):
        """The elementary events this one is made of."""
        yield self

    def _widen(self):
        """NumPy numbers other than float64 as Python ones (exactly): an event priced in float32
        arithmetic rounds off its safe side, and JSON holds neither them nor NumPy ints. A
        float64 is a Python float already, and stays (its repr keys seeded noise). A 0-d array
        is its number (JSON holds no array either)."""
        for name in self.__dataclass_fields__:
            value = getattr(self, name)
            if (isinstance(value, np.ndarray) and value.ndim == 0) or (
                    isinstance(value, np.generic) and not isinstance(value, np.float64)):
                value = value.item()
                if isinstance(value, np.generic):  # a long double: no Python number holds it
                    raise TypeError(f"{name} must be a Python or NumPy number of at most double "
                                    f"precision, got dtype {value.dtype}: rounding it to a float "
                                    "could price the event below its cost. Pass float(value) "
                                    "rounded on the safe side")
                object.__setattr__(self, name, value)


@dataclass(frozen=True)
class GaussianEvent(PrivacyEvent):
    """``count`` adaptive Gaussian releases, each with noise std ``noise_multiplier * sensitivity``.

    One release is ``1/noise_multiplier``-GDP, so the event is ``sqrt(count)/noise_multiplier``-GDP.
    """

    noise_multiplier: float
    count: int = 1
    mechanism = "gaussian"

    def __post_init__(self):
        self._widen()
        if not self.noise_multiplier > 0:
            raise ValueError(f"noise_multiplier must be > 0, got {self.noise_multiplier!r}")
        _check_count(self.count)

    @property
    def mu(self) -> float:
        """The Gaussian-DP parameter of the whole event."""
        return math.sqrt(self.count) / self.noise_multiplier


@dataclass(frozen=True)
class LaplaceEvent(PrivacyEvent):
    """``count`` adaptive Laplace releases, each pure ``epsilon``-DP (scale sensitivity/epsilon)."""

    epsilon: float
    count: int = 1
    mechanism = "laplace"

    def __post_init__(self):
        self._widen()
        _check_pure_epsilon(self.epsilon)
        _check_count(self.count)


@dataclass(frozen=True)
class AboveThresholdEvent(PrivacyEvent):
    """One AboveThreshold run (Dwork–Roth Alg. 1): pure ``epsilon``-DP for any number of queries."""

    epsilon: float
    count: int = 1
    mechanism = "above_threshold"

    def __post_init__(self):
        self._widen()
        _check_pure_epsilon(self.epsilon)
        _check_count(self.count)


@dataclass(frozen=True)
class NonPrivateEvent(PrivacyEvent):
    """A release with no formal guarantee (``epsilon=inf``, or a mode whose proof does not hold).

    It costs epsilon = infinity at every delta: a finite budget refuses it before the fit touches
    the data, and an infinite budget records it so that the ledger shows what was released.
    ``reason`` says why the release is not private.
    """

    reason: str = "epsilon=inf"
    mechanism = "none"


@dataclass(frozen=True)
class ComposedEvent(PrivacyEvent):
    """Several events released by one fit, composed adaptively."""

    events: tuple = field(default_factory=tuple)
    mechanism = "composed"

    def __post_init__(self):
        object.__setattr__(self, "events", tuple(self.events))
        if not all(isinstance(e, PrivacyEvent) for e in self.events):
            raise TypeError("ComposedEvent takes PrivacyEvent instances")

    def to_dict(self) -> dict:
        return {"mechanism": self.mechanism, "events": [e.to_dict() for e in self.events]}

    def leaves(self):
        for event in self.events:
            yield from event.leaves()


@dataclass(frozen=True)
class PrivateSelectionEvent(PrivacyEvent):
    """A private hyperparameter search: a random number of runs, only the best one released.

    Each run picks one of ``candidates`` (the training events of the grid's settings) at random,
    trains it on the training part and releases its ``score`` (an event too) computed on the
    disjoint validation part; only the run with the best noisy score is output (Papernot & Steinke
    2022). The number of runs has mean ``mean`` and follows a truncated negative binomial law of
    shape ``shape`` (0: logarithmic, 1: geometric), or a Poisson law for ``shape=inf``. With
    ``refit=True`` the chosen setting is then refitted on all the data, costing at most the
    largest of the candidates' events. Priced in Rényi DP by
    :func:`~dptensor.accounting.composition.selection_rdp`; derived in
    ``docs/derivations/private_selection.rst``.
    """

    candidates: tuple = field(default_factory=tuple)
    score: PrivacyEvent | None = None
    mean: float = 1.0
    shape: float = 1.0
    refit: bool = False
    mechanism = "private_selection"

    def __post_init__(self):
        self._widen()
        object.__setattr__(self, "candidates", tuple(self.candidates))
        if not self.candidates or not all(isinstance(e, PrivacyEvent) for e in self.candidates):
            raise TypeError("PrivateSelectionEvent takes a non-empty tuple of candidate "
                            "PrivacyEvents")
        if not isinstance(self.score, PrivacyEvent):
            raise TypeError("PrivateSelectionEvent needs the score's PrivacyEvent")
        if not (math.isfinite(self.mean) and self.mean >= 1):
            raise ValueError(f"mean (the expected number of runs) must be a finite number >= 1, "
                             f"got {self.mean!r}")
        if not self.shape >= 0:  # inf is the Poisson law
            raise ValueError(f"shape must be >= 0 (inf for Poisson), got {self.shape!r}")

    def to_dict(self) -> dict:
        return {"mechanism": self.mechanism, "candidates": [e.to_dict() for e in self.candidates],
                "score": self.score.to_dict(), "mean": self.mean,
                "shape": "inf" if math.isinf(self.shape) else self.shape, "refit": self.refit}


_KINDS = {cls.mechanism: cls
          for cls in (GaussianEvent, LaplaceEvent, AboveThresholdEvent, NonPrivateEvent)}


def event_from_dict(data: dict) -> PrivacyEvent:
    """Inverse of :meth:`PrivacyEvent.to_dict`."""
    data = dict(data)
    kind = data.pop("mechanism")
    if kind == "composed":
        return ComposedEvent(tuple(event_from_dict(e) for e in data["events"]))
    if kind == "private_selection":
        return PrivateSelectionEvent(tuple(event_from_dict(e) for e in data["candidates"]),
                                     event_from_dict(data["score"]), float(data["mean"]),
                                     float(data["shape"]), bool(data["refit"]))
    if kind not in _KINDS:
        raise ValueError(f"unknown privacy event mechanism {kind!r}")
    return _KINDS[kind](**data)


def _check_count(count):
    if int(count) != count or count < 1:
        raise ValueError(f"count must be a positive integer, got {count!r}")


def _check_pure_epsilon(epsilon):
    if not (epsilon > 0 and math.isfinite(epsilon)):
        raise ValueError(f"epsilon must be a finite number > 0, got {epsilon!r}")
