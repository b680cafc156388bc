"""The store layer: the only place in ackledger that knows SQL.

``open_backend`` turns a target into a backend: a filesystem path is a SQLite database, a
``postgresql://`` URL a PostgreSQL one. Either way the schema is brought up to date on open.
"""

from __future__ import annotations

import os

from .base import Backend, Tx, check_synchronous, migrate

__all__ = ["Backend", "Tx", "open_backend"]

POSTGRES_SCHEMES = ("postgresql://", "postgres://")


def open_backend(target: object, *, synchronous: str = "FULL") -> Backend:
    mode = check_synchronous(synchronous)
    backend: Backend
    if isinstance(target, str) and target.startswith(POSTGRES_SCHEMES):
        from .postgres import open_postgres

        backend = open_postgres(target, synchronous=mode)
    elif isinstance(target, (str, os.PathLike)):
        path = os.fspath(target)
        if not isinstance(path, str) or not path.strip():
            raise ValueError("target: must be a SQLite file path or a postgresql:// URL")
        if "://" in path:
            raise ValueError(f"target: unsupported URL scheme in {path!r}")
        from .sqlite import SqliteBackend

        backend = SqliteBackend(path, synchronous=mode)
    else:
        raise TypeError(
            f"target: must be a path or a postgresql:// URL, got {type(target).__name__}"
        )
    try:
        migrate(backend)
    except BaseException:
        backend.close()
        raise
    return backend
