"""ackledger's namespace (CONTRACT section 11): every object it makes is named ``ackledger_*``,
a database written before those names is renamed in place, the lab's tables are made by the
lab's calls alone, and a user's own tables of any name are never touched.

The v2 fixtures (tests/fixtures/v2/, see make_v2.py for what is in them) are databases the
last version before the prefix wrote: one SQLite file, one PostgreSQL dump.
"""

from __future__ import annotations

import json
import shutil
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ackledger import Conflict, Inbox, Ledger, Outbox, new_event, warehouse
from ackledger.ops.processes import run_cli
from ackledger.store import open_backend
from ackledger.store.base import migrations

from .. import pg
from .conftest import Target
from .test_migrations import postgres_schema

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "v2"
#: What make_v2.py left, as the fixture's outbox holds it: (id, sent, quarantined) by seq.
OUTBOX_ROWS = [
    ("e-1", 1, 0),
    ("o-1", 1, 0),
    ("o-2", 0, 1),
    ("o-3", 0, 0),
    ("o-4", 0, 0),
    ("e-2", 0, 0),
]
PENDING = ["o-3", "o-4", "e-2"]
GENERIC = new_event("com.example.order.placed", {"order": 1}, source="urn:shop:orders", id="e-1")
V2_TABLES = ("outbox", "inbox", "counters", "deliveries", "attempts", "outbox_log")
HANDLERS = {"com.example.order.placed": lambda tx, event: None}


@pytest.fixture(params=["sqlite", "postgres"])
def v2(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Target]:
    if request.param == "sqlite":
        path = tmp_path / "v2.sqlite"
        shutil.copyfile(FIXTURES / "v2.sqlite", path)
        yield Target("sqlite", str(path))
        return
    with pg.restored(FIXTURES / "postgres.sql") as url:
        yield Target("postgres", url)


def tables(target: Target) -> set[str]:
    if target.dialect == "postgres":
        found = target.rows("SELECT tablename FROM pg_tables WHERE schemaname = 'public'")
    else:
        found = target.rows(
            "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'"
        )
    return {str(row[0]) for row in found}


def objects(target: Target) -> dict[str, Any]:
    """The names and columns of everything in the database (PostgreSQL: its public schema),
    without the text SQLite keeps of each definition (renames quote the names in it)."""
    if target.dialect == "postgres":
        schema = postgres_schema(target.ref)
        # Without the columns' positions: a dump restored leaves out the gaps that dropped
        # columns leave in a table that was migrated.
        positionless = sorted((row[0], row[1], *row[3:]) for row in schema["columns"])
        return {**schema, "columns": positionless}
    conn = sqlite3.connect(target.ref)
    try:
        found = conn.execute(
            "SELECT type, name, tbl_name FROM sqlite_master ORDER BY type, name"
        ).fetchall()
        columns = {
            name: conn.execute(f"PRAGMA table_info({name})").fetchall()
            for kind, name, _ in found
            if kind == "table"
        }
    finally:
        conn.close()
    return {"objects": found, "columns": columns}


def test_the_fixture_is_v2_before_it_is_opened(v2: Target) -> None:
    # Guards the tests below: they would prove nothing on a database v3 already wrote.
    assert set(V2_TABLES) | {"schema_migrations", "orders", "inventory"} <= tables(v2)
    assert not {name for name in tables(v2) if name.startswith("ackledger_")} - {"ackledger_meta"}
    assert v2.rows("SELECT MAX(version) FROM schema_migrations") == [(10,)]
    assert v2.rows("SELECT id, sent, quarantined FROM outbox ORDER BY seq") == OUTBOX_ROWS


def _columns(target: Target, table: str) -> str:
    """The columns ``table`` has now, in their order, for a SELECT that reads them alone."""
    if target.dialect == "postgres":
        found = target.rows(
            "SELECT column_name FROM information_schema.columns WHERE table_name = ? "
            "AND table_schema = 'public' ORDER BY ordinal_position",
            (table,),
        )
    else:
        found = [(row[1],) for row in target.rows(f"PRAGMA table_info({table})")]
    return ", ".join(str(row[0]) for row in found)


def test_opening_renames_everything_and_keeps_every_row(v2: Target) -> None:
    columns = {name: _columns(v2, name) for name in V2_TABLES}
    before = {name: v2.rows(f"SELECT * FROM {name} ORDER BY 1") for name in V2_TABLES}
    lab = {name: v2.rows(f"SELECT * FROM {name} ORDER BY 1") for name in ("orders", "inventory")}
    with Outbox(v2.ref) as ob:
        assert [event["id"] for event in ob.pending()] == PENDING
    after = {
        name: v2.rows(f"SELECT {columns[name]} FROM ackledger_{name} ORDER BY 1")
        for name in V2_TABLES
    }
    assert after == before
    # Every receipt is the default inbox's (migration 0012 named the inboxes).
    assert v2.rows("SELECT DISTINCT name FROM ackledger_inbox") == [("default",)]
    assert {name: v2.rows(f"SELECT * FROM {name} ORDER BY 1") for name in lab} == lab
    found = tables(v2)
    assert not found & {*V2_TABLES, "schema_migrations", "partition_leases", "inbox_oldest"}
    assert {"ackledger_schema_migrations", "ackledger_partition_leases"} <= found
    assert [
        name for _, name in v2.rows("SELECT version, name FROM ackledger_schema_migrations")
    ] == [name for _, name, _ in migrations(v2.dialect)]


def test_the_renamed_database_answers_as_before(v2: Target) -> None:
    with Outbox(v2.ref) as ob:
        assert [event["id"] for event in ob.pending()] == PENDING
        assert [row["id"] for row in ob.quarantined()] == ["o-2"]
        # Sequences go on from where they were: the next event comes after all six.
        assert (
            ob.publish(
                new_event("com.example.order.placed", {}, source="urn:shop:orders", id="e-3")
            )
            == 7
        )
        assert [event["id"] for event in ob.pending()] == [*PENDING, "e-3"]
        # An order accepted before is the same event, not a second one.
        assert ob.accept({"id": "o-1", "sku": "snack-7", "qty": 3}) == 2
        with pytest.raises(Conflict):
            ob.accept({"id": "o-1", "sku": "snack-7", "qty": 9})
    with Inbox(v2.ref, handlers=HANDLERS) as inbox:
        assert inbox.counters() == {"applied": 3, "duplicate": 1, "conflict": 0}
        assert inbox.receive(GENERIC) == "duplicate"
        assert inbox.receive(warehouse.event("o-1", "snack-7", 3)) == "duplicate"
        assert (inbox.stock("snack-7"), inbox.stock("snack-8")) == (3, 5)
        assert inbox.receive(warehouse.event("w-2", "snack-8", 1)) == "applied"
        assert inbox.stock("snack-8") == 6
        assert inbox.counters() == {"applied": 4, "duplicate": 3, "conflict": 0}
    with Ledger(v2.ref) as ledger:
        again = ledger.request("case-1", "work-1", "pod-c", payload={"n": 1})
        assert (again["delivery_no"], again["duplicate"], again["attempt"]) == (1, True, 3)
        with pytest.raises(Conflict):
            ledger.request("case-1", "work-1", "pod-c", payload={"n": 2})
        fresh = ledger.request("case-3", "work-1", "pod-c")
        assert fresh["delivery_no"] > 4 and not fresh["duplicate"]  # after every one before
        counters = ledger.counters()
        assert (counters["attempts"], counters["duplicates"], counters["conflicts"]) == (7, 2, 1)


def test_the_renamed_schema_is_the_schema_of_a_new_database(
    v2: Target, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    open_backend(v2.ref).close()
    if v2.dialect == "postgres":
        new = Target("postgres", request.getfixturevalue("pg_empty_url"))
    else:
        new = Target("sqlite", str(tmp_path / "new.sqlite"))
    with Outbox(new.ref) as ob:  # a lab call: the fixture has the lab's tables too
        ob.accept({"id": "o-1", "sku": "snack-7", "qty": 3})
    with Ledger(new.ref) as ledger, Inbox(new.ref) as inbox:
        ledger.request("c", "w", "p")
        inbox.receive(warehouse.event("o-1", "snack-7", 3))
    assert objects(v2) == objects(new)


#: The migrations of a dialect (the same numbers on both), and the last one v2 had.
MIGRATIONS = Path(__file__).parents[2] / "src" / "ackledger" / "store" / "migrations" / "sqlite"
V2_LAST = 10


def test_the_migration_runs_once(v2: Target) -> None:
    first = run_cli("migrate", "--target", v2.ref, "--json")
    assert first.returncode == 0, first.stderr
    # Of the v3 chain only what came after v2's last version (0010) was missing: the v2
    # database had the rest, under other names.
    after_v2 = [p for p in MIGRATIONS.glob("0*.sql") if int(p.name[:4]) > V2_LAST]
    assert json.loads(first.stdout)["applied"] == len(after_v2) > 0
    after = v2.dump()
    shape = objects(v2)
    again = run_cli("migrate", "--target", v2.ref, "--json")
    assert again.returncode == 0, again.stderr
    assert json.loads(again.stdout)["applied"] == 0
    with Outbox(v2.ref), Inbox(v2.ref), Ledger(v2.ref):
        pass
    assert v2.dump() == after
    assert objects(v2) == shape


# --- a user's own tables ----------------------------------------------------------------

#: Tables a user's application may well have, ours by name in v2 or the lab's by name now.
USER_TABLES = {
    "orders": "CREATE TABLE orders (order_no INTEGER PRIMARY KEY, customer TEXT NOT NULL)",
    "outbox": "CREATE TABLE outbox (msg TEXT NOT NULL)",
    "inbox": "CREATE TABLE inbox (id TEXT PRIMARY KEY, body TEXT)",
    "events": "CREATE TABLE events (id INTEGER PRIMARY KEY, what TEXT)",
    # Rails keeps its migrations under this name, with one column.
    "schema_migrations": "CREATE TABLE schema_migrations (version TEXT PRIMARY KEY)",
}
USER_ROWS: dict[str, list[tuple[object, ...]]] = {
    "orders": [(1, "ada"), (2, "grace")],
    "outbox": [("hello",)],
    "inbox": [("m-1", "first")],
    "events": [(1, "signed up")],
    "schema_migrations": [("20240101000000",)],
}


@pytest.fixture(params=["sqlite", "postgres"])
def user_db(request: pytest.FixtureRequest, tmp_path: Path) -> Target:
    if request.param == "sqlite":
        found = Target("sqlite", str(tmp_path / "app.sqlite"))
        conn = sqlite3.connect(found.ref)
        with conn:
            for name, ddl in USER_TABLES.items():
                conn.execute(ddl)
                for row in USER_ROWS[name]:
                    conn.execute(f"INSERT INTO {name} VALUES ({', '.join('?' * len(row))})", row)
        conn.close()
        return found
    found = Target("postgres", request.getfixturevalue("pg_empty_url"))
    for name, ddl in USER_TABLES.items():
        found.execute(ddl)
        for row in USER_ROWS[name]:
            found.execute(f"INSERT INTO {name} VALUES ({', '.join('?' * len(row))})", row)
    return found


def user_state(target: Target) -> dict[str, Any]:
    """The user's tables: their definitions (with their indexes and constraints) and rows."""
    rows = {name: target.rows(f"SELECT * FROM {name} ORDER BY 1") for name in USER_TABLES}
    mine: dict[str, Any]
    if target.dialect == "postgres":
        schema: dict[str, list[Any]] = postgres_schema(target.ref)
        mine = {
            "columns": [c for c in schema["columns"] if c[0] in USER_TABLES],
            "indexes": [i for i in schema["indexes"] if not i[0].startswith("ackledger_")],
            "constraints": [c for c in schema["constraints"] if c[0] in USER_TABLES],
        }
    else:
        mine = {
            "sql": target.rows(
                "SELECT type, name, tbl_name, sql FROM sqlite_master WHERE tbl_name IN "
                f"({', '.join('?' * len(USER_TABLES))}) ORDER BY name",
                tuple(USER_TABLES),
            )
        }
    return {"rows": rows, "definitions": mine}


def test_a_users_tables_of_our_old_names_are_left_alone(user_db: Target) -> None:
    before = user_state(user_db)
    done = run_cli("migrate", "--target", user_db.ref, "--json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["applied"] == len(migrations(user_db.dialect))
    with Outbox(user_db.ref) as ob:
        ob.publish(GENERIC)
        assert [event["id"] for event in ob.pending()] == ["e-1"]
    with Inbox(user_db.ref, handlers=HANDLERS) as inbox:
        assert inbox.receive(GENERIC) == "applied"
        assert inbox.receive(GENERIC) == "duplicate"
    with Ledger(user_db.ref) as ledger:
        assert ledger.request("c", "w", "p")["duplicate"] is False
    assert user_state(user_db) == before
    assert "inventory" not in tables(user_db)  # no lab call was made
    assert user_db.rows("SELECT id FROM ackledger_outbox") == [("e-1",)]
    assert user_db.rows("SELECT id FROM ackledger_inbox") == [("e-1",)]


def test_a_schema_migrations_table_of_ours_in_shape_but_not_in_rows_is_not_adopted(
    tmp_path: Path,
) -> None:
    path = tmp_path / "app.sqlite"
    conn = sqlite3.connect(path)
    with conn:
        # The shape of ours, rows of another tool: not ours, nor is the outbox beside it.
        conn.execute(
            "CREATE TABLE schema_migrations (version INTEGER PRIMARY KEY, name TEXT NOT NULL, "
            "applied_at DOUBLE PRECISION NOT NULL)"
        )
        conn.execute("INSERT INTO schema_migrations VALUES (1, 'create_users', 0)")
        conn.execute("CREATE TABLE outbox (msg TEXT)")
    conn.close()
    target = Target("sqlite", str(path))
    with Outbox(target.ref) as ob:
        ob.publish(GENERIC)
    assert target.rows("SELECT * FROM schema_migrations") == [(1, "create_users", 0.0)]
    assert target.rows("SELECT sql FROM sqlite_master WHERE name = 'outbox'") == [
        ("CREATE TABLE outbox (msg TEXT)",)
    ]
    assert target.rows("SELECT id FROM ackledger_outbox") == [("e-1",)]


# --- the lab's tables -------------------------------------------------------------------


def test_the_lab_tables_come_with_the_first_lab_call_only(target: Target) -> None:
    # ``target`` starts migrated (the PostgreSQL template was opened once, by no lab call).
    with Outbox(target.ref) as ob, Inbox(target.ref, handlers=HANDLERS) as inbox:
        ob.publish(GENERIC)
        inbox.receive(GENERIC)
        with Ledger(target.ref) as ledger:
            ledger.request("c", "w", "p")
        assert not {"orders", "inventory"} & tables(target)
        ob.accept({"id": "o-1", "sku": "snack-7", "qty": 3})
        assert {"orders", "inventory"} <= tables(target)
        assert target.rows("SELECT id, sku, qty FROM orders") == [("o-1", "snack-7", 3)]
        assert inbox.receive(warehouse.event("o-1", "snack-7", 3)) == "applied"
        assert inbox.stock("snack-7") == 3


@pytest.mark.parametrize("call", ["receive", "accept", "migrate"])
def test_each_lab_call_makes_the_lab_tables(target: Target, call: str) -> None:
    if call == "receive":
        with Inbox(target.ref) as inbox:
            assert inbox.receive(warehouse.event("w-1", "snack-7", 2)) == "applied"
        assert target.rows("SELECT sku, qty FROM inventory") == [("snack-7", 2)]
    elif call == "accept":
        with Inbox(target.ref) as inbox:
            assert inbox.stock("snack-7") == 0  # only reads: no lab tables, no stock
        assert not {"orders", "inventory"} & tables(target)
        with Outbox(target.ref) as ob:
            ob.accept({"id": "o-1", "sku": "snack-7", "qty": 3})
            assert ob.order("o-1") is not None
    else:
        done = run_cli("migrate", "--target", target.ref, "--lab")
        assert done.returncode == 0, done.stderr
    assert {"orders", "inventory"} <= tables(target)


def test_the_printed_sql_has_the_lab_only_when_asked() -> None:
    for dialect in ("sqlite", "postgres"):
        plain = run_cli("migrate", "--sql", "--dialect", dialect)
        lab = run_cli("migrate", "--sql", "--dialect", dialect, "--lab")
        assert plain.returncode == lab.returncode == 0
        assert "orders" not in plain.stdout and "inventory" not in plain.stdout
        assert lab.stdout.startswith(plain.stdout)
        assert "CREATE TABLE IF NOT EXISTS orders" in lab.stdout
        assert "CREATE TABLE IF NOT EXISTS inventory" in lab.stdout
        for name in ("outbox", "inbox", "deliveries", "attempts", "counters"):
            assert f"CREATE TABLE ackledger_{name} (" in plain.stdout
            assert f"CREATE TABLE {name} " not in plain.stdout


# --- PostgreSQL: a schema of ackledger's own ---------------------------------------------


def schema_tables(url: str, schema: str) -> set[str]:
    return {
        str(row[0])
        for row in pg.rows(url, "SELECT tablename FROM pg_tables WHERE schemaname = ?", (schema,))
    }


def test_postgres_schema_keyword_puts_everything_in_that_schema(pg_empty_url: str) -> None:
    with Outbox(pg_empty_url, schema="acks") as ob:
        ob.publish(GENERIC)
        ob.accept({"id": "o-1", "sku": "snack-7", "qty": 3})
    with Inbox(pg_empty_url, schema="acks") as inbox:
        assert inbox.receive(warehouse.event("o-1", "snack-7", 3)) == "applied"
    with Ledger(pg_empty_url + "?schema=acks") as ledger:
        ledger.request("c", "w", "p")
    assert schema_tables(pg_empty_url, "public") == set()
    found = schema_tables(pg_empty_url, "acks")
    assert {"ackledger_outbox", "ackledger_inbox", "ackledger_deliveries", "orders"} <= found
    assert pg.rows(pg_empty_url, "SELECT id FROM acks.ackledger_outbox ORDER BY seq") == [
        ("e-1",),
        ("o-1",),
    ]
    # The same schema through the URL, from a command: it finds what the objects wrote.
    done = run_cli("pending", "--source", pg_empty_url + "?schema=acks", "--json")
    assert done.returncode == 0, done.stderr
    assert "e-1" in done.stdout and "o-1" in done.stdout


def test_postgres_schema_in_the_target_of_migrate(pg_empty_url: str) -> None:
    done = run_cli("migrate", "--target", pg_empty_url + "?schema=ledger_space", "--json")
    assert done.returncode == 0, done.stderr
    assert "ackledger_schema_migrations" in schema_tables(pg_empty_url, "ledger_space")
    assert schema_tables(pg_empty_url, "public") == set()
    again = run_cli("migrate", "--target", pg_empty_url + "?schema=ledger_space", "--json")
    assert json.loads(again.stdout)["applied"] == 0
    # The default schema is another place: a migrate there makes a second, separate set.
    plain = run_cli("migrate", "--target", pg_empty_url, "--json")
    assert json.loads(plain.stdout)["applied"] == len(migrations("postgres"))


@pytest.mark.parametrize("bad", ["1st", "pg_mine", "a-b", "x" * 64, "", 'q"uote'])
def test_a_bad_schema_name_is_refused_and_nothing_is_made(pg_empty_url: str, bad: str) -> None:
    with pytest.raises(ValueError, match="schema"):
        Outbox(pg_empty_url, schema=bad)
    done = run_cli("migrate", "--target", f"{pg_empty_url}?schema={bad}")
    assert done.returncode == 2, done.stderr
    assert "schema" in done.stderr and "Traceback" not in done.stderr
    assert pg.rows(
        pg_empty_url,
        "SELECT COUNT(*) FROM pg_tables WHERE schemaname NOT IN ('pg_catalog', "
        "'information_schema')",
    ) == [(0,)]


def test_schema_is_refused_for_sqlite(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="schema: only for a PostgreSQL target"):
        Outbox(tmp_path / "x.sqlite", schema="acks")
    assert list(tmp_path.iterdir()) == []
