"""The accountant's refusals: errors a search must never swallow."""
from __future__ import annotations

__all__ = ["PrivacyAccountingError", "LedgerError"]


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
