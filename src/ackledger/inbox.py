"""The sink side: apply each event id once, in the same transaction as its effect.

The effect of the reference domain is warehouse stock: ``inventory[sku] += qty``. A re-sent
event (same id, same content) is a duplicate: acknowledged again, applied never again. The same
id with other content is a conflict: refused, and nothing changes but the conflict counter.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from .database import Database
from .errors import AckledgerError, Conflict
from .event import check_identifier, fingerprint, validate_event
from .idempotency import Outcome, claim_once
from .store import Tx
from .store import inbox_sql as sql
from .store.keys import INBOX

COUNTER_PREFIX = "sink."


@dataclass
class BatchResult:
    """What a batch did: the statuses of the applied prefix, and the error that stopped it
    (its item is ``statuses``' length)."""

    statuses: list[str]
    error: AckledgerError | None = None


def _apply(tx: Tx, clean: dict[str, Any], now: float) -> Outcome:
    arrival = sql.next_arrival(tx)
    claim = claim_once(
        tx,
        INBOX,
        (clean["id"],),
        fingerprint(clean),
        (clean["sku"], clean["qty"], now, now, arrival, arrival),
    )
    if claim.outcome is Outcome.APPLIED:
        sql.add_stock(tx, clean["sku"], clean["qty"])
    elif claim.outcome is Outcome.DUPLICATE:
        sql.note_receipt(tx, clean["id"], now, arrival)
    sql.bump_counter(tx, COUNTER_PREFIX + claim.outcome.value)
    return claim.outcome


def _conflict(event_id: str) -> Conflict:
    return Conflict(f"event {event_id!r} was already applied with other content")


class Inbox(Database):
    def receive(self, event: object) -> str:
        """Apply ``event`` once; returns ``"applied"`` or ``"duplicate"``, or raises Conflict."""
        clean = validate_event(event)
        with self._db.write() as tx:
            outcome = _apply(tx, clean, time.time())
        # The conflict counter is committed with the transaction; the claim wrote nothing.
        if outcome is Outcome.CONFLICT:
            raise _conflict(clean["id"])
        return str(outcome.value)

    def receive_batch(self, events: Sequence[object]) -> BatchResult:
        """Apply a list of events in order in ONE transaction, stopping at the first that fails.

        Validation happens before the transaction; the prefix before a failing item is
        committed, the failing item and everything after it are not applied.
        """
        cleaned: list[dict[str, Any]] = []
        error: AckledgerError | None = None
        for item in events:
            try:
                cleaned.append(validate_event(item))
            except AckledgerError as exc:
                error = exc
                break
        statuses: list[str] = []
        now = time.time()
        with self._db.write() as tx:
            for clean in cleaned:
                outcome = _apply(tx, clean, now)
                if outcome is Outcome.CONFLICT:
                    error = _conflict(clean["id"])
                    break
                statuses.append(outcome.value)
        return BatchResult(statuses, error)

    def stock(self, sku: str) -> int:
        check_identifier(sku, "sku", 64)
        with self._db.read() as tx:
            return sql.stock(tx, sku)

    def receipt(self, event_id: str) -> dict[str, Any] | None:
        """The inbox row of one event (when, how often), or None if it never arrived."""
        with self._db.read() as tx:
            return sql.receipt(tx, event_id)

    def counters(self) -> dict[str, int]:
        """Durable totals: applied, duplicate, conflict."""
        with self._db.read() as tx:
            found = sql.counters(tx, COUNTER_PREFIX)
        return {name: found.get(name, 0) for name in ("applied", "duplicate", "conflict")}
