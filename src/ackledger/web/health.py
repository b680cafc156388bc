"""Liveness and readiness, kept apart as Kubernetes means them.

``/healthz`` (liveness) never touches the database: a database outage must not make the
kubelet restart every replica, which would not bring the database back. ``/readyz``
(readiness) makes one read and answers 503 while it fails, so the Service stops routing
requests to a replica that can only refuse them.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from starlette.requests import Request

from .answers import Answer, json_answer, problem_answer

Handler = Callable[[Request], Awaitable[Answer]]


def liveness(identity: Callable[[], dict[str, Any]]) -> Handler:
    """``GET /healthz``: 200 with ``identity()``, whatever the database does."""

    async def healthz(request: Request) -> Answer:
        return json_answer(identity())

    return healthz


def readiness(read: Callable[[], Awaitable[object]], **extra: Any) -> Handler:
    """``GET /readyz``: 200 when ``read()`` (one read of the service's database) answers, else
    503 problem JSON naming the failure, with ``extra`` members."""

    async def readyz(request: Request) -> Answer:
        try:
            await read()
        except Exception as exc:  # any failure of the read means: do not route here now
            detail = f"the database does not answer ({type(exc).__name__}: {exc})"
            answer = problem_answer(503, "not-ready", "Not ready", detail, **extra)
            return Answer(503, answer.body, answer.media_type, {"Retry-After": "1"})
        return json_answer({"status": "ready"})

    return readyz
