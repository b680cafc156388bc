"""Sending events to NATS JetStream: ``nats://HOST:PORT?subject=PREFIX[&stream=S]``.

An event goes to ``PREFIX.<type>`` with ``Nats-Msg-Id = "<source> <id>"`` (JetStream's duplicate
window then drops a re-send), its CloudEvents attributes as ``ce-`` headers and its canonical
JSON as the body (structured mode). The ACK is the PubAck, and only a PubAck that names a stream
(with ``stream=``: that stream, which the server also checks through ``Nats-Expected-Stream``);
a ``duplicate`` PubAck is an ACK too, the broker's twin of the inbox's "duplicate".

What is not an ACK, and how the relay's policy tells the classes apart without knowing NATS:
a refusal raises (``send``) or is kept as ``refusal`` (``send_batch``) with a status code, as
an HTTP sink's would be. JetStream's API errors carry HTTP-style codes already (400 bad
request, e.g. another stream than ``stream=``; 503 unavailable), used as they are. No
responders means no stream covers the subject: NATS signals it with a 503 status, but it will
not change by waiting, so it is given 404 (JetStream's "stream not found"): permanent. A
time-out or a lost connection raises ``TimeoutError``/``ConnectionError`` (transient), and the
next send connects afresh.

nats-py is asyncio: each sender runs one event loop in a private thread, started on first use,
and ``send``/``send_batch`` wait for the coroutines they hand it. nats-py is imported only here,
and only when a sender is built.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import threading
from collections.abc import Coroutine, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar
from urllib.parse import parse_qs, unquote, urlsplit

from ..envelope import canonical_json, validate_cloudevent
from ..errors import AckledgerError, InvalidEvent, NotAcknowledged, UnsafeTarget
from .sender import Refusal
from .targets import LOOPBACK_HOSTS, check_timeout

if TYPE_CHECKING:
    from nats.aio.client import Client
    from nats.js import JetStreamContext
    from nats.js.api import PubAck

T = TypeVar("T")

MAX_BATCH = 16
DEFAULT_PORT = 4222
#: The status given to "no responders": no stream listens on the subject (see the docstring).
NO_STREAM = 404
STRUCTURED = "application/cloudevents+json"

# A subject prefix: dot-separated tokens without wildcards or whitespace. A stream name: no
# whitespace, dots, wildcards or path separators (the server's own rules for a name).
_TOKEN = re.compile(r"[!-~]+")
_STREAM = re.compile(r"[!-~]{1,255}")
_NOT_IN_STREAM_NAME = frozenset(".*>/\\")
# Header values: printable ASCII but '%' and '"', as the CloudEvents HTTP binding keeps them;
# everything else is percent-encoded (a CR or LF would end the header block).
_HEADER_SAFE = frozenset(chr(c) for c in range(0x20, 0x7F)) - {"%", '"'}


class MissingExtra(AckledgerError, ModuleNotFoundError):
    """A feature needs an extra that is not installed."""


@dataclass(frozen=True)
class NatsTarget:
    host: str
    port: int
    prefix: str
    stream: str | None
    # Never shown: repr and messages name the host only.
    user: str | None = field(default=None, repr=False)
    password: str | None = field(default=None, repr=False)

    @property
    def server(self) -> str:
        """The server URL handed to nats-py, without credentials (they go separately)."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"nats://{host}:{self.port}"


def _refuse(message: str) -> UnsafeTarget:
    return UnsafeTarget(f"url: {message}")


def check_nats_target(url: object, allowed_hosts: Iterable[str] | None = None) -> NatsTarget:
    """Parse a ``nats://`` URL or raise :class:`UnsafeTarget`; no connection, no DNS query."""
    if not isinstance(url, str):
        raise _refuse(f"must be a string, got {type(url).__name__}")
    if any(ch.isspace() or ord(ch) < 32 or ord(ch) == 127 for ch in url):
        raise _refuse("must not contain whitespace or control characters")
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        # The parser's message may quote the URL, password included: name the problem only.
        raise _refuse("cannot be parsed as nats://HOST:PORT?subject=PREFIX") from None
    if parts.scheme.lower() != "nats":
        raise _refuse(f"only nats:// is allowed here, got {parts.scheme or 'none'!r}")
    host = (parts.hostname or "").lower()
    allowed = LOOPBACK_HOSTS | {h.lower() for h in _hosts(allowed_hosts)}
    if host not in allowed:
        raise _refuse(
            f"host {host or '(none)'!r} is not allowed (allowed: 127.0.0.1, localhost, [::1]"
            " and any host given explicitly)"
        )
    if port == 0:
        raise _refuse("port 0 is not a port a server can listen on")
    if parts.path not in ("", "/"):
        raise _refuse(f"a nats:// URL has no path, got {parts.path!r}")
    if parts.fragment:
        raise _refuse("a fragment is not allowed")
    prefix, stream = _query(parts.query)
    user = unquote(parts.username) if parts.username is not None else None
    password = unquote(parts.password) if parts.password is not None else None
    return NatsTarget(host, port or DEFAULT_PORT, prefix, stream, user, password)


def _hosts(allowed_hosts: Iterable[str] | None) -> tuple[str, ...]:
    hosts = tuple(allowed_hosts or ())
    for extra in hosts:
        if not isinstance(extra, str) or not extra:
            raise TypeError(f"allowed_hosts: every host must be a non-empty string, got {extra!r}")
    return hosts


def _query(query: str) -> tuple[str, str | None]:
    try:
        fields = parse_qs(query, keep_blank_values=True, strict_parsing=bool(query))
    except ValueError:
        raise _refuse("the query cannot be parsed; give ?subject=PREFIX[&stream=S]") from None
    unknown = sorted(set(fields) - {"subject", "stream"})
    if unknown:
        raise _refuse(f"unknown query parameter {unknown[0]!r} (only subject and stream)")
    for name, values in fields.items():
        if len(values) > 1:
            raise _refuse(f"{name} is given {len(values)} times")
    if "subject" not in fields:
        raise _refuse("subject is missing: give ?subject=PREFIX (events go to PREFIX.<type>)")
    prefix = fields["subject"][0]
    tokens = prefix.split(".")
    if not all(_TOKEN.fullmatch(t) and t not in ("*", ">") for t in tokens):
        raise _refuse(
            f"subject {prefix!r} is not a subject prefix (dot-separated tokens of printable"
            " characters, no wildcards)"
        )
    stream = fields["stream"][0] if "stream" in fields else None
    if stream is not None and (
        not _STREAM.fullmatch(stream) or _NOT_IN_STREAM_NAME.intersection(stream)
    ):
        raise _refuse(
            f"stream {stream!r} is not a stream name (1-255 printable characters, no . * > / \\)"
        )
    return prefix, stream


def subject_of(prefix: str, event: dict[str, Any]) -> str:
    """``PREFIX.<type>``; a type with an empty token (``a..b``, ``a.``) makes no subject."""
    kind = event["type"]
    if "" in kind.split("."):
        raise InvalidEvent(f"type: {kind!r} makes no NATS subject (an empty token)", field="type")
    return f"{prefix}.{kind}"


def _header_value(value: object) -> str:
    if isinstance(value, bool):
        text = "true" if value else "false"
    elif isinstance(value, str):
        text = value
    else:
        text = str(value)
    if all(ch in _HEADER_SAFE for ch in text):
        return text
    return "".join(
        ch if ch in _HEADER_SAFE else "".join(f"%{b:02X}" for b in ch.encode("utf-8"))
        for ch in text
    )


def headers_of(event: dict[str, Any]) -> dict[str, str]:
    """The message headers: the dedup id, the content type, and every attribute as ``ce-``."""
    headers = {
        "Nats-Msg-Id": _header_value(f"{event['source']} {event['id']}"),
        "content-type": STRUCTURED,
    }
    for name, value in event.items():
        if name != "data":
            headers[f"ce-{name}"] = _header_value(value)
    # The W3C header names too, so a consumer's tracing finds them where it looks.
    for name in ("traceparent", "tracestate"):
        if name in event:
            headers[name] = _header_value(event[name])
    return headers


def judge(ack: PubAck, expected_stream: str | None) -> None:
    """Accept a PubAck that names a stream (the expected one, if any), or raise."""
    stream = getattr(ack, "stream", None)
    if not isinstance(stream, str) or not stream:
        raise NotAcknowledged("the PubAck names no stream")
    if expected_stream is not None and stream != expected_stream:
        # The server refuses this itself (Nats-Expected-Stream); checked again, as evidence.
        raise NotAcknowledged(
            f"the PubAck names stream {stream!r}, not {expected_stream!r}", status=400
        )


def _nats_modules() -> Any:
    try:
        import nats
        import nats.js.errors
    except ModuleNotFoundError as exc:
        missing = MissingExtra(
            "nats:// needs the 'nats' extra, which is not installed "
            f"(no module {exc.name!r}): pip install 'ackledger[nats]'"
        )
        missing.name = exc.name
        raise missing from None
    return nats


class _Loop:
    """One asyncio loop in a daemon thread: started on first use, stopped by ``stop``."""

    def __init__(self) -> None:
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run ``coro`` on the loop and wait for it (it bounds its own time)."""
        return asyncio.run_coroutine_threadsafe(coro, self._started()).result()

    def _started(self) -> asyncio.AbstractEventLoop:
        with self._lock:
            if self._loop is None:
                loop = asyncio.new_event_loop()
                thread = threading.Thread(
                    target=loop.run_forever, name="ackledger-nats", daemon=True
                )
                thread.start()
                self._loop, self._thread = loop, thread
            return self._loop

    @property
    def running(self) -> bool:
        return self._loop is not None

    def stop(self) -> None:
        with self._lock:
            loop, thread = self._loop, self._thread
            self._loop = self._thread = None
        if loop is None or thread is None:
            return
        loop.call_soon_threadsafe(loop.stop)
        thread.join()
        loop.close()


@dataclass
class _Outcome:
    """One message of a round: its PubAck or what went wrong instead."""

    ack: PubAck | None = None
    error: BaseException | None = None


class NatsSender:
    """Publishes to JetStream and returns True only on its PubAck (see the module docstring)."""

    def __init__(
        self, url: str, *, timeout: float = 5.0, allowed_hosts: Iterable[str] | None = None
    ) -> None:
        # The target first: a refused URL is refused before nats-py is even imported.
        self.target = check_nats_target(url, allowed_hosts)
        self.timeout = check_timeout(timeout)
        self._nats = _nats_modules()
        self.refusal: Refusal | None = None
        self._loop = _Loop()
        self._client: Client | None = None
        self._js: JetStreamContext | None = None
        #: What nats-py's error callback last reported: the cause behind "no servers".
        self._last_error: BaseException | None = None

    def __repr__(self) -> str:
        return f"NatsSender({self.target.server}, subject={self.target.prefix!r})"

    def send(self, event: dict[str, Any]) -> bool:
        clean = validate_cloudevent(event)
        message = self._message(clean)
        (outcome,) = self._loop.run(self._round([message]))
        if outcome.error is not None:
            raise outcome.error
        return True

    def send_batch(self, events: list[dict[str, Any]]) -> int:
        # Forget the last answer first: a batch is judged by its own outcomes only.
        self.refusal = None
        if isinstance(events, (str, bytes)) or not isinstance(events, list):
            raise ValueError("events: must be a list of 1-16 events")
        if not 1 <= len(events) <= MAX_BATCH:
            raise ValueError(f"events: must hold 1-{MAX_BATCH} events, got {len(events)}")
        messages = [self._message(validate_cloudevent(item)) for item in events]
        outcomes = self._loop.run(self._round(messages))
        acked = 0
        for outcome in outcomes:
            if outcome.error is not None:
                break
            acked += 1
        if acked < len(events):
            error = outcomes[acked].error
            if acked == 0 and not isinstance(error, NotAcknowledged):
                # Nothing confirmed and no answer from the broker: a failure, as over HTTP.
                assert error is not None
                raise error
            status = error.status if isinstance(error, NotAcknowledged) else None
            self.refusal = Refusal(events[acked]["id"], status, str(error), "JetStream")
        return acked

    def close(self) -> None:
        if self._loop.running:
            self._loop.run(self._disconnect())
        self._loop.stop()

    def _message(self, event: dict[str, Any]) -> tuple[str, bytes, dict[str, str]]:
        return (
            subject_of(self.target.prefix, event),
            canonical_json(event).encode(),
            headers_of(event),
        )

    async def _round(self, messages: list[tuple[str, bytes, dict[str, str]]]) -> list[_Outcome]:
        """Publish ``messages`` in order on one connection, then wait for their PubAcks
        together; a message not confirmed within the time-out is a TimeoutError."""
        outcomes = [_Outcome() for _ in messages]
        futures: list[asyncio.Future[PubAck]] = []
        try:
            js = await self._connected()
            # Written one after the other (so the stream's order is the outbox's order),
            # acknowledged concurrently.
            async with asyncio.timeout(self.timeout):
                for subject, body, headers in messages:
                    futures.append(
                        await js.publish_async(
                            subject, body, stream=self.target.stream, headers=headers
                        )
                    )
        except Exception as exc:
            # Messages already written may still be confirmed; the others failed with this.
            failure = self._transport_failure(exc)
            for outcome in outcomes[len(futures) :]:
                outcome.error = failure
        if futures:
            _, late = await asyncio.wait(futures, timeout=self.timeout)
            for future in late:
                future.cancel()
        lost = False
        for outcome, future in zip(outcomes, futures, strict=False):
            if future.cancelled():
                lost = True
                outcome.error = TimeoutError(
                    f"no PubAck from NATS at {self.target.server} within {self.timeout:g}s"
                )
            elif future.exception() is not None:
                outcome.error = self._refusal_of(future.exception())
            else:
                try:
                    judge(future.result(), self.target.stream)
                    outcome.ack = future.result()
                except NotAcknowledged as exc:
                    outcome.error = exc
        if lost or any(isinstance(o.error, OSError) for o in outcomes):
            # The connection's state is unknown: the next send connects afresh.
            await self._disconnect()
        return outcomes

    def _refusal_of(self, exc: BaseException | None) -> BaseException:
        """What the broker said instead of a PubAck, as the error a caller judges."""
        errors = self._nats.js.errors
        if isinstance(exc, errors.NoStreamResponseError):
            return NotAcknowledged(
                f"no stream covers this subject (no responders) at {self.target.server}",
                status=NO_STREAM,
            )
        if isinstance(exc, errors.APIError):
            code = exc.code if type(exc.code) is int else None
            return NotAcknowledged(
                f"error PubAck: code={exc.code} err_code={exc.err_code} {exc.description}",
                status=code,
            )
        return self._transport_failure(exc)

    def _transport_failure(self, exc: BaseException | None) -> BaseException:
        # asyncio's and nats-py's time-outs are TimeoutErrors (OSErrors) without a message.
        if isinstance(exc, TimeoutError):
            return TimeoutError(f"NATS at {self.target.server}: no answer in {self.timeout:g}s")
        if isinstance(exc, (OSError, AckledgerError)):
            return exc
        cause = self._last_error or exc
        failure = ConnectionError(
            f"NATS at {self.target.server}: {type(cause).__name__}: {cause}".rstrip(": ")
        )
        failure.__cause__ = exc
        return failure

    async def _connected(self) -> JetStreamContext:
        client = self._client
        if client is not None and client.is_connected and self._js is not None:
            return self._js
        await self._disconnect()
        self._last_error = None

        async def remember(exc: Exception) -> None:
            # nats-py would log it (at ERROR, with a traceback); the send's failure says it.
            self._last_error = exc

        target = self.target
        async with asyncio.timeout(self.timeout):
            client = await self._nats.connect(
                servers=[target.server],
                user=target.user,
                password=target.password,
                name="ackledger",
                connect_timeout=self.timeout,
                # One connection per round of failure: the relay owns retries and backoff.
                allow_reconnect=False,
                max_reconnect_attempts=1,
                reconnect_time_wait=0,
                error_cb=remember,
            )
        self._client = client
        self._js = client.jetstream(timeout=self.timeout)
        return self._js

    async def _disconnect(self) -> None:
        client, self._client, self._js = self._client, None, None
        if client is not None and not client.is_closed:
            # Closing a broken connection may fail too; either way it is gone.
            with contextlib.suppress(Exception):
                await client.close()
