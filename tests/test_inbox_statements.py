"""What the inbox asks of SQLite per group: the statements SQLite runs, read from its own
trace, with the outcome of each call checked too.

Every group is one write transaction: the arrival numbers, ONE claim of every identity, each
new event's handler, the counts in one upsert. No handler runs in a savepoint until one
fails: that undoes the whole transaction, and a group is then applied again with a savepoint
per handler, so that only the failing event's run stops. A lone event is read
by key first (not a consumer's message: its claim tells a redelivery), and a lone re-send is
answered from that read and noted in one write transaction, with no write attempt rolled
back. A run stopped by a conflict gives back the
claims made beyond its stop, and the runs after it are claimed again."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ackledger import Inbox, new_event, warehouse
from ackledger.envelope import canonical_json
from ackledger.envelope.message import STRUCTURED_MEDIA
from ackledger.errors import Conflict
from ackledger.sink.consume import judge
from ackledger.sink.handler_tx import HandlerTransaction
from tests.conftest import raw_rows

SOURCE = "/tests/statements"


def _event(event_id: str, sku: str = "tea", qty: int = 1) -> dict[str, object]:
    return warehouse.event(event_id, sku, qty, source=SOURCE)


@pytest.fixture
def traced(tmp_path: Path) -> Iterator[tuple[Inbox, list[str]]]:
    inbox = Inbox(tmp_path / "inbox.db")
    # The lab's tables, which its first event would make, made first.
    inbox._db.ensure_plugin(warehouse.TYPE)
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


#: A new event's own statements in a group applied again: its savepoint, its handler's one
#: write, the release.
NEW = ["SAVEPOINT", "INSERT", "RELEASE"]


def test_a_lone_new_event_is_one_read_and_one_write_transaction(
    traced: tuple[Inbox, list[str]], tmp_path: Path
) -> None:
    inbox, seen = traced
    assert inbox.receive(_event("n-1", qty=3)) == "applied"
    # The read by key, then the arrival counter's value, the claim, the handler (no
    # savepoint: nothing else to keep), and the applied and arrival counts in one upsert.
    assert _verbs(seen) == ["SELECT", "BEGIN", "SELECT", "INSERT", "INSERT", "INSERT", "COMMIT"]
    # None with RETURNING: SQLite builds a table of its own for that clause.
    assert not [statement for statement in seen if "RETURNING" in statement.upper()]
    assert inbox.stock("tea") == 3
    assert inbox.counters() == {"applied": 1, "duplicate": 0, "conflict": 0}
    assert inbox.receive(_event("n-2", qty=1)) == "applied"
    # Each takes the next arrival number: the counter's bump is committed with the claim.
    query = "SELECT id, arrival, last_arrival FROM ackledger_inbox ORDER BY id"
    rows = raw_rows(tmp_path / "inbox.db", query)
    assert rows == [("n-1", 1, 1), ("n-2", 2, 2)]


def test_a_lone_event_of_a_users_handler_takes_the_same_path(tmp_path: Path) -> None:
    """Any handler's lone new event: the same statements as the lab's, its handler's own
    write in the middle."""

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


def test_a_consumers_message_goes_straight_to_the_write_and_its_claim_tells_a_redelivery(
    traced: tuple[Inbox, list[str]], tmp_path: Path
) -> None:
    """A broker's message is new but for a rare redelivery: no read by key before it."""
    inbox, seen = traced
    body = canonical_json(_event("m-1", qty=2)).encode()
    assert judge(inbox, body, STRUCTURED_MEDIA).outcome == "applied"
    assert _verbs(seen) == ["BEGIN", "SELECT", "INSERT", "INSERT", "INSERT", "COMMIT"]
    seen.clear()
    assert judge(inbox, body, STRUCTURED_MEDIA).outcome == "duplicate"
    assert _verbs(seen)[0] == "BEGIN"
    assert inbox.stock("tea") == 2
    assert inbox.counters() == {"applied": 1, "duplicate": 1, "conflict": 0}
    query = "SELECT receipts, arrival, last_arrival FROM ackledger_inbox WHERE id = ?"
    assert raw_rows(tmp_path / "inbox.db", query, ("m-1",)) == [(2, 1, 2)]


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


def test_a_group_of_new_events_is_one_claim_whatever_its_size(
    traced: tuple[Inbox, list[str]],
) -> None:
    inbox, seen = traced
    runs = [[_event(f"g-{n}", f"sku-{n % 8}", 1 + n % 3)] for n in range(16)]
    results = inbox.receive_runs(runs)
    assert [r.statuses for r in results] == [["applied"]] * 16
    # The handlers' writes one after the other: no savepoint while none fails.
    assert _verbs(seen) == ["BEGIN", "SELECT", "INSERT", *["INSERT"] * 16, "INSERT", "COMMIT"]
    assert not [statement for statement in seen if "RETURNING" in statement.upper()]
    assert sum(inbox.stock(f"sku-{n}") for n in range(8)) == sum(1 + n % 3 for n in range(16))
    assert inbox.counters() == {"applied": 16, "duplicate": 0, "conflict": 0}


def test_a_failing_handler_rolls_the_group_back_and_it_is_applied_again_with_savepoints(
    tmp_path: Path,
) -> None:
    calls: list[str] = []

    def record(tx: HandlerTransaction, event: dict[str, Any]) -> None:
        calls.append(event["id"])
        tx.execute("INSERT INTO user_orders (id) VALUES (?)", (event["id"],))
        if event["data"]["n"] < 0:
            raise RuntimeError("refused by the handler")

    inbox = Inbox(tmp_path / "inbox.db", handlers={"com.example.placed": record})
    with inbox._db.write() as tx:
        tx.execute("CREATE TABLE user_orders (id TEXT PRIMARY KEY)")
    seen: list[str] = []
    inbox._db._conn.set_trace_callback(seen.append)  # type: ignore[attr-defined]
    try:
        runs = [
            [new_event("com.example.placed", {"n": n}, source=SOURCE, id=f"f-{n}")]
            for n in (1, -2, 3)
        ]
        results = inbox.receive_runs(runs)
    finally:
        inbox._db._conn.set_trace_callback(None)  # type: ignore[attr-defined]
    assert [r.statuses for r in results] == [["applied"], [], ["applied"]]
    assert isinstance(results[1].error, RuntimeError) and results[0].error is None
    # The first attempt stopped at the failure (its third handler never ran) and was rolled
    # back whole; the second ran every handler in a savepoint of its own.
    assert calls == ["f-1", "f--2", "f-1", "f--2", "f-3"]
    verbs = _verbs(seen)
    first = verbs.index("ROLLBACK")
    assert verbs[:first] == ["BEGIN", "SELECT", "INSERT", "INSERT", "INSERT"]
    assert "SAVEPOINT" not in verbs[:first]
    again = verbs[first + 1 :]
    assert again[:3] == ["BEGIN", "SELECT", "INSERT"] and again[-2:] == ["INSERT", "COMMIT"]
    # f--2's write undone, its claim and f-3's given back (a DELETE each), f-3 claimed again.
    undone = ["SAVEPOINT", "INSERT", "ROLLBACK", "RELEASE", "DELETE", "DELETE", "INSERT"]
    assert again[3:-2] == [*NEW, *undone, *NEW]
    assert inbox.counters() == {"applied": 2, "duplicate": 0, "conflict": 0}
    inbox.close()
    rows = raw_rows(tmp_path / "inbox.db", "SELECT id FROM user_orders ORDER BY id")
    assert rows == [("f-1",), ("f-3",)]
    receipts = raw_rows(tmp_path / "inbox.db", "SELECT id FROM ackledger_inbox ORDER BY id")
    assert receipts == [("f-1",), ("f-3",)]


def test_a_group_of_resends_runs_no_handler(traced: tuple[Inbox, list[str]]) -> None:
    inbox, seen = traced
    runs = [[_event(f"r-{n}")] for n in range(4)]
    inbox.receive_runs(runs)
    seen.clear()
    results = inbox.receive_runs(runs)
    assert [r.statuses for r in results] == [["duplicate"]] * 4
    verbs = _verbs(seen)
    assert "SAVEPOINT" not in verbs and "ROLLBACK" not in verbs
    assert verbs.count("UPDATE") == 4  # each receipt's note
    assert verbs.count("INSERT") == 2  # the one claim (all there), the counts
    assert inbox.stock("tea") == 4
    assert inbox.counters() == {"applied": 4, "duplicate": 4, "conflict": 0}


def test_a_run_stopped_by_a_conflict_gives_back_its_tail_and_the_rest_is_claimed_again(
    traced: tuple[Inbox, list[str]], tmp_path: Path
) -> None:
    inbox, seen = traced
    inbox.receive(_event("k-0", qty=1))
    seen.clear()
    # The first run stops at k-0 (other content): k-1 (same run, after it) was claimed by the
    # one statement and is given back; the second run holds k-1 too, so it is new there.
    results = inbox.receive_runs(
        [[_event("k-a"), _event("k-0", qty=9), _event("k-1", qty=4)], [_event("k-1", qty=5)]]
    )
    assert [r.statuses for r in results] == [["applied"], ["applied"]]
    assert isinstance(results[0].error, Conflict) and results[1].error is None
    verbs = _verbs(seen)
    assert verbs.count("DELETE") == 1
    assert verbs.count("INSERT") == 2 + 2 + 1  # two claims, two handlers, the counts
    assert inbox.stock("tea") == 1 + 1 + 5
    assert inbox.counters() == {"applied": 3, "duplicate": 0, "conflict": 1}
    rows = raw_rows(tmp_path / "inbox.db", "SELECT id, arrival FROM ackledger_inbox ORDER BY id")
    # Numbers follow the runs applied one by one: k-a 2, k-0's conflict 3, k-1 4.
    assert rows == [("k-0", 1), ("k-1", 4), ("k-a", 2)]


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
    the write's BEGIN IMMEDIATE: the write's claim tells a duplicate (counted, its arrival
    noted) from a conflict (refused, counted), as it would have without the read."""
    inbox, seen = traced
    other = Inbox(tmp_path / "inbox.db")  # its own connections: another writer on the file
    other._db.ensure_plugin(warehouse.TYPE)
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
    assert verbs[:4] == ["SELECT", "BEGIN", "SELECT", "INSERT"]
    assert "SAVEPOINT" not in verbs and "ROLLBACK" not in verbs
    assert inbox.stock("tea") == 2
    counts = {"applied": 1, "duplicate": 0, "conflict": 0, outcome: 1}
    assert inbox.counters() == counts
    rows = raw_rows(
        tmp_path / "inbox.db",
        "SELECT receipts, arrival, last_arrival, (SELECT value FROM ackledger_counters "
        "WHERE name = 'sink.arrival') FROM ackledger_inbox WHERE id = ?",
        ("x-1",),
    )
    # A duplicate takes the next arrival number; a conflict takes one that shows nowhere.
    assert rows == ([(2, 1, 2, 2)] if outcome == "duplicate" else [(1, 1, 1, 2)])
