"""The console's pages: each reads through the library call its command uses (``status``,
``pending``/``quarantined``, ``trace``, ``reconcile``, the ledger's listings) on a worker
thread, and renders it. They only read."""

from __future__ import annotations

from collections import defaultdict
from typing import TYPE_CHECKING, Any

from starlette.concurrency import run_in_threadpool
from starlette.responses import JSONResponse, PlainTextResponse, Response

from ...envelope import check_event_id
from ...errors import AckledgerError, InvalidEvent
from ...ledger.pages import page_from_query
from ...relay.leases import lease_words
from ...sink.inbox import Inbox
from ...sink.refused import listing
from ...store import is_database_url
from ..databases import is_url
from ..reconcile import reconcile
from ..trace import trace
from .meanings import shown_figures

if TYPE_CHECKING:
    from starlette.requests import Request

    from .app import Console

#: Pending events listed on the events page (the count says how many there are in all).
PENDING_SHOWN = 200
#: Keys a page of the ledger shows unless ``limit`` asks for another number.
LEDGER_PAGE = 50
#: Ids reconcile lists per class.
RECONCILE_MAX_IDS = 50
#: Refused messages the events page lists.
REFUSED_SHOWN = 200


async def overview(console: Console, request: Request) -> Response:
    def read() -> tuple[dict[str, Any], list[dict[str, Any]]]:
        return console.outbox.stats(), console.outbox.held_by_leases()

    figures, held = await run_in_threadpool(read)
    leases = [{**lease, "words": lease_words(lease)} for lease in held]
    return console.page(
        "overview.html", title="overview", figures=shown_figures(figures), leases=leases
    )


async def samples(console: Console, request: Request) -> Response:
    kept = await run_in_threadpool(console.samples.take)
    return JSONResponse({"samples": kept}, headers={"Cache-Control": "no-store"})


async def healthz(console: Console, request: Request) -> Response:
    return PlainTextResponse("ok\n")


def group_by_reason(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Quarantined events by their reason, the largest group first (then by first seq)."""
    groups: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for row in rows:
        groups[row["reason"]].append(row)
    found = [{"reason": reason, "events": events} for reason, events in groups.items()]
    return sorted(found, key=lambda group: (-len(group["events"]), group["events"][0]["seq"]))


def refused_at_sink(sink: str | None) -> tuple[list[dict[str, Any]], int] | None:
    """The messages the sink's consumer refused (the first ``REFUSED_SHOWN``) and how many
    there are; None when the sink is not an inbox database (a service keeps none)."""
    if sink is None or (is_url(sink) and not is_database_url(sink)):
        return None
    with Inbox(sink) as inbox:
        with inbox.backend.read() as tx:
            total = tx.refused_count()
        return listing(inbox, REFUSED_SHOWN), total


async def events(console: Console, request: Request) -> Response:
    def read() -> tuple[list[dict[str, Any]], int, list[dict[str, Any]], Any]:
        pending, total = console.outbox.pending_listing(PENDING_SHOWN)
        return pending, total, console.outbox.quarantined(), refused_at_sink(console.sink)

    pending, total, quarantined, refused = await run_in_threadpool(read)
    return console.page(
        "events.html",
        title="events",
        pending=pending,
        pending_total=total,
        quarantined_total=len(quarantined),
        groups=group_by_reason(quarantined),
        refused=None if refused is None else refused[0],
        refused_total=None if refused is None else refused[1],
    )


async def trace_page(console: Console, request: Request) -> Response:
    values = request.query_params.getlist("id")
    if len(values) != 1:
        return console.message(400, "trace", "give one event id: /trace?id=EVENT_ID")
    event_id = values[0]
    try:
        check_event_id(event_id)
    except (ValueError, AckledgerError) as exc:
        return console.message(404, "trace", f"no such event: {exc}")
    report = await run_in_threadpool(
        lambda: trace(event_id, console.source, console.sink, inbox_name=console.inbox_name)
    )
    status = 200 if report["known"] else 404
    return console.page("trace.html", status, title=f"trace of {event_id}", report=report)


async def reconcile_page(console: Console, request: Request) -> Response:
    if console.sink is None:
        return console.message(
            404, "reconcile", "this console was started without --sink: nothing to compare with"
        )
    report = await run_in_threadpool(
        lambda: reconcile(
            console.source,
            str(console.sink),
            max_ids=RECONCILE_MAX_IDS,
            inbox_name=console.inbox_name,
        )
    )
    return console.page("reconcile.html", title="reconcile", report=report)


async def ledger_page(console: Console, request: Request) -> Response:
    ledger = console.ledger
    if ledger is None:
        return console.message(
            404, "ledger", "this console was started without --ledger: no keys to show"
        )
    query = {name: request.query_params.getlist(name) for name in request.query_params}
    try:
        after, limit = page_from_query(query)
    except InvalidEvent as exc:
        return console.message(400, "ledger", str(exc))
    if "limit" not in query:
        limit = LEDGER_PAGE

    def read() -> list[dict[str, Any]]:
        keys = ledger.deliveries(after=after, limit=limit)
        with ledger.backend.read() as tx:
            attempts = tx.ledger_attempts_of([key["delivery_no"] for key in keys])
        by_delivery: dict[int, list[dict[str, Any]]] = defaultdict(list)
        for attempt in attempts:
            by_delivery[attempt["delivery_no"]].append(attempt)
        for key in keys:
            key["attempts"] = by_delivery[key["delivery_no"]]
        return keys

    keys = await run_in_threadpool(read)
    following = keys[-1]["delivery_no"] if len(keys) == limit else None
    return console.page(
        "ledger.html", title="ledger", keys=keys, after=after, limit=limit, following=following
    )
