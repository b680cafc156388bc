"""The sink side: apply each event id once, in the same transaction as its effect.

The effect of the reference domain is warehouse stock: ``inventory[sku] += qty``. A re-sent
event (same id, same content) is a duplicate: acknowledged again, applied never again. The same
id with other content is a conflict: refused, and nothing changes but the conflict counter.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from .database import Database
from .errors import AckledgerError, Conflict
from .event import check_identifier, event_fingerprint, validate_event
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


def _validated_prefix(
    events: Sequence[object],
) -> tuple[list[dict[str, Any]], AckledgerError | None]:
    """The events before the first invalid one, validated, and that one's error."""
    cleaned: list[dict[str, Any]] = []
    for item in events:
        try:
            cleaned.append(validate_event(item))
        except AckledgerError as exc:
            return cleaned, exc
    return cleaned, None


def _apply_runs(tx: Tx, runs: Sequence[Sequence[dict[str, Any]]], now: float) -> list[BatchResult]:
    """Claim each run's events in order, each run stopping at its own first conflict.

    The effects of every claim are summed and written once at the end of the transaction (one
    upsert per sku touched and per counter), which is the same committed state as writing them
    event by event, with far fewer statements.
    """
    stock: dict[str, int] = {}
    tally: Counter[str] = Counter()
    results: list[BatchResult] = []
    wanted = sum(len(run) for run in runs)
    # Arrival numbers are taken as one block; the counter row stays locked until commit, so
    # they follow commit order on every backend (numbers of unclaimed items are skipped).
    arrival = sql.reserve_arrivals(tx, wanted) if wanted else 0
    for run in runs:
        result = BatchResult([])
        for clean in run:
            arrival += 1
            claim = claim_once(
                tx,
                INBOX,
                (clean["id"],),
                event_fingerprint(clean),
                (clean["sku"], clean["qty"], now, now, arrival, arrival),
            )
            tally[COUNTER_PREFIX + claim.outcome.value] += 1
            if claim.outcome is Outcome.CONFLICT:
                result.error = _conflict(clean["id"])
                break
            if claim.outcome is Outcome.APPLIED:
                stock[clean["sku"]] = stock.get(clean["sku"], 0) + clean["qty"]
            else:
                sql.note_receipt(tx, clean["id"], now, arrival)
            result.statuses.append(claim.outcome.value)
        results.append(result)
    sql.add_stock(tx, stock)
    sql.bump_counters(tx, tally)
    return results


def _conflict(event_id: str) -> Conflict:
    return Conflict(f"event {event_id!r} was already applied with other content")


class Inbox(Database):
    def receive(self, event: object) -> str:
        """Apply ``event`` once; returns ``"applied"`` or ``"duplicate"``, or raises Conflict."""
        clean = validate_event(event)
        with self._db.write() as tx:
            (result,) = _apply_runs(tx, [[clean]], time.time())
        # The conflict counter is committed with the transaction; the claim wrote nothing.
        if result.error is not None:
            raise result.error
        return result.statuses[0]

    def receive_batch(self, events: Sequence[object]) -> BatchResult:
        """Apply a list of events in order in ONE transaction, stopping at the first that fails.

        Validation happens before the transaction; the prefix before a failing item is
        committed, the failing item and everything after it are not applied.
        """
        return self.receive_runs([events])[0]

    def receive_runs(self, runs: Sequence[Sequence[object]]) -> list[BatchResult]:
        """Apply several independent runs of events in ONE transaction (a group commit).

        Each run behaves exactly as ``receive_batch`` would on its own, in the order given:
        it stops at its own first invalid or conflicting event, and never affects another run
        beyond what applying them one after the other would. One commit makes them all durable,
        which is how the sink answers many concurrent clients for the price of one fsync.
        """
        prepared = [_validated_prefix(run) for run in runs]
        if not any(cleaned for cleaned, _ in prepared):
            return [BatchResult([], error) for _, error in prepared]
        with self._db.write() as tx:
            results = _apply_runs(tx, [cleaned for cleaned, _ in prepared], time.time())
        for result, (_, invalid) in zip(results, prepared, strict=True):
            if result.error is None:
                result.error = invalid
        return results

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
