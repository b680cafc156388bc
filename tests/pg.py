"""PostgreSQL for tests: one migrated template per session, a fresh database per test.

The server is ``ACKLEDGER_TEST_PG`` (default: postgres on 127.0.0.1:5432, trust auth). When it
cannot be reached, tests that need it are skipped with the reason, except under ``CI``, where
that is a failure: CI must run the PostgreSQL half.
"""

from __future__ import annotations

import functools
import os
import secrets
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import psycopg
import pytest

ADMIN_URL = os.environ.get("ACKLEDGER_TEST_PG", "postgresql://postgres@127.0.0.1:5432/postgres")
PREFIX = "ackledger_t_"


@functools.cache
def _unreachable() -> str | None:
    """Why the server cannot be reached (asked once per session), or None."""
    try:
        admin().close()
    except psycopg.Error as exc:
        return str(exc).strip().splitlines()[0]
    return None


def url_for(dbname: str) -> str:
    parts = urlsplit(ADMIN_URL)
    return urlunsplit((parts.scheme, parts.netloc, "/" + dbname, parts.query, ""))


def admin() -> psycopg.Connection[Any]:
    return psycopg.connect(ADMIN_URL, autocommit=True, connect_timeout=5)


def require_postgres() -> None:
    """Skip (locally) or fail (under CI) when the server is not reachable."""
    reason = _unreachable()
    if reason is not None:
        message = f"PostgreSQL at {ADMIN_URL} is not reachable: {reason}"
        if os.environ.get("CI"):
            pytest.fail(f"{message} (CI is set: the PostgreSQL tests must run)")
        pytest.skip(f"{message} (set CI=1 to make this a failure)")


def create_database(template: str | None = None) -> str:
    """A new, uniquely named database (copied from ``template`` if given); returns its name."""
    name = PREFIX + secrets.token_hex(6)
    with admin() as conn:
        if template is None:
            conn.execute(f'CREATE DATABASE "{name}"')
        else:
            conn.execute(f'CREATE DATABASE "{name}" TEMPLATE "{template}"')
    return name


@contextmanager
def restored(dump: Path) -> Iterator[str]:
    """The URL of a new database that ``dump`` (``pg_dump``'s plain text) was loaded into,
    dropped at the end."""
    require_postgres()
    name = create_database()
    try:
        url = url_for(name)
        # A dump starts with psql's restrict meta-command: psql loads it, psycopg cannot.
        loaded = subprocess.run(
            ["psql", "-q", "-v", "ON_ERROR_STOP=1", "-f", str(dump), url],
            capture_output=True,
            text=True,
            check=False,
        )
        assert loaded.returncode == 0, loaded.stderr
        yield url
    finally:
        drop_database(name)


def drop_database(name: str) -> None:
    with admin() as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def rows(url: str, sql: str, params: tuple[object, ...] = ()) -> list[tuple[Any, ...]]:
    """Read through an independent connection (not through ackledger); ``?`` placeholders."""
    with psycopg.connect(url, autocommit=True, connect_timeout=5) as conn:
        cursor = conn.execute(sql.replace("?", "%s"), params)
        return cursor.fetchall() if cursor.description is not None else []
