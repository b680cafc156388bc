"""SQLite write transactions: what the backend promises whatever is done inside one."""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

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
        return [str(name) for (name,) in tx.execute("SELECT name FROM counters ORDER BY name")]


def test_a_write_inside_a_write_is_refused_and_the_outer_one_commits(backend: Backend) -> None:
    with backend.write() as tx:
        tx.execute("INSERT INTO counters (name, value) VALUES ('outer', 1)")
        with (
            pytest.raises(sqlite3.OperationalError, match="within a transaction"),
            backend.write() as inner,
        ):
            inner.execute("INSERT INTO counters (name, value) VALUES ('inner', 1)")
        tx.execute("INSERT INTO counters (name, value) VALUES ('outer-after', 1)")
    assert names(backend) == ["outer", "outer-after"]
    assert not backend.in_transaction()  # type: ignore[attr-defined]


def test_an_error_rolls_back_and_lets_other_threads_write(backend: Backend) -> None:
    with pytest.raises(KeyError), backend.write() as tx:
        tx.execute("INSERT INTO counters (name, value) VALUES ('lost', 1)")
        raise KeyError("boom")
    done = threading.Event()

    def other() -> None:
        with backend.write() as tx:
            tx.execute("INSERT INTO counters (name, value) VALUES ('other', 1)")
        done.set()

    thread = threading.Thread(target=other)
    thread.start()
    thread.join(timeout=30)
    assert done.is_set(), "the lock of the failed transaction was never released"
    assert names(backend) == ["other"]


def test_a_failed_commit_is_rolled_back_not_left_open(backend: Backend) -> None:
    # A deferred foreign key is checked at COMMIT: the commit fails and SQLite keeps the
    # transaction open. It must not stay open for the next write to commit by accident.
    with pytest.raises(sqlite3.IntegrityError), backend.write() as tx:
        tx.execute("PRAGMA defer_foreign_keys = ON")
        tx.execute("INSERT INTO counters (name, value) VALUES ('orphan-ledger', 1)")
        tx.execute(
            "INSERT INTO attempts (case_id, work_id, pod_uid, mode, delivery_no, outcome, "
            "fingerprint, at) VALUES ('c', 'w', 'p', 'idempotent', 999, 'applied', 'f', 0)"
        )
    assert not backend.in_transaction()  # type: ignore[attr-defined]
    with backend.write() as tx:
        tx.execute("INSERT INTO counters (name, value) VALUES ('next', 1)")
    assert names(backend) == ["next"]
