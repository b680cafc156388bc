"""The sink service: ``POST /events`` applies an event once through the inbox.

The two POST routes are plain ASGI handlers (``web.fastpath``) that share write transactions
with whatever other requests are ready at the same time (group commit): one fsync then makes
many clients' events durable, and each is answered only after it. A re-sent event needs no
write of its own: ``POST /events`` answers it from its read by key, in the request's own turn.
"""

from __future__ import annotations

import functools
import json
import time
from collections.abc import Callable, Sequence
from json.encoder import encode_basestring_ascii
from typing import Any

from starlette.requests import Request
from starlette.types import ASGIApp

from .._core.failures import refusal_of
from .._core.warm_threads import WarmThreads
from ..envelope import check_event_id, check_source
from ..errors import AckledgerError, InvalidEvent
from ..store import database_errors
from ..web.answers import (
    Answer,
    invalid_answer,
    json_answer,
    problem_answer,
    problem_body,
    refused_message,
    too_large_answer,
    unavailable_answer,
)
from ..web.bodies import MAX_BATCH_BODY_BYTES
from ..web.cloudevents_http import Headers, decode_batch, decode_event
from ..web.docs_page import api_routes
from ..web.fastpath import GroupCommit, PostRoute
from ..web.health import liveness, readiness
from ..web.metrics import ServiceMetrics
from ..web.observe import Observed
from ..web.openapi import METRICS, READYZ, DocumentedRoute
from ..web.routing import build_app
from . import openapi as api
from .handler_call import NotAwaited
from .inbox import BatchResult, Inbox, InvalidItem
from .retention_metrics import RetentionMetrics

MAX_BATCH = api.MAX_BATCH

#: The answer's header of a re-sent event (shared: answers only read their headers).
_REPLAYED = {"Idempotent-Replayed": "true"}
_REPLAYED_HEADER = (b"idempotent-replayed", b"true")
_JSON_TYPE = (b"content-type", b"application/json")


class _Ack(Answer):
    """A 200 ACK, with the headers ``Answer`` would send (the same in the same order) from
    header pairs made once: only the length is new per request."""

    def __init__(self, body: bytes, replayed: bool = False) -> None:
        # A frozen dataclass's ``__init__`` sets each field through ``object.__setattr__``;
        # an ACK's four are written at once here, which halves what building one costs on
        # the hot path. It stays frozen: assigning a field afterwards still raises.
        fields = self.__dict__
        fields["status"] = 200
        fields["body"] = body
        fields["media_type"] = "application/json"
        fields["headers"] = _REPLAYED if replayed else None

    def header_pairs(self) -> list[tuple[bytes, bytes]]:
        length = (b"content-length", b"%d" % len(self.body))
        return [_REPLAYED_HEADER, length, _JSON_TYPE] if self.headers else [length, _JSON_TYPE]


def _ack_body(event: dict[str, Any], status: str) -> bytes:
    """``json_answer({"ack": True, "id", "source", "status"})``'s body, formatted directly:
    the event passed validation; sources (URI-references) and statuses use only characters
    that JSON never escapes, and an id is quoted as the encoder quotes it, so the bytes are
    the same (one encode of the text, not one of each part)."""
    event_id, source = _QUOTE(event["id"]), event["source"]
    return f'{{"ack":true,"id":{event_id},"source":"{source}","status":"{status}"}}'.encode()


def _ack_item(event: Any, status: str) -> bytes:
    return b'{"id":%s,"source":"%s","ack":true,"status":"%s"}' % (
        _QUOTE(event["id"]).encode(),
        event["source"].encode(),
        status.encode(),
    )


#: JSON's quoting of a string, as ``json.dumps`` does it (C-accelerated).
_QUOTE = encode_basestring_ascii


def _batch_acks_body(items: Sequence[Any], statuses: Sequence[str]) -> bytes:
    """``json_answer({"acks": [...]})``'s body for a batch that had no error (see ``_ack_body``)."""
    acks = b",".join(
        [_ack_item(item, status) for item, status in zip(items, statuses, strict=True)]
    )
    return b'{"acks":[%s]}' % acks


SINK_COUNTERS = {
    "applied": "Events applied by their handler (first receipt of an identity).",
    "duplicates": "Re-sent events acknowledged again without a second effect.",
    "conflicts": "Events refused because their identity was applied with other content.",
}


def _sink_counts(inbox: Inbox) -> dict[str, int]:
    """The inbox's durable totals under their metric names (plural, as the ledger's)."""
    found = inbox.counters()
    return {
        "applied": found["applied"],
        "duplicates": found["duplicate"],
        "conflicts": found["conflict"],
    }


def _refusal(error: Exception) -> dict[str, Any]:
    """The problem JSON of a refused item (the ``status`` it would have had alone)."""
    refusal = refusal_of(error)
    if isinstance(error, InvalidEvent):
        extra = {"field": error.field} if error.field else {}
        return problem_body(refusal.status, refusal.slug, refusal.title, str(error), **extra)
    if refusal.permanent:
        return problem_body(refusal.status, refusal.slug, refusal.title, str(error))
    # Anything else a handler raised is taken as transient: the relay retries.
    detail = f"the handler failed ({type(error).__name__}: {error}); nothing was applied"
    return problem_body(refusal.status, refusal.slug, refusal.title, detail)


def _refusal_answer(error: Exception) -> Answer:
    problem = _refusal(error)
    status = problem["status"]
    # A 503 says when to come back; the relay's own backoff decides, this is for others.
    headers = {"Retry-After": "1"} if status == 503 else None
    return Answer(status, json.dumps(problem).encode(), "application/problem+json", headers)


def _event_ack(event: dict[str, Any], result: BatchResult) -> Answer:
    """The answer to one event's request, from what the inbox made of it."""
    if result.error is not None:
        return _refusal_answer(result.error)
    status = result.statuses[0]
    return _Ack(_ack_body(event, status), status == "duplicate")


async def _submitted(
    group: GroupCommit[Sequence[object], BatchResult],
    run: Sequence[object],
    answer: Callable[[BatchResult], Answer],
) -> Answer:
    """``run`` submitted to the next group commit; its answer made once the group is in."""
    try:
        result = await group.submit(run)
    except database_errors() as exc:
        return unavailable_answer(exc)
    except NotAwaited as exc:
        return _not_awaited_answer(exc)
    return answer(result)


def _not_awaited_answer(exc: NotAwaited) -> Answer:
    """503: a handler gave what this inbox could not await; nothing was written, so the
    event stays pending at its source until the handler is fixed."""
    problem = problem_body(503, "handler-not-awaited", "The handler cannot be run here", str(exc))
    return Answer(503, json.dumps(problem).encode(), "application/problem+json", None)


def _decoded(headers: Headers, body: bytes | None, decode: Callable[[Headers, bytes], Any]) -> Any:
    """The request's event (or list of events), or the Answer that refuses it (``body``
    None: over the cap)."""
    if body is None:
        return too_large_answer()
    try:
        return decode(headers, body)
    except InvalidEvent as exc:
        return refused_message(exc)


def create_sink_app(inbox: Inbox, *, prefix: str = "", own_thread: bool = False) -> ASGIApp:
    """The sink's routes for ``inbox``. A user's handlers run in a worker thread, never on the
    event loop (async ones awaited there, inside the receipt's transaction); so does every
    database call when ``own_thread`` (a mounted inbox: the host's loop is not ours to block).
    With only the reference handler, ``serve sink`` calls the inbox on its own event loop, one
    group-commit transaction at a time: receives take the arrival numbers first, which
    serialises them anyway, and a thread hop per group would only add latency."""
    thread = None
    if own_thread or inbox.runs_user_code:
        thread = WarmThreads(1, "ackledger-inbox")
    service_metrics = ServiceMetrics("sink", lambda: _sink_counts(inbox), SINK_COUNTERS)
    service_metrics.registry.register(RetentionMetrics(inbox.retention))
    started_at = time.time()
    group: GroupCommit[Sequence[object], BatchResult] = GroupCommit(
        functools.partial(inbox.receive_group, awaiting=thread is not None), thread=thread
    )
    read_lone = inbox.read_lone

    async def off_loop(call: Callable[[], Any]) -> Any:
        """A database read, in the inbox's thread when it has one (queued behind a group)."""
        if thread is None:
            return call()
        return await thread.call(call)

    async def event_answer(headers: Headers, body: bytes | None) -> Answer:
        # ``_decoded``'s steps without its frame: this runs for every event.
        if body is None:
            return too_large_answer()
        try:
            obj: Any = decode_event(headers, body)
        except InvalidEvent as exc:
            return refused_message(exc)
        if thread is not None:
            # Everything else in the inbox's thread: the read by key is a database call too.
            return await _submitted(group, [obj], lambda result: _event_ack(obj, result))
        # Validated and read by key in the request's own turn: a re-send (the commonest
        # request) is answered now, with no place in the group. Only what needs the write
        # joins the group, prepared.
        try:
            found = read_lone(obj)
        except AckledgerError as exc:
            return _refusal_answer(exc)
        except database_errors() as exc:
            return unavailable_answer(exc)
        if type(found) is str:
            return _Ack(_ack_body(obj, found), True)
        return await _submitted(group, found, lambda result: _event_ack(obj, result))

    async def batch_answer(headers: Headers, body: bytes | None) -> Answer:
        items = _decoded(headers, body, decode_batch)
        if isinstance(items, Answer):
            return items
        if not items:
            return _Ack(b'{"acks":[]}')
        if len(items) > MAX_BATCH:
            return invalid_answer(f"body: must be a JSON list of 0-{MAX_BATCH} events", "body")

        def finish(result: BatchResult) -> Answer:
            if result.error is None:
                return _Ack(_batch_acks_body(items, result.statuses))
            if isinstance(result.error, InvalidEvent):
                # Validated whole before anything was applied: the batch is refused.
                refused = result.error
                index = refused.index if isinstance(refused, InvalidItem) else 0
                return invalid_answer(f"[{index}] {refused}", refused.field, index=index)
            acks = [
                {"id": item["id"], "source": item["source"], "ack": True, "status": status}
                for item, status in zip(items, result.statuses, strict=False)
            ]
            error = _refusal(result.error)
            error["index"] = len(result.statuses)
            return json_answer({"acks": acks, "error": error})

        return await _submitted(group, items, finish)

    # Requests are counted and timed around the whole app (web.observe), these too.
    post_event = PostRoute(event_answer)
    post_batch = PostRoute(batch_answer, MAX_BATCH_BODY_BYTES)
    events, batch = prefix + "/events", prefix + "/events/batch"

    async def get_event(request: Request) -> Answer:
        event_id = request.path_params["event_id"]
        try:
            check_event_id(event_id)
        except AckledgerError as exc:
            return invalid_answer(str(exc), "id")
        source = request.query_params.get("source")
        if source is not None:
            try:
                check_source(source)  # checked as an event's: it never reaches the database bad
            except InvalidEvent as exc:
                return invalid_answer(str(exc), "source")
        receipt = await off_loop(lambda: inbox.receipt(event_id, source=source))
        if receipt is None:
            detail = f"event {event_id!r} never arrived"
            return problem_answer(404, "not-found", "No receipt", detail)
        return json_answer(receipt)

    async def read_counters() -> object:
        return await off_loop(inbox.counters)

    async def metrics(request: Request) -> Answer:
        answer: Answer = await off_loop(service_metrics.answer)
        return answer

    routes = [
        DocumentedRoute(events, post_event, methods=["POST"], operations={"POST": api.POST_EVENT}),
        DocumentedRoute(batch, post_batch, methods=["POST"], operations={"POST": api.POST_BATCH}),
        DocumentedRoute(
            prefix + "/events/{event_id:str}",
            get_event,
            methods=["GET"],
            operations={"GET": api.GET_RECEIPT},
        ),
        DocumentedRoute(
            prefix + "/healthz",
            liveness(lambda: {"status": "ok", "started_at": started_at}),
            methods=["GET"],
            operations={"GET": api.HEALTHZ},
            public=True,
        ),
        DocumentedRoute(
            prefix + "/readyz",
            readiness(read_counters),
            methods=["GET"],
            operations={"GET": READYZ},
            public=True,
        ),
        DocumentedRoute(prefix + "/metrics", metrics, methods=["GET"], operations={"GET": METRICS}),
    ]
    routes += api_routes(prefix, "ackledger sink", _DESCRIPTION, routes)
    app = build_app(list(routes))
    direct = {events: post_event, batch: post_batch}
    return Observed(app, service_metrics.registry, routes, direct)


_DESCRIPTION = (
    "The inbox service: POST /events applies each event (source, id) once and answers only "
    "after the commit (CONTRACT v2 section 6)."
)
