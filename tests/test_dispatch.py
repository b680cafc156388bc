from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import pytest

from ackledger import NotAcknowledged, Outbox, dispatch, dispatch_batch
from tests.conftest import raw_rows


@pytest.fixture
def abc(source_db: Path) -> Outbox:
    outbox = Outbox(source_db)
    for event_id in ("A", "B", "C"):
        outbox.accept({"id": event_id, "sku": "snack", "qty": 1})
    return outbox


def sent_flags(path: Path) -> dict[object, object]:
    return {row[0]: row[1] for row in raw_rows(path, "SELECT id, sent FROM outbox ORDER BY seq")}


def test_all_acknowledged(abc: Outbox, source_db: Path) -> None:
    seen: list[dict[str, Any]] = []

    def send(event: dict[str, Any]) -> bool:
        seen.append(event)
        return True

    assert dispatch(abc, send) == ["A", "B", "C"]
    assert [e["id"] for e in seen] == ["A", "B", "C"]
    assert all(set(e) == {"id", "sku", "qty"} for e in seen)
    assert sent_flags(source_db) == {"A": 1, "B": 1, "C": 1}
    assert dispatch(abc, send) == []


def test_first_failure_stops_and_is_reraised_as_the_same_object(
    abc: Outbox, source_db: Path
) -> None:
    boom = ConnectionError("B lost")
    calls: list[str] = []

    def send(event: dict[str, Any]) -> bool:
        calls.append(event["id"])
        if event["id"] == "B":
            raise boom
        return True

    with pytest.raises(ConnectionError) as info:
        dispatch(abc, send)
    assert info.value is boom
    assert calls == ["A", "B"]
    assert sent_flags(source_db) == {"A": 1, "B": 0, "C": 0}
    row = abc.event("B")
    assert row is not None and row["attempts"] == 1 and "B lost" in row["last_error"]

    calls.clear()

    def record(event: dict[str, Any]) -> bool:
        calls.append(event["id"])
        return True

    assert dispatch(abc, record) == ["B", "C"]
    assert calls == ["B", "C"]
    assert sent_flags(source_db) == {"A": 1, "B": 1, "C": 1}


@pytest.mark.parametrize("answer", [False, None, 1, "True", "ack", {"ack": True}, [True]])
def test_anything_but_true_stops_the_batch(abc: Outbox, source_db: Path, answer: object) -> None:
    def send(event: dict[str, Any]) -> object:
        return True if event["id"] == "A" else answer

    with pytest.raises(NotAcknowledged, match="'B'"):
        dispatch(abc, send)
    assert sent_flags(source_db) == {"A": 1, "B": 0, "C": 0}


def test_no_lock_is_held_while_send_runs(abc: Outbox, source_db: Path) -> None:
    accepted: list[int] = []

    def send(event: dict[str, Any]) -> bool:
        other = sqlite3.connect(source_db, isolation_level=None, timeout=0)
        try:
            other.execute("BEGIN IMMEDIATE")  # raises "database is locked" if dispatch held it
            other.execute("ROLLBACK")
        finally:
            other.close()
        with Outbox(source_db) as second:
            accepted.append(second.accept({"id": f"new-{event['id']}", "sku": "s", "qty": 1}))
        return True

    assert dispatch(abc, send, limit=3) == ["A", "B", "C"]
    assert len(accepted) == 3
    assert [p["id"] for p in abc.pending()] == ["new-A", "new-B", "new-C"]


def test_a_callback_that_rewrites_its_copy_cannot_mark_another_event(
    abc: Outbox, source_db: Path
) -> None:
    def send_from_b(event: dict[str, Any]) -> bool:
        if event["id"] == "A":
            return True
        if event["id"] == "B":
            event["id"] = "C"
            return True
        raise RuntimeError("C must stay pending")

    with pytest.raises(RuntimeError, match="C must stay pending"):
        dispatch(abc, send_from_b)
    assert sent_flags(source_db) == {"A": 1, "B": 1, "C": 0}
    assert raw_rows(source_db, "SELECT qty FROM outbox WHERE id = 'B'") == [(1,)]


def test_after_delivery_runs_before_the_mark(abc: Outbox, source_db: Path) -> None:
    order: list[tuple[str, object]] = []

    def after(event_id: str) -> None:
        order.append((event_id, sent_flags(source_db)[event_id]))
        if event_id == "B":
            raise KeyboardInterrupt  # like a process dying: B must not be marked

    with pytest.raises(KeyboardInterrupt):
        dispatch(abc, lambda e: True, after_delivery=after)
    assert order == [("A", 0), ("B", 0)]
    assert sent_flags(source_db) == {"A": 1, "B": 0, "C": 0}


def test_limit_is_checked(abc: Outbox) -> None:
    with pytest.raises(ValueError, match="limit"):
        dispatch(abc, lambda e: True, limit=17)
    assert dispatch(abc, lambda e: True, limit=1) == ["A"]


def test_batch_marks_the_acknowledged_prefix(abc: Outbox, source_db: Path) -> None:
    got: list[list[dict[str, Any]]] = []

    def send_batch(events: list[dict[str, Any]]) -> int:
        got.append(events)
        return 2

    with pytest.raises(NotAcknowledged, match="'C'"):
        dispatch_batch(abc, send_batch)
    assert [[e["id"] for e in batch] for batch in got] == [["A", "B", "C"]]
    assert sent_flags(source_db) == {"A": 1, "B": 1, "C": 0}
    assert dispatch_batch(abc, len) == ["C"]


def test_batch_exception_marks_nothing(abc: Outbox, source_db: Path) -> None:
    boom = TimeoutError("slow sink")

    def send_batch(events: list[dict[str, Any]]) -> int:
        raise boom

    with pytest.raises(TimeoutError) as info:
        dispatch_batch(abc, send_batch)
    assert info.value is boom
    assert sent_flags(source_db) == {"A": 0, "B": 0, "C": 0}


@pytest.mark.parametrize("answer", [True, -1, 4, "3", None, 2.0])
def test_batch_answers_must_be_a_count(abc: Outbox, source_db: Path, answer: object) -> None:
    with pytest.raises(NotAcknowledged):
        dispatch_batch(abc, lambda events: answer)
    assert sent_flags(source_db) == {"A": 0, "B": 0, "C": 0}


def test_batch_after_delivery_sees_the_acked_ids(abc: Outbox, source_db: Path) -> None:
    seen: list[list[str]] = []
    assert dispatch_batch(abc, lambda events: 3, after_delivery=seen.append) == ["A", "B", "C"]
    assert seen == [["A", "B", "C"]]
