"""The one answer type of both services, and RFC 9457 problem JSON.

An :class:`Answer` (status, body, media type, headers) is built once and then sent straight
on an ASGI ``send`` (the sink's hot POST routes, see ``fastpath``) or handed to Starlette,
which calls it as an ASGI app like its own responses: both say exactly the same bytes.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from typing import Any

from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from ..envelope.message import UnsupportedMedia
from ..errors import InvalidEvent
from .bodies import MAX_BODY_BYTES, BodyTooLarge

PROBLEM_TYPE_BASE = "https://ackledger.invalid/problems/"


@dataclass(frozen=True)
class Answer:
    status: int
    body: bytes
    media_type: str
    headers: dict[str, str] | None = None

    def response(self) -> Response:
        """The same answer as a Starlette ``Response`` (for what Starlette types as one)."""
        return Response(
            self.body, status_code=self.status, headers=self.headers, media_type=self.media_type
        )

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await self.send(send)

    def header_pairs(self) -> list[tuple[bytes, bytes]]:
        """The answer's headers as sent, in order."""
        headers = [
            (b"content-length", str(len(self.body)).encode()),
            (b"content-type", self.media_type.encode("latin-1")),
        ]
        if self.headers:
            headers = [
                *(
                    (k.lower().encode("latin-1"), v.encode("latin-1"))
                    for k, v in self.headers.items()
                ),
                *headers,
            ]
        return headers

    async def send(self, send: Send) -> None:
        """Send as ``response()`` would: the same status, headers and body (the media types
        here are never text/* without a charset, so Starlette adds no charset either)."""
        headers = self.header_pairs()
        await send({"type": "http.response.start", "status": self.status, "headers": headers})
        await send({"type": "http.response.body", "body": self.body})


def json_answer(payload: Any, status: int = 200, headers: dict[str, str] | None = None) -> Answer:
    body = json.dumps(payload, separators=(",", ":")).encode()
    return Answer(status, body, "application/json", headers)


def problem_body(status: int, kind: str, title: str, detail: str, **extra: Any) -> dict[str, Any]:
    return {
        "type": PROBLEM_TYPE_BASE + kind,
        "title": title,
        "status": status,
        "detail": detail,
        **extra,
    }


def problem_answer(status: int, kind: str, title: str, detail: str, **extra: Any) -> Answer:
    body = json.dumps(problem_body(status, kind, title, detail, **extra)).encode()
    return Answer(status, body, "application/problem+json")


def too_large_answer(**extra: Any) -> Answer:
    detail = f"the request body is over {MAX_BODY_BYTES} bytes"
    return problem_answer(413, "body-too-large", "Body too large", detail, **extra)


def invalid_answer(detail: str, field: str | None, **extra: Any) -> Answer:
    if field:
        extra["field"] = field
    return problem_answer(400, "invalid", "Invalid request", detail, **extra)


def refused_message(exc: InvalidEvent, **extra: Any) -> Answer:
    """The answer to a message that cannot be read: 415 for a media type that is not taken
    (``UnsupportedMedia``), else 400 naming the field."""
    if isinstance(exc, UnsupportedMedia):
        detail = str(exc)
        return problem_answer(
            415, "unsupported-media-type", "Unsupported media type", detail, field=exc.field
        )
    return invalid_answer(str(exc), exc.field, **extra)


def bad_input(exc: BodyTooLarge | ValueError, **extra: Any) -> Answer:
    """The answer for input refused before anything is written: 413 for a body over the cap,
    else 400 naming the field (an InvalidEvent's own, or ``body`` for unparseable JSON).
    ``extra`` members are added to the problem JSON."""
    if isinstance(exc, BodyTooLarge):
        return too_large_answer(**extra)
    field = exc.field if isinstance(exc, InvalidEvent) and exc.field else "body"
    return invalid_answer(str(exc), field, **extra)


def unavailable_answer(exc: Exception, **extra: Any) -> Answer:
    """503 for a request the database failed (a lock waited out, a connection lost): the
    client's retry is safe, since every write here is idempotent. Without it the client got
    Starlette's plain-text 500, without the problem JSON (or the ledger's identity)."""
    detail = (
        f"the database failed ({type(exc).__name__}: {exc}); nothing was acknowledged, "
        "and sending the same request again is safe"
    )
    answer = problem_answer(503, "unavailable", "Database unavailable", detail, **extra)
    return replace(answer, headers={"Retry-After": "1"})
