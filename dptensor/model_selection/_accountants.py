"""The accountants held in what a search searches: found at any depth, taken off the runs."""
from __future__ import annotations

import numbers

import numpy as np

from ..accounting import PrivacyAccountant

__all__ = ["find_accountants", "accountant_keys", "without_accountants"]


def find_accountants(obj, where, seen=None):
    """``(where, accountant)`` for every :class:`~dptensor.PrivacyAccountant` in ``obj``, at any
    depth: an estimator's parameters (pipeline steps, estimators held as parameters), lists,
    tuples, sets, dicts and other objects' attributes, as ``clone`` copies them."""
    if isinstance(obj, PrivacyAccountant):
        yield where, obj
        return
    seen = set() if seen is None else seen
    if id(obj) in seen or isinstance(obj, (str, bytes, numbers.Number, np.ndarray, type)):
        return
    seen.add(id(obj))
    if hasattr(obj, "get_params"):
        items = ((f"{where}.{k}", v) for k, v in obj.get_params(deep=False).items())
    elif isinstance(obj, dict):
        items = ((f"{where}[{k!r}]", v) for k, v in obj.items())
    elif isinstance(obj, (list, tuple, set, frozenset)):
        items = ((f"{where}[{i}]", v) for i, v in enumerate(obj))
    else:
        items = ((f"{where}.{k}", v) for k, v in getattr(obj, "__dict__", {}).items())
    for place, value in items:
        yield from find_accountants(value, place, seen)


def accountant_keys(est) -> dict:
    """``{parameter: accountant}`` for the accountants ``est.set_params`` can reach."""
    return {k: v for k, v in est.get_params(deep=True).items() if isinstance(v, PrivacyAccountant)}


def without_accountants(est):
    """``est`` with every accountant taken off, or a refusal (before any spend) naming one that
    cannot be: a run that kept one would record itself there, and the number of runs is secret."""
    est.set_params(**dict.fromkeys(accountant_keys(est)))
    for where, _ in find_accountants(est, "estimator"):
        raise ValueError(f"{where} is an accountant the search cannot take off its runs (not a "
                         "parameter that set_params reaches): each run would record itself there, "
                         "and the number of runs is secret. Give the accountant to the search "
                         "(accountant=...) and none inside the estimator")
    return est
