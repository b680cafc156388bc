"""SQLite: WAL, a chosen ``synchronous`` level, a busy timeout, ``BEGIN IMMEDIATE`` writes."""

from __future__ import annotations

import os
import sqlite3
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from .base import Backend, Params, Row, Tx, check_synchronous

BUSY_TIMEOUT_MS = 30_000


class SqliteTx(Tx):
    dialect = "sqlite"

    def __init__(self, conn: sqlite3.Connection) -> None:
        self._conn = conn

    def execute(self, sql: str, params: Params = ()) -> list[Row]:
        return self._conn.execute(sql, tuple(params)).fetchall()

    def executemany(self, sql: str, params: Sequence[Params]) -> None:
        self._conn.executemany(sql, [tuple(p) for p in params])


class SqliteBackend(Backend):
    dialect = "sqlite"

    def __init__(self, path: str | os.PathLike[str], synchronous: str = "FULL") -> None:
        mode = check_synchronous(synchronous)
        self.path = Path(path)
        self.location = str(self.path)
        if self.path.is_dir():
            raise ValueError(f"database path is a directory: {self.path}")
        if not self.path.parent.is_dir():
            raise ValueError(f"database directory does not exist: {self.path.parent}")
        # isolation_level=None: the module never opens transactions behind our back; every
        # transaction here is an explicit BEGIN ... COMMIT.
        self._conn = sqlite3.connect(
            self.path, isolation_level=None, check_same_thread=False, timeout=BUSY_TIMEOUT_MS / 1000
        )
        self._lock = threading.RLock()
        self._conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
        journal = self._conn.execute("PRAGMA journal_mode = WAL").fetchone()
        if journal is None or str(journal[0]).lower() != "wal":
            raise RuntimeError(f"could not switch {self.path} to WAL mode (got {journal!r})")
        self._conn.execute(f"PRAGMA synchronous = {mode}")
        self._conn.execute("PRAGMA foreign_keys = ON")
        self.synchronous = mode

    @contextmanager
    def write(self, *, durable: bool = True) -> Iterator[Tx]:
        with self._lock:
            # synchronous is read when the transaction commits; in WAL mode NORMAL skips only
            # that commit's fsync, and the next FULL commit's fsync covers the whole WAL file.
            relaxed = not durable and self.synchronous == "FULL"
            if relaxed:
                self._conn.execute("PRAGMA synchronous = NORMAL")
            try:
                self._conn.execute("BEGIN IMMEDIATE")
                try:
                    yield SqliteTx(self._conn)
                except BaseException:
                    self._conn.execute("ROLLBACK")
                    raise
                self._conn.execute("COMMIT")
            finally:
                if relaxed:
                    self._conn.execute("PRAGMA synchronous = FULL")

    @contextmanager
    def read(self) -> Iterator[Tx]:
        with self._lock:
            self._conn.execute("BEGIN DEFERRED")
            try:
                yield SqliteTx(self._conn)
            finally:
                self._conn.execute("COMMIT")

    def in_transaction(self) -> bool:
        return self._conn.in_transaction

    def close(self) -> None:
        with self._lock:
            self._conn.close()
