"""Batch delivery end to end from an outbox on every backend: dispatch_batch +
send_http_batch + a real sink's /events/batch (the sink on SQLite; its own behaviour is in
tests/test_batch.py).

Every check reads the databases from separate connections (``target.rows``, ``raw_rows``),
never through the objects that wrote them.
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pytest

from ackledger import NotAcknowledged, Outbox
from ackledger.ops.processes import Service, run_cli
from ackledger.source.dispatch import dispatch_batch
from ackledger.wire.http import close_connections, post_batch

from ..batchhelp import batch_url, pairs, sender, stock
from ..conftest import raw_rows
from ..events import SOURCE, lab
from .conftest import Target


def event(event_id: str, sku: str = "sku-1", qty: int = 1) -> dict[str, Any]:
    """A lab order, as ``Outbox.accept`` takes it."""
    return {"id": event_id, "sku": sku, "qty": qty}


def _sent(target: Target) -> dict[str, int]:
    return {str(i): int(str(s)) for i, s in target.rows("SELECT id, sent FROM ackledger_outbox")}


pytestmark = pytest.mark.slow


@pytest.fixture(autouse=True)
def _fresh_connections() -> Any:
    yield
    close_connections()


def test_order_is_kept_across_batches(target: Target, sink_db: Path, sink_service: Service) -> None:
    # Ids in an order that is neither sorted nor reverse-sorted: only acceptance order counts.
    names = [f"ev-{n:03d}" for n in range(40)]
    random.Random(5).shuffle(names)
    with Outbox(target.ref) as outbox:
        for number, name in enumerate(names):
            outbox.accept(event(name, f"sku-{number % 3}", 1 + number % 4))
        marked: list[str] = []
        while batch := dispatch_batch(outbox, sender(sink_service), 16):
            marked.extend(batch)
    assert marked == names
    applied = [
        str(r[0]) for r in raw_rows(sink_db, "SELECT id FROM ackledger_inbox ORDER BY arrival")
    ]
    assert applied == names
    assert set(_sent(target).values()) == {1}


def test_stops_at_first_failing_item(target: Target, sink_db: Path, sink_service: Service) -> None:
    # The sink already holds "clash" of this outbox's source with other content, so that item
    # is refused (422 inside the batch answer); the two before it are applied and marked, it
    # and the rest stay pending.
    post = post_batch([lab("clash", "sku-x", 99)], batch_url(sink_service))
    assert post.acked == 1
    ids = ["first", "second", "clash", "fourth", "fifth"]
    with Outbox(target.ref, source=SOURCE) as outbox:
        for name in ids:
            outbox.accept(event(name, "sku-b", 2))
        with pytest.raises(NotAcknowledged, match="clash"):
            dispatch_batch(outbox, sender(sink_service), 16)
        assert [item["id"] for item in outbox.pending(16)] == ["clash", "fourth", "fifth"]
    assert _sent(target) == {"first": 1, "second": 1, "clash": 0, "fourth": 0, "fifth": 0}
    inbox = {str(r[0]) for r in raw_rows(sink_db, "SELECT id FROM ackledger_inbox")}
    assert inbox == {"clash", "first", "second"}
    assert stock(sink_db, "sku-b") == 4
    assert stock(sink_db, "sku-x") == 99


def test_crash_between_sink_commit_and_marks_resends_and_applies_once(
    target: Target, sink_db: Path, sink_service: Service
) -> None:
    events = [event(f"c{n}", f"sku-{n % 2}", n + 1) for n in range(6)]
    with Outbox(target.ref) as outbox:
        for item in events:
            outbox.accept(item)
    url = sink_service.base_url + "/events"
    drill = run_cli(
        "dispatch", "--source", target.ref, "--to", url, "--batch", "--exit-after-ack", "73"
    )
    assert drill.returncode == 73, drill.stderr
    # The sink committed the whole batch; the source marked none of it.
    assert len(raw_rows(sink_db, "SELECT id FROM ackledger_inbox")) == 6
    assert set(_sent(target).values()) == {0}
    again = run_cli("dispatch", "--source", target.ref, "--to", url, "--batch")
    assert again.returncode == 0, again.stderr
    assert "dispatched 6 event(s)" in again.stdout
    assert set(_sent(target).values()) == {1}
    receipts = pairs(raw_rows(sink_db, "SELECT id, receipts FROM ackledger_inbox"))
    assert receipts == {f"c{n}": 2 for n in range(6)}
    assert stock(sink_db, "sku-0") == 1 + 3 + 5
    assert stock(sink_db, "sku-1") == 2 + 4 + 6
