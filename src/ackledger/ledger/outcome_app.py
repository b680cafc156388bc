"""The ledger service's outcome routes: ``POST /deliveries/complete`` and ``/deliveries/release``,
and the 409 of a request that finds its key in flight.

A worker reports on the work behind its delivery here: done (with a result), or failed (its
claim given back, so the next Pod need not wait for the claim to expire).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from starlette.requests import ClientDisconnect, Request

from ..store import database_errors
from ..web.answers import Answer, bad_input, json_answer, problem_answer, unavailable_answer
from ..web.bodies import BodyTooLarge, parse_json, read_capped
from ..web.database_calls import DatabaseCalls
from ..web.openapi import DocumentedRoute
from .ledger import Ledger, complete_from_json, release_from_json
from .outcomes import InFlight, Report, UnknownDelivery


def in_flight_answer(exc: InFlight, case_id: str, work_id: str, **extra: Any) -> Answer:
    """409, the IETF Idempotency-Key draft's answer to a key whose first request is still being
    worked on; ``Retry-After`` says when a request with the same claim_ttl would take over."""
    answer = problem_answer(
        409,
        "in-flight",
        "This business key is in flight",
        str(exc),
        case_id=case_id,
        work_id=work_id,
        attempt=exc.attempt,
        delivery_no=exc.delivery_no,
        claimed_by=exc.claimed_by,
        claim_age_s=round(exc.age, 3),
        **extra,
    )
    return replace(answer, headers={"Retry-After": str(max(1, math.ceil(exc.retry_after)))})


async def read_request(request: Request) -> Any:
    """The request's JSON body (capped); a client that leaves mid-body is bad input like a
    body cut short, not a server error (nothing is written either way)."""
    try:
        body = await read_capped(request)
    except ClientDisconnect:
        raise ValueError("body: the client left before sending it all") from None
    return parse_json(body)


def outcome_routes(
    ledger: Ledger, db: DatabaseCalls, identity: dict[str, str]
) -> list[DocumentedRoute]:
    def reporting(
        parse: Callable[[object], Report], apply: Callable[[Report], dict[str, Any]]
    ) -> Callable[[Request], Any]:
        async def answer(request: Request) -> Answer:
            try:
                report = parse(await read_request(request))
                done = await db(apply, report)
            except (BodyTooLarge, ValueError) as exc:
                return bad_input(exc, ledger=identity)
            except UnknownDelivery as exc:
                return problem_answer(
                    404, "unknown-delivery", "No such delivery", str(exc), ledger=identity
                )
            except database_errors() as exc:
                return unavailable_answer(exc, ledger=identity)
            return json_answer(
                {**done, "case_id": report.case_id, "work_id": report.work_id, "ledger": identity}
            )

        return answer

    return [
        DocumentedRoute(
            "/deliveries/complete",
            reporting(complete_from_json, ledger.report_complete),
            methods=["POST"],
            operations={"POST": OUTCOME_OPENAPI_PATHS["/deliveries/complete"]["post"]},
        ),
        DocumentedRoute(
            "/deliveries/release",
            reporting(release_from_json, ledger.report_release),
            methods=["POST"],
            operations={"POST": OUTCOME_OPENAPI_PATHS["/deliveries/release"]["post"]},
        ),
    ]


#: The OpenAPI paths of the outcome routes (merged into the ledger's description).
_KEY_SCHEMA = {"type": "string", "pattern": "^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$"}
_CLAIM = {"type": "string", "pattern": "^[0-9a-f]{32}$", "description": "the answer's claim.token"}
_PROBLEM = {"application/problem+json": {"schema": {"type": "object"}}}
_STATE = {
    "type": "object",
    "required": ["delivery_no", "state", "case_id", "work_id", "ledger"],
    "properties": {
        "delivery_no": {"type": "integer"},
        "state": {"enum": ["in_progress", "completed"]},
        "result": {"description": "what the completing worker reported (once completed)"},
        "case_id": _KEY_SCHEMA,
        "work_id": _KEY_SCHEMA,
        "ledger": {"type": "object"},
    },
}


def json_post(
    summary: str,
    properties: dict[str, Any],
    required: list[str],
    responses: dict[str, Any],
) -> dict[str, Any]:
    """The OpenAPI operation of a POST route that takes one JSON object of ``properties``."""
    schema = {
        "type": "object",
        "required": required,
        "additionalProperties": False,
        "properties": properties,
    }
    return {
        "summary": summary,
        "requestBody": {"required": True, "content": {"application/json": {"schema": schema}}},
        "responses": responses,
    }


def _report_path(summary: str, properties: dict[str, Any], required: list[str]) -> dict[str, Any]:
    responses = {
        "200": {
            "description": "the delivery's state (and result once completed)",
            "content": {"application/json": {"schema": _STATE}},
        },
        "400": {"description": "invalid request", "content": _PROBLEM},
        "404": {"description": "no such delivery", "content": _PROBLEM},
    }
    fields = {"case_id": _KEY_SCHEMA, "work_id": _KEY_SCHEMA, **properties}
    return {"post": json_post(summary, fields, required, responses)}


OUTCOME_OPENAPI_PATHS: dict[str, Any] = {
    "/deliveries/complete": _report_path(
        "The work of the key's delivery finished (the first completion wins)",
        {
            "result": {"description": "any JSON value, replayed to every later request"},
            "pod_uid": {"type": ["string", "null"], "pattern": "^[ -~]{1,128}$"},
            "claim": {**_CLAIM, "type": ["string", "null"]},
        },
        ["case_id", "work_id"],
    ),
    "/deliveries/release": _report_path(
        "The work failed: give the claim back, the delivery stays in progress",
        {
            "claim": _CLAIM,
            "exit_status": {"type": ["integer", "null"], "minimum": -255, "maximum": 255},
        },
        ["case_id", "work_id", "claim"],
    ),
}
