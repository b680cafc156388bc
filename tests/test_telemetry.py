"""OpenTelemetry across the outbox (CONTRACT v2 §10 "Trace context"): the business write's
span is stored with the event, carried by the senders, and continued by the sink's and the
consumer's apply span, in real processes; without OpenTelemetry nothing is imported."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from ackledger import Outbox, new_event
from ackledger.ops.processes import Service, run_cli, start_service

from .test_consume import (  # noqa: F401 - the fixtures are found by their names here
    AMQP,
    ConsumerProcess,
    Rabbit,
    counters,
    eventually,
    rabbit,
    start_consumer,
)

HANDLERS = """
from opentelemetry import trace


def ship(tx, event):
    # The user's own span: it must nest in ackledger's apply span.
    with trace.get_tracer("shop").start_as_current_span("ship the order"):
        tx.execute("INSERT INTO shipments (order_id) VALUES (?)", (event["data"]["order"],))


HANDLERS = {"com.example.order.placed": ship}
"""

EXPORTER = InMemorySpanExporter()


@pytest.fixture(scope="module")
def tracing() -> Iterator[InMemorySpanExporter]:
    """The business process: this test process, with the SDK's in-memory exporter."""
    if not isinstance(trace.get_tracer_provider(), TracerProvider):
        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(EXPORTER))
        trace.set_tracer_provider(provider)
    yield EXPORTER


def placed(order_id: str) -> dict[str, Any]:
    return new_event("com.example.order.placed", {"order": order_id}, source="/orders", id=order_id)


def _shipping_db(tmp_path: Path) -> Path:
    db = tmp_path / "shipping.db"
    with sqlite3.connect(db) as conn:
        conn.execute("CREATE TABLE shipments (order_id TEXT PRIMARY KEY)")
    (tmp_path / "shop_events.py").write_text(HANDLERS, encoding="utf-8")
    return db


def _env(tmp_path: Path) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(tmp_path), "OTEL_TRACES_EXPORTER": "console"}


@pytest.fixture
def console_spans(monkeypatch: pytest.MonkeyPatch) -> None:
    """Processes started after this (the consumer fixture copies the environment) write
    their spans to stderr, one JSON line each."""
    monkeypatch.setenv("OTEL_TRACES_EXPORTER", "console")


def _shipping_sink(tmp_path: Path, db: Path, log: Path) -> Service:
    """``serve sink`` with the shop's handler, writing its spans to ``log``."""
    command = ["serve", "sink", "--db", str(db), "--port", "0"]
    command += ["--handlers", "shop_events:HANDLERS"]
    return start_service(command, env=_env(tmp_path), stderr_path=log)


def spans_in(log: Path) -> list[dict[str, Any]]:
    """The spans a process's console exporter wrote: one JSON object per line."""
    found = []
    for line in log.read_text(encoding="utf-8").splitlines():
        if line.startswith("{") and '"context"' in line:
            found.append(json.loads(line))
    return found


def _hex(number: int, width: int) -> str:
    return f"0x{number:0{width}x}"


def _publish_in_a_span(source: Path, order_id: str) -> tuple[str, str]:
    """The business write in its own span; returns that span's (trace id, span id) as the
    console exporter prints them."""
    with trace.get_tracer("orders").start_as_current_span("place order") as business:
        with Outbox(source) as outbox:
            outbox.publish(placed(order_id))
        context = business.get_span_context()
    return _hex(context.trace_id, 32), _hex(context.span_id, 16)


def test_publish_stores_the_active_span_and_a_given_traceparent_wins(
    tmp_path: Path, tracing: InMemorySpanExporter
) -> None:
    source = tmp_path / "source.db"
    trace_id, span_id = _publish_in_a_span(source, "o-1")
    own = "00-" + "ab" * 16 + "-" + "cd" * 8 + "-01"
    with trace.get_tracer("orders").start_as_current_span("another"), Outbox(source) as outbox:
        outbox.publish({**placed("o-2"), "traceparent": own})
    with Outbox(source) as outbox:
        outbox.publish(placed("o-3"))  # no span active: nothing added
        stored = {event["id"]: event for event in outbox.pending()}
    version, stored_trace, stored_span, _ = stored["o-1"]["traceparent"].split("-")
    assert (version, stored_trace, stored_span) == ("00", trace_id[2:], span_id[2:])
    assert stored["o-2"]["traceparent"] == own
    assert "traceparent" not in stored["o-3"]
    # The trace context is not content: the same event without it is a duplicate, no conflict.
    with Outbox(source) as outbox:
        outbox.publish(placed("o-1"))


@pytest.mark.slow
def test_one_trace_from_the_business_write_to_the_sinks_handler_over_http(
    tmp_path: Path, tracing: InMemorySpanExporter
) -> None:
    source, db = tmp_path / "source.db", _shipping_db(tmp_path)
    trace_id, business_span = _publish_in_a_span(source, "o-1")
    log, relay_log = tmp_path / "sink.log", tmp_path / "dispatch.log"
    with _shipping_sink(tmp_path, db, log) as sink:
        sent = run_cli(
            "dispatch", "--source", str(source), "--to", sink.base_url + "/events",
            env=_env(tmp_path),
        )  # fmt: skip
        assert sent.returncode == 0, sent.stderr
        relay_log.write_text(sent.stderr, encoding="utf-8")
    spans = {span["name"]: span for span in spans_in(log)}
    apply, ship = spans["apply com.example.order.placed"], spans["ship the order"]
    assert apply["context"]["trace_id"] == trace_id
    assert apply["parent_id"] == business_span  # a child of the business write's span
    assert apply["kind"] == "SpanKind.CONSUMER"
    assert apply["attributes"]["cloudevents.event_id"] == "o-1"
    assert ship["context"]["trace_id"] == trace_id
    assert ship["parent_id"] == apply["context"]["span_id"]  # the handler's span nests in it
    sends = [span for span in spans_in(relay_log) if span["name"].startswith("send ")]
    assert [span["parent_id"] for span in sends] == [business_span]
    assert sends[0]["context"]["trace_id"] == trace_id


@pytest.mark.slow
def test_one_trace_through_rabbitmq_into_the_consumers_handler(
    tmp_path: Path,
    tracing: InMemorySpanExporter,
    console_spans: None,
    rabbit: Rabbit,  # noqa: F811
    start_consumer: Callable[..., ConsumerProcess],  # noqa: F811
) -> None:
    source, db = tmp_path / "source.db", _shipping_db(tmp_path)
    trace_id, business_span = _publish_in_a_span(source, "o-9")
    exchange = f"test-otel-{uuid.uuid4().hex[:12]}"
    rabbit.channel.exchange_declare(exchange, "direct", durable=True)
    rabbit.channel.queue_bind(rabbit.queue, exchange, "com.example.order.placed")
    try:
        to = f"{AMQP}?exchange={exchange}"
        sent = run_cli("dispatch", "--source", str(source), "--to", to, env=_env(tmp_path))
        assert sent.returncode == 0, sent.stderr
        method, properties, _ = rabbit.channel.basic_get(rabbit.queue, auto_ack=False)
        assert properties.headers["traceparent"].split("-")[1] == trace_id[2:]
        rabbit.channel.basic_nack(method.delivery_tag, requeue=True)

        consumer = start_consumer(
            "--from", rabbit.url, "--db", str(db), "--handlers", "shop_events:HANDLERS"
        )
        eventually(lambda: counters(db)["applied"] == 1, "the order applied")
        assert consumer.stop(signal.SIGTERM) == 0
    finally:
        rabbit.channel.exchange_delete(exchange)
    spans = {span["name"]: span for span in spans_in(consumer.err)}
    apply = spans["apply com.example.order.placed"]
    assert (apply["context"]["trace_id"], apply["parent_id"]) == (trace_id, business_span)
    assert spans["ship the order"]["parent_id"] == apply["context"]["span_id"]


def test_nothing_of_opentelemetry_is_imported_unless_the_app_did(tmp_path: Path) -> None:
    script = f"""
import sys
import time
from ackledger import Inbox, Outbox, new_event
event = new_event("warehouse.stock.added", {{"sku": "tea", "qty": 1}}, source="/wh", id="w-1")
with Outbox({str(tmp_path / "o.db")!r}) as outbox:
    outbox.publish(event)
    pending = outbox.pending()
with Inbox({str(tmp_path / "i.db")!r}) as inbox:
    inbox.receive(pending[0])
from ackledger.cli import main
loaded = sorted(name for name in sys.modules if name.startswith("opentelemetry"))
assert not loaded, loaded
assert "traceparent" not in pending[0]
"""
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr


def test_an_unknown_exporter_is_one_line_exit_2(tmp_path: Path) -> None:
    done = run_cli(
        "dispatch", "--source", str(tmp_path / "s.db"), "--to", "http://127.0.0.1:9/events",
        env={**os.environ, "OTEL_TRACES_EXPORTER": "zipkin-please"},
    )  # fmt: skip
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1 and "OTEL_TRACES_EXPORTER" in done.stderr
    assert not (tmp_path / "s.db").exists()


@pytest.mark.slow
def test_a_relay_round_that_sends_is_a_span_and_an_idle_poll_is_none(
    tmp_path: Path, tracing: InMemorySpanExporter
) -> None:
    source, db = tmp_path / "source.db", _shipping_db(tmp_path)
    _publish_in_a_span(source, "o-5")
    log, relay_log = tmp_path / "sink.log", tmp_path / "relay.log"
    with _shipping_sink(tmp_path, db, log) as sink:
        with relay_log.open("w") as err:
            relay = subprocess.Popen(
                [sys.executable, "-m", "ackledger.cli", "relay", "--source", str(source),
                 "--to", sink.base_url + "/events", "--poll-interval", "0.05"],
                stdout=subprocess.DEVNULL, stderr=err, env=_env(tmp_path),
            )  # fmt: skip
        try:
            eventually(lambda: counters(db)["applied"] == 1, "the order applied")
            time.sleep(0.5)  # about ten idle polls
        finally:
            relay.send_signal(signal.SIGTERM)
            assert relay.wait(30) == 0
    rounds = [span for span in spans_in(relay_log) if span["name"] == "relay round"]
    assert len(rounds) == 1, rounds  # the round that sent; the idle polls made none
    assert rounds[0]["attributes"]["ackledger.acknowledged"] == 1
