"""Where spends are kept: in memory, or in a SQLite file shared by processes.

A ledger stores entries and runs one function atomically over them (read every entry, decide,
maybe append). It knows nothing of pricing: the accountant passes the decision in.

A file ledger is append-only and tamper-evident: triggers refuse every UPDATE and DELETE (and an
INSERT that would replace a row), and each record carries a SHA-256 hash of its content and of the
record before it, from the budget row on, checked whenever the file is read, with the schema (the
tables and triggers exactly as created). A ledger is only created where no file is. What that
does and does not protect against is in the privacy guide (docs/privacy.rst, "The ledger file").
"""
from __future__ import annotations

import hashlib
import json
import os
import pathlib
import secrets
import sqlite3
import threading
import time
from dataclasses import dataclass, field

from .errors import LedgerError
from .events import PrivacyEvent, event_from_dict

__all__ = ["LedgerEntry", "MemoryLedger", "SQLiteLedger", "LedgerError"]

# "DPTS" in ASCII: marks a SQLite file as a dptensor ledger, so a foreign database is refused.
APPLICATION_ID = 0x44505453
#: 2 adds the hash chain and the append-only triggers; a file of schema 1 is refused until
#: :func:`upgrade` gives it the chain (``dptensor ledger --upgrade PATH``).
SCHEMA_VERSION = 2


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
        return {k: v for k, v in self.event.to_dict().items() if k != "mechanism"}

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

    The file remembers the budget it was created with, and is created only where no file exists
    (written aside, then linked into place). Opening it with another budget, opening a database of
    another application, an empty SQLite database, an empty file (a ledger truncated to 0 bytes), or
    a file that is not SQLite raises :class:`LedgerError`: a budget is never silently restarted.

    Every read (here, at each spend, and for :meth:`entries`) checks that the file holds exactly
    the tables and triggers dptensor creates, the whole hash chain, and that the file still holds
    every spend this object had read or recorded before the read began, unchanged: a table
    dropped and recreated, a trigger dropped or rewritten, a record edited, removed or reordered,
    or spends cut from the end (which the file alone may not show), raise :class:`LedgerError`
    before anything is spent. The journal mode is left as the file has it (rollback or WAL).
    """
    _mode = "rw"  # SQLite's open mode (:class:`~dptensor.accounting.read_only.ReadOnlyLedger`)

    def __init__(self, path, epsilon: float, delta: float, *, timeout: float = 60.0):
        self.path = resolve(path)
        self.timeout = timeout
        self._budget = (float(epsilon), float(delta))
        self._local = threading.local()
        # (number of spends, chain hash after them) last read or written: every later read must
        # extend it, so a file cut short, or an older copy put in its place, is noticed.
        self._seen, self._seen_lock = None, threading.Lock()
        self._checked = None  # the rows and hashes of the last read, not rehashed when unchanged
        _check_location(self.path, write=self._mode == "rw")
        self._initialise()

    # Connections are per thread and per process: sqlite3 objects may not cross either.
    def _connect(self) -> sqlite3.Connection:
        local = self._local
        if getattr(local, "conn", None) is None or local.pid != os.getpid():
            file = _file_id(self.path)
            conn = self._open(self._mode)  # never creates: a missing file is an error
            try:
                self._check_budget(_check_ledger(conn, self.path)[0])
            except sqlite3.Error as exc:
                conn.close()
                raise _access_error(self.path, exc) from exc
            except BaseException:
                conn.close()
                raise
            local.conn, local.pid, local.file = conn, os.getpid(), file
        elif _file_id(self.path) != local.file:
            raise LedgerError(f"the ledger file {self.path!r} was deleted or replaced while this "
                              "accountant was using it; its budget cannot be continued in another "
                              "file. Restore the file, or start a new budget with a new accountant")
        return local.conn

    def _open(self, mode: str) -> sqlite3.Connection:
        try:
            return sqlite3.connect(_uri(self.path, mode), uri=True, timeout=self.timeout,
                                   isolation_level=None)
        except sqlite3.Error as exc:
            raise _access_error(self.path, exc) from exc

    def _initialise(self):
        if not os.path.lexists(self.path):
            self._create()
        _check_not_empty(self.path)
        seen = self._seen
        conn = self._open("rw")  # an existing file: never a new budget over it
        try:
            conn.execute("BEGIN IMMEDIATE")
            try:
                self._read(conn, seen)
                # A write statement now, not at the first fit: a read-only file or mount is
                # reported here, where the path was given. It matches no row, so it neither
                # writes nor fires the append-only triggers.
                conn.execute("UPDATE budget SET epsilon = epsilon WHERE 0")
                conn.execute("COMMIT")
            except BaseException:
                _rollback(conn)
                raise
        except sqlite3.OperationalError as exc:
            raise _access_error(self.path, exc) from exc
        except sqlite3.DatabaseError as exc:
            raise LedgerError(f"{self.path!r} is not a readable dptensor ledger ({exc}); "
                              "refusing to start a new budget over it") from exc
        finally:
            conn.close()

    def _create(self):
        """Create the ledger where no file is, atomically: it is written whole under another name
        beside it, then linked into place, which fails if a file appeared there meanwhile (another
        process creating the same ledger: its file is used). So no process ever sees a ledger half
        created, and an existing file, even an empty one, is never taken for a new budget."""
        folder, name = os.path.split(self.path)
        temp = os.path.join(folder, f".{name}.{os.getpid()}.{secrets.token_hex(4)}.new")
        try:
            conn = sqlite3.connect(_uri(temp, "rwc"), uri=True, isolation_level=None)
            try:
                conn.execute("BEGIN IMMEDIATE")
                _create_schema(conn, self._budget)
                conn.execute("COMMIT")
            finally:
                conn.close()
            _link_exclusive(temp, self.path)
        except sqlite3.Error as exc:
            raise _access_error(self.path, exc) from exc
        except OSError as exc:
            raise LedgerError(f"cannot create the ledger file {self.path!r} ({exc.strerror}): "
                              "check that its directory can be written by this process") from exc
        finally:
            for leftover in (temp, temp + "-journal"):
                try:
                    os.unlink(leftover)
                except FileNotFoundError:
                    pass

    def _check_budget(self, stored):
        if stored != self._budget:
            raise LedgerError(
                f"{self.path!r} holds a budget of (epsilon={stored[0]}, delta={stored[1]}), not "
                f"(epsilon={self._budget[0]}, delta={self._budget[1]}); open it with the same "
                "budget (PrivacyAccountant.open reads it from the file), or start a new file")

    def _read(self, conn, seen) -> tuple[list[tuple], list[str]]:
        """The checked spends (as stored) and chain hashes of the file; run inside a transaction,
        so that every statement sees the same state of the file. ``seen`` is what this object
        had seen (``self._seen``) before the transaction began."""
        budget, rows, hashes = _verified(conn, self.path, self._checked)
        self._check_budget(budget)
        self._check_seen(hashes, seen)
        self._checked = (rows, hashes)
        return rows, hashes

    def _check_seen(self, hashes, seen):
        """Refuse a chain that does not hold, unchanged, the spends seen before the transaction
        that read it began. This object remembers a spend only once committed, so every spend in
        ``seen`` was committed before that transaction, and is in what it reads, whatever the
        journal mode. (Compared with what is seen by now, a transaction could fail on an untouched
        file: in WAL mode its snapshot may be older than another thread's later commit.)"""
        if seen is not None:
            count, digest = seen
            if count >= len(hashes) or hashes[count] != digest:
                raise LedgerError(
                    f"the ledger file {self.path!r} no longer holds the {count} spends this "
                    "accountant has read or recorded (it holds "
                    f"{len(hashes) - 1}, not the same): spends were removed from its end, or "
                    "it was rewritten or replaced by an older copy. Nothing more is spent "
                    "from it; restore the file, or start a new budget in a new file")
        self._remember(hashes)

    def _remember(self, hashes):
        with self._seen_lock:  # only ever longer: another thread may have seen more meanwhile
            if self._seen is None or len(hashes) - 1 > self._seen[0]:
                self._seen = (len(hashes) - 1, hashes[-1])

    def entries(self) -> list[LedgerEntry]:
        try:
            conn = self._connect()
            seen = self._seen  # before the snapshot: see _check_seen
            conn.execute("BEGIN")  # one snapshot: no other process's spend lands between the reads
            try:
                rows = self._read(conn, seen)[0]
            finally:
                _rollback(conn)  # it only read
        except sqlite3.Error as exc:
            raise _access_error(self.path, exc) from exc
        return _entries(rows)

    def transact(self, decide):
        try:
            conn = self._connect()
            seen = self._seen  # before the snapshot: see _check_seen
            conn.execute("BEGIN IMMEDIATE")  # takes the write lock: no other process can interleave
            try:
                rows, hashes = self._read(conn, seen)
                entries = _entries(rows)
                entry = decide(entries)
                if entry is not None:  # the chain grows in the transaction that checked it
                    hashes = hashes + [_append(conn, hashes[-1], _row(len(entries), entry))]
                conn.execute("COMMIT")
            except BaseException:
                _rollback(conn)
                raise
        except sqlite3.Error as exc:  # nothing was recorded: the transaction rolled back
            raise _access_error(self.path, exc) from exc
        self._remember(hashes)  # once committed, never before
        return entry

    def __getstate__(self):
        return {"path": self.path, "timeout": self.timeout, "_budget": self._budget,
                "_seen": self._seen}

    def __setstate__(self, state):
        self.__dict__.update({"_seen": None, **state})
        self._local, self._checked = threading.local(), None
        self._seen_lock = threading.Lock()


_COLUMNS = "time, label, event, epsilon, delta, pid"

# The first link of every chain: the budget row's hash covers this and the budget.
_GENESIS = "dptensor ledger, schema 2"

# Rows are never changed, deleted or replaced (INSERT OR REPLACE deletes without firing DELETE
# triggers, so a spend's INSERT must come with the next id, and the budget row is the only one).
_APPEND_ONLY = [
    f"CREATE TRIGGER {table}_append_only_{op.lower()} BEFORE {op} ON {table} {when}"
    f"BEGIN SELECT RAISE(ABORT, 'a dptensor ledger is append-only: rows of its {table} table "
    "cannot be changed, deleted or replaced'); END"
    for table, op, when in [
        ("budget", "UPDATE", ""), ("budget", "DELETE", ""),
        ("budget", "INSERT", "WHEN EXISTS (SELECT 1 FROM budget) "),
        ("spends", "UPDATE", ""), ("spends", "DELETE", ""),
        ("spends", "INSERT", "WHEN NEW.id IS NOT (SELECT IFNULL(MAX(id), 0) + 1 FROM spends) ")]]


# The tables of each schema, as dptensor creates them: a file must hold exactly these (and the
# triggers of schema 2), compared with what SQLite records of them in sqlite_master.
_TABLES = {
    1: ["CREATE TABLE budget (id INTEGER PRIMARY KEY CHECK (id = 1), "
        "epsilon TEXT NOT NULL, delta TEXT NOT NULL)",
        "CREATE TABLE spends (id INTEGER PRIMARY KEY AUTOINCREMENT, time REAL NOT NULL, "
        "label TEXT NOT NULL, event TEXT NOT NULL, epsilon REAL NOT NULL, "
        "delta REAL NOT NULL, pid INTEGER NOT NULL)"],
    2: ["CREATE TABLE budget (id INTEGER PRIMARY KEY CHECK (id = 1), "
        "epsilon TEXT NOT NULL, delta TEXT NOT NULL, hash TEXT NOT NULL)",
        "CREATE TABLE spends (id INTEGER PRIMARY KEY AUTOINCREMENT, time REAL NOT NULL, "
        "label TEXT NOT NULL, event TEXT NOT NULL, epsilon REAL NOT NULL, "
        "delta REAL NOT NULL, pid INTEGER NOT NULL, hash TEXT NOT NULL)"],
}

_SCHEMA_QUERY = "SELECT type, name, tbl_name, sql FROM sqlite_master"


def _create_schema(conn, budget) -> str:
    """Create the tables, their triggers and the budget row; return the budget row's hash."""
    conn.execute(f"PRAGMA application_id = {APPLICATION_ID}")
    conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
    for sql in _TABLES[SCHEMA_VERSION] + _APPEND_ONLY:
        conn.execute(sql)
    # SQLite's count of the spends' highest id, from the start: a spends table dropped and
    # recreated loses it (DROP TABLE deletes it; a new table has none until its first insert).
    conn.execute("INSERT INTO sqlite_sequence (name, seq) VALUES ('spends', 0)")
    text = tuple(repr(float(v)) for v in budget)
    digest = _digest(_GENESIS, text)
    conn.execute("INSERT INTO budget VALUES (1, ?, ?, ?)", (*text, digest))
    return digest


def _schema_of(version) -> frozenset:
    """What sqlite_master holds in a ledger of ``version`` as dptensor creates it (read from a
    database made here, so the text is as this SQLite normalises it)."""
    conn = sqlite3.connect(":memory:")
    try:
        for sql in _TABLES[version] + (_APPEND_ONLY if version == 2 else []):
            conn.execute(sql)
        return frozenset(conn.execute(_SCHEMA_QUERY))
    finally:
        conn.close()


# Made once, at import: never under a connection that a caller has made read-only.
_EXPECTED_SCHEMA = {version: _schema_of(version) for version in _TABLES}


def _schema_difference(conn, version, triggers) -> str:
    """How sqlite_master on ``conn`` differs from a ledger of ``version`` ('' if it does not);
    only its triggers when ``triggers``, else everything else (tables, indexes, views)."""
    def kept(objects):
        return {o for o in objects if (o[0] == "trigger") == triggers}

    found, expected = kept(conn.execute(_SCHEMA_QUERY)), kept(_EXPECTED_SCHEMA[version])
    missing = {o[1] for o in expected - found}
    extra = {o[1] for o in found - expected}
    parts = [f"{what} {', '.join(sorted(names))}" for what, names in [
        ("missing:", missing - extra), ("changed:", missing & extra),
        ("not a ledger's:", extra - missing)] if names]
    return "; ".join(parts)


def _digest(previous: str, fields) -> str:
    """The chain's hash after a record: SHA-256 of the previous hash and the record's fields as
    stored (str, int and float, whose repr is exact: the shortest text that reads back the same)."""
    return hashlib.sha256(repr((previous, *fields)).encode()).hexdigest()


def _row(index, entry) -> tuple:
    """A spend's stored fields (its id is its position + 1), as SQLite gives them back (it stores
    -0.0 as 0.0: adding 0.0 does the same)."""
    return (index + 1, float(entry.time) + 0.0, str(entry.label), json.dumps(entry.event.to_dict()),
            float(entry.epsilon) + 0.0, float(entry.delta) + 0.0, int(entry.pid))


def _append(conn, previous: str, row) -> str:
    """Insert a spend after the record whose chain hash is ``previous``; return its own hash."""
    digest = _digest(previous, row)
    conn.execute(f"INSERT INTO spends (id, {_COLUMNS}, hash) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                 (*row, digest))
    return digest


def _verified(conn, path, checked=None) -> tuple[tuple[float, float], list[tuple], list[str]]:
    """The budget, spends (as stored, for :func:`_entries`) and chain hashes (``hashes[i]`` after
    ``i`` spends) of the ledger on ``conn``, after checking every link: a record changed, missing
    or out of place is refused. ``checked``, the rows and hashes an earlier call returned, spares
    rehashing a record equal to the one checked then, after the same hash."""
    budget, head = _check_ledger(conn, path)
    rows = conn.execute(f"SELECT id, {_COLUMNS}, hash FROM spends ORDER BY id").fetchall()
    old_rows, old_hashes = checked or ((), ())
    hashes = [head]
    for i, row in enumerate(rows):
        if row[0] != i + 1:
            raise _tampered(path, f"spend {i + 1} is missing or out of place")
        same = i < len(old_rows) and row == old_rows[i] and hashes[i] == old_hashes[i]
        if not same and row[-1] != _digest(hashes[-1], row[:-1]):
            raise _tampered(path, f"spend {i + 1} was changed")
        hashes.append(row[-1])
    # AUTOINCREMENT keeps the highest id ever used: spends deleted from the end leave it higher.
    # The count exists from the file's creation on: a spends table dropped (which deletes it) and
    # recreated, to restart the budget, has none.
    seq = conn.execute("SELECT seq FROM sqlite_sequence WHERE name = 'spends'").fetchone()
    if seq is None:
        raise _tampered(path, "SQLite's count of its spends is missing: its spends table was "
                              "dropped and recreated")
    if seq[0] != len(rows):
        raise _tampered(path, f"it holds {len(rows)} spends but numbered {seq[0]}: "
                              "spends were deleted from its end")
    # Checked after the records, whose own faults say more: the triggers exactly as created (none
    # dropped, none rewritten into a no-op through PRAGMA writable_schema, none added).
    changed = _schema_difference(conn, SCHEMA_VERSION, triggers=True)
    if changed:
        raise _tampered(path, "the triggers that keep it append-only were dropped, added or "
                              f"rewritten ({changed})")
    return budget, rows, hashes


def _entries(rows) -> list[LedgerEntry]:
    return [_entry_from_row(r[1:-1], i) for i, r in enumerate(rows)]


def _tampered(path, what) -> LedgerError:
    return LedgerError(f"the ledger file {path!r} was edited outside dptensor ({what}); its record "
                       "of spends can no longer be trusted, so nothing more is spent from it. "
                       "Restore the file from a copy, or start a new budget in a new file")


def resolve(path) -> str:
    """The absolute path of a ledger file, fixed once, whatever the working directory later is."""
    return os.path.abspath(os.path.expanduser(os.fspath(path)))


def stored_budget(path) -> tuple[float, float]:
    """``(epsilon, delta)`` held by the existing ledger file at ``path``; refuses anything else."""
    return read_ledger(path)[0]


def read_ledger(path) -> tuple[tuple[float, float], list[LedgerEntry], list[str]]:
    """The budget, every entry and the chain's hashes (``hashes[i]`` after ``i`` spends) of the
    existing ledger file at ``path``, read without writing (so a read-only file or mount can be
    inspected) and checked; refuses a missing, foreign or edited file. A hash kept elsewhere tells
    later whether the file still holds those spends (the file alone cannot show spends cut from
    its end and renumbered)."""
    path = _existing(path)

    def read(conn):
        conn.execute("BEGIN")  # one snapshot of the file
        return _verified(conn, path)
    budget, rows, hashes = _on_file(path, "ro", read)
    return budget, _entries(rows), hashes


def upgrade(path) -> int:
    """Give the ledger file at ``path``, of schema 1 (before the hash chain), the chain and the
    append-only triggers, in place and in one transaction; return how many spends it holds.

    The chain adopts the spends as they are now: an edit made to the file before the upgrade
    cannot be detected afterwards. A file that is not a ledger of schema 1 is refused, unchanged.
    """
    path = _existing(path)
    _check_location(path)

    def write(conn):
        conn.execute("BEGIN IMMEDIATE")
        try:
            count = _upgrade(conn, path)
            conn.execute("COMMIT")
        except BaseException:
            _rollback(conn)
            raise
        return count
    return _on_file(path, "rw", write)


def _on_file(path, mode: str, work):
    """``work(connection)`` on the ledger file at ``path`` opened in ``mode`` ("ro" or "rw"),
    SQLite's errors told as :class:`LedgerError` naming the file."""
    try:
        conn = sqlite3.connect(_uri(path, mode), uri=True, isolation_level=None)
        try:
            return work(conn)
        finally:
            conn.close()
    except sqlite3.OperationalError as exc:
        raise _access_error(path, exc) from exc
    except sqlite3.DatabaseError as exc:
        raise LedgerError(f"{path!r} is not a readable dptensor ledger ({exc})") from exc


def _upgrade(conn, path) -> int:
    version = _schema_version(conn, path)
    if version != 1:
        raise LedgerError(f"{path!r} has ledger schema {version}; only a ledger of schema 1 is "
                          "upgraded")
    _check_schema_1(conn, path)
    budget = conn.execute("SELECT epsilon, delta FROM budget WHERE id = 1").fetchone()
    if budget is None:
        raise LedgerError(f"{path!r} has no budget row: the ledger is damaged")
    rows = conn.execute(f"SELECT id, {_COLUMNS} FROM spends ORDER BY id").fetchall()
    # Schema 1 only ever inserted the next spend: ids 1..n, and SQLite's count at n.
    seq = conn.execute("SELECT seq FROM sqlite_sequence WHERE name = 'spends'").fetchone()
    if [r[0] for r in rows] != list(range(1, len(rows) + 1)) or (seq[0] if seq else 0) != len(rows):
        raise LedgerError(f"{path!r} is not a ledger of schema 1 as dptensor wrote it: spends were "
                          "deleted from it; refusing to upgrade it, which would adopt the edit. "
                          "Restore the file from a copy, or start a new budget in a new file")
    rows = [r[1:] for r in rows]
    conn.execute("DROP TABLE budget")
    conn.execute("DROP TABLE spends")
    digest = _create_schema(conn, tuple(float(v) for v in budget))
    for i, row in enumerate(rows):
        digest = _append(conn, digest, (i + 1, *row))
    return len(rows)


def _check_schema_1(conn, path):
    """Refuse to upgrade a file that is not exactly a ledger of schema 1: above all one that was
    of schema 2 (its hash columns, its triggers) with its version set back, whose edits since
    an upgrade would launder."""
    changed = (_schema_difference(conn, 1, triggers=False)
               or _schema_difference(conn, 1, triggers=True))
    if not changed:
        return
    columns = {c[1] for table in ("budget", "spends")
               for c in conn.execute(f"PRAGMA table_info({table})")}
    triggers = conn.execute("SELECT 1 FROM sqlite_master WHERE type = 'trigger'").fetchone()
    if "hash" in columns or triggers:
        raise LedgerError(
            f"{path!r} says it is a ledger of schema 1, but holds what only a ledger with the hash "
            f"chain has ({changed}): its version was set back, as to hide an edit. Refusing to "
            "upgrade it, which would adopt the edit; restore the file from a copy, or start a new "
            "budget in a new file")
    raise LedgerError(f"{path!r} is not a ledger of schema 1 as dptensor wrote it ({changed}); "
                      "refusing to upgrade it. Restore the file from a copy, or start a new "
                      "budget in a new file")


def _existing(path) -> str:
    path = resolve(path)
    if not os.path.isfile(path):
        new = os.path.join(path, "budget.sqlite") if os.path.isdir(path) else path
        raise LedgerError(f"there is no ledger file at {path!r}{' (a directory)' * (new != path)}: "
                          "opening reads the budget of an existing ledger; start a new one with "
                          f"PrivacyAccountant(epsilon, delta, ledger={new!r})")
    _check_not_empty(path)
    return path


def _schema_version(conn, path) -> int:
    app_id = conn.execute("PRAGMA application_id").fetchone()[0]
    if app_id == 0 and conn.execute("SELECT 1 FROM sqlite_master").fetchone() is None:
        raise LedgerError(f"{path!r} is an empty SQLite database, not a dptensor ledger: dptensor "
                          "creates a ledger only where no file exists. Restore the ledger from a "
                          "copy; if it never held a budget, delete it or give another path")
    if app_id != APPLICATION_ID:
        raise LedgerError(f"{path!r} is a SQLite database of another application, not a dptensor "
                          "ledger; refusing to use it")
    return conn.execute("PRAGMA user_version").fetchone()[0]


def _check_ledger(conn, path) -> tuple[tuple[float, float], str]:
    """Check that ``conn`` holds a dptensor ledger of this schema with its budget row as written;
    return the budget and the row's hash (the chain's first link)."""
    version = _schema_version(conn, path)
    if version == 1:
        raise LedgerError(f"{path!r} is a ledger of an older dptensor, without the hash chain that "
                          f"detects edits; upgrade it once with: dptensor ledger --upgrade {path} "
                          "(the chain then starts from its spends as they are now), or start a new "
                          "file")
    if version != SCHEMA_VERSION:
        raise LedgerError(f"{path!r} has ledger schema {version}, expected {SCHEMA_VERSION}")
    changed = _schema_difference(conn, SCHEMA_VERSION, triggers=False)
    if changed:  # before any read of the tables: their columns may not be those read below
        raise _tampered(path, f"its tables are not those dptensor creates ({changed}): a table "
                              "was dropped and recreated, altered, or added")
    row = conn.execute("SELECT epsilon, delta, hash FROM budget WHERE id = 1").fetchone()
    if row is None:
        raise LedgerError(f"{path!r} has no budget row: the ledger is damaged")
    if row[2] != _digest(_GENESIS, row[:2]):
        raise _tampered(path, "its budget row was changed")
    return (float(row[0]), float(row[1])), row[2]


def _link_exclusive(source, path):
    """Give the file ``source`` the name ``path`` unless a file has it already (then leave it)."""
    try:
        os.link(source, path)
    except FileExistsError:
        return
    except OSError:  # no hard links on this file system: copy it into a file created exclusively
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
        except FileExistsError:
            return
        with os.fdopen(fd, "wb") as file, open(source, "rb") as data:
            file.write(data.read())
            file.flush()
            os.fsync(file.fileno())
    try:  # the new name survives a crash of the machine, as the spends recorded under it will
        fd = os.open(os.path.dirname(path), os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
    except OSError:
        pass


def _check_not_empty(path):
    """Refuse an existing empty file: SQLite takes it for an empty database, and a ledger cut to
    nothing would start a new budget."""
    try:
        size = os.path.getsize(path)
    except OSError:
        return  # reported, with what to do, when SQLite opens it
    if size == 0:
        raise LedgerError(f"the ledger file {path!r} is empty (0 bytes): a ledger that was "
                          "truncated, or a file that never was one. dptensor creates a ledger only "
                          "where no file exists, so a budget is never restarted over a lost one. "
                          "Restore the file from a copy; if it never held a budget, delete it or "
                          "give a path where no file exists")


def _check_location(path, write=True):
    """Refuse, with what to do, a path where no ledger can be kept (``write``: written), before
    SQLite runs."""
    if os.path.isdir(path):
        raise LedgerError(f"the ledger path {path!r} is a directory; give a file in it, e.g. "
                          f"{os.path.join(path, 'budget.sqlite')!r}")
    parent = os.path.dirname(path)
    if not os.path.isdir(parent):
        raise LedgerError(f"cannot keep a ledger at {path!r}: the directory {parent!r} does not "
                          "exist; create it first, or choose another path")
    if write and os.path.exists(path) and not os.access(path, os.R_OK | os.W_OK):
        raise LedgerError(f"the ledger file {path!r} cannot be read and written by this process "
                          "(file permissions or a read-only file system); make it writable, or "
                          "copy it to a writable place and open the copy")
    # SQLite creates the file, and a journal beside it at every write, in this directory.
    if write and not os.access(parent, os.W_OK | os.X_OK):
        raise LedgerError(f"cannot keep a ledger at {path!r}: the directory {parent!r} is not "
                          "writable (SQLite writes a journal beside the file at every spend); "
                          "choose a writable directory")


def _access_error(path, exc) -> LedgerError:
    """A sqlite3 failure on the file at ``path`` as a LedgerError that says what to check."""
    text = str(exc)
    if "readonly" in text or "read-only" in text:
        hint = ("the file, its directory or its file system is read-only: make them writable, or "
                "copy the file to a writable place and open the copy")
    elif "locked" in text or "busy" in text:
        hint = "another process held the ledger's lock for too long; retry when it is done"
    else:
        hint = ("check that the file still exists where the accountant was created (a reloaded "
                "model keeps using the same absolute path), and that it and its directory can be "
                "read and written by this process")
    return LedgerError(f"the ledger file {path!r} cannot be used ({exc}): {hint}")


def _uri(path, mode) -> str:
    return f"{pathlib.Path(path).as_uri()}?mode={mode}"


def _file_id(path) -> tuple[int, int]:
    try:
        st = os.stat(path)
    except OSError as exc:
        raise LedgerError(
            f"the ledger file {path!r} does not exist ({exc.strerror}): it was moved or deleted, "
            "or this accountant was reloaded where the file is not. Restore the file at that "
            "path, or give the estimator a new accountant") from exc
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
