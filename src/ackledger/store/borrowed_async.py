"""The caller's asyncio transaction: ackledger's statements on the caller's async connection.

``await Outbox.publish_async(event, using=conn)`` keeps every rule of ``publish(using=)``
(``borrowed``): inside the caller's open transaction, never a commit or a rollback, a
connection not in a transaction refused, the database checked to be the outbox's own.

How the logic stays written once. The publish logic (validate, read-or-insert, the conflict
check) and its statements are the synchronous ones: a function of a :class:`Tx`. What differs
is only how a statement reaches an asyncio driver, and :func:`run_borrowed_awaiting` supplies that:

- a SQLAlchemy ``AsyncSession`` or ``AsyncConnection`` (asyncpg, psycopg or aiosqlite) runs
  the function through its own ``run_sync``, with the sync session or connection it hands
  over, which ``borrow`` takes as it takes any SQLAlchemy connection;
- a psycopg ``AsyncConnection`` or an asyncpg ``Connection`` gets a :class:`Tx` whose
  statements are awaited on the event loop: the function runs in a worker thread, each
  statement is handed to the loop (``run_coroutine_threadsafe``) to run on the caller's
  connection, and the worker waits for its rows. The loop stays free meanwhile, and the
  caller's connection is only ever used from the loop's own thread. A cancelled publish
  lets the worker finish before the cancellation reaches the caller.

The inbox's ``receive_async`` runs its one algorithm the same way, and its async handlers,
given the caller's own object, are awaited on the caller's loop from inside it
(``run_borrowed_awaiting``): the worker waits for them as it waits for a statement.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Protocol, TypeVar, cast

from .base import Params, Row, Tx
from .borrowed import (
    NOT_IN_TRANSACTION,
    POSTGRES,
    OnDriver,
    _check_psycopg,
    _describe,
    _same_dialect,
    borrow,
    to_numeric_dollar,
)
from .postgres.tx import PostgresTx, has_rows, to_pyformat

__all__ = ["ASYNC_ACCEPTED", "AwaitOnLoop", "run_borrowed_awaiting"]

T = TypeVar("T")

ASYNC_ACCEPTED = (
    "a SQLAlchemy AsyncSession or AsyncConnection, a psycopg AsyncConnection or an asyncpg "
    "Connection"
)


#: Awaits an awaitable to its end from inside ``work`` (a handler's coroutine, say), on the
#: event loop that owns the caller's connection; returns what it gave.
AwaitOnLoop = Callable[[Awaitable[Any]], Any]


async def run_borrowed_awaiting(
    using: object, dialect: str, work: Callable[[Tx, AwaitOnLoop], T]
) -> T:
    """``work(tx, await_on_loop)`` with ``tx`` on the caller's async connection ``using``,
    inside the caller's transaction, without blocking the event loop; ``await_on_loop`` awaits
    the caller's own coroutines on the way (the inbox's async handlers, which use ``using``
    themselves). The errors of ``borrow`` for what cannot be used (``TypeError`` for an object
    of another kind, ``ValueError`` for a connection of the other database or not in a
    transaction) are raised before anything is written."""
    names = {cls.__name__ for cls in type(using).__mro__}
    roots = {(cls.__module__ or "").partition(".")[0] for cls in type(using).__mro__}
    if "sqlalchemy" in roots and names & {"AsyncSession", "AsyncConnection"}:
        from sqlalchemy.util import await_only

        # ``run_sync``'s function runs in SQLAlchemy's greenlet on the loop's thread; from
        # there ``await_only`` hands a coroutine to the loop and waits for it.
        run_sync = cast(Callable[[Callable[[Any], T]], Awaitable[T]], using.run_sync)  # type: ignore[attr-defined]
        return await run_sync(lambda sync: work(borrow(sync, dialect), await_only))
    statements: _Statements
    if "psycopg" in roots:
        statements = _psycopg(using, dialect)
    elif "asyncpg" in roots:
        statements = _asyncpg(using, dialect)
    else:
        raise _not_accepted(using)
    loop = asyncio.get_running_loop()
    tx = _LoopPostgresTx(statements, loop)
    running = asyncio.ensure_future(asyncio.to_thread(work, tx, tx.await_on_loop))
    try:
        return await asyncio.shield(running)
    except asyncio.CancelledError:
        # The worker would go on sending statements on the caller's connection after the
        # caller was told; let it finish first, so the connection is the caller's again.
        await asyncio.wait([running])
        raise


def _not_accepted(obj: object) -> TypeError:
    return TypeError(
        f"using: expected {ASYNC_ACCEPTED}; got {_describe(obj)} (a connection of synchronous "
        "code goes to publish(using=), or to it run in a thread)"
    )


class _Statements(Protocol):
    """How one asyncio driver runs a statement (``?`` placeholders) and returns its rows."""

    async def rows(self, sql: str, params: Params) -> list[Row]: ...

    async def many(self, sql: str, params: Sequence[Params]) -> None: ...

    @property
    def conn(self) -> object:
        """The caller's connection the statements run on."""


def _psycopg(conn: Any, dialect: str) -> _Statements:
    import psycopg

    if not isinstance(conn, psycopg.AsyncConnection):
        raise _not_accepted(conn)
    _same_dialect(POSTGRES, dialect, "a psycopg connection")
    if conn.closed:
        raise ValueError("using: the psycopg connection is closed")
    _check_psycopg(conn.info.transaction_status, autocommit=conn.autocommit)
    return _PsycopgStatements(conn)


def _asyncpg(conn: Any, dialect: str) -> _Statements:
    import asyncpg

    if not isinstance(conn, asyncpg.Connection):
        raise _not_accepted(conn)
    _same_dialect(POSTGRES, dialect, "an asyncpg connection")
    if conn.is_closed():
        raise ValueError("using: the asyncpg connection is closed")
    # asyncpg runs each statement outside ``conn.transaction()`` on its own, committed at once.
    if not conn.is_in_transaction():
        raise ValueError(NOT_IN_TRANSACTION)
    return _AsyncpgStatements(conn)


class _PsycopgStatements:
    def __init__(self, conn: Any) -> None:
        from psycopg.rows import tuple_row

        self.conn = conn
        self._tuple_row = tuple_row

    async def rows(self, sql: str, params: Params) -> list[Row]:
        # Plain tuples whatever row factory the caller set on the connection.
        async with self.conn.cursor(row_factory=self._tuple_row) as cursor:
            await cursor.execute(to_pyformat(sql), tuple(params))
            return list(await cursor.fetchall()) if has_rows(cursor) else []

    async def many(self, sql: str, params: Sequence[Params]) -> None:
        async with self.conn.cursor(row_factory=self._tuple_row) as cursor:
            await cursor.executemany(to_pyformat(sql), [tuple(p) for p in params])


class _AsyncpgStatements:
    def __init__(self, conn: Any) -> None:
        self.conn = conn

    async def rows(self, sql: str, params: Params) -> list[Row]:
        found = await self.conn.fetch(to_numeric_dollar(sql), *params)
        return [tuple(record) for record in found]

    async def many(self, sql: str, params: Sequence[Params]) -> None:
        await self.conn.executemany(to_numeric_dollar(sql), [tuple(p) for p in params])


class _LoopPostgresTx(PostgresTx, OnDriver):
    """PostgreSQL's operations, called from a worker thread, each statement awaited on the
    event loop that owns the caller's connection."""

    def __init__(self, statements: _Statements, loop: asyncio.AbstractEventLoop) -> None:
        super().__init__(cast(Any, None))  # no sync connection: every statement comes here
        self._statements = statements
        self._loop = loop
        self.driver = statements.conn

    def await_on_loop(self, step: Awaitable[T]) -> T:
        return asyncio.run_coroutine_threadsafe(_awaited(step), self._loop).result()

    def execute(self, sql: str, params: Params = ()) -> list[Row]:
        return self.await_on_loop(self._statements.rows(sql, params))

    def executemany(self, sql: str, params: Sequence[Params]) -> None:
        self.await_on_loop(self._statements.many(sql, params))


async def _awaited(step: Awaitable[T]) -> T:
    return await step
