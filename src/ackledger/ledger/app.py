"""The ledger service: ``POST /deliveries`` hands out one delivery number per business key.

The service answers with its own identity (``pod_uid``, ``boot_id``) on every delivery and on
``/healthz``: a ledger that restarted in a new Pod with an empty emptyDir would hand out fresh
numbers, and a client can only tell by seeing another incarnation answer.
"""

from __future__ import annotations

import functools
import os
import socket
import time
import uuid
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from starlette.requests import Request
from starlette.types import ASGIApp

from ..errors import InvalidEvent
from ..store import database_errors
from ..web.answers import Answer, bad_input, json_answer, problem_answer, unavailable_answer
from ..web.bodies import BodyTooLarge
from ..web.database_calls import DatabaseCalls
from ..web.docs_page import api_routes
from ..web.fastpath import GroupCommit
from ..web.health import Handler, liveness, readiness
from ..web.metrics import ServiceMetrics
from ..web.observe import Observed
from ..web.openapi import METRICS, READYZ, DocumentedRoute
from ..web.routing import build_app
from . import openapi as api
from .key_metrics import KeyMetrics
from .ledger import (
    Ledger,
    LedgerRequest,
    PayloadConflict,
    Refusal,
    request_from_json,
)
from .outcome_app import in_flight_answer, outcome_routes, read_request
from .outcomes import InFlight
from .pages import next_link, page_from_query

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


def create_ledger_app(ledger: Ledger, identity: Identity | None = None) -> ASGIApp:
    me = identity or local_identity()
    service_metrics = ServiceMetrics("ledger", ledger.counters, LEDGER_COUNTERS)
    service_metrics.registry.register(KeyMetrics(ledger.key_outcomes, ledger.key_counts))
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
            req = request_from_json(await read_request(request))
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
        unknown = sorted(set(request.query_params) - {"case_id", "after", "limit"})
        if unknown:
            raise InvalidEvent(f"{unknown[0]}: unknown query parameter", field=unknown[0])
        given = request.query_params.getlist("case_id")
        if len(given) > 1:
            raise InvalidEvent("case_id: given more than once", field="case_id")
        return given[0] if given else None

    def listing(read: Callable[..., list[dict[str, Any]]], number: str) -> Handler:
        async def answer(request: Request) -> Answer:
            try:
                case_id = _scope(request)
                query = request.query_params
                after, limit = page_from_query({k: query.getlist(k) for k in ("after", "limit")})
                rows = await db(functools.partial(read, case_id, after=after, limit=limit))
                return json_answer(rows, 200, next_link(request, rows, number, limit))
            except InvalidEvent as exc:
                return bad_input(exc, ledger=me.short)
            except database_errors() as exc:
                return unavailable_answer(exc, ledger=me.short)

        return answer

    async def metrics(request: Request) -> Answer:
        return await db(service_metrics.answer)

    async def read_counters() -> object:
        return await db(ledger.counters)

    list_deliveries = listing(ledger.deliveries, "delivery_no")

    async def deliveries(request: Request) -> Answer:
        # One route for both methods, so that a 405 on /deliveries names both in Allow.
        return await (post_delivery if request.method == "POST" else list_deliveries)(request)

    routes = [
        DocumentedRoute(
            "/deliveries", deliveries, methods=["GET", "POST"],
            operations={"GET": api.LIST_DELIVERIES, "POST": api.POST_DELIVERY},
        ),
        *outcome_routes(ledger, db, me.short),
        DocumentedRoute(
            "/attempts", listing(ledger.attempts, "attempt_no"), methods=["GET"],
            operations={"GET": api.LIST_ATTEMPTS},
        ),
        DocumentedRoute(
            "/healthz", liveness(lambda: asdict(me)), methods=["GET"],
            operations={"GET": api.HEALTHZ}, public=True,
        ),
        DocumentedRoute(
            "/readyz", readiness(read_counters, ledger=me.short), methods=["GET"],
            operations={"GET": READYZ}, public=True,
        ),
        DocumentedRoute("/metrics", metrics, methods=["GET"], operations={"GET": METRICS}),
    ]  # fmt: skip
    routes += api_routes("", "ackledger ledger", _DESCRIPTION, routes)
    return Observed(
        build_app(ledger=me.short, routes=list(routes)), service_metrics.registry, routes
    )


_DESCRIPTION = (
    "The idempotency ledger: POST /deliveries hands out one delivery number per business key "
    "(case_id, work_id), however often a Job re-runs (CONTRACT v2 section 7)."
)
