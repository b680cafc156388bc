"""An event's receipt written on the caller's connection, inside the caller's transaction.

``Inbox.receive`` runs its own transaction; here the caller owns it (Django's
``transaction.atomic()``, for one), as ``Outbox.publish(using=)`` does on the source side. The
receipt is claimed, the handler runs with the caller's own connection object, and the counts
are bumped, all with the caller's connection: the caller's commit makes the receipt and the
handler's writes durable together, its rollback removes both, so a retry applies it again.
Nothing here commits or rolls back.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Any

from .._core.idempotency import Outcome
from ..envelope import fingerprint_of, validate_encoded
from ..errors import Conflict, NoHandler
from ..event_types import EventTypes
from ..store import Tx
from .handler_call import async_refused, call_handler, is_async_handler

_APPLIED_COUNTER = "sink.applied"
_DUPLICATE_COUNTER = "sink.duplicate"


def receive_using(
    tx: Tx,
    handler_arg: object,
    event: object,
    handlers: Mapping[str, Callable[[Any, dict[str, Any]], object]],
    *,
    types: EventTypes | None = None,
) -> str:
    """Apply ``event`` once on ``tx`` (a borrowed ``Tx``, ``store.borrowed.borrow``), calling
    its handler as ``handler(handler_arg, event)``; returns ``"applied"`` or ``"duplicate"``.

    Raises InvalidEvent, NoHandler (an ``async def`` handler: NotAwaited) before writing;
    Conflict for the same identity with other content, or what the handler raised: the
    caller then rolls back, and nothing it wrote here stays.
    """
    found, text = validate_encoded(event, types=types if types is not None else EventTypes())
    handler = handlers.get(found["type"])
    if handler is None:
        raise NoHandler(f"no handler for event type {found['type']!r}")
    if is_async_handler(handler):
        raise async_refused(handler, found["type"])
    fingerprint = fingerprint_of(found, text)
    source, event_id = found["source"], found["id"]
    now = time.time()
    before, owed = tx.inbox_reserve_arrivals(1)
    claim = tx.inbox_claim(
        source, event_id, fingerprint, type=found["type"], now=now, arrival=before + 1
    )
    if claim.outcome is Outcome.CONFLICT:
        raise Conflict(
            f"event {event_id!r} of {source!r} is already in the inbox with other content"
        )
    if claim.outcome is Outcome.DUPLICATE:
        tx.inbox_note_receipt(source, event_id, now, before + 1)
        tx.counters_bump({**owed, _DUPLICATE_COUNTER: 1})
        return Outcome.DUPLICATE.value
    call_handler(handler, handler_arg, found, None)
    tx.counters_bump({**owed, _APPLIED_COUNTER: 1})
    return Outcome.APPLIED.value
