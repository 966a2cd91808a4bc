"""Where spends are kept: in memory, or in a SQLite file shared by processes.

A ledger stores entries and runs one function atomically over them (read every entry, decide,
maybe append). It knows nothing of pricing: the accountant passes the decision in.
"""
from __future__ import annotations

import json
import os
import pathlib
import sqlite3
import threading
import time
from dataclasses import dataclass, field

from .errors import LedgerError
from .events import PrivacyEvent, event_from_dict

__all__ = ["LedgerEntry", "MemoryLedger", "SQLiteLedger", "LedgerError"]

# "DPTS" in ASCII: marks a SQLite file as a dptensor ledger, so a foreign database is refused.
APPLICATION_ID = 0x44505453
SCHEMA_VERSION = 1


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

    The path is made absolute once, here: a later change of directory, or a model reloaded in
    another working directory, keeps using the same file. The file is checked here too (its
    directory exists, it can be read and written, it is a dptensor ledger with this budget), and
    every later use opens it without creating it, so a file moved or deleted since is reported,
    never replaced by a fresh empty budget. Every failure raises :class:`LedgerError` naming the
    file and what to do; a raw ``sqlite3`` error never reaches the caller.

    The file remembers the budget it was created with. Opening it with another budget, opening a
    database of another application, or a file that is not SQLite raises :class:`LedgerError`: a
    budget is never silently restarted.
    """

    def __init__(self, path, epsilon: float, delta: float, *, timeout: float = 60.0):
        self.path = resolve(path)
        self.timeout = timeout
        self._budget = (float(epsilon), float(delta))
        self._local = threading.local()
        _check_location(self.path)
        self._initialise()

    # Connections are per thread and per process: sqlite3 objects may not cross either.
    def _connect(self) -> sqlite3.Connection:
        local = self._local
        if getattr(local, "conn", None) is None or local.pid != os.getpid():
            file = _file_id(self.path)
            conn = self._open("rw")  # never creates: a missing file is an error, not a new budget
            try:
                self._check_budget(_check_ledger(conn, self.path))
            except sqlite3.Error as exc:
                conn.close()
                raise _access_error(self.path, exc) from exc
            except BaseException:
                conn.close()
                raise
            local.conn, local.pid, local.file = conn, os.getpid(), file
        elif _file_id(self.path) != local.file:
            raise LedgerError(f"the ledger file {self.path!r} was deleted or replaced while this "
                              "accountant was using it; its budget cannot be continued in another file. "
                              "Restore the file, or start a new budget with a new accountant")
        return local.conn

    def _open(self, mode: str) -> sqlite3.Connection:
        try:
            return sqlite3.connect(_uri(self.path, mode), uri=True, timeout=self.timeout,
                                   isolation_level=None)
        except sqlite3.Error as exc:
            raise _access_error(self.path, exc) from exc

    def _initialise(self):
        conn = self._open("rwc")
        try:
            conn.execute("BEGIN IMMEDIATE")
            try:
                app_id = conn.execute("PRAGMA application_id").fetchone()[0]
                tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
                if app_id == 0 and not tables:
                    self._create_schema(conn)
                self._check_budget(_check_ledger(conn, self.path))
                # A write now, not at the first fit: a read-only file, directory or mount is
                # reported here, where the path was given.
                conn.execute("UPDATE budget SET epsilon = epsilon WHERE id = 1")
                conn.execute("COMMIT")
            except BaseException:
                _rollback(conn)
                raise
        except sqlite3.OperationalError as exc:
            raise _access_error(self.path, exc) from exc
        except sqlite3.DatabaseError as exc:
            raise LedgerError(f"{self.path!r} is not a readable dptensor ledger ({exc}); refusing to "
                              "start a new budget over it") from exc
        finally:
            conn.close()

    def _create_schema(self, conn):
        conn.execute(f"PRAGMA application_id = {APPLICATION_ID}")
        conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
        conn.execute("CREATE TABLE budget (id INTEGER PRIMARY KEY CHECK (id = 1), "
                     "epsilon TEXT NOT NULL, delta TEXT NOT NULL)")
        conn.execute("CREATE TABLE spends (id INTEGER PRIMARY KEY AUTOINCREMENT, time REAL NOT NULL, "
                     "label TEXT NOT NULL, event TEXT NOT NULL, epsilon REAL NOT NULL, "
                     "delta REAL NOT NULL, pid INTEGER NOT NULL)")
        conn.execute("INSERT INTO budget VALUES (1, ?, ?)", tuple(repr(v) for v in self._budget))

    def _check_budget(self, stored):
        if stored != self._budget:
            raise LedgerError(f"{self.path!r} holds a budget of (epsilon={stored[0]}, delta={stored[1]}), "
                              f"not (epsilon={self._budget[0]}, delta={self._budget[1]}); open it with "
                              "the same budget (PrivacyAccountant.open reads it from the file), or start "
                              "a new file")

    def entries(self) -> list[LedgerEntry]:
        try:
            rows = self._connect().execute(f"SELECT {_COLUMNS} FROM spends ORDER BY id").fetchall()
        except sqlite3.Error as exc:
            raise _access_error(self.path, exc) from exc
        return [_entry_from_row(r, i) for i, r in enumerate(rows)]

    def transact(self, decide):
        try:
            conn = self._connect()
            conn.execute("BEGIN IMMEDIATE")  # takes the write lock: no other process can interleave
            try:
                rows = conn.execute(f"SELECT {_COLUMNS} FROM spends ORDER BY id").fetchall()
                entry = decide([_entry_from_row(r, i) for i, r in enumerate(rows)])
                if entry is not None:
                    conn.execute("INSERT INTO spends (time, label, event, epsilon, delta, pid) "
                                 "VALUES (?, ?, ?, ?, ?, ?)",
                                 (entry.time, entry.label, json.dumps(entry.event.to_dict()),
                                  entry.epsilon, entry.delta, entry.pid))
                conn.execute("COMMIT")
                return entry
            except BaseException:
                _rollback(conn)
                raise
        except sqlite3.Error as exc:  # nothing was recorded: the transaction rolled back
            raise _access_error(self.path, exc) from exc

    def __getstate__(self):
        return {"path": self.path, "timeout": self.timeout, "_budget": self._budget}

    def __setstate__(self, state):
        self.__dict__.update(state)
        self._local = threading.local()


_COLUMNS = "time, label, event, epsilon, delta, pid"


def resolve(path) -> str:
    """The absolute path of a ledger file, fixed once, whatever the working directory later is."""
    return os.path.abspath(os.path.expanduser(os.fspath(path)))


def stored_budget(path) -> tuple[float, float]:
    """``(epsilon, delta)`` held by the existing ledger file at ``path``; refuses anything else."""
    return read_ledger(path)[0]


def read_ledger(path) -> tuple[tuple[float, float], list[LedgerEntry]]:
    """The budget and every entry of the existing ledger file at ``path``, read without writing
    (so a read-only file or mount can be inspected); refuses a missing or foreign file."""
    path = resolve(path)
    if not os.path.isfile(path):
        raise LedgerError(f"there is no ledger file at {path!r}: opening reads the budget of an existing "
                          "ledger; start a new one with PrivacyAccountant(epsilon, delta, "
                          f"ledger={path!r})")
    try:
        conn = sqlite3.connect(_uri(path, "ro"), uri=True, isolation_level=None)
        try:
            budget = _check_ledger(conn, path)
            rows = conn.execute(f"SELECT {_COLUMNS} FROM spends ORDER BY id").fetchall()
        finally:
            conn.close()
    except sqlite3.OperationalError as exc:
        raise _access_error(path, exc) from exc
    except sqlite3.DatabaseError as exc:
        raise LedgerError(f"{path!r} is not a readable dptensor ledger ({exc})") from exc
    return budget, [_entry_from_row(r, i) for i, r in enumerate(rows)]


def _check_ledger(conn, path) -> tuple[float, float]:
    """Check that ``conn`` holds a dptensor ledger of this schema; return its budget."""
    if conn.execute("PRAGMA application_id").fetchone()[0] != APPLICATION_ID:
        raise LedgerError(f"{path!r} is a SQLite database of another application, not a dptensor "
                          "ledger; refusing to use it")
    version = conn.execute("PRAGMA user_version").fetchone()[0]
    if version != SCHEMA_VERSION:
        raise LedgerError(f"{path!r} has ledger schema {version}, expected {SCHEMA_VERSION}")
    row = conn.execute("SELECT epsilon, delta FROM budget WHERE id = 1").fetchone()
    if row is None:
        raise LedgerError(f"{path!r} has no budget row: the ledger is damaged")
    return (float(row[0]), float(row[1]))


def _check_location(path):
    """Refuse, with what to do, a path where no ledger can be kept: checked before SQLite runs."""
    if os.path.isdir(path):
        raise LedgerError(f"the ledger path {path!r} is a directory; give a file in it, e.g. "
                          f"{os.path.join(path, 'budget.sqlite')!r}")
    parent = os.path.dirname(path)
    if not os.path.isdir(parent):
        raise LedgerError(f"cannot keep a ledger at {path!r}: the directory {parent!r} does not exist; "
                          "create it first, or choose another path")
    if os.path.exists(path) and not os.access(path, os.R_OK | os.W_OK):
        raise LedgerError(f"the ledger file {path!r} cannot be read and written by this process (file "
                          "permissions or a read-only file system); make it writable, or copy it to a "
                          "writable place and open the copy")
    # SQLite creates the file, and a journal beside it at every write, in this directory.
    if not os.access(parent, os.W_OK | os.X_OK):
        raise LedgerError(f"cannot keep a ledger at {path!r}: the directory {parent!r} is not writable "
                          "(SQLite writes a journal beside the file at every spend); choose a writable "
                          "directory")


def _access_error(path, exc) -> LedgerError:
    """A sqlite3 failure on the file at ``path`` as a LedgerError that says what to check."""
    text = str(exc)
    if "readonly" in text or "read-only" in text:
        hint = ("the file, its directory or its file system is read-only: make them writable, or copy "
                "the file to a writable place and open the copy")
    elif "locked" in text or "busy" in text:
        hint = "another process held the ledger's lock for too long; retry when it is done"
    else:
        hint = ("check that the file still exists where the accountant was created (a reloaded model "
                "keeps using the same absolute path), and that it and its directory can be read and "
                "written by this process")
    return LedgerError(f"the ledger file {path!r} cannot be used ({exc}): {hint}")


def _uri(path, mode) -> str:
    return f"{pathlib.Path(path).as_uri()}?mode={mode}"


def _file_id(path) -> tuple[int, int]:
    try:
        st = os.stat(path)
    except OSError as exc:
        raise LedgerError(f"the ledger file {path!r} does not exist ({exc.strerror}): it was moved or "
                          "deleted, or this accountant was reloaded where the file is not. Restore the "
                          "file at that path, or give the estimator a new accountant") from exc
    return (st.st_dev, st.st_ino)


def _rollback(conn):
    try:
        conn.execute("ROLLBACK")
    except sqlite3.Error:  # no transaction was open (BEGIN itself failed): nothing to undo
        pass


def _entry_from_row(row, index) -> LedgerEntry:
    t, label, event, eps, delta, pid = row
    return LedgerEntry(time=t, label=label, event=event_from_dict(json.loads(event)),
                       epsilon=eps, delta=delta, pid=pid, index=index)


def now() -> float:
    return time.time()
