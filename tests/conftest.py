"""Shared fixtures: real SQLite files in a temp dir, the services' apps in-process on them, and
real service processes on loopback."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from ackledger._dev.procs import Service, start_service

from .inprocess import InProcess


@pytest.fixture
def source_db(tmp_path: Path) -> Path:
    return tmp_path / "source.db"


@pytest.fixture
def sink_db(tmp_path: Path) -> Path:
    return tmp_path / "sink.db"


def _serve(kind: str, db: Path, log: Path, env: dict[str, str] | None = None) -> Iterator[Service]:
    service = start_service(
        ["serve", kind, "--db", str(db), "--port", "0"], env=env, stderr_path=log
    )
    try:
        yield service
    finally:
        service.stop()


@pytest.fixture
def sink_service(sink_db: Path, tmp_path: Path) -> Iterator[Service]:
    """An ``ackledger serve sink`` process on a free loopback port."""
    yield from _serve("sink", sink_db, tmp_path / "sink.log")


@pytest.fixture
def sink_app(sink_db: Path) -> Iterator[InProcess]:
    """The sink's app on ``sink_db``, asked in-process (what ``serve sink`` runs)."""
    from ackledger.sink.app import create_sink_app
    from ackledger.sink.inbox import Inbox

    with Inbox(sink_db) as inbox, InProcess(create_sink_app(inbox)) as app:
        yield app


def raw_connect(path: Path) -> sqlite3.Connection:
    """An independent, read-only connection to a database file (not through ackledger)."""
    return sqlite3.connect(f"file:{path}?mode=ro", uri=True, isolation_level=None)


def raw_rows(path: Path, sql: str, params: tuple[object, ...] = ()) -> list[tuple[object, ...]]:
    conn = raw_connect(path)
    try:
        return conn.execute(sql, params).fetchall()
    finally:
        conn.close()


def stock_rows(path: Path) -> list[tuple[object, ...]]:
    """The lab's inventory by sku, none before a lab event made its table."""
    if not raw_rows(path, "SELECT 1 FROM sqlite_master WHERE name = 'inventory'"):
        return []
    return raw_rows(path, "SELECT sku, qty FROM inventory ORDER BY sku")


@pytest.fixture
def ledger_db(tmp_path: Path) -> Path:
    return tmp_path / "ledger.db"


@pytest.fixture
def ledger_service(ledger_db: Path, tmp_path: Path) -> Iterator[Service]:
    """An ``ackledger serve ledger`` process on a free loopback port, its Pod named by POD_UID."""
    yield from _serve("ledger", ledger_db, tmp_path / "ledger.log", {"POD_UID": "ledger-uid-1"})


@pytest.fixture
def ledger_app(ledger_db: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[InProcess]:
    """The ledger's app on ``ledger_db``, asked in-process, its Pod named by POD_UID."""
    monkeypatch.setenv("POD_UID", "ledger-uid-1")
    with serve_ledger_in_process(str(ledger_db)) as app:
        yield app


@contextmanager
def serve_ledger_in_process(db: str) -> Iterator[InProcess]:
    """What ``serve ledger --db DB`` runs (identity from the environment), asked in-process."""
    from ackledger.ledger.app import create_ledger_app
    from ackledger.ledger.ledger import Ledger

    with Ledger(db) as ledger, InProcess(create_ledger_app(ledger)) as app:
        yield app


# --- PostgreSQL: a migrated template per session, a fresh database per test (see tests/pg.py)


@pytest.fixture(scope="session")
def pg_template() -> Iterator[str]:
    from ackledger.store import open_backend

    from . import pg

    pg.require_postgres()
    name = pg.create_database()
    try:
        open_backend(pg.url_for(name)).close()  # migrate once; copies start migrated
        yield name
    finally:
        pg.drop_database(name)


@pytest.fixture
def pg_url(pg_template: str) -> Iterator[str]:
    """The URL of a fresh, migrated PostgreSQL database of this test alone."""
    from . import pg

    name = pg.create_database(pg_template)
    try:
        yield pg.url_for(name)
    finally:
        pg.drop_database(name)


@pytest.fixture
def pg_empty_url() -> Iterator[str]:
    """The URL of a fresh PostgreSQL database without any schema."""
    from . import pg

    pg.require_postgres()
    name = pg.create_database()
    try:
        yield pg.url_for(name)
    finally:
        pg.drop_database(name)
