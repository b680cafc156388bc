"""A plug-in's own tables (``plugins.Plugin.tables``), made where its calls or events reach.

They belong to the plug-in, not to ackledger's core, so opening an outbox, an inbox or a
ledger never makes them; the plug-in's first call or event does (``Backend.ensure_plugin``),
and ``ackledger migrate --lab``. Every statement creates only what is missing and runs under
the schema lock, so any number of processes may run it at once, any number of times.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .. import plugins
from .base import split_statements

if TYPE_CHECKING:
    from .base import Backend


def plugin_statements(type_name: str, dialect: str) -> list[str]:
    """The statements that make the tables of the plug-in of ``type_name`` (none for a type
    without a plug-in or a plug-in without tables)."""
    script = plugins.tables_script(type_name, dialect)
    return [] if script is None else list(split_statements(script))


def migrate_plugin(backend: Backend, type_name: str) -> None:
    """Create the plug-in's tables where they are missing, in one write transaction."""
    statements = plugin_statements(type_name, backend.dialect)
    if not statements:
        return
    with backend.write() as tx:
        backend.lock_schema(tx)
        for statement in statements:
            tx.execute(statement)
