"""Bring a database's schema up to date, say where it stands, or print the SQL that would.

Opening a database through the library migrates it too; this is for a deployment that does
it once, up front (an init container, a release step), before any service starts, or whose
own migration tool (Alembic, Django) owns every schema change (``schema_script``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from . import open_backend
from .base import (
    MIGRATIONS,
    MIGRATIONS_TABLE,
    migrate,
    migrations,
    schema_versions,
    split_statements,
)
from .plugin_tables import plugin_statements

DIALECTS = ("sqlite", "postgres")


@dataclass(frozen=True)
class SchemaState:
    target: str  #: the database as shown to people (never with its password)
    dialect: str
    applied: int  #: migrations applied by this run
    version: int  #: the newest recorded, 0 for none
    migrations: list[str]  #: every recorded migration's name, in version order
    #: Recorded migrations this version does not ship: a newer ackledger migrated the database.
    unknown: list[str]

    def figures(self) -> dict[str, Any]:
        """What ``migrate --json`` prints."""
        return {
            "target": self.target,
            "dialect": self.dialect,
            "applied": self.applied,
            "version": self.version,
            "migrations": self.migrations,
        }

    def text(self) -> str:
        return (
            f"{self.target}: applied {self.applied} migration(s); "
            f"schema at version {self.version} ({', '.join(self.migrations)})"
        )


def upgrade_schema(
    target: str, synchronous: str = "FULL", *, plugin_types: Sequence[str] = ()
) -> SchemaState:
    """Apply the migrations ``target`` lacks (a SQLite file is created if missing), and make
    the tables of the plug-ins of ``plugin_types`` (``store.plugin_tables``)."""
    backend = open_backend(target, synchronous=synchronous, migrate_schema=False)
    try:
        applied = migrate(backend)
        for type_name in plugin_types:
            backend.ensure_plugin(type_name)
        versions = schema_versions(backend)
    finally:
        backend.close()
    known = {version for version, _, _ in migrations(backend.dialect)}
    return SchemaState(
        target=backend.location,
        dialect=backend.dialect,
        applied=applied,
        version=versions[-1][0] if versions else 0,
        migrations=[name for _, name in versions],
        unknown=[name for version, name in versions if version not in known],
    )


def schema_script(dialect: str, *, plugin_types: Sequence[str] = ()) -> str:
    """The SQL that brings a new, empty database of ``dialect`` to this version's schema, as
    ``migrate`` would, for a migration tool to run; nothing is opened or connected.

    It records every migration in ``ackledger_schema_migrations`` as ``migrate`` does, so ackledger
    opening the database afterwards finds nothing to apply. The statements end in ``;`` and
    hold no transaction control: the tool that runs them wraps them in its own transaction.
    Each row's ``applied_at`` is the database's clock when the row is inserted, not when this
    was printed, so printing it twice gives the same text. The tables of the plug-ins of
    ``plugin_types`` come at the end.
    """
    if dialect not in DIALECTS:
        raise ValueError(f"dialect: must be one of {', '.join(DIALECTS)}, got {dialect!r}")
    clock = _clock(dialect)
    found = migrations(dialect)
    names = [name for _, name, _ in found]
    lines = [
        f"-- The ackledger schema for a new {dialect} database, version {found[-1][0]}",
        f"-- (migrations {names[0]} to {names[-1]}), as `ackledger migrate` makes it.",
        "-- Run it once, in one transaction, on a database without ackledger tables.",
        "",
        f"{MIGRATIONS_TABLE};",
    ]
    for version, name, script in found:
        lines += ["", f"-- {name}"]
        for statement in split_statements(script):
            lines.append(_ended(statement))
        lines.append(
            f"INSERT INTO {MIGRATIONS} (version, name, applied_at) "
            f"VALUES ({version}, {_literal(name)}, {clock});"
        )
    for type_name in plugin_types:
        lines += ["", f"-- the tables of the plug-in of {type_name} (its own, not ackledger's)"]
        lines += [_ended(statement) for statement in plugin_statements(type_name, dialect)]
    return "\n".join(lines) + "\n"


def _ended(statement: str) -> str:
    return statement if statement.rstrip().endswith(";") else f"{statement};"


def _clock(dialect: str) -> str:
    if dialect == "postgres":
        from .postgres.queries import CLOCK as POSTGRES_CLOCK

        return POSTGRES_CLOCK
    from .sqlite.queries import CLOCK as SQLITE_CLOCK

    return SQLITE_CLOCK


def _literal(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"
