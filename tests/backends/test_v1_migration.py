"""A database the v1 release wrote, opened by v2 (CONTRACT section 3: "migrated in place"), on
both backends. The fixtures are in tests/fixtures/v1/ (see make_v1.py for what is in them):
one outbox and one inbox on SQLite, both in one database on PostgreSQL.
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from ackledger import Conflict, Inbox, Outbox, dispatch, warehouse

from .. import pg
from ..events import lab
from .conftest import Target

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "v1"
V1 = warehouse.LEGACY_SOURCE  # "urn:ackledger:v1"

#: The orders make_v1.py accepted, in acceptance order.
ORDERS = [
    ("o-1", "snack-7", 3),
    ("o-2", "snack-7", 4),
    ("o-3", "snack-8", 2),
    ("o-4", "snack-8", 5),
    ("o-5", "snack-7", 1),
    ("o-6", "snack-9", 6),
]


@dataclass(frozen=True)
class V1Databases:
    source: Target
    sink: Target


@pytest.fixture(params=["sqlite", "postgres"])
def v1(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[V1Databases]:
    if request.param == "sqlite":
        outbox, inbox = tmp_path / "outbox.sqlite", tmp_path / "inbox.sqlite"
        shutil.copyfile(FIXTURES / "outbox.sqlite", outbox)
        shutil.copyfile(FIXTURES / "inbox.sqlite", inbox)
        yield V1Databases(Target("sqlite", str(outbox)), Target("sqlite", str(inbox)))
        return
    with pg.restored(FIXTURES / "postgres.sql") as url:
        yield V1Databases(Target("postgres", url), Target("postgres", url))


def migrated(event_id: str, sku: str, qty: int) -> dict[str, Any]:
    """What a v1 lab order is in v2: its warehouse.stock.added event, of the v1 source."""
    return lab(event_id, sku, qty, source=V1)


def test_the_fixture_is_v1_before_it_is_opened(v1: V1Databases) -> None:
    # Guards the tests below: they would prove nothing on a database v2 already wrote.
    versions = [int(row[0]) for row in v1.source.rows("SELECT version FROM schema_migrations")]
    assert max(versions) == 6
    assert v1.source.rows("SELECT id, sku, qty FROM outbox ORDER BY seq") == [
        (i, s, q) for i, s, q in ORDERS
    ]


def test_the_outbox_keeps_every_event_and_its_state(v1: V1Databases) -> None:
    with Outbox(v1.source.ref) as ob:
        assert ob.source == V1
        rows = v1.source.rows(
            "SELECT seq, id, source, type, sent, quarantined FROM ackledger_outbox ORDER BY seq"
        )
        assert rows == [
            (n + 1, event_id, V1, warehouse.TYPE, int(n < 2), int(event_id == "o-3"))
            for n, (event_id, _, _) in enumerate(ORDERS)
        ]
        (poison,) = ob.quarantined()
        assert (poison["id"], poison["reason"]) == ("o-3", "poison: the sink refuses it")
        assert poison["last_error"] == "HTTP 422 instead of 200: bad sku"
        failed = ob.event("o-4")
        assert failed is not None
        assert (failed["attempts"], failed["last_error"]) == (1, "connection refused")
        # Pending: o-4 (it failed once; it is not quarantined), o-5, o-6, in seq order, as
        # whole CloudEvents.
        assert ob.pending() == [
            {**migrated(event_id, sku, qty), "seq": n + 1}
            for n, (event_id, sku, qty) in enumerate(ORDERS)
            if n >= 3
        ]
        assert ob.stats()["sent"] == 2
        # Re-accepting an order the v1 outbox accepted is the same event: same seq, no write.
        before = v1.source.dump()
        assert ob.accept({"id": "o-5", "sku": "snack-7", "qty": 1}) == 5
        assert ob.accept({"id": "o-1", "sku": "snack-7", "qty": 3}) == 1
        assert v1.source.dump() == before
    assert v1.source.rows("SELECT id, sku, qty FROM orders ORDER BY id") == list(ORDERS)
    assert v1.source.rows("SELECT event FROM ackledger_outbox WHERE id = 'o-6'") == [
        (
            '{"data":{"qty":6,"sku":"snack-9"},"id":"o-6","partitionkey":"snack-9",'
            '"source":"urn:ackledger:v1","specversion":"1.0","subject":"snack-9",'
            '"type":"warehouse.stock.added"}',
        )
    ]


def test_a_v1_outbox_reopened_keeps_its_source_and_refuses_another(v1: V1Databases) -> None:
    with Outbox(v1.source.ref) as ob:
        assert ob.source == V1
    with Outbox(v1.source.ref, source=V1) as ob:
        assert ob.source == V1
    with pytest.raises(ValueError, match="source"):
        Outbox(v1.source.ref, source="urn:shop:other")


def test_the_inbox_keeps_its_receipts_inventory_and_counters(v1: V1Databases) -> None:
    with Inbox(v1.sink.ref) as inbox:
        first, second = inbox.receipt("o-1"), inbox.receipt("o-2", source=V1)
        assert first is not None and second is not None
        assert (first["source"], first["type"], first["receipts"]) == (V1, warehouse.TYPE, 1)
        assert (second["source"], second["receipts"]) == (V1, 2)
        assert inbox.receipt("o-3") is None
        assert inbox.stock("snack-7") == 7
        assert inbox.counters() == {"applied": 2, "duplicate": 1, "conflict": 0}
    assert v1.sink.rows("SELECT source, id FROM ackledger_inbox ORDER BY id") == [
        (V1, "o-1"),
        (V1, "o-2"),
    ]


def test_the_inbox_records_its_oldest_receipt_and_a_purge_walks_it(v1: V1Databases) -> None:
    """Migration 0010 on a v1 inbox: its first receipt recorded (through 0009's index, before
    dropping it), the index gone, and the purge's windows take both receipts."""
    with Inbox(v1.sink.ref) as inbox:
        [(first,)] = v1.sink.rows("SELECT MIN(first_received_at) FROM ackledger_inbox")
        assert v1.sink.rows("SELECT first_received_at, cutoff FROM ackledger_inbox_oldest") == [
            (first, None)
        ]
        age = inbox.retention()["oldest_receipt_age_s"]
        assert age is not None and abs(age - (time.time() - first)) < 60
        indexes = (
            "SELECT indexname FROM pg_indexes WHERE tablename = 'ackledger_inbox'"
            if v1.sink.dialect == "postgres"
            else "SELECT name FROM sqlite_master WHERE type = 'index' "
            "AND tbl_name = 'ackledger_inbox'"
        )
        found = {row[0] for row in v1.sink.rows(indexes)}
        assert not {"inbox_first_received", "ackledger_inbox_first_received"} & found
        assert inbox.purge(0.001, chunk=1, force=True) == 2
        assert inbox.retention() == {"purged": 2, "oldest_receipt_age_s": None}
        assert inbox.counters() == {"applied": 2, "duplicate": 1, "conflict": 0}


def test_a_migrated_event_the_inbox_applied_is_a_duplicate_not_a_conflict(v1: V1Databases) -> None:
    with Outbox(v1.source.ref) as ob:
        stored = ob.event("o-2")
    assert stored is not None
    with Inbox(v1.sink.ref) as inbox:
        # The event exactly as the migrated outbox holds it, re-sent to the migrated inbox.
        assert inbox.receive(migrated("o-2", "snack-7", 4)) == "duplicate"
        assert inbox.receive({**migrated("o-1", "snack-7", 3)}) == "duplicate"
        assert inbox.stock("snack-7") == 7  # not applied twice
        assert inbox.counters() == {"applied": 2, "duplicate": 3, "conflict": 0}
        receipt = inbox.receipt("o-2")
        assert receipt is not None and receipt["receipts"] == 3
    assert stored["event"] == (
        '{"data":{"qty":4,"sku":"snack-7"},"id":"o-2","partitionkey":"snack-7",'
        '"source":"urn:ackledger:v1","specversion":"1.0","subject":"snack-7",'
        '"type":"warehouse.stock.added"}'
    )


def test_the_same_id_with_other_content_is_still_a_conflict(v1: V1Databases) -> None:
    with Inbox(v1.sink.ref) as inbox:
        with pytest.raises(Conflict, match="o-2"):
            inbox.receive(migrated("o-2", "snack-7", 5))
        assert inbox.stock("snack-7") == 7
    with Outbox(v1.source.ref) as ob, pytest.raises(Conflict, match="o-5"):
        ob.accept({"id": "o-5", "sku": "snack-7", "qty": 2})


def test_dispatching_the_pending_ones_into_the_migrated_inbox_moves_inventory_exactly(
    v1: V1Databases,
) -> None:
    with Outbox(v1.source.ref) as ob, Inbox(v1.sink.ref) as inbox:
        answers: list[str] = []

        def send(event: dict[str, Any]) -> bool:
            answers.append(inbox.receive(event))
            return True

        assert dispatch(ob, send) == ["o-4", "o-5", "o-6"]
        assert answers == ["applied"] * 3
        assert ob.pending() == []
        # The quarantined one, requeued, goes too; the sent ones stay sent.
        ob.requeue("o-3")
        assert dispatch(ob, send) == ["o-3"]
        assert dispatch(ob, send) == []
        assert (inbox.stock("snack-7"), inbox.stock("snack-8"), inbox.stock("snack-9")) == (
            3 + 4 + 1,
            5 + 2,
            6,
        )
        assert inbox.counters() == {"applied": 6, "duplicate": 1, "conflict": 0}
    assert v1.source.rows("SELECT COUNT(*) FROM ackledger_outbox WHERE sent = 1") == [(6,)]
    assert v1.sink.rows("SELECT COUNT(*) FROM ackledger_inbox WHERE source = ?", (V1,)) == [(6,)]
