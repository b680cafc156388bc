"""``ackledger relay --source postgresql:// --single --pipeline``, one event a request, as a
real process: the single loop over PostgreSQL's whole outbox with each event's mark committed
behind the next send, as a process and not only in-process.

Each database is read from its own connection: the outbox with psycopg, the sink's SQLite file
with sqlite3.
"""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

from ackledger import Outbox
from ackledger.ops.faultproxy import FaultProxy
from ackledger.ops.processes import Service, start_service
from tests import pg
from tests.conftest import raw_rows
from tests.opshelp import settled, wait_until

pytestmark = pytest.mark.slow

SKUS = 5


def _accept(url: str, n: int) -> list[str]:
    event_ids = [f"e-{i:04d}" for i in range(n)]
    with Outbox(url) as outbox:
        for i, event_id in enumerate(event_ids):
            outbox.accept({"id": event_id, "sku": f"sku-{i % SKUS}", "qty": 1})
    return event_ids


def _relay(source: str, to: str, log: Path) -> Service:
    args = ["relay", "--source", source, "--to", to, "--single", "--pipeline"]
    args += ["--metrics-port", "0", "--poll-interval", "0.05"]
    return start_service([*args, "--base-backoff", "0.05", "--max-backoff", "0.3"], stderr_path=log)


def _ids(url: str, where: str) -> set[str]:
    return {str(row[0]) for row in pg.rows(url, f"SELECT id FROM ackledger_outbox WHERE {where}")}


def _pending(url: str) -> int:
    return len(_ids(url, "sent = 0 AND quarantined = 0"))


def test_single_pipeline_per_item_sends_everything_once_in_acceptance_order(
    pg_url: str, sink_service: Service, sink_db: Path, tmp_path: Path
) -> None:
    event_ids = _accept(pg_url, 150)
    relay = _relay(pg_url, sink_service.base_url + "/events", tmp_path / "relay.log")
    try:
        wait_until(lambda: _pending(pg_url) == 0, "the outbox to drain")
    finally:
        code = relay.stop()
    assert code == 0, (tmp_path / "relay.log").read_text()[-2000:]
    # One global order: the sink's arrival numbers follow acceptance, one receipt each.
    arrivals = raw_rows(sink_db, "SELECT id, receipts FROM ackledger_inbox ORDER BY arrival")
    assert arrivals == [(event_id, 1) for event_id in event_ids]
    assert _ids(pg_url, "sent = 1") == set(event_ids)
    assert pg.rows(pg_url, "SELECT count(*) FROM ackledger_outbox WHERE sent_at IS NULL") == [(0,)]
    assert raw_rows(sink_db, "SELECT sum(qty) FROM inventory") == [(150,)]


def test_kill_9_of_single_pipeline_per_item_re_sends_at_most_two(
    pg_url: str, sink_service: Service, sink_db: Path, tmp_path: Path
) -> None:
    """SIGKILL (no finally, no close) mid-run: at most the mark in flight and the event being
    sent are applied and not marked; a fresh relay sends exactly those again (duplicates for
    the sink) and the rest once."""
    event_ids = _accept(pg_url, 300)
    with FaultProxy(sink_service.port, delay_responses=0.002) as proxy:
        relay = _relay(pg_url, proxy.url, tmp_path / "killed.log")
        try:
            wait_until(lambda: len(_ids(pg_url, "sent = 1")) >= 40, "some events to be sent")
            relay.process.send_signal(signal.SIGKILL)
            relay.process.wait(30)
        finally:
            relay.stop()
    assert _pending(pg_url) > 0, "the relay should have been killed mid-way"
    # What the sink applied that the outbox does not know as sent, once the request in
    # flight (if any) is over.
    applied = settled(
        lambda: {str(row[0]) for row in raw_rows(sink_db, "SELECT id FROM ackledger_inbox")}
    )
    marked = _ids(pg_url, "sent = 1")
    assert marked <= applied
    assert len(applied - marked) <= 2

    fresh = _relay(pg_url, sink_service.base_url + "/events", tmp_path / "fresh.log")
    try:
        wait_until(lambda: _pending(pg_url) == 0, "the fresh relay to drain")
    finally:
        assert fresh.stop() == 0
    again = {
        str(row[0])
        for row in raw_rows(sink_db, "SELECT id FROM ackledger_inbox WHERE receipts > 1")
    }
    assert again == applied - marked
    assert raw_rows(sink_db, "SELECT count(*), max(receipts) FROM ackledger_inbox") == [
        (len(event_ids), 2 if again else 1)
    ]
    duplicates = raw_rows(
        sink_db, "SELECT value FROM ackledger_counters WHERE name = 'sink.duplicate'"
    )
    assert duplicates == ([(len(again),)] if again else [])
    assert raw_rows(sink_db, "SELECT sum(qty) FROM inventory") == [(len(event_ids),)]
