"""The services' front door (CONTRACT v2 section 9), as plain ASGI around either app.

Three checks, before any route sees the request, in this order:

1. headers a service reads as one value appear once (``Host``, ``Content-Type``,
   ``Content-Length``, ``Authorization``, ``Idempotency-Key``): two readers of one request
   (a proxy and us, or two of our own routes) must never see two values; else 400 naming it;
2. bound to loopback (or mounted: ``Inbox.asgi()``), the ``Host`` header is a loopback name
   or address, or one of the names allowed explicitly: a page whose DNS
   name was rebound to 127.0.0.1 sends its own name there, so it gets 421 and reaches nothing
   (no write, no listing, no metrics). Any port is taken: a loopback TCP proxy or port
   forward in front of the service names its own port, and the port is no defence against
   rebinding (the page's own URL names the right one);
3. with a token, every request but the probes (``/healthz``, ``/readyz``) carries
   ``Authorization: Bearer <token>``, compared in constant time; else 401 with
   ``WWW-Authenticate``. The token is never put in an answer or a log line.
"""

from __future__ import annotations

import functools
import hmac
import ipaddress
from collections.abc import Iterable

from starlette.types import ASGIApp, Receive, Scope, Send

from ..wire.token import Token
from .answers import Answer, invalid_answer, problem_answer
from .cloudevents_http import Headers

#: Headers read as one value; a second copy is refused rather than guessed at.
SINGLETON_HEADERS = frozenset(
    {b"host", b"content-type", b"content-length", b"authorization", b"idempotency-key"}
)
#: Liveness and readiness probes: the kubelet sends no token.
OPEN_PATHS = frozenset({"/healthz", "/readyz"})


def is_loopback_address(host: str) -> bool:
    """Is ``host`` (a bind address, no brackets) in 127.0.0.0/8 or ::1?"""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _host_name_and_port(value: str) -> tuple[str, int | None] | None:
    """``Host``'s name and port, or None when it cannot be parsed."""
    if value.startswith("["):
        name, bracket, rest = value[1:].partition("]")
        if not bracket or (rest and not rest.startswith(":")):
            return None
        port_text = rest[1:] if rest else None
    else:
        name, colon, port_text_or_empty = value.rpartition(":")
        if not colon:
            name, port_text = value, None
        else:
            port_text = port_text_or_empty
    if port_text is None:
        return name, None
    if not port_text.isascii() or not port_text.isdigit() or len(port_text) > 5:
        return None
    return name, int(port_text)


def host_name(value: bytes) -> str | None:
    """The name (or address) a ``Host`` header gives, lowercase and without its port; None
    when it cannot be parsed."""
    try:
        parsed = _host_name_and_port(value.decode("ascii").lower())
    except UnicodeDecodeError:
        return None
    return None if parsed is None else parsed[0]


@functools.lru_cache(maxsize=256)
def loopback_host(value: bytes) -> bool:
    """Does a ``Host`` header name a loopback name or address (with any port, or none)?
    Cached: a service sees the same few Host values on every request, and parsing one with
    ``ipaddress`` costs microseconds of the event loop's time per request; the cache is
    bounded, so a client sending many names only evicts."""
    name = host_name(value)
    return name is not None and is_loopback_address(name)


def check_allowed_hosts(allowed_hosts: Iterable[str] | None) -> frozenset[str]:
    """``allowed_hosts`` (Host names taken besides the loopback ones) as a set of lowercase
    names; TypeError or ValueError naming what is wrong."""
    if allowed_hosts is None:
        return frozenset()
    if isinstance(allowed_hosts, (str, bytes)):
        raise TypeError("allowed_hosts: must be a list of host names, not one string")
    found = set()
    for name in allowed_hosts:
        if not isinstance(name, str) or not name:
            raise TypeError(f"allowed_hosts: every host must be a non-empty string, got {name!r}")
        if any(ch in name for ch in "/@?# ") or not name.isascii():
            raise ValueError(f"allowed_hosts: {name!r} is not a host name (no port, no path)")
        found.add(name.lower().removeprefix("[").removesuffix("]"))
    return frozenset(found)


class Guard:
    """Wraps a service's ASGI app with the checks above.

    ``loopback`` turns the Host check on: the service is bound to loopback (one bound wider
    needs a token instead, or was started ``--insecure-no-token``). ``allowed_hosts`` adds
    Host names to the loopback ones (a mounted inbox served under the host app's own name).
    Paths are judged below a mount's ``root_path``, as the wrapped app's routes see them.
    """

    def __init__(
        self,
        app: ASGIApp,
        *,
        token: Token | None = None,
        loopback: bool = False,
        open_paths: Iterable[str] = OPEN_PATHS,
        allowed_hosts: Iterable[str] = (),
    ) -> None:
        self.app = app
        self._expected = token.value.encode("ascii") if token is not None else None
        self._loopback = loopback
        self._open = frozenset(open_paths)
        self._hosts = frozenset(allowed_hosts)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        path, root = scope["path"], scope.get("root_path", "")
        if root and path.startswith(root):
            path = path[len(root) :]
        refusal = self._refusal(path, scope["headers"])
        if refusal is not None:
            await refusal.send(send)
            return
        await self.app(scope, receive, send)

    def _refusal(self, path: str, headers: Headers) -> Answer | None:
        seen: dict[bytes, bytes] = {}
        for name, value in headers:
            if name in SINGLETON_HEADERS:
                if name in seen:
                    field = name.decode("latin-1")
                    return invalid_answer(f"{field}: header given more than once", field)
                seen[name] = value
        host = seen.get(b"host")
        if self._loopback and host is not None and not self._host_allowed(host):
            # No Host at all is HTTP/1.0 from a script; a browser always sends one.
            detail = (
                "this service listens on loopback and answers only requests addressed to a "
                "loopback name or address (the Host header names another host)"
                if not self._hosts
                else "this service answers only requests addressed to a loopback name or "
                "address or to a host name it was given (the Host header names another host)"
            )
            return problem_answer(421, "misdirected", "Misdirected request", detail)
        if self._expected is None or path in self._open:
            return None
        given = seen.get(b"authorization")
        if given is None:
            return _unauthorized("the request carries no Authorization: Bearer token", None)
        # The scheme is case-insensitive (RFC 9110); the token is compared in constant time.
        scheme, _, credentials = given.partition(b" ")
        if scheme.lower() != b"bearer" or not hmac.compare_digest(credentials, self._expected):
            return _unauthorized("the bearer token is not this service's", "invalid_token")
        return None

    def _host_allowed(self, host: bytes) -> bool:
        return loopback_host(host) or (bool(self._hosts) and host_name(host) in self._hosts)


def _unauthorized(detail: str, error: str | None) -> Answer:
    answer = problem_answer(401, "unauthorized", "Unauthorized", detail)
    challenge = 'Bearer realm="ackledger"' + (f', error="{error}"' if error else "")
    return Answer(answer.status, answer.body, answer.media_type, {"WWW-Authenticate": challenge})
