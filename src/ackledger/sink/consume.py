"""Consumers: apply broker messages through the inbox, acknowledging only what committed.

A message is acknowledged only after ``Inbox.receive`` committed it (applied, or a duplicate of
what was applied before), so a crash between the commit and the acknowledgement brings the
message back as a duplicate, never as a second application. A message that can never be
applied as it is (not JSON, not a valid CloudEvent, a conflict, no handler, a handler's
``Rejected``) is refused for good: recorded in the inbox's database (``ackledger_refused``)
first, then rejected, so a crash in between brings it back to be recorded again (as the same
row) and nothing disappears. Anything else is taken as transient and redelivered after a
capped, jittered backoff of its own, while the messages behind it go on. The broker drivers
are extras, imported only for their scheme (``consume_amqp``, ``consume_nats``).
"""

from __future__ import annotations

import json
import logging
import re
import signal
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import FrameType
from urllib.parse import parse_qsl, quote, unquote

from .._core.backoff import Backoff
from .._core.failures import TRANSIENT, kind_of_error
from .._core.logline import log_event
from ..envelope import MAX_EVENT_BYTES
from ..envelope.message import (
    AMQP_PREFIXES,
    STRUCTURED_MEDIA,
    attribute_headers,
    decode_broker_message,
)
from ..errors import InvalidEvent, UnsafeTarget
from ..store import database_errors
from ..store.refused import refusal_key
from ..wire.targets import check_host, split_url
from .inbox import Inbox

logger = logging.getLogger("ackledger.consume")

APPLIED = "applied"
DUPLICATE = "duplicate"
REJECTED = "rejected"
FAILED = "failed"
OUTCOMES = (APPLIED, DUPLICATE, REJECTED, FAILED)

#: A bound on what one consumer holds unacknowledged (AMQP prefetch, JetStream max ack pending).
MAX_IN_FLIGHT = 1000
DEFAULT_IN_FLIGHT = 16
#: A body is refused unread past this: valid events are at most MAX_EVENT_BYTES canonical, and
#: a sender's JSON may be looser, but not by this much.
MAX_BODY_BYTES = 4 * MAX_EVENT_BYTES
#: JetStream stream and consumer names: no whitespace, dots, wildcards or path separators.
_NATS_NAME = re.compile(r"[A-Za-z0-9_-]{1,255}")


@dataclass(frozen=True)
class AmqpSource:
    host: str
    port: int
    vhost: str
    queue: str
    prefetch: int
    user: str | None = None
    password: str | None = field(default=None, repr=False)

    def shown(self) -> str:
        """The URL as it may be printed: never the password."""
        auth = f"{self.user}:***@" if self.user is not None else ""
        vhost = quote(self.vhost, safe="")  # the default vhost "/" is written %2F
        return f"amqp://{auth}{_netloc(self.host, self.port)}/{vhost}?queue={self.queue}"


@dataclass(frozen=True)
class NatsSource:
    host: str
    port: int
    stream: str
    durable: str
    max_ack_pending: int
    user: str | None = None
    password: str | None = field(default=None, repr=False)

    def shown(self) -> str:
        auth = f"{self.user}:***@" if self.user is not None else ""
        return (
            f"nats://{auth}{_netloc(self.host, self.port)}"
            f"?stream={self.stream}&durable={self.durable}"
        )


BrokerSource = AmqpSource | NatsSource


def _netloc(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def parse_source(url: object, allowed_hosts: tuple[str, ...] = ()) -> BrokerSource:
    """Parse ``--from`` or raise :class:`UnsafeTarget` naming what is wrong; no connection and
    no name look-up is made, and no message carries the password."""
    parts, port = split_url(url)
    scheme = parts.scheme.lower()
    if scheme not in ("amqp", "nats"):
        raise UnsafeTarget(f"url: scheme {scheme or 'none'!r} is not supported (use amqp or nats)")
    if parts.fragment:
        raise UnsafeTarget("url: a fragment is not allowed")
    host = check_host((parts.hostname or "").lower(), allowed_hosts, "with --allow-host")
    if port == 0:
        raise UnsafeTarget("url: port 0 is not a port a broker can listen on")
    user = unquote(parts.username) if parts.username is not None else None
    password = unquote(parts.password) if parts.password is not None else None
    query = _query(parts.query)
    if scheme == "amqp":
        names = {"queue", "prefetch"}
        _only(query, names)
        return AmqpSource(
            host, port or 5672, _vhost(parts.path), _queue(query.get("queue")),
            _in_flight(query.get("prefetch"), "prefetch"), user, password,
        )  # fmt: skip
    _only(query, {"stream", "durable", "max_ack_pending"})
    if parts.path not in ("", "/"):
        raise UnsafeTarget(f"url: a nats:// URL has no path, got {parts.path!r}")
    return NatsSource(
        host, port or 4222, _nats_name(query.get("stream"), "stream"),
        _nats_name(query.get("durable"), "durable"),
        _in_flight(query.get("max_ack_pending"), "max_ack_pending"), user, password,
    )  # fmt: skip


def _query(text: str) -> dict[str, str]:
    found: dict[str, str] = {}
    try:
        pairs = parse_qsl(text, keep_blank_values=True, strict_parsing=bool(text))
    except ValueError as exc:
        raise UnsafeTarget(f"url: the query cannot be parsed: {exc}") from None
    for key, value in pairs:
        if key in found:
            raise UnsafeTarget(f"url: {key}= is given twice")
        found[key] = value
    return found


def _only(query: dict[str, str], names: set[str]) -> None:
    unknown = sorted(set(query) - names)
    if unknown:
        raise UnsafeTarget(
            f"url: unknown parameter {unknown[0]}= (known: {', '.join(sorted(names))})"
        )


def _vhost(path: str) -> str:
    # "/" and "/%2F" both name the default vhost, as in pika's own URLs.
    return unquote(path[1:]) if path not in ("", "/") else "/"


def _queue(value: str | None) -> str:
    if not value:
        raise UnsafeTarget("url: queue= is required (the queue to consume)")
    if len(value.encode("utf-8")) > 255:
        raise UnsafeTarget("url: queue= is at most 255 bytes (an AMQP short string)")
    return value


def _nats_name(value: str | None, name: str) -> str:
    if not value:
        raise UnsafeTarget(f"url: {name}= is required")
    if not _NATS_NAME.fullmatch(value):
        raise UnsafeTarget(f"url: {name}= must be 1-255 of A-Z a-z 0-9 _ -, got {value!r}")
    return value


def _in_flight(value: str | None, name: str) -> int:
    if value is None:
        return DEFAULT_IN_FLIGHT
    if not (value.isascii() and value.isdigit()) or not 1 <= int(value) <= MAX_IN_FLIGHT:
        raise UnsafeTarget(f"url: {name}= must be a whole number from 1 to {MAX_IN_FLIGHT}")
    return int(value)


@dataclass(frozen=True)
class Verdict:
    """What the inbox made of one message, and so what to tell the broker."""

    outcome: str
    reason: str = ""
    event_id: str | None = None
    source: str | None = None
    #: What to keep of a refused message whose body is not the whole event (binary mode: its
    #: attributes are headers): the event read from it, in structured mode, and that type.
    kept: tuple[bytes, str] | None = None

    @property
    def committed(self) -> bool:
        """Acknowledge it: the inbox transaction committed (applied or duplicate)."""
        return self.outcome in (APPLIED, DUPLICATE)


def judge(
    inbox: Inbox,
    body: bytes,
    content_type: str | None = None,
    headers: Mapping[str, object] | None = None,
    prefixes: tuple[str, ...] = AMQP_PREFIXES,
    *,
    receive: Callable[[object], str] | None = None,
) -> Verdict:
    """Apply one message, structured or binary mode, through ``inbox`` (or ``receive``, a
    framework's way into the same inbox: Django's handlers take its connection); never raises
    for the message. ``headers`` are the message's (its ``prefixes`` name attribute headers)."""
    if len(body) > MAX_BODY_BYTES:
        return Verdict(REJECTED, f"body: {len(body)} bytes, more than {MAX_BODY_BYTES}")
    try:
        obj = decode_broker_message(content_type or None, headers, body, prefixes)
    except InvalidEvent as exc:
        return Verdict(REJECTED, str(exc))
    event_id, source = _identity(obj)
    kept = None
    if attribute_headers(list((headers or {}).items()), prefixes):
        # Binary mode: the body is only the data, so a replay needs the event whole.
        kept = (json.dumps(obj, ensure_ascii=False).encode(), STRUCTURED_MEDIA)
    try:
        # ``awaiting``: an async handler is awaited here, in the consumer's own thread,
        # inside the receipt's transaction (never left as a coroutine nobody runs).
        if receive is not None:
            status = receive(obj)
        else:
            # A broker redelivers only what was not acked (a crash, a lost connection): the
            # read by key would be a round trip before nearly every write, for nothing.
            (result,) = inbox.receive_runs([[obj]], awaiting=True, read_first=False)
            if result.error is not None:
                raise result.error
            status = result.statuses[0]
    except Exception as exc:  # a handler's error or the database's: transient by contract
        outcome = FAILED if kind_of_error(exc) == TRANSIENT else REJECTED
        return Verdict(outcome, f"{type(exc).__name__}: {exc}", event_id, source, kept)
    return Verdict(status, "", event_id, source)


def _identity(obj: object) -> tuple[str | None, str | None]:
    """The claimed identity, for log lines only (cut short: the message may be anything)."""
    if not isinstance(obj, dict):
        return None, None
    found = [obj.get(key) for key in ("id", "source")]
    shown = [value[:256] if isinstance(value, str) else None for value in found]
    return shown[0], shown[1]


@dataclass
class ConsumeCounts:
    """This process's messages by outcome (what /metrics serves)."""

    applied: int = 0
    duplicate: int = 0
    rejected: int = 0
    failed: int = 0

    def add(self, outcome: str) -> None:
        setattr(self, outcome, getattr(self, outcome) + 1)


class StopFlag:
    """SIGTERM and SIGINT only request a stop: the consumer looks between messages."""

    def __init__(self) -> None:
        self.requested = False
        #: What asked for the stop (a signal's name), for the "stopped" line.
        self.cause = "a stop request"

    def request(self, cause: str = "a stop request") -> None:
        if not self.requested:
            self.cause = cause
        self.requested = True

    def install(self) -> Callable[[], None]:
        def handler(signum: int, frame: FrameType | None) -> None:
            self.request(signal.Signals(signum).name)

        previous = {sig: signal.signal(sig, handler) for sig in (signal.SIGTERM, signal.SIGINT)}

        def restore() -> None:
            for sig, old in previous.items():
                signal.signal(sig, old)

        return restore


#: How many failing messages' backoffs a consumer remembers (the oldest is forgotten first).
_RETRIES_KEPT = 4096


def record_refusal(inbox: Inbox, verdict: Verdict, body: bytes, content_type: str | None) -> int:
    """Keep a refused message in the inbox's database; returns its number (the same row when
    the same message was refused for the same reason before)."""
    with inbox.backend.write() as tx:
        return tx.refused_record(
            verdict.event_id,
            verdict.source,
            verdict.reason,
            message=body,
            content_type=content_type,
            now=time.time(),
        )


@dataclass
class Consumer:
    """What both brokers' loops share: the inbox, the counts, the backoff and the stop flag.

    ``after_commit`` is called with each committed verdict before its acknowledgement, and
    ``after_refusal`` with each recorded refusal before its rejection (the crash drills use
    them to die in between). ``backoff`` paces reconnections, and is the pattern of each
    failing message's own backoff (``retry_delay``)."""

    inbox: Inbox
    backoff: Backoff
    stop: StopFlag = field(default_factory=StopFlag)
    counts: ConsumeCounts = field(default_factory=ConsumeCounts)
    after_commit: Callable[[Verdict], object] | None = None
    after_refusal: Callable[[Verdict], object] | None = None
    _retries: OrderedDict[str, Backoff] = field(default_factory=OrderedDict, repr=False)

    def handle(
        self,
        body: bytes,
        content_type: str | None = None,
        headers: Mapping[str, object] | None = None,
        prefixes: tuple[str, ...] = AMQP_PREFIXES,
    ) -> Verdict:
        verdict = judge(self.inbox, body, content_type, headers, prefixes)
        if verdict.outcome == REJECTED:
            try:
                message, media = verdict.kept or (body, content_type)
                record_refusal(self.inbox, verdict, message, media)
            except database_errors() as exc:
                # Not recorded, so not rejected: it comes back, to be recorded then.
                verdict = Verdict(
                    FAILED, f"the refusal could not be recorded ({describe(exc)}); "
                    f"{verdict.reason}", verdict.event_id, verdict.source,
                )  # fmt: skip
        self.counts.add(verdict.outcome)
        fields = {"id": verdict.event_id, "source": verdict.source}
        if verdict.outcome == REJECTED:
            log_event(logger, logging.WARNING, "rejected", verdict.reason, **fields)
        elif verdict.outcome == FAILED:
            log_event(logger, logging.WARNING, "failed", verdict.reason, **fields)
        if verdict.outcome != FAILED:
            self.backoff.reset()
            if self._retries:  # the key is only worth its hash while something failed
                self._retries.pop(refusal_key(verdict.event_id, verdict.source, body), None)
        if verdict.committed and self.after_commit is not None:
            self.after_commit(verdict)
        if verdict.outcome == REJECTED and self.after_refusal is not None:
            self.after_refusal(verdict)
        return verdict

    def retry_delay(self, body: bytes, verdict: Verdict) -> float:
        """How long a message that failed waits before it is tried again: a backoff of its
        own, so one failing message never slows the others down."""
        key = refusal_key(verdict.event_id, verdict.source, body)
        backoff = self._retries.pop(key, None)
        if backoff is None:
            backoff = Backoff(self.backoff.base, self.backoff.cap)
        self._retries[key] = backoff
        while len(self._retries) > _RETRIES_KEPT:
            self._retries.popitem(last=False)
        return backoff.next_delay()


def describe(exc: BaseException) -> str:
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def run(source: BrokerSource, consumer: Consumer) -> int:
    """Consume until SIGTERM/SIGINT (exit 0); 1 when the broker says the source is not there."""
    restore = consumer.stop.install()
    try:
        if isinstance(source, AmqpSource):
            from .consume_amqp import consume_amqp

            code = consume_amqp(source, consumer)
        else:
            from .consume_nats import consume_nats

            code = consume_nats(source, consumer)
    finally:
        restore()
    if code == 0 and consumer.stop.requested:
        counts = consumer.counts
        log_event(
            logger, logging.INFO, "stopped",
            f"stopped on {consumer.stop.cause}, after the message in hand",
            broker=source.shown(), applied=counts.applied, duplicate=counts.duplicate,
            rejected=counts.rejected, failed=counts.failed,
        )  # fmt: skip
    return code
