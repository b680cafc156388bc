"""``@ledger.idempotent`` on SQLite files and PostgreSQL: run once per key, replay, conflict,
in flight and waiting, release on error, non-JSON results, races of threads on one key, a dead
holder's key taken over, expiry, and the key written in the caller's own transaction (sqlite3,
psycopg, SQLAlchemy sync and async)."""

from __future__ import annotations

import asyncio
import multiprocessing
import os
import signal
import sqlite3
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import psycopg
import pytest

from ackledger import Conflict, InFlight, Ledger

from .conftest import Target

KEYS = "SELECT scope, key, state, result FROM ackledger_idempotency_keys ORDER BY key"


@pytest.fixture
def ledger(target: Target) -> Iterator[Ledger]:
    with Ledger(target.ref) as opened:
        yield opened


def _keys(target: Target) -> list[tuple[Any, ...]]:
    return target.rows(KEYS)


def test_runs_once_per_key_and_replays(ledger: Ledger, target: Target) -> None:
    runs: list[tuple[str, int]] = []

    @ledger.idempotent(key=lambda order_id, qty: order_id)
    def charge(order_id: str, qty: int) -> dict[str, Any]:
        runs.append((order_id, qty))
        return {"charged": qty * 100, "order": order_id}

    assert charge("o-1", 3) == {"charged": 300, "order": "o-1"}
    assert charge("o-1", qty=3) == {"charged": 300, "order": "o-1"}
    assert runs == [("o-1", 3)]
    with pytest.raises(Conflict, match="other arguments"):
        charge("o-1", 4)
    assert charge("o-2", 4) == {"charged": 400, "order": "o-2"}
    assert runs == [("o-1", 3), ("o-2", 4)]
    scope = f"fn:{__name__}.test_runs_once_per_key_and_replays.<locals>.charge"
    assert _keys(target) == [
        (scope, "o-1", "completed", '{"charged":300,"order":"o-1"}'),
        (scope, "o-2", "completed", '{"charged":400,"order":"o-2"}'),
    ]


def test_an_exception_releases_the_key(ledger: Ledger, target: Target) -> None:
    calls = []

    @ledger.idempotent(key=lambda n: f"k{n}")
    def flaky(n: int) -> int:
        calls.append(n)
        if len(calls) == 1:
            raise RuntimeError("boom")
        return n

    with pytest.raises(RuntimeError, match="boom"):
        flaky(1)
    assert _keys(target) == []
    assert flaky(1) == 1
    assert calls == [1, 1]


def test_a_non_json_result_is_a_type_error_and_stores_nothing(
    ledger: Ledger, target: Target
) -> None:
    @ledger.idempotent(key=lambda: "k")
    def bad() -> object:
        return {"when": object()}

    with pytest.raises(TypeError, match=r"JSON value.*nothing was stored"):
        bad()

    @ledger.idempotent(key=lambda: "nan")
    def nan() -> float:
        return float("nan")

    with pytest.raises(TypeError, match="JSON"):
        nan()
    assert _keys(target) == []


@pytest.mark.parametrize("bad_key", ["", "x" * 256])
def test_a_bad_key_is_refused_before_anything_is_written(
    ledger: Ledger, target: Target, bad_key: str
) -> None:
    ran = []

    @ledger.idempotent(key=lambda: bad_key)
    def work() -> int:
        ran.append(1)
        return 1

    with pytest.raises(ValueError, match="1-255 characters"):
        work()
    assert ran == [] and _keys(target) == []


def test_bad_settings_are_refused(ledger: Ledger) -> None:
    with pytest.raises(ValueError, match=r"using_arg: .* no parameter 'session'"):

        @ledger.idempotent(key=lambda: "k", using_arg="session")
        def work() -> None: ...

    with pytest.raises(ValueError, match="ttl"):
        ledger.idempotent(key=lambda: "k", ttl="forever")
    with pytest.raises(TypeError, match="key"):
        ledger.idempotent(key="k")  # type: ignore[arg-type]


def test_in_flight_while_the_holder_runs(ledger: Ledger) -> None:
    started, go = threading.Event(), threading.Event()

    @ledger.idempotent(key=lambda: "k", lease=3)
    def slow() -> str:
        started.set()
        go.wait(30)
        return "done"

    with ThreadPoolExecutor(1) as pool:
        first = pool.submit(slow)
        assert started.wait(30)
        with pytest.raises(InFlight) as refused:
            slow()
        assert 1 <= refused.value.retry_after <= 3
        # Renewed while it runs: past its first lease it is still held.
        time.sleep(3.5)
        with pytest.raises(InFlight):
            slow()
        go.set()
        assert first.result(30) == "done"
    assert slow() == "done"


def test_keys_held_at_once_are_each_renewed(ledger: Ledger) -> None:
    """A key with a short lease taken while one with a long lease runs is renewed on time
    (the process renews every held key's lease, each on its own schedule)."""
    started = {"long": threading.Event(), "short": threading.Event()}
    go = threading.Event()

    def body(name: str) -> str:
        started[name].set()
        go.wait(30)
        return name

    long = ledger.idempotent(key=lambda name: name, lease=60)(body)
    short = ledger.idempotent(key=lambda name: name, lease=1)(body)
    with ThreadPoolExecutor(2) as pool:
        first = pool.submit(long, "long")
        assert started["long"].wait(30)
        second = pool.submit(short, "short")
        assert started["short"].wait(30)
        time.sleep(2.5)
        # Past twice its lease the short one is still held, and the long one too.
        for call, name in ((short, "short"), (long, "long")):
            with pytest.raises(InFlight):
                call(name)
        go.set()
        assert (first.result(30), second.result(30)) == ("long", "short")


def test_a_waiting_call_gets_the_result(ledger: Ledger) -> None:
    started, go = threading.Event(), threading.Event()
    runs = []

    def body() -> str:
        runs.append(1)
        started.set()
        go.wait(30)
        return "done"

    holder = ledger.idempotent(key=lambda: "k")(body)
    waiter = ledger.idempotent(key=lambda: "k", wait=30)
    with ThreadPoolExecutor(1) as pool:
        first = pool.submit(holder)
        assert started.wait(30)
        threading.Timer(0.3, go.set).start()
        # Same function (same scope): it waits for the holder, then replays its result.
        assert waiter(body)() == "done"
        assert first.result(30) == "done"
    assert runs == [1]


RACERS = 16


def test_many_threads_one_key_run_once(target: Target) -> None:
    runs = []
    ledgers = [Ledger(target.ref) for _ in range(4)]
    try:

        def body(n: int) -> str:
            runs.append(n)
            time.sleep(0.2)
            return "done"

        wrapped = [led.idempotent(key=lambda n: "same", wait=30)(body) for led in ledgers]
        barrier = threading.Barrier(RACERS)

        def race(i: int) -> object:
            barrier.wait()
            return wrapped[i % len(wrapped)](42)

        with ThreadPoolExecutor(RACERS) as pool:
            answers = list(pool.map(race, range(RACERS)))
    finally:
        for led in ledgers:
            led.close()
    assert len(runs) == 1
    assert answers == ["done"] * RACERS


def _ship_once(n: int) -> int:
    if _DIE_IN_BODY.is_set():
        os.kill(os.getpid(), signal.SIGKILL)
    return n


_DIE_IN_BODY = threading.Event()


def _die_holding_the_key(target_ref: str) -> None:
    """A process that claims the key of ``_ship_once(7)`` and is killed inside it."""
    _DIE_IN_BODY.set()
    with Ledger(target_ref) as own:
        own.idempotent(key=lambda n: "k", lease=1)(_ship_once)(7)


def test_a_dead_holders_key_is_taken_over_after_its_lease(ledger: Ledger, target: Target) -> None:
    child = multiprocessing.get_context("spawn").Process(
        target=_die_holding_the_key, args=(target.ref,)
    )
    child.start()
    child.join(60)
    assert child.exitcode == -signal.SIGKILL
    scope = f"fn:{__name__}._ship_once"
    assert [row[:3] for row in _keys(target)] == [(scope, "k", "in_progress")]
    work = ledger.idempotent(key=lambda n: "k", lease=1)(_ship_once)
    with pytest.raises(InFlight):
        work(7)
    time.sleep(1.2)
    assert work(7) == 7
    assert _keys(target) == [(scope, "k", "completed", "7")]


def test_keys_expire_after_ttl(ledger: Ledger, target: Target) -> None:
    runs = []

    @ledger.idempotent(key=lambda: "k", ttl="1h")
    def work() -> int:
        runs.append(1)
        return len(runs)

    assert work() == 1
    assert work() == 1
    target.execute("UPDATE ackledger_idempotency_keys SET expires_at = expires_at - 3600")
    assert work() == 2


def test_async_functions(ledger: Ledger, target: Target) -> None:
    runs = []

    @ledger.idempotent(key=lambda n: f"a{n}")
    async def work(n: int) -> list[int]:
        runs.append(n)
        await asyncio.sleep(0)
        if n < 0:
            raise ValueError("negative")
        return [n, n]

    async def main() -> None:
        assert await work(1) == [1, 1]
        assert await work(1) == [1, 1]
        with pytest.raises(ValueError, match="negative"):
            await work(-1)

    asyncio.run(main())
    assert runs == [1, -1]
    assert [row[1:] for row in _keys(target)] == [("a1", "completed", "[1,1]")]


# --- in the caller's transaction -------------------------------------------------------------

EFFECTS = "CREATE TABLE IF NOT EXISTS shipments (order_id TEXT PRIMARY KEY)"


def _effects(target: Target) -> list[tuple[Any, ...]]:
    return target.rows("SELECT order_id FROM shipments ORDER BY order_id")


def _ship(ledger: Ledger, insert: str) -> Any:
    @ledger.idempotent(key=lambda conn, order_id: order_id, using_arg="conn")
    def ship(conn: Any, order_id: str) -> dict[str, str]:
        conn.execute(insert, (order_id,))
        if order_id == "fail":
            raise RuntimeError("no truck")
        return {"shipped": order_id}

    return ship


def _own_connection(target: Target) -> Any:
    if target.dialect == "sqlite":
        return sqlite3.connect(target.ref, timeout=30, check_same_thread=False)
    return psycopg.connect(target.ref)


def test_using_the_callers_connection(ledger: Ledger, target: Target) -> None:
    target.execute(EFFECTS)
    mark = "?" if target.dialect == "sqlite" else "%s"
    ship = _ship(ledger, f"INSERT INTO shipments (order_id) VALUES ({mark})")
    conn = _own_connection(target)
    try:
        # A rollback leaves no trace: neither the effect nor the key.
        assert ship(conn, "o-1") == {"shipped": "o-1"}
        conn.rollback()
        assert _effects(target) == [] and _keys(target) == []
        # Committed: both.
        assert ship(conn, "o-1") == {"shipped": "o-1"}
        conn.commit()
        assert _effects(target) == [("o-1",)]
        assert [row[1:] for row in _keys(target)] == [("o-1", "completed", '{"shipped":"o-1"}')]
        # A repeat replays without writing.
        assert ship(conn, "o-1") == {"shipped": "o-1"}
        conn.commit()
        # An error releases the key even if the caller commits what else it did.
        if target.dialect == "sqlite":
            with pytest.raises(RuntimeError):
                ship(conn, "fail")
            conn.commit()
            assert _effects(target) == [("fail",), ("o-1",)]
            assert [row[1] for row in _keys(target)] == ["o-1"]
    finally:
        conn.close()


def test_two_transactions_with_one_key_run_once(ledger: Ledger, target: Target) -> None:
    """The second transaction waits on the first's row lock, then replays its result."""
    target.execute(EFFECTS)
    mark = "?" if target.dialect == "sqlite" else "%s"
    ship = _ship(ledger, f"INSERT INTO shipments (order_id) VALUES ({mark})")
    first, second = _own_connection(target), _own_connection(target)
    try:
        assert ship(first, "o-9") == {"shipped": "o-9"}
        with ThreadPoolExecutor(1) as pool:
            later = pool.submit(ship, second, "o-9")
            time.sleep(0.5)
            assert not later.done()
            first.commit()
            assert later.result(30) == {"shipped": "o-9"}
        second.commit()
    finally:
        first.close()
        second.close()
    assert _effects(target) == [("o-9",)]


def test_a_rolled_back_holder_leaves_the_key_to_the_next(ledger: Ledger, target: Target) -> None:
    target.execute(EFFECTS)
    mark = "?" if target.dialect == "sqlite" else "%s"
    ship = _ship(ledger, f"INSERT INTO shipments (order_id) VALUES ({mark})")
    first, second = _own_connection(target), _own_connection(target)
    try:
        ship(first, "o-5")
        with ThreadPoolExecutor(1) as pool:
            later = pool.submit(ship, second, "o-5")
            time.sleep(0.3)
            first.rollback()
            assert later.result(30) == {"shipped": "o-5"}
        second.commit()
    finally:
        first.close()
        second.close()
    assert _effects(target) == [("o-5",)]


def _engine_url(target: Target, driver: str) -> str:
    if target.dialect == "sqlite":
        return f"sqlite:///{target.ref}"
    return target.ref.replace("postgresql://", f"postgresql+{driver}://", 1)


def test_using_a_sqlalchemy_session(ledger: Ledger, target: Target) -> None:
    from sqlalchemy import create_engine, text
    from sqlalchemy.orm import Session

    target.execute(EFFECTS)
    engine = create_engine(_engine_url(target, "psycopg"))

    @ledger.idempotent(key=lambda session, order_id: order_id, using_arg="session")
    def ship(session: Session, order_id: str) -> str:
        session.execute(text("INSERT INTO shipments (order_id) VALUES (:o)"), {"o": order_id})
        return order_id

    try:
        with Session(engine) as session:
            assert ship(session, "s-1") == "s-1"
            session.rollback()
        assert _effects(target) == [] and _keys(target) == []
        with Session(engine) as session:
            assert ship(session, "s-1") == "s-1"
            session.commit()
        with Session(engine) as session:
            assert ship(session, "s-1") == "s-1"
            session.commit()
    finally:
        engine.dispose()
    assert _effects(target) == [("s-1",)]
    assert [row[1:3] for row in _keys(target)] == [("s-1", "completed")]


def test_using_a_sqlalchemy_async_session(pg_url: str) -> None:
    """An AsyncSession and an AsyncConnection, on PostgreSQL through asyncpg (ackledger
    writes through no async SQLite driver)."""
    from sqlalchemy import text
    from sqlalchemy.ext.asyncio import AsyncSession, create_async_engine

    target = Target("postgres", pg_url)
    target.execute(EFFECTS)
    runs = []

    async def main(ledger: Ledger) -> None:
        @ledger.idempotent(key=lambda session, order_id: order_id, using_arg="session")
        async def ship(session: AsyncSession, order_id: str) -> str:
            runs.append(order_id)
            insert = text("INSERT INTO shipments (order_id) VALUES (:o)")
            await session.execute(insert, {"o": order_id})
            return order_id

        engine = create_async_engine(_engine_url(target, "asyncpg"))
        try:
            async with AsyncSession(engine) as session:
                assert await ship(session, "a-1") == "a-1"
                await session.rollback()
            assert _effects(target) == [] and _keys(target) == []
            async with AsyncSession(engine) as session:
                assert await ship(session, "a-1") == "a-1"
                await session.commit()
            async with AsyncSession(engine) as session, session.begin():
                assert await ship(session, "a-1") == "a-1"
            # An AsyncConnection too (engine.begin() commits when the block ends).
            async with engine.begin() as conn:
                assert await ship(conn, "a-2") == "a-2"  # type: ignore[arg-type]
        finally:
            await engine.dispose()

    with Ledger(pg_url) as ledger:
        asyncio.run(main(ledger))
    assert runs == ["a-1", "a-1", "a-2"]
    assert _effects(target) == [("a-1",), ("a-2",)]
