"""Which database a name reaches: ackledger's target (``--db``) or a SQLAlchemy URL.

Two names of one database (``localhost`` and ``127.0.0.1``, a relative and an absolute path,
``postgresql+psycopg://`` and ``postgresql://``) give equal places; a session on another
database is then refused before a receipt is written where the handler's rows are not.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

from . import is_postgres

__all__ = ["Place", "check_same_place", "place_of_target", "place_of_url"]


@dataclass(frozen=True)
class Place:
    """A database, as equal for every name of it; printed as ``shown``."""

    identity: tuple[str, ...]
    shown: str = field(compare=False)

    def __str__(self) -> str:
        return self.shown


def place_of_target(target: str | os.PathLike[str]) -> Place:
    """The database a target as ackledger takes it (``--db``) reaches."""
    if is_postgres(target):
        parts = urlsplit(target)
        socket_host = parse_qs(parts.query).get("host", [""])[0]
        return _postgres(socket_host, parts.hostname, parts.port, parts.path.lstrip("/"))
    return _sqlite(os.fspath(target))


def place_of_url(url: Any) -> Place:
    """The database a SQLAlchemy ``URL`` reaches, whatever its driver."""
    backend = url.get_backend_name()
    if backend == "sqlite":
        return _sqlite(url.database or "")
    if backend == "postgresql":
        return _postgres(url.query.get("host", ""), url.host, url.port, url.database or "")
    shown = url.render_as_string(hide_password=True)
    return Place((backend, shown), f"{backend} ({shown})")


def check_same_place(found: Place, what: str, target: str | os.PathLike[str]) -> None:
    """Refuse ``found``, the database ``what`` reaches, unless it is ``target``'s."""
    expected = place_of_target(target)
    if found != expected:
        raise ValueError(
            f"{what} reaches another database than --db: {found}, not {expected}; the "
            "receipt and the handler's rows must commit together"
        )


def _sqlite(path: str) -> Place:
    resolved = str(Path(path).resolve())
    return Place(("sqlite", resolved), f"SQLite file {resolved}")


def _postgres(socket_host: str, host: str | None, port: int | None, database: str) -> Place:
    # A Unix socket directory names the server; otherwise the host, loopback's names as one.
    where = socket_host or _loopback(host or "")
    port_text = str(port or 5432)
    shown = f"PostgreSQL database {database!r} on {where}:{port_text}"
    return Place(("postgres", where, port_text, database), shown)


def _loopback(host: str) -> str:
    host = host.lower().strip("[]")
    return "127.0.0.1" if host in ("", "localhost", "::1") else host
