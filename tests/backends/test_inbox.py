"""CONTRACT section 6 (Inbox) on every backend, including concurrent duplicates."""

from __future__ import annotations

from typing import Any

import pytest

from ackledger import Conflict, Inbox, InvalidEvent
from ackledger.sink.inbox import InvalidItem

from ..events import SOURCE, lab
from ..race import at_once
from .conftest import Target


def ev(event_id: str, sku: str = "apple", qty: int = 2) -> dict[str, Any]:
    return lab(event_id, sku, qty)


def with_data(event_id: str, data: object) -> dict[str, Any]:
    """A lab event whose ``data`` is ``data`` (for the ones ``lab`` refuses to build)."""
    return {**lab(event_id, "apple", 2), "data": data}


def test_applied_then_duplicate_then_conflict(target: Target) -> None:
    with Inbox(target.ref) as inbox:
        assert inbox.receive(ev("e1", qty=2)) == "applied"
        assert inbox.receive(ev("e1", qty=2)) == "duplicate"
        assert inbox.stock("apple") == 2
        before = target.rows("SELECT source, id, type, fingerprint, receipts FROM ackledger_inbox")
        with pytest.raises(Conflict, match="e1"):
            inbox.receive(ev("e1", qty=5))
        assert inbox.stock("apple") == 2
        assert inbox.counters() == {"applied": 1, "duplicate": 1, "conflict": 1}
        assert (
            target.rows("SELECT source, id, type, fingerprint, receipts FROM ackledger_inbox")
            == before
        )
        assert [row[:3] + row[4:] for row in before] == [(SOURCE, "e1", "warehouse.stock.added", 2)]
        assert target.rows("SELECT sku, qty FROM inventory") == [("apple", 2)]
        # Key order is no content (nor is time); another sku is.
        reordered = dict(reversed(list(ev("e1", qty=2).items())))
        reordered["data"] = {"qty": 2, "sku": "apple"}
        assert inbox.receive(reordered) == "duplicate"
        assert inbox.receive({**ev("e1", qty=2), "time": "2026-01-01T00:00:00Z"}) == "duplicate"
        with pytest.raises(Conflict, match="e1"):
            inbox.receive(ev("e1", sku="other"))
        assert inbox.stock("other") == 0
        assert inbox.counters() == {"applied": 1, "duplicate": 3, "conflict": 2}
    assert target.rows("SELECT id, receipts FROM ackledger_inbox") == [("e1", 4)]
    assert target.rows("SELECT fingerprint FROM ackledger_inbox") == [(before[0][3],)]
    assert target.rows("SELECT sku, qty FROM inventory") == [("apple", 2)]


def test_stock_adds_up_per_sku_and_is_zero_for_unknown(target: Target) -> None:
    with Inbox(target.ref) as inbox:
        inbox.receive(ev("e1", "apple", 2))
        inbox.receive(ev("e2", "apple", 3))
        inbox.receive(ev("e3", "pear", 7))
        assert inbox.stock("apple") == 5
        assert inbox.stock("pear") == 7
        assert inbox.stock("never-seen") == 0
        with pytest.raises(InvalidEvent):
            inbox.stock("not a sku")


def test_invalid_events_change_nothing(target: Target) -> None:
    with Inbox(target.ref) as inbox:
        inbox.receive(ev("seed"))
        before = target.dump()
        for bad in (
            with_data("e2", {"sku": "apple"}),
            with_data("e2", {"sku": "apple", "qty": 0}),
            "text",
            {**ev("e2"), "id": "bad\nid"},
            with_data("e2", {"sku": "apple", "qty": "7"}),
            {**ev("e2"), "specversion": "0.3"},
            [ev("e2")],
            None,
        ):
            with pytest.raises(InvalidEvent):
                inbox.receive(bad)
        assert target.dump() == before


def test_receive_batch_applies_the_prefix_before_a_conflict(target: Target) -> None:
    with Inbox(target.ref) as inbox:
        inbox.receive(ev("old", qty=1))
        result = inbox.receive_batch([ev("b1"), ev("old", qty=1), ev("old", qty=9), ev("b2")])
        assert result.statuses == ["applied", "duplicate"]
        assert isinstance(result.error, Conflict)
        assert inbox.receipt("b2") is None
        assert inbox.stock("apple") == 1 + 2
        # A duplicate inside the batch itself, then the conflict.
        again = inbox.receive_batch([ev("c1"), ev("c1"), ev("old", qty=9), ev("c2")])
        assert again.statuses == ["applied", "duplicate"]
        assert isinstance(again.error, Conflict)
        assert inbox.receipt("c2") is None
        assert inbox.stock("apple") == 1 + 2 + 2
        whole = inbox.receive_batch([ev("d1"), ev("c1"), ev("d2", qty=4)])
        assert whole.statuses == ["applied", "duplicate", "applied"]
        assert whole.error is None
        assert inbox.stock("apple") == 1 + 2 + 2 + 2 + 4


def test_receive_batch_with_an_invalid_item_applies_nothing(target: Target) -> None:
    with Inbox(target.ref) as inbox:
        result = inbox.receive_batch([ev("b1"), {"id": "b2"}, ev("b3")])
        assert result.statuses == []
        assert isinstance(result.error, InvalidItem) and result.error.index == 1
        assert [inbox.receipt(i) is not None for i in ("b1", "b2", "b3")] == [False] * 3
        result = inbox.receive_batch(
            [ev("c1", "tea"), ev("c3", "pen"), {**ev("c2", "tea"), "data": {"sku": "tea"}}]
        )
        assert result.statuses == []
        assert isinstance(result.error, InvalidEvent) and result.error.field == "data.qty"
        assert (inbox.stock("tea"), inbox.stock("pen")) == (0, 0)


def test_arrival_numbers_follow_receipts_and_resends(target: Target) -> None:
    with Inbox(target.ref) as inbox:
        assert inbox.receipt("e1") is None
        inbox.receive(ev("e1"))
        inbox.receive(ev("e2"))
        inbox.receive(ev("e1"))  # a re-send
        receipt = inbox.receipt("e1")
    assert receipt is not None
    assert receipt["receipts"] == 2
    assert receipt["last_received_at"] >= receipt["first_received_at"]
    rows = target.rows("SELECT id, arrival, last_arrival FROM ackledger_inbox ORDER BY arrival")
    assert [r[0] for r in rows] == ["e1", "e2"]
    (_, a1, last1), (_, a2, last2) = rows
    assert a1 < a2 == last2 < last1


def test_concurrent_duplicates_are_applied_exactly_once(target: Target) -> None:
    """32 threads, each with its own connection, receive one event at the same moment."""
    workers = 32
    with Inbox(target.ref):
        pass  # create the schema before the race
    inboxes = [Inbox(target.ref) for _ in range(workers)]
    try:
        answers = at_once(
            inboxes,
            lambda _, inbox: inbox.receive(ev("same", qty=3)),
            ready=lambda inbox: inbox.stock("apple"),  # connected before the barrier
        )
    finally:
        for inbox in inboxes:
            inbox.close()
    assert sorted(answers) == ["applied"] + ["duplicate"] * (workers - 1)
    assert target.rows("SELECT sku, qty FROM inventory") == [("apple", 3)]
    assert target.rows("SELECT receipts FROM ackledger_inbox WHERE id = 'same'") == [(workers,)]


def test_a_race_of_one_identity_with_two_contents_applies_one_and_refuses_the_other(
    target: Target,
) -> None:
    """32 connections receive one identity at once, half with qty 3 and half with qty 5: the
    lone re-send's read-only check and the claim together apply exactly one content, answer
    its twins "duplicate" and every other-content copy Conflict, never "duplicate"."""
    workers = 32
    with Inbox(target.ref):
        pass
    inboxes = [Inbox(target.ref) for _ in range(workers)]

    def receive(index: int, inbox: Inbox) -> tuple[int, str]:
        qty = 3 if index % 2 else 5
        try:
            return qty, inbox.receive(ev("twin", qty=qty))
        except Conflict:
            return qty, "conflict"

    try:
        answers = at_once(inboxes, receive, ready=lambda inbox: inbox.stock("apple"))
    finally:
        for inbox in inboxes:
            inbox.close()
    (won,) = [qty for qty, status in answers if status == "applied"]
    assert sorted(status for qty, status in answers if qty == won) == ["applied"] + [
        "duplicate"
    ] * (workers // 2 - 1)
    assert {status for qty, status in answers if qty != won} == {"conflict"}
    assert target.rows("SELECT sku, qty FROM inventory") == [("apple", won)]
    assert target.rows("SELECT receipts FROM ackledger_inbox WHERE id = 'twin'") == [
        (workers // 2,)
    ]
