"""What both services share: problem JSON (RFC 9457), a capped body reader, JSON answers."""

from __future__ import annotations

import json
from typing import Any

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from starlette.requests import Request
from starlette.responses import Response

MAX_BODY_BYTES = 64 * 1024
PROBLEM_TYPE_BASE = "https://ackledger.invalid/problems/"


class BodyTooLarge(Exception):
    pass


def json_response(
    payload: Any, status: int = 200, headers: dict[str, str] | None = None
) -> Response:
    body = json.dumps(payload, separators=(",", ":")).encode()
    return Response(body, status_code=status, headers=headers, media_type="application/json")


def problem_body(status: int, kind: str, title: str, detail: str, **extra: Any) -> dict[str, Any]:
    return {
        "type": PROBLEM_TYPE_BASE + kind,
        "title": title,
        "status": status,
        "detail": detail,
        **extra,
    }


def problem(status: int, kind: str, title: str, detail: str, **extra: Any) -> Response:
    body = json.dumps(problem_body(status, kind, title, detail, **extra)).encode()
    return Response(body, status_code=status, media_type="application/problem+json")


def too_large() -> Response:
    return problem(
        413, "body-too-large", "Body too large", f"the request body is over {MAX_BODY_BYTES} bytes"
    )


def invalid(detail: str, field: str | None) -> Response:
    extra = {"field": field} if field else {}
    return problem(400, "invalid", "Invalid request", detail, **extra)


async def read_capped(request: Request, cap: int = MAX_BODY_BYTES) -> bytes:
    """The request body, refusing (without reading it all) anything over ``cap`` bytes."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > cap:
        raise BodyTooLarge
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > cap:
            raise BodyTooLarge
        chunks.append(chunk)
    return b"".join(chunks)


def parse_json(body: bytes) -> Any:
    """Parse a body; raises ValueError with a message fit for a 400."""
    try:
        return json.loads(body)
    except (ValueError, UnicodeDecodeError) as exc:
        raise ValueError(f"body: not valid JSON ({exc})") from None
    except RecursionError:
        # 64 KiB of "[" is valid-looking input that nests past the parser's stack.
        raise ValueError("body: JSON nested too deeply") from None


def metrics_response(registry: CollectorRegistry) -> Response:
    return Response(generate_latest(registry), media_type=CONTENT_TYPE_LATEST)
