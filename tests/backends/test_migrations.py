"""Schema migrations: all at once equals one by one, both dialects agree, concurrent opens."""

from __future__ import annotations

import json
import sqlite3
import subprocess
from pathlib import Path
from typing import Any

import pytest

from ackledger import Outbox
from ackledger.ops.processes import cli_command, run_cli
from ackledger.relay.partitions import PartitionLeases
from ackledger.store import open_backend
from ackledger.store.base import MIGRATIONS, MIGRATIONS_TABLE, apply_chain, migrate, migrations
from ackledger.store.namespace import V2_MIGRATIONS

from .. import pg
from ..conftest import raw_rows


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
    # The one designed difference: SQLite builds the partition index when the partition
    # worker first opens the outbox (migration 0006), PostgreSQL has it from the start.
    assert "ackledger_outbox_partition_pending" not in _index_names(path)
    with Outbox(path) as outbox:
        PartitionLeases(outbox, "relay-a")
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
    assert ("ackledger_outbox", "partition_key") in lite_columns
    assert {"ackledger_outbox_pending", "ackledger_outbox_partition_pending"} <= lite_indexes


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
    assert [
        row[0] for row in reader(ref, "SELECT name FROM ackledger_schema_migrations ORDER BY 1")
    ] == (expected)


def _sqlite_rows(path: str, sql: str) -> list[tuple[Any, ...]]:
    return raw_rows(Path(path), sql)


def test_migrate_refuses_bad_targets_in_one_line(tmp_path: Path) -> None:
    for bad in (str(tmp_path), "ftp://example.invalid/db", str(tmp_path / "no" / "dir.db")):
        done = run_cli("migrate", "--target", bad)
        assert done.returncode == 2, done.stderr
        assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr
    assert list(tmp_path.iterdir()) == []


def old_database(path: str, upto: int) -> None:
    """A SQLite database at version ``upto`` of the migrations before the ``ackledger_``
    names, recorded where those recorded themselves."""
    backend = open_backend(path, migrate_schema=False)
    try:
        with backend.write() as tx:
            tx.execute(MIGRATIONS_TABLE.replace(MIGRATIONS, V2_MIGRATIONS))
        old = [found for found in migrations("sqlite", chain="v2") if found[0] <= upto]
        apply_chain(backend, old, V2_MIGRATIONS)
    finally:
        backend.close()


def _index_names(path: str) -> set[str]:
    return {
        str(row[0])
        for row in _sqlite_rows(path, "SELECT name FROM sqlite_master WHERE type = 'index'")
    }


def _plan(path: str, sql: str, params: tuple[Any, ...]) -> str:
    rows = raw_rows(Path(path), "EXPLAIN QUERY PLAN " + sql, params)
    return " | ".join(str(row[-1]) for row in rows)


_IN_PARTITION = (
    "SELECT seq, id FROM ackledger_outbox WHERE partition_key = ? AND sent = 0 AND quarantined = 0 "
    "ORDER BY seq LIMIT 16"
)


def test_sqlite_0006_drops_the_partition_index_and_the_first_lease_user_rebuilds_it(
    tmp_path: Path,
) -> None:
    path = str(tmp_path / "old.db")
    old_database(path, upto=5)  # as ackledger made it then, before the ackledger_ names
    assert "outbox_partition_pending" in _index_names(path)
    # A database of the old schema with work in it: pending events of two partitions.
    conn = sqlite3.connect(path)
    with conn:
        for n in range(6):
            conn.execute(
                "INSERT INTO outbox (id, sku, qty, fingerprint, partition_key, created_at) "
                "VALUES (?, 'sku', 1, 'f', ?, 0)",
                (f"e{n}", "p-a" if n % 2 else "p-b"),
            )
    conn.close()

    with Outbox(path) as outbox:  # opening migrates to the newest version
        assert not {"outbox_partition_pending", "ackledger_outbox_partition_pending"} & (
            _index_names(path)
        )
        assert [e["id"] for e in outbox.pending(16)] == [f"e{n}" for n in range(6)]
        # Without the index, a partition's events are found by the seq-ordered pending index.
        assert "ackledger_outbox_partition_pending" not in _plan(path, _IN_PARTITION, ("p-a",))
        leases = PartitionLeases(outbox, "relay-a")
        assert "ackledger_outbox_partition_pending" in _index_names(path)
        assert "ackledger_outbox_partition_pending" in _plan(path, _IN_PARTITION, ("p-a",))
        assert [e["id"] for e in leases.pending_in_partition("p-a")] == ["e1", "e3", "e5"]
        PartitionLeases(outbox, "relay-b")  # a second user finds it built and keeps it
    assert "ackledger_outbox_partition_pending" in _index_names(path)
