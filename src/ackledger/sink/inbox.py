"""The sink side: apply each event once, in the same transaction as its effect.

An event is known by its identity ``(source, id)``. The first receipt of an identity runs the
handler of the event's type inside the inbox's transaction; a re-sent event (same identity,
same content) is a duplicate: acknowledged again, applied never again. The same identity with
other content is a conflict: refused, and nothing changes but the conflict counter. An event
no handler takes, or one its handler refuses, is not recorded at all.

Every way in reaches one algorithm (``apply.apply_runs``): validate, find the handlers, claim
the identities, run the handlers, count, commit. One branch answers without it: a lone event
is read by key first, and a re-send found so is answered from that read (``read_lone``).
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from .. import plugins
from .._core.database import Database
from ..envelope import fingerprint_of, validate_encoded
from ..errors import AckledgerError, InvalidEvent, NoHandler
from ..event import check_identifier
from ..event_types import EventTypes, check_type_name
from .apply import (
    COUNTER_PREFIX,
    DUPLICATE,
    BatchResult,
    Item,
    LoneFailed,
    apply_runs,
    noted_resend,
    take_arrival,
)
from .handler_call import Awaiter, HandlerAwaiter, async_refused, check_handler, is_async_handler
from .handler_tx import Handler
from .retention import (
    DEFAULT_RETENTION_SECONDS,
    MIN_RETENTION_SECONDS,
    PURGE_CHUNK,
    OldestReceipt,
    purge,
    report,
)

if TYPE_CHECKING:
    from starlette.types import ASGIApp

__all__ = [
    "COUNTER_NAMES",
    "COUNTER_PREFIX",
    "DEFAULT_RETENTION_SECONDS",
    "MIN_RETENTION_SECONDS",
    "PURGE_CHUNK",
    "BatchResult",
    "Inbox",
]

#: The durable counters ``counters()`` reports; they never go down, whatever is purged.
COUNTER_NAMES = ("applied", "duplicate", "conflict")

#: A prepared run: its events up to the first refused one, and that refusal.
Prepared = tuple[Sequence[Item], Exception | None]


#: No awaiter (a ``nullcontext`` holds nothing, so one serves every call).
_NO_AWAITER: contextlib.AbstractContextManager[None] = contextlib.nullcontext()


def _awaiter(awaiting: bool) -> contextlib.AbstractContextManager[Awaiter | None]:
    """A ``HandlerAwaiter`` for one call that may await its handlers, else nothing."""
    return HandlerAwaiter() if awaiting else _NO_AWAITER


def _check_handlers(handlers: object) -> dict[str, Handler]:
    """The plug-ins' handlers (the lab's), replaced by the user's for the types they name."""
    found: dict[str, Handler] = plugins.handlers()
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


class InvalidItem(InvalidEvent):
    """An invalid event of a batch, which refuses the batch whole; ``index`` is its place."""

    def __init__(self, index: int, cause: InvalidEvent) -> None:
        super().__init__(str(cause), field=cause.field)
        self.index = index


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
        built_in = plugins.handlers()
        #: Whether a handler is the user's (not a plug-in's, which never blocks for long).
        self._runs_user_code = any(
            handler is not built_in.get(name) for name, handler in self._handlers.items()
        )
        self._types = types if types is not None else EventTypes()
        self._oldest = OldestReceipt()
        #: The types a plug-in's own handler applies: its tables are made by its first event.
        self._plugin_types = frozenset(
            name for name, handler in self._handlers.items() if handler is built_in.get(name)
        )
        super().__init__(target, synchronous=synchronous, schema=schema)

    @property
    def handlers(self) -> dict[str, Handler]:
        return dict(self._handlers)

    @property
    def runs_user_code(self) -> bool:
        """True when a handler other than the plug-ins' is registered: the services then
        call this inbox from a worker thread, never on their event loop."""
        return self._runs_user_code

    @property
    def async_types(self) -> frozenset[str]:
        """The event types whose handler is ``async def`` (awaited by the services, the
        consumers and ``asgi()``; refused by the sync ``receive``)."""
        return self._async_types

    def _prepare(self, obj: object, awaiting: bool) -> Item:
        """Validate ``obj`` and find its handler (InvalidEvent, NoHandler; an async handler
        where nothing awaits raises ``NotAwaited`` for the whole call)."""
        event, text = validate_encoded(obj, types=self._types)
        handler = self._handlers.get(event["type"])
        if handler is None:
            raise NoHandler(f"type: no handler for event type {event['type']!r} at this inbox")
        if not awaiting and event["type"] in self._async_types:
            raise async_refused(handler, event["type"])
        if event["type"] in self._plugin_types:
            self._db.ensure_lab()  # a plug-in's tables: made by its first event, not by opening
        return Item(event, fingerprint_of(event, text), handler, (event["source"], event["id"]))

    def _prepared(self, events: Sequence[object], awaiting: bool) -> Prepared:
        """The events before the first unhandled one, prepared, and its error. The run is
        validated whole first: one invalid event anywhere refuses all of it (InvalidItem),
        so nothing of a batch with a malformed item is applied."""
        items: list[Item] = []
        refused: AckledgerError | None = None
        for index, obj in enumerate(events):
            try:
                if refused is None:
                    items.append(self._prepare(obj, awaiting))
                else:
                    validate_encoded(obj, types=self._types)
            except InvalidEvent as exc:
                # Alone, the event's own refusal; in a batch, naming its place.
                return [], exc if len(events) == 1 else InvalidItem(index, exc)
            except AckledgerError as exc:
                refused = exc
        return items, refused

    def receive(self, event: object) -> str:
        """Apply ``event`` once; returns ``"applied"`` or ``"duplicate"``. Raises Conflict,
        NoHandler, InvalidEvent, or what the handler raised; then nothing was recorded.
        An ``async def`` handler, or one that returns an awaitable, is refused with
        ``TypeError`` and nothing is written: this call cannot await it."""
        (result,) = self.receive_runs([[event]])
        # A conflict's count is committed; a failing handler's arrival number is too.
        if result.error is not None:
            raise result.error
        return result.statuses[0]

    def receive_batch(self, events: Sequence[object]) -> BatchResult:
        """Apply a list of events in order in ONE transaction, stopping at the first that fails.

        All of them are validated before the transaction: an invalid one anywhere is the
        error (``InvalidItem``, naming its index) and nothing is applied. Otherwise the prefix
        before a refused or failing item is committed, that item and everything after it are
        not applied.
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
        prepared = [self._prepared(run, awaiting) for run in runs]
        # One event alone: a re-send is answered from a read by key (``noted_resend``).
        items, refused = prepared[0] if len(prepared) == 1 else ((), None)
        if len(items) == 1 and refused is None and noted_resend(self._db, items[0]):
            return [BatchResult([DUPLICATE])]
        return self._commit(prepared, awaiting)

    def read_lone(self, event: object) -> str | Item:
        """A lone event's steps that need no write transaction, for the request's own turn
        (the sink's ``POST /events``): validated, its handler found, read by key, and a
        re-send noted as ``receive`` notes it. Returns ``"duplicate"`` for a re-send,
        answered now; else the event prepared, a run of its own for ``receive_group``.
        Raises InvalidEvent or NoHandler (nothing recorded), or the database's error."""
        item = self._prepare(event, True)
        return DUPLICATE if noted_resend(self._db, item) else item

    def receive_group(
        self, runs: Sequence[Sequence[object] | Item], *, awaiting: bool = False
    ) -> list[BatchResult]:
        """``receive_runs`` for runs that may be events ``read_lone`` prepared (neither
        validated nor read again): in ONE transaction, each run as it would be alone."""
        if len(runs) == 1 and not isinstance(runs[0], Item):
            return self.receive_runs([runs[0]], awaiting=awaiting)
        prepared: list[Prepared] = []
        for run in runs:
            if isinstance(run, Item):
                if not awaiting and run.event["type"] in self._async_types:
                    raise async_refused(run.handler, run.event["type"])
                prepared.append(([run], None))
            else:
                prepared.append(self._prepared(run, awaiting))
        return self._commit(prepared, awaiting)

    def _commit(self, prepared: Sequence[Prepared], awaiting: bool) -> list[BatchResult]:
        """Apply prepared runs in ONE committed write transaction, each then stopped by its
        refusal, if it had one. Runs with nothing to apply write nothing."""
        if not any(items for items, _ in prepared):
            return [BatchResult([], error) for _, error in prepared]
        try:
            with _awaiter(awaiting) as awaiter, self._db.write() as tx:
                results = apply_runs(tx, [items for items, _ in prepared], time.time(), awaiter)
        except LoneFailed as failed:
            # The only event's handler raised: all of it was rolled back, and what is left
            # is its arrival number, as for the same failure in a batch.
            with self._db.write() as tx:
                take_arrival(tx)
            error = failed.__cause__
            assert isinstance(error, Exception)
            return [BatchResult([], error if items else refused) for items, refused in prepared]
        for result, (_, refused) in zip(results, prepared, strict=True):
            if result.error is None:
                result.error = refused
        return results

    def stock(self, sku: str) -> int:
        """The reference domain's stock of ``sku`` (0 for an unknown one), read by the lab."""
        with self._db.read() as tx:
            # Only reads (a write would wait behind a busy sink): before the lab's first
            # event its tables do not exist, and every stock is 0.
            if not self._db.has_table(tx, "inventory"):
                check_identifier(sku, "sku", 64)
                return 0
            return int(plugins.call("stock")(tx, sku))

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
        retention"); below one hour it is refused unless ``force``. The counters do not
        change; ``retention()["purged"]`` grows. ``retention.purge_windows`` says how."""
        return purge(self._db, older_than_seconds, chunk, force)

    def retention(self) -> dict[str, Any]:
        """``purged``: receipts deleted by ``purge`` over the database's life, by any process
        (a durable counter); ``oldest_receipt_age_s``: seconds since the oldest receipt kept
        by the last purge first arrived (before any purge, the first receipt), None for an
        empty inbox. Receipts deleted since by hand, or by a purge that stopped half-way, are
        not seen: the age is then too old, never too young (``retention.OldestReceipt``)."""
        return report(self._db, self._oldest)

    def asgi(self, prefix: str = "") -> ASGIApp:
        """The ``/events`` routes (and ``/healthz``, ``/metrics``) as an ASGI app to mount in
        your own Starlette or FastAPI app. Needs the ``server`` extra."""
        from .._core.extras import needing_extra

        with needing_extra("Inbox.asgi()"):
            from .app import create_sink_app

        return create_sink_app(self, prefix=prefix, own_thread=True)
