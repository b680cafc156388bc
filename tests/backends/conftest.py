"""The backend suite: every test runs on SQLite and on PostgreSQL, through ``target``."""

from __future__ import annotations

import asyncio
import sqlite3
import threading
import time
from collections.abc import Awaitable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import psycopg
import pytest

from .. import pg

T = TypeVar("T")

#: Tables whose full content a "writes nothing" check compares (everything but migrations).
TABLES = (
    "ackledger_outbox", "ackledger_inbox", "ackledger_counters", "ackledger_partition_leases",
    "ackledger_deliveries", "ackledger_attempts", "ackledger_meta", "ackledger_inbox_oldest",
)  # fmt: skip
#: The lab's tables, there once a lab call made them.
LAB_TABLES = ("orders", "inventory")


@dataclass(frozen=True)
class Target:
    dialect: str
    #: What ackledger is given: a file path or a postgresql:// URL.
    ref: str

    def rows(self, sql: str, params: tuple[object, ...] = ()) -> list[tuple[Any, ...]]:
        """Read through an independent connection (``?`` placeholders on both)."""
        if self.dialect == "postgres":
            return pg.rows(self.ref, sql, params)
        conn = sqlite3.connect(f"file:{self.ref}?mode=ro", uri=True, isolation_level=None)
        try:
            return conn.execute(sql, params).fetchall()
        finally:
            conn.close()

    def execute(self, sql: str, params: tuple[object, ...] = ()) -> None:
        """Write through an independent connection (a test's hand on the clock, say)."""
        if self.dialect == "postgres":
            pg.rows(self.ref, sql, params)
            return
        conn = sqlite3.connect(self.ref, isolation_level=None, timeout=30)
        try:
            conn.execute(sql, params)
        finally:
            conn.close()

    def dump(self) -> dict[str, list[tuple[Any, ...]]]:
        """Every row of every ackledger table and of the lab's, in a stable order."""
        tables = [*TABLES, *(name for name in LAB_TABLES if self.has_table(name))]
        return {t: sorted(map(tuple, self.rows(f"SELECT * FROM {t}")), key=repr) for t in tables}

    def has_table(self, name: str) -> bool:
        if self.dialect == "postgres":
            return self.rows("SELECT to_regclass(?) IS NOT NULL", (name,)) == [(True,)]
        return bool(
            self.rows("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?", (name,))
        )

    @contextmanager
    def holding_writes(self, postgres_lock: str) -> Iterator[None]:
        """Hold writers back from another connection while inside: SQLite's one writer's
        lock; on PostgreSQL, ``postgres_lock`` (a statement taking the locks the test needs)."""
        if self.dialect == "postgres":
            with psycopg.connect(self.ref) as conn:
                conn.execute(postgres_lock)
                yield
                conn.rollback()
            return
        lite = sqlite3.connect(self.ref, isolation_level=None, timeout=30)
        try:
            lite.execute("BEGIN IMMEDIATE")
            yield
            lite.execute("ROLLBACK")
        finally:
            lite.close()

    def can_lock_exclusively(self) -> bool:
        """Can another connection take an exclusive write lock at once (no one holds a lock)?"""
        if self.dialect == "postgres":
            with psycopg.connect(self.ref, autocommit=True) as conn:
                try:
                    with conn.transaction():
                        conn.execute("SET LOCAL lock_timeout = '100ms'")
                        conn.execute("LOCK TABLE ackledger_outbox IN ACCESS EXCLUSIVE MODE")
                        conn.execute("UPDATE ackledger_counters SET value = value WHERE name = 'x'")
                except psycopg.errors.LockNotAvailable:
                    return False
            return True
        lite = sqlite3.connect(self.ref, isolation_level=None, timeout=0)
        try:
            lite.execute("BEGIN EXCLUSIVE")
            lite.execute("COMMIT")
        except sqlite3.OperationalError:
            return False
        finally:
            lite.close()
        return True


@pytest.fixture(params=["sqlite", "postgres"])
def target(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Target]:
    if request.param == "sqlite":
        yield Target("sqlite", str(tmp_path / "store.db"))
    else:
        yield Target("postgres", request.getfixturevalue("pg_url"))


#: The asyncio connections ``publish_async`` and ``receive_async`` take, by database.
ASYNC_KINDS = [
    ("sqlite", "session-aiosqlite"),
    ("sqlite", "connection-aiosqlite"),
    ("postgres", "session-asyncpg"),
    ("postgres", "session-psycopg"),
    ("postgres", "connection-asyncpg"),
    ("postgres", "connection-psycopg"),
    ("postgres", "psycopg"),
    ("postgres", "asyncpg"),
]


@pytest.fixture(params=ASYNC_KINDS, ids=[f"{dialect}-{kind}" for dialect, kind in ASYNC_KINDS])
def async_case(request: pytest.FixtureRequest, tmp_path: Path) -> tuple[Target, str]:
    """Where (a target) and how (an asyncio connection's kind) the caller connects."""
    dialect, kind = request.param
    if dialect == "sqlite":
        return Target("sqlite", str(tmp_path / "store.db")), kind
    return Target("postgres", request.getfixturevalue("pg_url")), kind


@pytest.fixture
def pair(target: Target) -> Iterator[tuple[Any, Any]]:
    """Two Outbox objects on the target (two connections): a reader and a marker."""
    from ackledger import Outbox

    reader, marker = Outbox(target.ref), Outbox(target.ref)
    yield reader, marker
    reader.close()
    marker.close()


@contextmanager
def sqlite_write_lock_held(path: str, seconds: float) -> Iterator[None]:
    """Another writer holds SQLite's one write lock for ``seconds`` from a thread of its own,
    taken before the block starts; the block's end waits for it to let go."""
    held = threading.Event()

    def hold() -> None:
        other = sqlite3.connect(path, isolation_level=None)
        other.execute("BEGIN IMMEDIATE")
        held.set()
        time.sleep(seconds)
        other.execute("ROLLBACK")
        other.close()

    holder = threading.Thread(target=hold)
    holder.start()
    held.wait()
    try:
        yield
    finally:
        holder.join()


async def ticking(awaitable: Awaitable[T]) -> tuple[T, int]:
    """``awaitable``'s result, and how many 10 ms ticks the same loop made while it ran."""
    ticks = 0
    task = asyncio.ensure_future(awaitable)
    while not task.done():
        ticks += 1
        await asyncio.sleep(0.01)
    return task.result(), ticks
