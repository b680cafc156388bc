"""The store layer: the only place in ackledger that knows SQL.

``open_backend`` turns a target into a backend: a filesystem path is a SQLite database, a
``postgresql://`` URL a PostgreSQL one. Either way the schema is brought up to date on open.
"""

from __future__ import annotations

import os
import sqlite3
import sys
from contextlib import AbstractContextManager
from typing import TypeGuard

from .base import Backend, Tx, check_synchronous, migrate

__all__ = [
    "Backend",
    "Tx",
    "borrow_at",
    "database_errors",
    "is_database_url",
    "not_existing",
    "open_backend",
    "scratch_database",
    "target_dialect",
    "unreachable_errors",
    "without_password",
]

POSTGRES_SCHEMES = ("postgresql://", "postgres://")


def is_postgres(target: object) -> TypeGuard[str]:
    return isinstance(target, str) and target.startswith(POSTGRES_SCHEMES)


def is_database_url(target: object) -> TypeGuard[str]:
    """A URL that names a database server (``postgresql://``), not a SQLite file's path nor a
    service's ``http(s)://`` address. Relays on several hosts can share such a database, so
    they take partition leases in it."""
    return is_postgres(target)


def without_password(target: str | os.PathLike[str]) -> str:
    """A target as it may be printed: a PostgreSQL URL loses its password (the same form as
    ``Backend.location``), a path is printed as given."""
    if is_postgres(target):
        from .postgres import redact

        return redact(target)
    return os.fspath(target)


def database_errors() -> tuple[type[Exception], ...]:
    """The database driver errors a command line should report in one line.

    psycopg's are included only once it is loaded, so this never imports it.
    """
    found: list[type[Exception]] = [sqlite3.DatabaseError]
    psycopg = sys.modules.get("psycopg")
    if psycopg is not None:
        found.append(psycopg.Error)
    return tuple(found)


def unreachable_errors() -> tuple[type[Exception], ...]:
    """Of ``database_errors``, those that say the database could not be reached or used now
    (refused connection, a lock held too long, a full disk) rather than that the input was
    wrong: the command line exits 4 for them, not 2. psycopg's only once it is loaded."""
    found: list[type[Exception]] = [sqlite3.OperationalError]
    psycopg = sys.modules.get("psycopg")
    if psycopg is not None:
        found.append(psycopg.OperationalError)
    return tuple(found)


def not_existing(path: str) -> str | None:
    """Why the database file ``path`` is missing or not ackledger's (another program's
    SQLite file), or None when it is one: told without creating, opening as a backend or
    migrating anything, for commands that only read or operate."""
    if not os.path.isfile(path):
        return f"no database at {path!r}"
    from .sqlite import foreign_file

    return foreign_file(path)


def scratch_database(server: str, prefix: str) -> AbstractContextManager[str]:
    """A new empty database on the server that the database URL ``server`` names (its name
    ``prefix`` and a random part), the block given its URL; dropped when the block ends,
    also after an error or Ctrl-C."""
    if not is_database_url(server):
        raise ValueError(f"server: must be a database URL, got {without_password(server)!r}")
    from .postgres.scratch import scratch_database as on_postgres

    return on_postgres(server, prefix)


def target_dialect(target: object) -> str:
    """The dialect a target names, ``"sqlite"`` or ``"postgres"``, told from the target alone
    (nothing is opened, created or connected); ValueError or TypeError for what names neither."""
    return _classify(target)[0]


def borrow_at(target: object, using: object) -> Tx:
    """``Backend.borrow`` of the database ``target`` names, without opening it: for a caller
    that holds a connection to it (Django's) but no backend of its own."""
    from .borrowed import borrow

    return borrow(using, target_dialect(target))


def _classify(target: object) -> tuple[str, str]:
    """``(dialect, target as a str)``, or the error ``target_dialect`` raises."""
    if is_postgres(target):
        return "postgres", target
    if not isinstance(target, (str, os.PathLike)):
        raise TypeError(
            f"target: must be a path or a postgresql:// URL, got {type(target).__name__}"
        )
    path = os.fspath(target)
    if not isinstance(path, str) or not path.strip():
        raise ValueError("target: must be a SQLite file path or a postgresql:// URL")
    if "://" in path:
        raise ValueError(f"target: unsupported URL scheme in {path!r}")
    if path.strip() == ":memory:" or path.startswith("file:"):
        # An in-memory database dies with its connection and cannot be in WAL mode; the
        # outbox, the inbox and the ledger are files that other processes open too.
        raise ValueError(f"target: must be a file path, got {path!r}")
    return "sqlite", path


def open_backend(
    target: object,
    *,
    synchronous: str = "FULL",
    migrate_schema: bool = True,
    schema: str | None = None,
) -> Backend:
    """The backend of ``target``, its schema brought up to date unless ``migrate_schema`` is
    False. ``schema``: PostgreSQL only, the schema ackledger's objects go into (also
    ``?schema=NAME`` in the URL), created if missing; by default the search path's first."""
    mode = check_synchronous(synchronous)
    backend: Backend
    dialect, where = _classify(target)
    if dialect == "postgres":
        from .postgres import open_postgres

        backend = open_postgres(where, synchronous=mode, schema=schema)
    else:
        if schema is not None:
            raise ValueError("schema: only for a PostgreSQL target, not a SQLite file")
        from .sqlite import SqliteBackend

        backend = SqliteBackend(where, synchronous=mode)
    if not migrate_schema:
        return backend
    try:
        migrate(backend)
    except BaseException:
        backend.close()
        raise
    return backend
