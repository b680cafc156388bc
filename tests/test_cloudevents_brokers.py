"""CloudEvents in both content modes through the real brokers to a real ``consume`` process:
what the CNCF SDK publishes (its RabbitMQ binding, its AMQP binding's ``cloudEvents_``
properties, its HTTP binding's ``ce-`` headers over NATS) and what our own senders publish in
binary mode (``mode=binary``) are applied once, and read back as the same events."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import nats
import pika
import pytest
from cloudevents.core.bindings import amqp as sdk_amqp
from cloudevents.core.bindings import rabbitmq as sdk_rabbitmq
from cloudevents.core.bindings.http import to_binary_event, to_structured_event
from cloudevents.core.v1.event import CloudEvent as CoreEvent

import ackledger
from ackledger import warehouse

from .test_consume import (  # noqa: F401 - the fixtures are found by their names here
    AMQP,
    NATS,
    ConsumerProcess,
    Rabbit,
    _manage,
    counters,
    eventually,
    inventory,
    rabbit,
    start_consumer,
)

pytestmark = pytest.mark.slow


def sdk_event(event_id: str, qty: int) -> CoreEvent:
    attributes = {"type": warehouse.TYPE, "source": "/sdk-shop", "id": event_id, "region": "eu"}
    return CoreEvent(attributes, {"sku": "tea", "qty": qty})


def publish(queue: Rabbit, body: bytes, content_type: str | None, headers: dict[str, Any]) -> None:
    properties = pika.BasicProperties(content_type=content_type, headers=headers, delivery_mode=2)
    queue.channel.basic_publish("", queue.queue, body, properties, mandatory=True)


def test_rabbitmq_applies_the_sdks_messages_and_our_binary_mode(
    tmp_path: Path,
    rabbit: Rabbit,  # noqa: F811
    start_consumer: Callable[..., ConsumerProcess],  # noqa: F811
) -> None:
    db = tmp_path / "inbox.db"
    binding = sdk_rabbitmq.to_binary_event(sdk_event("r 1/ü", 1))
    publish(rabbit, binding.body, binding.content_type, binding.headers)
    structured = sdk_rabbitmq.to_structured_event(sdk_event("r-2", 2))
    publish(rabbit, structured.body, structured.content_type, structured.headers)
    amqp = sdk_amqp.to_binary_event(sdk_event("r-3", 4))
    publish(rabbit, amqp.application_data, "application/json", amqp.application_properties)
    colon = {k.replace("_", ":", 1): v for k, v in amqp.application_properties.items()}
    publish(rabbit, amqp.application_data, "application/json", {**colon, "cloudEvents:id": "r-4"})
    # Our sender's binary mode, through an exchange bound to the queue and to a copy of it.
    copy = rabbit.queue + "-copy"
    rabbit.channel.queue_declare(copy)
    for queue in (rabbit.queue, copy):
        rabbit.channel.queue_bind(queue, "amq.direct", warehouse.TYPE)
    try:
        ours = ackledger.sender(f"{AMQP}?exchange=amq.direct&mode=binary")
        try:
            assert ours.send(warehouse.event("r-5", "tea", 8, source="/ours")) is True
        finally:
            ours.close()
        _, properties, body = rabbit.channel.basic_get(copy, auto_ack=True)
    finally:
        rabbit.channel.queue_unbind(rabbit.queue, "amq.direct", warehouse.TYPE)
        rabbit.channel.queue_delete(copy)
    assert (properties.content_type, body) == ("application/json", b'{"qty":8,"sku":"tea"}')
    assert properties.headers["cloudEvents:id"] == "r-5"
    consumer = start_consumer("--from", rabbit.url, "--db", str(tmp_path / "inbox.db"))
    eventually(lambda: counters(db)["applied"] == 5, "all five applied")
    assert consumer.stop() == 0
    assert inventory(db, "tea") == 1 + 2 + 4 + 4 + 8
    assert "rejected:" not in consumer.stderr
    with ackledger.Inbox(db) as inbox:
        assert inbox.receipt("r 1/ü", source="/sdk-shop") is not None


@pytest.fixture
def stream() -> Iterator[tuple[str, str]]:
    """A stream of its own over ``PREFIX.>``: (its name, PREFIX)."""
    unique = uuid.uuid4().hex[:12]
    name, prefix = f"TEST_CE_{unique}", f"test.ce.{unique}"
    asyncio.run(_manage(lambda js: js.add_stream(name=name, subjects=[prefix + ".>"])))
    try:
        yield name, prefix
    finally:
        asyncio.run(_manage(lambda js: js.delete_stream(name)))


def test_nats_applies_the_sdks_messages_and_our_binary_mode(
    tmp_path: Path,
    stream: tuple[str, str],
    start_consumer: Callable[..., ConsumerProcess],  # noqa: F811
) -> None:
    db = tmp_path / "inbox.db"
    name, prefix = stream
    binary = to_binary_event(sdk_event("n 1/ü", 1))  # ce- values percent-encoded
    structured = to_structured_event(sdk_event("n-2", 2))

    async def go() -> None:
        nc = await nats.connect(NATS)
        js = nc.jetstream()
        await js.publish(prefix + ".sdk", binary.body, headers=dict(binary.headers))
        await js.publish(prefix + ".sdk", structured.body, headers=dict(structured.headers))
        await nc.close()

    asyncio.run(go())
    ours = ackledger.sender(f"{NATS}?subject={prefix}&mode=binary")
    try:
        assert ours.send(warehouse.event("n-3", "tea", 4, source="/our-shop")) is True
    finally:
        ours.close()
    consumer = start_consumer("--from", f"{NATS}?stream={name}&durable=inbox", "--db", str(db))
    eventually(lambda: counters(db)["applied"] == 3, "all three applied")
    assert consumer.stop() == 0
    assert inventory(db, "tea") == 1 + 2 + 4
    assert "rejected:" not in consumer.stderr
    with ackledger.Inbox(db) as inbox:
        assert inbox.receipt("n 1/ü", source="/sdk-shop") is not None
        assert inbox.receipt("n-3", source="/our-shop") is not None
