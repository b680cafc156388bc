"""Shared fixtures: real SQLite files in a temp dir and real service processes on loopback."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest

from ackledger.procs import Service, start_service


@pytest.fixture
def source_db(tmp_path: Path) -> Path:
    return tmp_path / "source.db"


@pytest.fixture
def sink_db(tmp_path: Path) -> Path:
    return tmp_path / "sink.db"


@pytest.fixture
def sink_service(sink_db: Path, tmp_path: Path) -> Iterator[Service]:
    """An ``ackledger serve sink`` process on a free loopback port."""
    service = start_service(
        ["serve", "sink", "--db", str(sink_db), "--port", "0"],
        stderr_path=tmp_path / "sink.log",
    )
    try:
        yield service
    finally:
        service.stop()


def raw_connect(path: Path) -> sqlite3.Connection:
    """An independent, read-only connection to a database file (not through ackledger)."""
    return sqlite3.connect(f"file:{path}?mode=ro", uri=True, isolation_level=None)


def raw_rows(path: Path, sql: str, params: tuple[object, ...] = ()) -> list[tuple[object, ...]]:
    conn = raw_connect(path)
    try:
        return conn.execute(sql, params).fetchall()
    finally:
        conn.close()


@pytest.fixture
def ledger_db(tmp_path: Path) -> Path:
    return tmp_path / "ledger.db"


@pytest.fixture
def ledger_service(ledger_db: Path, tmp_path: Path) -> Iterator[Service]:
    """An ``ackledger serve ledger`` process on a free loopback port, its Pod named by POD_UID."""
    service = start_service(
        ["serve", "ledger", "--db", str(ledger_db), "--port", "0"],
        env={"POD_UID": "ledger-uid-1"},
        stderr_path=tmp_path / "ledger.log",
    )
    try:
        yield service
    finally:
        service.stop()
