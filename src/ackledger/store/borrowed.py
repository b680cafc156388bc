"""The caller's transaction: ackledger's statements on a connection that the caller owns.

``Outbox.publish(event, using=conn)`` (CONTRACT section 3) writes with the caller's connection,
inside the caller's transaction, so that the caller's commit makes the business rows and the
event durable together and the caller's rollback removes both. ``borrow`` turns what the caller
hands over into a :class:`Tx` on that connection; ``same_database`` checks that it reaches the
outbox's own database.

Nothing here commits, rolls back, or changes autocommit or isolation: the transaction is the
caller's. A connection on which a write would commit at once (autocommit, no transaction
open) is refused, since the event would then be durable without the business writes.

Optional libraries are recognised by the modules of the object's classes and imported only
when the object comes from them, so the core still needs nothing but the standard library.
"""

from __future__ import annotations

import contextlib
import functools
import sqlite3
import weakref
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from .._core.idempotency import Claim
from .base import Params, Row, Tx
from .inbox import InboxQueries
from .outbox import Place
from .postgres.tx import PostgresTx, has_rows, to_pyformat
from .sqlite.tx import SqliteTx

if TYPE_CHECKING:
    import psycopg
    from sqlalchemy.engine import Connection as SqlAlchemyConnection

__all__ = [
    "META_TABLE",
    "SOURCE_KEY",
    "BorrowedOutbox",
    "OnDriver",
    "borrow",
    "has_schema",
    "same_database",
]

SQLITE = "sqlite"
POSTGRES = "postgres"
_DATABASE_NAMES = {SQLITE: "SQLite", POSTGRES: "PostgreSQL"}
#: Django's ``vendor`` and SQLAlchemy's dialect ``name`` of the databases ackledger lives in.
_DIALECT_OF = {"sqlite": SQLITE, "postgresql": POSTGRES}

ACCEPTED = (
    "a sqlite3.Connection, a psycopg 3 Connection, a SQLAlchemy Connection or Session (also "
    "the one AsyncSession.run_sync passes), or Django's connection"
)
NOT_IN_TRANSACTION = (
    "using: the connection is not in a transaction; begin one (BEGIN, conn.transaction(), "
    "transaction.atomic(), ...) so that the event commits or rolls back with your own writes "
    "(written now it would commit alone)"
)

#: The table of the outbox's facts that never change, and the row naming its source.
META_TABLE = "ackledger_meta"
SOURCE_KEY = "outbox.source"
_READ_SOURCE = "SELECT value FROM ackledger_meta WHERE name = ?"


def borrow(using: object, dialect: str) -> Tx:
    """A :class:`Tx` that runs on the caller's connection ``using``, inside the caller's
    transaction, for an outbox in ``dialect`` (``"sqlite"`` or ``"postgres"``).

    Raises ``TypeError`` for an object that is not a connection ackledger can write with,
    ``ValueError`` for one of the other database kind, or one not in a transaction.
    """
    if dialect not in _DATABASE_NAMES:
        raise ValueError(f"dialect: must be sqlite or postgres, got {dialect!r}")
    if isinstance(using, sqlite3.Connection):
        _same_dialect(SQLITE, dialect, "a sqlite3 connection")
        return _on_sqlite3(using)
    roots = _module_roots(using)
    if "psycopg" in roots:
        return _on_psycopg(using, dialect)
    if "sqlalchemy" in roots:
        return _on_sqlalchemy(using, dialect)
    if "django" in roots:
        return _on_django(using, dialect)
    raise _not_accepted(using)


def same_database(tx: Tx, expected_source: str) -> Place:
    """Check that ``tx`` (a borrowed one) reaches the outbox's database: the one whose
    ``ackledger_meta`` names ``expected_source`` as the outbox's CloudEvents source; returns
    where the outbox's tables are.

    Only reads, and never a statement that could fail: on PostgreSQL a failed statement would
    abort the caller's transaction.
    """
    place = has_schema(tx)
    row = tx.one(_READ_SOURCE, (SOURCE_KEY,))
    found = None if row is None else row[0]
    if found != expected_source:
        raise ValueError(
            "using: the connection reaches another database than the outbox's (its "
            f"{SOURCE_KEY} is {found!r}, the outbox's is {expected_source!r})"
        )
    if place.outbox is None:
        raise _no_schema()
    return place


def has_schema(tx: Tx) -> Place:
    """Check that ``tx`` (a borrowed one) reaches a database ackledger migrated, by a read
    that cannot fail (a failed statement would abort the caller's PostgreSQL transaction);
    returns where ackledger's tables are."""
    place = tx.outbox_place()
    if place is None:
        raise _no_schema()
    return place


def _no_schema() -> ValueError:
    return ValueError(
        "using: the database has no ackledger schema: run ackledger migrate or apply "
        "ackledger migrate --sql"
    )


class OnDriver:
    """A transaction on a caller's connection; ``driver`` is the driver's own connection
    that its statements run on, whoever wraps it (SQLAlchemy, Django)."""

    driver: object


#: Per driver connection: the outbox source its database was found to hold, and where the
#: outbox's tables were then. Weak keys: a finding goes with its connection.
_FOUND: weakref.WeakKeyDictionary[Any, tuple[str, Place]] = weakref.WeakKeyDictionary()


class BorrowedOutbox:
    """The outbox's tables on a borrowed transaction (``Outbox.publish(using=)``).

    ``same_database`` costs two statements, so its finding is kept per driver connection and
    later publishes on it run none: ``enqueue`` hands the kept ``Place`` to the claim, which
    writes only while the connection's names still resolve there (a changed search path, a
    schema dropped and made again). When they do not, the connection is checked again, with
    the clear error of ``same_database`` if it no longer reaches the outbox, and a claim that
    failed forgets the finding, so that the next transaction checks afresh.
    """

    def __init__(self, tx: Tx, source: str) -> None:
        self._tx = tx
        self._source = source
        self._key = tx.driver if isinstance(tx, OnDriver) else None
        # A kept finding guards the claim; one made just now, with nothing of the caller's
        # run since, needs no guard (``place`` None).
        self._place = self._known()
        if self._place is None:
            self._check()

    def enqueue(
        self, event: dict[str, Any], text: str, fingerprint: str, partition_key: str, now: float
    ) -> Claim | None:
        """``Tx.outbox_enqueue`` where the outbox was found, or where it is found now."""
        claim_args = (event, text, fingerprint, partition_key, now)
        try:
            claim = self._tx.outbox_enqueue(*claim_args, place=self._place)
            if claim is None:
                claim = self._tx.outbox_enqueue(*claim_args, place=self._check())
        except BaseException:
            self._forget()
            raise
        return claim

    def _known(self) -> Place | None:
        try:
            found = _FOUND.get(self._key)
        except TypeError:  # None, or a connection that takes no weak reference (sqlite3's)
            return None
        return found[1] if found is not None and found[0] == self._source else None

    def _check(self) -> Place:
        self._forget()
        place = same_database(self._tx, self._source)
        # sqlite3's connections take no weak reference: checked each time, by in-process reads.
        with contextlib.suppress(TypeError):
            _FOUND[self._key] = (self._source, place)
        return place

    def _forget(self) -> None:
        with contextlib.suppress(TypeError):
            _FOUND.pop(self._key, None)


# --- what the caller may hand over ---------------------------------------------------------


def _module_roots(obj: object) -> set[str]:
    """The top-level packages of the object's class and its bases (a subclass of a driver's
    connection, defined in the caller's module, is still the driver's)."""
    return {(cls.__module__ or "").partition(".")[0] for cls in type(obj).__mro__}


def _describe(obj: object) -> str:
    cls = type(obj)
    return f"{cls.__module__}.{cls.__qualname__}"


def _not_accepted(obj: object) -> TypeError:
    return TypeError(f"using: expected {ACCEPTED}; got {_describe(obj)}")


def _same_dialect(found: str, expected: str, what: str) -> None:
    if found != expected:
        raise ValueError(
            f"using: {what} reaches {_DATABASE_NAMES[found]}, but this outbox is in "
            f"{_DATABASE_NAMES[expected]}"
        )


def _on_sqlite3(conn: sqlite3.Connection) -> Tx:
    try:
        in_transaction = conn.in_transaction
    except sqlite3.ProgrammingError as exc:  # a closed connection
        raise ValueError(f"using: the sqlite3 connection cannot be used ({exc})") from exc
    if not in_transaction:
        # Python 3.12 added ``autocommit``: True (autocommit), False (always in a
        # transaction), or the legacy mode, where isolation_level None is autocommit.
        mode = getattr(conn, "autocommit", None)
        if mode is True or (mode is not False and conn.isolation_level is None):
            raise ValueError(NOT_IN_TRANSACTION)
    return _CallerSqliteTx(conn)


def _on_psycopg(conn: object, dialect: str) -> Tx:
    import psycopg

    if isinstance(conn, psycopg.AsyncConnection):
        raise TypeError(
            "using: a psycopg AsyncConnection cannot be written with from synchronous code; "
            "pass a psycopg Connection, or go through SQLAlchemy's "
            "AsyncSession.run_sync(lambda session: ...)"
        )
    if not isinstance(conn, psycopg.Connection):
        raise _not_accepted(conn)
    _same_dialect(POSTGRES, dialect, "a psycopg connection")
    _check_psycopg(conn.info.transaction_status, autocommit=conn.autocommit)
    return _CallerPostgresTx(conn)


def _check_psycopg(status: object, *, autocommit: bool) -> None:
    from psycopg.pq import TransactionStatus

    if status == TransactionStatus.INERROR:
        raise ValueError(
            "using: the connection's transaction has already failed (an earlier statement "
            "raised); roll it back first"
        )
    if status in (TransactionStatus.UNKNOWN, TransactionStatus.ACTIVE):
        raise ValueError(f"using: the connection cannot be used now (it is {status})")
    # Idle without autocommit is fine: psycopg opens the caller's transaction with our first
    # statement, as it would with the caller's own.
    if status == TransactionStatus.IDLE and autocommit:
        raise ValueError(NOT_IN_TRANSACTION)


def _on_sqlalchemy(using: object, dialect: str) -> Tx:
    from sqlalchemy.engine import Connection
    from sqlalchemy.orm import Session

    if isinstance(using, Session):
        # Begins the session's transaction if it has none yet; its commit() covers ours.
        conn = using.connection()
    elif isinstance(using, Connection):
        conn = using
    elif "AsyncSession" in _class_names(using) or "AsyncConnection" in _class_names(using):
        raise TypeError(
            f"using: a SQLAlchemy {type(using).__name__} cannot be written with from "
            "synchronous code; pass the sync session it hands over: "
            "await session.run_sync(lambda s: outbox.publish(event, using=s))"
        )
    else:
        raise _not_accepted(using)
    return _on_sqlalchemy_connection(conn, dialect)


def _class_names(obj: object) -> set[str]:
    return {cls.__name__ for cls in type(obj).__mro__}


def _on_sqlalchemy_connection(conn: SqlAlchemyConnection, dialect: str) -> Tx:
    name, driver_name = conn.dialect.name, conn.dialect.driver
    ours = _DIALECT_OF.get(name)
    if ours is None:
        raise TypeError(
            f"using: a SQLAlchemy connection to {name}: ackledger's outbox is in SQLite or "
            "PostgreSQL"
        )
    _same_dialect(ours, dialect, f"a SQLAlchemy {name} connection")
    if conn.closed or conn.invalidated:
        raise ValueError("using: the SQLAlchemy connection is closed")
    proxied = conn.connection
    # Duck-typed from here: the driver's connection, and SQLAlchemy's DB-API facade of it.
    driver: Any = proxied.driver_connection
    adapted: Any = proxied.dbapi_connection
    roots = _module_roots(driver)
    tx: Tx
    if isinstance(driver, sqlite3.Connection):
        tx = _on_sqlite3(driver)
    elif "psycopg" in roots:
        import psycopg

        if isinstance(driver, psycopg.Connection):
            tx = _on_psycopg(driver, dialect)
        elif isinstance(driver, psycopg.AsyncConnection):
            # The session of AsyncSession.run_sync: SQLAlchemy's DB-API facade over the async
            # driver runs each statement to its end from this (greenlet) side.
            _check_psycopg(driver.info.transaction_status, autocommit=bool(adapted.autocommit))
            tx = _AdaptedPostgresTx(adapted, driver, to_pyformat)
        else:
            raise _unsupported_driver(driver_name, driver)
    elif "asyncpg" in roots:
        if driver.is_closed():
            raise ValueError("using: the SQLAlchemy connection is closed")
        # SQLAlchemy's asyncpg facade opens the transaction with the first statement, unless
        # the connection is in AUTOCOMMIT.
        if bool(adapted.autocommit) and not driver.is_in_transaction():
            raise ValueError(NOT_IN_TRANSACTION)
        tx = _AdaptedPostgresTx(adapted, driver, to_numeric_dollar)
    elif "aiosqlite" in roots:
        tx = _on_aiosqlite(driver, adapted)
    else:
        raise _unsupported_driver(driver_name, driver)
    if not conn.in_transaction():
        # What SQLAlchemy's own first statement would do (autobegin). Without it, writes that
        # went around SQLAlchemy would be lost: its commit() has nothing to commit, and the
        # pool rolls the DB-API connection back when it is returned.
        conn.begin()
    return tx


def _on_aiosqlite(driver: Any, adapted: Any) -> Tx:
    """The sync session of an ``AsyncSession`` on SQLAlchemy's aiosqlite driver."""
    if not driver.in_transaction and adapted.isolation_level is None:
        raise ValueError(NOT_IN_TRANSACTION)  # SQLAlchemy's AUTOCOMMIT: each write alone
    return _AdaptedSqliteTx(adapted, driver)


def _unsupported_driver(name: str, driver: object) -> TypeError:
    return TypeError(
        f"using: SQLAlchemy's {name} driver ({_describe(driver)}) is not supported; ackledger "
        "writes through sqlite3 (pysqlite or aiosqlite), psycopg 3 (sync or async) or asyncpg"
    )


def _on_django(using: object, dialect: str) -> Tx:
    vendor = getattr(using, "vendor", None)
    ensure_connection = getattr(using, "ensure_connection", None)
    if not isinstance(vendor, str) or not callable(ensure_connection):
        raise _not_accepted(using)
    ours = _DIALECT_OF.get(vendor)
    if ours is None:
        raise TypeError(
            f"using: Django's {vendor} connection: ackledger's outbox is in SQLite or PostgreSQL"
        )
    _same_dialect(ours, dialect, f"Django's {vendor} connection")
    ensure_connection()
    raw = getattr(using, "connection", None)
    if isinstance(raw, sqlite3.Connection):
        return _on_sqlite3(raw)
    if "psycopg" in _module_roots(raw):
        return _on_psycopg(raw, dialect)
    raise TypeError(
        f"using: Django's {vendor} connection runs on {_describe(raw)}; ackledger writes "
        "through sqlite3 or psycopg 3 (Django uses psycopg 3 when it is installed)"
    )


# --- transactions on the caller's connection -----------------------------------------------


class _CallerSqliteTx(SqliteTx, OnDriver):
    """SQLite's operations on the caller's sqlite3 connection.

    Rows are read through a cursor of our own, as plain tuples whatever ``row_factory`` the
    caller set. In the sqlite3 module's legacy transaction mode the module opens a transaction
    only before a statement that starts with INSERT, UPDATE, DELETE or REPLACE; any other
    statement that writes (``WITH ... INSERT``) would commit alone. So before a statement that
    is not a SELECT, outside a transaction, we issue the BEGIN the module would have: it is
    the caller's transaction from then on, ended by the caller's commit() or rollback().
    """

    def __init__(self, conn: sqlite3.Connection) -> None:
        super().__init__(conn)
        self.driver = conn

    def _cursor(self, sql: str) -> sqlite3.Cursor:
        conn = self._conn
        if not conn.in_transaction and sql.lstrip()[:6].upper() != "SELECT":
            conn.execute(f"BEGIN {conn.isolation_level or ''}")
        cursor = conn.cursor()
        cursor.row_factory = None
        return cursor

    def execute(self, sql: str, params: Params = ()) -> list[Row]:
        cursor = self._cursor(sql)
        try:
            return cursor.execute(sql, tuple(params)).fetchall()
        finally:
            cursor.close()

    def inbox_reserve_arrivals(
        self, count: int, ahead: Mapping[str, int] | None = None
    ) -> tuple[int, dict[str, int]]:
        # SQLite's own transactions read the counter under the lock their BEGIN IMMEDIATE
        # took; the caller's may not hold it yet, so the numbers are taken by a write.
        return InboxQueries.inbox_reserve_arrivals(self, count, ahead)

    def executemany(self, sql: str, params: Sequence[Params]) -> None:
        cursor = self._cursor(sql)
        try:
            cursor.executemany(sql, [tuple(p) for p in params])
        finally:
            cursor.close()


class _CallerPostgresTx(PostgresTx, OnDriver):
    """PostgreSQL's operations on the caller's psycopg connection, read as plain tuples
    whatever row factory or cursor class the caller (or Django) set on it."""

    def __init__(self, conn: psycopg.Connection[Any]) -> None:
        from psycopg.rows import tuple_row

        super().__init__(conn)
        self._caller_conn = conn
        self.driver = conn
        self._tuple_row = tuple_row

    def execute(self, sql: str, params: Params = ()) -> list[Row]:
        with self._caller_conn.cursor(row_factory=self._tuple_row) as cursor:
            cursor.execute(to_pyformat(sql), tuple(params))
            return cursor.fetchall() if has_rows(cursor) else []

    def executemany(self, sql: str, params: Sequence[Params]) -> None:
        with self._caller_conn.cursor(row_factory=self._tuple_row) as cursor:
            cursor.executemany(to_pyformat(sql), [tuple(p) for p in params])


@functools.lru_cache(maxsize=1024)
def to_numeric_dollar(sql: str) -> str:
    """``?`` placeholders to asyncpg's ``$1, $2, ...`` (the project's SQL has no other ``?``)."""
    parts = sql.split("?")
    return parts[0] + "".join(f"${n}{part}" for n, part in enumerate(parts[1:], start=1))


class _AdaptedPostgresTx(PostgresTx, OnDriver):
    """PostgreSQL's operations through SQLAlchemy's DB-API facade of an asyncio driver
    (psycopg's AsyncConnection or asyncpg), the connection of the sync session that
    ``AsyncSession.run_sync`` passes. SQLAlchemy keeps the driver's rows as tuples (psycopg)
    or records (asyncpg); both become plain tuples here."""

    def __init__(self, adapted: Any, driver: object, placeholders: Callable[[str], str]) -> None:
        super().__init__(adapted)
        self._adapted = adapted
        self.driver = driver
        self._placeholders = placeholders

    def execute(self, sql: str, params: Params = ()) -> list[Row]:
        cursor = self._adapted.cursor()
        try:
            cursor.execute(self._placeholders(sql), tuple(params))
            if cursor.description is None:
                return []
            return [tuple(row) for row in cursor.fetchall()]
        finally:
            cursor.close()

    def executemany(self, sql: str, params: Sequence[Params]) -> None:
        cursor = self._adapted.cursor()
        try:
            cursor.executemany(self._placeholders(sql), [tuple(p) for p in params])
        finally:
            cursor.close()


class _AdaptedSqliteTx(_CallerSqliteTx):
    """SQLite's operations through SQLAlchemy's DB-API facade of aiosqlite (the sync session
    of ``AsyncSession.run_sync``): the BEGIN rule of :class:`_CallerSqliteTx`, the state of
    the transaction read from aiosqlite's connection, rows made plain tuples."""

    def __init__(self, adapted: Any, driver: Any) -> None:
        super().__init__(adapted)
        self._driver = driver
        self.driver = driver

    def _cursor(self, sql: str) -> Any:
        conn: Any = self._conn
        if not self._driver.in_transaction and sql.lstrip()[:6].upper() != "SELECT":
            begin = conn.cursor()
            try:
                begin.execute(f"BEGIN {conn.isolation_level or ''}")
            finally:
                begin.close()
        return conn.cursor()

    def execute(self, sql: str, params: Params = ()) -> list[Row]:
        cursor = self._cursor(sql)
        try:
            cursor.execute(sql, tuple(params))
            return [tuple(row) for row in cursor.fetchall()] if cursor.description else []
        finally:
            cursor.close()
