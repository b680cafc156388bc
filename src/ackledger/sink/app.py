"""The sink service: ``POST /events`` applies an event once through the inbox.

The two POST routes are plain ASGI handlers (``fastpath``) and share write transactions with
whatever other requests are ready at the same time (group commit): one fsync then makes many
clients' events durable, and each is answered only after it.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from starlette.requests import Request
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope

from ..errors import AckledgerError, Conflict, InvalidEvent
from ..event import check_identifier
from ..store import database_errors
from ..web.answers import (
    Answer,
    invalid_answer,
    json_answer,
    problem_answer,
    problem_body,
    too_large_answer,
    unavailable_answer,
)
from ..web.bodies import BodyTooLarge, ClientGone, parse_json, read_body
from ..web.fastpath import FastPosts, GroupCommit, PostRoute
from ..web.metrics import ServiceMetrics
from ..web.routing import build_app
from .inbox import BatchResult, Inbox

MAX_BATCH = 16

#: The answer's header of a re-sent event (shared: answers only read their headers).
_REPLAYED = {"Idempotent-Replayed": "true"}


def _ack_body(event_id: str, status: str) -> bytes:
    """``json_answer({"ack": True, "id": event_id, "status": status})``'s body, formatted
    directly: ``event_id`` passed validation, and identifiers and statuses use only characters
    that JSON never escapes (as ``event.event_json`` relies on), so the bytes are the same."""
    return b'{"ack":true,"id":"%s","status":"%s"}' % (event_id.encode(), status.encode())


def _batch_acks_body(items: Sequence[Any], statuses: Sequence[str]) -> bytes:
    """``json_answer({"acks": [...]})``'s body for a batch that had no error (see ``_ack_body``)."""
    acks = b",".join(
        [
            b'{"id":"%s","ack":true,"status":"%s"}' % (item["id"].encode(), status.encode())
            for item, status in zip(items, statuses, strict=True)
        ]
    )
    return b'{"acks":[%s]}' % acks


SINK_COUNTERS = {
    "applied": "Events applied to the inventory (first receipt of an id).",
    "duplicate": "Re-sent events acknowledged again without a second effect.",
    "conflict": "Events refused because their id was applied with other content.",
}


def _conflict_problem(exc: Conflict) -> dict[str, Any]:
    return problem_body(422, "conflict", "Conflicting content for this id", str(exc))


def _invalid_problem(exc: InvalidEvent) -> dict[str, Any]:
    extra = {"field": exc.field} if exc.field else {}
    return problem_body(400, "invalid", "Invalid event", str(exc), **extra)


async def _json_body(scope: Scope, receive: Receive) -> Any:
    """The parsed body, or the Answer that refuses it; None if the client went away."""
    try:
        return parse_json(await read_body(scope, receive))
    except BodyTooLarge:
        return too_large_answer()
    except ValueError as exc:
        return invalid_answer(str(exc), "body")


def create_sink_app(inbox: Inbox) -> ASGIApp:
    # The inbox is called on the event loop, one group-commit transaction at a time per
    # process, on every backend. Receives take the sink's arrival numbers first, which
    # serialises them anyway
    # (that is what makes arrival order commit order); worker threads would only add lock
    # waits and thread hops (measured on PostgreSQL: about half the throughput of two sink
    # processes). Replicas are separate processes. Contrast the ledger (ledger/app.py).
    service_metrics = ServiceMetrics("sink", inbox.counters, SINK_COUNTERS)
    started_at = time.time()
    group: GroupCommit[Sequence[object], BatchResult] = GroupCommit(inbox.receive_runs)

    async def event_answer(scope: Scope, receive: Receive) -> Answer | None:
        try:
            obj = await _json_body(scope, receive)
        except ClientGone:
            return None
        if isinstance(obj, Answer):
            return obj
        try:
            result = await group.submit([obj])
        except database_errors() as exc:
            return unavailable_answer(exc)
        error = result.error
        if isinstance(error, InvalidEvent):
            return invalid_answer(str(error), error.field)
        if isinstance(error, Conflict):
            return problem_answer(422, "conflict", "Conflicting content for this id", str(error))
        if error is not None:  # pragma: no cover - receive_runs only reports the two above
            raise error
        status = result.statuses[0]
        headers = _REPLAYED if status == "duplicate" else None
        return Answer(200, _ack_body(obj["id"], status), "application/json", headers)

    async def batch_answer(scope: Scope, receive: Receive) -> Answer | None:
        try:
            items = await _json_body(scope, receive)
        except ClientGone:
            return None
        if isinstance(items, Answer):
            return items
        if not isinstance(items, list) or not 1 <= len(items) <= MAX_BATCH:
            return invalid_answer(f"body: must be a JSON list of 1-{MAX_BATCH} events", "body")
        try:
            result = await group.submit(items)
        except database_errors() as exc:
            return unavailable_answer(exc)
        if result.error is None:
            return Answer(200, _batch_acks_body(items, result.statuses), "application/json")
        acks = [
            {"id": item["id"], "ack": True, "status": status}
            for item, status in zip(items, result.statuses, strict=False)
        ]
        payload: dict[str, Any] = {"acks": acks}
        if isinstance(result.error, Conflict):
            payload["error"] = _conflict_problem(result.error)
        elif isinstance(result.error, InvalidEvent):
            payload["error"] = _invalid_problem(result.error)
        else:  # pragma: no cover - receive_runs only reports the two above
            payload["error"] = problem_body(500, "internal", "Error", str(result.error))
        payload["error"]["index"] = len(result.statuses)
        return json_answer(payload)

    post_event = PostRoute("/events", event_answer, service_metrics.requests)
    post_batch = PostRoute("/events/batch", batch_answer, service_metrics.requests)

    async def get_event(request: Request) -> Answer:
        event_id = request.path_params["event_id"]
        try:
            check_identifier(event_id, "id", 128)
        except AckledgerError as exc:
            return invalid_answer(str(exc), "id")
        receipt = inbox.receipt(event_id)
        if receipt is None:
            detail = f"event {event_id!r} never arrived"
            return problem_answer(404, "not-found", "No receipt", detail)
        return json_answer(receipt)

    async def healthz(request: Request) -> Answer:
        return json_answer({"status": "ok", "started_at": started_at})

    async def metrics(request: Request) -> Answer:
        return service_metrics.answer()

    async def openapi(request: Request) -> Answer:
        return json_answer(SINK_OPENAPI)

    app = build_app(
        [
            Route("/events", post_event, methods=["POST"]),
            Route("/events/batch", post_batch, methods=["POST"]),
            Route("/events/{event_id:str}", get_event, methods=["GET"]),
            Route("/healthz", healthz, methods=["GET"]),
            Route("/metrics", metrics, methods=["GET"]),
            Route("/openapi.json", openapi, methods=["GET"]),
        ]
    )
    return FastPosts(app, {"/events": post_event, "/events/batch": post_batch})


_EVENT_SCHEMA = {
    "type": "object",
    "required": ["id", "sku", "qty"],
    "additionalProperties": False,
    "properties": {
        "id": {"type": "string", "pattern": "^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$"},
        "sku": {"type": "string", "pattern": "^[A-Za-z0-9][A-Za-z0-9._:-]{0,63}$"},
        "qty": {"type": "integer", "minimum": 1, "maximum": 1_000_000},
    },
}
_PROBLEM = {"application/problem+json": {"schema": {"type": "object"}}}

SINK_OPENAPI: dict[str, Any] = {
    "openapi": "3.1.0",
    "info": {"title": "ackledger sink", "version": "1"},
    "paths": {
        "/events": {
            "post": {
                "summary": "Apply an event once",
                "requestBody": {
                    "required": True,
                    "content": {"application/json": {"schema": _EVENT_SCHEMA}},
                },
                "responses": {
                    "200": {"description": "ACK: applied, or a duplicate (Idempotent-Replayed)"},
                    "400": {"description": "invalid event", "content": _PROBLEM},
                    "413": {"description": "body over 64 KiB", "content": _PROBLEM},
                    "422": {"description": "same id, other content", "content": _PROBLEM},
                },
            }
        },
        "/events/batch": {
            "post": {
                "summary": "Apply 1-16 events in order in one transaction",
                "requestBody": {
                    "required": True,
                    "content": {
                        "application/json": {
                            "schema": {
                                "type": "array",
                                "items": _EVENT_SCHEMA,
                                "minItems": 1,
                                "maxItems": MAX_BATCH,
                            }
                        }
                    },
                },
                "responses": {"200": {"description": "acks for the applied prefix, and error"}},
            }
        },
        "/events/{event_id}": {
            "get": {
                "summary": "The inbox receipt of one event",
                "responses": {"200": {"description": "receipt"}, "404": {"description": "none"}},
            }
        },
        "/healthz": {"get": {"responses": {"200": {"description": "alive"}}}},
        "/metrics": {"get": {"responses": {"200": {"description": "Prometheus text"}}}},
    },
}
