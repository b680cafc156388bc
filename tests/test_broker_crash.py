"""The relay dies between RabbitMQ's confirm and its mark (``os._exit``): the event stays
pending, is published again by the next run, and the consumer applies it once.

Real processes end to end: ``ackledger dispatch`` to an exchange, ``ackledger consume`` from
the queue bound to it, a SQLite outbox and inbox read afterwards from other connections.
"""

from __future__ import annotations

import json
import signal
import uuid
from collections.abc import Callable
from pathlib import Path

from ackledger import Outbox
from ackledger._dev.procs import run_cli

from .test_consume import (  # noqa: F401 - the fixtures are found by their names here
    AMQP,
    ConsumerProcess,
    Rabbit,
    counters,
    eventually,
    inventory,
    rabbit,
    start_consumer,
)

ORDERS = ({"id": "o-1", "sku": "tea", "qty": 1}, {"id": "o-2", "sku": "tea", "qty": 2},
          {"id": "o-3", "sku": "tea", "qty": 4})  # fmt: skip


def test_the_relay_killed_after_the_confirm_resends_and_the_consumer_applies_once(
    tmp_path: Path,
    rabbit: Rabbit,  # noqa: F811
    start_consumer: Callable[..., ConsumerProcess],  # noqa: F811
) -> None:
    source, sink = tmp_path / "source.db", tmp_path / "sink.db"
    exchange = f"test-crash-{uuid.uuid4().hex[:12]}"
    rabbit.channel.exchange_declare(exchange, "direct", durable=True)
    rabbit.channel.queue_bind(rabbit.queue, exchange, "warehouse.stock.added")
    try:
        for order in ORDERS:
            assert (
                run_cli("accept", "--source", str(source), stdin=json.dumps(order)).returncode == 0
            )
        to = f"{AMQP}?exchange={exchange}"
        died = run_cli("dispatch", "--source", str(source), "--to", to, "--exit-after-ack", "9")
        assert died.returncode == 9, died.stderr
        with Outbox(source) as outbox:  # a new connection: what is on disk
            assert [event["id"] for event in outbox.pending()] == ["o-1", "o-2", "o-3"]
        assert rabbit.ready(rabbit.queue) == 1  # o-1 was confirmed, never marked

        again = run_cli("dispatch", "--source", str(source), "--to", to)
        assert again.returncode == 0, again.stderr
        with Outbox(source) as outbox:
            assert outbox.pending() == []
        assert rabbit.ready(rabbit.queue) == 4  # o-1 twice: at-least-once on the wire

        consumer = start_consumer("--from", rabbit.url, "--db", str(sink))
        eventually(lambda: counters(sink)["applied"] == 3, "the three orders applied")
        eventually(lambda: counters(sink)["duplicate"] == 1, "the re-send absorbed")
        assert consumer.stop(signal.SIGTERM) == 0
        assert inventory(sink, "tea") == 7  # applied once
        assert rabbit.ready(rabbit.queue) == 0
    finally:
        rabbit.channel.exchange_delete(exchange)
