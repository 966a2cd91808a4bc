"""The SQLite ledger: races between processes, crashes, foreign files, persistence."""
import multiprocessing
import os
import signal
import sqlite3
import time

import numpy as np
import pytest

from dptensor import BudgetExceededError, PrivacyAccountant
from dptensor.accounting import GaussianEvent, LaplaceEvent, LedgerError, epsilon_of

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
