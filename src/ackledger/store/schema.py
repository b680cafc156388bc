"""Bring a database's schema up to date, and say where it stands.

Opening a database through the library migrates it too; this is for a deployment that does
it once, up front (an init container, a release step), before any service starts.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from . import open_backend
from .base import migrate, migrations, schema_versions


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


def upgrade_schema(target: str, synchronous: str = "FULL") -> SchemaState:
    """Apply the migrations ``target`` lacks (a SQLite file is created if missing)."""
    backend = open_backend(target, synchronous=synchronous, migrate_schema=False)
    try:
        applied = migrate(backend)
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
