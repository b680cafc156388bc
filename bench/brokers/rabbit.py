"""RabbitMQ for the broker benchmark: a fresh exchange and durable queue, the raw floors, facts.

The floors are pika with no ackledger code: persistent (``delivery_mode=2``), ``mandatory``
publishes to a durable queue on a confirm channel, one at a time (wait for each confirm) and in
windows of W (publish W, then wait for all W confirms). A window of 16 is what one
``send_batch`` of our relay may do at most; 256 shows how far batching alone could go.
"""

from __future__ import annotations

import secrets
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

HOST = "127.0.0.1"
PORT = 5672


@dataclass(frozen=True)
class Route:
    """One run's durable exchange and queue, the queue bound under its own name."""

    exchange: str
    queue: str

    def url(self, routing_key: str | None = None) -> str:
        """Our relay's target URL for this route (a routing key no queue is bound to makes
        every publish unroutable)."""
        key = self.queue if routing_key is None else routing_key
        return f"amqp://guest:guest@{HOST}:{PORT}/%2F?exchange={self.exchange}&routing_key={key}"


def _connect() -> Any:
    import pika

    return pika.BlockingConnection(
        pika.ConnectionParameters(HOST, PORT, connection_attempts=1, socket_timeout=5)
    )


def available() -> str | None:
    try:
        _connect().close()
    except Exception as exc:
        return f"RabbitMQ not reachable at {HOST}:{PORT}: {type(exc).__name__}"
    return None


@contextmanager
def route(tag: str) -> Iterator[Route]:
    """A new durable direct exchange and durable classic queue; both deleted afterwards."""
    name = f"ackledger-bench-{tag}-{secrets.token_hex(4)}"
    # A connection per step: an idle blocking connection misses its heartbeats during a
    # long run and the broker drops it.
    conn = _connect()
    try:
        channel = conn.channel()
        channel.exchange_declare(name, "direct", durable=True)
        channel.queue_declare(name, durable=True)
        channel.queue_bind(name, name, name)
    finally:
        conn.close()
    try:
        yield Route(name, name)
    finally:
        conn = _connect()
        try:
            channel = conn.channel()
            channel.queue_delete(name)
            channel.exchange_delete(name)
        finally:
            conn.close()


@dataclass(frozen=True)
class QueueFacts:
    messages: int
    #: delivery_mode of the messages read back (up to ``sample``), by mode (1 or 2; 0: unset).
    modes: dict[int, int]


def facts(queue: str, sample: int = 200) -> QueueFacts:
    """How many messages the queue holds, and the delivery mode of the first ``sample``."""
    conn = _connect()
    try:
        channel = conn.channel()
        count = channel.queue_declare(queue, passive=True).method.message_count
        modes: Counter[int] = Counter()
        for _ in range(min(sample, count)):
            method, props, _body = channel.basic_get(queue, auto_ack=False)
            if method is None:
                break
            modes[props.delivery_mode or 0] += 1
        # Nothing was acknowledged: closing the channel puts them all back.
        return QueueFacts(count, dict(modes))
    finally:
        conn.close()


def floor_rate(body: bytes, total: int, window: int) -> float:
    """Messages/s of raw pika publishes, ``window`` in flight between confirms.

    Each window is published with ``mandatory``; the confirm channel's ack of the last one
    with ``multiple`` (or its own ack per message) settles it. A return or nack fails the run:
    a floor that lost messages would not be a floor.
    """
    import pika
    from pika.adapters.select_connection import SelectConnection

    with route(f"floor{window}") as where:
        state: dict[str, Any] = {"tag": 0, "acked": 0, "bad": 0, "channel": None}
        props = pika.BasicProperties(delivery_mode=2, content_type="application/cloudevents+json")

        def publish_window(conn: Any) -> None:
            channel = state["channel"]
            for _ in range(min(window, total - state["tag"])):
                state["tag"] += 1
                channel.basic_publish(where.exchange, where.queue, body, props, mandatory=True)

        def on_confirm(frame: Any) -> None:
            method = frame.method
            if isinstance(method, pika.spec.Basic.Nack):
                state["bad"] += 1
            state["acked"] = method.delivery_tag
            if state["acked"] >= total or state["bad"]:
                state["end"] = time.perf_counter()
                conn.close()
            elif state["acked"] == state["tag"]:
                publish_window(conn)

        def on_return(*_args: Any) -> None:
            state["bad"] += 1

        def on_select_ok(_frame: Any) -> None:
            state["start"] = time.perf_counter()
            publish_window(conn)

        def on_channel(channel: Any) -> None:
            state["channel"] = channel
            channel.add_on_return_callback(on_return)
            channel.confirm_delivery(on_confirm, callback=on_select_ok)

        conn = SelectConnection(
            pika.ConnectionParameters(HOST, PORT, heartbeat=0),
            on_open_callback=lambda c: c.channel(on_open_callback=on_channel),
            on_open_error_callback=lambda _c, exc: state.setdefault("error", exc),
            on_close_callback=lambda c, _exc: c.ioloop.stop(),
        )
        conn.ioloop.start()
        if "error" in state or state["bad"] or "end" not in state:
            raise RuntimeError(f"RabbitMQ floor (window {window}) failed: {state}")
        return float(total / (state["end"] - state["start"]))
