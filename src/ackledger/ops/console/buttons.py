"""The console's buttons: quarantine, requeue, and requeue of a whole failure group.

Each checks the origin and the token (``writes``) before it reads the database, then makes
the library call the command line makes (``Outbox.quarantine``, ``Outbox.requeue``), so the
outbox log records the operation as the CLI's would, and answers with the CLI's words.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from starlette.concurrency import run_in_threadpool
from starlette.responses import Response

from ...envelope import check_event_id
from ...errors import AckledgerError, InvalidEvent
from ..listings import quarantined_text, requeued_lines
from .writes import Refused, authorized_form, same_origin

if TYPE_CHECKING:
    from starlette.requests import Request

    from .app import Console


async def _authorized_form(console: Console, request: Request) -> dict[str, str]:
    same_origin(request)
    return await authorized_form(request, console.token)


def _event_id(form: dict[str, str]) -> str:
    event_id = form.get("id", "")
    try:
        return check_event_id(event_id)
    except (ValueError, AckledgerError) as exc:
        raise Refused(400, str(exc)) from None


def _refusal(console: Console, title: str, exc: Exception) -> Response:
    if isinstance(exc, Refused):
        return console.message(exc.status, f"{title} refused", str(exc))
    if isinstance(exc, KeyError):
        return console.message(404, f"{title} refused", f"unknown event id {exc.args[0]!r}")
    if isinstance(exc, InvalidEvent):
        return console.message(400, f"{title} refused", str(exc))  # bad input, not a state
    return console.message(409, f"{title} refused", str(exc))


async def quarantine(console: Console, request: Request) -> Response:
    try:
        form = await _authorized_form(console, request)
        event_id = _event_id(form)
        reason = form.get("reason", "")
        if not reason.strip():
            raise Refused(400, "reason: must say why")
        seq = await run_in_threadpool(console.outbox.quarantine, event_id, reason)
    except (Refused, KeyError, ValueError, AckledgerError) as exc:
        return _refusal(console, "quarantine", exc)
    return console.page(
        "done.html",
        title="quarantined",
        lines=[quarantined_text(event_id, seq, reason, console.outbox.backend.location)],
    )


async def requeue(console: Console, request: Request) -> Response:
    try:
        form = await _authorized_form(console, request)
        event_id = _event_id(form)
        record = await run_in_threadpool(console.outbox.requeue, event_id)
    except (Refused, KeyError, ValueError, AckledgerError) as exc:
        return _refusal(console, "requeue", exc)
    return console.page("done.html", title="requeued", lines=requeued_lines(record))


async def requeue_group(console: Console, request: Request) -> Response:
    """Every event quarantined for the form's ``reason``, each by ``Outbox.requeue`` (each
    its own transaction and log entry, as running the command once per event would)."""
    try:
        form = await _authorized_form(console, request)
        reason = form.get("reason")
        if reason is None:
            raise Refused(400, "reason: which group to requeue")

        def requeue_all() -> list[str]:
            lines: list[str] = []
            for row in console.outbox.quarantined():
                if row["reason"] == reason:
                    try:
                        lines += requeued_lines(console.outbox.requeue(row["id"]))
                    except (KeyError, ValueError) as exc:
                        # Requeued meanwhile by someone else: say so, go on with the rest.
                        lines.append(f"{row['id']}: {exc}")
            return lines

        lines = await run_in_threadpool(requeue_all)
    except (Refused, KeyError, ValueError, AckledgerError) as exc:
        return _refusal(console, "requeue", exc)
    if not lines:
        return console.message(404, "requeue refused", "no event is quarantined for that reason")
    return console.page("done.html", title="requeued", lines=lines)
