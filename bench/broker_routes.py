"""A broker route of its own, for a crash test or a kill campaign: where the relay publishes,
where the consumer reads, and a tap that sees every publish, re-sends included.

RabbitMQ: a fanout exchange with two durable queues bound to it, the consumer's and the tap's.
NATS JetStream: a stream over ``PREFIX.>`` with a durable consumer made beforehand with a short
ack wait (a killed consumer's messages come back in seconds, not nats-py's 30), and as the tap
a core subscription to the same subjects: it receives every publish, also the re-sends that
JetStream drops as duplicates (``Nats-Msg-Id``). Names are unique per route, so runs by
others on the same brokers never meet; ``close`` deletes what the route made.
"""

from __future__ import annotations

import asyncio
import threading
import time
import uuid
from collections import Counter
from typing import Any

from ackledger._core.closing import Closing
from ackledger.wire.loop_thread import LoopThread

AMQP = "amqp://guest:guest@127.0.0.1:5672/%2F"
NATS = "nats://127.0.0.1:4222"
BROKERS = ("amqp", "nats")
#: How long a consumer's unacked message waits before JetStream redelivers it (a route's own).
ACK_WAIT_S = 2.0


class Route(Closing):
    """One broker path: ``relay_url`` for ``--to``, ``consume_url`` for ``consume --from``."""

    kind = ""
    port = 0
    relay_url = ""
    consume_url = ""

    def relay_url_via(self, port: int) -> str:
        """``relay_url`` through another port of loopback (a fault proxy's)."""
        return self.relay_url.replace(f"127.0.0.1:{self.port}", f"127.0.0.1:{port}", 1)

    def seen(self) -> Counter[str]:
        """Publishes the broker took so far, by event id (a re-send counts again)."""
        raise NotImplementedError

    def stored(self) -> int:
        """Messages the broker holds for the consumer, delivered-unacked ones included."""
        raise NotImplementedError

    def left(self) -> int:
        """Messages the consumer has not acked (ask once it stopped: then unacked ones are
        back in the queue)."""
        raise NotImplementedError

    def seen_settled(self, quiet_s: float = 0.15, patience_s: float = 5.0) -> Counter[str]:
        """``seen`` once two looks ``quiet_s`` apart agree: what a killed publisher had put on
        the wire has reached the tap."""
        before = self.seen()
        end = time.monotonic() + patience_s
        while time.monotonic() < end:
            time.sleep(quiet_s)
            now = self.seen()
            if now == before:
                return now
            before = now
        return before


class AmqpRoute(Route):
    kind = "amqp"
    port = 5672

    def __init__(self, unique: str | None = None) -> None:
        import pika

        tag = unique or uuid.uuid4().hex[:12]
        self.exchange, self.queue, self.tap = (f"camp-{part}-{tag}" for part in ("x", "q", "tap"))
        self.relay_url = f"{AMQP}?exchange={self.exchange}"
        self.consume_url = f"{AMQP}?queue={self.queue}"
        self._connection = pika.BlockingConnection(pika.URLParameters(AMQP))
        self.channel: Any = self._connection.channel()
        self.channel.exchange_declare(self.exchange, "fanout", durable=True)
        for queue in (self.queue, self.tap):
            self.channel.queue_declare(queue, durable=True)
            self.channel.queue_bind(queue, self.exchange)
        self._seen: Counter[str] = Counter()

    def seen(self) -> Counter[str]:
        while True:
            method, properties, _ = self.channel.basic_get(self.tap, auto_ack=True)
            if method is None:
                return Counter(self._seen)
            self._seen[str(properties.message_id)] += 1

    def stored(self) -> int:
        return int(self.channel.queue_declare(self.queue, passive=True).method.message_count)

    def left(self) -> int:
        return self.stored()  # an acked message leaves the queue

    def close(self) -> None:
        try:
            for queue in (self.queue, self.tap):
                self.channel.queue_delete(queue)
            self.channel.exchange_delete(self.exchange)
        finally:
            self._connection.close()


class NatsRoute(Route):
    kind = "nats"
    port = 4222
    durable = "inbox"

    def __init__(self, unique: str | None = None, *, duplicate_window: float = 0) -> None:
        tag = unique or uuid.uuid4().hex[:12]
        self.stream, self.prefix = f"CAMP_{tag}", f"camp.{tag}"
        self.relay_url = f"{NATS}?subject={self.prefix}&stream={self.stream}"
        self.consume_url = f"{NATS}?stream={self.stream}&durable={self.durable}"
        self._seen: Counter[str] = Counter()
        self._lock = threading.Lock()
        self._loop = LoopThread("camp-tap")
        self._client: Any = None
        try:
            self._loop.run(self._open(duplicate_window))
        except BaseException:
            self._loop.stop()
            raise

    async def _open(self, duplicate_window: float) -> None:
        import nats
        from nats.js.api import AckPolicy, ConsumerConfig

        self._client = await nats.connect(NATS)
        js = self._client.jetstream()
        await js.add_stream(
            name=self.stream, subjects=[f"{self.prefix}.>"], duplicate_window=duplicate_window
        )
        config = ConsumerConfig(
            durable_name=self.durable, ack_policy=AckPolicy.EXPLICIT, ack_wait=ACK_WAIT_S,
            max_ack_pending=16,
        )  # fmt: skip
        await js.add_consumer(self.stream, config)
        await self._client.subscribe(f"{self.prefix}.>", cb=self._tapped)

    async def _tapped(self, message: Any) -> None:
        with self._lock:
            self._seen[(message.headers or {}).get("ce-id", "?")] += 1

    def seen(self) -> Counter[str]:
        self._loop.run(self._client.flush(timeout=5))
        with self._lock:
            return Counter(self._seen)

    async def _stream_state(self) -> tuple[int, int, int]:
        js = self._client.jetstream()
        stream = await js.stream_info(self.stream)
        consumer = await js.consumer_info(self.stream, self.durable)
        return stream.state.messages, consumer.num_pending, consumer.num_ack_pending

    def stored(self) -> int:
        return self._loop.run(self._stream_state())[0]

    def left(self) -> int:
        _, pending, unacked = self._loop.run(self._stream_state())
        return pending + unacked  # the stream keeps acked messages: its count says nothing

    def close(self) -> None:
        async def shut() -> None:
            try:
                await self._client.jetstream().delete_stream(self.stream)
            finally:
                await self._client.close()

        try:
            self._loop.run(asyncio.wait_for(shut(), 10))
        finally:
            self._loop.stop()


def open_route(kind: str, **options: Any) -> Route:
    if kind == "amqp":
        return AmqpRoute(**options)
    if kind == "nats":
        return NatsRoute(**options)
    raise ValueError(f"broker: one of {', '.join(BROKERS)}, got {kind!r}")
