"""What the outbox, the inbox and the ledger share as objects: one backend, opened from a target."""

from __future__ import annotations

import os

from ..store import Backend, open_backend
from .closing import Closing


class Database(Closing):
    """Owns one backend (a SQLite path or a ``postgresql://`` URL, schema brought up to date);
    a context manager that closes it."""

    def __init__(self, target: str | os.PathLike[str], *, synchronous: str = "FULL") -> None:
        self._db: Backend = open_backend(target, synchronous=synchronous)

    @property
    def backend(self) -> Backend:
        return self._db

    def close(self) -> None:
        self._db.close()
