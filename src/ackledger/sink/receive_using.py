"""An event's receipt written on the caller's connection, inside the caller's transaction.

``Inbox.receive(event)`` runs its own transaction; ``Inbox.receive(event, using=...)`` and
Django's ``receive`` come here, where the caller owns it (a SQLAlchemy session's, Django's
``transaction.atomic()``), as ``Outbox.publish(using=)`` does on the source side. The
receipt is claimed, the handler runs with the caller's own connection object, and the counts
are bumped, all with the caller's connection: the caller's commit makes the receipt and the
handler's writes durable together, its rollback removes both, so a retry applies it again.
Nothing here commits or rolls back.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Any, cast

from ..envelope import fingerprint_of, validate_encoded
from ..errors import NoHandler
from ..event_types import EventTypes
from ..store import Tx
from ..store.borrowed import has_schema
from .apply import DEFAULT_NAME, Item, Unguarded, apply_runs
from .handler_call import Awaiter, async_refused, is_async_handler
from .handler_tx import Handler


def receive_using(
    tx: Tx,
    handler_arg: object,
    event: object,
    handlers: Mapping[str, Callable[[Any, dict[str, Any]], object]],
    *,
    types: EventTypes | None = None,
    awaiter: Awaiter | None = None,
    name: str = DEFAULT_NAME,
) -> str:
    """Apply ``event`` once on ``tx`` (a borrowed ``Tx``, ``store.borrowed.borrow``) as the
    inbox ``name``, calling its handler as ``handler(handler_arg, event)``; returns
    ``"applied"`` or ``"duplicate"``. The inbox's one algorithm (``apply.apply_runs``) does
    it, in the caller's transaction.

    ``awaiter`` awaits what an ``async def`` handler returns (``receive_async``); without
    one, such a handler raises NotAwaited (a TypeError). Raises InvalidEvent, NoHandler,
    ValueError (a database without ackledger's schema) before writing; Conflict for the same
    identity with other content, or what the handler raised: the caller then rolls back, and
    nothing it wrote here stays.
    """
    found, text = validate_encoded(event, types=types if types is not None else EventTypes())
    handler = handlers.get(found["type"])
    if handler is None:
        raise NoHandler(f"no handler for event type {found['type']!r}")
    if awaiter is None and is_async_handler(handler):
        raise async_refused(handler, found["type"])
    has_schema(tx)
    # Its first argument is the caller's object, not a HandlerTransaction: the walk hands it
    # ``handler_arg``.
    run = cast(Handler, handler)
    item = Item(found, fingerprint_of(found, text), run, (found["source"], found["id"]))
    try:
        (result,) = apply_runs(
            tx, [[item]], time.time(), awaiter, handler_arg=handler_arg, name=name
        )
    except Unguarded as failed:
        # The caller rolls its transaction back: the handler's own error is what it sees.
        raise failed.__cause__ or failed from None
    if result.error is not None:
        raise result.error
    return result.statuses[0]
