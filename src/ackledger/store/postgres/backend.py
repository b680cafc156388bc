"""PostgreSQL: psycopg 3 with a small connection pool, READ COMMITTED writes.

psycopg is imported only when a ``postgresql://`` target is opened, so SQLite users install
nothing. Every statement of the project is written with ``?`` placeholders; they are rewritten
to psycopg's ``%s`` once per statement text (a literal ``%`` becomes ``%%``).

Durability: ``synchronous="FULL"`` is ``synchronous_commit = on`` (a commit returns once its WAL
is flushed to disk); ``"NORMAL"`` is ``synchronous_commit = off`` (a commit returns before its
WAL is flushed: a crash of the PostgreSQL *server* can lose the last commits, about the last
``3 * wal_writer_delay``; it never corrupts the database, and a crash of our process loses
nothing that was committed).
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from ..base import Backend, Listener, Tx, check_synchronous
from .schema_name import quote_identifier, split_schema
from .tx import PostgresTx

if TYPE_CHECKING:
    import psycopg
    from psycopg_pool import ConnectionPool

#: Connections per backend object. Each Outbox/Inbox holds its own pool; the work that goes
#: through one object is short transactions, so a few connections are plenty.
POOL_SIZE = 4
CONNECT_TIMEOUT_S = 10
#: Any constant shared by all ackledger processes: the key of the migration advisory lock.
MIGRATION_LOCK_KEY = 0x61636B6C  # "ackl"

SYNCHRONOUS_COMMIT = {"FULL": "on", "NORMAL": "off"}
SCHEMA_EXISTS = "SELECT 1 FROM pg_namespace WHERE nspname = ?"


def redact(url: str) -> str:
    """The URL without its password (in the user-info part or as a query parameter)."""
    parts = urlsplit(url)
    netloc = parts.netloc
    if "@" in netloc:
        userinfo, host = netloc.rsplit("@", 1)
        netloc = f"{userinfo.split(':', 1)[0]}@{host}"
    query = urlencode([(k, v) for k, v in parse_qsl(parts.query) if k != "password"])
    return urlunsplit((parts.scheme, netloc, parts.path, query, parts.fragment))


class PostgresBackend(Backend):
    dialect = "postgres"

    def __init__(
        self,
        url: str,
        synchronous: str = "FULL",
        *,
        pool_size: int = POOL_SIZE,
        schema: str | None = None,
    ) -> None:
        self.synchronous = check_synchronous(synchronous)
        self.location = redact(url)
        self.url, self.schema = split_schema(url, schema)
        self._pool_size = pool_size
        self.concurrency = pool_size
        self._pool: ConnectionPool[Any] | None = None
        self._closed = False
        self._lock = threading.Lock()
        self._local = threading.local()

    def _configure(self, conn: psycopg.Connection[Any]) -> None:
        # Session settings, applied once per pooled connection (autocommit, so they stick).
        conn.execute(f"SET synchronous_commit = {SYNCHRONOUS_COMMIT[self.synchronous]}")
        conn.execute("SET client_min_messages = warning")  # no "already exists, skipping"
        if self.schema is not None:
            # ackledger's objects are found and created in the schema first; the user's own
            # statements (``Outbox.transaction()``) still find their tables further along.
            conn.execute(
                "SELECT set_config('search_path', %s || ', ' || current_setting('search_path'), "
                "false)",
                (quote_identifier(self.schema),),
            )

    def _connect_kwargs(self) -> dict[str, Any]:
        from psycopg.conninfo import conninfo_to_dict

        kwargs: dict[str, Any] = {"autocommit": True}
        if "connect_timeout" not in conninfo_to_dict(self.url):
            kwargs["connect_timeout"] = CONNECT_TIMEOUT_S
        if "application_name" not in conninfo_to_dict(self.url):
            kwargs["application_name"] = "ackledger"
        return kwargs

    def pool(self) -> ConnectionPool[Any]:
        """The pool, opened on first use."""
        with self._lock:
            if self._closed:
                raise RuntimeError(f"the database {self.location} is closed")
            if self._pool is None:
                self._pool = self._open_pool()
            return self._pool

    def _open_pool(self) -> ConnectionPool[Any]:
        from ..._core.extras import needing_extra

        with needing_extra("a postgresql:// target"):
            import psycopg
            from psycopg_pool import ConnectionPool

        kwargs = self._connect_kwargs()
        # One direct attempt first: an unreachable server fails at once with libpq's own
        # reason, where a pool would retry in the background until its time-out.
        psycopg.connect(self.url, **kwargs).close()
        pool: ConnectionPool[Any] = ConnectionPool(
            self.url,
            kwargs=kwargs,
            min_size=1,
            max_size=self._pool_size,
            open=False,
            configure=self._configure,
            name=f"ackledger {self.location}",
            num_workers=1,
        )
        pool.open(wait=True, timeout=CONNECT_TIMEOUT_S)
        return pool

    @contextmanager
    def _connection(self) -> Iterator[psycopg.Connection[Any]]:
        # SQLite refuses a transaction inside another on the same connection; here the inner
        # one would take a second pooled connection and could wait forever for a lock the
        # outer one holds. Refuse it the same way.
        if getattr(self._local, "busy", False):
            raise RuntimeError(
                f"a transaction on {self.location} is already open in this thread; "
                "do the work inside it instead of opening another"
            )
        self._local.busy = True
        try:
            with self.pool().connection() as conn:
                yield conn
        finally:
            self._local.busy = False

    @contextmanager
    def write(self, *, durable: bool = True) -> Iterator[Tx]:
        # READ COMMITTED (the server default): each statement sees what is committed when it
        # starts; the project's SQL is written so that this is enough (claims are single
        # INSERT ... ON CONFLICT statements, leases are checked in the statement that marks).
        with self._connection() as conn, conn.transaction():
            if not durable and self.synchronous == "FULL":
                # For this transaction only; a later synchronous commit flushes the WAL up to
                # its own record, which covers this one.
                conn.execute("SET LOCAL synchronous_commit = off")
            yield PostgresTx(conn)

    @contextmanager
    def statements(self) -> Iterator[Tx]:
        # The pool's connections are in autocommit: each statement commits (synchronously, as
        # the session's synchronous_commit says) when it is done.
        with self._connection() as conn:
            yield PostgresTx(conn)

    def lookup(self) -> AbstractContextManager[Tx]:
        # Autocommit, as for statements: one round trip per read instead of three.
        return self.statements()

    @contextmanager
    def read(self) -> Iterator[Tx]:
        # A snapshot for the whole block, like SQLite's read transaction, and never a write.
        with self._connection() as conn:
            conn.execute("BEGIN ISOLATION LEVEL REPEATABLE READ, READ ONLY")
            try:
                yield PostgresTx(conn)
            except BaseException:
                # A broken connection cannot roll back; the pool discards it either way.
                with contextlib.suppress(Exception):
                    conn.execute("ROLLBACK")
                raise
            conn.execute("COMMIT")

    def published_listener(self) -> Listener:
        # A connection of its own, outside the pool: it stays in LISTEN for the relay's life.
        from .notify import PublishedListener

        return PublishedListener(self.url, self._connect_kwargs())

    def lock_schema(self, tx: Tx) -> None:
        # Held until the migration transaction ends: processes that open a new database at
        # once queue here, and each then sees what the one before it committed.
        tx.execute("SELECT pg_advisory_xact_lock(?)", (MIGRATION_LOCK_KEY,))

    def prepare_namespace(self) -> None:
        if self.schema is None:
            return
        with self.read() as tx:
            if tx.one(SCHEMA_EXISTS, (self.schema,)) is not None:
                return
        with self.write() as tx:
            self.lock_schema(tx)  # two processes creating one schema at once: one waits
            tx.execute(f"CREATE SCHEMA IF NOT EXISTS {quote_identifier(self.schema)}")

    def close(self) -> None:
        with self._lock:
            self._closed = True
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.close()


def open_postgres(url: str, synchronous: str = "FULL", *, schema: str | None = None) -> Backend:
    return PostgresBackend(url, synchronous, schema=schema)
