"""``trace`` for a relay to a broker: the mark stands for the broker's confirm, not for the
consumer's commit, and ``--sink`` (the consumer's inbox) shows whether it was applied.

Real processes: ``ackledger dispatch`` to RabbitMQ or NATS JetStream, ``ackledger consume``
into a SQLite inbox, ``ackledger trace`` reading both afterwards.
"""

from __future__ import annotations

import asyncio
import json
import signal
import sqlite3
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ackledger import Inbox, Outbox
from ackledger.ops.processes import run_cli

from .test_consume import (  # noqa: F401 - the fixtures are found by their names here
    AMQP,
    NATS,
    ConsumerProcess,
    Jet,
    Rabbit,
    _manage,
    counters,
    eventually,
    jet,
    rabbit,
    start_consumer,
)

ORDER = {"id": "t-1", "sku": "tea", "qty": 3}


def _trace(source: Path, *sink: str) -> dict[str, Any]:
    shown = run_cli("trace", "t-1", "--source", str(source), *sink, "--json")
    assert shown.returncode == 0, shown.stderr
    report: dict[str, Any] = json.loads(shown.stdout)
    return report


def _stage(report: dict[str, Any], name: str) -> dict[str, Any]:
    found: dict[str, Any] = next(stage for stage in report["stages"] if stage["stage"] == name)
    return found


def _accept(source: Path) -> None:
    assert run_cli("accept", "--source", str(source), stdin=json.dumps(ORDER)).returncode == 0


def test_trace_of_a_rabbitmq_relay_names_the_confirm_then_the_consumers_apply(
    tmp_path: Path,
    rabbit: Rabbit,  # noqa: F811
    start_consumer: Callable[..., ConsumerProcess],  # noqa: F811
) -> None:
    source, sink = tmp_path / "source.db", tmp_path / "sink.db"
    exchange = f"test-trace-{uuid.uuid4().hex[:12]}"
    rabbit.channel.exchange_declare(exchange, "direct", durable=True)
    rabbit.channel.queue_bind(rabbit.queue, exchange, "warehouse.stock.added")
    try:
        _accept(source)
        pending = _trace(source)
        assert pending["via"] is None and pending["verdict"].startswith("pending")

        to = f"{AMQP}?exchange={exchange}"
        sent = run_cli("dispatch", "--source", str(source), "--to", to)
        assert sent.returncode == 0, sent.stderr
        # Confirmed and marked, in the queue, not consumed yet; the inbox is still empty.
        Inbox(sink).close()
        before = _trace(source, "--sink", str(sink))
        assert before["via"]["kind"] == "amqp"
        assert "guest:***@" in before["via"]["target"] and ":guest@" not in json.dumps(before)
        assert "publisher confirm" in _stage(before, "ack")["detail"]
        assert _stage(before, "sink")["seen"] == "no"
        assert before["verdict"] == (
            "confirmed by the broker and marked sent; not yet applied by the consumer"
        )

        consumer = start_consumer("--from", rabbit.url, "--db", str(sink))
        eventually(lambda: counters(sink)["applied"] == 1, "the event applied")
        assert consumer.stop(signal.SIGTERM) == 0
        after = _trace(source, "--sink", str(sink))
        assert _stage(after, "sink")["seen"] == "yes"
        assert after["verdict"] == (
            "confirmed by the broker, marked sent, and applied by the consumer"
        )
        text = run_cli("trace", "t-1", "--source", str(source), "--sink", str(sink))
        assert "RabbitMQ's publisher confirm" in text.stdout and "guest:guest" not in text.stdout
    finally:
        rabbit.channel.exchange_delete(exchange)


def test_trace_of_a_nats_relay_killed_before_the_mark_says_the_consumer_has_it(
    tmp_path: Path,
    jet: Jet,  # noqa: F811
    start_consumer: Callable[..., ConsumerProcess],  # noqa: F811
) -> None:
    source, sink = tmp_path / "source.db", tmp_path / "sink.db"
    prefix = jet.subject
    # The relay publishes to PREFIX.<type>: widen the test stream to take those subjects.
    config = asyncio.run(_manage(lambda js: js.stream_info(jet.stream))).config
    config.subjects = [jet.subject, f"{prefix}.>"]
    asyncio.run(_manage(lambda js: js.update_stream(config)))
    _accept(source)
    to = f"{NATS}?subject={prefix}&stream={jet.stream}"
    died = run_cli("dispatch", "--source", str(source), "--to", to, "--exit-after-ack", "9")
    assert died.returncode == 9, died.stderr
    with Outbox(source) as outbox:
        assert [event["id"] for event in outbox.pending()] == ["t-1"]

    unasked = _trace(source)
    assert unasked["via"]["kind"] == "nats"
    ack = _stage(unasked, "ack")
    assert ack["seen"] == "unknown" and "a copy in the queue" in ack["detail"]
    assert unasked["verdict"] == "pending: not yet confirmed by the broker"

    consumer = start_consumer("--from", jet.url("trace"), "--db", str(sink))
    eventually(lambda: counters(sink)["applied"] == 1, "the PubAcked copy applied")
    assert consumer.stop(signal.SIGTERM) == 0
    report = _trace(source, "--sink", str(sink))
    assert report["verdict"].startswith("applied by the consumer but not marked")
    assert _stage(report, "sent")["seen"] == "no"


def test_recorded_targets_keep_no_password_and_pick_the_one_started_before_the_mark(
    tmp_path: Path,
) -> None:
    from ackledger.ops.ack_kinds import target_for

    source = tmp_path / "source.db"
    with Outbox(source) as outbox:
        outbox.record_target("http://127.0.0.1:9/events")
        outbox.record_target("nats://user:secret@127.0.0.1:4222?subject=a")
        targets = outbox.targets()
    assert [target["target"] for target in targets] == [
        "http://127.0.0.1:9/events",
        "nats://user:***@127.0.0.1:4222?subject=a",
    ]
    with sqlite3.connect(source) as raw:  # what is on disk, from another connection
        assert "secret" not in repr(raw.execute("SELECT * FROM ackledger_meta").fetchall())
    http_start, nats_start = (target["started_at"] for target in targets)
    marked_between = {"sent": 1, "sent_at": (http_start + nats_start) / 2}
    assert target_for(targets, marked_between)["kind"] == "http"  # type: ignore[index]
    marked_after = {"sent": 1, "sent_at": nats_start + 1}
    chosen = target_for(targets, marked_after)
    assert chosen is not None and chosen["kind"] == "nats" and chosen["others"] == 1
    assert target_for(targets, {"sent": 1, "sent_at": http_start - 1}) is None
    assert target_for([], None) is None
