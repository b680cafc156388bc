"""The NATS JetStream consumer (nats-py, asyncio): a durable pull consumer.

A committed message is acked, a permanent refusal is recorded and then ``term``ed (never
redelivered), a transient failure is ``nak``ed with its own backoff as the delay, so the server
holds it back while the messages behind it go on.
The durable consumer is created with explicit acks and ``max_ack_pending`` bounded if it does
not exist yet; an existing one is used as its owner configured it, and a fetch asks for no more
than its ``max_ack_pending``. Messages fetched but not
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
from ..envelope.message import CE_PREFIXES
from .consume import FAILED, REJECTED, Consumer, NatsSource, describe, logger

#: How long one fetch waits for messages: how late an idle consumer sees a stop request.
_FETCH_S = 0.5
#: How long the server waits for an ack before it redelivers (a consumer we create).
_ACK_WAIT_S = 30.0
#: An idle consumer asks this often whether its stream and durable still exist: a fetch from
#: a deleted one only ever times out, as an empty one does.
_CHECK_IDLE_S = 5.0


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
            _not_found(source, f"stream {source.stream!r} not found")
            return 1
        try:
            info = await js.consumer_info(source.stream, source.durable)
            batch = _batch_size(source.max_ack_pending, info.config.max_ack_pending)
        except NotFoundError:
            config = ConsumerConfig(
                durable_name=source.durable, ack_policy=AckPolicy.EXPLICIT,
                max_ack_pending=source.max_ack_pending, ack_wait=_ACK_WAIT_S,
            )  # fmt: skip
            await js.add_consumer(source.stream, config)
            batch = source.max_ack_pending
        subscription = await js.pull_subscribe_bind(source.durable, source.stream)
        log_event(
            logger, logging.INFO, "consuming", "consuming", broker=source.shown(), batch=batch
        )
        gone = await _loop(js, subscription, source, consumer, batch)
        if gone is not None:
            _not_found(source, gone)
            return 1
        await subscription.unsubscribe()
        return 0
    finally:
        # Acks are fire-and-forget publishes: flush them before the connection goes.
        try:
            await nc.flush(timeout=5)
        except (TimeoutError, NatsError) as exc:
            log_event(logger, logging.WARNING, "broker-error", describe(exc))
        await nc.close()


def _batch_size(ours: int, durables: int | None) -> int:
    """How many messages one fetch asks for: ours, but never more than the durable lets be
    unacknowledged at once (its owner's ``max_ack_pending``; -1 or none: no limit). Asking for
    more, the server sends what the limit allows and the fetch waits out its time-out for the
    rest: one message per half second from a durable made with a limit of one."""
    if durables is None or durables <= 0:
        return ours
    return min(ours, durables)


def _not_found(source: NatsSource, what: str) -> None:
    print(f"ackledger consume: {source.shown()}: {what}", file=sys.stderr)


async def _missing(js: JetStreamContext, source: NatsSource) -> str | None:
    """What of the source no longer exists (deleted while consuming), or None."""
    try:
        await js.stream_info(source.stream)
    except NotFoundError:
        return f"stream {source.stream!r} not found (deleted while consuming)"
    try:
        await js.consumer_info(source.stream, source.durable)
    except NotFoundError:
        return (
            f"durable consumer {source.durable!r} of stream {source.stream!r} not found "
            "(deleted while consuming)"
        )
    return None


async def _loop(
    js: JetStreamContext,
    subscription: JetStreamContext.PullSubscription,
    source: NatsSource,
    consumer: Consumer,
    batch: int,
) -> str | None:
    """Fetch and handle until a stop is asked (None), or the stream or durable is found
    deleted (what is missing: a permanent stop, no retry brings it back)."""
    loop = asyncio.get_running_loop()
    checked = loop.time()
    while not consumer.stop.requested:
        try:
            messages = await subscription.fetch(batch=batch, timeout=_FETCH_S)
        except TimeoutError:  # nats-py's own or asyncio's, as it happens: nothing came
            if loop.time() - checked >= _CHECK_IDLE_S:
                checked = loop.time()
                gone = await _missing(js, source)
                if gone is not None:
                    return gone
            continue
        except NotFoundError:
            gone = await _missing(js, source)
            if gone is not None:
                return gone
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
                return None
            if consumer.inbox.runs_user_code:
                # A user's handler runs in a worker thread, never on this event loop.
                verdict = await asyncio.to_thread(
                    consumer.handle, message.data, None, message.headers, CE_PREFIXES
                )
            else:
                verdict = consumer.handle(message.data, None, message.headers, CE_PREFIXES)
            if verdict.committed:
                await message.ack()
            elif verdict.outcome == REJECTED:
                await message.term()
            elif verdict.outcome == FAILED:
                await message.nak(delay=consumer.retry_delay(message.data, verdict))
    return None
