"""The ledger's OpenAPI operations, one per route method (app.py declares its routes
with them; ``web.openapi`` builds the document from those routes)."""

from __future__ import annotations

from typing import Any

from ..web.openapi import Operation, json_response, problem, replayed_header
from .ledger import MAX_KEY_LEN, REQUIRED_FIELDS
from .outcomes import MAX_CLAIM_TTL
from .pages import MAX_NUMBER, MAX_PAGE

_KEY = {"type": "string", "pattern": f"^[A-Za-z0-9][A-Za-z0-9._:-]{{0,{MAX_KEY_LEN - 1}}}$"}
_MODE = {"enum": ["idempotent", "control"]}
_POD_UID = {
    "type": "string",
    "pattern": "^[ -~]{1,128}$",
    "description": "the execution, for tracing only",
}
_IDENTITY = {
    "type": "object",
    "description": "which ledger incarnation answered (a new boot_id: the process restarted)",
    "required": ["pod_uid", "boot_id"],
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
        "mode": _MODE,
        "state": {"enum": ["in_progress", "completed"]},
        "result": {"description": "what the completing worker reported (once completed)"},
        "completed_at": {"type": ["number", "null"]},
        "completed_by": {"type": ["string", "null"]},
        "claim": {
            "type": "object",
            "description": "the claim this request took (with claim_ttl): token, taken_over, ttl",
        },
        "ledger": _IDENTITY,
    },
}
_DELIVERY = {
    "type": "object",
    "properties": {
        "delivery_no": {"type": "integer"},
        "case_id": _KEY,
        "work_id": _KEY,
        "mode": _MODE,
        "pod_uid": {"type": "string"},
        "fingerprint": {"type": "string"},
        "created_at": {"type": "number", "description": "Unix time, seconds"},
    },
}
_ATTEMPT = {
    "type": "object",
    "properties": {
        "attempt_no": {"type": "integer"},
        "case_id": _KEY,
        "work_id": _KEY,
        "pod_uid": {"type": "string"},
        "mode": _MODE,
        "delivery_no": {"type": ["integer", "null"]},
        "outcome": {"type": "string"},
        "at": {"type": "number", "description": "Unix time, seconds"},
    },
}
#: A listing's page: the same two parameters wherever the ledger's rows are paged.
PAGE_QUERY = [
    {
        "name": "after",
        "in": "query",
        "required": False,
        "description": "the page after this number (the Link header's next page sets it)",
        "schema": {"type": "integer", "minimum": 0, "maximum": MAX_NUMBER},
    },
    {
        "name": "limit",
        "in": "query",
        "required": False,
        "description": "at most this many rows",
        "schema": {"type": "integer", "minimum": 1, "maximum": MAX_PAGE},
    },
]
_CASE_QUERY = [
    {"name": "case_id", "in": "query", "required": False, "schema": _KEY},
    *PAGE_QUERY,
]
_UNAVAILABLE: dict[str, Any] = {
    **problem("the database failed; nothing was recorded, the same request again is safe"),
    "headers": {"Retry-After": {"schema": {"type": "integer"}, "description": "seconds"}},
}

POST_DELIVERY: Operation = {
    "summary": "The delivery of a business key: created once, then replayed",
    "requestBody": {
        "required": True,
        "content": {
            "application/json": {
                "schema": {
                    "type": "object",
                    "required": list(REQUIRED_FIELDS),
                    "additionalProperties": False,
                    "properties": {
                        "case_id": _KEY,
                        "work_id": _KEY,
                        "pod_uid": _POD_UID,
                        "mode": _MODE,
                        "payload": {"type": ["object", "null"]},
                        "claim_ttl": {
                            "type": ["number", "null"],
                            "exclusiveMinimum": 0,
                            "maximum": MAX_CLAIM_TTL,
                            "description": "claim the work: a live claim younger than this "
                            "is answered 409 (seconds; null: no claim)",
                        },
                    },
                }
            }
        },
    },
    "responses": {
        "201": json_response("a new delivery", _ANSWER),
        "200": json_response("the key's existing delivery", _ANSWER, headers=replayed_header()),
        "400": problem("invalid request; nothing recorded"),
        "413": problem("body over 64 KiB; nothing recorded"),
        "409": problem("the key's work is in flight under a live claim (Retry-After)"),
        "422": problem("the same key with another payload; the attempt is recorded, no delivery"),
        "503": _UNAVAILABLE,
    },
}


def _listing(summary: str, item: dict[str, Any]) -> Operation:
    return {
        "summary": summary,
        "parameters": _CASE_QUERY,
        "responses": {
            "200": json_response("a JSON list", {"type": "array", "items": item}),
            "400": problem("an unknown query parameter, or case_id given twice"),
            "503": _UNAVAILABLE,
        },
    }


LIST_DELIVERIES = _listing("Deliveries in number order", _DELIVERY)
LIST_ATTEMPTS = _listing("Every request in arrival order, with the pod_uid that sent it", _ATTEMPT)

HEALTHZ: Operation = {
    "summary": "Liveness, and the ledger's own identity (never touches the database)",
    "responses": {
        "200": json_response(
            "alive",
            {
                "type": "object",
                "required": ["pod_uid", "boot_id", "node_boot_id", "started_at"],
                "properties": {
                    "pod_uid": {"type": "string"},
                    "boot_id": {"type": "string"},
                    "node_boot_id": {"type": ["string", "null"]},
                    "started_at": {"type": "number"},
                },
            },
        )
    },
}
