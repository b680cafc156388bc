"""``IdempotencyMiddleware``: the ``Idempotency-Key`` header for any ASGI app (CONTRACT §14).

It follows the IETF draft "The Idempotency-Key HTTP Header Field" and Stripe's practice. The
first request with a key runs the app and stores its answer (status, body, ``Content-Type``,
``Location``, ``ETag``) under the key; a repeat with the same fingerprint (method, path and
query, body, and ``scope(request)``) gets that answer again with ``Idempotent-Replayed: true``
and the app does not run. Keys live in ``ackledger_idempotency_keys`` under the scope ``http``.

Plain ASGI and the standard library only, so it wraps any framework's app without pulling one
in. Database calls run on worker threads of its own; the event loop never waits on the database.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping, MutableMapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from .._core.warm_threads import WarmThreads
from ..store import Backend, Tx
from ..store.idempotency_keys import Found, KeyClaim, complete_key
from .idempotent import on_callers_connection
from .key_lease import OwnKeys, as_seconds, new_token, retry_after
from .key_outcomes import KeyOutcomes
from .ledger import Ledger

if TYPE_CHECKING:
    from prometheus_client.registry import Collector

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

#: The largest request body fingerprinted, and the largest answer stored (1 MiB each).
MAX_BYTES = 1024 * 1024
MAX_KEY_CHARS = 255
HTTP_SCOPE = "http"
#: The headers of an answer that are stored with it and replayed.
KEPT_HEADERS = (b"content-type", b"location", b"etag")
#: Where an endpoint finds the key it runs under: ``request.state.idempotency`` (Starlette,
#: FastAPI), or ``held_key(scope)``.
STATE_NAME = "idempotency"
PROBLEM_TYPE_BASE = "https://ackledger.invalid/problems/"
#: The characters a bare (unquoted) key may have: visible ASCII that a structured-header
#: string needs no escape for, and that does not separate list members or parameters.
_BARE = frozenset(chr(c) for c in range(0x21, 0x7F)) - set('"\\,;')


class BadKey(ValueError):
    """The Idempotency-Key header is not one key."""


def parse_key(values: list[bytes]) -> str:
    """The key in the ``Idempotency-Key`` header: a structured-header string (``"a1b2"``,
    RFC 8941 section 3.3.3), or the same characters bare, as Stripe's clients send them."""
    if len(values) != 1:
        raise BadKey("send exactly one Idempotency-Key header")
    try:
        text = values[0].decode("ascii").strip(" \t")
    except UnicodeDecodeError:
        raise BadKey("the Idempotency-Key must be ASCII") from None
    if text.startswith('"'):
        key = _sf_string(text)
    elif text and all(char in _BARE for char in text):
        key = text
    else:
        raise BadKey(
            'the Idempotency-Key must be a structured-header string ("...") of printable ASCII'
        )
    if not 1 <= len(key) <= MAX_KEY_CHARS:
        raise BadKey(f"the Idempotency-Key must be 1-{MAX_KEY_CHARS} characters, got {len(key)}")
    return key


def _sf_string(text: str) -> str:
    chars: list[str] = []
    index = 1
    while index < len(text):
        char = text[index]
        if char == "\\":
            following = text[index + 1 : index + 2]
            if following not in ('"', "\\"):
                raise BadKey('the Idempotency-Key string may escape only " and \\')
            chars.append(following)
            index += 2
            continue
        if char == '"':
            if index != len(text) - 1:
                raise BadKey("the Idempotency-Key has characters after its closing quote")
            return "".join(chars)
        if not 0x20 <= ord(char) <= 0x7E:
            raise BadKey("the Idempotency-Key string must be printable ASCII")
        chars.append(char)
        index += 1
    raise BadKey("the Idempotency-Key string has no closing quote")


def problem(
    status: int, kind: str, title: str, detail: str, headers: Iterable[tuple[bytes, bytes]] = ()
) -> tuple[int, list[tuple[bytes, bytes]], bytes]:
    """An RFC 9457 problem JSON answer: (status, headers, body)."""
    body = json.dumps(
        {"type": PROBLEM_TYPE_BASE + kind, "title": title, "status": status, "detail": detail}
    ).encode()
    return status, [(b"content-type", b"application/problem+json"), *headers], body


async def send_answer(
    send: Send, status: int, headers: list[tuple[bytes, bytes]], body: bytes
) -> None:
    sent = [*headers, (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": status, "headers": sent})
    await send({"type": "http.response.body", "body": body, "more_body": False})


@dataclass
class HeldKey:
    """The key a request runs under, for an endpoint that writes the key's completion in its own
    business transaction: ``complete(using, status=..., body=...)`` stores the answer with the
    caller's connection or session, so it commits (or rolls back) with the endpoint's writes.
    The endpoint then answers exactly that; the middleware keeps what it stored."""

    key: str
    _db: Backend
    _token: str
    #: The request's body, as the app reads it again.
    body: bytes = field(default=b"", repr=False)
    completed: bool = field(default=False)
    #: Where a completion is counted (the middleware's ledger's).
    outcomes: KeyOutcomes | None = field(default=None, repr=False)
    #: The answer the last completion wrote, as stored: (result, body).
    _stored: tuple[str, bytes] | None = field(default=None, repr=False)

    def _complete(
        self, tx: Tx, status: int, body: bytes, headers: Mapping[str, str] | None
    ) -> bool:
        kept = [
            [name.lower(), value]
            for name, value in (headers or {}).items()
            if name.lower().encode("latin-1") in KEPT_HEADERS
        ]
        stored = json.dumps({"status": status, "headers": kept})
        done = complete_key(
            tx, HTTP_SCOPE, self.key, self._token, result=stored, body=body, now=time.time()
        )
        self.completed = self.completed or done
        if done:
            self._stored = (stored, body)
            if self.outcomes is not None:
                self.outcomes.add("completed")
        return done

    def complete(
        self,
        using: object,
        *,
        status: int,
        body: bytes = b"",
        headers: Mapping[str, str] | None = None,
    ) -> bool:
        """Store the answer in the caller's transaction (a sqlite3 or psycopg connection, a
        SQLAlchemy Connection or Session, Django's connection); False if the key is no longer
        this request's (its lease was taken over)."""
        return self._complete(self._db.borrow(using), status, body, headers)

    async def complete_async(
        self,
        using: object,
        *,
        status: int,
        body: bytes = b"",
        headers: Mapping[str, str] | None = None,
    ) -> bool:
        """``complete`` for a SQLAlchemy AsyncSession or AsyncConnection (or any kind
        ``complete`` takes)."""
        done: bool = await on_callers_connection(
            self._db, using, lambda tx: self._complete(tx, status, body, headers)
        )
        return done


def held_key(scope: Mapping[str, Any]) -> HeldKey | None:
    """The key the request of this ASGI ``scope`` runs under, if the middleware holds one."""
    found = scope.get("state", {}).get(STATE_NAME)
    return found if isinstance(found, HeldKey) else None


class IdempotencyMiddleware:
    """Wrap an ASGI ``app``: requests of ``methods`` with an ``Idempotency-Key`` run once per
    key (see the module's docstring and docs/idempotency.md).

    ``ledger`` is a :class:`ackledger.Ledger` or a target (a SQLite file path or a
    ``postgresql://`` URL) the middleware opens. ``required``: a request of ``methods``
    without a key is 400. ``ttl``: how long a key and its answer are kept. ``lease``: how long
    a running request's claim lasts without renewal (it is renewed while the app runs), so a
    key whose process died is taken over after it. ``scope``: a function of the ASGI scope
    returning who is asking (a tenant, an account), part of the fingerprint.
    """

    def __init__(
        self,
        app: ASGIApp,
        ledger: Ledger | str | os.PathLike[str],
        *,
        methods: Iterable[str] = ("POST", "PATCH"),
        required: bool = False,
        ttl: float | str = "24h",
        lease: float | str = "30s",
        scope: Callable[[Scope], str] | None = None,
    ) -> None:
        if isinstance(methods, str):
            raise TypeError("methods: must be a list of HTTP methods, not one string")
        self.app = app
        self.methods = frozenset(str(method).upper() for method in methods)
        if not self.methods:
            raise ValueError("methods: name at least one HTTP method")
        self.required = bool(required)
        self.ttl = as_seconds(ttl, "ttl")
        self.lease = as_seconds(lease, "lease")
        if scope is not None and not callable(scope):
            raise TypeError("scope: must be a function of the request's ASGI scope")
        self.scope = scope
        self._owned = not isinstance(ledger, Ledger)
        self.ledger = ledger if isinstance(ledger, Ledger) else Ledger(ledger)
        self._db = self.ledger.backend
        self._keys = OwnKeys(self._db, HTTP_SCOPE, lease=self.lease, ttl=self.ttl)
        # Every database call of a request (claim, completion, release) goes to these threads:
        # as many as the database takes transactions at once.
        self._calls = WarmThreads(self._db.concurrency, "ackledger-idempotency")

    def metrics_collector(self) -> Collector:
        """The keys' metrics (``ackledger_idempotency_*``: docs/operations.md) as a Prometheus
        collector, for the registry the app's own ``/metrics`` serves:
        ``REGISTRY.register(middleware.metrics_collector())``. Needs ``prometheus_client``
        (the ``server`` extra)."""
        from .key_metrics import KeyMetrics

        return KeyMetrics(self.ledger.key_outcomes, self.ledger.key_counts)

    def close(self) -> None:
        """Stop the middleware's database threads, and close the ledger if the middleware
        opened it."""
        self._calls.close()
        if self._owned:
            self.ledger.close()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        values = [value for name, value in scope["headers"] if name == b"idempotency-key"]
        method = str(scope["method"]).upper()
        if method not in self.methods:
            if values:
                covered = ", ".join(sorted(self.methods))
                await send_answer(
                    send,
                    *problem(
                        400,
                        "idempotency-key-not-used",
                        "Idempotency-Key not used",
                        f"{method} requests do not take an Idempotency-Key here (only {covered});"
                        " send the request without it",
                    ),
                )
                return
            await self.app(scope, receive, send)
            return
        if not values:
            if self.required:
                await send_answer(
                    send,
                    *problem(
                        400,
                        "idempotency-key-missing",
                        "Idempotency-Key missing",
                        f"{method} requests here need an Idempotency-Key header",
                    ),
                )
                return
            await self.app(scope, receive, send)
            return
        try:
            key = parse_key(values)
        except BadKey as exc:
            await send_answer(
                send, *problem(400, "idempotency-key-invalid", "Invalid Idempotency-Key", str(exc))
            )
            return
        body = await _read_body(receive)
        if body is None:
            await send_answer(
                send,
                *problem(
                    413,
                    "body-too-large",
                    "Body too large",
                    f"a request with an Idempotency-Key may carry at most {MAX_BYTES} bytes",
                ),
            )
            return
        fingerprint = self._fingerprint(scope, method, body)
        token = new_token()
        found = await self._calls.call(self._keys.claim, key, fingerprint, token)
        self.ledger.key_outcomes.found(found.found)
        if found.found is not Found.CLAIMED:
            await send_answer(send, *_refusal(found, key))
            return
        held = HeldKey(key, self._db, token, body, outcomes=self.ledger.key_outcomes)
        await self._run(scope, receive, send, held)

    def _fingerprint(self, scope: Scope, method: str, body: bytes) -> str:
        path = scope.get("raw_path") or str(scope["path"]).encode("utf-8")
        query = scope.get("query_string", b"")
        who = None
        if self.scope is not None:
            who = self.scope(scope)
            if not isinstance(who, str):
                raise TypeError(f"scope: must return a str, got {type(who).__name__}")
        parts = [
            method,
            bytes(path).decode("latin-1"),
            bytes(query).decode("latin-1"),
            hashlib.sha256(body).hexdigest(),
            who,
        ]
        return hashlib.sha256(json.dumps(parts).encode()).hexdigest()

    def _complete(self, key: str, token: str, result: str, body: bytes | None) -> None:
        if self._keys.complete(
            key, token, result, body
        ):  # not when the endpoint stored it first (HeldKey.complete counted that)
            self.ledger.key_outcomes.add("completed")

    async def _run(self, scope: Scope, receive: Receive, send: Send, held: HeldKey) -> None:
        key, token, body = held.key, held._token, held.body
        inner = {**scope, "state": {**scope.get("state", {}), STATE_NAME: held}}
        answer = _Recorder(send)
        renewing = self._keys.hold(key, token)
        try:
            await self.app(inner, _replaying(body, receive), answer.send)
        except BaseException:
            renewing.stop()
            await self._calls.call(self._keys.release, key, token)
            raise
        renewing.stop()
        status = answer.status
        if status is None or status >= 500:
            # A server error, or no answer at all: the next request with the key runs again.
            await self._calls.call(self._keys.release, key, token)
            await answer.flush()
            return
        if answer.unstorable is not None:
            stored = json.dumps({"status": status, "unstorable": answer.unstorable})
            await self._calls.call(self._complete, key, token, stored, None)
            await answer.flush()
            return
        stored = json.dumps({"status": status, "headers": answer.kept_headers()})
        # The endpoint stored this very answer in its transaction: nothing left to write. Any
        # other (its transaction rolled back, say) is stored here; a completed key refuses it.
        if held._stored == (stored, answer.body()):
            await answer.flush()
            return
        # Stored before the last byte is sent: a client never holds an answer a repeat of its
        # request would not get again.
        await self._calls.call(self._complete, key, token, stored, answer.body())
        await answer.flush()


def _refusal(found: KeyClaim, key: str) -> tuple[int, list[tuple[bytes, bytes]], bytes]:
    if found.found is Found.CONFLICT:
        return problem(
            422,
            "idempotency-key-reused",
            "Idempotency-Key reused",
            f"the Idempotency-Key {key!r} was used for another request (another method, path, "
            "body or caller); use a new key for a new request",
        )
    if found.found is Found.IN_FLIGHT:
        after = retry_after(found.lease_expires_at, time.time())
        return problem(
            409,
            "idempotency-key-in-flight",
            "Request in progress",
            f"a request with the Idempotency-Key {key!r} is still being processed; retry later",
            [(b"retry-after", str(after).encode())],
        )
    stored = json.loads(found.result or "{}")
    if "unstorable" in stored:
        return problem(
            409,
            "idempotency-answer-not-stored",
            "Answer not stored",
            f"the request with the Idempotency-Key {key!r} was processed, but its answer "
            f"(status {stored['status']}) could not be kept ({stored['unstorable']}); it is not "
            "run again",
        )
    headers = [
        (name.encode("latin-1"), value.encode("latin-1")) for name, value in stored["headers"]
    ]
    headers.append((b"idempotent-replayed", b"true"))
    return int(stored["status"]), headers, found.body or b""


async def _read_body(receive: Receive) -> bytes | None:
    """The whole request body, or None once it is over ``MAX_BYTES``."""
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] != "http.request":
            break
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > MAX_BYTES:
            return None
        chunks.append(chunk)
        if not message.get("more_body", False):
            break
    return b"".join(chunks)


def _replaying(body: bytes, receive: Receive) -> Receive:
    """The app's ``receive``: the body already read, then the client's own messages."""
    given = False

    async def replay() -> Message:
        nonlocal given
        if not given:
            given = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replay


class _Recorder:
    """Holds the app's answer back (up to ``MAX_BYTES``) until it is stored; an answer that
    grows past that, or is not plain start-and-body messages, goes out as it comes and is
    marked unstorable."""

    def __init__(self, send: Send) -> None:
        self._send = send
        self.status: int | None = None
        self._start: Message | None = None
        self._held: list[Message] = []
        self._size = 0
        self.unstorable: str | None = None

    async def send(self, message: Message) -> None:
        kind = message["type"]
        if kind == "http.response.start":
            self.status = int(message["status"])
            self._start = message
            if self.status >= 500:
                self.unstorable = "a server error"
            return
        if self.unstorable is None and kind == "http.response.body":
            self._size += len(message.get("body", b""))
            if self._size <= MAX_BYTES:
                self._held.append(message)
                return
            self.unstorable = f"it is over {MAX_BYTES} bytes"
        elif self.unstorable is None:
            self.unstorable = f"it was sent as {kind}"
        await self.flush()
        await self._send(message)

    def kept_headers(self) -> list[list[str]]:
        start = self._start or {}
        return [
            [bytes(name).decode("latin-1").lower(), bytes(value).decode("latin-1")]
            for name, value in start.get("headers", [])
            if bytes(name).lower() in KEPT_HEADERS
        ]

    def body(self) -> bytes:
        return b"".join(message.get("body", b"") for message in self._held)

    async def flush(self) -> None:
        """Send what is held back, once."""
        if self._start is not None:
            start, self._start = self._start, None
            await self._send(start)
        held, self._held = self._held, []
        for message in held:
            await self._send(message)
