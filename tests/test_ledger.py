"""The SQLite ledger: races between processes, crashes, foreign files, persistence, edits made
outside dptensor, files that cannot be used, opening an existing ledger, and the ``dptensor
ledger`` command."""
import gc
import json
import multiprocessing
import os
import pickle
import re
import signal
import sqlite3
import threading
import time
from pathlib import Path

import numpy as np
import pytest

import dptensor
from dptensor import BudgetExceededError, PrivacyAccountant, PrivacyAccountingError
from dptensor.__main__ import main as cli
from dptensor.accounting import GaussianEvent, LaplaceEvent, LedgerError, epsilon_of
from dptensor.accounting.ledger import (_APPEND_ONLY, _COLUMNS, _GENESIS, APPLICATION_ID, _digest,
                                        read_ledger)

EVENT = GaussianEvent(noise_multiplier=12.0)
DELTA = 1e-5


def _budget_for(n):
    """A budget that admits exactly n spends of EVENT."""
    return epsilon_of([EVENT] * n, DELTA)


def _integrity(path):
    conn = sqlite3.connect(path)
    try:
        return conn.execute("PRAGMA integrity_check").fetchone()[0]
    finally:
        conn.close()


# ---------------------------------------------------------------- racing processes
def _racer(path, epsilon, start, results):
    acc = PrivacyAccountant(epsilon, DELTA, ledger=path)
    start.wait(120)  # all racers are ready before any spends
    landed = 0
    while True:
        try:
            acc.spend(EVENT, label=f"racer {os.getpid()}")
        except BudgetExceededError:
            break
        landed += 1
        time.sleep(0.002)  # yield, so the racers interleave even on a busy machine
    results.put(landed)


def test_processes_racing_for_a_budget_never_overspend(tmp_path):
    n, path = 60, str(tmp_path / "race.sqlite")
    epsilon = _budget_for(n)
    PrivacyAccountant(epsilon, DELTA, ledger=path)  # create the file once, before the race
    ctx = multiprocessing.get_context("spawn")
    start, results = ctx.Barrier(4), ctx.Queue()
    procs = [ctx.Process(target=_racer, args=(path, epsilon, start, results)) for _ in range(4)]
    for p in procs:
        p.start()
    landed = [results.get(timeout=120) for _ in procs]
    for p in procs:
        p.join(60)
        assert p.exitcode == 0
    assert sum(landed) == n
    acc = PrivacyAccountant(epsilon, DELTA, ledger=path)
    assert len(acc.history()) == n
    assert acc.spent()[0] == pytest.approx(epsilon)
    assert len({e.pid for e in acc.history()}) >= 2  # they did interleave
    with pytest.raises(BudgetExceededError):
        acc.spend(EVENT)


# ---------------------------------------------------------------- crashes
class _DieBeforeCommit:
    """A connection proxy that kills the process at COMMIT: after the INSERT, inside the transaction."""

    def __init__(self, conn, on_commit):
        self._conn, self._on_commit = conn, on_commit

    def execute(self, sql, *args):
        if sql == "COMMIT":
            self._on_commit()
        return self._conn.execute(sql, *args)


def _crashing_spender(path, epsilon, how, ready):
    acc = PrivacyAccountant(epsilon, DELTA, ledger=path)
    store = acc._store
    real = store._connect()

    def on_commit():
        if how == "exit":
            os._exit(3)
        ready.set()  # the INSERT is done and the write lock held: let the parent SIGKILL us
        while True:
            signal.pause()

    store._connect = lambda: _DieBeforeCommit(real, on_commit)
    acc.spend(LaplaceEvent(0.5), label="never committed")


@pytest.mark.parametrize("how", ["exit", "sigkill"])
def test_a_process_killed_mid_spend_leaves_a_valid_file_without_the_spend(tmp_path, how):
    path = str(tmp_path / "crash.sqlite")
    acc = PrivacyAccountant(10.0, DELTA, ledger=path)
    acc.spend(EVENT, label="before")
    ctx = multiprocessing.get_context("spawn")
    ready = ctx.Event()
    proc = ctx.Process(target=_crashing_spender, args=(path, 10.0, how, ready))
    proc.start()
    if how == "sigkill":
        assert ready.wait(60)
        os.kill(proc.pid, signal.SIGKILL)
    proc.join(60)
    assert proc.exitcode == (3 if how == "exit" else -signal.SIGKILL)
    assert _integrity(path) == "ok"
    fresh = PrivacyAccountant(10.0, DELTA, ledger=path)
    assert [e.label for e in fresh.history()] == ["before"]
    fresh.spend(EVENT, label="after")  # the dead process's lock is gone
    assert [e.label for e in acc.history()] == ["before", "after"]


# ---------------------------------------------------------------- files that are not our ledger
def test_a_corrupt_file_is_refused_and_left_alone(tmp_path):
    path = tmp_path / "corrupt.sqlite"
    junk = np.random.default_rng(11).integers(0, 256, size=8192, dtype=np.uint8).tobytes()
    path.write_bytes(junk)
    with pytest.raises(LedgerError, match="not a readable dptensor ledger"):
        PrivacyAccountant(1.0, ledger=path)
    assert path.read_bytes() == junk


def test_a_damaged_ledger_is_refused(tmp_path):
    # A real ledger whose header was overwritten: no silent fresh start.
    path = tmp_path / "damaged.sqlite"
    PrivacyAccountant(1.0, ledger=path).spend(EVENT)
    data = bytearray(path.read_bytes())
    data[:16] = b"definitely not!!"
    path.write_bytes(bytes(data))
    with pytest.raises(LedgerError):
        PrivacyAccountant(1.0, ledger=path)


def test_a_foreign_sqlite_database_is_refused_and_left_alone(tmp_path):
    path = tmp_path / "other.sqlite"
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE users (name TEXT)")
    conn.execute("INSERT INTO users VALUES ('alice')")
    conn.commit()
    conn.close()
    before = path.read_bytes()
    with pytest.raises(LedgerError, match="another application"):
        PrivacyAccountant(1.0, ledger=path)
    assert path.read_bytes() == before


def test_a_ledger_of_another_schema_version_is_refused(tmp_path):
    path = tmp_path / "old.sqlite"
    PrivacyAccountant(1.0, ledger=path)
    conn = sqlite3.connect(path)
    conn.execute("PRAGMA user_version = 99")
    conn.commit()
    conn.close()
    with pytest.raises(LedgerError, match="schema 99"):
        PrivacyAccountant(1.0, ledger=path)


@pytest.mark.parametrize("epsilon,delta", [(2.0, 1e-5), (1.0, 1e-6)])
def test_opening_a_ledger_with_another_budget_is_refused(tmp_path, epsilon, delta):
    path = tmp_path / "budget.sqlite"
    PrivacyAccountant(1.0, 1e-5, ledger=path).spend(EVENT)
    with pytest.raises(LedgerError, match="holds a budget of"):
        PrivacyAccountant(epsilon, delta, ledger=path)
    assert len(PrivacyAccountant(1.0, 1e-5, ledger=path).history()) == 1


# ---------------------------------------------------------------- persistence
def test_the_budget_survives_reopening(tmp_path):
    path = tmp_path / "budget.sqlite"
    epsilon = _budget_for(3)
    first = PrivacyAccountant(epsilon, DELTA, ledger=path)
    first.spend(EVENT, label="one")
    first.spend(EVENT, label="two")
    del first
    second = PrivacyAccountant(epsilon, DELTA, ledger=os.fspath(path))
    assert [e.label for e in second.history()] == ["one", "two"]
    assert second.history()[0].event == EVENT
    assert second.spent()[0] == pytest.approx(epsilon_of([EVENT] * 2, DELTA))
    second.spend(EVENT, label="three")
    with pytest.raises(BudgetExceededError):
        second.spend(EVENT)
    third = PrivacyAccountant(epsilon, DELTA, ledger=path)
    with pytest.raises(BudgetExceededError):
        third.spend(EVENT)
    assert len(third.history()) == 3


def test_a_refused_spend_leaves_the_file_unchanged(tmp_path):
    path = tmp_path / "budget.sqlite"
    acc = PrivacyAccountant(_budget_for(1), DELTA, ledger=path)
    acc.spend(EVENT)
    before = path.read_bytes()
    with pytest.raises(BudgetExceededError):
        acc.spend(EVENT)
    assert path.read_bytes() == before


# ---------------------------------------------------------------- edits outside dptensor
def _ledger_with_spends(tmp_path, n=3):
    path = str(tmp_path / "budget.sqlite")
    acc = PrivacyAccountant(_budget_for(n + 2), DELTA, ledger=path)
    for i in range(n):
        acc.spend(EVENT, label=f"spend {i}")
    return path, acc


def _edit(path, *statements, drop_triggers=False):
    """Run SQL on the file as anyone with the sqlite3 shell could, outside dptensor."""
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        if drop_triggers:
            triggers = conn.execute("SELECT name FROM sqlite_master WHERE type = 'trigger'")
            for (name,) in triggers.fetchall():
                conn.execute(f"DROP TRIGGER {name}")
        for sql in statements:
            conn.execute(sql)
    finally:
        conn.close()


_WEAK = json.dumps(GaussianEvent(noise_multiplier=1e6).to_dict())  # a spend made to cost ~0
EDITS = {  # the three of the issue, then a middle spend deleted, and spends reordered
    "delete every spend": ["DELETE FROM spends"],
    "raise a noise multiplier": [f"UPDATE spends SET event = '{_WEAK}' WHERE id = 2"],
    "edit the budget": ["UPDATE budget SET epsilon = '1000'"],
    "delete a spend": ["DELETE FROM spends WHERE id = 2"],
    "reorder spends": ["UPDATE spends SET id = 10 WHERE id = 1",
                       "UPDATE spends SET id = 1 WHERE id = 3",
                       "UPDATE spends SET id = 3 WHERE id = 10"],
}
REPLACEMENTS = {  # INSERT OR REPLACE deletes a row without firing DELETE triggers
    "replace the budget": ["INSERT OR REPLACE INTO budget (id, epsilon, delta) "
                           "VALUES (1, '1000', '1e-05')"],
    "replace a spend": ["INSERT OR REPLACE INTO spends (id, time, label, event, epsilon, delta, "
                        f"pid) VALUES (2, 0, 'x', '{_WEAK}', 0, 0, 0)"],
}


@pytest.mark.parametrize("edit", [*EDITS, *REPLACEMENTS])
def test_the_file_refuses_to_change_or_lose_a_row(tmp_path, edit):
    path, acc = _ledger_with_spends(tmp_path)
    spent, before = acc.spent(), Path(path).read_bytes()
    with pytest.raises(sqlite3.IntegrityError, match="ledger is append-only"):
        _edit(path, *{**EDITS, **REPLACEMENTS}[edit])
    assert Path(path).read_bytes() == before and acc.spent() == spent
    acc.spend(EVENT, label="after")  # dptensor's own writes are inserts: they still work
    assert len(PrivacyAccountant.open(path).history()) == 4


@pytest.mark.parametrize("edit", EDITS)
def test_an_edit_with_the_triggers_dropped_is_noticed_before_the_next_spend(tmp_path, edit, capsys):
    path, acc = _ledger_with_spends(tmp_path)
    _edit(path, *EDITS[edit], drop_triggers=True)
    edited = Path(path).read_bytes()
    uses = {"the live accountant's spend": lambda: acc.spend(EVENT), "its spent()": acc.spent,
            "open": lambda: PrivacyAccountant.open(path),
            "a new accountant": lambda: PrivacyAccountant(acc.epsilon, DELTA, ledger=path)}
    for use in uses.values():
        with pytest.raises(LedgerError, match="was edited outside dptensor") as info:
            use()
        assert path in str(info.value)
    assert cli(["ledger", path]) == 2 and "edited outside dptensor" in capsys.readouterr().err
    assert Path(path).read_bytes() == edited  # nothing was spent from it


@pytest.mark.parametrize("record", ["budget", "spend 2"])
def test_an_edit_that_rehashes_its_own_record_breaks_the_next_link(tmp_path, record):
    path, acc = _ledger_with_spends(tmp_path)
    _edit(path, drop_triggers=True)
    conn = sqlite3.connect(path)
    if record == "budget":
        text = ("1000.0", repr(DELTA))
        conn.execute("UPDATE budget SET epsilon = ?, hash = ?", (text[0], _digest(_GENESIS, text)))
    else:
        row = conn.execute(f"SELECT id, {_COLUMNS} FROM spends WHERE id = 2").fetchone()
        previous = conn.execute("SELECT hash FROM spends WHERE id = 1").fetchone()[0]
        weak = (*row[:3], _WEAK, *row[4:])
        conn.execute("UPDATE spends SET event = ?, hash = ? WHERE id = 2",
                     (_WEAK, _digest(previous, weak)))
    conn.commit()
    conn.close()
    broken = "spend 1 was changed" if record == "budget" else "spend 3 was changed"
    for use in (lambda: acc.spend(EVENT), lambda: PrivacyAccountant.open(path)):
        with pytest.raises(LedgerError, match=broken):
            use()


def test_spends_cut_from_the_end_are_noticed(tmp_path):
    path, acc = _ledger_with_spends(tmp_path)
    payload, head = pickle.dumps(acc), read_ledger(path)[2][-1]  # the chain's hash, kept elsewhere
    _edit(path, "DELETE FROM spends WHERE id = 3", drop_triggers=True)
    with pytest.raises(LedgerError, match="spends were deleted from its end"):
        PrivacyAccountant.open(path)
    # With SQLite's own numbering and the triggers put back too, the file alone is a consistent
    # ledger of two spends (the privacy guide says so); an accountant that has seen the third
    # still notices.
    _edit(path, "UPDATE sqlite_sequence SET seq = 2 WHERE name = 'spends'", *_APPEND_ONLY)
    assert len(PrivacyAccountant.open(path).history()) == 2 and head not in read_ledger(path)[2]
    with pytest.raises(LedgerError, match="no longer holds the 3 spends"):
        acc.spend(EVENT)
    del acc
    gc.collect()  # the pickle alone, as in another process, remembers what it saw
    with pytest.raises(LedgerError, match="no longer holds the 3 spends"):
        pickle.loads(payload).spent()


def test_an_older_copy_written_over_the_file_is_noticed(tmp_path):
    path, acc = _ledger_with_spends(tmp_path, n=1)
    older = Path(path).read_bytes()
    acc.spend(EVENT, label="second")
    with open(path, "r+b") as file:  # the same file, its content put back: no delete, no rename
        file.write(older)
        file.truncate()
    assert len(read_ledger(path)[1]) == 1  # a consistent ledger of one spend, read without writing
    with pytest.raises(LedgerError, match="no longer holds the 2 spends"):
        acc.spend(EVENT)


_SCHEMA_1 = [f"PRAGMA application_id = {APPLICATION_ID}", "PRAGMA user_version = 1",
             "CREATE TABLE budget (id INTEGER PRIMARY KEY CHECK (id = 1), epsilon TEXT NOT NULL, "
             "delta TEXT NOT NULL)",
             "CREATE TABLE spends (id INTEGER PRIMARY KEY AUTOINCREMENT, time REAL NOT NULL, "
             "label TEXT NOT NULL, event TEXT NOT NULL, epsilon REAL NOT NULL, "
             "delta REAL NOT NULL, pid INTEGER NOT NULL)",
             "INSERT INTO budget VALUES (1, '2.0', '1e-05')"]


def test_a_ledger_without_the_chain_is_refused_until_upgraded(tmp_path, capsys):
    path = str(tmp_path / "old.sqlite")
    spend = ("INSERT INTO spends (time, label, event, epsilon, delta, pid) "
             "VALUES (1.5, '{}', '{}', 0.5, 1e-05, 7)")
    _edit(path, *_SCHEMA_1, *(spend.format(label, json.dumps(EVENT.to_dict())) for label in "ab"))
    before = Path(path).read_bytes()
    how = re.escape(f"upgrade it once with: dptensor ledger --upgrade {path}")
    for use in (PrivacyAccountant.open, lambda p: PrivacyAccountant(2.0, DELTA, ledger=p)):
        with pytest.raises(LedgerError, match=how):
            use(path)
    assert Path(path).read_bytes() == before
    assert cli(["ledger", "--upgrade", path]) == 0
    assert "upgraded   2 spends now carry the hash chain" in capsys.readouterr().out
    acc = PrivacyAccountant.open(path)
    assert (acc.epsilon, acc.delta) == (2.0, DELTA)
    kept = [(e.label, e.event, e.time, e.pid) for e in acc.history()]
    assert kept == [("a", EVENT, 1.5, 7), ("b", EVENT, 1.5, 7)]
    acc.spend(EVENT, label="c")
    with pytest.raises(sqlite3.IntegrityError, match="append-only"):
        _edit(path, "DELETE FROM spends")
    assert cli(["ledger", "--upgrade", path]) == 2  # only once
    assert "only a ledger of schema 1 is upgraded" in capsys.readouterr().err



def _spends_sql(path):
    conn = sqlite3.connect(path)
    try:
        return conn.execute("SELECT sql FROM sqlite_master WHERE name = 'spends'").fetchone()[0]
    finally:
        conn.close()


@pytest.mark.parametrize("how", ["table only", "table and triggers"])
def test_a_spends_table_dropped_and_recreated_is_refused(tmp_path, how):
    # Two statements (no trigger dropped by name, no hash computed) reset the budget to 0 spent.
    path, acc = _ledger_with_spends(tmp_path)
    triggers = [sql for sql in _APPEND_ONLY if " ON spends " in sql]
    _edit(path, "DROP TABLE spends", _spends_sql(path), *(triggers if how != "table only" else []))
    for use in (lambda: PrivacyAccountant.open(path), lambda: acc.spend(EVENT),
                lambda: PrivacyAccountant(acc.epsilon, DELTA, ledger=path)):
        with pytest.raises(LedgerError, match="its spends table was dropped and recreated") as info:
            use()
        assert path in str(info.value)


_NO_OP = ("CREATE TRIGGER spends_append_only_delete BEFORE DELETE ON spends WHEN 0 "
          "BEGIN SELECT 1; END")


def _rewrite_schema(path, name, sql):
    """Rewrite an object's SQL in sqlite_master, as PRAGMA writable_schema allows."""
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        conn.execute("PRAGMA writable_schema = ON")
        conn.execute("UPDATE sqlite_master SET sql = ? WHERE name = ?", (sql, name))
    finally:
        conn.close()


def test_a_trigger_rewritten_into_a_no_op_is_refused(tmp_path):
    path, acc = _ledger_with_spends(tmp_path)
    _rewrite_schema(path, "spends_append_only_delete", _NO_OP)
    # The trigger no longer guards: the last spend goes, and SQLite's count is put back.
    _edit(path, "DELETE FROM spends WHERE id = 3",
          "UPDATE sqlite_sequence SET seq = 2 WHERE name = 'spends'")
    for use in (lambda: PrivacyAccountant.open(path), acc.history,
                lambda: PrivacyAccountant(acc.epsilon, DELTA, ledger=path)):
        with pytest.raises(LedgerError, match="spends_append_only_delete") as info:
            use()
        assert path in str(info.value) and "edited outside dptensor" in str(info.value)


@pytest.mark.parametrize("edit", ["extra trigger", "extra index", "extra table", "altered table"])
def test_a_ledger_holds_exactly_the_schema_dptensor_creates(tmp_path, edit):
    path, _ = _ledger_with_spends(tmp_path)
    _edit(path, {"extra trigger": "CREATE TRIGGER mine AFTER INSERT ON spends BEGIN SELECT 1; END",
                 "extra index": "CREATE INDEX by_label ON spends (label)",
                 "extra table": "CREATE TABLE notes (text TEXT)",
                 "altered table": "ALTER TABLE spends ADD COLUMN note TEXT"}[edit])
    with pytest.raises(LedgerError, match="was edited outside dptensor") as info:
        PrivacyAccountant.open(path)
    assert path in str(info.value)


def test_an_upgrade_refuses_a_file_of_schema_2_set_back_to_1(tmp_path, capsys):
    path, _ = _ledger_with_spends(tmp_path)
    _edit(path, "PRAGMA user_version = 1", "DROP TRIGGER spends_append_only_delete",
          "DELETE FROM spends WHERE id >= 2")
    edited = Path(path).read_bytes()
    assert cli(["ledger", "--upgrade", path]) == 2
    assert "holds what only a ledger with the hash chain has" in capsys.readouterr().err
    assert Path(path).read_bytes() == edited
    # the same with every trigger dropped: the hash columns remain
    _edit(path, drop_triggers=True)
    with pytest.raises(LedgerError, match="version was set back"):
        dptensor.accounting.ledger.upgrade(path)


def test_an_upgrade_refuses_a_schema_1_file_with_spends_deleted(tmp_path):
    path = str(tmp_path / "old.sqlite")
    spend = ("INSERT INTO spends (time, label, event, epsilon, delta, pid) "
             f"VALUES (1.5, 'x', '{json.dumps(EVENT.to_dict())}', 0.5, 1e-05, 7)")
    _edit(path, *_SCHEMA_1, spend, spend, spend, "DELETE FROM spends WHERE id = 3")
    with pytest.raises(LedgerError, match="spends were deleted from it"):
        dptensor.accounting.ledger.upgrade(path)


def _empty_sqlite(path):
    """A valid SQLite file of one page that holds nothing."""
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("CREATE TABLE t (x)")
    conn.execute("DROP TABLE t")
    conn.close()


@pytest.mark.parametrize("what", ["truncated ledger", "empty file", "empty sqlite database"])
def test_an_existing_file_is_never_taken_for_a_new_budget(tmp_path, what, capsys):
    path = tmp_path / "budget.sqlite"
    if what == "truncated ledger":
        PrivacyAccountant(1.0, DELTA, ledger=path).spend(EVENT)
        os.truncate(path, 0)
    elif what == "empty file":
        path.touch()
    else:
        _empty_sqlite(path)
    before = path.read_bytes()
    message = "is empty" if what != "empty sqlite database" else "empty SQLite database"
    for use in (lambda: PrivacyAccountant(1.0, DELTA, ledger=path),
                lambda: PrivacyAccountant.open(path)):
        with pytest.raises(LedgerError, match=message) as info:
            use()
        assert str(path) in str(info.value) and "where no file exists" in str(info.value)
    assert cli(["ledger", str(path)]) == 2 and message in capsys.readouterr().err
    assert path.read_bytes() == before
    assert os.listdir(tmp_path) == ["budget.sqlite"]


def test_accountants_creating_one_new_ledger_at_once_share_it(tmp_path):
    path, start = tmp_path / "new.sqlite", threading.Barrier(8)
    made, errors = [], []

    def create():
        start.wait(30)
        try:
            made.append(PrivacyAccountant(_budget_for(8), DELTA, ledger=path))
        except BaseException as exc:  # noqa: B036 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=create) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert errors == [] and len(made) == 8
    for acc in made:
        acc.spend(EVENT)
    assert len(PrivacyAccountant.open(path).history()) == 8
    assert os.listdir(tmp_path) == ["new.sqlite"]  # no file of the creation left beside it


def _wal(path):
    conn = sqlite3.connect(path)
    assert conn.execute("PRAGMA journal_mode = WAL").fetchone()[0] == "wal"
    conn.close()


def test_a_reader_whose_wal_snapshot_predates_a_commit_is_no_tamper_alarm(tmp_path, monkeypatch):
    # In WAL mode a reader's snapshot can be older than a spend another thread committed (and
    # remembered) meanwhile; that is not a file cut short.
    path, acc = _ledger_with_spends(tmp_path, n=1)
    _wal(path)
    ledger_module = dptensor.accounting.ledger
    real, fired = ledger_module._verified, []

    def verified(conn, *args, **kwargs):
        if not fired:
            fired.append(True)
            conn.execute("SELECT COUNT(*) FROM spends").fetchone()  # the snapshot starts here
            spender = threading.Thread(target=acc.spend, args=(EVENT,))
            spender.start()  # in WAL mode the writer does not wait for this reader
            spender.join(30)
            assert not spender.is_alive()
        return real(conn, *args, **kwargs)

    monkeypatch.setattr(ledger_module, "_verified", verified)
    assert len(acc.history()) == 1  # its snapshot, from before the second spend
    assert len(acc.history()) == 2


def test_threads_sharing_an_accountant_on_a_wal_file_raise_no_tamper_alarm(tmp_path):
    path = str(tmp_path / "wal.sqlite")
    acc = PrivacyAccountant(ledger=path)  # unlimited: only the checks of the file can refuse
    _wal(path)
    errors = []

    def run(work):
        try:
            for _ in range(60):
                work()
        except BaseException as exc:  # noqa: B036 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(w,))
               for w in (lambda: acc.spend(EVENT), lambda: acc.spend(EVENT), acc.history,
                         acc.history)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert errors == []
    assert len(PrivacyAccountant.open(path).history()) == 120


# ---------------------------------------------------------------- where the file is
def test_a_relative_path_is_fixed_once_and_a_reloaded_accountant_keeps_the_file(tmp_path, monkeypatch):
    (tmp_path / "here").mkdir()
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path / "here")
    acc = PrivacyAccountant(1.0, DELTA, ledger="budget.sqlite")
    assert acc.ledger == str(tmp_path / "here" / "budget.sqlite")
    acc.spend(EVENT, label="first")
    payload = pickle.dumps(acc)
    del acc
    gc.collect()  # no live accountant left: unpickling builds a new one from the pickle alone
    monkeypatch.chdir(tmp_path / "elsewhere")
    reloaded = pickle.loads(payload)
    reloaded.spend(EVENT, label="second")
    assert [e.label for e in reloaded.history()] == ["first", "second"]
    assert os.listdir(tmp_path / "elsewhere") == []  # no empty ledger was created here
    assert len(PrivacyAccountant(1.0, DELTA, ledger=tmp_path / "here" / "budget.sqlite").history()) == 2


def test_a_missing_directory_is_refused_at_construction_naming_the_path(tmp_path):
    path = tmp_path / "no" / "such" / "dir" / "budget.sqlite"
    with pytest.raises(LedgerError, match="does not exist; create it first") as info:
        PrivacyAccountant(1.0, ledger=path)
    assert str(path.parent) in str(info.value)
    assert not (tmp_path / "no").exists()


def test_a_directory_is_refused_at_construction(tmp_path):
    with pytest.raises(LedgerError, match="is a directory; give a file in it") as info:
        PrivacyAccountant(1.0, ledger=tmp_path)
    assert str(tmp_path) in str(info.value)


def _skip_unless_permissions_hold(folder):
    """Skip when this process can write through a read-only mode bit (root, CAP_DAC_OVERRIDE)."""
    probe = folder / "probe"
    probe.write_text("")
    probe.chmod(0o444)
    try:
        with open(probe, "a"):
            pass
    except PermissionError:
        return
    finally:
        probe.unlink()
    pytest.skip("this process writes through read-only permissions (root); the read-only path is also "
                "tested below through SQLite's query_only mode, which refuses writes whoever runs")


def test_a_read_only_file_is_refused_at_construction(tmp_path):
    _skip_unless_permissions_hold(tmp_path)
    path = tmp_path / "budget.sqlite"
    PrivacyAccountant(1.0, ledger=path).spend(EVENT)
    path.chmod(0o444)
    try:
        with pytest.raises(LedgerError, match="cannot be read and written") as info:
            PrivacyAccountant(1.0, ledger=path)
        assert str(path) in str(info.value)
    finally:
        path.chmod(0o644)


def test_a_read_only_directory_is_refused_at_construction(tmp_path):
    _skip_unless_permissions_hold(tmp_path)
    folder = tmp_path / "ro"
    folder.mkdir()
    PrivacyAccountant(1.0, ledger=folder / "budget.sqlite")
    folder.chmod(0o555)
    try:
        for name in ("budget.sqlite", "new.sqlite"):  # an existing ledger needs its journal written too
            with pytest.raises(LedgerError, match="is not writable"):
                PrivacyAccountant(1.0, ledger=folder / name)
    finally:
        folder.chmod(0o755)


@pytest.fixture
def read_only_sqlite(monkeypatch):
    _make_sqlite_read_only(monkeypatch)


def _make_sqlite_read_only(monkeypatch):
    """Every SQLite connection opened from now on refuses writes, as on a read-only mount."""
    real = sqlite3.connect

    def connect(*args, **kwargs):
        conn = real(*args, **kwargs)
        conn.execute("PRAGMA query_only = ON")
        return conn

    monkeypatch.setattr(sqlite3, "connect", connect)


def test_a_ledger_sqlite_cannot_write_is_refused_at_construction(tmp_path, read_only_sqlite):
    path = tmp_path / "budget.sqlite"
    with pytest.raises(LedgerError, match="read-only") as info:
        PrivacyAccountant(1.0, ledger=path)
    assert str(path) in str(info.value) and not isinstance(info.value.__cause__, LedgerError)


def test_a_write_failing_at_spend_time_is_a_ledger_error_and_records_nothing(tmp_path):
    acc = PrivacyAccountant(1.0, ledger=tmp_path / "budget.sqlite")
    acc.spend(EVENT, label="before")
    acc._store._connect().execute("PRAGMA query_only = ON")  # this connection can no longer write
    with pytest.raises(LedgerError, match="read-only") as info:
        acc.spend(EVENT, label="refused")
    assert str(tmp_path / "budget.sqlite") in str(info.value)
    assert isinstance(info.value.__cause__, sqlite3.OperationalError)
    assert [e.label for e in acc.history()] == ["before"]


def test_a_file_deleted_or_replaced_after_construction_is_reported_not_recreated(tmp_path):
    path = tmp_path / "budget.sqlite"
    acc = PrivacyAccountant(1.0, ledger=path)
    acc.spend(EVENT)
    path.unlink()
    for use in (acc.history, lambda: acc.spend(EVENT)):
        with pytest.raises(LedgerError, match="does not exist") as info:
            use()
        assert str(path) in str(info.value)
    assert not path.exists()
    PrivacyAccountant(5.0, ledger=path)  # another budget now lives at that path
    with pytest.raises(LedgerError, match="deleted or replaced"):
        acc.spend(EVENT)


def test_ledger_errors_stop_a_search():
    # scikit-learn turns every Exception raised in fit into a NaN score.
    assert issubclass(LedgerError, PrivacyAccountingError) and not issubclass(LedgerError, Exception)
    assert dptensor.LedgerError is LedgerError


# ---------------------------------------------------------------- opening an existing ledger
def test_open_reads_the_budget_from_the_file(tmp_path):
    path = tmp_path / "budget.sqlite"
    epsilon = epsilon_of([EVENT] * 2, 1e-6)
    PrivacyAccountant(epsilon, 1e-6, ledger=path).spend(EVENT, label="one")
    acc = PrivacyAccountant.open(path)
    assert (acc.epsilon, acc.delta) == (epsilon, 1e-6)
    assert [e.label for e in acc.history()] == ["one"]
    acc.spend(EVENT, label="two")
    with pytest.raises(BudgetExceededError):  # the stored budget is enforced
        acc.spend(EVENT)
    unlimited = tmp_path / "unlimited.sqlite"
    PrivacyAccountant(ledger=unlimited)
    assert PrivacyAccountant.open(unlimited).epsilon == np.inf


def test_open_refuses_what_is_not_an_existing_ledger(tmp_path):
    with pytest.raises(LedgerError, match="no ledger file at"):
        PrivacyAccountant.open(tmp_path / "missing.sqlite")
    assert not (tmp_path / "missing.sqlite").exists()
    other = tmp_path / "other.sqlite"
    sqlite3.connect(other).execute("CREATE TABLE users (name TEXT)").connection.close()
    with pytest.raises(LedgerError, match="another application"):
        PrivacyAccountant.open(other)
    (tmp_path / "junk.sqlite").write_bytes(b"not a database at all" * 100)
    with pytest.raises(LedgerError, match="not a readable dptensor ledger"):
        PrivacyAccountant.open(tmp_path / "junk.sqlite")


def _inspected_not_spent(path, monkeypatch):
    """The read-only ledger at ``path`` (one spend, labelled "one", of a budget of 3 spends) is
    opened and inspected as a writable one is; a spend, and a fit, are refused before anything
    is spent or any noise drawn, and the file is unchanged."""
    import dptensor._base

    before = path.read_bytes()
    acc = PrivacyAccountant.open(path)
    assert (acc.epsilon, acc.delta) == (_budget_for(3), DELTA)
    assert [e.label for e in acc.history()] == ["one"]
    assert acc.spent() == (epsilon_of([EVENT], DELTA), DELTA)
    assert acc.remaining() == (_budget_for(3) - epsilon_of([EVENT], DELTA), DELTA)
    with pytest.raises(LedgerError, match="read only.*nothing was spent") as info:
        acc.spend(EVENT, label="refused")
    assert str(path) in str(info.value)
    drawn = []
    monkeypatch.setattr(dptensor._base, "spend_generator", lambda *a, **k: drawn.append(a))
    model = dptensor.PrivatePCA(2, epsilon=0.1, data_norm=1.0, accountant=acc, random_state=0)
    with pytest.raises(LedgerError, match="read only"):
        model.fit(np.random.default_rng(0).standard_normal((200, 4)) * 0.1)
    assert not drawn and not hasattr(model, "components_")
    assert [e.label for e in acc.history()] == ["one"] and path.read_bytes() == before


def test_open_inspects_a_read_only_file_and_refuses_its_spends(tmp_path, monkeypatch):
    """``open`` refused a file it could not write, even only to inspect it."""
    _skip_unless_permissions_hold(tmp_path)
    path = tmp_path / "budget.sqlite"
    PrivacyAccountant(_budget_for(3), DELTA, ledger=path).spend(EVENT, label="one")
    path.chmod(0o444)
    try:
        _inspected_not_spent(path, monkeypatch)
    finally:
        path.chmod(0o644)


def test_open_inspects_a_ledger_on_a_read_only_mount_and_refuses_its_spends(tmp_path, monkeypatch):
    """As on a read-only mount (whoever runs, root too): the process may write neither the file
    nor its directory, and SQLite refuses every write."""
    path = tmp_path / "budget.sqlite"
    PrivacyAccountant(_budget_for(3), DELTA, ledger=path).spend(EVENT, label="one")
    real = os.access

    def access(where, mode, **kwargs):  # nothing under tmp_path can be written
        return real(where, mode, **kwargs) and not (
            mode & os.W_OK and str(where).startswith(str(tmp_path)))
    monkeypatch.setattr(os, "access", access)
    _make_sqlite_read_only(monkeypatch)
    with pytest.raises(LedgerError, match="cannot be read and written"):  # as before: spends
        PrivacyAccountant(_budget_for(3), DELTA, ledger=path)
    _inspected_not_spent(path, monkeypatch)


# ---------------------------------------------------------------- the command line
def test_ledger_command_prints_budget_spent_remaining_and_every_entry(tmp_path, capsys):
    path = tmp_path / "budget.sqlite"
    acc = PrivacyAccountant(3.0, DELTA, ledger=path)
    acc.spend(EVENT, label="PrivatePCA(epsilon=1)")
    acc.spend(LaplaceEvent(0.25), label="AdaptivePrivatePCA(epsilon=0.25)")
    assert cli(["ledger", str(path)]) == 0
    out = capsys.readouterr().out
    spent = acc.spent()[0]
    assert "epsilon=3 at delta=1e-05" in out
    assert f"epsilon={spent:.6g} (2 spends" in out
    assert f"remaining  epsilon={3.0 - spent:.6g}" in out
    lines = [line for line in out.splitlines() if "eps=" in line]
    assert len(lines) == 2
    assert "PrivatePCA(epsilon=1)" in lines[0] and "noise_multiplier=12.0" in lines[0]
    assert "AdaptivePrivatePCA(epsilon=0.25)" in lines[1] and "eps=0.25" in lines[1]


def test_ledger_command_only_reads(tmp_path, capsys, monkeypatch):
    # Inspection works where nothing can be written (a read-only copy or mount) and changes nothing.
    path = tmp_path / "budget.sqlite"
    PrivacyAccountant(ledger=path).spend(EVENT, label="only spend")
    before = path.read_bytes()
    _make_sqlite_read_only(monkeypatch)
    assert cli(["ledger", str(path)]) == 0
    out = capsys.readouterr().out
    assert "budget     epsilon=unlimited" in out and "only spend" in out
    assert path.read_bytes() == before


def test_ledger_command_reports_a_missing_file_without_a_traceback(tmp_path, capsys):
    assert cli(["ledger", str(tmp_path / "missing.sqlite")]) == 2
    err = capsys.readouterr().err
    assert "no ledger file at" in err and "Traceback" not in err


def test_version_and_usage_name_the_console_command(capsys):
    from dptensor import __version__

    with pytest.raises(SystemExit) as info:
        cli(["--version"])
    assert info.value.code == 0
    assert capsys.readouterr().out.strip() == f"dptensor {__version__}"
    with pytest.raises(SystemExit):
        cli([])
    assert capsys.readouterr().err.startswith("usage: dptensor ")


def test_bench_only_passes_through_to_the_suite(monkeypatch, capsys):
    run_all = pytest.importorskip("benchmarks.run_all")
    calls = []
    monkeypatch.setattr(run_all, "main", lambda argv: calls.append(argv) or 0)
    assert cli(["bench", "--quick", "--only", "pca", "completion"]) == 0
    assert calls == [["--quick", "--only", "pca", "completion"]]
    assert cli(["bench", "--only", "nonsense"]) == 2
    assert "choose from" in capsys.readouterr().err and len(calls) == 1


def test_bench_only_keeps_the_other_benchmarks_in_the_summary(monkeypatch, tmp_path):
    """``dptensor bench --only movielens`` rewrote SUMMARY.md with the movielens section alone
    (even when it skipped for want of data): every other benchmark's section was lost."""
    run_all = pytest.importorskip("benchmarks.run_all")
    import benchmarks._common as common

    monkeypatch.setattr(common, "RESULTS", tmp_path)
    for name in ("pca", "movielens"):
        (tmp_path / f"{name}.md").write_text(f"# {name}\n\n{name} table\n")
    run_all.write_summary({"bench_pca": {"ok": True, "seconds": 1.0}}, quick=False)
    run_all.write_summary({"bench_movielens": {"ok": True, "seconds": 2.0}}, quick=False)
    text = (tmp_path / "SUMMARY.md").read_text()
    assert "## bench_pca (ok, 1.0 s)" in text and "pca table" in text
    assert "## bench_movielens (ok, 2.0 s)" in text and "movielens table" in text
    assert "This run: bench_movielens" in text
    status = json.loads((tmp_path / "SUMMARY.json").read_text())["status"]
    assert set(status) == {"bench_pca", "bench_movielens"}
    # a benchmark that no longer exists is dropped; one run again replaces its old status
    status["bench_gone"] = {"ok": True, "seconds": 0.0}
    (tmp_path / "SUMMARY.json").write_text(json.dumps({"status": status}))
    run_all.write_summary({"bench_pca": {"ok": False, "seconds": 3.0}}, quick=False)
    status = json.loads((tmp_path / "SUMMARY.json").read_text())["status"]
    assert status == {"bench_movielens": {"ok": True, "seconds": 2.0}, "bench_pca": {"ok": False, "seconds": 3.0}}


@pytest.mark.parametrize("ledger", [5, 1.5, ["budget.sqlite"]])
def test_a_ledger_that_is_not_a_path_is_refused_naming_the_parameter(ledger):
    with pytest.raises(TypeError, match="ledger must be None .* or the path of a SQLite file"):
        PrivacyAccountant(1.0, 1e-5, ledger=ledger)


def test_an_event_built_from_numpy_numbers_is_recorded_on_file(tmp_path):
    # json.dumps refused np.float32 (a raw TypeError, the spend not made); the file holds the
    # Python numbers and reads back to an event of the same price
    from dptensor.accounting import ComposedEvent, PrivateSelectionEvent
    path = tmp_path / "ledger.db"
    events = [LaplaceEvent(np.float32(0.5), count=np.int64(2)),
              ComposedEvent((GaussianEvent(np.float64(3.0)), LaplaceEvent(np.float16(0.25)))),
              PrivateSelectionEvent((GaussianEvent(np.float32(4.0)),), LaplaceEvent(0.1),
                                    mean=np.float64(2.0), shape=np.float32(1.0),
                                    refit=np.bool_(True))]
    acc = PrivacyAccountant(100.0, 1e-5, ledger=path)
    for event in events:
        acc.spend(event, label="numpy")
    again = PrivacyAccountant.open(path)
    assert len(again.history()) == 3
    for before, after in zip(events, again.history()):
        assert epsilon_of(after.event, 1e-5) == pytest.approx(epsilon_of(before, 1e-5), rel=1e-12)
        json.dumps(after.event.to_dict())


def test_an_event_built_from_0d_arrays_is_recorded_on_file(tmp_path):
    # a 0-d array stayed an array: json.dumps refused it with its raw TypeError (no spend made)
    from dptensor.accounting import PrivateSelectionEvent
    path = tmp_path / "ledger.db"
    events = [LaplaceEvent(np.array(0.5), count=np.array(2)),
              GaussianEvent(np.array(3.0, dtype=np.float32)),
              PrivateSelectionEvent((GaussianEvent(np.array(4.0)),), LaplaceEvent(0.1),
                                    mean=np.array(2.0), shape=np.array(1.0),
                                    refit=np.array(True))]
    assert events[0] == LaplaceEvent(0.5, count=2)
    assert repr(events[0]) == repr(LaplaceEvent(0.5, count=2))  # the key of seeded noise too
    acc = PrivacyAccountant(100.0, 1e-5, ledger=path)
    for event in events:
        acc.spend(event, label="numpy")
    again = PrivacyAccountant.open(path)
    assert [entry.event for entry in again.history()] == events


@pytest.mark.skipif(np.finfo(np.longdouble).nmant == np.finfo(np.float64).nmant,
                    reason="this platform's long double is a double")
def test_an_event_of_long_doubles_is_refused_naming_the_field():
    # np.longdouble(...).item() is a long double still: the event was priced in long double
    # arithmetic and a ledger on file refused it with JSON's raw TypeError
    with pytest.raises(TypeError, match="epsilon must be .* at most double precision"):
        LaplaceEvent(np.longdouble(0.5))
    with pytest.raises(TypeError, match="noise_multiplier must be"):
        GaussianEvent(np.array(2.0, dtype=np.longdouble))
