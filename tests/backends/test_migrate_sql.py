"""``ackledger migrate --sql``: the printed SQL, run by someone else's tool on a new database,
gives exactly the schema ``ackledger migrate`` gives, and ackledger then has nothing to apply.

Every comparison is against whatever migrations this version ships (``migrations()``), so a
new migration is covered the day it is added.
"""

from __future__ import annotations

import json
import sqlite3
import time
from pathlib import Path
from typing import Any

import psycopg
import pytest

from ackledger.ops.processes import run_cli
from ackledger.store import open_backend
from ackledger.store.base import migrate, migrations, schema_versions

from .. import pg

#: A PostgreSQL URL nothing answers at (port 1, a password that must not be printed).
NOWHERE = "postgresql://someone:s3cret-pw@127.0.0.1:1/never_made"


def printed_sql(*args: str) -> str:
    done = run_cli("migrate", *args, "--sql")
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""
    return done.stdout


def sqlite_schema(path: Path) -> list[tuple[Any, ...]]:
    """Every row of sqlite_master, its SQL with whitespace runs made one space, and every
    table's columns."""
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        objects = conn.execute("SELECT type, name, tbl_name, sql FROM sqlite_master").fetchall()
        rows: list[tuple[Any, ...]] = [
            (kind, name, table, " ".join(sql.split()) if sql else None)
            for kind, name, table, sql in objects
        ]
        for kind, name, _, _ in objects:
            if kind == "table":
                rows += [(name, *column) for column in conn.execute(f"PRAGMA table_info({name})")]
    finally:
        conn.close()
    return sorted(rows, key=repr)


_POSTGRES_CATALOG = {
    "columns": "SELECT table_name, column_name, ordinal_position, data_type, is_nullable, "
    "column_default, is_identity, identity_generation FROM information_schema.columns "
    "WHERE table_schema = 'public'",
    "indexes": "SELECT tablename, indexname, indexdef FROM pg_indexes WHERE schemaname = 'public'",
    "triggers": "SELECT event_object_table, trigger_name, event_manipulation, action_timing, "
    "action_orientation, action_statement FROM information_schema.triggers "
    "WHERE trigger_schema = 'public'",
    "constraints": "SELECT conrelid::regclass::text, conname, contype, "
    "pg_get_constraintdef(oid) FROM pg_constraint WHERE connamespace = 'public'::regnamespace",
    "sequences": "SELECT sequence_name, data_type, start_value, increment "
    "FROM information_schema.sequences WHERE sequence_schema = 'public'",
    "functions": "SELECT proname, pg_get_functiondef(oid) FROM pg_proc "
    "WHERE pronamespace = 'public'::regnamespace",
}


def postgres_schema(url: str) -> dict[str, list[tuple[Any, ...]]]:
    return {name: sorted(pg.rows(url, sql), key=repr) for name, sql in _POSTGRES_CATALOG.items()}


def recorded(ref: str) -> list[tuple[int, str]]:
    backend = open_backend(ref, migrate_schema=False)
    try:
        return schema_versions(backend)
    finally:
        backend.close()


def shipped(dialect: str) -> list[tuple[int, str]]:
    found = [(version, name) for version, name, _ in migrations(dialect)]
    assert found and found[0][0] == 1
    return found


def assert_nothing_left_to_apply(ref: str, dialect: str) -> None:
    """Opening the database applies nothing: every shipped migration is recorded, and a
    ``migrate`` run after it reports 0 applied."""
    assert recorded(ref) == shipped(dialect)
    done = run_cli("migrate", "--target", ref, "--json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["applied"] == 0


def test_sqlite_sql_makes_the_schema_migrate_makes(tmp_path: Path) -> None:
    target = tmp_path / "app.db"
    script = printed_sql("--target", str(target))
    assert list(tmp_path.iterdir()) == []  # the target was not created (nor its -wal)
    assert printed_sql("--dialect", "sqlite") == script

    pasted = tmp_path / "pasted.db"
    conn = sqlite3.connect(pasted)
    try:
        conn.executescript(script)
    finally:
        conn.close()
    migrated = tmp_path / "migrated.db"
    done = run_cli("migrate", "--target", str(migrated))
    assert done.returncode == 0, done.stderr

    assert sqlite_schema(pasted) == sqlite_schema(migrated)
    assert {row[1] for row in sqlite_schema(pasted)} >= {
        "ackledger_outbox",
        "ackledger_inbox",
        "ackledger_schema_migrations",
    }
    assert_nothing_left_to_apply(str(pasted), "sqlite")
    assert sqlite_schema(pasted) == sqlite_schema(migrated)  # and opening changed nothing


def test_postgres_sql_makes_the_schema_migrate_makes(pg_empty_url: str) -> None:
    # Printing for PostgreSQL asks no server: this URL has none behind it.
    script = printed_sql("--target", NOWHERE)
    assert "s3cret-pw" not in script
    assert printed_sql("--dialect", "postgres") == script

    with psycopg.connect(pg_empty_url, autocommit=True) as conn, conn.transaction():
        # As a migration tool runs it: the whole text in one transaction of the tool's own.
        conn.execute(script.encode())
    migrated = pg.create_database()
    try:
        migrated_url = pg.url_for(migrated)
        done = run_cli("migrate", "--target", migrated_url)
        assert done.returncode == 0, done.stderr
        assert postgres_schema(pg_empty_url) == postgres_schema(migrated_url)
        tables = {row[0] for row in postgres_schema(pg_empty_url)["columns"]}
        assert {"ackledger_outbox", "ackledger_inbox", "ackledger_schema_migrations"} <= tables
    finally:
        pg.drop_database(migrated)
    assert_nothing_left_to_apply(pg_empty_url, "postgres")


@pytest.mark.parametrize("dialect", ["sqlite", "postgres"])
def test_the_rows_record_each_migration_at_the_time_it_was_run(
    dialect: str, tmp_path: Path
) -> None:
    script = printed_sql("--dialect", dialect)
    # Each shipped migration is named once, with its row, in version order.
    marks = [f"-- {name}\n" for _, name in shipped(dialect)]
    positions = [script.index(mark) for mark in marks]
    assert positions == sorted(positions)
    assert script.count("INSERT INTO ackledger_schema_migrations") == len(marks)
    assert printed_sql("--dialect", dialect) == script  # no print-time timestamp in it
    if dialect == "sqlite":
        ran_at = time.time()
        conn = sqlite3.connect(tmp_path / "t.db")
        try:
            conn.executescript(script)
            times = [
                row[0] for row in conn.execute("SELECT applied_at FROM ackledger_schema_migrations")
            ]
        finally:
            conn.close()
        assert len(times) == len(marks)
        assert all(isinstance(t, float) and abs(t - ran_at) < 60 for t in times), times


def test_an_existing_sqlite_file_is_left_as_it_was(tmp_path: Path) -> None:
    target = tmp_path / "old.db"
    backend = open_backend(str(target), migrate_schema=False)
    try:
        migrate(backend, upto=1)
    finally:
        backend.close()
    # An old schema: the printed SQL is still the whole schema (it is for a new database),
    # and the file is not upgraded, nor touched at all.
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir()}
    script = printed_sql("--target", str(target))
    assert script == printed_sql("--dialect", "sqlite")
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir()} == before


@pytest.mark.parametrize(
    ("args", "named"),
    [
        (["--dialect", "sqlite"], "--dialect"),  # migrating needs a database
        (["--dialect", "mysql", "--sql"], "--dialect"),
        (["--dialect", "sqlite", "--target", "x.db", "--sql"], "--target"),
        (["--sql"], "--target"),
        (["--target", "ftp://example.invalid/db", "--sql"], "scheme"),
        (["--target", ":memory:", "--sql"], ":memory:"),
        (["--target", "x.db", "--sql", "--json"], "--json"),
    ],
)
def test_bad_input_is_one_line_and_creates_nothing(
    args: list[str], named: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)  # where a relative x.db would be made
    done = run_cli("migrate", *args)
    assert done.returncode == 2, done.stderr
    assert done.stdout == ""
    assert done.stderr.count("\n") == 1 and named in done.stderr, done.stderr
    assert list(tmp_path.iterdir()) == []
