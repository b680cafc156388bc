"""The inbox's one apply algorithm, inside a write transaction the caller holds.

Every caller (``receive``, ``receive_batch``, ``receive_runs``, the sink's group commit, the
consumers) hands it runs of validated events whose handlers are found. In order: take one
block of arrival numbers and claim every identity, in one call (one statement where the
dialect can); walk the events, each run stopping at its first conflicting or failing event;
count; the caller commits. A run that stops gives back the fresh claims made beyond its stop
(they were taken by the one claim before the walk reached them) and the walk goes on with the
next run, claiming what is left again: nothing of an abandoned tail stays, and every later
event's arrival number is the one it would have had if the runs were applied one by one.
Handlers run with no savepoint unless the caller asks (``guarded``): a failure then raises
``Unguarded``, the caller rolls back, and a group is applied again with one per handler.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

from .. import plugins
from .._core.idempotency import Outcome
from .._core.telemetry import span, tracing
from ..errors import Conflict
from ..store import Backend, Tx
from .handler_call import Awaiter, NotAwaited, call_handler
from .handler_tx import Handler, HandlerTransaction

COUNTER_PREFIX = "sink."
APPLIED = Outcome.APPLIED.value
DUPLICATE = Outcome.DUPLICATE.value
APPLIED_COUNTER = COUNTER_PREFIX + APPLIED
DUPLICATE_COUNTER = COUNTER_PREFIX + DUPLICATE
CONFLICT_COUNTER = COUNTER_PREFIX + Outcome.CONFLICT.value

Identity = tuple[str, str]

#: The inbox of a database that names none (``Inbox(name=)``): receipts written before inboxes
#: had names are its own.
DEFAULT_NAME = "default"


@dataclass
class BatchResult:
    """What a batch did: the statuses of the applied prefix, and the error that stopped it
    (its item is ``statuses``' length). The error is an ``AckledgerError`` for a refusal, or
    what a handler raised."""

    statuses: list[str]
    error: Exception | None = None


class Item(NamedTuple):
    """A validated event with what applying it needs (a tuple: one is made per event)."""

    event: dict[str, Any]
    fingerprint: str
    handler: Handler
    identity: Identity


def same_event(item: Item, stored: str | None) -> bool:
    """Whether the receipt's fingerprint ``stored`` is of ``item``'s content: its own, or
    the one an older version stored for it (a plug-in's former fingerprint)."""
    if stored == item.fingerprint:
        return True
    return stored is not None and plugins.former_fingerprint(item.event) == stored


def noted_resend(db: Backend, item: Item, *, name: str = DEFAULT_NAME) -> bool:
    """The one branch beside ``apply_runs``: a lone event read by key first. True for a
    re-send, then noted without waiting for the disk (only its counts could be lost, and only
    to a power loss before the next durable commit); False: the write decides (a claim racing
    this read, or other content, is told apart by the write's own claim). ``name``: the
    inbox's."""
    source, event_id = item.identity
    now = time.time()
    stored = db.inbox_read_or_note(
        source, event_id, item.fingerprint, now, DUPLICATE_COUNTER, name=name
    )
    if stored is None or stored == item.fingerprint:
        return stored is not None  # a re-send of the same content was noted by that call
    if not same_event(item, stored):
        return False
    with db.write(durable=False) as tx:  # a former version's receipt of this event
        tx.inbox_note_lone(name, source, event_id, now, DUPLICATE_COUNTER)
    return True


def conflict(item: Item) -> Conflict:
    source, event_id = item.identity
    return Conflict(
        f"event {event_id!r} of source {source!r} was already applied with other content"
    )


class Unguarded(Exception):
    """A handler raised (its ``__cause__``) with no savepoint around it: the caller rolls the
    whole transaction back, then applies a group again with ``guarded`` (its other handlers
    run again: their first run was rolled back with it), or a lone event ``take_arrival``."""


def take_arrival(tx: Tx) -> None:
    """What a lone event whose handler failed leaves: the arrival number it took (a gap in
    the sequence; no receipt, no outcome counted), as a savepoint's undo would leave it."""
    _, owed = tx.inbox_reserve_arrivals(1)
    tx.counters_bump(owed)


def apply_runs(
    tx: Tx,
    runs: Sequence[Sequence[Item]],
    now: float,
    awaiter: Awaiter | None,
    *,
    handler_arg: object = None,
    name: str = DEFAULT_NAME,
    guarded: bool = False,
) -> list[BatchResult]:
    """Apply ``runs`` in ``tx`` as the inbox ``name``; each run's result as if it were
    applied alone after the runs before it. The caller commits (a rolled-back attempt
    applied and counted nothing). Handlers get ``handler_arg`` as their first argument (the
    caller's own connection, for ``receive(using=)``), or else a ``HandlerTransaction`` on
    ``tx``. ``guarded``: each handler in a savepoint of its own (``Inbox._apply_all`` asks
    for it only for a group that failed without); without it a failing handler raises
    ``Unguarded`` (handlers seldom fail, and on a server database a savepoint costs two round
    trips per event)."""
    total = sum(map(len, runs))
    # Counted ahead as if every event applies (the common case), by the statement that takes
    # the arrival numbers where the dialect can (PostgreSQL: a round trip fewer); the walk's
    # own tally corrects it in the last bump, which a wholly applied run then needs not.
    ahead = {APPLIED_COUNTER: total}
    walk = _Walk(tx, now, awaiter, guarded=guarded, handler_arg=handler_arg, name=name)
    owed = walk.claim(runs, ahead)
    results: list[BatchResult] = []
    left = runs
    while True:
        # ``walk.runs`` answers how many runs it walked: all, or up to one that stopped and
        # gave claims back; all that is left is then claimed again.
        left = left[walk.runs(left, results) :]
        if not left:
            break
        walk.claim(left)
    tx.counters_bump(_owed(owed, walk.tally, ahead))
    return results


def _owed(
    owed: Mapping[str, int], tally: Mapping[str, int], ahead: Mapping[str, int]
) -> dict[str, int]:
    """What the last bump adds: what the reservation left to it, plus the walk's tally less
    what was counted ahead (a failed or duplicate event takes its applied count back)."""
    total = dict(owed)
    for name, count in tally.items():
        total[name] = total.get(name, 0) + count
    for name, count in ahead.items():
        total[name] = total.get(name, 0) - count
    return {name: count for name, count in total.items() if count}


class _Walk:
    """One walk of the runs: the claims of the current statement and what is counted."""

    def __init__(
        self,
        tx: Tx,
        now: float,
        awaiter: Awaiter | None,
        *,
        guarded: bool,
        handler_arg: object,
        name: str,
    ) -> None:
        self.tx = tx
        self.name = name
        #: A savepoint per handler (else a failure raises ``Unguarded``).
        self.guarded = guarded
        self.now = now
        self.awaiter = awaiter
        #: The next event's arrival number; before the first claim, counted from the block's
        #: start (the claim that takes the block makes it the number itself).
        self.arrival = 1
        self.handler_tx = HandlerTransaction(tx) if handler_arg is None else handler_arg
        self.tally: dict[str, int] = {}
        #: Identities the current statement claimed whose first event the walk has not
        #: reached yet (that event is the new one).
        self.fresh: set[Identity] = set()
        #: The fingerprint the inbox holds for each identity the statement found or the walk
        #: applied: later events of that identity are told duplicate or conflict by it.
        self.stored: dict[Identity, str | None] = {}

    def claim(
        self, runs: Sequence[Sequence[Item]], ahead: Mapping[str, int] | None = None
    ) -> dict[str, int]:
        """One claim of the first event of each identity in ``runs``, numbered in order. With
        ``ahead``, the transaction's first: it takes the block of arrival numbers (one for each
        event of ``runs``) and adds ``ahead``'s counts in the same call, and returns what the
        last bump owes (``inbox_reserve_arrivals``)."""
        rows: list[tuple[Any, ...]] = []
        firsts: list[Item] = []
        seen: set[Identity] = set()
        arrival, name, now = self.arrival, self.name, self.now
        for run in runs:
            for item in run:
                identity = item.identity
                if identity not in seen:
                    seen.add(identity)
                    firsts.append(item)
                    source, event_id = identity
                    kind = item.event["type"]
                    rows.append(
                        (name, source, event_id, item.fingerprint, kind, now, now, arrival, arrival)
                    )
                arrival += 1
        self.fresh = set()
        self.stored = {}
        owed: dict[str, int] = {}
        if ahead is not None:
            before, owed, outcomes = self.tx.inbox_claim_arriving(
                rows, arrival - self.arrival, ahead
            )
            self.arrival += before
        elif rows:
            outcomes = self.tx.inbox_claim_all(rows)
        else:
            return owed
        for item, outcome in zip(firsts, outcomes, strict=True):
            if outcome is Outcome.APPLIED:
                self.fresh.add(item.identity)
            elif outcome is Outcome.DUPLICATE:
                self.stored[item.identity] = item.fingerprint
            else:  # read only for a conflict (rare): it may be a former fingerprint's
                self.stored[item.identity] = self.tx.inbox_fingerprint(self.name, *item.identity)
        return owed

    def runs(self, runs: Sequence[Sequence[Item]], results: list[BatchResult]) -> int:
        """Walk ``runs`` in order; returns how many were walked: all, or up to and with the
        first that stopped while claims beyond its stop were still fresh (given back here;
        the caller claims the runs after it again)."""
        for done, run in enumerate(runs, 1):
            result = BatchResult([])
            results.append(result)
            for item in run:
                arrival = self.arrival
                self.arrival += 1
                result.error = self._one(item, arrival, result.statuses)
                if result.error is not None:
                    if self.fresh:
                        self.tx.inbox_unclaim(self.name, sorted(self.fresh))
                        return done
                    break
        return len(runs)

    def _one(self, item: Item, arrival: int, statuses: list[str]) -> Exception | None:
        """Apply, note or refuse one event; the error that stops its run, if any."""
        key = item.identity
        tx = self.tx
        if key in self.fresh:
            self.fresh.discard(key)
            if not self.guarded:
                try:
                    self._call(item)
                except NotAwaited:
                    raise
                except Exception as exc:
                    raise Unguarded from exc
                self._applied(item, statuses)
                return None
            # A savepoint holds the handler's writes: its failure undoes them and this
            # event's claim, and nothing before it (this run's or another's).
            tx.handler_savepoint()
            try:
                self._call(item)
            except NotAwaited:
                raise
            except Exception as exc:
                tx.handler_undo()
                # Its claim is given back with the run's tail: a later run may hold the
                # same identity, which is then new again.
                self.fresh.add(key)
                return exc
            tx.handler_release()
            self._applied(item, statuses)
            return None
        if not same_event(item, self.stored.get(key)):
            self._count(CONFLICT_COUNTER)
            return conflict(item)
        tx.inbox_note_receipt(self.name, *key, self.now, arrival)
        self._count(DUPLICATE_COUNTER)
        statuses.append(DUPLICATE)
        return None

    def _applied(self, item: Item, statuses: list[str]) -> None:
        self.stored[item.identity] = item.fingerprint
        self._count(APPLIED_COUNTER)
        statuses.append(APPLIED)

    def _call(self, item: Item) -> None:
        if tracing():
            # A span per apply, a child of the producer's (its context travels in the
            # event); the handler's own spans nest in it.
            with span(f"apply {item.event['type']}", item.event, kind="consumer"):
                call_handler(item.handler, self.handler_tx, item.event, self.awaiter)
        else:
            call_handler(item.handler, self.handler_tx, item.event, self.awaiter)

    def _count(self, name: str) -> None:
        self.tally[name] = self.tally.get(name, 0) + 1
