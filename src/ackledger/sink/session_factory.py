"""The user's own session around each inbox transaction (``--session``, ``--django``).

Without one, the services apply events in ackledger's own transaction and hand handlers a
``HandlerTransaction``. With one, each write transaction is the user's: a session is opened
(a SQLAlchemy ``Session``, ``AsyncSession`` or ``Connection``, or Django's connection inside
``transaction.atomic()``), the inbox's one algorithm runs on a ``Tx`` borrowed from it with
the session as every handler's first argument, and the session commits. Anything raised
rolls it back, so the receipt and the handler's ORM rows are durable together or not at all.

A group's handlers first run with no savepoint: each one's pending ORM objects are flushed
right after it, so a constraint its rows break is that handler's error, and any failure rolls
the whole transaction back (as ``apply_runs`` does with its own). The group is then applied
again with each handler inside a savepoint of the session's own (``begin_nested``), so a
failing handler's rows (even unflushed ones) are undone with its receipt and nothing else.
"""

from __future__ import annotations

import asyncio
import functools
import os
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from typing import Any, Protocol

from ..store.place import check_same_place, place_of_url
from .apply import BatchResult, Item, apply_runs
from .handler_call import Awaiter, call_handler
from .handler_tx import Handler, HandlerTransaction
from .handlers import HandlerSpecError, load_object
from .inbox import Inbox

__all__ = [
    "SessionInbox",
    "SqlAlchemySessions",
    "Transactions",
    "load_session_factory",
]

_FORM = (
    "must be MODULE:ATTR (a module and its zero-argument callable returning a SQLAlchemy "
    "Session, AsyncSession or Connection, e.g. shop.db:Session)"
)

#: A savepoint of the session's own around one handler.
Savepoint = Callable[[], AbstractContextManager[Any]]
#: Sends the session's pending ORM objects to the database (nothing to do for a connection).
Flush = Callable[[], object]
#: What runs inside one session: ``work(using, session, awaiter, savepoint, flush)``, ``using``
#: the connection the inbox's transaction is borrowed from (``Backend.borrow``).
Work = Callable[[object, object, Awaiter | None, Savepoint, Flush], list[BatchResult]]


class Transactions(Protocol):
    """Opens one transaction of the user's per call, runs ``work`` in it and commits it (or
    rolls it back if anything was raised)."""

    def run(self, work: Work, awaiter: Awaiter | None) -> list[BatchResult]: ...

    def close(self) -> None: ...


def load_session_factory(spec: str) -> Callable[[], object]:
    """The callable ``MODULE:ATTR`` names; ``HandlerSpecError`` says what is wrong."""
    found = load_object(spec, "session", _FORM)
    if not callable(found):
        raise HandlerSpecError(f"session {spec!r}: {_FORM}; got {type(found).__name__}")
    return found


def _is_async(made: object) -> bool:
    return any(cls.__name__ in ("AsyncSession", "AsyncConnection") for cls in type(made).__mro__)


def _url_of(made: object) -> Any:
    """The SQLAlchemy URL a session or connection reaches."""
    from sqlalchemy.engine import Connection
    from sqlalchemy.orm import Session

    if _is_async(made):
        made = getattr(made, "sync_session", None) or made.sync_connection  # type: ignore[attr-defined]
    if isinstance(made, Session):
        return made.get_bind().engine.url
    if isinstance(made, Connection):
        return made.engine.url
    raise TypeError(
        f"session: the factory returned {type(made).__module__}.{type(made).__qualname__}; "
        "expected a SQLAlchemy Session, AsyncSession or Connection"
    )


class SqlAlchemySessions:
    """One session (or connection) from the user's factory per transaction.

    An ``AsyncSession`` (or ``AsyncConnection``) runs on this object's own event loop, in
    the inbox's thread (a worker's, never a service's loop): the algorithm runs through
    ``run_sync``, and an async handler is awaited there on the same loop (``await_only``),
    inside the transaction. One loop for the object's life, since an async driver's pooled
    connections belong to the loop that opened them.
    """

    def __init__(self, factory: Callable[[], object]) -> None:
        self._factory = factory
        self._loop: asyncio.AbstractEventLoop | None = None
        #: The async engines of the sessions run on ``_loop``: their pooled connections
        #: belong to it, so they are disposed there before it closes.
        self._engines: dict[int, Any] = {}

    def check(self, target: str) -> None:
        """Open one session and refuse it if it reaches another database than ``target``."""
        made = self._factory()
        try:
            check_same_place(place_of_url(_url_of(made)), "the factory's session", target)
        finally:
            if _is_async(made):
                self._on_loop(made.close())  # type: ignore[attr-defined]
            else:
                made.close()  # type: ignore[attr-defined]

    def run(self, work: Work, awaiter: Awaiter | None) -> list[BatchResult]:
        made: Any = self._factory()
        if _is_async(made):
            found: list[BatchResult] = self._on_loop(self._run_async(made, work))
            return found
        try:
            results = work(made, made, awaiter, made.begin_nested, _flush_of(made))
            made.commit()
        except BaseException:
            made.rollback()
            raise
        finally:
            made.close()
        return results

    async def _run_async(self, made: Any, work: Work) -> list[BatchResult]:
        from sqlalchemy.util import await_only

        engine = made.bind if hasattr(made, "sync_session") else made.engine
        if engine is not None:
            self._engines.setdefault(id(engine), engine)

        def inside(sync: Any) -> list[BatchResult]:
            return work(sync, made, await_only, sync.begin_nested, _flush_of(sync))

        try:
            results: list[BatchResult] = await made.run_sync(inside)
            await made.commit()
        except BaseException:
            await made.rollback()
            raise
        finally:
            await made.close()
        return results

    def _on_loop(self, work: Any) -> Any:
        if self._loop is None:
            self._loop = asyncio.new_event_loop()
        return self._loop.run_until_complete(work)

    def close(self) -> None:
        loop, self._loop = self._loop, None
        engines, self._engines = list(self._engines.values()), {}
        if loop is not None:
            try:
                for engine in engines:
                    loop.run_until_complete(engine.dispose())
            finally:
                loop.close()


def no_flush() -> None:
    """The flush of what has no pending objects (a ``Connection``, Django's connection)."""


def _flush_of(made: object) -> Flush:
    from sqlalchemy.orm import Session

    return made.flush if isinstance(made, Session) else no_flush


@contextmanager
def _flushed(flush: Flush) -> Iterator[None]:
    yield
    flush()


def _held(item: Item, hold: Savepoint, awaiter: Awaiter | None, own: object) -> Item:
    """``item`` with its handler run inside ``hold`` (a savepoint of the session's own, or a
    flush after it); ``own`` (a ``HandlerTransaction``, for a plug-in's handler, which writes
    SQL) or else the session is its first argument."""
    handler = item.handler

    def run(session: Any, event: dict[str, Any]) -> None:
        with hold():
            call_handler(handler, session if own is None else own, event, awaiter)

    return item._replace(handler=run)


class SessionInbox(Inbox):
    """An ``Inbox`` whose write transactions are the user's (``transactions``); reads and
    re-sends answered by key stay on its own connection."""

    def __init__(
        self,
        target: str | os.PathLike[str],
        *,
        transactions: Transactions,
        handlers: dict[str, Handler] | None = None,
        synchronous: str = "FULL",
    ) -> None:
        super().__init__(target, handlers=handlers, synchronous=synchronous)
        self._transactions = transactions

    @property
    def runs_user_code(self) -> bool:
        return True  # the session itself is the user's: always off the service's loop

    def _apply(
        self, runs: Sequence[Sequence[Item]], awaiter: Awaiter | None, *, guarded: bool
    ) -> list[BatchResult]:
        def work(
            using: object,
            session: object,
            awaiter: Awaiter | None,
            savepoint: Savepoint,
            flush: Flush,
        ) -> list[BatchResult]:
            tx = self._db.borrow(using)
            # A plug-in's handler (the lab's) writes SQL: it gets the transaction as always.
            sql = HandlerTransaction(tx)
            plugin = self.plugin_types
            # Unguarded, a handler's failure rolls everything back (``Inbox._apply_all``).
            hold = savepoint if guarded else functools.partial(_flushed, flush)
            held = [
                [_held(item, hold, awaiter, sql if item.event["type"] in plugin else None)
                 for item in run]
                for run in runs
            ]  # fmt: skip
            now, name = time.time(), self._name
            return apply_runs(
                tx, held, now, awaiter, handler_arg=session, name=name, guarded=guarded
            )

        return self._transactions.run(work, awaiter)

    def close(self) -> None:
        try:
            self._transactions.close()
        finally:
            super().close()
