"""The privacy budget shared by estimators, and its ledger of spends."""
from __future__ import annotations

import math
import os
import uuid
import weakref

from .._validation import check_delta, check_epsilon
from .composition import epsilon_of
from .events import PrivacyEvent
from .ledger import LedgerEntry, MemoryLedger, SQLiteLedger, now

__all__ = ["PrivacyAccountant", "PrivacyAccountingError", "BudgetExceededError", "LedgerNotSharedError",
           "DEFAULT_DELTA"]

#: Default delta. With delta = 0 every Gaussian release has infinite epsilon, so a budget that admits
#: the Gaussian mechanism needs delta > 0; 1e-5 is the usual choice and stays below 1/n (the chance
#: of a catastrophic leak about *some* individual) for data sets of up to 100,000 rows. Use a
#: smaller delta for larger data.
DEFAULT_DELTA = 1e-5

# Accountants alive in this process, by id: unpickling one here returns the very same object, so a
# pickle round trip (or a thread-based joblib backend) never forks the ledger.
_LIVE: "weakref.WeakValueDictionary[str, PrivacyAccountant]" = weakref.WeakValueDictionary()


class PrivacyAccountingError(BaseException):
    """Base of the accountant's refusals.

    It derives from ``BaseException``, not ``Exception``, on purpose: scikit-learn's model
    selection (``GridSearchCV``, ``cross_validate``) catches every ``Exception`` raised in ``fit``
    and turns it into a NaN score, so a refused budget would silently become a poor candidate and
    the search would still pick a winner. A ``BaseException`` stops the search and reaches the
    caller. Catch it by name: ``except BudgetExceededError:``.
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
            f"privacy budget exceeded: spent epsilon={spent:.6g}, requested epsilon={requested:.6g}{who}, "
            f"total budget epsilon={total:.6g} (all at delta={delta:g}); the fit was refused before "
            f"touching the data and nothing was recorded{why}")

    # Exceptions are pickled as ``cls(*args)``; keep every field so the error survives the trip
    # back from a process worker (joblib/loky re-raises it in the parent).
    def __reduce__(self):
        return (type(self), (self.spent, self.requested, self.total, self.delta, self.label, self.reason))


class LedgerNotSharedError(PrivacyAccountingError):
    """An in-memory accountant was copied into another process, where its spends would be lost."""


class PrivacyAccountant:
    """A privacy budget ``(epsilon, delta)`` and the ledger of everything spent from it.

    Estimators given the same accountant compose their costs here. Every fit checks and records
    its cost in one atomic step *before* its first noisy release: a fit that would exceed the
    budget raises :class:`BudgetExceededError` and leaves the ledger unchanged; a fit that fails
    after recording has still spent (its noisy releases may have happened).

    Parameters
    ----------
    epsilon : float, default=np.inf
        Total epsilon. ``np.inf`` records spends without limit.
    delta : float, default=1e-5
        The delta at which all epsilons are reported and the budget is enforced. Must be > 0 for
        Gaussian mechanisms (see :data:`DEFAULT_DELTA` for the choice of default).
    ledger : None or path, default=None
        ``None`` keeps spends in memory, for this process only. A path keeps them in a SQLite file:
        the budget survives restarts and is shared safely by processes (each check-and-record is
        one transaction). The file remembers its budget and refuses to be opened with another.

    Notes
    -----
    Composition: exact Gaussian DP while every spend is Gaussian, otherwise Rényi DP with the
    Canonne–Kamath–Steinke conversion (see :mod:`dptensor.accounting.composition`).

    The accountant is shared by identity: ``copy.deepcopy``, ``sklearn.base.clone`` and
    ``GridSearchCV`` keep the same object. Process-based parallelism (``n_jobs=2``) can only share a
    file ledger; an in-memory accountant that reaches another process refuses to spend there with
    :class:`LedgerNotSharedError` instead of losing the spend.

    Examples
    --------
    >>> from dptensor import PrivacyAccountant
    >>> from dptensor.accounting import GaussianEvent
    >>> budget = PrivacyAccountant(epsilon=1.0, delta=1e-5)
    >>> entry = budget.spend(GaussianEvent(noise_multiplier=10.0, count=5), label="example")
    >>> round(budget.spent()[0], 3)
    0.82
    """

    def __init__(self, epsilon: float = math.inf, delta: float = DEFAULT_DELTA, *, ledger=None):
        self.epsilon = check_epsilon(epsilon)
        self.delta = check_delta(delta)
        self.ledger = None if ledger is None else os.fspath(ledger)
        self._store = MemoryLedger() if ledger is None else SQLiteLedger(ledger, self.epsilon, self.delta)
        self._id = uuid.uuid4().hex
        self._pid = os.getpid()
        _LIVE[self._id] = self

    # ------------------------------------------------------------------ reading
    def history(self) -> list[LedgerEntry]:
        """Every recorded spend, oldest first: time, label, mechanism, parameters and own cost."""
        return self._store.entries()

    def spent(self) -> tuple[float, float]:
        """``(epsilon, delta)`` of all recorded spends composed, epsilon reported at the accountant's delta."""
        entries = self.history()
        if not entries:
            return (0.0, 0.0)
        return (epsilon_of([e.event for e in entries], self.delta), self.delta)

    def remaining(self) -> tuple[float, float]:
        """``(epsilon, delta)`` left: the total minus what is spent, at the accountant's delta.

        Composition is sub-additive, so a set of further spends whose epsilons add up to more than
        this may still fit; :meth:`check` answers exactly for a given spend.
        """
        spent = self.spent()[0]
        return (0.0 if math.isinf(spent) else max(0.0, self.epsilon - spent), self.delta)

    def cost(self, event: PrivacyEvent, delta: float | None = None) -> float:
        """Epsilon of ``event`` alone, at ``delta`` (the accountant's by default)."""
        return epsilon_of(event, self.delta if delta is None else delta)

    # ------------------------------------------------------------------ spending
    def check(self, event: PrivacyEvent, *, label: str = "") -> None:
        """Raise :class:`BudgetExceededError` if ``event`` does not fit the budget; record nothing."""
        self._refuse_if_orphan()
        self._within_budget([e.event for e in self.history()], event, label)

    def spend(self, event: PrivacyEvent, *, label: str = "", delta: float | None = None) -> LedgerEntry:
        """Check ``event`` against the budget and record it, atomically; return its ledger entry.

        ``delta`` is the delta at which the entry's own cost is reported (the estimator's target);
        the budget is always enforced at the accountant's delta.
        """
        if not isinstance(event, PrivacyEvent):
            raise TypeError(f"spend takes a PrivacyEvent, got {type(event).__name__}")
        self._refuse_if_orphan()
        own_delta = self.delta if delta is None else float(delta)
        own_eps = epsilon_of(event, own_delta)

        def decide(entries):
            self._within_budget([e.event for e in entries], event, label)
            return LedgerEntry(time=now(), label=label, event=event, epsilon=own_eps, delta=own_delta,
                               index=len(entries))

        return self._store.transact(decide)

    def _within_budget(self, past, event, label):
        if math.isinf(self.epsilon):
            return
        total = epsilon_of(past + [event], self.delta)
        if total > self.epsilon * (1 + 1e-9):
            spent = epsilon_of(past, self.delta) if past else 0.0
            reason = getattr(event, "reason", "")
            if reason:
                reason = (f"this release has no privacy guarantee ({reason}), so it costs epsilon=inf; "
                          "set a finite epsilon (and the public bound it needs) to fit under this budget")
            raise BudgetExceededError(spent, epsilon_of(event, self.delta), self.epsilon, self.delta, label,
                                      reason)

    def _refuse_if_orphan(self):
        # Checked at every spend, not only on unpickling: a forked child inherits the object itself.
        if self.ledger is None and os.getpid() != self._pid:
            raise LedgerNotSharedError(
                "this PrivacyAccountant keeps its ledger in memory and was copied into another process "
                f"(pid {os.getpid()}, created in pid {self._pid}); a spend recorded here would be lost "
                "to the original. Use a file ledger, PrivacyAccountant(..., ledger='budget.sqlite'), "
                "to share a budget across processes (e.g. GridSearchCV(n_jobs=2)), or use n_jobs=1 "
                "or a thread backend.")

    # ------------------------------------------------------------------ identity
    def __sklearn_clone__(self):
        return self

    def __copy__(self):
        return self

    def __deepcopy__(self, memo):
        return self

    def __reduce__(self):
        state = {"epsilon": self.epsilon, "delta": self.delta, "ledger": self.ledger,
                 "_store": self._store, "_pid": self._pid}
        return (_restore, (self._id, state))

    def __repr__(self):
        ledger = "" if self.ledger is None else f", ledger={self.ledger!r}"
        return f"PrivacyAccountant(epsilon={self.epsilon!r}, delta={self.delta!r}{ledger})"

    def __str__(self):
        eps, _ = self.spent()
        lines = [f"{self!r}: spent epsilon={eps:.4g} of {self.epsilon:.4g} at delta={self.delta:g}, "
                 f"{len(self.history())} spends"]
        for e in self.history():
            lines.append(f"  {e.label or '-':<40s} {e.mechanism:<16s} eps={e.epsilon:.4g} delta={e.delta:g}")
        return "\n".join(lines)


def _restore(acc_id, state):
    live = _LIVE.get(acc_id)
    if live is not None:
        return live
    acc = PrivacyAccountant.__new__(PrivacyAccountant)
    acc.__dict__.update(state)
    acc._id = acc_id
    # A memory ledger copied into another process keeps its creator's pid, so it refuses to spend.
    _LIVE[acc_id] = acc
    return acc
