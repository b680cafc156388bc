"""The console's OpenAPI operations, one per route method (app.py declares its routes with
them; ``web.openapi`` builds the document from those routes).

The pages are read without a token; the buttons (POST) take a urlencoded form and the
console's token, in the form's ``token`` field or as ``Authorization: Bearer``. A refusal is
an HTML page saying why, not problem JSON: the console is read in a browser.
"""

from __future__ import annotations

from typing import Any

from ...ledger.openapi import PAGE_QUERY
from ...web.openapi import Operation, json_response
from .writes import MAX_FORM_BYTES

_ID = {"type": "string", "minLength": 1, "maxLength": 128}


def _page(description: str) -> dict[str, Any]:
    return {"description": description, "content": {"text/html": {"schema": {"type": "string"}}}}


def _get(summary: str, **answers: str) -> Operation:
    """A page: 200 and the other answers given (``_404="..."``) as HTML."""
    responses = {"200": _page("the page")}
    responses |= {status.lstrip("_"): _page(text) for status, text in answers.items()}
    return {"summary": summary, "responses": responses}


def _button(summary: str, fields: dict[str, Any], required: list[str], **answers: str) -> Operation:
    form = {
        "type": "object",
        "required": required,
        "properties": {
            "token": {
                "type": "string",
                "description": "the console's token (--token-file), unless sent as "
                "Authorization: Bearer",
            },
            **fields,
        },
    }
    responses = {
        "200": _page("done: what was changed"),
        "400": _page("a field is missing or wrong; nothing changed"),
        "403": _page(
            "no token, a wrong one, a read-only console (no --token-file), or a form "
            "posted from another site's page; nothing changed"
        ),
        "413": _page(f"a form over {MAX_FORM_BYTES} bytes; nothing changed"),
        "415": _page("not application/x-www-form-urlencoded; nothing changed"),
    }
    responses |= {status.lstrip("_"): _page(text) for status, text in answers.items()}
    return {
        "summary": summary,
        # The token as a Bearer header, or (the empty requirement) in the form's token field.
        "security": [{"bearer": []}, {}],
        "requestBody": {
            "required": True,
            "content": {"application/x-www-form-urlencoded": {"schema": form}},
        },
        "responses": responses,
    }


OVERVIEW = _get("The status figures with their meaning, and a chart of pending over time")
SAMPLES: Operation = {
    "summary": "The pending counts the chart draws, oldest first",
    "responses": {
        "200": json_response(
            "the samples taken since the console started",
            {"type": "object", "required": ["samples"], "properties": {"samples": {}}},
        )
    },
}
EVENTS = _get(
    "Pending events, quarantined events grouped by reason, and the messages a consumer refused"
)
TRACE = {
    **_get(
        "The evidence for one event at every stage",
        _400="not exactly one id given",
        _404="no such event, or an id that cannot be one",
    ),
    "parameters": [{"name": "id", "in": "query", "required": True, "schema": _ID}],
}
RECONCILE = _get(
    "Where the outbox and the sink disagree", _404="the console was started without --sink"
)
LEDGER = {
    **_get(
        "The ledger's keys with their attempts, a page at a time",
        _400="after or limit is not a whole number in range, or given twice",
        _404="the console was started without --ledger",
    ),
    "parameters": PAGE_QUERY,
}
HEALTHZ: Operation = {
    "summary": "Liveness",
    "responses": {
        "200": {"description": "ok", "content": {"text/plain": {"schema": {"const": "ok\n"}}}}
    },
}
QUARANTINE = _button(
    "Take a pending event out of pending, with the reason",
    {"id": _ID, "reason": {"type": "string", "description": "why (not blank)"}},
    ["id", "reason"],
    _404="unknown event id",
    _409="the event is not pending (sent, or already quarantined)",
)
REQUEUE = _button(
    "Put a quarantined event back into pending at its seq",
    {"id": _ID},
    ["id"],
    _404="unknown event id",
    _409="the event is not quarantined",
)
REQUEUE_GROUP = _button(
    "Put every event quarantined for a reason back into pending",
    {"reason": {"type": "string", "description": "the group's reason, as listed"}},
    ["reason"],
    _404="no event is quarantined for that reason",
)
