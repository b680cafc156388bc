"""What the outbox, the inbox and the ledger share as objects: one backend, opened from a target."""

from __future__ import annotations

import os

from .._core.closing import Closing
from . import Backend, open_backend


class Database(Closing):
    """Owns one backend (a SQLite path or a ``postgresql://`` URL, schema brought up to date);
    a context manager that closes it. ``schema``: PostgreSQL's schema for ackledger's objects
    (``store.open_backend``)."""

    def __init__(
        self,
        target: str | os.PathLike[str],
        *,
        synchronous: str = "FULL",
        schema: str | None = None,
    ) -> None:
        self._db: Backend = open_backend(target, synchronous=synchronous, schema=schema)

    @property
    def backend(self) -> Backend:
        return self._db

    def close(self) -> None:
        self._db.close()
