"""The caller's transaction (CONTRACT section 3, ``publish(..., using=...)``): the store's
``borrow`` runs ackledger's statements on a connection the caller owns, inside the caller's
transaction, and never commits or rolls back.

Each kind of connection the contract names is driven here as an application would drive it
(its own business write, its own commit or rollback), and a second, independent connection
shows what is durable: nothing before the caller's commit, everything after it, nothing of a
transaction the caller rolled back.
"""

from __future__ import annotations

import abc
import asyncio
import contextlib
import sqlite3
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import urlsplit

import psycopg
import pytest
from psycopg.pq import TransactionStatus
from psycopg.rows import dict_row

from ackledger.store import open_backend
from ackledger.store.borrowed import borrow, same_database

from .backends.conftest import Target

T = TypeVar("T")

SOURCE = "urn:ackledger:borrowed-test"
BUSINESS = "CREATE TABLE business (id TEXT PRIMARY KEY, note TEXT NOT NULL)"


@dataclass(frozen=True)
class Database(Target):
    """A database of either kind, read and written through independent connections."""

    def durable(self) -> tuple[list[str], list[tuple[str, int]]]:
        """The business rows and ackledger's counters that a second connection sees."""
        orders = [str(row[0]) for row in self.rows("SELECT id FROM business ORDER BY id")]
        counters = [
            (str(name), int(value))
            for name, value in self.rows(
                "SELECT name, value FROM ackledger_counters WHERE name LIKE ? ORDER BY name",
                ("borrowed.%",),
            )
        ]
        return orders, counters


def prepare(db: Database, *, source: str | None = SOURCE) -> Database:
    """A business table beside ackledger's schema, and the outbox's source recorded."""
    db.execute(BUSINESS)
    if source is not None:
        db.execute(
            "INSERT INTO ackledger_meta (name, value) VALUES (?, ?)", ("outbox.source", source)
        )
    return db


def migrated_sqlite(path: Path, *, source: str | None = SOURCE) -> Database:
    open_backend(str(path)).close()
    return prepare(Database("sqlite", str(path)), source=source)


@pytest.fixture
def sqlite_db(tmp_path: Path) -> Database:
    return migrated_sqlite(tmp_path / "app.db")


@pytest.fixture
def pg_db(pg_url: str) -> Database:
    return prepare(Database("postgres", pg_url))


def ackledger_writes(using: object, dialect: str, name: str) -> list[str]:
    """What publish(using=) will do through the store: borrow, check the database, write (a
    plain statement and a typed operation); returns the business ids the borrowed
    transaction sees."""
    tx = borrow(using, dialect)
    same_database(tx, SOURCE)
    tx.execute(
        "INSERT INTO ackledger_counters (name, value) VALUES (?, ?)", (f"borrowed.{name}", 1)
    )
    tx.counter_bump("borrowed.total")  # executemany
    return [str(row[0]) for row in tx.execute("SELECT id FROM business ORDER BY id")]


# --- the callers ---------------------------------------------------------------------------


class Caller(abc.ABC):
    """An application's own connection and transaction."""

    def begin(self) -> None:  # noqa: B027 - most callers' first statement begins it
        """Start the caller's transaction where its first statement does not."""

    @abc.abstractmethod
    def own_write(self, order_id: str) -> None: ...

    @abc.abstractmethod
    def within(self, work: Callable[[object], T]) -> T:
        """``work(using)`` where the application would call publish(using=...)."""

    @abc.abstractmethod
    def commit(self) -> None: ...

    @abc.abstractmethod
    def rollback(self) -> None: ...

    @abc.abstractmethod
    def close(self) -> None: ...


class Sqlite3Caller(Caller):
    """The sqlite3 module's default (legacy) mode: the first INSERT opens the transaction;
    or, with ``explicit``, autocommit mode with the caller's own BEGIN."""

    def __init__(self, path: str, *, explicit: bool = False) -> None:
        self.explicit = explicit
        self.conn = sqlite3.connect(
            path, isolation_level=None if explicit else "DEFERRED", timeout=30
        )

    def begin(self) -> None:
        if self.explicit:
            self.conn.execute("BEGIN")

    def own_write(self, order_id: str) -> None:
        self.conn.execute("INSERT INTO business (id, note) VALUES (?, 'by the app')", (order_id,))

    def within(self, work: Callable[[object], T]) -> T:
        return work(self.conn)

    def commit(self) -> None:
        self.conn.commit()

    def rollback(self) -> None:
        self.conn.rollback()

    def close(self) -> None:
        self.conn.close()


class PsycopgCaller(Caller):
    """psycopg's default (the first statement opens the transaction), or an autocommit
    connection with the caller's ``conn.transaction()`` block."""

    def __init__(self, url: str, *, autocommit: bool = False) -> None:
        self.conn = psycopg.connect(url, autocommit=autocommit)
        self.block: contextlib.AbstractContextManager[Any] | None = None

    def begin(self) -> None:
        if self.conn.autocommit:
            self.block = self.conn.transaction()
            self.block.__enter__()

    def own_write(self, order_id: str) -> None:
        self.conn.execute("INSERT INTO business (id, note) VALUES (%s, 'by the app')", (order_id,))

    def within(self, work: Callable[[object], T]) -> T:
        return work(self.conn)

    def commit(self) -> None:
        if self.block is None:
            self.conn.commit()
        else:
            self.block.__exit__(None, None, None)
            self.block = None

    def rollback(self) -> None:
        if self.block is None:
            self.conn.rollback()
        else:
            self.block.__exit__(psycopg.Rollback, psycopg.Rollback(), None)
            self.block = None

    def close(self) -> None:
        self.conn.close()


def sqlalchemy_url(db: Database, *, driver: str = "psycopg") -> str:
    if db.dialect == "sqlite":
        return f"sqlite:///{db.ref}"
    return db.ref.replace("postgresql://", f"postgresql+{driver}://", 1)


class SqlAlchemyConnectionCaller(Caller):
    def __init__(self, db: Database) -> None:
        from sqlalchemy import create_engine

        self.engine = create_engine(sqlalchemy_url(db))
        self.conn = self.engine.connect()

    def own_write(self, order_id: str) -> None:
        from sqlalchemy import text

        self.conn.execute(
            text("INSERT INTO business (id, note) VALUES (:id, 'by the app')"), {"id": order_id}
        )

    def within(self, work: Callable[[object], T]) -> T:
        return work(self.conn)

    def commit(self) -> None:
        self.conn.commit()

    def rollback(self) -> None:
        self.conn.rollback()

    def close(self) -> None:
        self.conn.close()
        self.engine.dispose()


class SqlAlchemySessionCaller(Caller):
    def __init__(self, db: Database) -> None:
        from sqlalchemy import create_engine
        from sqlalchemy.orm import Session

        self.engine = create_engine(sqlalchemy_url(db))
        self.session = Session(self.engine)

    def own_write(self, order_id: str) -> None:
        from sqlalchemy import text

        self.session.execute(
            text("INSERT INTO business (id, note) VALUES (:id, 'by the app')"), {"id": order_id}
        )

    def within(self, work: Callable[[object], T]) -> T:
        return work(self.session)

    def commit(self) -> None:
        self.session.commit()

    def rollback(self) -> None:
        self.session.rollback()

    def close(self) -> None:
        self.session.close()
        self.engine.dispose()


class AsyncSessionCaller(Caller):
    """An asyncio application: ``await session.run_sync(lambda s: outbox.publish(ev,
    using=s))``, on SQLAlchemy's async engine with psycopg or asyncpg."""

    def __init__(self, db: Database, driver: str) -> None:
        from sqlalchemy.ext.asyncio import AsyncSession, create_async_engine

        self.runner = asyncio.Runner()
        self.engine = create_async_engine(sqlalchemy_url(db, driver=driver))
        self.session = AsyncSession(self.engine)

    def own_write(self, order_id: str) -> None:
        from sqlalchemy import text

        statement = text("INSERT INTO business (id, note) VALUES (:id, 'by the app')")
        self.runner.run(self.session.execute(statement, {"id": order_id}))

    def within(self, work: Callable[[object], T]) -> T:
        return self.runner.run(self.session.run_sync(work))

    def commit(self) -> None:
        self.runner.run(self.session.commit())

    def rollback(self) -> None:
        self.runner.run(self.session.rollback())

    def close(self) -> None:
        try:
            self.runner.run(self.session.close())
            self.runner.run(self.engine.dispose())
        finally:
            self.runner.close()


def django_settings(db: Database) -> dict[str, Any]:
    if db.dialect == "sqlite":
        return {"ENGINE": "django.db.backends.sqlite3", "NAME": db.ref}
    parts = urlsplit(db.ref)
    return {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": parts.path.lstrip("/"),
        "USER": parts.username or "",
        "HOST": parts.hostname or "",
        "PORT": str(parts.port or ""),
    }


@contextlib.contextmanager
def django_connection(db: Database) -> Iterator[Any]:
    """``django.db.connection``, its default database pointed at ``db``.

    Django's settings can be configured once per process; the default alias is re-pointed per
    test, and its connection object made anew.
    """
    import django
    from django.conf import settings

    if not settings.configured:
        settings.configure(DATABASES={"default": {}}, USE_TZ=True)
        django.setup()
    from django.db import connection, connections

    with contextlib.suppress(AttributeError):
        del connections["default"]
    connections.settings = connections.configure_settings({"default": django_settings(db)})
    try:
        yield connection
    finally:
        connection.close()
        with contextlib.suppress(AttributeError):
            del connections["default"]


class DjangoCaller(Caller):
    """Django's connection inside ``transaction.atomic()``."""

    def __init__(self, db: Database) -> None:
        self.stack = contextlib.ExitStack()
        self.connection = self.stack.enter_context(django_connection(db))
        self.block: Any = None

    def begin(self) -> None:
        from django.db import transaction

        self.block = transaction.atomic()
        self.block.__enter__()

    def own_write(self, order_id: str) -> None:
        with self.connection.cursor() as cursor:
            cursor.execute("INSERT INTO business (id, note) VALUES (%s, 'by the app')", [order_id])

    def within(self, work: Callable[[object], T]) -> T:
        return work(self.connection)

    def commit(self) -> None:
        self.block.__exit__(None, None, None)

    def rollback(self) -> None:
        from django.db import transaction

        transaction.set_rollback(True)
        self.block.__exit__(None, None, None)

    def close(self) -> None:
        self.stack.close()


CALLERS: dict[str, tuple[str, Callable[[Database], Caller]]] = {
    "sqlite3": ("sqlite", lambda db: Sqlite3Caller(db.ref)),
    "sqlite3-begin": ("sqlite", lambda db: Sqlite3Caller(db.ref, explicit=True)),
    "sqlalchemy-connection-sqlite": ("sqlite", SqlAlchemyConnectionCaller),
    "sqlalchemy-session-sqlite": ("sqlite", SqlAlchemySessionCaller),
    "django-sqlite": ("sqlite", DjangoCaller),
    "psycopg": ("postgres", lambda db: PsycopgCaller(db.ref)),
    "psycopg-transaction": ("postgres", lambda db: PsycopgCaller(db.ref, autocommit=True)),
    "sqlalchemy-connection-postgres": ("postgres", SqlAlchemyConnectionCaller),
    "sqlalchemy-session-postgres": ("postgres", SqlAlchemySessionCaller),
    "asyncsession-psycopg": ("postgres", lambda db: AsyncSessionCaller(db, "psycopg")),
    "asyncsession-asyncpg": ("postgres", lambda db: AsyncSessionCaller(db, "asyncpg")),
    "django-postgres": ("postgres", DjangoCaller),
}


@pytest.fixture(params=list(CALLERS))
def case(request: pytest.FixtureRequest) -> Iterator[tuple[Database, Caller]]:
    dialect, make = CALLERS[request.param]
    db: Database = request.getfixturevalue("sqlite_db" if dialect == "sqlite" else "pg_db")
    caller = make(db)
    try:
        yield db, caller
    finally:
        caller.close()


def test_the_callers_commit_makes_its_writes_and_ackledgers_durable_together(
    case: tuple[Database, Caller],
) -> None:
    db, caller = case
    caller.begin()
    caller.own_write("order-1")
    seen = caller.within(lambda using: ackledger_writes(using, db.dialect, "evt-1"))
    # The borrowed transaction sees the caller's uncommitted row: it is the same transaction.
    assert seen == ["order-1"]
    assert db.durable() == ([], [])  # ackledger committed nothing
    caller.commit()
    assert db.durable() == (["order-1"], [("borrowed.evt-1", 1), ("borrowed.total", 1)])


def test_the_callers_rollback_removes_its_writes_and_ackledgers_together(
    case: tuple[Database, Caller],
) -> None:
    db, caller = case
    caller.begin()
    caller.own_write("order-1")
    caller.within(lambda using: ackledger_writes(using, db.dialect, "evt-1"))
    caller.commit()
    committed = db.durable()
    caller.begin()
    caller.own_write("order-2")
    assert caller.within(lambda using: ackledger_writes(using, db.dialect, "evt-2")) == [
        "order-1",
        "order-2",
    ]
    caller.rollback()
    assert (
        db.durable()
        == committed
        == (
            ["order-1"],
            [("borrowed.evt-1", 1), ("borrowed.total", 1)],
        )
    )


# --- what a borrowed transaction does on its own --------------------------------------------


def test_a_sqlalchemy_connection_not_yet_begun_commits_ackledgers_writes_with_its_commit(
    sqlite_db: Database, pg_db: Database
) -> None:
    """ackledger's statements go around SQLAlchemy; unless borrow begins the Connection's
    transaction, its commit() would commit nothing and the pool would roll the writes back."""
    from sqlalchemy import create_engine

    for db in (sqlite_db, pg_db):
        engine = create_engine(sqlalchemy_url(db))
        try:
            with engine.connect() as conn:
                assert not conn.in_transaction()
                ackledger_writes(conn, db.dialect, "evt-1")
                assert conn.in_transaction()
                conn.commit()
        finally:
            engine.dispose()
        assert db.durable() == ([], [("borrowed.evt-1", 1), ("borrowed.total", 1)]), db.dialect


def test_sqlite_legacy_mode_a_write_that_is_not_an_insert_keyword_stays_in_the_transaction(
    sqlite_db: Database,
) -> None:
    """The sqlite3 module opens its implicit transaction only before statements starting with
    INSERT/UPDATE/DELETE/REPLACE; a ``WITH ... INSERT`` would otherwise commit at once."""
    conn = sqlite3.connect(sqlite_db.ref, timeout=30)  # legacy mode, no transaction yet
    try:
        tx = borrow(conn, "sqlite")
        tx.execute(
            "WITH n(v) AS (SELECT 'evt-1') INSERT INTO ackledger_counters (name, value) "
            "SELECT 'borrowed.' || v, 1 FROM n"
        )
        assert conn.in_transaction
        conn.rollback()
    finally:
        conn.close()
    assert sqlite_db.durable() == ([], [])


def test_rows_come_back_as_tuples_whatever_row_factory_the_caller_set(
    sqlite_db: Database, pg_db: Database
) -> None:
    lite = sqlite3.connect(sqlite_db.ref)
    lite.row_factory = sqlite3.Row
    try:
        assert borrow(lite, "sqlite").execute("SELECT 1, 'a'") == [(1, "a")]
        assert type(lite.execute("SELECT 1").fetchone()) is sqlite3.Row  # the caller's stays
    finally:
        lite.close()
    with psycopg.connect(pg_db.ref, row_factory=dict_row) as conn:
        assert borrow(conn, "postgres").execute("SELECT 1, 'a'") == [(1, "a")]
        assert conn.execute("SELECT 1 AS x").fetchone() == {"x": 1}


def test_a_subclass_of_a_drivers_connection_is_that_drivers(sqlite_db: Database) -> None:
    class AppConnection(sqlite3.Connection):
        pass

    conn = sqlite3.connect(sqlite_db.ref, factory=AppConnection)
    try:
        borrow(conn, "sqlite").execute(
            "INSERT INTO ackledger_counters (name, value) VALUES ('borrowed.x', 1)"
        )
        conn.commit()
    finally:
        conn.close()
    assert sqlite_db.durable() == ([], [("borrowed.x", 1)])


# --- refusals --------------------------------------------------------------------------------


@pytest.mark.parametrize("thing", [object(), "app.db", 42, None])
def test_something_that_is_no_connection_is_refused_naming_its_type(thing: object) -> None:
    with pytest.raises(TypeError) as caught:
        borrow(thing, "sqlite")
    message = str(caught.value)
    assert type(thing).__qualname__ in message
    assert "sqlite3.Connection" in message and "SQLAlchemy" in message and "Django" in message


def test_objects_of_the_libraries_that_are_not_connections_are_refused(sqlite_db: Database) -> None:
    from sqlalchemy import create_engine
    from sqlalchemy.ext.asyncio import AsyncSession, create_async_engine

    engine = create_engine(sqlalchemy_url(sqlite_db))
    try:
        with pytest.raises(TypeError, match=r"sqlalchemy\.engine\.base\.Engine"):
            borrow(engine, "sqlite")
    finally:
        engine.dispose()

    async def async_session() -> None:
        aengine = create_async_engine("postgresql+psycopg://postgres@127.0.0.1:5432/postgres")
        async with AsyncSession(aengine) as session:
            with pytest.raises(TypeError, match=r"run_sync"):
                borrow(session, "postgres")
        await aengine.dispose()

    asyncio.run(async_session())


def test_a_psycopg_async_connection_is_refused_pointing_to_run_sync(pg_db: Database) -> None:
    async def scenario() -> None:
        async with await psycopg.AsyncConnection.connect(pg_db.ref) as conn:
            with pytest.raises(TypeError, match=r"AsyncConnection.*run_sync"):
                borrow(conn, "postgres")

    asyncio.run(scenario())


def test_a_connection_to_the_other_kind_of_database_is_refused(
    sqlite_db: Database, pg_db: Database
) -> None:
    from sqlalchemy import create_engine

    lite = sqlite3.connect(sqlite_db.ref)
    try:
        with pytest.raises(ValueError, match=r"sqlite3 connection reaches SQLite.*PostgreSQL"):
            borrow(lite, "postgres")
        assert not lite.in_transaction
    finally:
        lite.close()
    with psycopg.connect(pg_db.ref) as conn:
        with pytest.raises(ValueError, match=r"psycopg connection reaches PostgreSQL.*SQLite"):
            borrow(conn, "sqlite")
        assert conn.info.transaction_status == TransactionStatus.IDLE
    engine = create_engine(sqlalchemy_url(sqlite_db))
    try:
        with engine.connect() as sa_conn:
            with pytest.raises(ValueError, match=r"SQLAlchemy sqlite connection.*PostgreSQL"):
                borrow(sa_conn, "postgres")
            assert not sa_conn.in_transaction()
    finally:
        engine.dispose()
    with (
        django_connection(pg_db) as django_conn,
        pytest.raises(ValueError, match=r"Django's postgresql connection.*SQLite"),
    ):
        borrow(django_conn, "sqlite")


def test_a_dialect_that_ackledger_has_not_is_refused(sqlite_db: Database) -> None:
    lite = sqlite3.connect(sqlite_db.ref)
    try:
        with pytest.raises(ValueError, match=r"dialect: must be sqlite or postgres"):
            borrow(lite, "mysql")
    finally:
        lite.close()


def test_a_connection_to_another_database_is_refused(tmp_path: Path, pg_db: Database) -> None:
    other = migrated_sqlite(tmp_path / "other.db", source="urn:ackledger:another")
    unnamed = migrated_sqlite(tmp_path / "unnamed.db", source=None)
    for db, found in ((other, "'urn:ackledger:another'"), (unnamed, "None")):
        conn = sqlite3.connect(db.ref)
        try:
            with pytest.raises(ValueError, match="reaches another database") as caught:
                same_database(borrow(conn, "sqlite"), SOURCE)
            assert found in str(caught.value) and repr(SOURCE) in str(caught.value)
        finally:
            conn.close()
    pg_db.execute("UPDATE ackledger_meta SET value = 'urn:ackledger:another'")
    with (
        psycopg.connect(pg_db.ref) as pconn,
        pytest.raises(ValueError, match="reaches another database"),
    ):
        same_database(borrow(pconn, "postgres"), SOURCE)


def test_a_database_without_ackledgers_schema_is_refused_and_the_callers_transaction_lives_on(
    tmp_path: Path, pg_empty_url: str
) -> None:
    bare = Database("sqlite", str(tmp_path / "bare.db"))
    bare.execute(BUSINESS)
    conn = sqlite3.connect(bare.ref)
    try:
        conn.execute("INSERT INTO business (id, note) VALUES ('order-1', 'by the app')")
        with pytest.raises(ValueError, match=r"no ackledger schema: run ackledger migrate"):
            same_database(borrow(conn, "sqlite"), SOURCE)
        conn.commit()
    finally:
        conn.close()
    assert bare.rows("SELECT id FROM business") == [("order-1",)]

    empty = Database("postgres", pg_empty_url)
    empty.execute(BUSINESS)
    with psycopg.connect(empty.ref) as pconn:
        pconn.execute("INSERT INTO business (id, note) VALUES ('order-1', 'by the app')")
        with pytest.raises(ValueError, match=r"migrate --sql"):
            same_database(borrow(pconn, "postgres"), SOURCE)
        # Had the check failed a statement, PostgreSQL would have aborted the transaction.
        assert pconn.info.transaction_status == TransactionStatus.INTRANS
        pconn.commit()
    assert empty.rows("SELECT id FROM business") == [("order-1",)]


def test_connections_in_autocommit_outside_a_transaction_are_refused(
    sqlite_db: Database, pg_db: Database
) -> None:
    from sqlalchemy import create_engine

    lite = sqlite3.connect(sqlite_db.ref, isolation_level=None)
    try:
        with pytest.raises(ValueError, match=r"not in a transaction; begin one"):
            borrow(lite, "sqlite")
    finally:
        lite.close()
    with (
        psycopg.connect(pg_db.ref, autocommit=True) as conn,
        pytest.raises(ValueError, match=r"not in a transaction; begin one"),
    ):
        borrow(conn, "postgres")
    for db in (sqlite_db, pg_db):
        engine = create_engine(sqlalchemy_url(db), isolation_level="AUTOCOMMIT")
        try:
            with (
                engine.connect() as sa_conn,
                sa_conn.begin(),
                pytest.raises(ValueError, match=r"not in a transaction"),
            ):
                borrow(sa_conn, db.dialect)
        finally:
            engine.dispose()
        with (
            django_connection(db) as django_conn,  # outside transaction.atomic()
            pytest.raises(ValueError, match=r"not in a transaction"),
        ):
            borrow(django_conn, db.dialect)
    assert sqlite_db.durable() == pg_db.durable() == ([], [])


def test_async_sessions_in_autocommit_are_refused(pg_db: Database) -> None:
    from sqlalchemy.ext.asyncio import AsyncSession, create_async_engine

    async def scenario(driver: str) -> None:
        engine = create_async_engine(
            sqlalchemy_url(pg_db, driver=driver), isolation_level="AUTOCOMMIT"
        )
        try:
            async with AsyncSession(engine) as session:
                with pytest.raises(ValueError, match=r"not in a transaction"):
                    await session.run_sync(lambda s: borrow(s, "postgres"))
        finally:
            await engine.dispose()

    for driver in ("psycopg", "asyncpg"):
        asyncio.run(scenario(driver))


def test_a_psycopg_transaction_that_already_failed_is_refused(pg_db: Database) -> None:
    with psycopg.connect(pg_db.ref) as conn:
        with pytest.raises(psycopg.errors.UndefinedTable):
            conn.execute("SELECT * FROM no_such_table")
        with pytest.raises(ValueError, match=r"already failed.*roll it back"):
            borrow(conn, "postgres")


def test_a_closed_connection_is_refused(sqlite_db: Database) -> None:
    conn = sqlite3.connect(sqlite_db.ref)
    conn.close()
    with pytest.raises(ValueError, match=r"sqlite3 connection cannot be used"):
        borrow(conn, "sqlite")


def test_borrowing_a_sqlite3_connection_imports_no_optional_library(tmp_path: Path) -> None:
    """The core stays standard-library only: the optional libraries are imported only for an
    object that comes from them (a fresh interpreter, since this one has them loaded)."""
    import subprocess
    import sys

    script = (
        "import sqlite3, sys\n"
        "from ackledger.store import open_backend\n"
        f"backend = open_backend({str(tmp_path / 'lone.db')!r})\n"
        f"conn = sqlite3.connect({str(tmp_path / 'lone.db')!r})\n"
        'backend.borrow(conn).execute("INSERT INTO ackledger_counters (name, value) VALUES '
        "('x', 1)\")\n"
        "print(sorted(m for m in ('sqlalchemy', 'django', 'psycopg', 'asyncpg') "
        "if m in sys.modules))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True, timeout=60
    )
    assert done.stdout.strip() == "[]"
