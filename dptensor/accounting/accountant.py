"""The privacy budget shared by estimators, and its ledger of spends."""
from __future__ import annotations

import math
import os
import uuid
import weakref

from .._guards import fixed_floating_point
from ..exceptions import (DEFAULT_DELTA, BudgetExceededError, LedgerError, LedgerNotSharedError,
                          check_delta, check_epsilon)
from .composition import epsilon_of
from .errors import PrivacyAccountingError
from .events import PrivacyEvent
from .ledger import LedgerEntry, MemoryLedger, SQLiteLedger, now, stored_budget
from .read_only import ReadOnlyLedger, writable

__all__ = ["PrivacyAccountant", "PrivacyAccountingError", "BudgetExceededError",
           "LedgerNotSharedError", "DEFAULT_DELTA"]

# Accountants alive in this process, by id: unpickling one here returns the very same object, so a
# pickle round trip (or a thread-based joblib backend) never forks the ledger.
_LIVE: "weakref.WeakValueDictionary[str, PrivacyAccountant]" = weakref.WeakValueDictionary()


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
        The delta at which all epsilons are reported and the budget is enforced (see
        :data:`DEFAULT_DELTA` for the choice of default). ``0`` is a pure-DP budget: it serves the
        pure (Laplace) mechanisms only, such as ``PrivateTensorCompletion(perturbation="input")``
        or ``"output"``; every Gaussian release (all the other estimators) is refused under it
        before any data is touched, with a message saying so.
    ledger : None or path, default=None
        ``None`` keeps spends in memory, for this process only. A path keeps them in a SQLite file:
        the budget survives restarts and is shared safely by processes (each check-and-record is
        one transaction). The file remembers its budget and refuses to be opened with another
        (:meth:`open` reads it from the file). The path is made absolute here, and checked: a
        missing directory, a directory, or a file that cannot be read and written raises
        :class:`~dptensor.accounting.LedgerError` naming the file. The file is append-only and
        carries a hash chain, checked at every read and spend: a file edited outside dptensor is
        refused with :class:`~dptensor.accounting.LedgerError` (see the privacy guide, "The
        ledger file", for what that protects against and what it cannot).

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
        if ledger is not None and not isinstance(ledger, (str, os.PathLike)):
            raise TypeError(f"ledger must be None (in memory) or the path of a SQLite file, "
                            f"got {type(ledger).__name__}")
        if ledger is not None and os.fspath(ledger) in ("", ":memory:"):
            # SQLite's name for an in-memory database would be a file of that name here
            raise LedgerError(f"ledger={os.fspath(ledger)!r} names no ledger file: leave "
                              "ledger=None (the default) for a ledger in memory, or give the "
                              "path of a file, e.g. ledger='budget.sqlite'")
        self._store = (MemoryLedger() if ledger is None
                       else SQLiteLedger(ledger, self.epsilon, self.delta))
        # The absolute path: a pickle reloaded in another working directory uses the same file.
        self.ledger = None if ledger is None else self._store.path
        self._id = uuid.uuid4().hex
        self._pid = os.getpid()
        _LIVE[self._id] = self

    @classmethod
    def open(cls, path) -> "PrivacyAccountant":
        """The accountant of the existing ledger file at ``path``, with the budget the file holds.

        Use it to inspect a ledger (``history``, ``spent``, ``remaining``) or to go on spending
        from it without restating its budget. A file this process cannot write (file permissions,
        a read-only mount) is opened to be read only: it is inspected alike, and every spend from
        it (a fit's) is refused with :class:`~dptensor.accounting.LedgerError` before anything is
        spent or any noise drawn. A missing file is refused with
        :class:`~dptensor.accounting.LedgerError`, never created: create a ledger with
        ``PrivacyAccountant(epsilon, delta, ledger=path)``.
        """
        epsilon, delta = stored_budget(path)
        if writable(path):
            return cls(epsilon, delta, ledger=path)
        accountant = cls(epsilon, delta)  # in memory, then given the file, to be read only
        accountant._store = ReadOnlyLedger(path, epsilon, delta)
        accountant.ledger = accountant._store.path
        return accountant

    # ------------------------------------------------------------------ reading
    def history(self) -> list[LedgerEntry]:
        """Every recorded spend, oldest first: time, label, mechanism, parameters and own cost."""
        return self._store.entries()

    @fixed_floating_point
    def spent(self) -> tuple[float, float]:
        """``(epsilon, delta)`` of all recorded spends composed, at the accountant's delta."""
        entries = self.history()
        if not entries:
            return (0.0, 0.0)
        return (epsilon_of([e.event for e in entries], self.delta), self.delta)

    @fixed_floating_point
    def remaining(self) -> tuple[float, float]:
        """``(epsilon, delta)`` left: the total minus what is spent, at the accountant's delta.

        Composition is sub-additive, so a set of further spends whose epsilons add up to more than
        this may still fit; :meth:`check` answers exactly for a given spend.
        """
        spent = self.spent()[0]
        return (0.0 if math.isinf(spent) else max(0.0, self.epsilon - spent), self.delta)

    @fixed_floating_point
    def cost(self, event: PrivacyEvent, delta: float | None = None) -> float:
        """Epsilon of ``event`` alone, at ``delta`` (the accountant's by default)."""
        _check_event(event, "cost")
        return epsilon_of(event, self.delta if delta is None else check_delta(delta))

    # ------------------------------------------------------------------ spending
    @fixed_floating_point
    def check(self, event: PrivacyEvent, *, label: str = "") -> None:
        """Raise :class:`BudgetExceededError` unless ``event`` fits the budget; record nothing."""
        _check_event(event, "check")
        self._refuse_if_orphan()
        self._within_budget([e.event for e in self.history()], event, label)

    @fixed_floating_point
    def spend(self, event: PrivacyEvent, *, label: str = "",
              delta: float | None = None) -> LedgerEntry:
        """Check ``event`` against the budget and record it, atomically; return its ledger entry.

        ``delta`` is the delta at which the entry's own cost is reported (the estimator's target);
        the budget is always enforced at the accountant's delta.
        """
        _check_event(event, "spend")
        self._refuse_if_orphan()
        own_delta = self.delta if delta is None else check_delta(delta)
        own_eps = epsilon_of(event, own_delta)

        def decide(entries):
            self._within_budget([e.event for e in entries], event, label)
            return LedgerEntry(time=now(), label=label, event=event, epsilon=own_eps,
                               delta=own_delta, index=len(entries))

        return self._store.transact(decide)

    def _within_budget(self, past, event, label):
        if math.isinf(self.epsilon):
            return
        total = epsilon_of(past + [event], self.delta)
        if total > self.epsilon:  # never approximate: an ulp over is over
            spent = epsilon_of(past, self.delta) if past else 0.0
            reason = getattr(event, "reason", "")
            if reason:
                reason = (f"this release has no privacy guarantee ({reason}), so it costs "
                          "epsilon=inf; set a finite epsilon (and the public bound it needs) to "
                          "fit under this budget")
            elif self.delta == 0 and math.isinf(epsilon_of(event, self.delta)):
                reason = ("this accountant's delta is 0 (pure DP), and a Gaussian release has no "
                          "pure-epsilon guarantee, so it costs epsilon=inf at delta=0. Give the "
                          "accountant a delta > 0 (say 1e-5), or fit under it only pure (Laplace) "
                          "mechanisms, such as PrivateTensorCompletion(perturbation='input')")
            else:
                reason = ("lower the fit's epsilon: the accountant's remaining() says what is "
                          "left, and check(model.privacy_cost(n_samples, n_features).event) "
                          "says before a fit whether it fits")
            raise BudgetExceededError(spent, epsilon_of(event, self.delta), self.epsilon,
                                      self.delta, label, reason)

    def _refuse_if_orphan(self):
        # Checked at every spend, not only on unpickling: a forked child inherits the object itself.
        if self.ledger is None and os.getpid() != self._pid:
            raise LedgerNotSharedError(
                f"this PrivacyAccountant keeps its ledger in memory, in the process that created "
                f"it (pid {self._pid}); this is a copy in another process (pid {os.getpid()}), "
                "where a spend would be lost to the original ledger, so the fit was refused before "
                "touching the data. It happens when a model saved with an in-memory accountant "
                "(pickle, joblib.dump) is reloaded in another process and fitted again, and in a "
                "process-based search or cross-validation (n_jobs > 1). To refit a reloaded model, "
                "set a new accountant on it, "
                "model.set_params(accountant=PrivacyAccountant(epsilon, delta)): its fits then "
                "spend from that new budget, which does not know what the original one spent on "
                "the same data. To share one budget across processes and restarts, use a file "
                "ledger, PrivacyAccountant(epsilon, delta, ledger='budget.sqlite'); a search can "
                "also run with n_jobs=1 or a thread backend.")

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
        lines = [f"{self!r}: spent epsilon={eps:.4g} of {self.epsilon:.4g} "
                 f"at delta={self.delta:g}, {len(self.history())} spends"]
        history = self.history()
        # One column, however long a label.
        width = max([40] + [len(e.label or "-") for e in history])
        for e in history:
            lines.append(f"  {e.label or '-':<{width}s} {e.mechanism:<16s} "
                         f"eps={e.epsilon:.4g} delta={e.delta:g}")
        return "\n".join(lines)


def _check_event(event, method):
    if not isinstance(event, PrivacyEvent):
        raise TypeError(f"{method} takes a PrivacyEvent, got {type(event).__name__}: an "
                        "estimator's is privacy_cost(n_samples, n_features).event (an epsilon "
                        "alone does not say which mechanism, hence what it composes to)")


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
