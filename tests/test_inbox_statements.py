"""What the inbox asks of SQLite per group (issue 18, bench/CHANGES.md item 36): the
statements SQLite runs, read from its own trace, with the outcome of each call checked too.

A new lone event takes one read by key and one write transaction of four statements, none with
RETURNING (SQLite builds a table of its own for that clause, item 87); a lone re-send is
answered from that read and noted in one write transaction, with no write attempt rolled
back; a group's stock is one statement whatever its skus; a group of re-sends stops its
durable attempt at the claim."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ackledger import Inbox, new_event, warehouse
from ackledger.errors import Conflict
from ackledger.sink.handler_tx import HandlerTransaction
from tests.conftest import raw_rows

SOURCE = "/tests/statements"


def _event(event_id: str, sku: str = "tea", qty: int = 1) -> dict[str, object]:
    return warehouse.event(event_id, sku, qty, source=SOURCE)


@pytest.fixture
def traced(tmp_path: Path) -> Iterator[tuple[Inbox, list[str]]]:
    inbox = Inbox(tmp_path / "inbox.db")
    seen: list[str] = []
    with inbox._db.write(durable=False):
        pass  # opens the relaxed writes' own connection (store/sqlite/backend.py)
    # Both connections' statements, in the order they ran.
    conns = [inbox._db._conn, inbox._db._relaxed_conn]  # type: ignore[attr-defined]
    for conn in conns:
        assert isinstance(conn, sqlite3.Connection)
        conn.set_trace_callback(seen.append)
    yield inbox, seen
    for conn in conns:
        conn.set_trace_callback(None)
    inbox.close()


def _verbs(seen: list[str]) -> list[str]:
    return [statement.split()[0].upper() for statement in seen]


def test_a_lone_new_event_is_one_read_and_four_writes(
    traced: tuple[Inbox, list[str]], tmp_path: Path
) -> None:
    inbox, seen = traced
    assert inbox.receive(_event("n-1", qty=3)) == "applied"
    # The read by key, then the arrival counter's value, the claim, the stock, and the applied
    # and arrival counts in one upsert.
    assert _verbs(seen) == ["SELECT", "BEGIN", "SELECT", "INSERT", "INSERT", "INSERT", "COMMIT"]
    assert not [statement for statement in seen if "RETURNING" in statement.upper()]
    assert inbox.stock("tea") == 3
    assert inbox.counters() == {"applied": 1, "duplicate": 0, "conflict": 0}
    assert inbox.receive(_event("n-2", qty=1)) == "applied"
    # Each takes the next arrival number: the counter's bump is committed with the claim.
    query = "SELECT id, arrival, last_arrival FROM ackledger_inbox ORDER BY id"
    rows = raw_rows(tmp_path / "inbox.db", query)
    assert rows == [("n-1", 1, 1), ("n-2", 2, 2)]


def test_a_lone_event_of_a_users_handler_takes_the_same_lean_path(tmp_path: Path) -> None:
    """Any handler's lone new event: the read by key, then the arrival counter's value, the
    claim, the handler's own statement, and the counts in one upsert: no savepoint (a lone
    event has nothing to keep when its handler fails: the whole transaction is undone)."""

    def record(tx: HandlerTransaction, event: dict[str, Any]) -> None:
        tx.execute("INSERT INTO user_orders (id) VALUES (?)", (event["id"],))

    inbox = Inbox(tmp_path / "inbox.db", handlers={"com.example.placed": record})
    with inbox._db.write() as tx:
        tx.execute("CREATE TABLE user_orders (id TEXT PRIMARY KEY)")
    seen: list[str] = []
    conn = inbox._db._conn  # type: ignore[attr-defined]
    assert isinstance(conn, sqlite3.Connection)
    conn.set_trace_callback(seen.append)
    try:
        placed = new_event("com.example.placed", {"n": 1}, source=SOURCE, id="o-1")
        assert inbox.receive(placed) == "applied"
    finally:
        conn.set_trace_callback(None)
    assert _verbs(seen) == ["SELECT", "BEGIN", "SELECT", "INSERT", "INSERT", "INSERT", "COMMIT"]
    assert "INTO user_orders" in seen[4]
    assert inbox.counters() == {"applied": 1, "duplicate": 0, "conflict": 0}
    inbox.close()
    assert raw_rows(tmp_path / "inbox.db", "SELECT id FROM user_orders") == [("o-1",)]


def test_a_lone_resend_is_answered_from_a_read(
    traced: tuple[Inbox, list[str]], tmp_path: Path
) -> None:
    inbox, seen = traced
    inbox.receive(_event("d-1", qty=2))
    seen.clear()
    assert inbox.receive(_event("d-1", qty=2)) == "duplicate"
    verbs = _verbs(seen)
    assert verbs[0] == "SELECT"
    assert "ROLLBACK" not in verbs
    assert verbs.count("BEGIN") == 1  # the note's own transaction, committed without fsync
    assert not [statement for statement in seen if "RETURNING" in statement.upper()]
    assert "PRAGMA" not in verbs  # its own connection is NORMAL: nothing to switch and back
    # The note reads its arrival number itself; the counts are one upsert.
    assert verbs == ["SELECT", "BEGIN", "UPDATE", "INSERT", "COMMIT"]
    assert inbox.stock("tea") == 2
    assert inbox.counters() == {"applied": 1, "duplicate": 1, "conflict": 0}
    # The note is in the file for any other connection: receipts, last arrival, counters.
    rows = raw_rows(
        tmp_path / "inbox.db",
        "SELECT receipts, arrival, last_arrival FROM ackledger_inbox WHERE id = ?",
        ("d-1",),
    )
    assert rows == [(2, 1, 2)]


def test_a_lone_resend_with_other_content_is_still_refused(
    traced: tuple[Inbox, list[str]],
) -> None:
    inbox, _ = traced
    inbox.receive(_event("c-1", qty=2))
    result = inbox.receive_batch([_event("c-1", qty=5)])
    assert result.statuses == []
    assert type(result.error).__name__ == "Conflict"
    assert inbox.stock("tea") == 2
    assert inbox.counters() == {"applied": 1, "duplicate": 0, "conflict": 1}


def test_a_group_of_new_events_is_four_writes_whatever_its_skus(
    traced: tuple[Inbox, list[str]],
) -> None:
    inbox, seen = traced
    runs = [[_event(f"g-{n}", f"sku-{n % 8}", 1 + n % 3)] for n in range(16)]
    results = inbox.receive_runs(runs)
    assert [r.statuses for r in results] == [["applied"]] * 16
    assert _verbs(seen) == ["BEGIN", "SELECT", "INSERT", "INSERT", "INSERT", "COMMIT"]
    assert sum(inbox.stock(f"sku-{n}") for n in range(8)) == sum(1 + n % 3 for n in range(16))
    assert inbox.counters() == {"applied": 16, "duplicate": 0, "conflict": 0}


def test_a_group_of_resends_stops_its_durable_attempt_at_the_claim(
    traced: tuple[Inbox, list[str]],
) -> None:
    inbox, seen = traced
    runs = [[_event(f"r-{n}")] for n in range(4)]
    inbox.receive_runs(runs)
    seen.clear()
    results = inbox.receive_runs(runs)
    assert [r.statuses for r in results] == [["duplicate"]] * 4
    verbs = _verbs(seen)
    attempt = verbs[: verbs.index("ROLLBACK")]
    assert "UPDATE" not in attempt  # nothing written only to be undone
    assert verbs.count("UPDATE") == 4  # then each receipt's note, in the lazy commit
    assert inbox.stock("tea") == 4
    assert inbox.counters() == {"applied": 4, "duplicate": 4, "conflict": 0}


def test_a_mixed_group_counts_each_outcome(traced: tuple[Inbox, list[str]]) -> None:
    inbox, _ = traced
    inbox.receive(_event("m-0"))
    runs = [[_event("m-0")], [_event("m-1")], [_event("m-2")]]
    results = inbox.receive_runs(runs)
    assert [r.statuses for r in results] == [["duplicate"], ["applied"], ["applied"]]
    assert inbox.counters() == {"applied": 3, "duplicate": 1, "conflict": 0}
    assert inbox.stock("tea") == 3


@pytest.mark.parametrize(
    ("qty", "outcome"), [(2, "duplicate"), (5, "conflict")], ids=["same", "other"]
)
def test_a_lone_event_claimed_between_its_read_and_its_write(
    traced: tuple[Inbox, list[str]], tmp_path: Path, qty: int, outcome: str
) -> None:
    """Another process claims the identity after the read by key found it free and before
    the write's BEGIN IMMEDIATE: the one-call write's claim fails, it is rolled back before it
    wrote a count, and the general way tells a duplicate (counted, its arrival noted) from a
    conflict (refused, counted), as it would have without the read (item 98)."""
    inbox, seen = traced
    other = Inbox(tmp_path / "inbox.db")  # its own connections: another writer on the file
    raced: list[str] = []

    def claim_first(statement: str) -> None:
        seen.append(statement)
        if statement.startswith("BEGIN") and not raced:
            raced.append(other.receive(_event("x-1", qty=2)))

    inbox._db._conn.set_trace_callback(claim_first)  # type: ignore[attr-defined]
    try:
        if outcome == "duplicate":
            assert inbox.receive(_event("x-1", qty=qty)) == "duplicate"
        else:
            with pytest.raises(Conflict):
                inbox.receive(_event("x-1", qty=qty))
    finally:
        inbox._db._conn.set_trace_callback(None)  # type: ignore[attr-defined]
        other.close()
    assert raced == ["applied"]
    verbs = _verbs(seen)
    assert verbs[:5] == ["SELECT", "BEGIN", "SELECT", "INSERT", "ROLLBACK"]
    assert inbox.stock("tea") == 2
    counts = {"applied": 1, "duplicate": 0, "conflict": 0, outcome: 1}
    assert inbox.counters() == counts
    rows = raw_rows(
        tmp_path / "inbox.db",
        "SELECT receipts, arrival, last_arrival, (SELECT value FROM ackledger_counters "
        "WHERE name = 'sink.arrival') FROM ackledger_inbox WHERE id = ?",
        ("x-1",),
    )
    # A duplicate takes the next arrival number; a conflict's attempt takes none that shows.
    assert rows == ([(2, 1, 2, 2)] if outcome == "duplicate" else [(1, 1, 1, 2)])
