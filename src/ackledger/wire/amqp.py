"""Publishing events to RabbitMQ, marked sent only on the broker's publisher confirm.

A publish is persistent (``delivery_mode=2``) and ``mandatory`` on a confirm channel. Its ACK is
the ``basic.ack`` for its delivery tag with no ``basic.return`` before it (RabbitMQ sends the
return of an unroutable message before its ack). A return is permanent: the broker can route
the message nowhere as it is, so the refusal says so (``permanent=True``) and the relay's poison
policy takes it, and so is a missing exchange (the broker closes the channel with 404
NOT_FOUND): nothing published to it can ever be routed until it is declared. A nack is a
transient refusal; any other channel or connection error, or no confirm within the time-out,
raises (an ``OSError``).

pika's asynchronous ``SelectConnection`` is driven here only while a send waits, with one
deadline per send: a batch's publishes are all written before the first confirm is awaited,
so a batch of 16 costs about one round trip and one broker fsync, not 16. The connection is
discarded after any failure and made again by the next send; a send never publishes an event
twice. Heartbeats are off because the loop does not run between sends; a connection the broker
or the network closed meanwhile is noticed before publishing (as HTTP notices a dropped
kept-alive connection), never after.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import pika
from pika import spec
from pika.adapters.select_connection import SelectConnection
from pika.exceptions import ChannelClosedByBroker

from ..envelope import canonical_json, validate_cloudevent
from ..envelope.message import NOT_BINARY_HEADERS, binary_body
from ..errors import NotAcknowledged
from .amqp_target import AmqpTarget, check_amqp_target
from .sender import Refusal
from .stored import Stored
from .targets import check_timeout

MAX_BATCH = 16
CONTENT_TYPE = "application/cloudevents+json"
#: How long ``close`` waits for the broker's Connection.CloseOk.
_CLOSE_WAIT_S = 2.0
#: ... and after a failure or a time-out, when an answer is not to be expected.
_BROKEN_CLOSE_WAIT_S = 0.2
# An AMQP long-long header holds a signed 64-bit integer; a larger one is sent as its text.
_MAX_LONG = 2**63 - 1

#: Not attributes of an event: its data is the body, and the outbox's ``seq`` is its own.
_NOT_HEADERS = frozenset({"data", "data_base64", "seq"})
_DATA = frozenset({"data", "data_base64"})
#: (routing key, body, properties, message id): one message ready to publish.
Message = tuple[str, bytes, Any, str]

ACKED = "acked"
NACKED = "nacked"
RETURNED = "returned"


class _Publish:
    """One message in flight: None until the broker confirms, nacks or returns it."""

    __slots__ = ("detail", "message_id", "outcome")

    def __init__(self, message_id: str) -> None:
        self.message_id = message_id
        self.outcome: str | None = None
        self.detail = ""


class Flight:
    """One batch published and not yet judged (``publish_stored``'s handle): its link, the
    ids and publishes in order, its last delivery tag and the deadline for its confirms."""

    __slots__ = ("deadline", "ids", "last_tag", "link", "publishes")

    def __init__(self, link: _Link, ids: list[str], publishes: list[_Publish], timeout: float):
        self.link = link
        self.ids = ids
        self.publishes = publishes
        self.last_tag = link.last_tag
        self.deadline = time.monotonic() + timeout


class _Link:
    """One connection and its confirm channel. ``failure`` is set once it is unusable."""

    def __init__(self, target: AmqpTarget, timeout: float, scrub: Callable[[str], str]) -> None:
        self.timeout = timeout
        self._scrub = scrub
        self.failure: BaseException | None = None
        self.ready = False
        self.channel: Any = None
        self._tag = 0
        self._unconfirmed: dict[int, _Publish] = {}
        self._until: Callable[[], bool] | None = None
        params = pika.ConnectionParameters(
            host=target.host,
            port=target.port,
            virtual_host=target.vhost,
            credentials=pika.PlainCredentials(target.user, target.password),
            connection_attempts=1,
            socket_timeout=timeout,
            stack_timeout=timeout,
            # A broker under a resource alarm blocks publishers; past the time-out, give up.
            blocked_connection_timeout=timeout,
            heartbeat=0,
            # Named for operators (rabbitmqctl list_connections user_provided_name).
            client_properties={"connection_name": f"ackledger sender (pid {os.getpid()})"},
        )
        self.conn: Any = SelectConnection(
            params,
            on_open_callback=self._on_open,
            on_open_error_callback=self._on_failure,
            on_close_callback=self._on_failure,
        )
        self.run(lambda: self.ready or self.failure is not None)

    # -- driving the loop -------------------------------------------------------------------

    def run(self, until: Callable[[], bool], timeout: float | None = None) -> bool:
        """Process I/O until ``until()`` holds or the time-out passes; returns ``until()``."""
        if until():
            return True
        ioloop = self.conn.ioloop
        self._until = until
        timer = ioloop.call_later(self.timeout if timeout is None else timeout, ioloop.stop)
        try:
            ioloop.start()
        finally:
            self._until = None
            ioloop.remove_timeout(timer)
        return until()

    def poll(self) -> None:
        """One pass of the loop without waiting: lets pika notice a close that already came."""
        ioloop = self.conn.ioloop
        ioloop.call_later(0, ioloop.stop)
        ioloop.start()

    def _wake(self) -> None:
        if self._until is not None and self._until():
            self.conn.ioloop.stop()

    # -- pika's callbacks -------------------------------------------------------------------

    def _on_open(self, conn: Any) -> None:
        conn.channel(on_open_callback=self._on_channel)

    def _on_channel(self, channel: Any) -> None:
        self.channel = channel
        channel.add_on_close_callback(self._on_failure)
        channel.add_on_return_callback(self._on_return)
        channel.confirm_delivery(self._on_confirm, callback=self._on_select_ok)

    def _on_select_ok(self, _frame: Any) -> None:
        self.ready = True
        self._wake()

    def _on_failure(self, _source: Any, exc: BaseException) -> None:
        if self.failure is None:
            self.failure = exc
        self._wake()

    def _on_return(self, _channel: Any, method: Any, properties: Any, _body: bytes) -> None:
        if self.failure is not None:
            return  # past the deadline or the loss: nothing changes what the send decided
        # Confirms may come in any order, so a return is matched by message id; every message
        # in flight with that id is taken as returned, which can only withhold an ACK.
        detail = self._scrub(f"{method.reply_code} {method.reply_text}")
        for publish in self._unconfirmed.values():
            if publish.message_id == properties.message_id and publish.outcome is None:
                publish.outcome, publish.detail = RETURNED, detail
        self._wake()

    def _on_confirm(self, frame: Any) -> None:
        if self.failure is not None:
            return
        method = frame.method
        tag: int = method.delivery_tag
        nack = isinstance(method, spec.Basic.Nack)
        tags = [t for t in self._unconfirmed if t <= tag] if method.multiple else [tag]
        for confirmed in tags:
            publish = self._unconfirmed.pop(confirmed, None)
            if publish is not None and publish.outcome is None:
                publish.outcome = NACKED if nack else ACKED
        self._wake()

    # -- publishing -------------------------------------------------------------------------

    def publish(
        self, exchange: str, routing_key: str, body: bytes, props: Any, mid: str
    ) -> _Publish:
        self.channel.basic_publish(exchange, routing_key, body, props, mandatory=True)
        # After Confirm.Select the broker numbers this channel's publishes 1, 2, 3, ...
        self._tag += 1
        publish = _Publish(mid)
        self._unconfirmed[self._tag] = publish
        return publish

    def settled_to(self, tag: int) -> bool:
        """Whether every publish up to ``tag`` was answered (or the link failed). The dict
        keeps tags in the order they were published, so its first key is the oldest open."""
        unconfirmed = self._unconfirmed
        return self.failure is not None or not unconfirmed or next(iter(unconfirmed)) > tag

    @property
    def last_tag(self) -> int:
        return self._tag

    def coalesce(self) -> None:
        """Join the frames written so far into one buffer, so that a batch leaves in one
        socket write instead of three per message (method, header, body): on loopback each
        write cost about as much CPU as building the message. pika keeps its pending output
        in the transport's ``_tx_buffers``; if that ever changes, nothing is joined."""
        transport = getattr(self.conn, "_transport", None)
        buffers = getattr(transport, "_tx_buffers", None)
        if type(buffers) is deque and len(buffers) > 1:
            joined = b"".join(buffers)
            buffers.clear()
            buffers.append(joined)

    def close(self) -> None:
        """Close politely (Connection.Close); a broken link is not waited for long. If the
        broker does not answer, the socket is dropped: it must not outlive the link."""
        conn = self.conn
        closed = lambda: bool(conn.is_closed)  # noqa: E731
        try:
            if not (conn.is_closing or conn.is_closed):
                conn.close()
            wait = _CLOSE_WAIT_S if self.failure is None else _BROKEN_CLOSE_WAIT_S
            if not self.run(closed, wait):
                # pika has no public way to abandon a connection whose peer went quiet.
                getattr(conn, "_adapter_disconnect_stream", lambda: None)()
                self.run(closed, _BROKEN_CLOSE_WAIT_S)
        except Exception:  # noqa: S110 - closing what may already be broken: nothing to report
            pass
        finally:
            conn.ioloop.close()


class AmqpSender:
    """Publishes to a RabbitMQ exchange; see the module's docstring for what counts."""

    def __init__(
        self, url: str, *, timeout: float = 5.0, allowed_hosts: Iterable[str] | None = None
    ) -> None:
        self.target = check_amqp_target(url, allowed_hosts)
        self.timeout = check_timeout(timeout)
        self.refusal: Refusal | None = None
        self._link: _Link | None = None
        # pika's connections are not thread-safe: threads sharing a sender take turns.
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"AmqpSender({self.target.shown!r})"

    def send(self, event: dict[str, Any]) -> bool:
        with self._lock:
            self.refusal = None
            publish = self._publish(self._messages([event]))[0]
        return self._confirmed(str(event.get("id")), publish)

    def send_stored_event(self, event: Stored) -> bool:
        """``send`` of an event as the outbox stored it (``wire/stored.py``): the body is
        the stored text, validated when it was published, not validated again here."""
        with self._lock:
            self.refusal = None
            publish = self._publish([self._stored_message(event)])[0]
        return self._confirmed(event.id, publish)

    def send_batch(self, events: list[dict[str, Any]]) -> int:
        if not isinstance(events, list) or not 1 <= len(events) <= MAX_BATCH:
            raise ValueError(f"events: must be a list of 1-{MAX_BATCH} events")
        with self._lock:
            self.refusal = None
            publishes = self._publish(self._messages(events))
            return self._prefix([str(event.get("id")) for event in events], publishes)

    def send_stored(self, events: Sequence[Stored]) -> int:
        """``send_batch`` of events as the outbox stored them (``wire/stored.py``): the body
        is the stored text, validated when it was published, not validated again here."""
        with self._lock:
            self.refusal = None
            flight = self._start(self._stored_flight(events))
            return self._prefix(flight.ids, self._finish(flight))

    def publish_stored(self, events: Sequence[Stored]) -> Flight:
        """The first half of ``send_stored``: publish the batch now and return at once; its
        confirms are collected by ``confirmed``. Batches published one after another on the
        same channel are in flight together; each is judged only by its own confirms. Raises,
        having published nothing, when no connection can be had."""
        with self._lock:
            flight = self._start(self._stored_flight(events))
            try:
                flight.link.poll()  # write the batch out now, not at the next wait
            except BaseException:
                self._discard()
                raise
            return flight

    def confirmed(self, flight: Flight) -> int:
        """The second half of ``send_stored``: wait (up to the time-out counted from the
        publish) for the batch's confirms; returns its acknowledged prefix, keeping the
        first refused one's reason as ``refusal``, or raises as ``send_stored`` does when the
        first one got no answer. A failure of the link fails every batch still on it."""
        with self._lock:
            self.refusal = None
            return self._prefix(flight.ids, self._finish(flight))

    def settled(self, flight: Flight) -> bool:
        """Whether ``confirmed(flight)`` would return without waiting: every publish of it
        was answered, or its link failed, or its deadline passed. Reads what has arrived."""
        with self._lock:
            link = flight.link
            if link.failure is None and not link.settled_to(flight.last_tag):
                try:
                    link.poll()
                except BaseException:
                    self._discard(link)
                    raise
            return link.settled_to(flight.last_tag) or time.monotonic() >= flight.deadline

    def _stored_flight(self, events: Sequence[Stored]) -> tuple[list[str], list[Message]]:
        if not 1 <= len(events) <= MAX_BATCH:
            raise ValueError(f"events: must be 1-{MAX_BATCH} stored events")
        return [event.id for event in events], [self._stored_message(e) for e in events]

    def close(self) -> None:
        with self._lock:
            self._discard()

    # -- inside ------------------------------------------------------------------------------

    def _confirmed(self, event_id: str, publish: _Publish) -> bool:
        """True for a confirmed publish; else NotAcknowledged with the broker's reason."""
        if publish.outcome == ACKED:
            return True
        refusal = self._refusal_of(event_id, publish)
        raise NotAcknowledged(f"event {event_id!r}: {refusal.detail}", permanent=refusal.permanent)

    def _stored_message(self, event: Stored) -> Message:
        return self._message(event.attributes, event.text.encode())

    def _prefix(self, ids: list[str], publishes: list[_Publish]) -> int:
        """The acknowledged prefix; the first refused one's reason kept as ``refusal``."""
        acked = 0
        while acked < len(publishes) and publishes[acked].outcome == ACKED:
            acked += 1
        if acked < len(ids):
            self.refusal = self._refusal_of(ids[acked], publishes[acked])
        return acked

    def _messages(self, events: list[dict[str, Any]]) -> list[Message]:
        # Every event is checked before the first publish: a bad one sends nothing.
        messages: list[Message] = []
        for event in events:
            valid = validate_cloudevent(event)
            messages.append(self._message(valid, canonical_json(valid).encode(), _DATA))
        return messages

    def _publish(self, messages: list[Message]) -> list[_Publish]:
        """Publish every message once and wait for their confirms; raises when the first one
        got no answer (connection or channel lost, time-out), else returns what each got."""
        return self._finish(self._start(([m[3] for m in messages], messages)))

    def _start(self, batch: tuple[list[str], list[Message]]) -> Flight:
        """Publish every message of ``(ids, messages)`` once, without waiting."""
        ids, messages = batch
        link = self._connected()
        publishes: list[_Publish] = []
        try:
            for routing_key, body, props, mid in messages:
                publishes.append(link.publish(self.target.exchange, routing_key, body, props, mid))
            link.coalesce()
        except BaseException:
            self._discard()
            raise
        return Flight(link, ids, publishes, self.timeout)

    def _finish(self, flight: Flight) -> list[_Publish]:
        """Wait for a flight's confirms until its deadline; as ``_publish``."""
        link, publishes = flight.link, flight.publishes

        def answered() -> bool:
            return link.settled_to(flight.last_tag)

        try:
            link.run(answered, max(0.0, flight.deadline - time.monotonic()))
        except BaseException:
            self._discard(link)
            raise
        if link.failure is None and not answered():
            # The deadline passed: what the broker says from now on is not counted, and a later
            # send gets a new channel rather than waiting behind these confirms.
            link.failure = TimeoutError(
                f"amqp {self.target.shown}: no publisher confirm within {self.timeout:g} s"
            )
        failure = link.failure
        if failure is not None:
            self._discard(link)
            if publishes[0].outcome is None:
                if isinstance(failure, TimeoutError):
                    raise failure
                if _no_exchange(failure):
                    raise NotAcknowledged(self._missing_exchange(), permanent=True) from None
                raise ConnectionError(self._lost(failure)) from None
            for publish in publishes:
                if publish.outcome is None:
                    publish.detail = self._describe_failure(failure)
        return publishes

    def _connected(self) -> _Link:
        link = self._link
        if link is not None:
            link.poll()
            if link.failure is not None:  # closed since the last send: nothing was sent on it
                self._discard()
                link = None
        if link is None:
            link = _Link(self.target, self.timeout, self._scrub)
            if not link.ready:
                failure = link.failure
                link.close()
                if failure is None:
                    raise TimeoutError(
                        f"amqp {self.target.shown}: no connection within {self.timeout:g} s"
                    )
                raise ConnectionError(
                    f"amqp {self.target.shown}: cannot connect: {self._describe(failure)}"
                ) from None
            self._link = link
        return link

    def _discard(self, link: _Link | None = None) -> None:
        """Close the current link (or ``link``, if it is still the current one). A batch
        still in flight on it is then failed, never waited for on a closed loop."""
        if link is not None and link is not self._link:
            return  # already discarded: a newer link is current
        link, self._link = self._link, None
        if link is not None:
            link.close()
            if link.failure is None:
                link.failure = ConnectionError("closed by the sender")

    def _message(
        self, event: Mapping[str, Any], body: bytes, skip: frozenset[str] = _NOT_HEADERS
    ) -> Message:
        """The message of a valid event whose JSON is ``body``; ``skip``: the names that
        are not headers (a stored event's ``seq`` is the outbox's, a given one's is an
        attribute)."""
        content_type: str | None = CONTENT_TYPE
        if self.target.binary:
            content_type, body = binary_body(event)
            skip = skip | NOT_BINARY_HEADERS
        headers = {
            f"cloudEvents:{name}": _header_value(value)
            for name, value in event.items()
            if name not in skip
        }
        # The W3C names too, so a consumer's tracing finds the context where it looks.
        for name in ("traceparent", "tracestate"):
            if name in event:
                headers[name] = event[name]
        props = pika.BasicProperties(
            content_type=content_type,
            delivery_mode=2,
            message_id=event["id"],
            type=event["type"],
            headers=headers,
        )
        routing_key = self.target.routing_key or event["type"]
        return routing_key, body, props, event["id"]

    def _refusal_of(self, event_id: str, publish: _Publish) -> Refusal:
        if publish.outcome == RETURNED:
            return Refusal(
                event_id, None, f"returned by the broker as unroutable ({publish.detail})", True
            )
        if publish.outcome == NACKED:
            return Refusal(event_id, None, "the broker nacked the publish (basic.nack)")
        return Refusal(event_id, None, publish.detail or "no publisher confirm")

    def _describe_failure(self, failure: BaseException) -> str:
        return str(failure) if isinstance(failure, TimeoutError) else self._lost(failure)

    def _missing_exchange(self) -> str:
        target = self.target
        return (
            f"amqp {target.shown}: no exchange {target.exchange!r} in vhost {target.vhost!r}"
            " (404 NOT_FOUND): declare it, or name an existing one with ?exchange="
        )

    def _lost(self, failure: BaseException) -> str:
        return f"amqp {self.target.shown}: channel or connection lost: {self._describe(failure)}"

    def _describe(self, exc: BaseException) -> str:
        text = str(exc) or repr(exc)
        return self._scrub(f"{type(exc).__name__}: {text}")

    def _scrub(self, text: str) -> str:
        """Whatever a broker or pika says, the password is not repeated."""
        password = self.target.password
        return text.replace(password, "***") if password else text


def _no_exchange(failure: BaseException) -> bool:
    """The broker closed the channel because the exchange published to does not exist: a
    publish is the only thing this sender does that RabbitMQ answers with 404 NOT_FOUND."""
    return isinstance(failure, ChannelClosedByBroker) and failure.reply_code == 404


def _header_value(value: object) -> object:
    """An attribute as an AMQP table value: strings, booleans and 64-bit ints as they are;
    anything else (floats, larger ints) as its JSON text, which pika's tables cannot hold."""
    if isinstance(value, (str, bool)):
        return value
    if isinstance(value, int) and -_MAX_LONG - 1 <= value <= _MAX_LONG:
        return value
    return json.dumps(value)
