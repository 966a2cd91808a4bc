"""The completion modes, registered in one place: a new mode is one module and one line here.

``MODES`` maps each value of ``PrivateTensorCompletion(perturbation=...)`` (``"auto"`` aside) to
its :class:`~dptensor.algorithms.completion.modes.base.CompletionMode` (a pair
``(perturbation, privacy_unit)`` for a unit other than the observed value); ``AUTO`` is what
``perturbation="auto"`` means for a private fit, by decomposition.
"""
from __future__ import annotations

from .base import CompletionMode
from .gradient import Gradient
from .implicit import Implicit
from .input import Input
from .nonprivate import NonPrivate
from .output import Output
from .statistics import Statistics
from .user import UserLevel

__all__ = ["MODES", "AUTO", "CompletionMode", "is_mode"]

MODES: dict = {None: NonPrivate(), "statistics": Statistics(), "implicit": Implicit(),
               "input": Input(), "gradient": Gradient(), "output": Output(),
               ("statistics", "user"): UserLevel()}

#: ``perturbation="auto"`` with a finite epsilon: the best private mode for the decomposition.
AUTO = {"cp": "statistics", "tucker": "gradient"}


def is_mode(value) -> bool:
    """Whether ``value`` names a registered mode (compared by value: a list is no mode)."""
    return value is None or (isinstance(value, str) and value in MODES)
