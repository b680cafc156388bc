from __future__ import annotations

from pathlib import Path

import pytest

from ackledger import Conflict, Inbox, InvalidEvent
from tests.conftest import raw_rows

SNACK = {"id": "snack-7", "sku": "snack", "qty": 7}


def state(path: Path) -> tuple[list[tuple[object, ...]], list[tuple[object, ...]]]:
    inbox = raw_rows(path, "SELECT id, sku, qty, receipts FROM inbox ORDER BY id")
    stock = raw_rows(path, "SELECT sku, qty FROM inventory ORDER BY sku")
    return inbox, stock


def test_applied_once_duplicates_absorbed(sink_db: Path) -> None:
    with Inbox(sink_db) as inbox:
        assert inbox.receive(SNACK) == "applied"
        assert inbox.receive(dict(SNACK)) == "duplicate"
        assert inbox.receive({"qty": 7, "id": "snack-7", "sku": "snack"}) == "duplicate"
        assert inbox.stock("snack") == 7
        assert inbox.counters() == {"applied": 1, "duplicate": 2, "conflict": 0}
    assert state(sink_db) == ([("snack-7", "snack", 7, 3)], [("snack", 7)])


def test_same_id_other_content_changes_nothing(sink_db: Path) -> None:
    with Inbox(sink_db) as inbox:
        inbox.receive(SNACK)
        before = state(sink_db)
        with pytest.raises(Conflict, match="snack-7"):
            inbox.receive({**SNACK, "qty": 8})
        with pytest.raises(Conflict):
            inbox.receive({**SNACK, "sku": "other"})
        assert state(sink_db) == before
        assert inbox.stock("other") == 0
        assert inbox.counters()["conflict"] == 2


def test_invalid_events_write_nothing(sink_db: Path) -> None:
    with Inbox(sink_db) as inbox:
        for bad in ({"id": "x", "sku": "s"}, {**SNACK, "qty": "7"}, [SNACK], None):
            with pytest.raises(InvalidEvent):
                inbox.receive(bad)
    assert state(sink_db) == ([], [])


def test_effects_add_up_per_sku(sink_db: Path) -> None:
    with Inbox(sink_db) as inbox:
        inbox.receive({"id": "a", "sku": "tea", "qty": 2})
        inbox.receive({"id": "b", "sku": "tea", "qty": 3})
        inbox.receive({"id": "c", "sku": "pen", "qty": 1})
        assert (inbox.stock("tea"), inbox.stock("pen"), inbox.stock("unknown")) == (5, 1, 0)


def test_batch_applies_the_prefix_before_a_conflict(sink_db: Path) -> None:
    with Inbox(sink_db) as inbox:
        inbox.receive({"id": "x", "sku": "tea", "qty": 1})
        result = inbox.receive_batch(
            [
                {"id": "a", "sku": "tea", "qty": 2},
                {"id": "a", "sku": "tea", "qty": 2},
                {"id": "x", "sku": "tea", "qty": 9},
                {"id": "b", "sku": "tea", "qty": 4},
            ]
        )
        assert result.statuses == ["applied", "duplicate"]
        assert isinstance(result.error, Conflict)
        assert inbox.stock("tea") == 3
        assert inbox.receipt("b") is None


def test_batch_stops_before_an_invalid_item(sink_db: Path) -> None:
    with Inbox(sink_db) as inbox:
        result = inbox.receive_batch(
            [{"id": "a", "sku": "tea", "qty": 2}, {"id": "b", "sku": "tea"}, SNACK]
        )
        assert result.statuses == ["applied"]
        assert isinstance(result.error, InvalidEvent) and result.error.field == "qty"
        assert inbox.stock("snack") == 0


def test_receipt_records_arrivals(sink_db: Path) -> None:
    with Inbox(sink_db) as inbox:
        assert inbox.receipt("snack-7") is None
        inbox.receive(SNACK)
        inbox.receive(SNACK)
        receipt = inbox.receipt("snack-7")
    assert receipt is not None
    assert receipt["receipts"] == 2
    assert receipt["last_received_at"] >= receipt["first_received_at"]
