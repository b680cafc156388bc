"""``POST /events`` as a Django view: a relay delivers to the Django project itself, and each
event is applied by ``receive`` (the handlers of ``settings.ACKLEDGER["HANDLERS"]``, with
Django's models, in one transaction with the receipt).

Mount it with ``path("", include("ackledger.django.urls"))`` and point the relay at
``http://HOST/events`` (the relay sends to the path ``/events``). The answers are the sink
service's (CONTRACT §6): 200 with the exact ACK (``Idempotent-Replayed: true`` for a
duplicate), 400 for an invalid event, 422 for a conflict, a missing handler or a
``Rejected``, 503 with ``Retry-After`` for any other failure; nothing is recorded unless the
answer is 200. ``POST /events/batch`` takes a relay's ``--batch`` requests. Who may post is
Django's to decide (its authentication middleware, a reverse proxy); by default this view
trusts what reaches it.
"""

from __future__ import annotations

import json
from typing import Any

from django.http import HttpRequest, HttpResponse
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_POST

from ..envelope import validate_encoded
from ..errors import Conflict, InvalidEvent, NoHandler, Rejected
from ..sink.handler_call import NotAwaited
from ..web.cloudevents_http import UnsupportedMedia, decode_batch, decode_event
from .receive import receive

PROBLEMS = "https://ackledger.invalid/problems/"
#: Refusals for good, by what the inbox raised: (status, problem type, title).
_REFUSED: tuple[tuple[type[Exception], int, str, str], ...] = (
    (UnsupportedMedia, 415, "unsupported-media-type", "Unsupported media type"),
    (InvalidEvent, 400, "invalid", "Invalid event"),
    (Conflict, 422, "conflict", "Conflicting content for this identity"),
    (NoHandler, 422, "no-handler", "No handler for this event type"),
    (Rejected, 422, "rejected", "The handler rejected this event"),
    (NotAwaited, 500, "handler-not-awaited", "An async handler where none can be awaited"),
)


#: The most events one batch request may carry (the sink service's limit).
MAX_BATCH = 16


def _problem_of(exc: Exception) -> dict[str, Any]:
    """The problem JSON of what refused an event (its ``status`` is the answer's)."""
    for kind, code, name, title in _REFUSED:
        if isinstance(exc, kind):
            extra = {"field": exc.field} if isinstance(exc, InvalidEvent) and exc.field else {}
            return {"type": PROBLEMS + name, "title": title, "status": code,
                    "detail": str(exc), **extra}  # fmt: skip
    # Anything else (a handler's failure, the database) is transient: the relay retries.
    detail = f"the handler failed ({type(exc).__name__}: {exc}); nothing was applied"
    return {"type": PROBLEMS + "handler-failed", "title": "The handler failed", "status": 503,
            "detail": detail}  # fmt: skip


def _problem(exc: Exception) -> HttpResponse:
    body = _problem_of(exc)
    response = HttpResponse(
        json.dumps(body), status=body["status"], content_type="application/problem+json"
    )
    if body["status"] == 503:
        response["Retry-After"] = "1"
    return response


def _headers(request: HttpRequest) -> list[tuple[bytes, bytes]]:
    return [
        (name.lower().encode("latin-1"), value.encode("latin-1", "replace"))
        for name, value in request.headers.items()
    ]


@csrf_exempt
@require_POST
def events_batch(request: HttpRequest) -> HttpResponse:
    """``POST /events/batch``: the whole batch validated first (an invalid item: 400, nothing
    applied), then applied in order in one transaction up to the first event refused or
    failed, whose problem is the answer's ``error``; the prefix before it commits."""
    from django.db import transaction

    from .config import alias

    try:
        batch: list[Any] = decode_batch(_headers(request), request.body)
        if len(batch) > MAX_BATCH:
            raise InvalidEvent(
                f"body: a batch holds at most {MAX_BATCH} events, got {len(batch)}", field="body"
            )
        for item in batch:
            validate_encoded(item)
    except InvalidEvent as exc:
        return _problem(exc)
    acks: list[dict[str, Any]] = []
    answer: dict[str, Any] = {"acks": acks}
    with transaction.atomic(using=alias()):
        for event in batch:
            try:
                status = receive(event)  # a savepoint each: a failure undoes only its own
            except Exception as exc:
                answer["error"] = _problem_of(exc)
                break
            acks.append({"id": event["id"], "source": event["source"], "ack": True,
                         "status": status})  # fmt: skip
    return HttpResponse(json.dumps(answer), content_type="application/json")


@csrf_exempt
@require_POST
def events(request: HttpRequest) -> HttpResponse:
    try:
        event: Any = decode_event(_headers(request), request.body)
        status = receive(event)
    except Exception as exc:
        return _problem(exc)
    answer = {"ack": True, "id": event["id"], "source": event["source"], "status": status}
    response = HttpResponse(json.dumps(answer), content_type="application/json")
    if status == "duplicate":
        response["Idempotent-Replayed"] = "true"
    return response
