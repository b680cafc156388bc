"""Scratch databases on a PostgreSQL server (``verify``): made with a unique name, dropped
with ``FORCE`` so that a killed process's leftover connections cannot keep one alive."""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from .backend import CONNECT_TIMEOUT_S


def database_url(server: str, name: str) -> str:
    """``server`` (any database URL of it) with its database replaced by ``name``."""
    parts = urlsplit(server)
    return urlunsplit((parts.scheme, parts.netloc, "/" + name, parts.query, ""))


def _admin(server: str) -> Any:
    import psycopg

    # The maintenance database, whatever database the user's URL names (it may not exist).
    return psycopg.connect(
        database_url(server, "postgres"), autocommit=True, connect_timeout=CONNECT_TIMEOUT_S
    )


def scratch_name(prefix: str) -> str:
    """``prefix`` + a random suffix: chosen before the database is made, so that its drop
    can be arranged first (an interrupt during the CREATE then leaves nothing behind)."""
    return prefix + secrets.token_hex(5)


def create_scratch(server: str, name: str) -> None:
    """Create the empty database ``name``."""
    with _admin(server) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')


def drop_scratch(server: str, name: str) -> None:
    with _admin(server) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@contextmanager
def scratch_database(server: str, prefix: str) -> Iterator[str]:
    """A new empty database ``prefix`` + a random part, its URL for the block, dropped when
    the block ends. The drop is armed before the CREATE: a Ctrl-C while the server creates
    it must not leave it behind (DROP ... IF EXISTS is harmless if it never came to be)."""
    name = scratch_name(prefix)
    try:
        create_scratch(server, name)
        yield database_url(server, name)
    finally:
        drop_scratch(server, name)


def scratch_names(server: str, prefix: str) -> list[str]:
    """The databases on ``server`` whose name starts with ``prefix`` (a leak check)."""
    with _admin(server) as conn:
        rows = conn.execute(
            "SELECT datname FROM pg_database WHERE starts_with(datname, %s) ORDER BY datname",
            (prefix,),
        ).fetchall()
    return [str(row[0]) for row in rows]
