"""Crash proofs through the real brokers, with real processes killed where it hurts.

- The relay dies between the broker's ACK (RabbitMQ's confirm, JetStream's PubAck) and its
  mark (``os._exit``): the event stays pending, the next run publishes it again, and either
  JetStream drops the re-send as a duplicate (``Nats-Msg-Id``) or the consumer's inbox
  absorbs it: applied once.
- The consumer dies after its inbox commit and before its ack, feeding a PostgreSQL inbox:
  the broker redelivers, the inbox says duplicate, the stock moved once (the SQLite inbox's
  case is in tests/test_consume.py).

Every route (``bench.broker_routes``) has names of its own and a tap that counts every publish; the
outbox and the inbox are read afterwards from connections of their own.
"""

from __future__ import annotations

import json
import signal
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from bench.broker_campaign import pending_ids, stock_by_order
from bench.broker_routes import Route, open_route

from ackledger import Inbox, Outbox
from ackledger.ops.faultproxy import FaultProxy
from ackledger.ops.processes import Child, run_cli

from . import pg
from .test_consume import (  # noqa: F401 - the fixture is found by its name here
    ConsumerProcess,
    counters,
    eventually,
    inventory,
    start_consumer,
)

pytestmark = pytest.mark.slow

ORDERS = ({"id": "o-1", "sku": "tea", "qty": 1}, {"id": "o-2", "sku": "tea", "qty": 2},
          {"id": "o-3", "sku": "tea", "qty": 4})  # fmt: skip
#: A JetStream duplicate window this short has passed by the time the relay runs again.
SHORT_WINDOW_S = 0.5


@dataclass
class Case:
    route: Route
    #: The broker drops a re-send itself: JetStream within its duplicate window.
    broker_drops_resends: bool
    #: JetStream with a short duplicate window: the relay waits it out before it runs again.
    window_s: float = 0.0


@pytest.fixture(params=["amqp", "nats", "nats-window-passed"])
def case(request: pytest.FixtureRequest) -> Iterator[Case]:
    kind = str(request.param)
    if kind == "nats-window-passed":
        with open_route("nats", duplicate_window=SHORT_WINDOW_S) as route:
            yield Case(route, broker_drops_resends=False, window_s=SHORT_WINDOW_S)
        return
    with open_route(kind) as route:
        yield Case(route, broker_drops_resends=kind == "nats")


def accept_orders(source: Path) -> None:
    for order in ORDERS:
        done = run_cli("accept", "--source", str(source), stdin=json.dumps(order))
        assert done.returncode == 0, done.stderr


def test_the_relay_killed_after_the_ack_resends_and_the_event_is_applied_once(
    tmp_path: Path,
    case: Case,
    start_consumer: Callable[..., ConsumerProcess],  # noqa: F811
) -> None:
    route = case.route
    source, sink = tmp_path / "source.db", tmp_path / "sink.db"
    accept_orders(source)
    died = run_cli("dispatch", "--source", str(source), "--to", route.relay_url,
                   "--exit-after-ack", "9")  # fmt: skip
    assert died.returncode == 9, died.stderr
    with Outbox(source) as outbox:  # a new connection: what is on disk
        assert [event["id"] for event in outbox.pending()] == ["o-1", "o-2", "o-3"]
    assert route.seen_settled() == Counter({"o-1": 1})  # acknowledged, never marked
    assert route.stored() == 1

    time.sleep(case.window_s * 2)
    again = run_cli("dispatch", "--source", str(source), "--to", route.relay_url)
    assert again.returncode == 0, again.stderr
    with Outbox(source) as outbox:
        assert outbox.pending() == []
    # o-1 went on the wire twice: at-least-once, by the one batch the crash left in flight.
    assert route.seen_settled() == Counter({"o-1": 2, "o-2": 1, "o-3": 1})
    absorbed_by_broker = case.broker_drops_resends
    # JetStream, within its duplicate window, answers the re-send "duplicate" and stores
    # nothing; RabbitMQ (and JetStream past the window) keeps both copies.
    assert route.stored() == (3 if absorbed_by_broker else 4)

    consumer = start_consumer("--from", route.consume_url, "--db", str(sink))
    eventually(lambda: counters(sink)["applied"] == 3, "the three orders applied")
    duplicates = 0 if absorbed_by_broker else 1
    eventually(lambda: counters(sink)["duplicate"] == duplicates, "the re-send absorbed")
    eventually(lambda: route.left() == 0, "every message acked")
    assert consumer.stop(signal.SIGTERM) == 0
    assert inventory(sink, "tea") == 7  # applied once
    assert counters(sink) == {"applied": 3, "duplicate": duplicates, "conflict": 0}


@pytest.mark.postgres
@pytest.mark.parametrize("broker", ["amqp", "nats"])
def test_a_consumer_into_postgresql_killed_after_its_commit_applies_once(
    tmp_path: Path,
    pg_url: str,
    broker: str,
    start_consumer: Callable[..., ConsumerProcess],  # noqa: F811
) -> None:
    source = tmp_path / "source.db"
    accept_orders(source)
    with open_route(broker) as route:
        sent = run_cli("dispatch", "--source", str(source), "--to", route.relay_url)
        assert sent.returncode == 0, sent.stderr

        crashed = start_consumer("--from", route.consume_url, "--db", pg_url,
                                 "--exit-after-commit", "75")  # fmt: skip
        assert crashed.process.wait(30) == 75
        # Read on a connection of its own: o-1 committed, and never acked.
        assert pg.rows(pg_url, "SELECT sku, qty FROM inventory") == [("tea", 1)]
        assert pg.rows(pg_url, "SELECT id FROM ackledger_inbox") == [("o-1",)]

        consumer = start_consumer("--from", route.consume_url, "--db", pg_url)
        with Inbox(pg_url) as inbox:
            eventually(lambda: inbox.counters()["applied"] == 3, "the other two applied")
            eventually(lambda: inbox.counters()["duplicate"] == 1, "o-1 redelivered")
        eventually(lambda: route.left() == 0, "every message acked")
        assert consumer.stop(signal.SIGTERM) == 0
    assert pg.rows(pg_url, "SELECT sku, qty FROM inventory") == [("tea", 7)]  # once each
    assert sorted(pg.rows(pg_url, "SELECT id FROM ackledger_inbox")) == [
        ("o-1",),
        ("o-2",),
        ("o-3",),
    ]


#: Where a publish begins on the wire: AMQP's basic.publish method (class 60, method 40) and
#: NATS's HPUB (a publish with headers).
PUBLISH_FRAME = {"amqp": b"\x00\x3c\x00\x28", "nats": b"HPUB "}
BATCH = 16
THROUGH = 5  # publishes that reach the broker before the cut


@pytest.mark.parametrize("broker", ["amqp", "nats"])
def test_a_connection_cut_mid_batch_marks_only_what_the_broker_confirmed(
    tmp_path: Path,
    broker: str,
    start_consumer: Callable[..., ConsumerProcess],  # noqa: F811
) -> None:
    source, sink = tmp_path / "source.db", tmp_path / "sink.db"
    ids = [f"b-{n:02d}" for n in range(BATCH)]
    with Outbox(source) as outbox:
        for event_id in ids:
            outbox.accept({"id": event_id, "sku": f"sku-{event_id}", "qty": 1})
    with (
        open_route(broker) as route,
        FaultProxy(
            route.port, cut_before=PUBLISH_FRAME[broker], cut_at=THROUGH + 1, cut_hold_s=2.0
        ) as proxy,
    ):
        to = route.relay_url_via(proxy.port)
        cut = run_cli("dispatch", "--source", str(source), "--to", to, "--batch",
                      "--limit", str(BATCH), "--timeout", "3")  # fmt: skip
        assert cut.returncode == 1, cut.stdout + cut.stderr
        assert proxy.cuts == 1
        # The broker got the first five publishes whole, and nothing of the other eleven.
        at_the_cut = route.seen_settled()
        assert at_the_cut == Counter(ids[:THROUGH])
        left = pending_ids(source)
        marked = [i for i in ids if i not in left]
        # Marked: a prefix of what the broker confirmed (all five, unless a confirm was
        # still on its way at the cut); everything unconfirmed stays pending.
        assert 1 <= len(marked) <= THROUGH and marked == ids[: len(marked)], cut.stderr
        assert f"only {len(marked)} of {BATCH} events were acknowledged" in cut.stderr

        # Healed: the relay (through the same proxy) sends the rest, and the consumer
        # applies each once.
        relay = Child(["relay", "--source", str(source), "--to", to, "--batch",
                       "--poll-interval", "0.05"], tmp_path / "relay.log")  # fmt: skip
        try:
            eventually(lambda: not pending_ids(source), "the relay finished")
        finally:
            assert relay.stop() == 0
        consumer = start_consumer("--from", route.consume_url, "--db", str(sink))
        eventually(lambda: counters(sink)["applied"] == BATCH, "each applied")
        eventually(lambda: route.left() == 0, "every message acked")
        assert consumer.stop(signal.SIGTERM) == 0
        seen = route.seen_settled()
    assert set(seen) == set(ids)
    # Re-sent: only what was confirmed but not marked at the cut (none when all five were).
    assert sum(seen.values()) - BATCH == THROUGH - len(marked)
    assert stock_by_order(sink) == dict.fromkeys(ids, 1)
