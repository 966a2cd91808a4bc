"""What dptensor raises and warns, and the checks of a privacy target: a leaf module.

As :mod:`sklearn.exceptions`: every other module may import it, and it imports nothing of
dptensor's, so the accountant, the validation and the estimators share these names without
importing each other.
"""
from __future__ import annotations

import math
import numbers

import numpy as np

__all__ = ["PrivacyWarning", "PrivacyAccountingError", "BudgetExceededError", "LedgerError",
           "LedgerNotSharedError", "DEFAULT_DELTA", "check_epsilon", "check_delta", "real_scalar",
           "integer_scalar"]

#: Default delta. With delta = 0 every Gaussian release has infinite epsilon, so a budget that
#: admits the Gaussian mechanism needs delta > 0; 1e-5 is the usual choice and stays below 1/n (the
#: chance of a catastrophic leak about *some* individual) for data sets of up to 100,000 rows. Use a
#: smaller delta for larger data.
DEFAULT_DELTA = 1e-5


class PrivacyWarning(UserWarning):
    """A mode with no privacy guarantee, or resting on an assumption the library cannot check."""


class PrivacyAccountingError(BaseException):
    """Base of the accountant's refusals.

    It derives from ``BaseException``, not ``Exception``, on purpose: scikit-learn's model
    selection (``GridSearchCV``, ``cross_validate``) catches every ``Exception`` raised in ``fit``
    and turns it into a NaN score, so a refused budget would silently become a poor candidate and
    the search would still pick a winner. A ``BaseException`` stops the search and reaches the
    caller. Catch it by name: ``except BudgetExceededError:``.
    """


class LedgerError(PrivacyAccountingError):
    """A ledger file that cannot be used: missing, unreadable or read-only, not a dptensor ledger,
    damaged, edited outside dptensor (its hash chain does not hold, or it lost spends an
    accountant had seen), of an older schema, or holding another budget. The message names the
    file and what to do.

    A :class:`PrivacyAccountingError`, so a search stops on it instead of scoring the fit NaN: a
    spend that cannot be recorded must not look like a poor candidate.
    """


class BudgetExceededError(PrivacyAccountingError):
    """A spend would take the composed cost past the accountant's budget; nothing was recorded."""

    def __init__(self, spent: float, requested: float, total: float, delta: float, label: str = "",
                 reason: str = ""):
        self.spent, self.requested, self.total, self.delta = spent, requested, total, delta
        self.label, self.reason = label, reason
        who = f" by {label}" if label else ""
        why = f": {reason}" if reason else ""
        super().__init__(
            f"privacy budget exceeded: spent epsilon={spent:.6g}, requested "
            f"epsilon={requested:.6g}{who}, total budget epsilon={total:.6g} (all at "
            f"delta={delta:g}); the fit was refused before touching the data and nothing was "
            f"recorded{why}")

    # Exceptions are pickled as ``cls(*args)``; keep every field so the error survives the trip
    # back from a process worker (joblib/loky re-raises it in the parent).
    def __reduce__(self):
        return (type(self), (self.spent, self.requested, self.total, self.delta, self.label,
                             self.reason))


class LedgerNotSharedError(PrivacyAccountingError):
    """An in-memory accountant was copied into another process, where its spends would be lost.

    It happens when a model saved with an in-memory accountant (pickle, ``joblib.dump``) is
    reloaded in another process and fitted again, and in process-based parallelism (a search or
    ``cross_validate`` with ``n_jobs`` > 1 on the default backend).
    """


def real_scalar(value):
    """``value``, or the number a 0-d NumPy array of integers or floats holds (``np.array(1.0)``,
    as scikit-learn and NumPy reductions give): a parameter check then sees a number. Anything
    else (a bool or complex 0-d array, a 1-element 1-D array) is returned as it is, to be refused
    by the check."""
    if isinstance(value, np.ndarray) and value.ndim == 0 and value.dtype.kind in "iuf":
        return value[()]
    return value


def integer_scalar(value):
    """``value``, or the integer a 0-d NumPy array of integers holds (``np.array(2)``): an
    integer parameter then sees the int, as a real one sees :func:`real_scalar`'s number (and
    the noise is keyed by it, as ``_describe`` reads the array). A 0-d array of floats (or bools)
    is returned as it is, refused as a float is."""
    if isinstance(value, np.ndarray) and value.ndim == 0 and value.dtype.kind in "iu":
        return value[()]
    return value


def check_epsilon(epsilon, name="epsilon") -> float:
    """A number > 0 (a 0-d array of one too); ``np.inf`` means no privacy. Returns a float."""
    epsilon = real_scalar(epsilon)
    if isinstance(epsilon, bool) or not isinstance(epsilon, numbers.Real) or math.isnan(epsilon):
        raise TypeError(f"{name} must be a real number > 0 (np.inf for no privacy), "
                        f"got {epsilon!r}")
    if not epsilon > 0:
        raise ValueError(f"{name} must be > 0 (np.inf for no privacy), got {epsilon!r}")
    return float(epsilon)


def check_delta(delta, name="delta") -> float:
    """A number in [0, 1) (a 0-d array of one too). Returns a float."""
    delta = real_scalar(delta)
    if isinstance(delta, bool) or not isinstance(delta, numbers.Real) or math.isnan(delta):
        raise TypeError(f"{name} must be a real number in [0, 1), got {delta!r}")
    if not 0 <= delta < 1:
        raise ValueError(f"{name} must be in [0, 1), got {delta!r}")
    return float(delta)
