"""One way to build a sender from a URL: ``sender(url, **options)``.

A sender turns "sent" into evidence: ``send`` returns True only for the receiving side's exact
ACK of that very event, ``send_batch`` returns the length of the acknowledged prefix. When a
batch answer refuses an item, the sender keeps the receiver's reason as ``refusal`` until the
next ``send_batch``, because the count alone cannot say whether the refusal is permanent.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol
from urllib.parse import urlsplit

from .._core.extras import needing_extra
from ..envelope import validate_encoded
from ..errors import UnsafeTarget
from .ack import BatchAnswer, check_ack
from .amqp_target import check_amqp_target
from .http import close_connections, event_route, post_batch, post_event, post_stored_batch
from .nats_target import check_nats_target
from .stored import Stored
from .targets import ANY_PATH, batch_path, check_target
from .token import Token, as_token


@dataclass(frozen=True)
class Refusal:
    """What the receiver said of the first item of a batch it did not acknowledge."""

    event_id: str
    #: The status the item would have had alone (HTTP), or None when none was given.
    status: int | None
    detail: str
    #: The receiver refused it for good without a status (a broker's return: unroutable).
    permanent: bool = False
    #: Whose status it is, for the messages: a broker's refusal carries an HTTP-style code too.
    protocol: str = "HTTP"


class Sender(Protocol):
    #: The first refused item of the last ``send_batch``, or None.
    refusal: Refusal | None

    def send(self, event: dict[str, Any]) -> bool: ...

    def send_batch(self, events: list[dict[str, Any]]) -> int: ...

    def close(self) -> None: ...


class HttpSender:
    """POSTs to a sink's URL (one event; any path, ``/events`` or a mounted one) and to that
    path plus ``/batch`` (up to 16). Its URL,
    time-out, allowed hosts and token are checked once, here, and fixed (read-only): every
    send goes the way they were checked."""

    def __init__(
        self,
        url: str,
        *,
        timeout: float = 5.0,
        allowed_hosts: Iterable[str] | None = None,
        token: Token | str | None = None,
        ack: str = "exact",
    ) -> None:
        self._ack = check_ack(ack)
        hosts = tuple(allowed_hosts or ())
        self._route = event_route(url, hosts, token, timeout)
        self._url = url
        self._allowed_hosts = hosts
        self._token = as_token(token)
        self._timeout = self._route.timeout
        self.batch_url = batch_path(url)
        self.refusal: Refusal | None = None

    @property
    def url(self) -> str:
        return self._url

    @property
    def timeout(self) -> float:
        return self._timeout

    @property
    def allowed_hosts(self) -> tuple[str, ...]:
        return self._allowed_hosts

    @property
    def token(self) -> Token | None:
        return self._token

    @property
    def ack(self) -> str:
        """``exact`` (the sink's echo of the event's identity) or ``status`` (any 2xx)."""
        return self._ack

    def send(self, event: dict[str, Any]) -> bool:
        # ``send_http`` on the route checked at construction.
        clean, text = validate_encoded(event)
        return post_event(self._route, clean, text, self._ack)

    def send_stored_event(self, event: Stored) -> bool:
        """``send`` of an event as the outbox stored it (``wire/stored.py``): its stored text,
        validated when it was published, is the body as it is."""
        return post_event(self._route, event.attributes, event.text, self._ack)

    def send_batch(self, events: list[dict[str, Any]]) -> int:
        # Forget the last answer first: a send that raises (no connection, a 5xx) must be
        # judged by its own failure, never by an earlier batch's refusal.
        self.refusal = None
        answer = post_batch(
            events,
            self.batch_url,
            timeout=self.timeout,
            allowed_hosts=self.allowed_hosts,
            token=self.token,
            ack=self._ack,
        )
        return self._prefix(answer, [str(event.get("id")) for event in events])

    def send_stored(self, events: Sequence[Stored]) -> int:
        """``send_batch`` of events as the outbox stored them (``wire/stored.py``)."""
        self.refusal = None
        answer = post_stored_batch(
            events,
            self.batch_url,
            timeout=self.timeout,
            allowed_hosts=self.allowed_hosts,
            token=self.token,
            ack=self._ack,
        )
        return self._prefix(answer, [event.id for event in events])

    def _prefix(self, answer: BatchAnswer, ids: list[str]) -> int:
        if answer.acked < len(ids):
            problem = answer.error or {}
            status = problem.get("status")
            status = status if type(status) is int else None
            detail = problem.get("detail") or problem.get("title") or "not acknowledged"
            self.refusal = Refusal(ids[answer.acked], status, str(detail))
        return answer.acked

    def close(self) -> None:
        close_connections()


#: Schemes whose sender confirms each message of a batch on its own (publisher confirms,
#: PubAcks): a relay to them batches by default, with no sink to answer for a whole request.
BROKER_SCHEMES = frozenset({"amqp", "nats"})


def is_broker(url: str) -> bool:
    """Whether ``url`` names a broker (``BROKER_SCHEMES``) rather than an HTTP sink."""
    return urlsplit(url).scheme.lower() in BROKER_SCHEMES


def check_url(url: object, allowed_hosts: Iterable[str] | None = None) -> str:
    """Refuse ``url`` as ``sender(url)`` would (UnsafeTarget), with no connection and no
    driver imported; returns the URL as it may be printed (no password)."""
    if not isinstance(url, str):
        raise UnsafeTarget(f"url: must be a string, got {type(url).__name__}")
    scheme = urlsplit(url).scheme.lower()
    if scheme in ("http", "https"):
        check_target(url, ANY_PATH, allowed_hosts)
        return url
    if scheme == "amqp":
        return check_amqp_target(url, allowed_hosts).shown
    if scheme == "nats":
        check_nats_target(url, allowed_hosts)
        return shown(url)
    raise UnsafeTarget(f"url: scheme {scheme!r} is not supported (use http, https, amqp or nats)")


def shown(url: str) -> str:
    """A sender URL as it may be printed: a password in it (``nats://user:pass@``) becomes
    ``***``; anything else is kept."""
    try:
        parts = urlsplit(url)
        password = parts.password
    except ValueError:
        return "(an unparsable URL)"
    if password is None:
        return url
    host = parts.netloc.rpartition("@")[2]
    return parts._replace(netloc=f"{parts.username}:***@{host}").geturl()


def sender(url: object, **options: Any) -> Sender:
    """The sender for ``url``'s scheme; refuses an unknown scheme before any connection."""
    if not isinstance(url, str):
        raise UnsafeTarget(f"url: must be a string, got {type(url).__name__}")
    scheme = urlsplit(url).scheme.lower()
    if scheme in ("http", "https"):
        return HttpSender(url, **options)
    if options.pop("ack", "exact") != "exact":
        # A broker's ACK is its confirm or PubAck: there is no status to take instead.
        raise ValueError(f"ack: 'status' is for http:// targets, not {scheme}://")
    if options.pop("token", None) is not None:
        # A broker authenticates the connection (its URL's user and password), not each event.
        raise ValueError(f"token: a bearer token is for http:// targets, not {scheme}://")
    if scheme == "amqp":
        return _amqp_sender()(url, **options)
    if scheme == "nats":
        # Lazy: the core never imports nats-py; without it this raises, naming the extra.
        with needing_extra("nats://"):
            from .nats import NatsSender

            return NatsSender(url, **options)
    raise UnsafeTarget(f"url: scheme {scheme!r} is not supported (use http, https, amqp or nats)")


def _amqp_sender() -> Callable[..., Sender]:
    # pika is the amqp extra: imported only when an amqp:// URL is used.
    with needing_extra("amqp://"):
        from .amqp import AmqpSender
    return AmqpSender
