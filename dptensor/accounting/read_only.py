"""An existing ledger file opened to be read only: inspected where it cannot be written."""
from __future__ import annotations

import os

from .errors import LedgerError
from .ledger import SQLiteLedger, _check_not_empty, resolve

__all__ = ["ReadOnlyLedger", "writable"]


def writable(path) -> bool:
    """Whether this process may write the ledger file at ``path`` and its directory (SQLite
    writes a journal beside the file at every spend): file permissions, a read-only mount."""
    path = resolve(path)
    return os.access(path, os.W_OK) and os.access(os.path.dirname(path), os.W_OK | os.X_OK)


class ReadOnlyLedger(SQLiteLedger):
    """A ledger file read as :class:`SQLiteLedger` reads it (every read checks the schema, the
    hash chain, the budget and the spends seen before), through connections that cannot write.
    A spend is refused before anything is decided or recorded: the caller, an estimator's fit,
    has then drawn no noise and released nothing."""

    _mode = "ro"

    def _initialise(self):
        _check_not_empty(self.path)
        self.entries()  # checked now, where the path was given

    def transact(self, decide):
        raise LedgerError(f"the ledger file {self.path!r} was opened to be read only (this "
                          "process cannot write it or its directory: file permissions or a "
                          "read-only file system), so nothing can be spent from it; nothing was "
                          "spent. Make the file and its directory writable and open it again")
