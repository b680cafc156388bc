"""``await Inbox.receive_async(event, using=conn)`` with every kind of asyncio connection, on
SQLite (aiosqlite) and PostgreSQL (asyncpg, psycopg): the handler gets the caller's own object
and writes its effect with it; the caller's commit keeps receipt and effect, its rollback
neither (and a retry then applies again); a re-send is a duplicate that runs nothing; other
content is a conflict. Without ``using=`` ackledger's own transaction runs off the loop.

What is durable is read from other connections: the inbox's own (``receipt``) and a second,
independent one for the shipping table."""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest

from ackledger import Conflict, Inbox, new_event
from ackledger.sink.handler_tx import HandlerTransaction

from .conftest import Target, sqlite_write_lock_held, ticking
from .test_publish_async import Caller, make_caller

TYPE = "com.example.order.placed"
SOURCE = "/orders-service"
SHIPMENTS = "CREATE TABLE shipments (id TEXT PRIMARY KEY, total INTEGER)"
INSERT = "INSERT INTO shipments (id, total) VALUES "


def handling(handler: object) -> dict[str, Any]:
    """The inbox's handlers: ``handler`` for the one type (an async one is typed as any)."""
    return {TYPE: handler}


def placed(order_id: str, total: int = 10) -> dict[str, Any]:
    return new_event(TYPE, {"total": total}, source=SOURCE, id=order_id)


async def write_shipment(using: Any, order_id: str, total: int) -> None:
    """The shipping service's own write, on whatever object its handler was given."""
    roots = {cls.__module__.partition(".")[0] for cls in type(using).__mro__}
    if isinstance(using, HandlerTransaction):
        using.execute(INSERT + "(?, ?)", (order_id, total))
    elif "sqlalchemy" in roots:
        from sqlalchemy import text

        await using.execute(text(INSERT + "(:id, :total)"), {"id": order_id, "total": total})
    elif "psycopg" in roots:
        await using.execute(INSERT + "(%s, %s)", (order_id, total))
    else:
        await using.execute(INSERT + "($1, $2)", order_id, total)


class Shipping:
    """An async handler that writes through the object it is given; ``given`` records it."""

    def __init__(self) -> None:
        self.given: list[object] = []

    async def __call__(self, using: Any, event: dict[str, Any]) -> None:
        self.given.append(using)
        await asyncio.sleep(0)  # a real await between the call and the write
        total = event["data"]["total"]
        if total < 0:
            raise RuntimeError("cannot ship a negative total")
        await write_shipment(using, event["id"], total)


@pytest.fixture
def shipping() -> Shipping:
    return Shipping()


@pytest.fixture
def inbox(async_case: tuple[Target, str], shipping: Shipping) -> Iterator[Inbox]:
    target, _ = async_case
    with Inbox(target.ref, handlers=handling(shipping)) as opened:
        target.execute(SHIPMENTS)
        yield opened


@asynccontextmanager
async def opened(
    async_case: tuple[Target, str], *, autocommit: bool = False
) -> AsyncIterator[Caller]:
    """The caller's connection, in a transaction begun; closed at the end."""
    caller = make_caller(*async_case, autocommit=autocommit)
    try:
        await caller.begin()
        yield caller
    finally:
        await caller.close()


def seen(target: Target, inbox: Inbox, *ids: str) -> tuple[list[str], list[str]]:
    """(shipments, ids with a receipt) as other connections see them."""
    shipped = [str(row[0]) for row in target.rows("SELECT id FROM shipments ORDER BY id")]
    received = [i for i in ids if inbox.receipt(i, source=SOURCE) is not None]
    return shipped, received


def test_the_receipt_commits_with_the_handlers_write_or_neither(
    async_case: tuple[Target, str], inbox: Inbox, shipping: Shipping
) -> None:
    target, _ = async_case

    async def scenario() -> None:
        async with opened(async_case) as caller:
            assert await inbox.receive_async(placed("o-1"), using=caller.using()) == "applied"
            assert shipping.given == [caller.using()]  # that very object, not a wrapper
            assert seen(target, inbox, "o-1") == ([], [])  # nothing committed behind it
            await caller.commit()
            assert seen(target, inbox, "o-1") == (["o-1"], ["o-1"])

            await caller.begin()
            assert await inbox.receive_async(placed("o-2"), using=caller.using()) == "applied"
            await caller.rollback()
            assert seen(target, inbox, "o-1", "o-2") == (["o-1"], ["o-1"])

            # Rolled back: the retry applies it again, and this time it stays.
            await caller.begin()
            assert await inbox.receive_async(placed("o-2"), using=caller.using()) == "applied"
            await caller.commit()

    asyncio.run(scenario())
    assert seen(target, inbox, "o-1", "o-2") == (["o-1", "o-2"], ["o-1", "o-2"])
    assert inbox.counters()["applied"] == 2


def test_a_resend_is_a_duplicate_and_other_content_a_conflict(
    async_case: tuple[Target, str], inbox: Inbox, shipping: Shipping
) -> None:
    target, _ = async_case

    async def scenario() -> None:
        async with opened(async_case) as caller:
            assert await inbox.receive_async(placed("o-3"), using=caller.using()) == "applied"
            await caller.commit()
            await caller.begin()
            assert await inbox.receive_async(placed("o-3"), using=caller.using()) == "duplicate"
            with pytest.raises(Conflict, match="o-3"):
                await inbox.receive_async(placed("o-3", total=99), using=caller.using())
            await caller.rollback()

    asyncio.run(scenario())
    assert len(shipping.given) == 1  # the handler ran for the first receipt only
    assert target.rows("SELECT id, total FROM shipments") == [("o-3", 10)]


def test_a_failing_handler_raises_and_the_callers_rollback_leaves_nothing(
    async_case: tuple[Target, str], inbox: Inbox
) -> None:
    async def scenario() -> None:
        async with opened(async_case) as caller:
            with pytest.raises(RuntimeError, match="negative"):
                await inbox.receive_async(placed("o-4", total=-1), using=caller.using())
            await caller.rollback()

    asyncio.run(scenario())
    assert seen(async_case[0], inbox, "o-4") == ([], [])


def test_a_plain_handler_is_called_with_the_callers_object(async_case: tuple[Target, str]) -> None:
    given: list[object] = []
    with Inbox(
        async_case[0].ref, handlers=handling(lambda using, event: given.append(using))
    ) as inbox:

        async def scenario() -> None:
            async with opened(async_case) as caller:
                assert await inbox.receive_async(placed("o-5"), using=caller.using()) == "applied"
                await caller.commit()
                assert given == [caller.using()]

        asyncio.run(scenario())
        assert inbox.receipt("o-5", source=SOURCE) is not None


def test_a_connection_not_in_a_transaction_is_refused_and_nothing_is_written(
    async_case: tuple[Target, str], inbox: Inbox, shipping: Shipping
) -> None:
    async def scenario() -> None:
        async with opened(async_case, autocommit=True) as caller:
            with pytest.raises(ValueError, match="not in a transaction"):
                await inbox.receive_async(placed("o-6"), using=caller.using())

    asyncio.run(scenario())
    assert shipping.given == []
    assert seen(async_case[0], inbox, "o-6") == ([], [])


def test_what_is_not_an_async_connection_is_refused(tmp_path: Path) -> None:
    path = str(tmp_path / "store.db")
    shipping = Shipping()
    with Inbox(path, handlers=handling(shipping)) as inbox:
        lite = sqlite3.connect(path)
        try:
            for wrong in (lite, object(), "sqlite:///x"):
                with pytest.raises(TypeError, match="AsyncSession"):
                    asyncio.run(inbox.receive_async(placed("o-7"), using=wrong))
        finally:
            lite.close()
        assert shipping.given == []
        assert inbox.receipt("o-7", source=SOURCE) is None


def test_without_using_the_inbox_transaction_runs_off_the_loop(tmp_path: Path) -> None:
    path = str(tmp_path / "store.db")
    target = Target("sqlite", path)
    shipping = Shipping()
    with Inbox(path, handlers=handling(shipping)) as inbox:
        target.execute(SHIPMENTS)
        # Another writer holds SQLite's one write lock for half a second: the receive waits
        # for it, and a ticker on the same loop must keep ticking meanwhile.
        with sqlite_write_lock_held(path, 0.5):
            status, ticks = asyncio.run(ticking(inbox.receive_async(placed("o-8"))))
        assert status == "applied"
        assert ticks >= 20  # 0.5 s of 10 ms ticks, give or take a loaded machine
        assert asyncio.run(inbox.receive_async(placed("o-8"))) == "duplicate"
        # The async handler was awaited with the inbox's own transaction, and its write kept.
        assert [type(given) for given in shipping.given] == [HandlerTransaction]
        assert seen(target, inbox, "o-8") == (["o-8"], ["o-8"])


@pytest.mark.parametrize("kind", ["asyncpg", "psycopg", "session-asyncpg"])
@pytest.mark.parametrize("first_ends", ["commit", "rollback"])
def test_two_transactions_receiving_one_identity_apply_it_once(
    pg_url: str, kind: str, first_ends: str
) -> None:
    target = Target("postgres", pg_url)
    shipping = Shipping()
    with Inbox(pg_url, handlers=handling(shipping)) as inbox:
        target.execute(SHIPMENTS)

        async def scenario() -> str:
            async with opened((target, kind)) as first, opened((target, kind)) as second:
                assert await inbox.receive_async(placed("o-9"), using=first.using()) == "applied"
                # The second waits for the first's claim; the loop runs on meanwhile.
                waiting = asyncio.ensure_future(
                    inbox.receive_async(placed("o-9"), using=second.using())
                )
                await asyncio.sleep(0.3)
                assert not waiting.done()
                await (first.commit() if first_ends == "commit" else first.rollback())
                status = await waiting
                await second.commit()
                return status

        status = asyncio.run(scenario())
        assert status == ("duplicate" if first_ends == "commit" else "applied")
        assert target.rows("SELECT id, total FROM shipments") == [("o-9", 10)]
        assert inbox.receipt("o-9", source=SOURCE) is not None
