"""Request bodies: capped reads, the JSON content-type check, strict JSON."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from starlette.requests import ClientDisconnect, Request
from starlette.types import Receive, Scope

from .._core.strict_json import parse_strict_json
from ..errors import InvalidEvent

MAX_BODY_BYTES = 64 * 1024
#: A batch holds up to 16 events of up to 64 KiB each; the rest is room for the list's
#: brackets, commas and whitespace, however a client lays them out.
MAX_BATCH_BODY_BYTES = 16 * MAX_BODY_BYTES + 16 * 1024


class BodyTooLarge(Exception):
    pass


class ClientGone(Exception):
    """The client disconnected before its request body was complete."""


def check_json_type(value: str | None) -> None:
    """Refuse a body not declared as JSON (ValueError naming ``body``, a 400).

    A browser sends a cross-site POST without asking first only for "simple" content types
    (text/plain, forms); requiring application/json makes any page that a user on this
    machine opens unable to post events or ledger requests to a service on loopback.
    """
    media = (value or "").split(";", 1)[0].strip().lower()
    if media != "application/json":
        raise ValueError(f"body: Content-Type must be application/json, got {value or 'none'!r}")


async def read_body(
    scope: Scope,
    receive: Receive,
    cap: int = MAX_BODY_BYTES,
    check_type: Callable[[str | None], None] | None = check_json_type,
) -> bytes:
    """The body of a raw ASGI request, refusing (without reading on) anything over ``cap``
    bytes: BodyTooLarge, or ClientGone if the client left first. ``check_type`` judges the
    Content-Type first (None: the caller does, from the headers)."""
    declared_type = None
    for name, value in scope["headers"]:
        if name == b"content-length" and value.isdigit() and int(value) > cap:
            raise BodyTooLarge
        if name == b"content-type":
            if declared_type is not None:
                # One reading of the request: never the first here and the last elsewhere.
                raise InvalidEvent(
                    "content-type: header given more than once", field="content-type"
                )
            declared_type = value.decode("latin-1")
    if check_type is not None:
        check_type(declared_type)
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise ClientGone
        chunk: bytes = message.get("body", b"")
        size += len(chunk)
        if size > cap:
            raise BodyTooLarge
        chunks.append(chunk)
        if not message.get("more_body", False):
            return b"".join(chunks)


async def read_capped(request: Request, cap: int = MAX_BODY_BYTES) -> bytes:
    """``read_body`` for a Starlette request; a client that left raises Starlette's own
    ClientDisconnect, as ``request.stream()`` would."""
    try:
        return await read_body(request.scope, request.receive, cap)
    except ClientGone:
        raise ClientDisconnect from None


def parse_json(body: bytes) -> Any:
    """Parse a body; raises ValueError with a message fit for a 400."""
    try:
        # JSON on the wire is UTF-8 (RFC 8259); json.loads(bytes) would also guess UTF-16
        # or UTF-32 and skip a BOM, so two clients could send one event in two encodings.
        return parse_strict_json(body.decode("utf-8"))
    except (ValueError, UnicodeDecodeError) as exc:
        raise ValueError(f"body: not valid JSON ({exc})") from None
    except RecursionError:
        # 64 KiB of "[" is valid-looking input that nests past the parser's stack.
        raise ValueError("body: JSON nested too deeply") from None
