"""``POST /events`` as a Django view: a relay delivers to the Django project itself, and each
event is applied by ``receive`` (the handlers of ``settings.ACKLEDGER["HANDLERS"]``, with
Django's models, in one transaction with the receipt).

Mount it with ``path("", include("ackledger.django.urls"))`` and point the relay at
``http://HOST/events`` (the relay sends to the path ``/events``). The answers are the sink
service's (CONTRACT §6): 200 with the exact ACK (``Idempotent-Replayed: true`` for a
duplicate), 400 for an invalid event, 422 for a conflict, a missing handler or a
``Rejected``, 503 with ``Retry-After`` for any other failure; nothing is recorded unless the
answer is 200. Who may post is Django's to decide (its authentication middleware, a reverse
proxy); by default this view trusts what reaches it.
"""

from __future__ import annotations

import json
from typing import Any

from django.http import HttpRequest, HttpResponse
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_POST

from ..errors import Conflict, InvalidEvent, NoHandler, Rejected
from ..sink.handler_call import NotAwaited
from ..web.cloudevents_http import decode_event
from .receive import receive

PROBLEMS = "https://ackledger.invalid/problems/"
#: Refusals for good, by what the inbox raised: (status, problem type, title).
_REFUSED: tuple[tuple[type[Exception], int, str, str], ...] = (
    (InvalidEvent, 400, "invalid", "Invalid event"),
    (Conflict, 422, "conflict", "Conflicting content for this identity"),
    (NoHandler, 422, "no-handler", "No handler for this event type"),
    (Rejected, 422, "rejected", "The handler rejected this event"),
    (NotAwaited, 500, "handler-not-awaited", "An async handler where none can be awaited"),
)


def _problem(status: int, kind: str, title: str, detail: str, **extra: Any) -> HttpResponse:
    body = {"type": PROBLEMS + kind, "title": title, "status": status, "detail": detail, **extra}
    response = HttpResponse(
        json.dumps(body), status=status, content_type="application/problem+json"
    )
    if status == 503:
        response["Retry-After"] = "1"
    return response


@csrf_exempt
@require_POST
def events(request: HttpRequest) -> HttpResponse:
    headers = [
        (name.lower().encode("latin-1"), value.encode("latin-1", "replace"))
        for name, value in request.headers.items()
    ]
    try:
        event: Any = decode_event(headers, request.body)
        status = receive(event)
    except Exception as exc:
        for kind, code, name, title in _REFUSED:
            if isinstance(exc, kind):
                extra = {"field": exc.field} if isinstance(exc, InvalidEvent) and exc.field else {}
                return _problem(code, name, title, str(exc), **extra)
        # Anything else (a handler's failure, the database) is transient: the relay retries.
        detail = f"the handler failed ({type(exc).__name__}: {exc}); nothing was applied"
        return _problem(503, "handler-failed", "The handler failed", detail)
    answer = {"ack": True, "id": event["id"], "source": event["source"], "status": status}
    response = HttpResponse(json.dumps(answer), content_type="application/json")
    if status == "duplicate":
        response["Idempotent-Replayed"] = "true"
    return response
