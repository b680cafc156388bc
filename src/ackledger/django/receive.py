"""``publish`` and ``receive`` on the Django connection of ackledger's alias."""

from __future__ import annotations

import threading
from typing import Any

from ..sink.receive_using import receive_using
from ..source.outbox import Outbox
from ..store import borrow_at
from .config import alias, handlers
from .target import database_target

NOT_IN_ATOMIC = (
    "ackledger.django.publish: not inside transaction.atomic() on the database {alias!r}; "
    "wrap your writes and the publish in one atomic block (or set ATOMIC_REQUESTS), so that "
    "the event commits or rolls back with them (nothing was written)"
)

_outboxes: dict[str, Outbox] = {}
_outboxes_lock = threading.Lock()


def _outbox(target: str) -> Outbox:
    """One ``Outbox`` per database for the process: ``publish(using=)`` only reads its source
    and dialect, so threads share it."""
    with _outboxes_lock:
        found = _outboxes.get(target)
        if found is None:
            found = _outboxes[target] = Outbox(target)
        return found


def close_outboxes() -> None:
    """Close the outboxes ``publish`` opened (each holds one connection of its own); the next
    ``publish`` opens its outbox again."""
    with _outboxes_lock:
        found = list(_outboxes.values())
        _outboxes.clear()
    for outbox in found:
        outbox.close()


def publish(event: object) -> int:
    """Add ``event`` to the outbox through Django's connection of ackledger's alias, inside
    the current ``transaction.atomic()``: it commits with your writes or not at all. Returns
    its seq (an identical event published again: the existing seq, nothing written).

    Outside an atomic block on that alias: ``RuntimeError``, nothing written."""
    from django.db import connections

    name = alias()
    connection = connections[name]
    if not connection.in_atomic_block:
        raise RuntimeError(NOT_IN_ATOMIC.format(alias=name))
    # Opened before the borrow: opening may write (the outbox's source, the first time) on
    # its own connection, which must not wait behind the caller's open transaction.
    outbox = _outbox(database_target(name))
    return outbox.publish(event, using=connection)


def receive(event: object, *, handlers_by_type: dict[str, Any] | None = None) -> str:
    """Apply ``event`` once: in one ``transaction.atomic()`` on ackledger's alias, its receipt
    is written in ``ackledger_inbox`` and its handler (``settings.ACKLEDGER["HANDLERS"]``, or
    ``handlers_by_type``) is called as ``handler(connection, event)`` with Django's
    connection, so the models it saves commit with the receipt; a raising handler leaves
    neither. Returns ``"applied"``, or ``"duplicate"`` (the handler not run)."""
    from django.db import connections, transaction

    name = alias()
    found = handlers() if handlers_by_type is None else handlers_by_type
    connection = connections[name]
    with transaction.atomic(using=name):
        tx = borrow_at(database_target(name), connection)
        return receive_using(tx, connection, event, found)
