"""The NATS JetStream sender: returns True only on a PubAck of the right stream.

A message is published to ``PREFIX.<type>`` (``nats_target``) with a reply subject, as
``js.publish`` does; JetStream answers there with a PubAck. The ACK is a PubAck that names a
stream and a sequence (with ``stream=``: that stream, which the server checks as well through
``Nats-Expected-Stream``); a ``duplicate`` PubAck is an ACK too, the broker's twin of the
inbox's "duplicate". The replies are read by this module rather than by nats-py's
``publish_async``: that one loses an error PubAck (its reply callback raises instead of
failing the future), which would turn a refusal into a time-out.

A batch writes its messages one after another on one connection, so the stream's order is
the outbox's, and waits for their PubAcks together; its result is the acknowledged prefix.

What is not an ACK, told so that the relay's policy can judge it as it judges an HTTP sink:
a refusal is ``NotAcknowledged`` (``send``) or ``refusal`` (``send_batch``) with a status
code. JetStream's API errors carry HTTP-style codes already (400 bad request, e.g. another
stream than ``stream=``; 503 unavailable), kept as they are. No responders means no stream
covers the subject: NATS says 503, but waiting will not change it, so it is given 404
(JetStream's "not found"): permanent. A time-out raises ``TimeoutError`` and a lost
connection ``ConnectionError`` (transient); after either the next send connects afresh.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import math
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .._core.extras import needing_extra
from ..envelope import canonical_json, validate_cloudevent
from ..envelope.message import binary_body
from ..errors import AckledgerError, NotAcknowledged
from .loop_thread import LoopThread
from .nats_target import GIVEN_SKIP, STORED_SKIP, check_nats_target, headers_of, subject_of
from .sender import Refusal
from .stored import Stored
from .targets import check_timeout

if TYPE_CHECKING:
    from nats.aio.client import Client
    from nats.aio.msg import Msg

MAX_BATCH = 16
#: The status given to "no responders": no stream listens on the subject (see above).
NO_STREAM = 404

Message = tuple[str, bytes, dict[str, str]]


def _nats_client() -> Client:
    with needing_extra("nats://"):
        from nats.aio.client import Client
    return Client()


def judge(reply: Msg, expected_stream: str | None) -> NotAcknowledged | None:
    """None for a PubAck (of ``expected_stream``, if given); else why it is not one."""
    headers = reply.headers or {}
    if headers.get("Status") == "503" and not reply.data:
        return NotAcknowledged("no stream covers this subject (no responders)", status=NO_STREAM)
    try:
        answer = json.loads(reply.data)
    except ValueError:
        return NotAcknowledged("the answer is not JSON, so not a PubAck")
    if not isinstance(answer, dict):
        return NotAcknowledged("the answer is not a JSON object, so not a PubAck")
    error = answer.get("error")
    if error is not None:
        error = error if isinstance(error, dict) else {}
        code = error.get("code")
        return NotAcknowledged(
            f"error PubAck: code={code} err_code={error.get('err_code')} "
            f"{error.get('description', '')}".rstrip(),
            status=code if type(code) is int else None,
        )
    stream, seq = answer.get("stream"), answer.get("seq")
    if not isinstance(stream, str) or not stream or type(seq) is not int or seq < 1:
        return NotAcknowledged("the answer names no stream and sequence, so not a PubAck")
    if expected_stream is not None and stream != expected_stream:
        # The server refuses this itself (Nats-Expected-Stream); checked again, as evidence.
        return NotAcknowledged(
            f"the PubAck names stream {stream!r}, not {expected_stream!r}", status=400
        )
    return None


@dataclass
class Flight:
    """One batch published and not yet judged (``publish_stored``'s handle)."""

    ids: list[str]
    #: Per message: None while its PubAck is awaited (or given), else why it failed already.
    errors: list[BaseException | None]
    futures: list[asyncio.Future[Msg]]
    tokens: list[str]
    conn: _Connection | None
    deadline: float


@dataclass
class _Connection:
    client: Client
    inbox: str
    #: The reply token of each message waiting for its PubAck.
    waiting: dict[str, asyncio.Future[Msg]]


class NatsSender:
    """Publishes to JetStream; ``send`` is True only on the PubAck (see the module docstring)."""

    def __init__(
        self, url: str, *, timeout: float = 5.0, allowed_hosts: Iterable[str] | None = None
    ) -> None:
        # The target first: a refused URL is refused before nats-py is even imported.
        self.target = check_nats_target(url, allowed_hosts)
        self.timeout = check_timeout(timeout)
        _nats_client()  # says now, not at the first send, that the extra is missing
        self.refusal: Refusal | None = None
        self._loop = LoopThread("ackledger-nats")
        self._connection: _Connection | None = None
        self._tokens = itertools.count()
        #: What nats-py's error callback last said: the cause behind its "no servers".
        self._last_error: BaseException | None = None

    def __repr__(self) -> str:
        return f"NatsSender({self.target.server}, subject={self.target.prefix!r})"

    def send(self, event: dict[str, Any]) -> bool:
        return self._one(self._message(validate_cloudevent(event)))

    def send_stored_event(self, event: Stored) -> bool:
        """``send`` of an event as the outbox stored it (``wire/stored.py``): the body is
        the stored text, validated when it was published, not validated again here."""
        return self._one(self._stored_message(event))

    def _one(self, message: Message) -> bool:
        (error,) = self._loop.run(self._round([message]))
        if error is not None:
            raise error
        return True

    def send_batch(self, events: list[dict[str, Any]]) -> int:
        # Forget the last answer first: a batch is judged by its own outcomes only.
        self.refusal = None
        if not isinstance(events, list) or not 1 <= len(events) <= MAX_BATCH:
            raise ValueError(f"events: must be a list of 1-{MAX_BATCH} events")
        messages = [self._message(validate_cloudevent(item)) for item in events]
        return self._batch([str(item.get("id")) for item in events], messages)

    def send_stored(self, events: Sequence[Stored]) -> int:
        """``send_batch`` of events as the outbox stored them (``wire/stored.py``): the body
        is the stored text, validated when it was published, not validated again here."""
        self.refusal = None
        if not 1 <= len(events) <= MAX_BATCH:
            raise ValueError(f"events: must be 1-{MAX_BATCH} stored events")
        messages = [self._stored_message(event) for event in events]
        return self._batch([event.id for event in events], messages)

    def publish_stored(self, events: Sequence[Stored]) -> Flight:
        """The first half of ``send_stored``: publish the batch now and return at once; its
        PubAcks are collected by ``confirmed``. Batches published one after another on the
        same connection are in flight together; each is judged by its own PubAcks only."""
        if not 1 <= len(events) <= MAX_BATCH:
            raise ValueError(f"events: must be 1-{MAX_BATCH} stored events")
        messages = [self._stored_message(event) for event in events]
        return self._loop.run(self._launch([event.id for event in events], messages))

    def confirmed(self, flight: Flight) -> int:
        """The second half of ``send_stored``: wait (up to the time-out counted from the
        publish) for the batch's PubAcks; its acknowledged prefix, as ``send_stored``."""
        self.refusal = None
        return self._prefix(flight.ids, self._loop.run(self._collect(flight)))

    def settled(self, flight: Flight) -> bool:
        """Whether ``confirmed(flight)`` would return without waiting: every PubAck came (or
        the message failed already), or the deadline passed."""
        if time.monotonic() >= flight.deadline:
            return True
        return all(future.done() for future in flight.futures)

    def _batch(self, ids: list[str], messages: list[Message]) -> int:
        return self._prefix(ids, self._loop.run(self._round(messages)))

    def _prefix(self, ids: list[str], errors: list[BaseException | None]) -> int:
        acked = next((n for n, error in enumerate(errors) if error is not None), len(errors))
        if acked < len(ids):
            error = errors[acked]
            if acked == 0 and not isinstance(error, NotAcknowledged):
                # Nothing confirmed and no answer from the broker: a failure, as over HTTP.
                assert error is not None
                raise error
            status = error.status if isinstance(error, NotAcknowledged) else None
            self.refusal = Refusal(ids[acked], status, str(error), protocol="JetStream")
        return acked

    def close(self) -> None:
        if self._loop.running:
            self._loop.run(self._disconnect())
        self._loop.stop()

    def _stored_message(self, event: Stored) -> Message:
        return self._of(event.attributes, event.text, STORED_SKIP)

    def _message(self, event: dict[str, Any]) -> Message:
        return self._of(event, canonical_json(event), GIVEN_SKIP)

    def _of(self, event: Mapping[str, Any], text: str, skip: frozenset[str]) -> Message:
        """The message of a valid event whose canonical JSON is ``text``: structured, or
        binary (the data as the body) when the target says so."""
        subject = subject_of(self.target.prefix, event)
        if self.target.binary:
            content_type, body = binary_body(event)
            return subject, body, headers_of(event, self.target.stream, skip, content_type)
        return subject, text.encode(), headers_of(event, self.target.stream, skip)

    async def _round(self, messages: list[Message]) -> list[BaseException | None]:
        """Publish in order, then wait for the PubAcks together: per message, None for an
        ACK or what it got instead."""
        return await self._collect(await self._launch([], messages))

    async def _launch(self, ids: list[str], messages: list[Message]) -> Flight:
        """Publish in order without waiting for the PubAcks; a message that could not be
        written has its failure in the flight's ``errors`` already."""
        errors: list[BaseException | None] = [None] * len(messages)
        futures: list[asyncio.Future[Msg]] = []
        tokens: list[str] = []
        conn: _Connection | None = None
        try:
            conn = await self._connected()
            loop = asyncio.get_running_loop()
            async with asyncio.timeout(self.timeout):
                for subject, body, headers in messages:
                    token = str(next(self._tokens))
                    future: asyncio.Future[Msg] = loop.create_future()
                    conn.waiting[token] = future
                    tokens.append(token)
                    futures.append(future)
                    reply = f"{conn.inbox}.{token}"
                    await conn.client.publish(subject, body, reply=reply, headers=headers)
        except Exception as exc:
            # Messages already written may still be confirmed; the rest failed with this.
            failure = self._transport_failure(exc)
            for n in range(len(futures), len(messages)):
                errors[n] = failure
        return Flight(ids, errors, futures, tokens, conn, time.monotonic() + self.timeout)

    async def _collect(self, flight: Flight) -> list[BaseException | None]:
        """Wait for a flight's PubAcks until its deadline and judge each one."""
        errors, futures, conn = flight.errors, flight.futures, flight.conn
        if futures:
            await asyncio.wait(futures, timeout=max(0.0, flight.deadline - time.monotonic()))
        for n, future in enumerate(futures):
            if future.done() and not future.cancelled():
                errors[n] = judge(future.result(), self.target.stream)
            elif errors[n] is None:
                errors[n] = TimeoutError(
                    f"no PubAck from NATS at {self.target.server} within {self.timeout:g}s"
                )
        if conn is not None:
            for token in flight.tokens:
                conn.waiting.pop(token, None)
        if any(isinstance(error, OSError) for error in errors) and conn is self._connection:
            # The connection's state is unknown: the next send connects afresh (unless it
            # did already: a newer connection's batches are judged on their own).
            await self._disconnect()
        return errors

    def _transport_failure(self, exc: BaseException) -> BaseException:
        # asyncio's and nats-py's time-outs are TimeoutErrors (OSErrors) without a message.
        if isinstance(exc, TimeoutError):
            return TimeoutError(f"NATS at {self.target.server}: no answer in {self.timeout:g}s")
        if isinstance(exc, (OSError, AckledgerError)):
            return exc
        cause = self._last_error or exc
        text = f"{type(cause).__name__}: {cause}".rstrip(": ")
        failure = ConnectionError(f"NATS at {self.target.server}: {text}")
        failure.__cause__ = exc
        return failure

    async def _connected(self) -> _Connection:
        conn = self._connection
        if conn is not None and conn.client.is_connected:
            return conn
        await self._disconnect()
        self._last_error = None

        async def remember(exc: Exception) -> None:
            # nats-py would log it at ERROR with a traceback; the send's failure says it.
            self._last_error = exc

        client = _nats_client()
        target = self.target
        try:
            async with asyncio.timeout(self.timeout):
                await client.connect(
                    servers=[target.server],
                    user=target.user,
                    password=target.password,
                    name="ackledger",
                    # Whole seconds here; the time-out around it is the exact bound.
                    connect_timeout=max(1, math.ceil(self.timeout)),
                    # The relay owns retries and backoff: no reconnecting behind its back
                    # (nats-py tries a server twice at most with these).
                    allow_reconnect=False,
                    max_reconnect_attempts=1,
                    reconnect_time_wait=0,
                    error_cb=remember,
                )
                waiting: dict[str, asyncio.Future[Msg]] = {}
                inbox = client.new_inbox()

                async def on_reply(msg: Msg) -> None:
                    future = waiting.get(msg.subject.rpartition(".")[2])
                    if future is not None and not future.done():
                        future.set_result(msg)

                await client.subscribe(f"{inbox}.*", cb=on_reply)
        except BaseException:
            with contextlib.suppress(Exception):
                await client.close()
            raise
        self._connection = _Connection(client, inbox, waiting)
        return self._connection

    async def _disconnect(self) -> None:
        conn, self._connection = self._connection, None
        if conn is not None:
            for future in conn.waiting.values():
                future.cancel()
            # Closing a broken connection may fail too; either way it is gone.
            with contextlib.suppress(Exception):
                await conn.client.close()
