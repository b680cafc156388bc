"""A duplicate is answered from a read, and its bookkeeping is committed without waiting for
the disk (``Inbox.read_lone``, ``write(durable=False)``): a kill -9 of the sink right after
the answer must still leave the receipt's count, its last arrival and the duplicate counter,
read from a separate connection, and nothing applied twice."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

from ackledger import send_http, warehouse
from ackledger.ops.processes import Service
from ackledger.wire.http import close_connections
from tests.conftest import raw_rows

pytestmark = pytest.mark.slow


def _receipt(sink: Path, event_id: str) -> tuple[object, ...]:
    rows = raw_rows(
        sink,
        "SELECT receipts, arrival, last_arrival, last_received_at > first_received_at "
        "FROM ackledger_inbox WHERE id = ?",
        (event_id,),
    )
    return rows[0]


def _counter(sink: Path, name: str) -> object:
    rows = raw_rows(sink, "SELECT value FROM ackledger_counters WHERE name = ?", (name,))
    return rows[0][0] if rows else None


def test_duplicates_counted_survive_a_kill_9_right_after_their_answers(
    sink_db: Path, sink_service: Service
) -> None:
    url = sink_service.base_url + "/events"
    event = warehouse.event("dup-kill-1", "dupsku", 5, source="/tests/dup-kill")
    other = warehouse.event("dup-kill-2", "dupsku", 1, source="/tests/dup-kill")
    try:
        assert send_http(event, url)
        assert send_http(other, url)
        # Two re-sends of the first: each is answered (an ACK) only after its bookkeeping was
        # committed, so the kill below cannot come between the answer and the write.
        assert send_http(event, url)
        assert send_http(event, url)
    finally:
        close_connections()
    sink_service.stop(signal.SIGKILL)

    receipts, arrival, last_arrival, later = _receipt(sink_db, "dup-kill-1")
    assert receipts == 3
    assert arrival == 1 and last_arrival == 4  # the re-sends took arrival numbers 3 and 4
    assert later == 1
    assert _counter(sink_db, "sink.duplicate") == 2
    assert _counter(sink_db, "sink.applied") == 2
    assert _counter(sink_db, "sink.arrival") == 4
    stock = raw_rows(sink_db, "SELECT qty FROM inventory WHERE sku = 'dupsku'")
    assert stock == [(6,)]  # applied once each: 5 + 1
