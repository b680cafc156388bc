"""``Outbox.publish_async`` in the user's SQLAlchemy ``AsyncSession`` (asyncpg, PostgreSQL),
against the same session adding one plain row: N transactions each, in one process, one run.

Each transaction saves an order; ours also publishes its event with ``using=session``, so
both commit once and the difference is what the event costs inside the user's transaction.
"""

from __future__ import annotations

import asyncio
import time

from ackledger import Outbox, new_event

from .common import Plan, Results, rate
from .postgres import available, database
from .usershop import ORDERS, Order, async_sessions


async def _run(url: str, tag: str, count: int, outbox: Outbox | None) -> float:
    """Orders/s of ``count`` transactions; with ``outbox``, each publishes its event too."""
    sessions, engine = async_sessions(url)
    try:
        start = time.perf_counter()
        for number in range(count):
            order = f"{tag}-{number}"
            async with sessions() as session, session.begin():
                session.add(Order(id=order, total=number))
                if outbox is not None:
                    event = new_event("com.example.order.placed", {"order": order},
                                      source="/orders", id=order)  # fmt: skip
                    await outbox.publish_async(event, using=session)
        return rate(count, time.perf_counter() - start)
    finally:
        await engine.dispose()


def _missing(url: str, tag: str, count: int, published: bool) -> str | None:
    """What a run did not leave behind: each transaction's order row, and with ``published``
    its event in the outbox; None when all of it is there."""
    import psycopg

    pattern = f"{tag}-%"
    with psycopg.connect(url) as conn:
        rows = conn.execute("SELECT count(*) FROM shop_orders WHERE id LIKE %s", (pattern,))
        orders = int(rows.fetchone()[0])  # type: ignore[index]
        events = count
        if published:
            found = conn.execute(
                "SELECT count(*) FROM ackledger_outbox WHERE id LIKE %s", (pattern,)
            )
            events = int(found.fetchone()[0])  # type: ignore[index]
    if (orders, events) == (count, count):
        return None
    return f"{tag}: {orders} order rows and {events} events of {count} transactions"


def measure(plan: Plan, results: Results) -> None:
    print("publish_async in an AsyncSession against the same session's plain row", flush=True)
    why = available()
    if why is not None:
        results.skip("publish-async", why)
        return
    count = max(300, plan.accept_events // 3)
    results.notes.append(f"publish-async: {count:,} transactions a run, asyncpg")
    with database() as url:
        import psycopg

        with psycopg.connect(url) as conn:
            conn.execute(ORDERS)
        with Outbox(url) as outbox:
            rates: dict[str, float] = {}
            for rep in range(plan.reps):
                # Each goes first in turn: the shared machine's speed drifts within a run.
                runs = {"plain": None, "ours": outbox}
                for who in list(runs) if rep % 2 == 0 else list(runs)[::-1]:
                    rates[who] = asyncio.run(_run(url, f"{who}{rep}", count, runs[who]))
                    wrong = _missing(url, f"{who}{rep}", count, runs[who] is not None)
                    if wrong is not None:
                        # A run that did not write what it was timed for counts for nothing.
                        for key, label in (
                            ("publish_async.plain", "AsyncSession, one plain row a transaction"),
                            (
                                "publish_async.ours",
                                "AsyncSession, the row + `publish_async(using=)`",
                            ),
                        ):
                            results.refuse(key, label, "/s", wrong)  # fmt: skip
                plain, ours = rates["plain"], rates["ours"]
                results.add("publish_async.plain", "AsyncSession, one plain row a transaction",
                            "/s", plain)  # fmt: skip
                results.add("publish_async.ours", "AsyncSession, the row + `publish_async(using=)`",
                            "/s", ours)  # fmt: skip
                print(f"  plain row {plain:,.0f}/s, with publish_async {ours:,.0f}/s", flush=True)
