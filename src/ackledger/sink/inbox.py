"""The sink side: apply each event once, in the same transaction as its effect.

An event is known by its identity ``(source, id)``. The first receipt of an identity runs the
handler of the event's type inside the inbox's transaction; a re-sent event (same identity,
same content) is a duplicate: acknowledged again, applied never again. The same identity with
other content is a conflict: refused, and nothing changes but the conflict counter. An event
no handler takes, or one its handler refuses, is not recorded at all.

Every way in reaches one algorithm (``apply.apply_runs``): validate, find the handlers, claim
the identities, run the handlers, count, commit. One branch answers without it: a lone event
is read by key first, and a re-send found so is answered from that read (``read_lone``).
``receive(event, using=...)`` runs the same algorithm in the caller's own transaction
(``receive_using``).

Several inboxes may share one database: each has a name, and its receipts are its own, so an
event received by two of them (shipping and billing) is applied once by each.
"""

from __future__ import annotations

import asyncio
import operator
import os
import time
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING

from .. import plugins
from .apply import (
    COUNTER_PREFIX,
    DEFAULT_NAME,
    DUPLICATE,
    BatchResult,
    Item,
    Unguarded,
    apply_runs,
    noted_resend,
    take_arrival,
)
from .handler_call import Awaiter, HandlerAwaiter
from .handler_tx import Handler
from .inbox_records import COUNTER_NAMES, InboxRecords
from .prepare import MAX_NAME_LENGTH, InvalidItem, Prepared, Preparer, UsersHandler, check_name
from .receive_using import receive_using
from .retention import DEFAULT_RETENTION_SECONDS, MIN_RETENTION_SECONDS, PURGE_CHUNK

if TYPE_CHECKING:
    from starlette.types import ASGIApp

    from ..event_types import EventTypes
    from ..wire.token import Token

__all__ = [
    "COUNTER_NAMES",
    "COUNTER_PREFIX",
    "DEFAULT_NAME",
    "DEFAULT_RETENTION_SECONDS",
    "MAX_NAME_LENGTH",
    "MIN_RETENTION_SECONDS",
    "PURGE_CHUNK",
    "BatchResult",
    "Inbox",
    "InvalidItem",
    "check_name",
]

#: A prepared run's events.
_ITEMS = operator.itemgetter(0)


class Inbox(InboxRecords):
    def __init__(
        self,
        target: str | os.PathLike[str],
        *,
        name: str = DEFAULT_NAME,
        handlers: Mapping[str, UsersHandler] | None = None,
        types: EventTypes | None = None,
        synchronous: str = "FULL",
        schema: str | None = None,
    ) -> None:
        self._prep = Preparer(handlers, types)
        super().__init__(target, check_name(name), synchronous=synchronous, schema=schema)

    @property
    def handlers(self) -> dict[str, Handler]:
        return dict(self._prep.handlers)

    @property
    def runs_user_code(self) -> bool:
        """True when a handler other than the plug-ins' is registered: the services then
        call this inbox from a worker thread, never on their event loop."""
        return self._prep.runs_user_code

    @property
    def plugin_types(self) -> frozenset[str]:
        """The event types a plug-in's own handler applies (the lab's, unless replaced)."""
        return self._prep.plugin_types

    @property
    def async_types(self) -> frozenset[str]:
        """The event types whose handler is ``async def`` (awaited by the services, the
        consumers and ``asgi()``; refused by the sync ``receive``)."""
        return self._prep.async_types

    def receive(self, event: object, *, using: object = None) -> str:
        """Apply ``event`` once; returns ``"applied"`` or ``"duplicate"``. Raises Conflict,
        NoHandler, InvalidEvent, or what the handler raised; then nothing was recorded.
        An ``async def`` handler, or one that returns an awaitable, is refused with
        ``TypeError`` and nothing is written: this call cannot await it.

        With ``using`` (what ``Outbox.publish(using=)`` takes: a sqlite3 or psycopg 3
        connection, a SQLAlchemy ``Connection`` or ``Session``, Django's connection) the
        receipt is written on it, inside the caller's transaction, and the handler is called
        as ``handler(using, event)``; nothing is committed or rolled back here, so the
        caller's commit keeps the receipt and the handler's writes together, and its rollback
        (after an error here, too) removes both."""
        if using is not None:
            tx = self._db.borrow(using)
            return receive_using(
                tx, using, event, self._prep.handlers, types=self._prep.types, name=self._name
            )
        (result,) = self.receive_runs([[event]])
        # A conflict's count is committed; a failing handler's arrival number is too.
        if result.error is not None:
            raise result.error
        return result.statuses[0]

    async def receive_async(self, event: object, *, using: object = None) -> str:
        """``receive`` for asyncio code: returns ``"applied"`` or ``"duplicate"`` and raises
        what ``receive`` raises. Handlers may be ``async def`` (awaited) or plain.

        With ``using`` (a SQLAlchemy ``AsyncSession`` or ``AsyncConnection``, a psycopg
        ``AsyncConnection`` or an asyncpg ``Connection``, in an open transaction), the receipt
        is written on the caller's connection by the inbox's one algorithm, the handler gets
        ``using`` itself as its first argument, and ackledger never commits or rolls back:
        the caller's commit keeps receipt and effect together, its rollback neither
        (store/borrowed_async.py says how). Without it, ackledger's own transaction runs in
        a worker thread, as ``receive`` runs it. Either way the event loop runs on."""
        if using is None:
            (result,) = await asyncio.to_thread(self.receive_runs, [[event]], awaiting=True)
            if result.error is not None:
                raise result.error
            return result.statuses[0]
        return await self._db.run_borrowed(
            using,
            lambda tx, awaiter: receive_using(
                tx,
                using,
                event,
                self._prep.handlers,
                types=self._prep.types,
                awaiter=awaiter,
                name=self._name,
            ),
        )

    def receive_batch(self, events: Sequence[object]) -> BatchResult:
        """Apply a list of events in order in ONE transaction, stopping at the first that fails.

        All of them are validated before the transaction: an invalid one anywhere is the
        error (``InvalidItem``, naming its index) and nothing is applied. Otherwise the prefix
        before a refused or failing item is committed, that item and everything after it are
        not applied.
        """
        return self.receive_runs([events])[0]

    def receive_runs(
        self, runs: Sequence[Sequence[object]], *, awaiting: bool = False, read_first: bool = True
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

        ``read_first=False`` sends a lone event straight to the write, without the read by key
        that answers a re-send: for callers whose events are new but for a rare redelivery.
        """
        prepared = [self._prep.run(self._db, run, awaiting) for run in runs]
        # One event alone: a re-send is answered from a read by key (``noted_resend``).
        items, refused = prepared[0] if len(prepared) == 1 else ((), None)
        if (
            read_first
            and len(items) == 1
            and refused is None
            and noted_resend(self._db, items[0], name=self._name)
        ):
            return [BatchResult([DUPLICATE])]
        return self._commit(prepared, awaiting)

    def read_lone(self, event: object) -> str | Item:
        """A lone event's steps that need no write transaction, for the request's own turn
        (the sink's ``POST /events``): validated, its handler found, read by key, and a
        re-send noted as ``receive`` notes it. Returns ``"duplicate"`` for a re-send,
        answered now; else the event prepared, a run of its own for ``receive_group``.
        Raises InvalidEvent or NoHandler (nothing recorded), or the database's error."""
        item = self._prep.item(self._db, event, True)
        return DUPLICATE if noted_resend(self._db, item, name=self._name) else item

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
                prepared.append(self._prep.prepared_item(run, awaiting))
            else:
                prepared.append(self._prep.run(self._db, run, awaiting))
        return self._commit(prepared, awaiting)

    def _commit(self, prepared: Sequence[Prepared], awaiting: bool) -> list[BatchResult]:
        """Apply prepared runs in ONE committed write transaction, each then stopped by its
        refusal, if it had one. Runs with nothing to apply write nothing."""
        # ``map`` over ``itemgetter``: no Python frame per call, which every event makes.
        runs = list(map(_ITEMS, prepared))
        if not any(runs):
            return [BatchResult([], error) for _, error in prepared]
        try:
            if awaiting:
                with HandlerAwaiter() as awaiter:
                    results = self._apply_all(runs, awaiter)
            else:
                results = self._apply_all(runs, None)
        except Unguarded as failed:
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

    def _apply_all(
        self, runs: Sequence[Sequence[Item]], awaiter: Awaiter | None
    ) -> list[BatchResult]:
        """``_apply`` without savepoints first; if a handler of a group raised, everything was
        rolled back, and the group is applied again with a savepoint per handler, so that
        only the failing event's run stops. A lone event's failure is raised (``Unguarded``)."""
        try:
            return self._apply(runs, awaiter, guarded=False)
        except Unguarded:
            if sum(map(len, runs)) == 1:
                raise
        return self._apply(runs, awaiter, guarded=True)

    def _apply(
        self, runs: Sequence[Sequence[Item]], awaiter: Awaiter | None, *, guarded: bool
    ) -> list[BatchResult]:
        """``apply_runs`` in one write transaction, committed; the handlers get a
        ``HandlerTransaction`` on it (``session_factory.SessionInbox`` holds it in the user's
        own session instead)."""
        with self._db.write() as tx:
            return apply_runs(tx, runs, time.time(), awaiter, name=self._name, guarded=guarded)

    def stock(self, sku: str) -> int:
        """The reference domain's stock of ``sku`` (0 for an unknown one): the plug-in that
        registers ``stock`` reads it, from its own tables."""
        return int(plugins.call("stock")(self._db, sku))

    def asgi(
        self,
        prefix: str = "",
        *,
        token: Token | str | None = None,
        allowed_hosts: Iterable[str] | None = None,
    ) -> ASGIApp:
        """The ``/events`` routes (and ``/healthz``, ``/metrics``) as an ASGI app to mount in
        your own Starlette or FastAPI app. Needs the ``server`` extra.

        The service's front door comes with them (CONTRACT section 9): a request whose
        ``Host`` is neither a loopback name nor one of ``allowed_hosts`` gets 421; with
        ``token``, every request but the probes must carry ``Authorization: Bearer`` it
        (else 401). Mounted with ``app.mount("/shipping", inbox.asgi(token=...))`` it serves
        ``/shipping/events`` and ``/shipping/events/batch``."""
        from .._core.extras import needing_extra
        from ..wire.token import as_token

        with needing_extra("Inbox.asgi()"):
            from ..web.guard import OPEN_PATHS, Guard, check_allowed_hosts
            from .app import create_sink_app

        bearer = as_token(token)
        hosts = check_allowed_hosts(allowed_hosts)
        app = create_sink_app(self, prefix=prefix, own_thread=True)
        open_paths = {prefix + path for path in OPEN_PATHS}
        return Guard(app, token=bearer, loopback=True, open_paths=open_paths, allowed_hosts=hosts)
