"""``await Outbox.publish_async(event, using=conn)`` with every kind of asyncio connection, on
SQLite (aiosqlite) and PostgreSQL (asyncpg, psycopg): the event commits with the caller's
business row or neither does; duplicates and conflicts as in the sync form; a connection not in
a transaction is refused with nothing written; without ``using=`` the event loop runs on.

What is durable is read from other connections: the outbox's own (``pending``) and a second,
independent one for the business table."""

from __future__ import annotations

import abc
import asyncio
import sqlite3
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import psycopg
import pytest

from ackledger import Conflict, InvalidEvent, Outbox, new_event

from .conftest import Target, sqlite_write_lock_held, ticking

SOURCE = "/orders-service"
BUSINESS = "CREATE TABLE shop_orders (id TEXT PRIMARY KEY, total INTEGER)"
NOT_IN_TRANSACTION = "not in a transaction"


def placed(order_id: str, total: int = 10) -> dict[str, Any]:
    return new_event(
        "com.example.order.placed", {"order": order_id, "total": total}, source=SOURCE, id=order_id
    )


class Caller(abc.ABC):
    """An asyncio application's own connection and transaction."""

    async def begin(self) -> None:  # noqa: B027 - most callers' first statement begins it
        """Start the caller's transaction where its first statement does not."""

    @abc.abstractmethod
    async def own_write(self, order_id: str) -> None: ...

    @abc.abstractmethod
    def using(self) -> object: ...

    @abc.abstractmethod
    async def commit(self) -> None: ...

    @abc.abstractmethod
    async def rollback(self) -> None: ...

    @abc.abstractmethod
    async def close(self) -> None: ...


def _sqlalchemy_url(target: Target, driver: str) -> str:
    if target.dialect == "sqlite":
        return f"sqlite+aiosqlite:///{target.ref}"
    return target.ref.replace("postgresql://", f"postgresql+{driver}://", 1)


INSERT_ORDER = "INSERT INTO shop_orders (id, total) VALUES (:id, 10)"


class OnConnection(Caller):
    """A caller whose ``using`` is one connection, opened by its first ``begin``."""

    conn: Any = None

    def using(self) -> object:
        return self.conn

    async def commit(self) -> None:
        await self.conn.commit()

    async def rollback(self) -> None:
        await self.conn.rollback()

    async def close(self) -> None:
        if self.conn is not None:
            await self.conn.close()


class SqlAlchemyCaller(OnConnection):
    """SQLAlchemy's asyncio engine on ``driver``; ``conn`` an AsyncSession or AsyncConnection."""

    def __init__(self, target: Target, driver: str, *, autocommit: bool = False) -> None:
        from sqlalchemy.ext.asyncio import create_async_engine

        options = {"isolation_level": "AUTOCOMMIT"} if autocommit else {}
        self.engine = create_async_engine(_sqlalchemy_url(target, driver), **options)

    async def own_write(self, order_id: str) -> None:
        from sqlalchemy import text

        await self.conn.execute(text(INSERT_ORDER), {"id": order_id})

    async def close(self) -> None:
        await super().close()
        await self.engine.dispose()


class SessionCaller(SqlAlchemyCaller):
    async def begin(self) -> None:
        from sqlalchemy.ext.asyncio import AsyncSession

        if self.conn is None:
            self.conn = AsyncSession(self.engine)


class ConnectionCaller(SqlAlchemyCaller):
    async def begin(self) -> None:
        if self.conn is None:
            self.conn = await self.engine.connect()


class PsycopgCaller(OnConnection):
    def __init__(self, target: Target, *, autocommit: bool = False) -> None:
        self.url = target.ref
        self.autocommit = autocommit

    async def begin(self) -> None:
        if self.conn is None:
            self.conn = await psycopg.AsyncConnection.connect(self.url, autocommit=self.autocommit)

    async def own_write(self, order_id: str) -> None:
        await self.conn.execute("INSERT INTO shop_orders (id, total) VALUES (%s, 10)", (order_id,))


class AsyncpgCaller(OnConnection):
    """asyncpg has no implicit transaction: ``conn.transaction()`` begins one."""

    def __init__(self, target: Target, *, autocommit: bool = False) -> None:
        self.url = target.ref
        self.autocommit = autocommit
        self.tx: Any = None

    async def begin(self) -> None:
        import asyncpg

        if self.conn is None:
            self.conn = await asyncpg.connect(self.url)
        if not self.autocommit:
            self.tx = self.conn.transaction()
            await self.tx.start()

    async def own_write(self, order_id: str) -> None:
        await self.conn.execute("INSERT INTO shop_orders (id, total) VALUES ($1, 10)", order_id)

    async def commit(self) -> None:
        await self.tx.commit()

    async def rollback(self) -> None:
        await self.tx.rollback()


def make_caller(target: Target, kind: str, *, autocommit: bool = False) -> Caller:
    shape, _, driver = kind.partition("-")
    if shape == "session":
        return SessionCaller(target, driver, autocommit=autocommit)
    if shape == "connection":
        return ConnectionCaller(target, driver, autocommit=autocommit)
    if shape == "psycopg":
        return PsycopgCaller(target, autocommit=autocommit)
    return AsyncpgCaller(target, autocommit=autocommit)


@pytest.fixture
def outbox(async_case: tuple[Target, str]) -> Iterator[Outbox]:
    target, _ = async_case
    with Outbox(target.ref, source=SOURCE) as opened:
        target.execute(BUSINESS)
        yield opened


def seen(target: Target, outbox: Outbox) -> tuple[list[str], list[str]]:
    """(business rows, pending event ids) as other connections see them."""
    orders = [str(row[0]) for row in target.rows("SELECT id FROM shop_orders ORDER BY id")]
    return orders, [str(event["id"]) for event in outbox.pending()]


def test_the_event_commits_with_the_callers_row_or_neither(
    async_case: tuple[Target, str], outbox: Outbox
) -> None:
    target, kind = async_case

    async def scenario() -> int:
        caller = make_caller(target, kind)
        try:
            await caller.begin()
            await caller.own_write("o-1")
            seq = await outbox.publish_async(placed("o-1"), using=caller.using())
            assert seen(target, outbox) == ([], [])  # nothing committed behind the caller
            await caller.commit()
            assert seen(target, outbox) == (["o-1"], ["o-1"])

            await caller.begin()
            await caller.own_write("o-2")
            await outbox.publish_async(placed("o-2"), using=caller.using())
            await caller.rollback()
            assert seen(target, outbox) == (["o-1"], ["o-1"])
            return seq
        finally:
            await caller.close()

    seq = asyncio.run(scenario())
    assert [event["seq"] for event in outbox.pending()] == [seq]


def test_a_duplicate_returns_the_seq_and_a_conflict_writes_nothing(
    async_case: tuple[Target, str], outbox: Outbox
) -> None:
    target, kind = async_case
    first = outbox.publish(placed("o-3"))

    async def scenario() -> None:
        caller = make_caller(target, kind)
        try:
            await caller.begin()
            assert await outbox.publish_async(placed("o-3"), using=caller.using()) == first
            await caller.commit()
            await caller.begin()
            await caller.own_write("o-4")
            with pytest.raises(Conflict, match="o-3"):
                await outbox.publish_async(placed("o-3", total=99), using=caller.using())
            with pytest.raises(InvalidEvent):
                await outbox.publish_async({"id": "x"}, using=caller.using())
            await caller.rollback()
        finally:
            await caller.close()

    asyncio.run(scenario())
    assert seen(target, outbox) == ([], ["o-3"])
    assert outbox.pending()[0]["data"]["total"] == 10


def test_a_connection_not_in_a_transaction_is_refused_and_nothing_is_written(
    async_case: tuple[Target, str], outbox: Outbox
) -> None:
    target, kind = async_case

    async def scenario() -> None:
        caller = make_caller(target, kind, autocommit=True)
        try:
            await caller.begin()
            with pytest.raises(ValueError, match=NOT_IN_TRANSACTION):
                await outbox.publish_async(placed("o-5"), using=caller.using())
        finally:
            await caller.close()

    asyncio.run(scenario())
    assert seen(target, outbox) == ([], [])


def test_a_connection_to_another_database_is_refused(
    async_case: tuple[Target, str], outbox: Outbox, tmp_path: Path
) -> None:
    target, kind = async_case
    # Another outbox's database (its source differs), or one without ackledger's schema.
    if target.dialect == "sqlite":
        other = Target("sqlite", str(tmp_path / "other.db"))
        Outbox(other.ref, source="/someone-else").close()
    else:
        other = Target("postgres", urlunsplit(urlsplit(target.ref)._replace(path="/postgres")))

    async def scenario() -> None:
        caller = make_caller(other, kind)
        try:
            await caller.begin()
            with pytest.raises(ValueError, match=r"another database|no ackledger schema"):
                await outbox.publish_async(placed("o-6"), using=caller.using())
            await caller.rollback()
        finally:
            await caller.close()

    asyncio.run(scenario())
    assert seen(target, outbox) == ([], [])


def test_what_is_not_an_async_connection_is_refused(tmp_path: Path) -> None:
    path = str(tmp_path / "store.db")
    with Outbox(path, source=SOURCE) as outbox:
        lite = sqlite3.connect(path)
        try:
            for wrong in (lite, object(), "sqlite:///x"):
                with pytest.raises(TypeError, match="AsyncSession"):
                    asyncio.run(outbox.publish_async(placed("o-7"), using=wrong))
        finally:
            lite.close()
        assert outbox.pending() == []


def test_without_using_the_event_loop_runs_on_while_the_database_is_busy(
    tmp_path: Path,
) -> None:
    path = str(tmp_path / "store.db")
    with Outbox(path, source=SOURCE) as outbox:
        # Another writer holds SQLite's one write lock for half a second: the publish waits
        # for it, and a ticker on the same loop must keep ticking meanwhile.
        with sqlite_write_lock_held(path, 0.5):
            seq, ticks = asyncio.run(ticking(outbox.publish_async(placed("o-8"))))
        assert ticks >= 20  # 0.5 s of 10 ms ticks, give or take a loaded machine
        assert [event["seq"] for event in outbox.pending()] == [seq]


@pytest.mark.parametrize("kind", ["psycopg", "asyncpg"])
def test_a_waiting_statement_leaves_the_loop_free_and_a_cancel_waits_for_it(
    pg_url: str, kind: str
) -> None:
    from ackledger.store.postgres import queries

    target = Target("postgres", pg_url)
    with Outbox(pg_url, source=SOURCE) as outbox:
        target.execute(BUSINESS)
        # The event's partition lock, held by another transaction for half a second.
        lock = queries.LOCK_PARTITION.replace("?", "%s")
        held = threading.Event()

        def hold() -> None:
            with psycopg.connect(pg_url) as other:
                other.execute(lock, (queries.PARTITION_LOCK_CLASS, "p-1"))
                held.set()
                time.sleep(0.5)
                other.rollback()

        async def scenario() -> tuple[int, float]:
            caller = make_caller(target, kind)
            try:
                await caller.begin()
                event = placed("o-9") | {"partitionkey": "p-1"}
                task = asyncio.ensure_future(outbox.publish_async(event, using=caller.using()))
                ticks = 0
                started = time.monotonic()
                while ticks < 10:
                    ticks += 1
                    await asyncio.sleep(0.01)
                assert not task.done()  # still waiting for the lock, and the loop ticks
                task.cancel()
                with pytest.raises(asyncio.CancelledError):
                    await task
                waited = time.monotonic() - started
                # The connection is the caller's again: its own statements and rollback work.
                await caller.own_write("o-10")
                await caller.rollback()
                return ticks, waited
            finally:
                await caller.close()

        holder = threading.Thread(target=hold)
        holder.start()
        held.wait()
        try:
            ticks, waited = asyncio.run(scenario())
        finally:
            holder.join()
        assert ticks == 10
        assert waited >= 0.3  # the cancel was answered once the worker's statement finished
        assert seen(target, outbox) == ([], [])
