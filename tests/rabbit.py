"""A RabbitMQ queue of one test alone, on the local broker, and publishing events to it."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pika

from ackledger.envelope import canonical_json

BROKER = "amqp://guest:guest@127.0.0.1:5672/%2F"


@contextmanager
def rabbit_queue(prefix: str) -> Iterator[tuple[str, Any]]:
    """A new queue named ``prefix-…``: its ``consume --from`` URL and a channel to publish
    on; deleted at the end."""
    queue = f"{prefix}-{uuid.uuid4().hex[:12]}"
    connection = pika.BlockingConnection(pika.URLParameters(BROKER))
    channel = connection.channel()
    channel.queue_declare(queue)
    try:
        yield f"{BROKER}?queue={queue}", channel
    finally:
        channel.queue_delete(queue)
        connection.close()


def publish(channel: Any, url: str, event: dict[str, Any]) -> None:
    """``event`` to the queue of ``url``, structured mode, persistent."""
    properties = pika.BasicProperties(content_type="application/cloudevents+json", delivery_mode=2)
    queue = url.rpartition("queue=")[2]
    channel.basic_publish("", queue, canonical_json(event).encode(), properties)
