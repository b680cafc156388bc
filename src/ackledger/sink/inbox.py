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

from .._core.database import Database
from .._core.idempotency import Outcome
from ..errors import AckledgerError, Conflict
from ..event import check_identifier, event_fingerprint, validate_event
from ..store import Tx

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


class _OneByOne(Exception):
    """A group claimed all at once met a conflict: roll it back, apply it event by event."""


def _apply_together(
    tx: Tx, runs: Sequence[Sequence[dict[str, Any]]], now: float
) -> list[BatchResult]:
    """Apply runs in which nothing conflicts in a few statements, however many events: one
    multi-row claim of every id (``Tx.inbox_claim_all``), one upsert per sku and per counter.

    A conflict stops its run, and a multi-row claim has already claimed the events after it,
    so on any conflict this raises ``_OneByOne``: the caller rolls back and applies the runs
    with ``_apply_one_by_one`` instead. Conflicts are rare; the common case is cheap. Without a
    conflict, the outcomes, the arrival numbers and the counters are exactly those of
    ``_apply_one_by_one``, which it must agree with (tests/backends/test_inbox_claim_all.py).
    """
    wanted = sum(len(run) for run in runs)
    first_arrival = tx.inbox_reserve_arrivals(wanted) + 1
    # One claim row per id, from its first event in the group; a later event with that id is
    # a duplicate of it (same content) or a conflict (other content) whatever the claim finds.
    firsts: dict[str, str] = {}
    rows: list[tuple[Any, ...]] = []
    arrival = first_arrival
    for run in runs:
        for clean in run:
            event_id = clean["id"]
            fp = event_fingerprint(clean)
            seen = firsts.get(event_id)
            if seen is None:
                firsts[event_id] = fp
                rows.append((event_id, fp, clean["sku"], clean["qty"], now, now, arrival, arrival))
            elif seen != fp:
                raise _OneByOne
            arrival += 1
    fresh: set[str] = set()
    for row, outcome in zip(rows, tx.inbox_claim_all(rows), strict=True):
        if outcome is Outcome.CONFLICT:
            raise _OneByOne
        if outcome is Outcome.APPLIED:
            fresh.add(row[0])
    stock: dict[str, int] = {}
    results: list[BatchResult] = []
    if len(fresh) == wanted:
        # The common case: every event is the first of a new id.
        for run in runs:
            for clean in run:
                stock[clean["sku"]] = stock.get(clean["sku"], 0) + clean["qty"]
            results.append(BatchResult([_APPLIED] * len(run)))
        tx.inventory_add(stock)
        tx.counters_bump({_APPLIED_COUNTER: wanted})
        return results
    tally: Counter[str] = Counter()
    arrival = first_arrival
    for run in runs:
        statuses: list[str] = []
        for clean in run:
            event_id = clean["id"]
            if event_id in fresh:
                # The first event of a freshly claimed id; any later one is a duplicate.
                fresh.discard(event_id)
                stock[clean["sku"]] = stock.get(clean["sku"], 0) + clean["qty"]
                statuses.append(_APPLIED)
            else:
                tx.inbox_note_receipt(event_id, now, arrival)
                statuses.append(_DUPLICATE)
            arrival += 1
        tally.update(statuses)
        results.append(BatchResult(statuses))
    tx.inventory_add(stock)
    tx.counters_bump({COUNTER_PREFIX + name: count for name, count in tally.items()})
    return results


_APPLIED = Outcome.APPLIED.value
_DUPLICATE = Outcome.DUPLICATE.value
_APPLIED_COUNTER = COUNTER_PREFIX + _APPLIED


def _apply_one_by_one(
    tx: Tx, runs: Sequence[Sequence[dict[str, Any]]], now: float
) -> list[BatchResult]:
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
    arrival = tx.inbox_reserve_arrivals(wanted) if wanted else 0
    for run in runs:
        result = BatchResult([])
        for clean in run:
            arrival += 1
            claim = tx.inbox_claim(
                clean["id"],
                event_fingerprint(clean),
                sku=clean["sku"],
                qty=clean["qty"],
                now=now,
                arrival=arrival,
            )
            tally[COUNTER_PREFIX + claim.outcome.value] += 1
            if claim.outcome is Outcome.CONFLICT:
                result.error = _conflict(clean["id"])
                break
            if claim.outcome is Outcome.APPLIED:
                stock[clean["sku"]] = stock.get(clean["sku"], 0) + clean["qty"]
            else:
                tx.inbox_note_receipt(clean["id"], now, arrival)
            result.statuses.append(claim.outcome.value)
        results.append(result)
    tx.inventory_add(stock)
    tx.counters_bump(tally)
    return results


def _conflict(event_id: str) -> Conflict:
    return Conflict(f"event {event_id!r} was already applied with other content")


class Inbox(Database):
    def receive(self, event: object) -> str:
        """Apply ``event`` once; returns ``"applied"`` or ``"duplicate"``, or raises Conflict."""
        (result,) = self._apply([[validate_event(event)]])
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
        results = self._apply([cleaned for cleaned, _ in prepared])
        for result, (_, invalid) in zip(results, prepared, strict=True):
            if result.error is None:
                result.error = invalid
        return results

    def _apply(self, runs: Sequence[Sequence[dict[str, Any]]]) -> list[BatchResult]:
        """Apply validated runs in ONE committed write transaction (a rolled-back attempt
        applies nothing, so it does not count)."""
        now = time.time()
        # One event costs the same statements either way, and less Python one by one.
        if sum(len(run) for run in runs) > 1:
            try:
                with self._db.write() as tx:
                    return _apply_together(tx, runs, now)
            except _OneByOne:
                pass
        with self._db.write() as tx:
            return _apply_one_by_one(tx, runs, now)

    def stock(self, sku: str) -> int:
        check_identifier(sku, "sku", 64)
        with self._db.read() as tx:
            return tx.inventory_stock(sku)

    def receipt(self, event_id: str) -> dict[str, Any] | None:
        """The inbox row of one event (when, how often), or None if it never arrived."""
        with self._db.read() as tx:
            return tx.inbox_receipt(event_id)

    def counters(self) -> dict[str, int]:
        """Durable totals: applied, duplicate, conflict."""
        with self._db.read() as tx:
            found = tx.counters_read(COUNTER_PREFIX)
        return {name: found.get(name, 0) for name in ("applied", "duplicate", "conflict")}
