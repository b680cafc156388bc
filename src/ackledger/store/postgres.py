"""PostgreSQL backend (psycopg 3). Not built yet: see issue 6."""

from __future__ import annotations

from .base import Backend


def open_postgres(url: str, synchronous: str = "FULL") -> Backend:
    raise NotImplementedError("the PostgreSQL backend is not built yet")
