"""Where spends are kept: in memory, or in a SQLite file shared by processes.

A ledger stores entries and runs one function atomically over them (read every entry, decide,
maybe append). It knows nothing of pricing: the accountant passes the decision in.
"""
from __future__ import annotations

import json
import os
import sqlite3
import threading
import time
from dataclasses import dataclass, field

from .events import PrivacyEvent, event_from_dict

__all__ = ["LedgerEntry", "MemoryLedger", "SQLiteLedger", "LedgerError"]

# "DPTS" in ASCII: marks a SQLite file as a dptensor ledger, so a foreign database is refused.
APPLICATION_ID = 0x44505453
SCHEMA_VERSION = 1


class LedgerError(RuntimeError):
    """A ledger file that is not a valid dptensor ledger, or that disagrees with the accountant."""


@dataclass(frozen=True)
class LedgerEntry:
    """One recorded spend: when, who, which mechanism and noise, and what it cost on its own."""

    time: float
    label: str
    event: PrivacyEvent
    epsilon: float
    delta: float
    pid: int = field(default_factory=os.getpid)
    #: Position in the ledger (0 for the first spend): unique within one ledger, and the same when
    #: the same script replays the same spends, so it keys each spend's own noise stream.
    index: int = -1

    @property
    def mechanism(self) -> str:
        return self.event.mechanism

    @property
    def parameters(self) -> dict:
        params = self.event.to_dict()
        params.pop("mechanism")
        return params

    def to_dict(self) -> dict:
        return {"time": self.time, "label": self.label, "mechanism": self.mechanism,
                "parameters": self.parameters, "epsilon": self.epsilon, "delta": self.delta,
                "pid": self.pid}


class MemoryLedger:
    """Entries in a list, guarded by a lock (threads of one process share it)."""

    def __init__(self):
        self._entries: list[LedgerEntry] = []
        self._lock = threading.Lock()

    def entries(self) -> list[LedgerEntry]:
        with self._lock:
            return list(self._entries)

    def transact(self, decide):
        """Run ``decide(entries) -> new entry or None`` atomically; append what it returns."""
        with self._lock:
            entry = decide(list(self._entries))
            if entry is not None:
                self._entries.append(entry)
            return entry

    # A lock cannot be pickled; a copy gets its own (it is only ever read, or refused, elsewhere).
    def __getstate__(self):
        return {"_entries": self.entries()}

    def __setstate__(self, state):
        self._entries = list(state["_entries"])
        self._lock = threading.Lock()


class SQLiteLedger:
    """Entries in a SQLite file; each check-and-record is one ``BEGIN IMMEDIATE`` transaction.

    The file remembers the budget it was created with. Opening it with another budget, opening a
    database of another application, or a file that is not SQLite raises :class:`LedgerError`: a
    budget is never silently restarted.
    """

    def __init__(self, path, epsilon: float, delta: float, *, timeout: float = 60.0):
        self.path = os.fspath(path)
        self.timeout = timeout
        self._budget = (float(epsilon), float(delta))
        self._local = threading.local()
        self._initialise()

    # Connections are per thread and per process: sqlite3 objects may not cross either.
    def _connect(self) -> sqlite3.Connection:
        conn = getattr(self._local, "conn", None)
        if conn is None or self._local.pid != os.getpid():
            conn = sqlite3.connect(self.path, timeout=self.timeout, isolation_level=None)
            self._local.conn, self._local.pid = conn, os.getpid()
        return conn

    def _initialise(self):
        conn = self._connect()
        try:
            conn.execute("BEGIN IMMEDIATE")
            try:
                app_id = conn.execute("PRAGMA application_id").fetchone()[0]
                tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
                if app_id == 0 and not tables:
                    self._create_schema(conn)
                elif app_id != APPLICATION_ID:
                    raise LedgerError(f"{self.path!r} is a SQLite database of another application, "
                                      "not a dptensor ledger; refusing to use it")
                self._check_budget(conn)
                conn.execute("COMMIT")
            except BaseException:
                conn.execute("ROLLBACK")
                raise
        except sqlite3.DatabaseError as exc:
            raise LedgerError(f"{self.path!r} is not a readable dptensor ledger ({exc}); refusing to "
                              "start a new budget over it") from exc

    def _create_schema(self, conn):
        conn.execute(f"PRAGMA application_id = {APPLICATION_ID}")
        conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
        conn.execute("CREATE TABLE budget (id INTEGER PRIMARY KEY CHECK (id = 1), "
                     "epsilon TEXT NOT NULL, delta TEXT NOT NULL)")
        conn.execute("CREATE TABLE spends (id INTEGER PRIMARY KEY AUTOINCREMENT, time REAL NOT NULL, "
                     "label TEXT NOT NULL, event TEXT NOT NULL, epsilon REAL NOT NULL, "
                     "delta REAL NOT NULL, pid INTEGER NOT NULL)")
        conn.execute("INSERT INTO budget VALUES (1, ?, ?)", tuple(repr(v) for v in self._budget))

    def _check_budget(self, conn):
        version = conn.execute("PRAGMA user_version").fetchone()[0]
        if version != SCHEMA_VERSION:
            raise LedgerError(f"{self.path!r} has ledger schema {version}, expected {SCHEMA_VERSION}")
        row = conn.execute("SELECT epsilon, delta FROM budget WHERE id = 1").fetchone()
        if row is None:
            raise LedgerError(f"{self.path!r} has no budget row: the ledger is damaged")
        stored = (float(row[0]), float(row[1]))
        if stored != self._budget:
            raise LedgerError(f"{self.path!r} holds a budget of (epsilon={stored[0]}, delta={stored[1]}), "
                              f"not (epsilon={self._budget[0]}, delta={self._budget[1]}); open it with "
                              "the same budget, or start a new file")

    def entries(self) -> list[LedgerEntry]:
        conn = self._connect()
        rows = conn.execute("SELECT time, label, event, epsilon, delta, pid FROM spends ORDER BY id")
        return [_entry_from_row(r, i) for i, r in enumerate(rows.fetchall())]

    def transact(self, decide):
        conn = self._connect()
        conn.execute("BEGIN IMMEDIATE")  # takes the write lock: no other process can interleave
        try:
            rows = conn.execute("SELECT time, label, event, epsilon, delta, pid FROM spends ORDER BY id")
            entry = decide([_entry_from_row(r, i) for i, r in enumerate(rows.fetchall())])
            if entry is not None:
                conn.execute("INSERT INTO spends (time, label, event, epsilon, delta, pid) "
                             "VALUES (?, ?, ?, ?, ?, ?)",
                             (entry.time, entry.label, json.dumps(entry.event.to_dict()),
                              entry.epsilon, entry.delta, entry.pid))
            conn.execute("COMMIT")
            return entry
        except BaseException:
            conn.execute("ROLLBACK")
            raise

    def __getstate__(self):
        return {"path": self.path, "timeout": self.timeout, "_budget": self._budget}

    def __setstate__(self, state):
        self.__dict__.update(state)
        self._local = threading.local()


def _entry_from_row(row, index) -> LedgerEntry:
    t, label, event, eps, delta, pid = row
    return LedgerEntry(time=t, label=label, event=event_from_dict(json.loads(event)),
                       epsilon=eps, delta=delta, pid=pid, index=index)


def now() -> float:
    return time.time()
