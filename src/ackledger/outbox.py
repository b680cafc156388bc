"""The source side: a transactional outbox.

A business write and the event that announces it commit in one transaction, so an event
exists exactly when its business change does. ``pending`` is a pure read in acceptance order;
only an exact acknowledgement (see ``ackledger.dispatch``) turns an event into ``sent``.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from types import TracebackType
from typing import Any

from .errors import Conflict
from .event import fingerprint, validate_event
from .idempotency import Outcome, claim_once
from .store import Backend, Tx, open_backend
from .store import outbox_sql as sql
from .store.keys import OUTBOX

MAX_BATCH = 16


def check_limit(limit: object) -> int:
    if isinstance(limit, bool) or not isinstance(limit, int):
        raise ValueError(f"limit: must be an int from 1 to {MAX_BATCH}, got {type(limit).__name__}")
    if not 1 <= limit <= MAX_BATCH:
        raise ValueError(f"limit: must be from 1 to {MAX_BATCH}, got {limit}")
    return limit


def _check_partition_key(value: object) -> str:
    if not isinstance(value, str) or not 1 <= len(value) <= 128:
        raise ValueError("partition_key: must be a string of 1-128 characters")
    return value


def _enqueue(tx: Tx, event: object, partition_key: object, with_order: bool) -> int:
    clean = validate_event(event)
    key = clean["sku"] if partition_key is None else _check_partition_key(partition_key)
    sql.lock_partition(tx, key)
    now = time.time()
    claim = claim_once(
        tx, OUTBOX, (clean["id"],), fingerprint(clean), (clean["sku"], clean["qty"], key, now)
    )
    if claim.outcome is Outcome.CONFLICT:
        raise Conflict(f"event {clean['id']!r} is already in the outbox with other content")
    if claim.outcome is Outcome.APPLIED and with_order:
        sql.insert_order(tx, clean, now)
    return int(claim.ref)


class OutboxTransaction:
    """The user's side of ``Outbox.transaction()``: business writes plus ``enqueue``."""

    def __init__(self, tx: Tx) -> None:
        self._tx = tx

    def execute(self, statement: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        """Run the user's own SQL (``?`` placeholders on every backend); returns its rows."""
        return self._tx.execute(statement, params)

    def enqueue(self, event: object, *, partition_key: str | None = None) -> int:
        """Add ``event`` to the outbox in this transaction; returns its seq."""
        return _enqueue(self._tx, event, partition_key, with_order=False)


class Outbox:
    def __init__(self, target: str | os.PathLike[str], *, synchronous: str = "FULL") -> None:
        self._db: Backend = open_backend(target, synchronous=synchronous)

    @property
    def backend(self) -> Backend:
        return self._db

    def accept(self, event: object) -> int:
        """Write the order and its event in one transaction; returns the outbox seq."""
        clean = validate_event(event)
        with self._db.write() as tx:
            return _enqueue(tx, clean, None, with_order=True)

    @contextmanager
    def transaction(self) -> Iterator[OutboxTransaction]:
        with self._db.write() as tx:
            yield OutboxTransaction(tx)

    def pending(self, limit: int = MAX_BATCH) -> list[dict[str, Any]]:
        """Unsent, unquarantined events in acceptance (seq) order. Writes nothing."""
        check_limit(limit)
        with self._db.read() as tx:
            return sql.pending(tx, limit)

    def mark_sent(self, event_id: str, *, attempted: bool = False) -> None:
        """Set ``sent = 1``; idempotent. ``attempted`` also counts the send that earned it."""
        self.mark_sent_many([event_id], attempted=attempted)

    def mark_sent_many(self, event_ids: Sequence[str], *, attempted: bool = False) -> None:
        """Mark several events sent in one transaction (all or none)."""
        ids = list(event_ids)
        for event_id in ids:
            if not isinstance(event_id, str):
                raise TypeError(f"event_id: must be a string, got {type(event_id).__name__}")
        with self._db.write() as tx:
            unknown = sql.mark_sent(tx, ids, attempted, time.time())
            if unknown:
                raise KeyError(unknown[0])

    def record_failure(self, event_id: str, error: str) -> None:
        """Count a failed send attempt and keep its error for the operator."""
        with self._db.write() as tx:
            sql.record_failure(tx, event_id, error[:2000], time.time())

    def event(self, event_id: str) -> dict[str, Any] | None:
        """Everything the outbox knows of one event, or None."""
        with self._db.read() as tx:
            return sql.event_row(tx, event_id)

    def order(self, event_id: str) -> dict[str, Any] | None:
        with self._db.read() as tx:
            return sql.order_row(tx, event_id)

    def close(self) -> None:
        self._db.close()

    def __enter__(self) -> Outbox:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
