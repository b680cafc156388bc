"""The sink side: apply each event once, in the same transaction as its effect.

An event is known by its identity ``(source, id)``. The first receipt of an identity runs the
handler of the event's type inside the inbox's transaction; a re-sent event (same identity,
same content) is a duplicate: acknowledged again, applied never again. The same identity with
other content is a conflict: refused, and nothing changes but the conflict counter. An event
no handler takes, or one its handler refuses, is not recorded at all.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NamedTuple

from .. import warehouse
from .._core.database import Database
from .._core.duration import check_age
from .._core.idempotency import Outcome
from .._core.telemetry import span, tracing
from ..envelope import fingerprint_of, validate_encoded
from ..errors import AckledgerError, Conflict, NoHandler
from ..event import check_identifier
from ..event_types import EventTypes, check_type_name
from ..store import Tx
from ..store.inbox import PURGED
from .handler_call import (
    Awaiter,
    HandlerAwaiter,
    NotAwaited,
    async_refused,
    call_handler,
    check_handler,
    is_async_handler,
)
from .handler_tx import Handler, HandlerTransaction
from .retention import OldestReceipt, purge_windows

if TYPE_CHECKING:
    from starlette.types import ASGIApp

COUNTER_PREFIX = "sink."
#: The durable counters ``counters()`` reports; they never go down, whatever is purged.
COUNTER_NAMES = ("applied", "duplicate", "conflict")

#: Receipts are kept this long by default (``purge()``, ``ackledger inbox purge``).
DEFAULT_RETENTION_SECONDS = 30 * 86400.0
#: A shorter horizon needs ``force``: a receipt purged while its event can still be re-sent
#: turns that re-send into a second apply.
MIN_RETENTION_SECONDS = 3600.0
#: Keys per window of ``purge()``'s walk, and the most receipts one of its write transactions
#: deletes (bench/CHANGES.md, item 64, says why this many).
PURGE_CHUNK = 1000


@dataclass
class BatchResult:
    """What a batch did: the statuses of the applied prefix, and the error that stopped it
    (its item is ``statuses``' length). The error is an ``AckledgerError`` for a refusal, or
    what a handler raised."""

    statuses: list[str]
    error: Exception | None = None


class _Item(NamedTuple):
    """A validated event with what applying it needs (a tuple: one is made per event, and a
    frozen dataclass's ``__init__`` costs several times a tuple's)."""

    event: dict[str, Any]
    fingerprint: str
    handler: Handler
    identity: tuple[str, str]
    #: What ``Inbox.read_lone`` read under the identity: None when it was free.
    stored: str | None = None


class _OneByOne(Exception):
    """A group applied all at once met a conflict or a failing handler: roll it back, apply
    it event by event."""


def _add_stock(stock: dict[str, int], event: dict[str, Any]) -> None:
    data = event["data"]
    stock[data["sku"]] = stock.get(data["sku"], 0) + data["qty"]


def _apply_together(
    tx: Tx, runs: Sequence[Sequence[_Item]], now: float, awaiter: Awaiter | None
) -> list[BatchResult]:
    """Apply runs in which nothing conflicts and no handler fails in a few statements: one
    multi-row claim of every identity (``Tx.inbox_claim_all``), the handlers, one upsert per
    sku of the reference handler and one per counter.

    A conflict stops its run, and a multi-row claim has already claimed the events after it,
    so on any conflict (or any handler's exception) this raises ``_OneByOne``: the caller
    rolls back and applies the runs with ``_apply_one_by_one`` instead. Both are rare; the
    common case is cheap. Otherwise the outcomes, the arrival numbers and the counters are
    exactly those of ``_apply_one_by_one`` (tests/backends/test_inbox_claim_all.py).
    """
    wanted = sum(len(run) for run in runs)
    before, owed = tx.inbox_reserve_arrivals(wanted)
    first_arrival = before + 1
    # One claim row per identity, from its first event in the group; a later event with that
    # identity is a duplicate of it (same content) or a conflict (other content).
    firsts: dict[tuple[str, str], str] = {}
    rows: list[tuple[Any, ...]] = []
    arrival = first_arrival
    for run in runs:
        for item in run:
            key = item.identity
            seen = firsts.get(key)
            if seen is None:
                firsts[key] = item.fingerprint
                rows.append(
                    (*key, item.fingerprint, item.event["type"], now, now, arrival, arrival)
                )
            elif seen != item.fingerprint:
                raise _OneByOne
            arrival += 1
    fresh: set[tuple[str, str]] = set()
    for row, outcome in zip(rows, tx.inbox_claim_all(rows), strict=True):
        if outcome is Outcome.CONFLICT:
            raise _OneByOne
        if outcome is Outcome.APPLIED:
            fresh.add((row[0], row[1]))
    if not fresh:
        raise _OnlyDuplicates  # no conflict either: not one note is worth writing durably
    stock: dict[str, int] = {}
    handler_tx = HandlerTransaction(tx)
    results: list[BatchResult] = []
    tally: Counter[str] = Counter()
    arrival = first_arrival
    every_one_fresh = len(fresh) == wanted
    for run in runs:
        statuses: list[str] = []
        for item in run:
            key = item.identity
            if every_one_fresh or key in fresh:
                # The first event of a freshly claimed identity; any later one is a duplicate.
                fresh.discard(key)
                _run_handler(item, handler_tx, stock, awaiter, on_failure=_OneByOne)
                statuses.append(_APPLIED)
            else:
                tx.inbox_note_receipt(*key, now, arrival)
                statuses.append(_DUPLICATE)
            arrival += 1
        tally.update(statuses)
        results.append(BatchResult(statuses))
    tx.inventory_add(stock)
    tx.counters_bump({**owed, **{COUNTER_PREFIX + name: count for name, count in tally.items()}})
    return results


def _run_handler(
    item: _Item,
    tx: HandlerTransaction,
    stock: dict[str, int],
    awaiter: Awaiter | None,
    *,
    on_failure: type[Exception] | None = None,
) -> None:
    """Apply one fresh event. The reference handler's stock is added up in ``stock`` (written
    once per sku at the end); any other handler runs now. With ``on_failure``, a handler's
    exception becomes that one (the group is redone one by one)."""
    if item.handler is warehouse.apply:
        _add_stock(stock, item.event)
        return
    # A span per apply, a child of the producer's (its context travels in the event); the
    # handler's own spans nest in it. Nothing at all without OpenTelemetry in the process.
    with span(f"apply {item.event['type']}", item.event, kind="consumer"):
        if on_failure is None:
            call_handler(item.handler, tx, item.event, awaiter)
            return
        try:
            call_handler(item.handler, tx, item.event, awaiter)
        except NotAwaited:
            raise
        except Exception as exc:
            raise on_failure from exc


_APPLIED = Outcome.APPLIED.value
_DUPLICATE = Outcome.DUPLICATE.value
#: Each outcome's status and counter name, looked up once: an enum member's ``.value`` is a
#: descriptor call, and this runs per event.
_STATUS = {outcome: outcome.value for outcome in Outcome}
_COUNTER = {outcome: COUNTER_PREFIX + outcome.value for outcome in Outcome}
_APPLIED_COUNTER = _COUNTER[Outcome.APPLIED]
_DUPLICATE_COUNTER = _COUNTER[Outcome.DUPLICATE]


def _apply_one_by_one(
    tx: Tx, runs: Sequence[Sequence[_Item]], now: float, awaiter: Awaiter | None
) -> list[BatchResult]:
    """Claim each run's events in order, each run stopping at its own first conflict or
    failing handler.

    A user's handler runs in a savepoint with its event's claim, so its failure undoes both
    and nothing before it. The reference handler's stock is summed and written once at the
    end (one upsert per sku), the same committed state as writing it event by event.
    """
    stock: dict[str, int] = {}
    results: list[BatchResult] = []
    handler_tx = HandlerTransaction(tx)
    wanted = sum(len(run) for run in runs)
    # Arrival numbers are taken as one block; the counter row stays locked until commit, so
    # they follow commit order on every backend (numbers of unclaimed items are skipped).
    arrival, owed = tx.inbox_reserve_arrivals(wanted) if wanted else (0, {})
    # The counts to bump, the arrival numbers' own first where the backend leaves it to us.
    tally = dict(owed)
    for run in runs:
        result = BatchResult([])
        for item in run:
            arrival += 1
            guarded = item.handler is not warehouse.apply
            if guarded:
                tx.handler_savepoint()
            claim = tx.inbox_claim(
                *item.identity, item.fingerprint, type=item.event["type"], now=now, arrival=arrival
            )
            outcome = claim.outcome
            if outcome is Outcome.CONFLICT and _v1_same(tx, item):
                outcome = Outcome.DUPLICATE
            if outcome is Outcome.DUPLICATE and wanted == 1:
                # A lone duplicate: nothing else can be applied, so stop here (the caller
                # rolls back and notes it lazily) rather than write what is undone.
                raise _OnlyDuplicates
            if outcome is Outcome.APPLIED:
                try:
                    _run_handler(item, handler_tx, stock, awaiter)
                except NotAwaited:
                    raise
                except Exception as exc:
                    if not guarded:  # pragma: no cover - the reference handler only adds
                        raise
                    tx.handler_undo()
                    result.error = exc
                    break
            if guarded:
                tx.handler_release()
            counter = _COUNTER[outcome]
            tally[counter] = tally.get(counter, 0) + 1
            if outcome is Outcome.CONFLICT:
                result.error = _conflict(item)
                break
            if outcome is Outcome.DUPLICATE:
                tx.inbox_note_receipt(*item.identity, now, arrival)
            result.statuses.append(_STATUS[outcome])
        results.append(result)
    tx.inventory_add(stock)
    tx.counters_bump(tally)
    return results


class _OnlyDuplicates(Exception):
    """A durable attempt found nothing to apply: roll it back, note the duplicates lazily."""


class _HandlerFailed(Exception):
    """A lone event's handler raised: roll its whole transaction back (the caller keeps what
    it raised)."""


class _ClaimedMeanwhile(Exception):
    """A lone event's identity, free at the read by key, was claimed before its write: roll
    the attempt back and take the general way, which tells a duplicate from a conflict."""


def _unless_only_duplicates(results: list[BatchResult]) -> list[BatchResult]:
    """``results``, unless they are duplicates and nothing else (then _OnlyDuplicates)."""
    seen = False
    for result in results:  # plain loops: this runs for every group, new events included
        if result.error is not None:
            return results
        for status in result.statuses:
            if status != _DUPLICATE:
                return results
            seen = True
    if seen:
        raise _OnlyDuplicates
    return results


def _note_duplicates(tx: Tx, runs: Sequence[Sequence[_Item]], now: float) -> list[BatchResult]:
    """Runs of duplicates only: each takes its arrival number and is counted again, as
    ``_apply_one_by_one`` would count it, and nothing runs."""
    identities = [item.identity for run in runs for item in run]
    owed = tx.inbox_note_receipts(identities, now)
    tx.counters_bump({**owed, COUNTER_PREFIX + _DUPLICATE: len(identities)})
    return [BatchResult([_DUPLICATE] * len(run)) for run in runs]


def _v1_same(tx: Tx, item: _Item) -> bool:
    """A receipt a v1 inbox stored has v1's fingerprint: the same lab event is no conflict."""
    legacy = warehouse.v1_fingerprint(item.event)
    return legacy is not None and legacy == tx.inbox_fingerprint(*item.identity)


def _awaiter(awaiting: bool) -> contextlib.AbstractContextManager[Awaiter | None]:
    """A ``HandlerAwaiter`` for one call that may await its handlers, else nothing."""
    return HandlerAwaiter() if awaiting else contextlib.nullcontext()


def _no_handler(event: dict[str, Any]) -> NoHandler:
    return NoHandler(f"type: no handler for event type {event['type']!r} at this inbox")


def _conflict(item: _Item) -> Conflict:
    source, event_id = item.identity
    return Conflict(
        f"event {event_id!r} of source {source!r} was already applied with other content"
    )


def _check_handlers(handlers: object) -> dict[str, Handler]:
    """The reference handler, overridden by the user's for the types they name."""
    found: dict[str, Handler] = {warehouse.TYPE: warehouse.apply}
    if handlers is None:
        return found
    if not isinstance(handlers, Mapping):
        raise TypeError(
            f"handlers: must be a mapping of event type to handler, got {type(handlers).__name__}"
        )
    for name, handler in handlers.items():
        check_type_name(name, "handlers")
        check_handler(handler, f"handlers[{name!r}]")
        found[name] = handler
    return found


class Inbox(Database):
    def __init__(
        self,
        target: str | os.PathLike[str],
        *,
        handlers: Mapping[str, Handler] | None = None,
        types: EventTypes | None = None,
        synchronous: str = "FULL",
        schema: str | None = None,
    ) -> None:
        if types is not None and not isinstance(types, EventTypes):
            raise TypeError(f"types: must be an EventTypes, got {type(types).__name__}")
        self._handlers = _check_handlers(handlers)
        #: The types whose handler is ``async def``: refused where nothing can await them.
        self._async_types = frozenset(
            name for name, handler in self._handlers.items() if is_async_handler(handler)
        )
        self._types = types if types is not None else EventTypes()
        self._oldest = OldestReceipt()
        # The handlers' view of the last write transaction of a lone event, kept while the
        # backend hands out the same ``Tx`` (SQLite's does): one object fewer an event.
        self._handler_tx: tuple[Tx, HandlerTransaction] | None = None
        super().__init__(target, synchronous=synchronous, schema=schema)

    @property
    def handlers(self) -> dict[str, Handler]:
        return dict(self._handlers)

    @property
    def runs_user_code(self) -> bool:
        """True when a handler other than the reference one is registered: the services then
        call this inbox from a worker thread, never on their event loop."""
        return any(handler is not warehouse.apply for handler in self._handlers.values())

    @property
    def async_types(self) -> frozenset[str]:
        """The event types whose handler is ``async def`` (awaited by the services, the
        consumers and ``asgi()``; refused by the sync ``receive``)."""
        return self._async_types

    def _handler_for(self, event: dict[str, Any], awaiting: bool) -> Handler:
        handler = self._handlers.get(event["type"])
        if handler is None:
            raise _no_handler(event)
        if not awaiting and event["type"] in self._async_types:
            raise async_refused(handler, event["type"])
        if handler is warehouse.apply:
            self._db.ensure_lab()  # the lab's tables: made by its first event, not by opening
        return handler

    def _prepare(self, obj: object, awaiting: bool) -> _Item:
        event, text = validate_encoded(obj, types=self._types)
        handler = self._handler_for(event, awaiting)
        return _Item(event, fingerprint_of(event, text), handler, (event["source"], event["id"]))

    def _prepared_prefix(
        self, events: Sequence[object], awaiting: bool
    ) -> tuple[list[_Item], Exception | None]:
        """The events before the first invalid or unhandled one, prepared, and its error.
        An async handler where nothing awaits raises ``NotAwaited`` for the whole call."""
        items: list[_Item] = []
        for obj in events:
            try:
                items.append(self._prepare(obj, awaiting))
            except AckledgerError as exc:
                return items, exc
        return items, None

    def receive(self, event: object) -> str:
        """Apply ``event`` once; returns ``"applied"`` or ``"duplicate"``. Raises Conflict,
        NoHandler, InvalidEvent, or what the handler raised; then nothing was recorded.
        An ``async def`` handler, or one that returns an awaitable, is refused with
        ``TypeError`` and nothing is written: this call cannot await it."""
        (result,) = self._apply([[self._prepare(event, False)]], None)
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

    def receive_runs(
        self, runs: Sequence[Sequence[object]], *, awaiting: bool = False
    ) -> list[BatchResult]:
        """Apply several independent runs of events in ONE transaction (a group commit).

        Each run behaves exactly as ``receive_batch`` would on its own, in the order given:
        it stops at its own first invalid, unhandled, conflicting or failing event, and never
        affects another run beyond what applying them one after the other would. One commit
        makes them all durable, which is how the sink answers many concurrent clients for the
        price of one fsync.

        With ``awaiting``, an awaitable a handler returns is awaited in this thread, inside
        the transaction (``HandlerAwaiter``): the services call it so, from a worker thread.
        Without it, an ``async def`` handler raises ``TypeError`` before anything is written.
        """
        with _awaiter(awaiting) as awaiter:
            if len(runs) == 1 and len(runs[0]) == 1:
                # One client's one event, the common group: ``_prepare``'s steps without its
                # frame and its ``_Item``, which only a new event needs (``_apply_lone``).
                try:
                    event, text = validate_encoded(runs[0][0], types=self._types)
                    handler = self._handler_for(event, awaiting)
                except AckledgerError as exc:
                    return [BatchResult([], exc)]
                return self._apply_lone(event, fingerprint_of(event, text), handler, awaiter)
            prepared = [self._prepared_prefix(run, awaiting) for run in runs]
            return self._apply_prepared(prepared, awaiter)

    def read_lone(self, event: object) -> str | Sequence[object]:
        """A lone event's steps that need no write transaction, for the request's own turn
        (the sink's ``POST /events``): validated, its handler found, read by key, and a
        re-send noted as ``receive`` notes it (``Backend.inbox_read_or_note``; the v1
        fingerprint's note too). Returns ``"duplicate"`` for a re-send, answered now; else
        the event prepared, a run of one for ``receive_group``, which neither validates nor
        reads it again. Raises InvalidEvent or NoHandler (nothing recorded), or the
        database's error."""
        event, text = validate_encoded(event, types=self._types)
        handler = self._handler_for(event, True)
        return self._read_by_key(event, fingerprint_of(event, text), handler)

    def receive_group(
        self, runs: Sequence[Sequence[object]], *, awaiting: bool = False
    ) -> list[BatchResult]:
        """``receive_runs`` for runs that may be events ``read_lone`` prepared: in ONE
        transaction, each run as it would be alone. A prepared event found free and alone in
        its group is ``_apply_new_lone``'s; taken since (``_ClaimedMeanwhile``), stored with
        other content, or with others in the group, the general way decides (its claim tells
        a duplicate from a conflict, and counts the conflict durably). ``awaiting`` as in
        ``receive_runs``."""
        if len(runs) == 1 and type(runs[0]) is not _Item:
            return self.receive_runs(runs, awaiting=awaiting)
        if not awaiting:
            for run in runs:
                if type(run) is _Item:
                    self._handler_for(run.event, False)
        with _awaiter(awaiting) as awaiter:
            if len(runs) == 1:
                run = runs[0]
                assert type(run) is _Item
                return self._apply_read(run, awaiter)
            prepared = [
                ([run], None) if type(run) is _Item else self._prepared_prefix(run, awaiting)
                for run in runs
            ]
            return self._apply_prepared(prepared, awaiter)

    def _apply_prepared(
        self,
        prepared: Sequence[tuple[Sequence[_Item], Exception | None]],
        awaiter: Awaiter | None,
    ) -> list[BatchResult]:
        """Apply runs prepared up to their first refused event, each then stopped by it."""
        if not any(items for items, _ in prepared):
            return [BatchResult([], error) for _, error in prepared]
        results = self._apply([items for items, _ in prepared], awaiter)
        for result, (_, refused) in zip(results, prepared, strict=True):
            if result.error is None:
                result.error = refused
        return results

    def _apply(self, runs: Sequence[Sequence[_Item]], awaiter: Awaiter | None) -> list[BatchResult]:
        """Apply prepared runs in ONE committed write transaction (a rolled-back attempt
        applies nothing, so it does not count)."""
        if len(runs) == 1 and len(runs[0]) == 1:
            item = runs[0][0]
            return self._apply_lone(item.event, item.fingerprint, item.handler, awaiter)
        return self._apply_written(runs, time.time(), awaiter)

    def _apply_lone(
        self, event: dict[str, Any], fingerprint: str, handler: Handler, awaiter: Awaiter | None
    ) -> list[BatchResult]:
        """One event alone (one client's one event, the common group), as ``_apply`` does
        any group: the read by key (``_read_by_key``), then the write (``_apply_read``)."""
        found = self._read_by_key(event, fingerprint, handler)
        if isinstance(found, str):
            return [BatchResult([found])]
        return self._apply_read(found, awaiter)

    def _read_by_key(
        self, event: dict[str, Any], fingerprint: str, handler: Handler
    ) -> str | _Item:
        """A lone event's read by key, first: a re-send is answered from it (``"duplicate"``),
        with no write lock taken to find it out, and its note is written in the same call of
        the backend (``Backend.inbox_read_or_note``: its note and counts, as
        ``_note_duplicates`` writes them for a run of one); a receipt of a v1 inbox (its
        fingerprint) is noted the same way. Anything else is returned as an ``_Item`` with
        what was read, for ``_apply_read``."""
        source, event_id = identity = event["source"], event["id"]
        now = time.time()
        db = self._db
        stored = db.inbox_read_or_note(source, event_id, fingerprint, now, _DUPLICATE_COUNTER)
        if stored == fingerprint:
            return _DUPLICATE
        item = _Item(event, fingerprint, handler, identity, stored)
        if stored is not None and self._alike(item, stored):
            with db.write(durable=False) as tx:
                tx.inbox_note_lone(source, event_id, now, _DUPLICATE_COUNTER)
            return _DUPLICATE
        return item

    def _apply_read(self, item: _Item, awaiter: Awaiter | None) -> list[BatchResult]:
        """A lone event ``_read_by_key`` did not settle. Found free, it is
        ``_apply_new_lone``'s one transaction; if its identity was claimed since the read,
        that attempt is rolled back before it wrote a count and the general way decides, as
        it does for other content (its claim counts the conflict durably)."""
        now = time.time()
        if item.stored is None:
            try:
                return self._apply_new_lone(
                    item.event, item.fingerprint, item.handler, now, awaiter
                )
            except _ClaimedMeanwhile:
                pass
        return self._apply_written([[item]], now, awaiter)

    def _apply_new_lone(
        self,
        event: dict[str, Any],
        fingerprint: str,
        handler: Handler,
        now: float,
        awaiter: Awaiter | None,
    ) -> list[BatchResult]:
        """A lone event whose identity the read found free: the arrival number and the claim
        (``Tx.inbox_claim_lone``), its handler in that same transaction, the counts
        (``Tx.inbox_count_lone``), one durable commit: the statements ``_apply_one_by_one``
        runs for it, in its order, without its savepoint. The savepoint is there to undo one
        event's claim and effect and keep the rest of a group; a lone event has no rest, so a
        failing handler rolls the whole transaction back instead. What the general way then
        commits is only the arrival number it took (its claim and the handler's writes
        undone, no outcome counted): ``_skip_arrival`` commits just that."""
        failure: Exception | None = None
        try:
            with self._db.write() as tx:
                claimed = tx.inbox_claim_lone(
                    event["source"], event["id"], fingerprint, event["type"], now
                )
                if not claimed:
                    raise _ClaimedMeanwhile
                pair = self._handler_tx
                if pair is None or pair[0] is not tx:
                    pair = self._handler_tx = (tx, HandlerTransaction(tx))
                try:
                    if tracing():
                        # A span per apply, a child of the producer's, as ``_run_handler``.
                        with span(f"apply {event['type']}", event, kind="consumer"):
                            call_handler(handler, pair[1], event, awaiter)
                    else:
                        call_handler(handler, pair[1], event, awaiter)
                except NotAwaited:
                    raise
                except Exception as exc:
                    failure = exc
                    raise _HandlerFailed from exc
                tx.inbox_count_lone(_APPLIED_COUNTER)
        except _HandlerFailed:
            assert failure is not None
            self._skip_arrival()
            return [BatchResult([], failure)]
        return [BatchResult([_APPLIED])]

    def _skip_arrival(self) -> None:
        """Commit what the general way commits for an event whose handler failed: the
        arrival number it took (a gap in the sequence; no receipt, no outcome counted)."""
        with self._db.write() as tx:
            _, owed = tx.inbox_reserve_arrivals(1)
            tx.counters_bump(owed)

    def _apply_written(
        self, runs: Sequence[Sequence[_Item]], now: float, awaiter: Awaiter | None
    ) -> list[BatchResult]:
        """``_apply``'s durable attempt, for runs not known to be a lone duplicate."""
        items = [item for run in runs for item in run]
        try:
            # One event costs the same statements either way, and less Python one by one. A
            # user's handler always goes one by one, in its savepoint: applying the group
            # together first would run a failing handler twice (once in the rolled-back try).
            if len(items) > 1 and all(item.handler is warehouse.apply for item in items):
                try:
                    with self._db.write() as tx:
                        return _unless_only_duplicates(_apply_together(tx, runs, now, awaiter))
                except _OneByOne:
                    pass
            with self._db.write() as tx:
                return _unless_only_duplicates(_apply_one_by_one(tx, runs, now, awaiter))
        except _OnlyDuplicates:
            pass
        # Nothing to apply: the claims only read, and the durable attempt was rolled back
        # before its commit. What is left is bookkeeping (the receipts' count and last
        # arrival, the duplicate counter), committed without waiting for the disk
        # (``Backend.write(durable=False)``): it survives a crash of this process (SQLite: it
        # is in the WAL file; PostgreSQL: the server has it) and the next durable commit makes
        # it durable. Only a power loss or an OS crash before then can lose it, and then only
        # those counts: the receipt and the effect were made durable by the first arrival.
        with self._db.write(durable=False) as tx:
            return _note_duplicates(tx, runs, now)

    @staticmethod
    def _alike(item: _Item, stored: str) -> bool:
        """True when ``stored``, the fingerprint read under ``item``'s identity, is of its
        content (a duplicate).

        One read by key: a lone new event pays it (one statement and no lock beyond the
        read's), a lone duplicate is spared a write transaction that would only be rolled
        back. A claim racing this read is still told apart by the write path's own claim."""
        if stored == item.fingerprint:
            return True
        legacy = warehouse.v1_fingerprint(item.event)
        return legacy is not None and legacy == stored

    def stock(self, sku: str) -> int:
        check_identifier(sku, "sku", 64)
        with self._db.read() as tx:
            # Only reads (a write would wait behind a busy sink): no lab tables, no stock.
            if not self._db.has_table(tx, "inventory"):
                return 0
            return tx.inventory_stock(sku)

    def receipt(self, event_id: str, *, source: str | None = None) -> dict[str, Any] | None:
        """The inbox row of one event (when, how often), or None if it never arrived.
        Without ``source``, the oldest receipt of any source with this id."""
        with self._db.read() as tx:
            found = tx.inbox_receipts(event_id, source)
        return found[0] if found else None

    def receipts(self, event_id: str) -> list[dict[str, Any]]:
        """Every receipt with this id (one per source), oldest first."""
        with self._db.read() as tx:
            return tx.inbox_receipts(event_id)

    def counters(self) -> dict[str, int]:
        """Durable totals that never go down: applied, duplicate, conflict (a purge deletes
        receipts, never counts)."""
        with self._db.read() as tx:
            found = tx.counters_read(COUNTER_PREFIX)
        return {name: found.get(name, 0) for name in COUNTER_NAMES}

    def purge(
        self,
        older_than_seconds: float = DEFAULT_RETENTION_SECONDS,
        *,
        chunk: int = PURGE_CHUNK,
        force: bool = False,
    ) -> int:
        """Delete the receipts first received more than ``older_than_seconds`` ago; returns
        how many.

        A re-send that arrives after its receipt is gone is applied again, so the horizon must
        be longer than any event can stay unmarked at its source (docs/postgres.md, "Inbox
        retention", says how to choose it). Below one hour it is refused unless ``force``.
        The counters do not change; ``retention()["purged"]`` grows by what was deleted.

        One pass over the inbox's key, ``chunk`` keys a window, the old receipts deleted in
        short write transactions of at most ``chunk`` each; at the end the oldest receipt kept
        is recorded for ``retention()`` (``retention.purge_windows``).
        """
        age = check_age(older_than_seconds, "older_than_seconds")
        if isinstance(chunk, bool) or not isinstance(chunk, int) or not 1 <= chunk <= 100_000:
            raise ValueError(f"chunk: must be a whole number from 1 to 100000, got {chunk!r}")
        if not isinstance(force, bool):
            raise ValueError(f"force: must be True or False, got {type(force).__name__}")
        if age < MIN_RETENTION_SECONDS and not force:
            raise ValueError(
                f"older_than_seconds: {age:g} s is under the 1 h floor; a receipt purged while "
                "its event can still be re-sent turns the re-send into a second apply "
                "(pass force=True to go below it)"
            )
        return purge_windows(self._db, time.time() - age, chunk)

    def retention(self) -> dict[str, Any]:
        """``purged``: receipts deleted by ``purge`` over the database's life, by any process
        (a durable counter); ``oldest_receipt_age_s``: seconds since the oldest receipt kept
        by the last purge first arrived (before any purge, the first receipt), None for an
        empty inbox. Receipts deleted since by hand, or by a purge that stopped half-way, are
        not seen: the age is then too old, never too young (``retention.OldestReceipt``)."""
        with self._db.read() as tx:
            purged = tx.counters_read(PURGED).get("", 0)
        oldest = self._oldest.read(self._db)
        age = None if oldest is None else max(0.0, time.time() - oldest)
        return {"purged": purged, "oldest_receipt_age_s": age}

    def asgi(self, prefix: str = "") -> ASGIApp:
        """The ``/events`` routes (and ``/healthz``, ``/metrics``) as an ASGI app to mount in
        your own Starlette or FastAPI app. Needs the ``server`` extra."""
        from .app import create_sink_app

        return create_sink_app(self, prefix=prefix, own_thread=True)
