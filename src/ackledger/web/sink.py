"""The sink service: ``POST /events`` applies an event once through the inbox."""

from __future__ import annotations

import time
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from ..errors import AckledgerError, Conflict, InvalidEvent
from ..event import check_identifier
from ..inbox import Inbox
from .common import (
    BodyTooLarge,
    ServiceMetrics,
    bad_input,
    invalid,
    json_response,
    parse_json,
    problem,
    problem_body,
    read_capped,
)

MAX_BATCH = 16


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


def create_sink_app(inbox: Inbox) -> Starlette:
    # The inbox is called on the event loop, one receive at a time per process, on every
    # backend. Receives take the sink's arrival number first, which serialises them anyway
    # (that is what makes arrival order commit order); worker threads would only add lock
    # waits and thread hops (measured on PostgreSQL: about half the throughput of two sink
    # processes). Replicas are separate processes. Contrast the ledger (web/ledger.py).
    service_metrics = ServiceMetrics("sink", inbox.counters, SINK_COUNTERS)
    started_at = time.time()

    async def post_event(request: Request) -> Response:
        try:
            obj = parse_json(await read_capped(request))
            status = inbox.receive(obj)
        except (BodyTooLarge, ValueError) as exc:
            return bad_input(exc)
        except Conflict as exc:
            return problem(422, "conflict", "Conflicting content for this id", str(exc))
        headers = {"Idempotent-Replayed": "true"} if status == "duplicate" else None
        return json_response({"ack": True, "id": obj["id"], "status": status}, headers=headers)

    async def post_batch(request: Request) -> Response:
        try:
            items = parse_json(await read_capped(request))
        except (BodyTooLarge, ValueError) as exc:
            return bad_input(exc)
        if not isinstance(items, list) or not 1 <= len(items) <= MAX_BATCH:
            return invalid(f"body: must be a JSON list of 1-{MAX_BATCH} events", "body")
        result = inbox.receive_batch(items)
        acks = [
            {"id": item["id"], "ack": True, "status": status}
            for item, status in zip(items, result.statuses, strict=False)
        ]
        payload: dict[str, Any] = {"acks": acks}
        if result.error is not None:
            index = len(result.statuses)
            if isinstance(result.error, Conflict):
                payload["error"] = _conflict_problem(result.error)
            elif isinstance(result.error, InvalidEvent):
                payload["error"] = _invalid_problem(result.error)
            else:  # pragma: no cover - receive_batch only reports the two above
                payload["error"] = problem_body(500, "internal", "Error", str(result.error))
            payload["error"]["index"] = index
        return json_response(payload)

    async def get_event(request: Request) -> Response:
        event_id = request.path_params["event_id"]
        try:
            check_identifier(event_id, "id", 128)
        except AckledgerError as exc:
            return invalid(str(exc), "id")
        receipt = inbox.receipt(event_id)
        if receipt is None:
            return problem(404, "not-found", "No receipt", f"event {event_id!r} never arrived")
        return json_response(receipt)

    async def healthz(request: Request) -> Response:
        return json_response({"status": "ok", "started_at": started_at})

    async def metrics(request: Request) -> Response:
        return service_metrics.response()

    async def openapi(request: Request) -> Response:
        return json_response(SINK_OPENAPI)

    return Starlette(
        routes=[
            Route("/events", service_metrics.counted("/events", post_event), methods=["POST"]),
            Route(
                "/events/batch",
                service_metrics.counted("/events/batch", post_batch),
                methods=["POST"],
            ),
            Route("/events/{event_id:str}", get_event, methods=["GET"]),
            Route("/healthz", healthz, methods=["GET"]),
            Route("/metrics", metrics, methods=["GET"]),
            Route("/openapi.json", openapi, methods=["GET"]),
        ]
    )


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
