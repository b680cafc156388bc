"""The lab's own migration: the reference domain's tables ``orders`` and ``inventory``.

They belong to the warehouse lab, not to ackledger's core, so opening an outbox, an inbox or a
ledger never makes them; the lab's calls do (``Backend.ensure_lab``), and ``ackledger migrate
--lab``. Every statement is ``CREATE TABLE IF NOT EXISTS``, run under the schema lock, so any
number of processes may run it at once, any number of times.
"""

from __future__ import annotations

from importlib import resources
from typing import TYPE_CHECKING

from .base import split_statements

if TYPE_CHECKING:
    from .base import Backend


def lab_script(dialect: str) -> str:
    """The lab's statements for ``dialect`` (``migrations/<dialect>/lab.sql``)."""
    return (
        resources.files("ackledger.store")
        .joinpath("migrations", dialect, "lab.sql")
        .read_text(encoding="utf-8")
    )


def migrate_lab(backend: Backend) -> None:
    """Create the lab's tables where they are missing, in one write transaction."""
    with backend.write() as tx:
        backend.lock_schema(tx)
        for statement in split_statements(lab_script(backend.dialect)):
            tx.execute(statement)
