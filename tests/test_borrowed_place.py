"""Where a publish on the caller's connection writes: the outbox's database is checked once
per driver connection, and the finding is never trusted past what it was about.

``publish(using=)`` and ``publish_async(using=)`` check the first time a connection is used
that it reaches the outbox's database (its schema, its source); later publishes on that
connection, pooled from one transaction to the next, run their one statement only. That
statement writes only while the connection's names resolve to the tables that were checked:
a changed ``search_path`` or a schema dropped and made again is seen, and the publish is
checked again (with the clear error when it no longer reaches the outbox), nothing written.

The statements are counted on real connections: psycopg's cursor class, asyncpg's query
logger. What is durable is read from other connections.
"""

from __future__ import annotations

import abc
import asyncio
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

from ackledger import Outbox, new_event

from . import pg

SOURCE = "/orders-service"
KINDS = ["psycopg", "sqlalchemy-psycopg", "asyncpg"]


def placed(order_id: str) -> dict[str, Any]:
    return new_event("com.example.order.placed", {"order": order_id}, source=SOURCE, id=order_id)


def ours(statements: list[str]) -> list[str]:
    """ackledger's statements among what a connection ran (every one names its tables)."""
    return [sql for sql in statements if "ackledger" in sql]


class Caller(abc.ABC):
    """An application's connection, kept from one transaction to the next as a pool keeps
    it; ``statements`` is every statement it ran."""

    statements: list[str]

    @abc.abstractmethod
    def begin(self) -> None: ...

    @abc.abstractmethod
    def execute(self, sql: str) -> None: ...

    @abc.abstractmethod
    def publish(self, outbox: Outbox, order_id: str) -> int: ...

    @abc.abstractmethod
    def commit(self) -> None: ...

    @abc.abstractmethod
    def rollback(self) -> None: ...

    @abc.abstractmethod
    def close(self) -> None: ...

    def own_write(self, order_id: str) -> None:
        self.execute(f"INSERT INTO public.business (id) VALUES ('{order_id}')")


def _traced_cursor(seen: list[str]) -> type[psycopg.Cursor[Any]]:
    class Traced(psycopg.Cursor[Any]):
        def execute(self, query: Any, *args: Any, **kwargs: Any) -> Any:
            seen.append(str(query))
            return super().execute(query, *args, **kwargs)

    return Traced


class PsycopgCaller(Caller):
    def __init__(self, url: str) -> None:
        self.statements = []
        self.conn = psycopg.connect(url, cursor_factory=_traced_cursor(self.statements))

    def begin(self) -> None:
        """psycopg's first statement begins the transaction."""

    def execute(self, sql: str) -> None:
        self.conn.execute(sql)

    def publish(self, outbox: Outbox, order_id: str) -> int:
        return outbox.publish(placed(order_id), using=self.conn)

    def commit(self) -> None:
        self.conn.commit()

    def rollback(self) -> None:
        self.conn.rollback()

    def close(self) -> None:
        self.conn.close()


class SqlAlchemyCaller(Caller):
    """A Session per transaction, from an engine whose pool holds one connection."""

    def __init__(self, url: str) -> None:
        from sqlalchemy import create_engine
        from sqlalchemy.orm import Session

        self.statements = []
        self.engine = create_engine(
            url.replace("postgresql://", "postgresql+psycopg://", 1),
            connect_args={"cursor_factory": _traced_cursor(self.statements)},
            pool_size=1,
            max_overflow=0,
        )
        self.session: Session | None = None

    def begin(self) -> None:
        from sqlalchemy.orm import Session

        self.session = Session(self.engine)

    def execute(self, sql: str) -> None:
        from sqlalchemy import text

        assert self.session is not None
        self.session.execute(text(sql))

    def publish(self, outbox: Outbox, order_id: str) -> int:
        return outbox.publish(placed(order_id), using=self.session)

    def _end(self, commit: bool) -> None:
        assert self.session is not None
        if commit:
            self.session.commit()
        else:
            self.session.rollback()
        self.session.close()
        self.session = None

    def commit(self) -> None:
        self._end(True)

    def rollback(self) -> None:
        self._end(False)

    def close(self) -> None:
        if self.session is not None:
            self.session.close()
        self.engine.dispose()


class AsyncpgCaller(Caller):
    """``publish_async`` on an asyncpg connection, driven from a loop of its own."""

    def __init__(self, url: str) -> None:
        import asyncpg

        self.statements = []
        self.runner = asyncio.Runner()
        self.conn = self.runner.run(asyncpg.connect(url))
        self.conn.add_query_logger(lambda record: self.statements.append(record.query))
        self.tx: Any = None

    def begin(self) -> None:
        self.tx = self.conn.transaction()
        self.runner.run(self.tx.start())

    def execute(self, sql: str) -> None:
        self.runner.run(self.conn.execute(sql))

    def publish(self, outbox: Outbox, order_id: str) -> int:
        return self.runner.run(outbox.publish_async(placed(order_id), using=self.conn))

    def commit(self) -> None:
        self.runner.run(self.tx.commit())

    def rollback(self) -> None:
        self.runner.run(self.tx.rollback())

    def close(self) -> None:
        self.runner.run(self.conn.close())
        self.runner.close()


def make_caller(kind: str, url: str) -> Caller:
    if kind == "psycopg":
        return PsycopgCaller(url)
    if kind == "sqlalchemy-psycopg":
        return SqlAlchemyCaller(url)
    return AsyncpgCaller(url)


@pytest.fixture(params=KINDS)
def kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def url(pg_empty_url: str) -> str:
    """A database with ackledger's tables in no schema yet, and the application's table."""
    pg.rows(pg_empty_url, "CREATE TABLE public.business (id TEXT PRIMARY KEY)")
    return pg_empty_url


@pytest.fixture
def caller(kind: str, url: str) -> Iterator[Caller]:
    made = make_caller(kind, url)
    try:
        yield made
    finally:
        made.close()


def outbox_in(url: str, schema: str, source: str = SOURCE) -> Outbox:
    return Outbox(url, schema=schema, source=source)


def pending_in(url: str, schema: str) -> list[str]:
    return [str(row[0]) for row in pg.rows(url, f"SELECT id FROM {schema}.ackledger_outbox")]


def business(url: str) -> list[str]:
    return [str(row[0]) for row in pg.rows(url, "SELECT id FROM public.business ORDER BY id")]


def test_after_the_first_publish_on_a_connection_each_runs_one_statement(
    caller: Caller, url: str
) -> None:
    with outbox_in(url, "shop") as outbox:
        per_transaction = []
        for number in range(4):
            caller.begin()
            caller.execute("SET search_path TO shop")
            before = len(ours(caller.statements))
            caller.publish(outbox, f"o-{number}")
            per_transaction.append(ours(caller.statements)[before:])
            caller.commit()
        # The first checks the schema and the source, then claims; the others only claim.
        assert [len(statements) for statements in per_transaction] == [3, 1, 1, 1]
        assert per_transaction[1] == per_transaction[2] == per_transaction[3]
        assert "INSERT INTO" in per_transaction[1][0]
        assert [event["id"] for event in outbox.pending()] == ["o-0", "o-1", "o-2", "o-3"]


def test_a_changed_search_path_is_followed_and_a_wrong_place_refused(
    caller: Caller, url: str
) -> None:
    pg.rows(url, "CREATE SCHEMA bare")
    with outbox_in(url, "shop") as outbox, outbox_in(url, "elsewhere", "/elsewhere"):
        caller.begin()
        caller.execute("SET search_path TO shop")
        caller.publish(outbox, "o-1")
        caller.commit()

        # The same connection, now reaching no ackledger tables, then another outbox's.
        for schema, refusal in (("bare", "no ackledger schema"), ("elsewhere", "another database")):
            caller.begin()
            caller.execute(f"SET search_path TO {schema}")
            with pytest.raises(ValueError, match=refusal):
                caller.publish(outbox, f"o-{schema}")
            # Refused by reads alone: the caller's transaction lives on and commits.
            caller.own_write(f"o-{schema}")
            caller.commit()

        caller.begin()
        caller.execute("SET search_path TO shop")
        caller.publish(outbox, "o-2")
        caller.commit()
        assert pending_in(url, "shop") == ["o-1", "o-2"]
        assert pending_in(url, "elsewhere") == []
        assert business(url) == ["o-bare", "o-elsewhere"]


def test_a_schema_dropped_and_made_again_under_a_kept_connection(caller: Caller, url: str) -> None:
    def remake(source: str | None) -> None:
        pg.rows(url, "DROP SCHEMA shop CASCADE")
        if source is not None:
            outbox_in(url, "shop", source).close()

    with outbox_in(url, "shop") as outbox:
        caller.begin()
        caller.execute("SET search_path TO shop")
        caller.publish(outbox, "o-1")
        caller.commit()

        # Made again by another outbox: its tables are not this outbox's.
        remake("/impostor")
        caller.begin()
        with pytest.raises(ValueError, match="another database"):
            caller.publish(outbox, "o-2")
        caller.own_write("o-2")
        caller.commit()
        assert pending_in(url, "shop") == []

        # Made again as this outbox's: the event goes into the new tables.
        remake(SOURCE)
        caller.begin()
        caller.publish(outbox, "o-3")
        caller.commit()
        assert pending_in(url, "shop") == ["o-3"]

        # Gone: the statement that named the schema fails (PostgreSQL's own error, the
        # caller's transaction aborted), and the next transaction checks afresh.
        remake(None)
        caller.begin()
        with pytest.raises(Exception, match="shop") as failed:
            caller.publish(outbox, "o-4")
        assert not isinstance(failed.value, ValueError)
        caller.rollback()
        caller.begin()
        with pytest.raises(ValueError, match="no ackledger schema"):
            caller.publish(outbox, "o-5")
        caller.own_write("o-5")
        caller.commit()
    assert business(url) == ["o-2", "o-5"]
