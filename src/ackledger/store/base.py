"""What every backend offers: transactions of typed operations, and a migration runner.

A backend hands out :class:`Tx` objects. Write transactions take the database's write lock up
front (SQLite: ``BEGIN IMMEDIATE``) so that a transaction never has to upgrade a read lock to a
write lock half-way; read transactions end before the ``with`` block returns, leaving nothing
open.
"""

from __future__ import annotations

import abc
import sqlite3
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from importlib import resources
from typing import TYPE_CHECKING, Protocol, TypeVar

from .executor import Params, Row
from .inbox import InboxQueries
from .leases import LeaseQueries
from .ledger import LedgerQueries
from .outbox import OutboxQueries
from .reconcile import ReconcileQueries
from .refused import RefusedQueries
from .verify import VerifyQueries

if TYPE_CHECKING:
    from .borrowed_async import AwaitOnLoop

__all__ = [
    "Backend",
    "Params",
    "Row",
    "Tx",
    "apply_chain",
    "check_synchronous",
    "migrate",
    "migrations",
]

SYNCHRONOUS_MODES = ("FULL", "NORMAL")

T = TypeVar("T")


def check_synchronous(value: object) -> str:
    if not isinstance(value, str) or value.upper() not in SYNCHRONOUS_MODES:
        raise ValueError(f"synchronous: must be FULL or NORMAL, got {value!r}")
    return value.upper()


class Tx(
    OutboxQueries, InboxQueries, LedgerQueries, LeaseQueries, ReconcileQueries, VerifyQueries,
    RefusedQueries,
):  # fmt: skip
    """One open transaction: one typed method per operation of the outbox (``outbox_*``),
    the inbox (``inbox_*``, ``handler_*``; its refused messages, ``refused_*``), the ledger
    (``ledger_*``), the partition leases (``lease_*``) and the counters (``counter*``), as
    River's driver interface has. The SQL that both databases run alike is written once, in
    the module of its concept; a dialect (``sqlite/``, ``postgres/``) supplies ``execute``/
    ``executemany``, its ``CLOCK`` and ``NEXT_FENCE`` expressions, and the abstract
    operations, whose SQL is its own (``queries.py``). ``execute`` stays for the users' own
    business writes (``Outbox.transaction()``) and the migrations.
    """


class Listener(Protocol):
    """Waits for "an event was published" (``Backend.published_listener``)."""

    def wait(self, timeout: float) -> bool:
        """True if woken before ``timeout`` seconds; raises the driver's error when broken."""

    def close(self) -> None: ...


class Backend(abc.ABC):
    """A database that the outbox, inbox and ledger can live in."""

    dialect: str
    #: A printable name of the database (a path, or a URL without its password).
    location: str
    #: How many transactions threads of one process can have in flight at once (the size of
    #: a connection pool; 1: one connection). Services run up to this many database calls on
    #: worker threads at a time.
    concurrency: int = 1
    #: Whether writers take turns on one lock and a waiting one sleeps between its tries
    #: (SQLite): a long run of write transactions then pauses between them, or it starves
    #: every other writer. False where writers wait in a queue (PostgreSQL's row locks).
    polling_writers: bool = False
    #: Whether a ``write(durable=False)`` commit can be lost only together with every process
    #: that could have read it, never while its writer runs on. A database server can crash and
    #: come back without the commit while its client lives (PostgreSQL: no); an embedded file
    #: cannot (see SqliteBackend). Callers whose write only says "a live process holds this"
    #: may then skip the fsync: losing it is that holder's death, which they already survive.
    relaxed_lost_only_with_writers: bool = False
    #: The plug-in types whose tables ``ensure_plugin`` has made sure of through this object.
    _plugins_ready: frozenset[str] = frozenset()

    @abc.abstractmethod
    def write(self, *, durable: bool = True) -> AbstractContextManager[Tx]:
        """A write transaction: commits when the block ends, rolls back on an exception.

        ``durable=False`` commits this one transaction without waiting for the disk even when
        the backend is opened with synchronous=FULL: it survives a crash of the process, and a
        later durable commit on the same database makes it durable too (SQLite syncs the whole
        WAL file, PostgreSQL flushes its WAL up to the later commit). Only for writes whose loss
        on power failure is harmless and that are followed by a durable one (``dispatch``'s
        ``mark_sync="last"``).
        """

    @abc.abstractmethod
    def read(self) -> AbstractContextManager[Tx]:
        """A consistent read; the transaction is over when the block ends."""

    def lookup(self) -> AbstractContextManager[Tx]:
        """Reads of one statement each, every statement its own snapshot (no BEGIN and no
        COMMIT around them): for a caller that decides on one row, such as the inbox's check
        of a lone re-send. By default ``read``."""
        return self.read()

    def statements(self) -> AbstractContextManager[Tx]:
        """Durable writes where each statement is a transaction of its own, for callers whose
        every statement is all or nothing by itself: on PostgreSQL one round trip each, where
        ``write`` adds a BEGIN and a COMMIT. By default (SQLite: no round trips) ``write``."""
        return self.write()

    def statement(self) -> AbstractContextManager[Tx]:
        """A durable write of exactly one statement that is all or nothing by itself, run as its
        own transaction with nothing around it (the per-item relay's mark of one id). SQLite:
        an autocommit statement, without ``write``'s BEGIN IMMEDIATE and COMMIT (both still
        happen, inside SQLite, with the same write lock and the same durable commit). The
        caller runs one write statement in it, never more: a second would be a second
        transaction. By default ``statements``."""
        return self.statements()

    def inbox_read_or_note(
        self, source: str, event_id: str, fingerprint: str, now: float, counted: str, *, name: str
    ) -> str | None:
        """A lone event's read by key (``lookup``), and when it finds ``fingerprint`` (a
        re-send of the same content) that re-send's note, ``Tx.inbox_note_lone``, committed
        as ``write(durable=False)`` commits it. Returns the stored fingerprint, None when the
        identity is free. The sink's most common request is a re-send: a backend may do both
        through one entry (SQLite does)."""
        with self.lookup() as tx:
            stored = tx.inbox_fingerprint(name, source, event_id)
        if stored == fingerprint:
            with self.write(durable=False) as tx:
                tx.inbox_note_lone(name, source, event_id, now, counted)
        return stored

    @abc.abstractmethod
    def close(self) -> None: ...

    def borrow(self, using: object) -> Tx:
        """A transaction on the caller's connection ``using`` (``publish(event, using=...)``,
        CONTRACT section 3), inside the caller's transaction: nothing done through it is
        committed or rolled back by ackledger. ``store.borrowed.same_database`` then checks
        that it reaches this backend's database. Raises ``TypeError`` for an object that is not
        a connection ackledger can write with, ``ValueError`` for a connection to the other
        kind of database or one that is not in a transaction.
        """
        from . import borrowed

        return borrowed.borrow(using, self.dialect)

    async def run_borrowed(self, using: object, work: Callable[[Tx, AwaitOnLoop], T]) -> T:
        """``borrow`` for the caller's asyncio connection ``using`` (``publish_async`` and
        ``receive_async`` with ``using=``): ``work(tx, await_on_loop)`` on it, inside the
        caller's transaction, without blocking the event loop (``store.borrowed_async``)."""
        from . import borrowed_async

        return await borrowed_async.run_borrowed_awaiting(using, self.dialect, work)

    def published_listener(self) -> Listener | None:
        """A new listener that wakes when an outbox event is published and committed in this
        database by any process, or None where the database cannot tell (SQLite: the relay
        polls). The caller closes it."""
        return None

    def lock_schema(self, tx: Tx) -> None:  # noqa: B027 - deliberately a no-op by default
        """Serialise schema changes between processes for the rest of ``tx``.

        SQLite's ``BEGIN IMMEDIATE`` already does; a server database takes a lock here.
        """

    def prepare_namespace(self) -> None:  # noqa: B027 - deliberately a no-op by default
        """Make the place ackledger's objects go (PostgreSQL: the ``schema=`` asked for), if
        missing, before anything is migrated there."""

    def has_table(self, tx: Tx, name: str) -> bool:
        """Whether the place ackledger's objects go holds a table ``name`` (never a table
        of that name elsewhere on the search path)."""
        from . import namespace

        return namespace.has_table(tx, self.dialect, name)

    def ensure_plugin(self, type_name: str) -> None:
        """The tables of the plug-in of event type ``type_name``, created if missing the first
        time its call or event reaches this backend object (``store.plugin_tables``); a no-op
        after that, and for a type whose plug-in has no tables (or that has no plug-in)."""
        if type_name not in self._plugins_ready:
            from .plugin_tables import migrate_plugin

            migrate_plugin(self, type_name)
            self._plugins_ready = self._plugins_ready | {type_name}


#: Where a database records the migrations it has (``migrate``; ``schema.schema_script`` prints
#: it for a database that another tool migrates). The same text on both dialects.
MIGRATIONS = "ackledger_schema_migrations"
MIGRATIONS_TABLE = (
    f"CREATE TABLE IF NOT EXISTS {MIGRATIONS} ("
    "version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at DOUBLE PRECISION NOT NULL)"
)

Migration = tuple[int, str, str]


def migrations(dialect: str, *, chain: str = "") -> list[Migration]:
    """The migration scripts of a dialect, as ``(version, name, sql)`` in version order.

    ``chain="v2"``: the scripts as they were before ackledger's names took the ``ackledger_``
    prefix, which only a database made then still runs (``namespace.adopt``)."""
    folder = resources.files("ackledger.store").joinpath("migrations", dialect)
    if chain:
        folder = folder.joinpath(chain)
    found: list[Migration] = []
    for entry in folder.iterdir():
        name = entry.name
        if not name.endswith(".sql") or not name[:1].isdigit():
            continue  # the v2/ folder is not this chain's
        version = int(name.split("_", 1)[0])
        found.append((version, name[:-4], entry.read_text(encoding="utf-8")))
    found.sort()
    return found


def split_statements(script: str) -> Iterator[str]:
    """Split a migration script on lines that end in ``;`` (scripts keep one statement a line
    group and never put ``;`` inside literals, which keeps this split exact)."""
    buffer: list[str] = []
    for line in script.splitlines():
        stripped = line.strip()
        if not buffer and (not stripped or stripped.startswith("--")):
            continue
        buffer.append(line)
        if stripped.endswith(";"):
            yield "\n".join(buffer)
            buffer = []
    if any(part.strip() for part in buffer):
        yield "\n".join(buffer)


def migrate(backend: Backend, *, upto: int | None = None) -> int:
    """Apply every migration the database lacks (up to version ``upto``, if given), each in
    its own write transaction; returns how many were applied.

    A database that ackledger wrote before its names took the ``ackledger_`` prefix is first
    brought to the end of that chain and renamed (``namespace.adopt``); a new one gets the
    prefixed names from its first statement, so a user's table named ``outbox`` or ``events``
    is never touched. The version check happens inside the write transaction, after
    ``lock_schema``, so processes that open a new database at the same moment apply each
    migration exactly once.
    """
    from . import namespace

    shipped = [found for found in migrations(backend.dialect) if upto is None or found[0] <= upto]
    if not _lacks_any(backend, {version for version, _, _ in shipped}):
        return 0
    backend.prepare_namespace()
    applied = namespace.adopt(backend)
    with backend.write() as tx:
        backend.lock_schema(tx)
        tx.execute(MIGRATIONS_TABLE)
    return applied + apply_chain(backend, shipped, MIGRATIONS)


def apply_chain(backend: Backend, chain: list[Migration], table: str) -> int:
    """Apply the scripts of ``chain`` that ``table`` does not record, each in its own write
    transaction under ``lock_schema``, recording each there; returns how many ran."""
    applied = 0
    for version, name, script in chain:
        with backend.write() as tx:
            backend.lock_schema(tx)
            if tx.one(f"SELECT 1 FROM {table} WHERE version = ?", (version,)):
                continue
            for statement in split_statements(script):
                tx.execute(statement)
            tx.execute(
                f"INSERT INTO {table} (version, name, applied_at) "
                "VALUES (?, ?, CAST(? AS DOUBLE PRECISION))",
                (version, name, time.time()),
            )
            applied += 1
    return applied


def _lacks_any(backend: Backend, versions: set[int]) -> bool:
    """Whether the database lacks one of ``versions``, told by a read alone.

    Opening a database that is up to date must not write: a write transaction waits for any
    other process's (SQLite's ``BEGIN IMMEDIATE``), and ``pending`` or ``status`` would hang
    behind a busy relay. Whatever the read cannot tell (no table yet) is left to the write
    path, which checks again under the schema lock.
    """
    try:
        with backend.read() as tx:
            recorded = {int(row[0]) for row in tx.execute(f"SELECT version FROM {MIGRATIONS}")}
    except _no_table_errors():
        return True
    return not versions <= recorded


def _no_table_errors() -> tuple[type[Exception], ...]:
    """What a read of a table that does not exist raises (psycopg's only once it is loaded);
    a server that cannot be reached is not one of them, so it is not waited for twice."""
    found: list[type[Exception]] = [sqlite3.OperationalError]
    psycopg = sys.modules.get("psycopg")
    if psycopg is not None:
        found.append(psycopg.errors.UndefinedTable)
    return tuple(found)


def schema_versions(backend: Backend) -> list[tuple[int, str]]:
    """The migrations recorded in the database, as ``(version, name)`` in version order."""
    with backend.read() as tx:
        rows = tx.execute(f"SELECT version, name FROM {MIGRATIONS} ORDER BY version")
    return [(int(version), str(name)) for version, name in rows]
