"""``Outbox.publish(event, using=conn)`` on both databases: the event commits with the
caller's business row, or neither does; bad ``using=`` writes nothing (CONTRACT section 3)."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

from ackledger import Conflict, InvalidEvent, Outbox, new_event

from .. import pg
from .conftest import Target

SOURCE = "/orders-service"


def placed(order_id: str, total: int = 10) -> dict[str, Any]:
    return new_event(
        "com.example.order.placed", {"order": order_id, "total": total}, source=SOURCE, id=order_id
    )


@pytest.fixture
def outbox(target: Target) -> Iterator[Outbox]:
    with Outbox(target.ref, source=SOURCE) as opened:
        target.execute("CREATE TABLE shop_orders (id TEXT PRIMARY KEY, total INTEGER)")
        yield opened


def own_connection(target: Target) -> Any:
    if target.dialect == "postgres":
        return psycopg.connect(target.ref)
    return sqlite3.connect(target.ref, timeout=30)


def placeholder(target: Target) -> str:
    return "%s" if target.dialect == "postgres" else "?"


def seen(target: Target) -> tuple[list[Any], list[Any]]:
    """(business rows, outbox ids) as a second, independent connection sees them."""
    orders = target.rows("SELECT id FROM shop_orders ORDER BY id")
    events = target.rows("SELECT id FROM ackledger_outbox ORDER BY seq")
    return orders, events


def test_the_event_commits_with_the_callers_row_and_not_before(
    target: Target, outbox: Outbox
) -> None:
    conn = own_connection(target)
    mark = placeholder(target)
    try:
        conn.execute(f"INSERT INTO shop_orders (id, total) VALUES ({mark}, {mark})", ("o-1", 10))
        seq = outbox.publish(placed("o-1"), using=conn)
        assert seen(target) == ([], [])  # nothing committed behind the caller's back
        conn.commit()
        assert seen(target) == ([("o-1",)], [("o-1",)])
        assert [event["seq"] for event in outbox.pending()] == [seq]
        # The same event again, in another transaction of the caller: the same seq, no row.
        assert outbox.publish(placed("o-1"), using=conn) == seq
        conn.commit()
        with pytest.raises(Conflict):
            outbox.publish(placed("o-1", total=99), using=conn)
        conn.rollback()
    finally:
        conn.close()
    assert seen(target) == ([("o-1",)], [("o-1",)])


def test_the_callers_rollback_removes_both(target: Target, outbox: Outbox) -> None:
    conn = own_connection(target)
    mark = placeholder(target)
    try:
        conn.execute(f"INSERT INTO shop_orders (id, total) VALUES ({mark}, {mark})", ("o-2", 5))
        outbox.publish(placed("o-2"), using=conn)
        conn.rollback()
    finally:
        conn.close()
    assert seen(target) == ([], [])
    assert outbox.pending() == []


def test_bad_using_writes_nothing(target: Target, outbox: Outbox) -> None:
    before = target.dump()
    with pytest.raises(TypeError, match="using"):
        outbox.publish(placed("o-3"), using=object())
    conn = own_connection(target)
    try:
        with pytest.raises(InvalidEvent):
            outbox.publish({"type": "x", "id": "bad\nid"}, using=conn)
        conn.rollback()
    finally:
        conn.close()
    assert target.dump() == before


def test_a_connection_to_another_database_is_refused(target: Target, outbox: Outbox) -> None:
    """Another database with ackledger's schema (another outbox) is not this outbox's."""
    if target.dialect == "postgres":
        other_name = pg.create_database()
        other_url = pg.url_for(other_name)
        try:
            Outbox(other_url, source="/elsewhere").close()
            with (
                psycopg.connect(other_url) as conn,
                pytest.raises(ValueError, match="another database"),
            ):
                outbox.publish(placed("o-4"), using=conn)
            assert pg.rows(other_url, "SELECT id FROM ackledger_outbox") == []
        finally:
            pg.drop_database(other_name)
    else:
        other_path = target.ref + ".other"
        Outbox(other_path, source="/elsewhere").close()
        lite = sqlite3.connect(other_path)
        try:
            with pytest.raises(ValueError, match="another database"):
                outbox.publish(placed("o-4"), using=lite)
            lite.rollback()
        finally:
            lite.close()
        check = sqlite3.connect(other_path)
        try:
            assert check.execute("SELECT id FROM ackledger_outbox").fetchall() == []
        finally:
            check.close()
    assert outbox.pending() == []
