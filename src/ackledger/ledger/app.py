"""The ledger service: ``POST /deliveries`` hands out one delivery number per business key.

The service answers with its own identity (``pod_uid``, ``boot_id``) on every delivery and on
``/healthz``: a ledger that restarted in a new Pod with an empty emptyDir would hand out fresh
numbers, and a client can only tell by seeing another incarnation answer.
"""

from __future__ import annotations

import os
import socket
import time
import uuid
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.routing import Route

from ..errors import InvalidEvent
from ..store import database_errors
from ..web.answers import Answer, bad_input, json_answer, problem_answer, unavailable_answer
from ..web.bodies import BodyTooLarge, parse_json, read_capped
from ..web.database_calls import DatabaseCalls
from ..web.fastpath import GroupCommit
from ..web.metrics import Handler, ServiceMetrics
from ..web.routing import build_app
from .ledger import (
    MAX_KEY_LEN,
    REQUIRED_FIELDS,
    Ledger,
    LedgerRequest,
    PayloadConflict,
    Refusal,
    request_from_json,
)
from .outcome_app import OUTCOME_OPENAPI_PATHS, in_flight_answer, json_post, outcome_routes
from .outcomes import InFlight

NODE_BOOT_ID_PATH = Path("/proc/sys/kernel/random/boot_id")


@dataclass(frozen=True)
class Identity:
    """Which ledger incarnation answers: the Pod, this process, the node's boot."""

    pod_uid: str
    boot_id: str
    node_boot_id: str | None
    started_at: float

    @property
    def short(self) -> dict[str, str]:
        return {"pod_uid": self.pod_uid, "boot_id": self.boot_id}


def local_identity() -> Identity:
    """``POD_UID`` from the downward API, else ``local-<hostname>``; a fresh ``boot_id``."""
    pod_uid = os.environ.get("POD_UID") or f"local-{socket.gethostname()}"
    try:
        node_boot_id: str | None = NODE_BOOT_ID_PATH.read_text(encoding="ascii").strip()
    except OSError:
        node_boot_id = None
    return Identity(pod_uid, uuid.uuid4().hex, node_boot_id, time.time())


LEDGER_COUNTERS = {
    "attempts": "Delivery requests recorded (every outcome).",
    "deliveries": "Deliveries created (new keys in idempotent mode, every control request).",
    "duplicates": "Requests answered with an existing delivery of their key.",
    "conflicts": "Requests refused because their key has another payload.",
}


def create_ledger_app(ledger: Ledger, identity: Identity | None = None) -> Starlette:
    me = identity or local_identity()
    service_metrics = ServiceMetrics("ledger", ledger.counters, LEDGER_COUNTERS)
    db = DatabaseCalls(ledger.backend)
    # One writer at a time (SQLite): requests that are ready together share one transaction
    # and one fsync. With a pool (PostgreSQL) each request has its own transaction on a worker
    # thread instead: requests of one group would hold their keys' locks until the group
    # commits, and two processes' groups could wait on each other.
    group: GroupCommit[LedgerRequest, dict[str, Any] | Refusal] = GroupCommit(ledger.submit_many)

    async def submit(req: LedgerRequest) -> dict[str, Any]:
        if db.concurrency > 1:
            return await db(ledger.submit, req)
        answer = await group.submit(req)
        if isinstance(answer, (PayloadConflict, InFlight)):
            raise answer
        return answer

    async def post_delivery(request: Request) -> Answer:
        try:
            req = request_from_json(parse_json(await read_capped(request)))
            done = await submit(req)
        except (BodyTooLarge, ValueError) as exc:
            return bad_input(exc, ledger=me.short)
        except database_errors() as exc:
            return unavailable_answer(exc, ledger=me.short)
        except InFlight as exc:
            return in_flight_answer(exc, req.case_id, req.work_id, ledger=me.short)
        except PayloadConflict as exc:
            return problem_answer(
                422,
                "conflict",
                "This business key has another payload",
                str(exc),
                case_id=req.case_id,
                work_id=req.work_id,
                attempt=exc.attempt,
                ledger=me.short,
            )
        answer = {**done, "case_id": req.case_id, "work_id": req.work_id, "mode": req.mode}
        answer["ledger"] = me.short
        if done["duplicate"]:
            return json_answer(answer, 200, {"Idempotent-Replayed": "true"})
        return json_answer(answer, 201)

    def _scope(request: Request) -> str | None:
        unknown = sorted(set(request.query_params) - {"case_id"})
        if unknown:
            raise InvalidEvent(f"{unknown[0]}: unknown query parameter", field=unknown[0])
        given = request.query_params.getlist("case_id")
        if len(given) > 1:
            raise InvalidEvent("case_id: given more than once", field="case_id")
        return given[0] if given else None

    def listing(read: Callable[[str | None], list[dict[str, Any]]]) -> Handler:
        async def answer(request: Request) -> Answer:
            try:
                return json_answer(await db(read, _scope(request)))
            except InvalidEvent as exc:
                return bad_input(exc, ledger=me.short)
            except database_errors() as exc:
                return unavailable_answer(exc, ledger=me.short)

        return answer

    async def healthz(request: Request) -> Answer:
        return json_answer(asdict(me))

    async def metrics(request: Request) -> Answer:
        return await db(service_metrics.answer)

    async def openapi(request: Request) -> Answer:
        return json_answer(LEDGER_OPENAPI)

    create = service_metrics.counted("/deliveries", post_delivery)
    list_deliveries = listing(ledger.deliveries)

    async def deliveries(request: Request) -> Answer:
        # One route for both methods, so that a 405 on /deliveries names both in Allow.
        return await (create if request.method == "POST" else list_deliveries)(request)

    return build_app(
        ledger=me.short,
        routes=[
            Route("/deliveries", deliveries, methods=["GET", "POST"]),
            *outcome_routes(ledger, db, me.short),
            Route("/attempts", listing(ledger.attempts), methods=["GET"]),
            Route("/healthz", healthz, methods=["GET"]),
            Route("/metrics", metrics, methods=["GET"]),
            Route("/openapi.json", openapi, methods=["GET"]),
        ],
    )


_KEY = {"type": "string", "pattern": f"^[A-Za-z0-9][A-Za-z0-9._:-]{{0,{MAX_KEY_LEN - 1}}}$"}
_PROBLEM = {"application/problem+json": {"schema": {"type": "object"}}}
_IDENTITY = {
    "type": "object",
    "properties": {"pod_uid": {"type": "string"}, "boot_id": {"type": "string"}},
}
_ANSWER = {
    "type": "object",
    "required": ["delivery_no", "duplicate", "attempt", "ledger"],
    "properties": {
        "delivery_no": {"type": "integer"},
        "duplicate": {"type": "boolean"},
        "attempt": {"type": "integer", "description": "the nth request for this key"},
        "case_id": _KEY,
        "work_id": _KEY,
        "mode": {"enum": ["idempotent", "control"]},
        "state": {"enum": ["in_progress", "completed"]},
        "result": {"description": "what the completing worker reported (once completed)"},
        "claim": {
            "type": "object",
            "description": "the claim this request took (with claim_ttl): token, taken_over, ttl",
        },
        "ledger": _IDENTITY,
    },
}
_CASE_QUERY = [{"name": "case_id", "in": "query", "required": False, "schema": _KEY}]

LEDGER_OPENAPI: dict[str, Any] = {
    "openapi": "3.1.0",
    "info": {"title": "ackledger ledger", "version": "1"},
    "paths": {
        "/deliveries": {
            "post": json_post(
                "The delivery of a business key: created once, then replayed",
                {
                    "case_id": _KEY,
                    "work_id": _KEY,
                    "pod_uid": {
                        "type": "string",
                        "pattern": "^[ -~]{1,128}$",
                        "description": "the execution, for tracing only",
                    },
                    "mode": {"enum": ["idempotent", "control"]},
                    "payload": {"type": ["object", "null"]},
                    "claim_ttl": {
                        "type": "number",
                        "exclusiveMinimum": 0,
                        "maximum": 86400,
                        "description": "claim the work; a live claim younger than this is "
                        "answered 409",
                    },
                },
                list(REQUIRED_FIELDS),
                {
                    "201": {
                        "description": "a new delivery",
                        "content": {"application/json": {"schema": _ANSWER}},
                    },
                    "200": {
                        "description": "the key's existing delivery (Idempotent-Replayed: true)",
                        "content": {"application/json": {"schema": _ANSWER}},
                    },
                    "400": {"description": "invalid request", "content": _PROBLEM},
                    "413": {"description": "body over 64 KiB", "content": _PROBLEM},
                    "409": {"description": "the key is in flight", "content": _PROBLEM},
                    "422": {"description": "same key, other payload", "content": _PROBLEM},
                },
            ),
            "get": {
                "summary": "Deliveries in number order",
                "parameters": _CASE_QUERY,
                "responses": {"200": {"description": "a JSON list"}},
            },
        },
        "/attempts": {
            "get": {
                "summary": "Every request in arrival order, with the pod_uid that sent it",
                "parameters": _CASE_QUERY,
                "responses": {"200": {"description": "a JSON list"}},
            }
        },
        "/healthz": {
            "get": {
                "summary": "The ledger's own identity: pod_uid, boot_id, node_boot_id, started_at",
                "responses": {"200": {"description": "alive"}},
            }
        },
        "/metrics": {"get": {"responses": {"200": {"description": "Prometheus text"}}}},
        **OUTCOME_OPENAPI_PATHS,
    },
}
