"""The NATS JetStream consumer (nats-py, asyncio): a durable pull consumer.

A committed message is acked, a permanent refusal is ``term``ed (never redelivered), a
transient failure is ``nak``ed with the backoff as its delay, so the server holds it back.
The durable consumer is created with explicit acks and ``max_ack_pending`` bounded if it does
not exist yet; an existing one is used as its owner configured it. Messages fetched but not
yet handled when a stop is requested are nacked without delay, so they come back at once.
"""

from __future__ import annotations

import asyncio
import logging
import sys

import nats
from nats.aio.client import Client
from nats.errors import Error as NatsError
from nats.js.api import AckPolicy, ConsumerConfig
from nats.js.client import JetStreamContext
from nats.js.errors import NotFoundError

from .._core.logline import log_event
from .consume import FAILED, REJECTED, Consumer, NatsSource, describe, logger

#: How long one fetch waits for messages: how late an idle consumer sees a stop request.
_FETCH_S = 0.5
#: How long the server waits for an ack before it redelivers (a consumer we create).
_ACK_WAIT_S = 30.0


def consume_nats(source: NatsSource, consumer: Consumer) -> int:
    return asyncio.run(_consume(source, consumer))


async def _on_error(exc: Exception) -> None:
    log_event(logger, logging.WARNING, "broker-error", describe(exc))


async def _connect(source: NatsSource, consumer: Consumer) -> Client | None:
    """Connect, retrying after the backoff; None if a stop was requested first."""
    while not consumer.stop.requested:
        try:
            return await nats.connect(
                servers=[f"nats://{source.host}:{source.port}"], user=source.user,
                password=source.password, connect_timeout=5, max_reconnect_attempts=-1,
                error_cb=_on_error, allow_reconnect=True,
            )  # fmt: skip
        except Exception as exc:  # nats-py raises OSError, its own errors, or a time-out
            delay = consumer.backoff.next_delay()
            log_event(
                logger, logging.WARNING, "broker-error", describe(exc), broker=source.shown(),
                retry_in_s=round(delay, 3),
            )  # fmt: skip
            await _sleep(delay, consumer)
    return None


async def _sleep(seconds: float, consumer: Consumer) -> None:
    loop = asyncio.get_running_loop()
    end = loop.time() + seconds
    while not consumer.stop.requested and loop.time() < end:
        await asyncio.sleep(min(0.25, end - loop.time()))


async def _consume(source: NatsSource, consumer: Consumer) -> int:
    nc = await _connect(source, consumer)
    if nc is None:
        return 0
    try:
        js = nc.jetstream()
        try:
            await js.stream_info(source.stream)
        except NotFoundError:
            print(f"ackledger consume: {source.shown()}: stream {source.stream!r} not found",
                  file=sys.stderr)  # fmt: skip
            return 1
        try:
            await js.consumer_info(source.stream, source.durable)
        except NotFoundError:
            config = ConsumerConfig(
                durable_name=source.durable, ack_policy=AckPolicy.EXPLICIT,
                max_ack_pending=source.max_ack_pending, ack_wait=_ACK_WAIT_S,
            )  # fmt: skip
            await js.add_consumer(source.stream, config)
        subscription = await js.pull_subscribe_bind(source.durable, source.stream)
        log_event(logger, logging.INFO, "consuming", "consuming", broker=source.shown())
        await _loop(subscription, source, consumer)
        await subscription.unsubscribe()
        return 0
    finally:
        # Acks are fire-and-forget publishes: flush them before the connection goes.
        try:
            await nc.flush(timeout=5)
        except (TimeoutError, NatsError) as exc:
            log_event(logger, logging.WARNING, "broker-error", describe(exc))
        await nc.close()


async def _loop(
    subscription: JetStreamContext.PullSubscription, source: NatsSource, consumer: Consumer
) -> None:
    while not consumer.stop.requested:
        try:
            messages = await subscription.fetch(batch=source.max_ack_pending, timeout=_FETCH_S)
        except TimeoutError:  # nats-py's own or asyncio's, as it happens: nothing came
            continue
        except NatsError as exc:  # disconnected: the client reconnects by itself
            delay = consumer.backoff.next_delay()
            log_event(logger, logging.WARNING, "broker-error", describe(exc),
                      retry_in_s=round(delay, 3))  # fmt: skip
            await _sleep(delay, consumer)
            continue
        for index, message in enumerate(messages):
            if consumer.stop.requested:
                for left in messages[index:]:
                    await left.nak()
                return
            if consumer.inbox.runs_user_code:
                # A user's handler runs in a worker thread, never on this event loop.
                verdict = await asyncio.to_thread(consumer.handle, message.data)
            else:
                verdict = consumer.handle(message.data)
            if verdict.committed:
                await message.ack()
            elif verdict.outcome == REJECTED:
                await message.term()
            elif verdict.outcome == FAILED:
                await message.nak(delay=consumer.backoff.next_delay())
