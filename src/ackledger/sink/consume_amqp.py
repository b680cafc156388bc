"""The RabbitMQ consumer (AMQP 0-9-1, pika): manual acks, a bounded prefetch.

A committed message is acked; a permanent refusal (recorded first) is
``basic_reject(requeue=False)``, which RabbitMQ routes to the queue's dead-letter exchange if
it has one; a transient failure is held unacked for its own backoff while the consumer goes on
with the other deliveries, and is then nacked with requeue (so it comes back after messages
that were behind it: on a queue, a failing message gives up its place). A lost connection
is reopened after the same backoff: whatever was unacked on it comes back from the broker, and
the inbox makes the committed ones duplicates.
"""

from __future__ import annotations

import contextlib
import heapq
import logging
import sys
import time
from typing import Any

import pika
from pika.exceptions import (
    AMQPError,
    ChannelClosedByBroker,
    ConnectionClosedByBroker,
    ProbableAccessDeniedError,
    ProbableAuthenticationError,
)

from .._core.logline import log_event
from .consume import FAILED, REJECTED, AmqpSource, Consumer, describe, logger

#: How often an idle consumer looks at the stop flag, in seconds.
_IDLE_S = 0.25
#: The broker's answers that say the queue or the access to it is not there: no retry helps.
_NOT_THERE = {403: "access refused", 404: "not found"}
#: A connection closed with these (ACCESS_REFUSED, NOT_ALLOWED: a vhost that does not exist or
#: is not the user's, on the brokers that say so) is refused, not lost.
_LOGIN_REFUSED = (403, 530)


def _parameters(source: AmqpSource) -> Any:
    options: dict[str, Any] = {}
    if source.user is not None:
        options["credentials"] = pika.PlainCredentials(source.user, source.password or "")
    return pika.ConnectionParameters(
        host=source.host, port=source.port, virtual_host=source.vhost,
        connection_attempts=1, socket_timeout=5, blocked_connection_timeout=30, **options,
    )  # fmt: skip


def consume_amqp(source: AmqpSource, consumer: Consumer) -> int:
    shown = source.shown()
    while not consumer.stop.requested:
        connection = None
        try:
            connection = pika.BlockingConnection(_parameters(source))
            _consume(connection, source, consumer)
        except (ProbableAuthenticationError, ProbableAccessDeniedError) as exc:
            # pika's names guess at the cause from how the broker hung up (its text may read
            # "StreamLostError"); what is known is that this login was refused.
            print(_login_refused(source, type(exc).__name__), file=sys.stderr)
            return 1
        except ConnectionClosedByBroker as exc:
            if exc.reply_code not in _LOGIN_REFUSED:
                _reconnect_later(consumer, exc, shown)
                continue
            print(_login_refused(source, exc.reply_text), file=sys.stderr)
            return 1
        except ChannelClosedByBroker as exc:
            if exc.reply_code in _NOT_THERE:
                print(
                    f"ackledger consume: {shown}: queue {source.queue!r} "
                    f"{_NOT_THERE[exc.reply_code]} ({exc.reply_text})",
                    file=sys.stderr,
                )
                return 1
            _reconnect_later(consumer, exc, shown)
        except (AMQPError, OSError) as exc:  # OSError: a name that does not resolve, a reset
            _reconnect_later(consumer, exc, shown)
        finally:
            if connection is not None and connection.is_open:
                # Closing a connection the broker is dropping: nothing is lost.
                with contextlib.suppress(AMQPError):
                    connection.close()
    return 0


def _login_refused(source: AmqpSource, why: str) -> str:
    who = "" if source.user is None else f"user {source.user!r} on "
    return (
        f"ackledger consume: {source.shown()}: access refused: the broker refused {who}vhost "
        f"{source.vhost!r} (a wrong user or password, no such vhost, or no permission on it; "
        f"{why})"
    )


def _reconnect_later(consumer: Consumer, exc: Exception, shown: str) -> None:
    delay = consumer.backoff.next_delay()
    log_event(
        logger, logging.WARNING, "broker-error", describe(exc), broker=shown,
        retry_in_s=round(delay, 3),
    )  # fmt: skip
    _wait(delay, consumer)


def _wait(seconds: float, consumer: Consumer) -> None:
    """Sleep in short slices: a stop request ends it."""
    end = time.monotonic() + seconds
    while not consumer.stop.requested:
        left = end - time.monotonic()
        if left <= 0:
            return
        time.sleep(min(left, _IDLE_S))


def _consume(connection: Any, source: AmqpSource, consumer: Consumer) -> None:
    channel = connection.channel()
    channel.basic_qos(prefetch_count=source.prefetch)
    messages = channel.consume(source.queue, auto_ack=False, inactivity_timeout=_IDLE_S)
    log_event(logger, logging.INFO, "consuming", "consuming", broker=source.shown())
    # Failed deliveries waiting out their backoff, as (when due, tag): a prefetch slot each.
    held: list[tuple[float, int]] = []
    for method, properties, body in messages:
        _requeue_due(channel, held)
        if method is None:  # idle: a chance to look at the stop flag and the held ones
            if consumer.stop.requested:
                break
            continue
        verdict = consumer.handle(body, properties.content_type, properties.headers)
        tag = method.delivery_tag
        if verdict.committed:
            channel.basic_ack(tag)
        elif verdict.outcome == REJECTED:
            channel.basic_reject(tag, requeue=False)
        elif verdict.outcome == FAILED:
            due = time.monotonic() + consumer.retry_delay(body, verdict)
            heapq.heappush(held, (due, tag))
        if consumer.stop.requested:
            break
    # Held and prefetched messages not yet handled go back to the queue, in their order.
    channel.cancel()
    channel.close()


def _requeue_due(channel: Any, held: list[tuple[float, int]]) -> None:
    now = time.monotonic()
    while held and held[0][0] <= now:
        _, tag = heapq.heappop(held)
        channel.basic_nack(tag, requeue=True)
