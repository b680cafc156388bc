"""``Backend.borrow`` on every backend: ackledger's statements in the caller's transaction
(CONTRACT section 3, ``publish(..., using=...)``), on the caller's own driver connection."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

from ackledger.store import open_backend
from ackledger.store.base import Backend
from ackledger.store.borrowed import same_database

from .conftest import Target

SOURCE = "urn:ackledger:borrow-suite"


@pytest.fixture
def backend(target: Target) -> Iterator[Backend]:
    opened = open_backend(target.ref)
    target.execute(
        "INSERT INTO ackledger_meta (name, value) VALUES (?, ?)", ("outbox.source", SOURCE)
    )
    try:
        yield opened
    finally:
        opened.close()


def own_connection(target: Target) -> Any:
    """The application's connection, in each driver's default transaction mode."""
    if target.dialect == "postgres":
        return psycopg.connect(target.ref)
    return sqlite3.connect(target.ref, timeout=30)


def borrowed_counters(target: Target) -> list[tuple[Any, ...]]:
    return target.rows(
        "SELECT name, value FROM ackledger_counters WHERE name LIKE ? ORDER BY name", ("b.%",)
    )


def test_the_callers_commit_and_rollback_decide_what_the_borrowed_transaction_wrote(
    target: Target, backend: Backend
) -> None:
    conn = own_connection(target)
    try:
        tx = backend.borrow(conn)
        same_database(tx, SOURCE)
        tx.counters_bump({"b.one": 1, "b.two": 2})
        tx.execute("INSERT INTO ackledger_counters (name, value) VALUES (?, ?)", ("b.three", 3))
        assert tx.counters_read("b.") == {"one": 1, "two": 2, "three": 3}
        assert borrowed_counters(target) == []  # nothing committed behind the caller's back
        conn.commit()
        assert borrowed_counters(target) == [("b.one", 1), ("b.three", 3), ("b.two", 2)]

        tx = backend.borrow(conn)
        tx.counter_bump("b.one", 10)
        tx.execute("DELETE FROM ackledger_counters WHERE name = ?", ("b.two",))
        conn.rollback()
        assert borrowed_counters(target) == [("b.one", 1), ("b.three", 3), ("b.two", 2)]
    finally:
        conn.close()


def test_after_a_refused_check_the_callers_transaction_goes_on(
    target: Target, backend: Backend
) -> None:
    """The check only reads, and nothing it runs can fail: on PostgreSQL a failed statement
    would abort the caller's transaction, and the caller's own write could not commit."""
    target.execute("UPDATE ackledger_meta SET value = 'urn:ackledger:another'")
    conn = own_connection(target)
    try:
        conn.execute("INSERT INTO ackledger_counters (name, value) VALUES ('b.app', 1)")
        with pytest.raises(ValueError, match="another database"):
            same_database(backend.borrow(conn), SOURCE)
        conn.execute("INSERT INTO ackledger_counters (name, value) VALUES ('b.app2', 1)")
        conn.commit()
    finally:
        conn.close()
    assert borrowed_counters(target) == [("b.app", 1), ("b.app2", 1)]


def test_an_autocommit_connection_is_refused_before_anything_is_written(
    target: Target, backend: Backend
) -> None:
    if target.dialect == "postgres":
        conn: Any = psycopg.connect(target.ref, autocommit=True)
    else:
        conn = sqlite3.connect(target.ref, isolation_level=None)
    try:
        with pytest.raises(ValueError, match="not in a transaction"):
            backend.borrow(conn)
    finally:
        conn.close()
    assert borrowed_counters(target) == []
