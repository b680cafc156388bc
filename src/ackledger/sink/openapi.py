"""The sink's OpenAPI operations, one per route method (app.py declares its routes with
them; ``web.openapi`` builds the document from those routes)."""

from __future__ import annotations

from typing import Any

from ..web.openapi import Operation, json_response, problem, replayed_header

MAX_BATCH = 16
#: Printable text (no control characters) of 1-256 characters: an id, a type, a subject.
_PRINTABLE = {
    "type": "string",
    "minLength": 1,
    "maxLength": 256,
    "pattern": "^[^\\x00-\\x1f\\x7f-\\x9f]+$",
}
_ID = _PRINTABLE

EVENT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "description": "A CloudEvents 1.0 event in structured mode (CONTRACT sections 1, 13)",
    "required": ["specversion", "id", "source", "type"],
    "properties": {
        "specversion": {"const": "1.0"},
        "id": _ID,
        "source": {"type": "string", "minLength": 1, "maxLength": 256},
        "type": _PRINTABLE,
        "subject": _PRINTABLE,
        "time": {"type": "string", "format": "date-time"},
        "datacontenttype": {
            "type": "string",
            "description": "any media type, kept as sent: a JSON one carries any JSON value "
            "in data, any other a string in data or bytes in data_base64",
        },
        "dataschema": {"type": "string", "format": "uri", "minLength": 1},
        "data": {},
        "data_base64": {"type": "string", "contentEncoding": "base64"},
        "partitionkey": {"type": "string", "minLength": 1, "maxLength": 256},
        "traceparent": {"type": "string"},
        "tracestate": {"type": "string"},
    },
    "additionalProperties": {
        "description": "extensions: lowercase letters and digits; a string without control "
        "characters, a boolean or a signed 32-bit integer",
        "oneOf": [
            {"type": "string"},
            {"type": "boolean"},
            {"type": "integer", "minimum": -(2**31), "maximum": 2**31 - 1},
        ],
    },
    "propertyNames": {"pattern": "^[a-z0-9]+$|^data_base64$"},
}
_STATUS = {"enum": ["applied", "duplicate"]}
_ACK = {
    "type": "object",
    "required": ["ack", "id", "source", "status"],
    "properties": {
        "ack": {"const": True},
        "id": _ID,
        "source": {"type": "string"},
        "status": _STATUS,
    },
}
_BATCH_ERROR = {
    "allOf": [
        {"$ref": "#/components/schemas/Problem"},
        {
            "type": "object",
            "required": ["index"],
            "properties": {"index": {"type": "integer", "minimum": 0}},
            "description": "the first item that failed, with the status it would have had "
            "alone (422, 503, ...); the items after it were not applied",
        },
    ]
}
_RECEIPT = {
    "type": "object",
    "required": ["source", "id", "type", "fingerprint", "first_received_at", "receipts"],
    "properties": {
        "source": {"type": "string"},
        "id": _ID,
        "type": {"type": "string"},
        "fingerprint": {"type": "string", "description": "of the applied content"},
        "first_received_at": {"type": "number", "description": "Unix time, seconds"},
        "last_received_at": {"type": "number", "description": "Unix time, seconds"},
        "receipts": {"type": "integer", "minimum": 1, "description": "arrivals, re-sends too"},
    },
}
_RETRY_AFTER = {"Retry-After": {"schema": {"type": "integer"}, "description": "seconds"}}
_UNAVAILABLE = {
    **problem("the handler or the database failed; nothing was applied, a re-send is safe"),
    "headers": _RETRY_AFTER,
}
_TOO_LARGE = problem("a body over 64 KiB (a batch: 16 x 64 KiB); nothing was read further")

POST_EVENT: Operation = {
    "summary": "Apply an event once",
    "description": "Structured mode (application/cloudevents+json) or binary mode (ce-* "
    "headers, percent-encoded; the body is the data, of any media type, which is kept as "
    "the datacontenttype; a body without a Content-Type is JSON). Answered only after the "
    "commit that applied it.",
    "requestBody": {
        "required": True,
        "content": {
            "application/cloudevents+json": {"schema": EVENT_SCHEMA},
            "*/*": {
                "schema": {"description": "binary mode: the event's data; its attributes "
                           "are ce-* headers"},
            },
        },
    },
    "responses": {
        "200": json_response("the ACK: applied, or a duplicate", _ACK, headers=replayed_header()),
        "400": problem("invalid JSON or event, or a malformed Content-Type; nothing changed"),
        "413": _TOO_LARGE,
        "415": problem("another event format (application/cloudevents+avro, ...), a charset "
                       "other than UTF-8 for JSON, or a body without ce-* headers that is no "
                       "structured event; nothing changed"),
        "422": problem("same identity with other content, no handler, or the handler "
                       "rejected it (the problem's type says which); nothing changed"),
        "503": _UNAVAILABLE,
    },
}  # fmt: skip

POST_BATCH: Operation = {
    "summary": f"Apply 0-{MAX_BATCH} events in order",
    "description": "Every item is validated before any is applied: an invalid one refuses "
    "the batch (400, nothing applied). Then the items are applied in order up to the first "
    "one refused or failed (its problem is the answer's error). An empty batch is 200 with "
    "no ACKs.",
    "requestBody": {
        "required": True,
        "content": {
            "application/cloudevents-batch+json": {
                "schema": {
                    "type": "array",
                    "items": EVENT_SCHEMA,
                    "minItems": 0,
                    "maxItems": MAX_BATCH,
                }
            }
        },
    },
    "responses": {
        "200": json_response(
            "the ACKs of the applied prefix, in order, and the first failure if any",
            {
                "type": "object",
                "required": ["acks"],
                "properties": {"acks": {"type": "array", "items": _ACK}, "error": _BATCH_ERROR},
            },
        ),
        "400": problem(
            f"not a JSON list of 0-{MAX_BATCH} valid events (the problem's index "
            "names the invalid item); nothing applied"
        ),
        "413": _TOO_LARGE,
        "415": problem("not application/cloudevents-batch+json; nothing applied"),
        "503": _UNAVAILABLE,
    },
}

GET_RECEIPT: Operation = {
    "summary": "The inbox receipt of one event",
    "parameters": [
        {"name": "event_id", "in": "path", "required": True, "schema": _ID},
        {"name": "source", "in": "query", "required": False, "schema": {"type": "string"}},
    ],
    "responses": {
        "200": json_response("its receipt", _RECEIPT),
        "400": problem("not a valid event id, or a source that is not a valid event source"),
        "404": problem("the event never arrived"),
    },
}

HEALTHZ: Operation = {
    "summary": "Liveness: the process answers (never touches the database)",
    "responses": {
        "200": json_response(
            "alive",
            {
                "type": "object",
                "properties": {"status": {"const": "ok"}, "started_at": {"type": "number"}},
            },
        )
    },
}
