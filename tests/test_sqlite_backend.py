"""SQLite write transactions: what the backend promises whatever is done inside one."""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from ackledger import Inbox, warehouse
from ackledger.store import open_backend
from ackledger.store.base import Backend


@pytest.fixture
def backend(tmp_path: Path) -> Iterator[Backend]:
    opened = open_backend(tmp_path / "store.db")
    try:
        yield opened
    finally:
        opened.close()


def names(backend: Backend) -> list[str]:
    with backend.read() as tx:
        return [
            str(name) for (name,) in tx.execute("SELECT name FROM ackledger_counters ORDER BY name")
        ]


def _written_by_another_thread(backend: Backend, statement: str) -> bool:
    """Whether another thread's write transaction of ``statement`` committed within 30 s (it
    waits for the backend's lock)."""
    done = threading.Event()

    def other() -> None:
        with backend.write() as tx:
            tx.execute(statement)
        done.set()

    thread = threading.Thread(target=other)
    thread.start()
    thread.join(timeout=30)
    return done.is_set()


def test_a_write_inside_a_write_is_refused_and_the_outer_one_commits(backend: Backend) -> None:
    with backend.write() as tx:
        tx.execute("INSERT INTO ackledger_counters (name, value) VALUES ('outer', 1)")
        with (
            pytest.raises(sqlite3.OperationalError, match="within a transaction"),
            backend.write() as inner,
        ):
            inner.execute("INSERT INTO ackledger_counters (name, value) VALUES ('inner', 1)")
        tx.execute("INSERT INTO ackledger_counters (name, value) VALUES ('outer-after', 1)")
    assert names(backend) == ["outer", "outer-after"]
    assert not backend.in_transaction()  # type: ignore[attr-defined]


def test_relaxed_and_durable_writes_refuse_to_nest_in_each_other(backend: Backend) -> None:
    # The relaxed writes have a connection of their own: a write begun inside the other kind
    # would wait out the busy timeout on its lock, so it is refused at once, as one inside its
    # own kind is, and the outer one commits.
    for outer, inner in ((True, False), (False, True)):
        with backend.write(durable=outer) as tx:
            tx.execute(
                "INSERT INTO ackledger_counters (name, value) VALUES (?, 1)", (f"outer-{outer}",)
            )
            with (
                pytest.raises(sqlite3.OperationalError, match="within a transaction"),
                backend.write(durable=inner) as nested,
            ):
                nested.execute("INSERT INTO ackledger_counters (name, value) VALUES ('inner', 1)")
            with (
                pytest.raises(sqlite3.OperationalError, match="within a transaction"),
                backend.lookup() as read,
            ):
                read.execute("SELECT 1")
        assert not backend.in_transaction()  # type: ignore[attr-defined]
    assert names(backend) == ["outer-False", "outer-True"]


def test_a_relaxed_write_commits_on_its_own_normal_connection(backend: Backend) -> None:
    main = backend._conn  # type: ignore[attr-defined]
    seen: list[str] = []
    main.set_trace_callback(seen.append)
    try:
        with backend.write(durable=False) as tx:
            inside = tx.execute("PRAGMA synchronous")[0][0]
            tx.execute("INSERT INTO ackledger_counters (name, value) VALUES ('relaxed', 1)")
    finally:
        main.set_trace_callback(None)
    assert inside == 1  # NORMAL: this commit does not wait for the disk
    assert seen == []  # the main connection ran nothing: no PRAGMA switched there and back
    assert main.execute("PRAGMA synchronous").fetchone()[0] == 2  # FULL
    assert names(backend) == ["relaxed"]  # committed, and seen from the main connection


def test_an_error_rolls_back_and_lets_other_threads_write(backend: Backend) -> None:
    with pytest.raises(KeyError), backend.write() as tx:
        tx.execute("INSERT INTO ackledger_counters (name, value) VALUES ('lost', 1)")
        raise KeyError("boom")
    written = _written_by_another_thread(
        backend, "INSERT INTO ackledger_counters (name, value) VALUES ('other', 1)"
    )
    assert written, "the lock of the failed transaction was never released"
    assert names(backend) == ["other"]


def test_a_failed_commit_is_rolled_back_not_left_open(backend: Backend) -> None:
    # A deferred foreign key is checked at COMMIT: the commit fails and SQLite keeps the
    # transaction open. It must not stay open for the next write to commit by accident.
    with pytest.raises(sqlite3.IntegrityError), backend.write() as tx:
        tx.execute("PRAGMA defer_foreign_keys = ON")
        tx.execute("INSERT INTO ackledger_counters (name, value) VALUES ('orphan-ledger', 1)")
        tx.execute(
            "INSERT INTO ackledger_attempts (case_id, work_id, pod_uid, mode, delivery_no, "
            "outcome, "
            "fingerprint, at) VALUES ('c', 'w', 'p', 'idempotent', 999, 'applied', 'f', 0)"
        )
    assert not backend.in_transaction()  # type: ignore[attr-defined]
    with backend.write() as tx:
        tx.execute("INSERT INTO ackledger_counters (name, value) VALUES ('next', 1)")
    assert names(backend) == ["next"]


def test_a_lone_read_and_note_refuses_to_nest_in_either_write(backend: Backend) -> None:
    # ``inbox_read_or_note`` takes the lock once for a read on the main connection and a note
    # on the relaxed one: inside this thread's open transaction of either kind it is refused,
    # as ``lookup`` and ``write`` are, and the outer transaction commits.
    assert (
        backend.inbox_read_or_note("s", "free", "f", 1.0, "sink.duplicate", name="default") is None
    )
    assert backend._relaxed_conn is None  # type: ignore[attr-defined] # opened by a note only
    for durable in (True, False):
        with backend.write(durable=durable) as tx:
            tx.execute(
                "INSERT INTO ackledger_counters (name, value) VALUES (?, 1)", (f"outer-{durable}",)
            )
            with pytest.raises(sqlite3.OperationalError, match="within a transaction"):
                backend.inbox_read_or_note("s", "free", "f", 1.0, "sink.duplicate", name="default")
        assert not backend.in_transaction()  # type: ignore[attr-defined]
    assert names(backend) == ["outer-False", "outer-True"]


def test_a_lone_resends_failed_note_is_rolled_back_and_keeps_no_lock(tmp_path: Path) -> None:
    inbox = Inbox(tmp_path / "inbox.db")
    event = warehouse.event("n-1", "tea", 2)
    assert inbox.receive(event) == "applied"
    with inbox._db.write() as tx:
        # The note's second statement (the counts) fails after its first (the receipt's
        # note) ran in the same transaction.
        tx.execute(
            "CREATE TRIGGER refuse_duplicates BEFORE INSERT ON ackledger_counters "
            "WHEN NEW.name = 'sink.duplicate' BEGIN SELECT RAISE(ABORT, 'refused'); END"
        )
    with pytest.raises(sqlite3.DatabaseError, match="refused"):
        inbox.receive(event)
    assert not inbox._db.in_transaction()  # type: ignore[attr-defined]
    written = _written_by_another_thread(inbox._db, "DROP TRIGGER refuse_duplicates")
    assert written, "the lock of the failed note was never released"
    receipt = inbox.receipt("n-1", source=event["source"])
    assert receipt is not None and receipt["receipts"] == 1  # nothing of the failed note
    assert inbox.receive(event) == "duplicate"
    receipt = inbox.receipt("n-1", source=event["source"])
    assert receipt is not None and receipt["receipts"] == 2
    assert inbox.counters() == {"applied": 1, "duplicate": 1, "conflict": 0}
    inbox.close()


def test_a_lone_read_runs_on_the_connection_that_wrote_last(tmp_path: Path) -> None:
    # A WAL connection drops its page cache when it sees another's commit: the read by key
    # follows the writes (the note's connection after a re-send, the main one after a new
    # event), and reads the same committed rows on either.
    inbox = Inbox(tmp_path / "inbox.db")
    first, second = warehouse.event("w-1", "tea", 1), warehouse.event("w-2", "tea", 1)
    assert inbox.receive(first) == "applied"
    assert inbox.receive(first) == "duplicate"  # read on main, noted on the relaxed one
    backend = inbox._db
    main, relaxed = backend._conn, backend._relaxed_conn  # type: ignore[attr-defined]
    on_main: list[str] = []
    on_relaxed: list[str] = []
    main.set_trace_callback(on_main.append)
    relaxed.set_trace_callback(on_relaxed.append)
    try:
        assert inbox.receive(first) == "duplicate"
        assert [s.split()[0] for s in on_relaxed] == [
            "SELECT",
            "BEGIN",
            "UPDATE",
            "INSERT",
            "COMMIT",
        ]
        assert on_main == []
        on_relaxed.clear()
        assert inbox.receive(second) == "applied"  # read where the last note was written
        assert [s.split()[0] for s in on_relaxed] == ["SELECT"]
        assert on_main[0].split()[0] == "BEGIN"
        on_main.clear()
        on_relaxed.clear()
        assert inbox.receive(first) == "duplicate"  # after a new event: read on main
        assert [s.split()[0] for s in on_main] == ["SELECT"]
        assert [s.split()[0] for s in on_relaxed] == ["BEGIN", "UPDATE", "INSERT", "COMMIT"]
    finally:
        main.set_trace_callback(None)
        relaxed.set_trace_callback(None)
    assert inbox.counters() == {"applied": 2, "duplicate": 3, "conflict": 0}
    inbox.close()
