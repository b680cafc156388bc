"""SQLite's connection: WAL, a chosen ``synchronous`` level, a busy timeout, ``BEGIN IMMEDIATE``
writes (and a second connection for a FULL database's relaxed writes)."""

from __future__ import annotations

import contextlib
import os
import sqlite3
import threading
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from types import TracebackType

from ..base import Backend, Tx, check_synchronous
from ..inbox import INBOX_FINGERPRINT
from .tx import SqliteTx, note_lone

BUSY_TIMEOUT_MS = 30_000
#: The page size of databases this backend creates (see SqliteBackend.__init__).
PAGE_SIZE = 2048


class _WriteTransaction(AbstractContextManager[Tx]):
    """``SqliteBackend.write``: one object per connection, entered by every write transaction.

    A plain class rather than a ``@contextmanager`` generator: short transactions (a ledger
    request is two statements) spend a noticeable share of their time creating and driving
    a generator per transaction.
    """

    __slots__ = ("_conn", "_lock", "_others_busy", "_tx")

    def __init__(
        self, conn: sqlite3.Connection, lock: threading.RLock, others_busy: Callable[[], bool]
    ) -> None:
        self._conn = conn
        self._lock = lock
        self._tx = SqliteTx(conn)
        #: Is the backend's other connection in a transaction? A write begun here inside it
        #: would wait out the busy timeout on that one's lock: it is refused at once instead,
        #: as a nested BEGIN on one connection is.
        self._others_busy = others_busy

    def __enter__(self) -> Tx:
        self._lock.acquire()
        try:
            if self._others_busy():
                raise sqlite3.OperationalError("cannot start a transaction within a transaction")
            self._conn.execute("BEGIN IMMEDIATE")
        except BaseException:
            self._lock.release()
            raise
        return self._tx

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        try:
            if exc_type is not None:
                self._conn.execute("ROLLBACK")
                return
            try:
                self._conn.execute("COMMIT")
            except BaseException:
                # A failed COMMIT (disk full, I/O error) can leave the transaction open; the
                # caller sees the error, so nothing of it may be committed by a later one.
                if self._conn.in_transaction:
                    with contextlib.suppress(sqlite3.Error):
                        self._conn.execute("ROLLBACK")
                raise
        finally:
            self._lock.release()


class _Autocommit(AbstractContextManager[Tx]):
    """``SqliteBackend.lookup`` and ``statement``: the connection is in autocommit between
    transactions (isolation_level=None), so each statement is a transaction of its own,
    without a BEGIN and a COMMIT to run through Python. A write statement takes the write
    lock before it reads (its first opcode asks for a write transaction, waiting on the busy
    timeout as BEGIN IMMEDIATE does) and commits with the connection's ``synchronous``: FULL,
    for the main connection. A plain class, as for ``_WriteTransaction``."""

    __slots__ = ("_conn", "_lock", "_others_busy", "_tx")

    def __init__(
        self, conn: sqlite3.Connection, lock: threading.RLock, others_busy: Callable[[], bool]
    ) -> None:
        self._conn = conn
        self._lock = lock
        self._tx = SqliteTx(conn)
        #: Is the relaxed writes' connection in a transaction (see ``_WriteTransaction``)?
        self._others_busy = others_busy

    def __enter__(self) -> Tx:
        self._lock.acquire()
        try:
            # A closed connection raises here: the lock is not kept by a failed entry (the
            # backend's close would wait for it for ever).
            busy = self._conn.in_transaction or self._others_busy()
        except BaseException:
            self._lock.release()
            raise
        if busy:
            # Inside this thread's own open transaction the statement would read what that
            # transaction has not committed, and a write would be committed (or rolled back)
            # only with it; refused, as ``read`` and ``write`` refuse it (their BEGIN).
            self._lock.release()
            raise sqlite3.OperationalError("cannot start a transaction within a transaction")
        return self._tx

    def __exit__(self, exc_type: type[BaseException] | None, *rest: object) -> None:
        # Nothing to end: the statement was its own transaction. Only a statement that failed
        # at its commit (an I/O error) could leave it open, and then nothing of it may be
        # committed by a later one: rolled back, as ``_WriteTransaction`` does.
        try:
            if exc_type is not None:
                with contextlib.suppress(sqlite3.Error):  # a closed connection: nothing open
                    if self._conn.in_transaction:
                        self._conn.execute("ROLLBACK")
        finally:
            self._lock.release()


class SqliteBackend(Backend):
    dialect = "sqlite"
    polling_writers = True
    #: A committed WAL transaction is in the host's page cache and survives any process's
    #: crash; only the host going down loses it unsynced, and every process that uses the file
    #: is on that host (WAL needs shared memory), so it goes down with them.
    relaxed_lost_only_with_writers = True

    def __init__(self, path: str | os.PathLike[str], synchronous: str = "FULL") -> None:
        mode = check_synchronous(synchronous)
        self.path = Path(path)
        self.location = str(self.path)
        if self.path.is_dir():
            raise ValueError(f"database path is a directory: {self.path}")
        if not self.path.parent.is_dir():
            raise ValueError(f"database directory does not exist: {self.path.parent}")
        if self.path.exists() and not self.path.is_file():
            # A device, a FIFO or a socket (or a link to one): SQLite would block on it, or
            # fail only after creating a journal beside it (``/dev/full-journal``).
            raise ValueError(f"database path is not a regular file: {self.path}")
        created = not os.path.lexists(self.path)
        # isolation_level=None: the module never opens transactions behind our back; every
        # transaction here is an explicit BEGIN ... COMMIT.
        self._conn = sqlite3.connect(
            self.path, isolation_level=None, check_same_thread=False, timeout=BUSY_TIMEOUT_MS / 1000
        )
        self._lock = threading.RLock()
        try:
            self._configure(mode)
        except BaseException:
            self._conn.close()  # a file we cannot use is not left open
            if created:
                _remove_if_empty(self.path)
            raise
        self.synchronous = mode
        #: The connection of ``write(durable=False)`` in a FULL database, opened on first use.
        self._relaxed_conn: sqlite3.Connection | None = None
        self._write = _WriteTransaction(self._conn, self._lock, self._relaxed_busy)
        self._relaxed_write: _WriteTransaction | None = None if mode == "FULL" else self._write
        #: The connection the relaxed writes commit on, once known (``inbox_read_or_note``).
        self._note_conn: sqlite3.Connection | None = None if mode == "FULL" else self._conn
        self._autocommit = _Autocommit(self._conn, self._lock, self._relaxed_busy)
        #: The connection ``inbox_read_or_note`` reads with next.
        self._lone_reader = self._conn

    def _configure(self, mode: str) -> None:
        self._conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
        # Only a file that has no database yet takes this (a WAL database keeps the page size
        # it was made with). Every commit appends its changed pages, checksummed, to the WAL;
        # our rows are small (an outbox, inbox or ledger row is 100-400 bytes) and a commit
        # changes a few scattered pages, so half-size pages halve the bytes written and
        # summed per commit: Outbox.accept and Ledger.request +6-13% with FULL and +18-21%
        # with NORMAL.
        self._conn.execute(f"PRAGMA page_size = {PAGE_SIZE}")
        journal = self._conn.execute("PRAGMA journal_mode = WAL").fetchone()
        if journal is None or str(journal[0]).lower() != "wal":
            # A database error like any other: the command line reports it in one line.
            raise sqlite3.OperationalError(
                f"could not switch {self.path} to WAL mode (got {journal!r})"
            )
        self._conn.execute(f"PRAGMA synchronous = {mode}")
        self._conn.execute("PRAGMA foreign_keys = ON")

    def write(self, *, durable: bool = True) -> AbstractContextManager[Tx]:
        # Reentrant per thread like the lock it takes: a nested write fails at BEGIN (SQLite
        # has no nested transactions) and leaves the outer one as it was.
        if durable:
            return self._write
        return self._relaxed_write or self._open_relaxed()

    def _open_relaxed(self) -> _WriteTransaction:
        """A FULL database's relaxed writes commit on a second connection of their own with
        synchronous=NORMAL. In WAL mode NORMAL skips only its own commits' fsync, and the next
        FULL commit's fsync covers the whole WAL file, theirs included. It replaces switching
        this connection's ``PRAGMA synchronous`` to NORMAL and back around each one, ~13k
        instructions per PRAGMA.
        Both connections take this backend's one lock, so they never wait on each other."""
        with self._lock:
            if self._relaxed_write is None:
                conn = sqlite3.connect(
                    self.path,
                    isolation_level=None,
                    check_same_thread=False,
                    timeout=BUSY_TIMEOUT_MS / 1000,
                )
                try:
                    conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
                    conn.execute("PRAGMA synchronous = NORMAL")
                    conn.execute("PRAGMA foreign_keys = ON")
                except BaseException:
                    conn.close()
                    raise
                self._relaxed_conn = self._note_conn = conn
                self._relaxed_write = _WriteTransaction(conn, self._lock, self._main_busy)
            return self._relaxed_write

    def _main_busy(self) -> bool:
        return self._conn.in_transaction

    def _relaxed_busy(self) -> bool:
        conn = self._relaxed_conn
        return conn is not None and conn.in_transaction

    def lookup(self) -> AbstractContextManager[Tx]:
        return self._autocommit

    def inbox_read_or_note(
        self, source: str, event_id: str, fingerprint: str, now: float, counted: str, *, name: str
    ) -> str | None:
        """``Backend.inbox_read_or_note`` under one hold of the lock: the read in autocommit
        on the main connection, a re-send's note in a write transaction of the relaxed
        writes' connection, with ``lookup``'s and ``write``'s refusals and endings but not
        their two context managers (~10 Python calls a re-send)."""
        with self._lock:
            conn, note = self._conn, self._note_conn
            if conn.in_transaction or (note is not None and note.in_transaction):
                # Inside this thread's own transaction (either connection's): refused, as
                # ``lookup`` and ``write`` refuse it.
                raise sqlite3.OperationalError("cannot start a transaction within a transaction")
            # Read on the connection this wrote with last (the note's after a re-send, the
            # main one after a new event): a WAL connection drops its page cache when it sees
            # another's commit, so a run of re-sends keeps its pages warm (~4k instructions
            # a re-send). Either sees what is committed.
            key = (name, source, event_id)
            found = self._lone_reader.execute(INBOX_FINGERPRINT, key).fetchone()
            if found is None:
                self._lone_reader = conn  # a new event's write follows, on the main one
                return None
            stored = str(found[0])
            if stored == fingerprint:
                if note is None:  # a FULL database's first re-send: opened as ``write`` opens it
                    self._open_relaxed()
                    note = self._note_conn
                    assert note is not None
                note.execute("BEGIN IMMEDIATE")
                try:
                    note_lone(note, source, event_id, now, counted, name=name)
                    note.execute("COMMIT")
                except BaseException:
                    # Rolled back whether the note or its COMMIT failed, as
                    # ``_WriteTransaction.__exit__`` does: nothing of it is left open.
                    if note.in_transaction:
                        with contextlib.suppress(sqlite3.Error):
                            note.execute("ROLLBACK")
                    raise
                self._lone_reader = note
            return stored

    def statement(self) -> AbstractContextManager[Tx]:
        # One UPDATE in autocommit: ~13k instructions fewer than BEGIN IMMEDIATE, the UPDATE
        # and COMMIT as three calls, the same lock and commit.
        return self._autocommit

    @contextmanager
    def read(self) -> Iterator[Tx]:
        with self._lock:
            if self._relaxed_busy():
                raise sqlite3.OperationalError("cannot start a transaction within a transaction")
            self._conn.execute("BEGIN DEFERRED")
            try:
                yield SqliteTx(self._conn)
            finally:
                self._conn.execute("COMMIT")

    def in_transaction(self) -> bool:
        return self._conn.in_transaction or self._relaxed_busy()

    def close(self) -> None:
        with self._lock:
            if self._relaxed_conn is not None:
                self._relaxed_conn.close()
            self._conn.close()


def _remove_if_empty(path: Path) -> None:
    """Take back the empty file (and its journal) that a failed first open created: a refusal
    leaves nothing behind. A file with content is another process's database by now."""
    with contextlib.suppress(OSError):
        if path.stat().st_size == 0:
            journal = path.with_name(path.name + "-journal")
            if journal.exists() and journal.stat().st_size == 0:
                journal.unlink()
            path.unlink()


def foreign_file(path: str) -> str | None:
    """Why the existing file at ``path`` is not an ackledger database, or None if it is one.

    Opening a database migrates it, which adds our tables and switches it to WAL. That is
    right for a file meant to hold an outbox (even beside an application's own tables), and
    wrong for a file a command that only reads or operates was pointed at by mistake: this
    looks first, read-only, without changing the file.

    It looks only through SQLite, never through a descriptor of its own: POSIX drops every
    lock a process holds on a file when it closes any descriptor of that file, so an open and
    close here would take the locks of this process's other connections to the same database
    with it (``relay --pipeline`` checks the file again for its second connection). SQLite
    keeps its connections in one process from doing that to each other.
    """
    if os.path.getsize(path) == 0:
        # SQLite would take an empty file as a new database, and migrating would fill it.
        return f"{path!r} is empty, not an ackledger database"
    try:
        conn = sqlite3.connect(f"{Path(path).resolve().as_uri()}?mode=ro", uri=True)
        try:
            names = {
                str(row[0])
                for row in conn.execute(
                    "SELECT name FROM sqlite_master WHERE type = 'table' AND name IN "
                    "('ackledger_schema_migrations', 'ackledger_outbox', 'schema_migrations', "
                    "'outbox')"
                )
            }
        finally:
            conn.close()
    except sqlite3.DatabaseError as exc:
        return f"{path!r} is not a SQLite database ({exc})"
    # The second pair: a database made before ackledger's names took their prefix, which
    # opening renames (store/namespace.py).
    if not (
        {"ackledger_schema_migrations", "ackledger_outbox"} <= names
        or names
        == {
            "schema_migrations",
            "outbox",
        }
    ):
        return (
            f"{path!r} is a SQLite database without ackledger's schema "
            f"(run `ackledger migrate --target {path}` if it is meant to hold one)"
        )
    return None
