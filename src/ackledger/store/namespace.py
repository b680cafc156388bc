"""ackledger's names of its own: a database written before they took the ``ackledger_``
prefix is renamed in place, once.

Such a database records its migrations in ``schema_migrations``, a name other tools use too
(Rails does), so it is told ours by what it records: every row one of our own v2 migrations,
the first among them. Only then are its tables taken for ours. It is first brought to the end
of the v2 chain (``migrations/<dialect>/v2/``) and then renamed in one transaction: tables,
indexes, triggers, sequences and constraints take the prefix; rows, sequence positions and
every column stay as they were. A plug-in's own tables keep their names.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .base import MIGRATIONS, apply_chain, migrations

if TYPE_CHECKING:
    from .base import Backend, Tx

PREFIX = "ackledger_"
#: Where a v2 database recorded its migrations.
V2_MIGRATIONS = "schema_migrations"
#: Every table of a v2 database that is ackledger's (``ackledger_meta`` had its name already).
V2_TABLES = (
    "outbox",
    "inbox",
    "counters",
    "deliveries",
    "attempts",
    "outbox_log",
    "partition_leases",
    "inbox_oldest",
)
#: A v2 PostgreSQL database's sequences (identity, serial, and the lease tokens').
V2_SEQUENCES = (
    "outbox_seq_seq",
    "deliveries_delivery_no_seq",
    "attempts_attempt_no_seq",
    "outbox_log_seq_seq",
    "partition_lease_tokens",
)

_SQLITE_HAS_TABLE = "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?"
# current_schema(): the schema ackledger creates in, not a same-named table further along the
# search path.
_POSTGRES_HAS_TABLE = (
    "SELECT 1 FROM pg_tables WHERE schemaname = current_schema() AND tablename = ?"
)
_SQLITE_COLUMNS = "SELECT name FROM pragma_table_info(?)"
_POSTGRES_COLUMNS = (
    "SELECT column_name FROM information_schema.columns "
    "WHERE table_schema = current_schema() AND table_name = ?"
)
_SQLITE_INDEXES_AND_TRIGGERS = (
    "SELECT type, name, sql FROM sqlite_master WHERE type IN ('index', 'trigger') "
    "AND tbl_name = ? AND sql IS NOT NULL ORDER BY name"
)
_POSTGRES_INDEXES = (
    "SELECT indexname FROM pg_indexes WHERE schemaname = current_schema() AND tablename = ? "
    "ORDER BY indexname"
)
# Check and foreign-key constraints (a key's constraint is renamed with its index).
_POSTGRES_CONSTRAINTS = (
    "SELECT c.conname FROM pg_constraint c JOIN pg_class t ON t.oid = c.conrelid "
    "WHERE t.relnamespace = to_regnamespace(current_schema()) AND t.relname = ? "
    "AND c.contype IN ('c', 'f') ORDER BY c.conname"
)
_POSTGRES_HAS_SEQUENCE = (
    "SELECT 1 FROM pg_sequences WHERE schemaname = current_schema() AND sequencename = ?"
)


def has_table(tx: Tx, dialect: str, name: str) -> bool:
    sql = _POSTGRES_HAS_TABLE if dialect == "postgres" else _SQLITE_HAS_TABLE
    return tx.one(sql, (name,)) is not None


def v2_recorded(tx: Tx, dialect: str) -> set[int] | None:
    """The versions a v2 database of ours recorded, or None when this is not one (it has
    ackledger's own bookkeeping already, or none, or a ``schema_migrations`` of another
    tool)."""
    if has_table(tx, dialect, MIGRATIONS) or not has_table(tx, dialect, V2_MIGRATIONS):
        return None
    columns_sql = _POSTGRES_COLUMNS if dialect == "postgres" else _SQLITE_COLUMNS
    columns = {str(row[0]) for row in tx.execute(columns_sql, (V2_MIGRATIONS,))}
    if columns != {"version", "name", "applied_at"}:
        return None
    ours = {(version, name) for version, name, _ in migrations(dialect, chain="v2")}
    rows = {
        (int(version), str(name))
        for version, name in tx.execute(f"SELECT version, name FROM {V2_MIGRATIONS}")
    }
    first = min(ours)
    if first not in rows or not rows <= ours:
        return None
    return {version for version, _ in rows}


def adopt(backend: Backend) -> int:
    """Rename a v2 database of ours in place (see the module's note); returns how many v2
    migrations it lacked and was given first. Nothing is done to any other database."""
    with backend.read() as tx:
        recorded = v2_recorded(tx, backend.dialect)
    if recorded is None:
        return 0
    applied = apply_chain(backend, migrations(backend.dialect, chain="v2"), V2_MIGRATIONS)
    with backend.write() as tx:
        backend.lock_schema(tx)
        # Another process may have renamed it meanwhile: then this finds nothing to do.
        if v2_recorded(tx, backend.dialect) is None:
            return applied
        rename(tx, backend.dialect)
    return applied


def rename(tx: Tx, dialect: str) -> None:
    """Give a v2 database's objects their prefixed names, inside ``tx``."""
    tables = [PREFIX + name for name in V2_TABLES if has_table(tx, dialect, name)]
    for table in tables:
        tx.execute(f"ALTER TABLE {table.removeprefix(PREFIX)} RENAME TO {table}")
    tx.execute(f"ALTER TABLE {V2_MIGRATIONS} RENAME TO {MIGRATIONS}")
    renames = _postgres_renames if dialect == "postgres" else _sqlite_renames
    for statement in renames(tx, [*tables, MIGRATIONS]):
        tx.execute(statement)


def _sqlite_renames(tx: Tx, tables: list[str]) -> list[str]:
    # SQLite renames neither an index nor a trigger: each is made again under its new name
    # from its stored text, in which the table renames have already put the new names.
    found: list[str] = []
    for table in tables:
        for row in tx.execute(_SQLITE_INDEXES_AND_TRIGGERS, (table,)):
            kind, name, sql = str(row[0]).upper(), str(row[1]), str(row[2])
            if name.startswith(PREFIX):
                continue
            head = f"CREATE {'UNIQUE ' if sql.startswith('CREATE UNIQUE') else ''}{kind} "
            if not sql.startswith(head + name + " "):
                raise RuntimeError(f"unexpected definition of {kind.lower()} {name}: {sql!r}")
            found += [f"DROP {kind} {name}", head + PREFIX + sql[len(head) :]]
    return found


def _postgres_renames(tx: Tx, tables: list[str]) -> list[str]:
    # An index that holds a key renames its constraint with it; check and foreign-key
    # constraints are renamed on their own. A renamed table keeps its sequences' old names,
    # so they are renamed too.
    found: list[str] = []
    for table in tables:
        for (name,) in tx.execute(_POSTGRES_INDEXES, (table,)):
            if not str(name).startswith(PREFIX):
                # The bookkeeping's key is the one of schema_migrations: the same prefix.
                found.append(f"ALTER INDEX {name} RENAME TO {PREFIX}{name}")
        for (name,) in tx.execute(_POSTGRES_CONSTRAINTS, (table,)):
            if not str(name).startswith(PREFIX):
                found.append(f"ALTER TABLE {table} RENAME CONSTRAINT {name} TO {PREFIX}{name}")
    for name in V2_SEQUENCES:
        if tx.one(_POSTGRES_HAS_SEQUENCE, (name,)) is not None:
            found.append(f"ALTER SEQUENCE {name} RENAME TO {PREFIX}{name}")
    return found
