"""What ``ackledger relay`` does to a broker with no flags: batch rounds, several batches in
flight; ``--inflight 1``: one batch at a time; ``--per-item``: one event at a time.

A batch round marks its confirmed prefix in one transaction, with one time for all of it
(batches in flight whose confirms are all in share the oldest one's commit); a per-item round
marks each event in a commit of its own, at its own time. So the outbox's ``sent_at`` column,
read afterwards on a connection of the test's own, tells how the relay worked: 48 events on
one partition are whole batches of 16, or 48 single marks.
"""

from __future__ import annotations

import sqlite3
from collections import Counter
from pathlib import Path

import pytest
from bench.broker_campaign import pending_ids
from bench.broker_routes import open_route

from ackledger import Outbox
from ackledger.ops.processes import Child

from .test_consume import eventually

pytestmark = pytest.mark.slow

EVENTS = 48
BATCH = 16


def _marks_by_time(db: Path) -> list[int]:
    """How many events share each ``sent_at``, in the order they were marked."""
    with sqlite3.connect(db) as conn:
        times = [row[0] for row in conn.execute(
            "SELECT sent_at FROM ackledger_outbox WHERE sent = 1 ORDER BY seq"
        )]  # fmt: skip
    return list(Counter(times).values())


def _relay_all(tmp_path: Path, kind: str, *flags: str) -> list[int]:
    db = tmp_path / "source.db"
    with Outbox(db) as outbox:
        for n in range(EVENTS):
            outbox.accept({"id": f"r-{n:02d}", "sku": "tea", "qty": 1})
    with open_route(kind) as route:
        relay = Child(["relay", "--source", str(db), "--to", route.relay_url, *flags,
                       "--poll-interval", "0.05"], tmp_path / "relay.log")  # fmt: skip
        try:
            eventually(lambda: not pending_ids(db), "every event marked")
        finally:
            assert relay.stop() == 0, relay.log.read_text()
        assert sum(route.seen_settled().values()) == EVENTS  # each published once
    return _marks_by_time(db)


@pytest.mark.parametrize("kind", ["amqp", "nats"])
def test_with_no_flags_the_relay_to_a_broker_marks_whole_batches(tmp_path: Path, kind: str) -> None:
    marks = _relay_all(tmp_path, kind)
    assert sum(marks) == EVENTS and all(count % BATCH == 0 for count in marks), marks


@pytest.mark.parametrize("kind", ["amqp", "nats"])
def test_one_batch_at_a_time_marks_each_batch_on_its_own(tmp_path: Path, kind: str) -> None:
    assert _relay_all(tmp_path, kind, "--inflight", "1") == [BATCH] * (EVENTS // BATCH)


@pytest.mark.parametrize("kind", ["amqp", "nats"])
def test_per_item_marks_each_event_on_its_own(tmp_path: Path, kind: str) -> None:
    assert _relay_all(tmp_path, kind, "--per-item") == [1] * EVENTS
