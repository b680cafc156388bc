"""Batch delivery end to end: dispatch_batch + send_http_batch + a real sink's /events/batch.

Every check reads the databases from separate connections (``raw_rows``), never through the
objects that wrote them.
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pytest

from ackledger import NotAcknowledged, Outbox
from ackledger._dev.procs import Service, run_cli
from ackledger.source.dispatch import dispatch_batch
from ackledger.wire.http import close_connections, post_batch, send_http_batch

from .conftest import raw_rows


def _pairs(rows: list[tuple[object, ...]]) -> dict[object, object]:
    return {row[0]: row[1] for row in rows}


pytestmark = pytest.mark.slow


def _event(event_id: str, sku: str = "sku-1", qty: int = 1) -> dict[str, Any]:
    return {"id": event_id, "sku": sku, "qty": qty}


def _batch_url(service: Service) -> str:
    return service.base_url + "/events/batch"


def _sender(service: Service) -> Any:
    url = _batch_url(service)

    def send_batch(events: list[dict[str, Any]]) -> int:
        return send_http_batch(events, url)

    return send_batch


def _sent(source: Path) -> dict[str, int]:
    return {str(i): int(str(s)) for i, s in raw_rows(source, "SELECT id, sent FROM outbox")}


def _stock(sink: Path, sku: str) -> int:
    rows = raw_rows(sink, "SELECT qty FROM inventory WHERE sku = ?", (sku,))
    return int(str(rows[0][0])) if rows else 0


@pytest.fixture(autouse=True)
def _fresh_connections() -> Any:
    yield
    close_connections()


def test_order_is_kept_across_batches(
    source_db: Path, sink_db: Path, sink_service: Service
) -> None:
    # Ids in an order that is neither sorted nor reverse-sorted: only acceptance order counts.
    names = [f"ev-{n:03d}" for n in range(40)]
    random.Random(5).shuffle(names)
    with Outbox(source_db) as outbox:
        for number, name in enumerate(names):
            outbox.accept(_event(name, f"sku-{number % 3}", 1 + number % 4))
        marked: list[str] = []
        while batch := dispatch_batch(outbox, _sender(sink_service), 16):
            marked.extend(batch)
    assert marked == names
    applied = [str(r[0]) for r in raw_rows(sink_db, "SELECT id FROM inbox ORDER BY rowid")]
    assert applied == names
    assert set(_sent(source_db).values()) == {1}


def test_stops_at_first_failing_item(source_db: Path, sink_db: Path, sink_service: Service) -> None:
    # The sink already holds "clash" with other content, so that item is refused (422 inside
    # the batch answer); the two before it are applied and marked, it and the rest stay pending.
    post = post_batch([_event("clash", "sku-x", 99)], _batch_url(sink_service))
    assert post.acked == 1
    ids = ["first", "second", "clash", "fourth", "fifth"]
    with Outbox(source_db) as outbox:
        for name in ids:
            outbox.accept(_event(name, "sku-b", 2))
        with pytest.raises(NotAcknowledged, match="clash"):
            dispatch_batch(outbox, _sender(sink_service), 16)
        assert [item["id"] for item in outbox.pending(16)] == ["clash", "fourth", "fifth"]
    assert _sent(source_db) == {"first": 1, "second": 1, "clash": 0, "fourth": 0, "fifth": 0}
    inbox = {str(r[0]) for r in raw_rows(sink_db, "SELECT id FROM inbox")}
    assert inbox == {"clash", "first", "second"}
    assert _stock(sink_db, "sku-b") == 4
    assert _stock(sink_db, "sku-x") == 99


def test_the_batch_answer_names_the_failing_item(sink_service: Service) -> None:
    url = _batch_url(sink_service)
    assert post_batch([_event("p1", qty=5)], url).acked == 1
    answer = post_batch([_event("p2"), _event("p1", qty=6), _event("p3")], url)
    assert answer.acked == 1
    assert answer.error is not None
    assert answer.error["status"] == 422
    assert answer.error["index"] == 1


def test_duplicates_inside_and_across_batches_are_absorbed(
    sink_db: Path, sink_service: Service
) -> None:
    send = _sender(sink_service)
    # Inside one batch: the second "d1" is a duplicate of the first, acknowledged, not applied.
    assert send([_event("d1", "sku-d", 3), _event("d2", "sku-d", 4), _event("d1", "sku-d", 3)]) == 3
    # Across batches: the whole batch again.
    assert send([_event("d1", "sku-d", 3), _event("d2", "sku-d", 4)]) == 2
    assert _stock(sink_db, "sku-d") == 7
    receipts = _pairs(raw_rows(sink_db, "SELECT id, receipts FROM inbox"))
    assert receipts == {"d1": 3, "d2": 2}
    counters = _pairs(raw_rows(sink_db, "SELECT name, value FROM counters"))
    assert counters["sink.applied"] == 2
    assert counters["sink.duplicate"] == 3


def test_crash_between_sink_commit_and_marks_resends_and_applies_once(
    source_db: Path, sink_db: Path, sink_service: Service
) -> None:
    events = [_event(f"c{n}", f"sku-{n % 2}", n + 1) for n in range(6)]
    with Outbox(source_db) as outbox:
        for item in events:
            outbox.accept(item)
    url = sink_service.base_url + "/events"
    drill = run_cli(
        "dispatch", "--source", str(source_db), "--to", url, "--batch", "--exit-after-ack", "73"
    )
    assert drill.returncode == 73, drill.stderr
    # The sink committed the whole batch; the source marked none of it.
    assert len(raw_rows(sink_db, "SELECT id FROM inbox")) == 6
    assert set(_sent(source_db).values()) == {0}
    again = run_cli("dispatch", "--source", str(source_db), "--to", url, "--batch")
    assert again.returncode == 0, again.stderr
    assert "dispatched 6 event(s)" in again.stdout
    assert set(_sent(source_db).values()) == {1}
    receipts = _pairs(raw_rows(sink_db, "SELECT id, receipts FROM inbox"))
    assert receipts == {f"c{n}": 2 for n in range(6)}
    assert _stock(sink_db, "sku-0") == 1 + 3 + 5
    assert _stock(sink_db, "sku-1") == 2 + 4 + 6
