"""Schema migrations: all at once equals one by one, both dialects agree, concurrent opens."""

from __future__ import annotations

import json
import sqlite3
import subprocess
from pathlib import Path
from typing import Any

import pytest

from ackledger.procs import cli_command, run_cli
from ackledger.store import open_backend
from ackledger.store.base import migrate, migrations

from .. import pg


def sqlite_schema(path: str) -> dict[str, Any]:
    conn = sqlite3.connect(path)
    try:
        objects = conn.execute(
            "SELECT type, name, tbl_name, sql FROM sqlite_master "
            "WHERE name NOT LIKE 'sqlite_%' ORDER BY type, name"
        ).fetchall()
        columns = {
            table: conn.execute(f"PRAGMA table_info({table})").fetchall()
            for (kind, table, _, _) in objects
            if kind == "table"
        }
    finally:
        conn.close()
    return {"objects": objects, "columns": columns}


def postgres_schema(url: str) -> dict[str, Any]:
    return {
        "columns": pg.rows(
            url,
            "SELECT table_name, column_name, ordinal_position, data_type, is_nullable, "
            "column_default, is_identity FROM information_schema.columns "
            "WHERE table_schema = 'public' ORDER BY table_name, ordinal_position",
        ),
        "indexes": pg.rows(
            url,
            "SELECT indexname, indexdef FROM pg_indexes WHERE schemaname = 'public' ORDER BY 1",
        ),
        "constraints": pg.rows(
            url,
            "SELECT conrelid::regclass::text, conname, pg_get_constraintdef(oid) "
            "FROM pg_constraint WHERE connamespace = 'public'::regnamespace ORDER BY 1, 2",
        ),
        "sequences": pg.rows(
            url,
            "SELECT sequence_name, data_type FROM information_schema.sequences "
            "WHERE sequence_schema = 'public' ORDER BY 1",
        ),
    }


def schema_of(ref: str) -> dict[str, Any]:
    return postgres_schema(ref) if ref.startswith("postgresql://") else sqlite_schema(ref)


@pytest.fixture(params=["sqlite", "postgres"])
def two_empty(request: pytest.FixtureRequest, tmp_path: Path) -> tuple[str, str]:
    if request.param == "sqlite":
        return str(tmp_path / "fresh.db"), str(tmp_path / "stepwise.db")
    first = request.getfixturevalue("pg_empty_url")
    name = pg.create_database()
    request.addfinalizer(lambda: pg.drop_database(name))
    return first, pg.url_for(name)


def test_fresh_schema_equals_all_migrations_applied_one_by_one(two_empty: tuple[str, str]) -> None:
    fresh, stepwise = two_empty
    open_backend(fresh).close()
    dialect = "postgres" if fresh.startswith("postgresql://") else "sqlite"
    versions = [version for version, _, _ in migrations(dialect)]
    assert versions[0] == 1 and versions == sorted(set(versions))
    for version in versions:
        # A deployment that upgraded release by release: each open applies one more.
        backend = open_backend(stepwise, migrate_schema=False)
        try:
            assert migrate(backend, upto=version) == 1
        finally:
            backend.close()
    assert schema_of(stepwise) == schema_of(fresh)
    done = run_cli("migrate", "--target", stepwise, "--json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["applied"] == 0


def test_both_dialects_have_the_same_tables_columns_and_indexes(
    tmp_path: Path, pg_empty_url: str
) -> None:
    path = str(tmp_path / "s.db")
    open_backend(path).close()
    open_backend(pg_empty_url).close()
    lite = sqlite_schema(path)
    lite_columns = {(t, c[1]) for t, cols in lite["columns"].items() for c in cols}
    lite_indexes = {name for kind, name, _, sql in lite["objects"] if kind == "index" and sql}
    post = postgres_schema(pg_empty_url)
    post_columns = {(t, c) for t, c, *_ in post["columns"]}
    # Indexes behind PRIMARY KEY / UNIQUE constraints are implicit in SQLite's sqlite_master
    # too (sql is NULL there), so compare only the indexes that a migration created by name.
    constraint_names = {name for _, name, _ in post["constraints"]}
    post_indexes = {name for name, _ in post["indexes"] if name not in constraint_names}
    assert lite_columns == post_columns
    assert lite_indexes == post_indexes
    assert ("outbox", "partition_key") in lite_columns
    assert {"outbox_pending", "outbox_partition_pending"} <= lite_indexes


@pytest.mark.parametrize("dialect", ["sqlite", "postgres"])
def test_concurrent_first_opens_apply_each_migration_once(
    dialect: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    ref = (
        str(tmp_path / "race.db")
        if dialect == "sqlite"
        else request.getfixturevalue("pg_empty_url")
    )
    procs = [
        subprocess.Popen(
            cli_command("migrate", "--target", ref, "--json"),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(6)
    ]
    results = [proc.communicate(timeout=120) for proc in procs]
    assert [proc.returncode for proc in procs] == [0] * 6, [err for _, err in results]
    expected = [name for _, name, _ in migrations(dialect)]
    assert sum(json.loads(out)["applied"] for out, _ in results) == len(expected)
    reader = pg.rows if dialect == "postgres" else _sqlite_rows
    assert [row[0] for row in reader(ref, "SELECT name FROM schema_migrations ORDER BY 1")] == (
        expected
    )


def _sqlite_rows(path: str, sql: str) -> list[tuple[Any, ...]]:
    conn = sqlite3.connect(path)
    try:
        return conn.execute(sql).fetchall()
    finally:
        conn.close()


def test_migrate_refuses_bad_targets_in_one_line(tmp_path: Path) -> None:
    for bad in (str(tmp_path), "ftp://example.invalid/db", str(tmp_path / "no" / "dir.db")):
        done = run_cli("migrate", "--target", bad)
        assert done.returncode == 2, done.stderr
        assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr
    assert list(tmp_path.iterdir()) == []
