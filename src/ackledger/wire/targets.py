"""Where a request may go: the allow-lists, checked before any connection or name look-up.

Only ``http://`` URLs to a loopback host (or a host given explicitly) are accepted, with
exactly the expected path, or with any path where events are sent (a sink may be mounted
anywhere in its host's app); user information, queries, fragments and port 0 are refused as
:class:`UnsafeTarget`. Time-outs are checked here too, as every request takes one.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable
from dataclasses import dataclass
from urllib.parse import SplitResult, urlsplit

from .._core.exact import is_number
from ..errors import UnsafeTarget

#: The longest time-out a request takes, in seconds (a day is already no time-out at all for a
#: relay; far beyond it a socket's own range ends and the system call itself would fail).
MAX_TIMEOUT_S = 86400.0
LOOPBACK_HOSTS = frozenset({"127.0.0.1", "localhost", "::1"})


@dataclass(frozen=True)
class Target:
    host: str
    port: int
    path: str


def split_url(url: object, usage: str | None = None) -> tuple[SplitResult, int | None]:
    """The first checks every target URL gets, whatever its scheme: a string without
    whitespace or control characters that parses; returns its parts and port. A parse error
    is named without quoting the URL (``usage`` says the expected form instead), so a password
    in it never reaches a message."""
    if not isinstance(url, str):
        raise UnsafeTarget(f"url: must be a string, got {type(url).__name__}")
    if any(ch.isspace() or ord(ch) < 32 or ord(ch) == 127 for ch in url):
        raise UnsafeTarget("url: must not contain whitespace or control characters")
    try:
        parts = urlsplit(url)
        return parts, parts.port
    except ValueError as exc:
        reason = f" as {usage}" if usage else f": {exc}"
        raise UnsafeTarget(f"url: cannot be parsed{reason}") from None


def base_url(url: object, route: str = "/events") -> str:
    """``http://HOST:PORT`` of a service URL whose path is empty, ``/metrics`` or the service's
    ``route``, with the path before ``route`` or ``/metrics`` kept (a sink mounted at
    ``/shipping`` is ``http://HOST:PORT/shipping``); refuses any other path."""
    if not isinstance(url, str):
        raise UnsafeTarget(f"url: must be a string, got {type(url).__name__}")
    if "?" in url or "#" in url:
        raise UnsafeTarget("url: a query or fragment is not allowed")
    try:
        parts = urlsplit(url)
    except ValueError as exc:
        raise UnsafeTarget(f"url: cannot be parsed: {exc}") from None
    for tail in (route, "/metrics"):
        if parts.path.endswith(tail) and parts.path.isascii():
            return f"{parts.scheme}://{parts.netloc}{parts.path[: -len(tail)]}"
    if parts.path not in ("", "/"):
        raise UnsafeTarget(
            f"url: give the service's base URL, http://HOST:PORT (got path {parts.path!r})"
        )
    return f"{parts.scheme}://{parts.netloc}"


def check_service_url(
    url: object, route: str = "/events", allowed_hosts: Iterable[str] | None = None
) -> str:
    """``base_url(url, route)``, its host checked against the allow-list (UnsafeTarget)."""
    base = base_url(url, route)
    check_target(base + route, ANY_PATH, allowed_hosts)  # base_url has judged the path
    return base


def check_host(host: str, allowed_hosts: Iterable[str] | None, how: str = "explicitly") -> str:
    """``host`` if it is loopback or one of ``allowed_hosts`` (UnsafeTarget if not)."""
    if host not in LOOPBACK_HOSTS | {h.lower() for h in (allowed_hosts or ())}:
        raise UnsafeTarget(
            f"url: host {host or '(none)'!r} is not allowed (allowed: 127.0.0.1, localhost, [::1]"
            f" and any host given {how})"
        )
    return host


#: ``check_target``'s ``path`` for a target of events: any path is taken.
ANY_PATH = None


def check_target(
    url: object, path: str | None = "/events", allowed_hosts: Iterable[str] | None = None
) -> Target:
    """Parse ``url`` or raise :class:`UnsafeTarget`; makes no connection and no DNS query.
    ``path`` is the one path the URL must have, or ``ANY_PATH`` (an empty one is ``/``)."""
    if not isinstance(url, str):
        raise UnsafeTarget(f"url: must be a string, got {type(url).__name__}")
    hosts = None if allowed_hosts is None else tuple(allowed_hosts)
    for extra in hosts or ():
        if not isinstance(extra, str) or not extra:
            raise TypeError(f"allowed_hosts: every host must be a non-empty string, got {extra!r}")
    # A relay sends every event to the same URL: parse it once, not once per event.
    return _check_target(url, path, hosts)


@functools.lru_cache(maxsize=256)
def _check_target(url: str, path: str | None, allowed_hosts: tuple[str, ...] | None) -> Target:
    parts, port = split_url(url)
    if "?" in url or "#" in url:
        raise UnsafeTarget("url: a query or fragment is not allowed")
    if parts.scheme != "http":
        raise UnsafeTarget(f"url: only http:// is allowed, got {parts.scheme or 'none'!r}")
    if "@" in parts.netloc:
        raise UnsafeTarget("url: user information is not allowed")
    host = check_host((parts.hostname or "").lower(), allowed_hosts)
    if path is not None and parts.path != path:
        raise UnsafeTarget(f"url: the path must be exactly {path}, got {parts.path or '/'!r}")
    if not parts.path.isascii():
        raise UnsafeTarget("url: the path must be ASCII (percent-encode other characters)")
    if port == 0:
        raise UnsafeTarget("url: port 0 is not a port a service can listen on")
    return Target(host, port if port is not None else 80, parts.path or "/")


def batch_path(path: str) -> str:
    """Where a batch goes for events sent to ``path``: that path plus ``/batch``."""
    return path.rstrip("/") + "/batch"


def check_timeout(timeout: object) -> float:
    """A request time-out in seconds: more than 0, at most ``MAX_TIMEOUT_S``."""
    if not is_number(timeout):
        raise ValueError(f"timeout: must be a number of seconds, got {type(timeout).__name__}")
    if not 0 < timeout <= MAX_TIMEOUT_S:  # also refuses nan
        raise ValueError(
            f"timeout: must be more than 0 and at most {MAX_TIMEOUT_S:.0f} seconds, got {timeout!r}"
        )
    return float(timeout)
